"""A real PyTorch transformer stage built from an :class:`~placement_opt.model.Architecture`.

A BERT/GPT-style pre-LayerNorm encoder: token and position embeddings (first stage only),
``layers`` blocks of multi-head (or grouped-query) attention and a GELU MLP, and a final
LayerNorm (last stage only). Attention's Q/K/V and the MLP's first linear are
column-parallel and the output projections row-parallel (one all-reduce each in the
tensor-parallel group), so a stage of ``tp`` ranks holds ``1/tp`` of every block.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn

from placement_opt.errors import InputError
from placement_opt.model import Architecture
from placement_opt.executor.layers import ColumnParallelLinear, FullTensorSource, RowParallelLinear


def check_supported(arch: Architecture, tp: int, field: str) -> None:
    """Reject what the executor cannot run, naming the field."""
    if arch.moe_experts:
        raise InputError("the executor runs dense transformers only (moe_experts must be 0)",
                         f"{field}.moe_experts")
    if arch.gated_mlp or not arch.learned_positions:
        key = "gated_mlp" if arch.gated_mlp else "learned_positions"
        raise InputError("the executor runs BERT/GPT-style layers only (a GELU MLP and learned positions)",
                         f"{field}.{key}")
    kvh = arch.kv_heads or arch.heads
    if arch.heads % kvh:
        raise InputError(f"heads {arch.heads} is not a multiple of kv_heads {kvh}", f"{field}.kv_heads")
    if arch.heads % tp or kvh % tp or arch.ffn_hidden % tp:
        raise InputError(f"heads ({arch.heads}), kv heads ({kvh}) and the MLP width ({arch.ffn_hidden}) must "
                         f"all divide by the tensor-parallel degree {tp}", field)


def compute_dtype(arch: Architecture, device: torch.device) -> torch.dtype:
    """fp32 on CPU; on GPU the architecture's half type (bf16 if asked, else fp16)."""
    if device.type == "cpu":
        return torch.float32
    return torch.bfloat16 if arch.dtype == "bf16" else torch.float16


class Attention(nn.Module):
    def __init__(self, source: FullTensorSource, prefix: str, arch: Architecture, tp_rank: int, tp_size: int,
                 tp_group: Optional[object], dtype: torch.dtype, device: torch.device):
        super().__init__()
        h = arch.hidden
        self.head_dim = h // arch.heads
        kvh = arch.kv_heads or arch.heads
        self.local_heads = arch.heads // tp_size
        self.local_kv_heads = kvh // tp_size
        kv_rows = kvh * self.head_dim
        blocks = [(f"{prefix}.q", h), (f"{prefix}.k", kv_rows), (f"{prefix}.v", kv_rows)]
        self.qkv = ColumnParallelLinear(source, blocks, h, tp_rank, tp_size, dtype, device)
        self.out = RowParallelLinear(source, f"{prefix}.out", h, h, tp_rank, tp_size, tp_group, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q_width = self.local_heads * self.head_dim
        kv_width = self.local_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([q_width, kv_width, kv_width], dim=-1)
        q = q.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.local_kv_heads, self.head_dim).transpose(1, 2)
        if self.local_kv_heads != self.local_heads:
            rep = self.local_heads // self.local_kv_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(b, s, q_width))


class MLP(nn.Module):
    def __init__(self, source: FullTensorSource, prefix: str, arch: Architecture, tp_rank: int, tp_size: int,
                 tp_group: Optional[object], dtype: torch.dtype, device: torch.device):
        super().__init__()
        f = arch.ffn_hidden
        self.fc1 = ColumnParallelLinear(source, [(f"{prefix}.fc1", f)], arch.hidden, tp_rank, tp_size, dtype, device)
        self.fc2 = RowParallelLinear(source, f"{prefix}.fc2", f, arch.hidden, tp_rank, tp_size, tp_group, dtype,
                                     device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


def _layer_norm(source: FullTensorSource, name: str, h: int, dtype: torch.dtype, device: torch.device) -> nn.LayerNorm:
    """A frozen LayerNorm of width ``h`` with weights ``name.weight`` and ``name.bias`` from ``source``."""
    norm = nn.LayerNorm(h, device=device, dtype=dtype)
    with torch.no_grad():
        norm.weight.copy_(source(f"{name}.weight", (h,)))
        norm.bias.copy_(source(f"{name}.bias", (h,)))
    norm.requires_grad_(False)
    return norm


class Block(nn.Module):
    def __init__(self, source: FullTensorSource, index: int, arch: Architecture, tp_rank: int, tp_size: int,
                 tp_group: Optional[object], dtype: torch.dtype, device: torch.device):
        super().__init__()
        p = f"layers.{index}"
        self.attn_norm = _layer_norm(source, f"{p}.attn_norm", arch.hidden, dtype, device)
        self.attn = Attention(source, f"{p}.attn", arch, tp_rank, tp_size, tp_group, dtype, device)
        self.mlp_norm = _layer_norm(source, f"{p}.mlp_norm", arch.hidden, dtype, device)
        self.mlp = MLP(source, f"{p}.mlp", arch, tp_rank, tp_size, tp_group, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Embedding(nn.Module):
    """Token plus learned position embeddings (replicated on every TP rank of the first stage)."""

    def __init__(self, source: FullTensorSource, arch: Architecture, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.tokens = nn.Parameter(
            source("embed.tokens.weight", (arch.vocab, arch.hidden)).to(device=device, dtype=dtype),
            requires_grad=False)
        self.positions = nn.Parameter(
            source("embed.positions.weight", (arch.seq_len, arch.hidden)).to(device=device, dtype=dtype),
            requires_grad=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.tokens[tokens] + self.positions[: tokens.shape[1]]


class TransformerStage(nn.Module):
    """Layers ``[start, end)`` of the model, with the embedding if ``start == 0`` and the final norm if last."""

    def __init__(self, arch: Architecture, layer_range: Tuple[int, int], source: FullTensorSource,
                 tp_rank: int = 0, tp_size: int = 1, tp_group: Optional[object] = None,
                 device: torch.device = torch.device("cpu")):
        super().__init__()
        start, end = layer_range
        self.arch = arch
        self.first = start == 0
        self.last = end == arch.layers
        dtype = compute_dtype(arch, device)
        self.dtype = dtype
        self.embed = Embedding(source, arch, dtype, device) if self.first else None
        self.blocks = nn.ModuleList(Block(source, i, arch, tp_rank, tp_size, tp_group, dtype, device)
                                    for i in range(start, end))
        self.final_norm = _layer_norm(source, "final_norm", arch.hidden, dtype, device) if self.last else None

    @torch.inference_mode()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x

    def weight_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())


def request_tokens(arch: Architecture, batch: int, seed: int, device: torch.device) -> torch.Tensor:
    """The fixed input of a request: ``batch`` x ``seq_len`` token ids drawn from ``seed``."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return torch.randint(0, arch.vocab, (batch, arch.seq_len), generator=gen).to(device)
