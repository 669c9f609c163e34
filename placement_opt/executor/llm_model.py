"""A LLaMA-style decoder for the LLM executor, tensor-parallel over torch.distributed.

Built from an instance's :class:`~placement_opt.model.Architecture`: token embedding,
``layers`` blocks of RMSNorm -> grouped-query attention with rotary positions (RoPE) ->
RMSNorm -> SwiGLU MLP (a plain GELU MLP when the architecture has no gate), a final RMSNorm
and an LM head (the embedding when tied). Rotary positions are used even where the
architecture declares learned ones (their table is under 0.1% of the weights).

Tensor parallelism (Megatron style): the QKV and the gate/up matrices are column-parallel
(each rank holds ``heads / tp`` query heads, ``kv_heads / tp`` KV heads and ``ffn / tp``
MLP columns), the attention output and down matrices row-parallel, each followed by one
all-reduce in the TP group; embedding, norms and LM head are replicated, so every rank ends
with the same logits and picks the same greedy token.

Weights are seeded: every full matrix is drawn from its own generator (the model's seed, the
layer and the matrix) and each rank keeps its slice, so a TP-2 model holds exactly the
halves of the TP-1 model's matrices and computes the same function.

Fused weights: Q, K and V are one matrix (``wqkv``: this rank's query rows, then its K rows,
then its V rows, each cut from the full matrix at the rank's heads) and gate/up one matrix
(``up``: this rank's gate rows, then its up rows), so each is one GEMM; the cut is taken per
part before fusing, so the column-parallel split stays consistent across ranks.

Attention reads and writes the paged KV pool of :mod:`.llm_kvcache`: a prefill computes the
whole context (a recomputed one included; causal SDPA, whose right padding only padded
queries see) and scatters its K and V into the request's blocks. A decode step has two
implementations (``attention``):

* ``paged`` (GPUs with Triton, :mod:`.llm_triton`): per layer RMSNorm, the QKV GEMM, one
  kernel that rotates Q and K and writes the new K and V into the pool, one paged-attention
  kernel that reads each request's blocks in place (plus a combine kernel when a long
  context is split over programs), the output GEMM with the residual, RMSNorm, the gate/up
  GEMM, one SwiGLU kernel, the down GEMM with the residual: 9-10 kernels a layer.
* ``gather`` (CPUs, no Triton, or a kernel that failed on the device): writes the new token's
  K and V, gathers each request's blocks into one contiguous copy and attends with one
  batched GEMM per side per KV head group and a masked softmax (about 30 operators a layer).

Both compute once per step what the layers share (rotary angles, KV unit ids, the mask or
the lengths) and add the residual inside the output GEMMs (``addmm``, TP 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Optional, Protocol

import torch
import torch.nn.functional as F

from placement_opt.errors import InputError
from placement_opt.model import Architecture

ROPE_BASE = 10000.0
NORM_EPS = 1e-5


def check_llm_supported(arch: Architecture, tp: int, field: str) -> None:
    """Raise InputError when the decoder cannot be built for ``arch`` split over ``tp`` GPUs."""
    kvh = arch.kv_heads or arch.heads
    if arch.moe_experts:
        raise InputError("the LLM executor builds dense decoders; this one has experts", f"{field}.moe_experts")
    if arch.heads % kvh:
        raise InputError(f"heads {arch.heads} is not a multiple of kv_heads {kvh}", f"{field}.kv_heads")
    if arch.heads % tp or kvh % tp or arch.ffn_hidden % tp:
        raise InputError(f"heads {arch.heads}, kv_heads {kvh} and ffn {arch.ffn_hidden} must divide by the mesh's "
                         f"{tp} GPUs", field)
    if (arch.hidden // arch.heads) % 2:
        raise InputError("rotary positions need an even head size", f"{field}.heads")


@dataclass(frozen=True)
class Shape:
    """The per-rank sizes of one decoder shard."""

    hidden: int
    head_dim: int
    heads: int  # query heads on this rank
    kv_heads: int  # KV heads on this rank
    ffn: int  # MLP columns on this rank
    gated: bool
    vocab: int
    layers: int

    @classmethod
    def of(cls, arch: Architecture, tp: int) -> "Shape":
        kvh = arch.kv_heads or arch.heads
        return cls(hidden=arch.hidden, head_dim=arch.hidden // arch.heads, heads=arch.heads // tp,
                   kv_heads=kvh // tp, ffn=arch.ffn_hidden // tp, gated=arch.gated_mlp, vocab=arch.vocab,
                   layers=arch.layers)


ATTENTION_CHOICES = ("auto", "paged", "gather")


def resolve_attention(choice: str, device: torch.device, head_dim: int) -> str:
    """The decode attention to use: ``paged`` (Triton kernels over the block table) or
    ``gather``; ``auto`` is ``paged`` on GPUs where Triton serves the head size."""
    if choice not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {ATTENTION_CHOICES}, not {choice!r}")
    if choice == "gather" or (choice == "auto" and device.type != "cuda"):
        return "gather"
    from placement_opt.executor import llm_triton  # imports Triton: only where it may serve

    if choice == "auto":
        return "paged" if llm_triton.supported(head_dim) else "gather"
    if choice == "paged" and not llm_triton.supported(head_dim):
        raise ValueError(f"paged attention needs Triton and a head size of at least 16 (head size {head_dim})")
    return choice


class _Seeded:
    """Full matrices from per-matrix generators; the caller keeps its rank's slice."""

    def __init__(self, seed: int, device: torch.device, dtype: torch.dtype):
        self.seed, self.device, self.dtype = seed, device, dtype
        self.count = 0

    def matrix(self, rows: int, cols: int) -> torch.Tensor:
        """The next ``rows x cols`` matrix, N(0, 1/cols) (activations keep their scale)."""
        self.count += 1
        gen = torch.Generator(device=self.device)
        gen.manual_seed((self.seed * 1_000_003 + self.count) % (2 ** 63))
        w = torch.randn(rows, cols, generator=gen, device=self.device, dtype=torch.float32)
        return w.mul_(1.0 / math.sqrt(cols))


class DecoderShard:
    """One rank's shard of the decoder; see the module docstring."""

    def __init__(self, arch: Architecture, seed: int, tp_rank: int, tp: int, group: Any, device: torch.device,
                 dtype: torch.dtype, attention: str = "auto"):
        self.arch, self.shape = arch, Shape.of(arch, tp)
        self.attention = resolve_attention(attention, device, arch.hidden // arch.heads)
        self.tp, self.group, self.device, self.dtype = tp, group, device, dtype
        s, src = self.shape, _Seeded(seed, device, dtype)
        full_heads, full_kv, full_ffn = s.heads * tp, s.kv_heads * tp, s.ffn * tp

        def rows(w: torch.Tensor, n: int) -> torch.Tensor:
            return w[tp_rank * n:(tp_rank + 1) * n]

        def cols(w: torch.Tensor, n: int) -> torch.Tensor:
            return w[:, tp_rank * n:(tp_rank + 1) * n]

        h, hd = s.hidden, s.head_dim
        self.embed = src.matrix(s.vocab, h).mul_(math.sqrt(h)).to(dtype)
        self.layers: List[dict] = []
        for _ in range(s.layers):
            wq, wk, wv = src.matrix(full_heads * hd, h), src.matrix(full_kv * hd, h), src.matrix(full_kv * hd, h)
            wo = src.matrix(h, full_heads * hd)
            up = src.matrix(full_ffn, h)
            gate = src.matrix(full_ffn, h) if s.gated else None
            down = src.matrix(h, full_ffn)
            layer = {"attn_norm": torch.ones(h, device=device, dtype=dtype),
                     "mlp_norm": torch.ones(h, device=device, dtype=dtype),
                     "wqkv": torch.cat([rows(wq, s.heads * hd), rows(wk, s.kv_heads * hd),
                                        rows(wv, s.kv_heads * hd)]).to(dtype),
                     "wo": cols(wo, s.heads * hd).contiguous().to(dtype),
                     "up": (torch.cat([rows(gate, s.ffn), rows(up, s.ffn)]) if gate is not None
                            else rows(up, s.ffn)).contiguous().to(dtype),
                     "down": cols(down, s.ffn).contiguous().to(dtype)}
            self.layers.append(layer)
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = self.embed if arch.tied_embeddings else src.matrix(s.vocab, h).to(dtype)
        inv = 1.0 / (ROPE_BASE ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
        self.inv_freq = inv

    def weight_bytes(self) -> int:
        """Bytes of the weights this rank holds."""
        tensors = [self.embed, self.final_norm] + [t for layer in self.layers for t in layer.values()]
        if self.lm_head is not self.embed:
            tensors.append(self.lm_head)
        return sum(t.numel() * t.element_size() for t in tensors)

    # ------------------------------------------------------------ building blocks

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            import torch.distributed as dist
            dist.all_reduce(x, group=self.group)
        return x

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, NORM_EPS)

    def _angles(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the rotary angles of ``pos`` [..., tokens], full head width
        [..., tokens, 1, hd] (both halves), computed once per forward for every layer."""
        ang = pos.to(torch.float32).unsqueeze(-1) * self.inv_freq  # [..., tokens, hd/2]
        ang = torch.cat((ang, ang), dim=-1).unsqueeze(-2)
        return ang.cos(), ang.sin()

    def _rope(self, x: torch.Tensor, rot: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Rotate ``x`` [..., tokens, heads, hd] by the angles ``rot`` (:meth:`_angles`), in fp32."""
        cos, sin = rot
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        return torch.addcmul(xf * cos, torch.cat((-x2, x1), dim=-1), sin).to(x.dtype)

    def _residual_proj(self, x: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x + all_reduce(a @ w.T)``: on one GPU one GEMM that adds the residual."""
        if self.tp > 1:
            return x + self._all_reduce(a @ w.t())
        out = torch.addmm(x.reshape(-1, x.shape[-1]), a.reshape(-1, a.shape[-1]), w.t())
        return out.view(x.shape)

    def _mlp_block(self, layer: dict, x: torch.Tensor) -> torch.Tensor:
        """``x`` plus the MLP of its normalised self."""
        y = self._rms(x, layer["mlp_norm"]) @ layer["up"].t()
        if self.shape.gated:
            g, u = y.chunk(2, dim=-1)
            y = F.silu(g) * u
        else:
            y = F.gelu(y)
        return self._residual_proj(x, y, layer["down"])

    def _qkv(self, layer: dict, x: torch.Tensor,
             rot: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q, K, V of ``x`` [..., tokens, hidden] as [..., tokens, heads, hd]; Q and K rotated
        together (they are adjacent columns of the fused QKV product)."""
        s = self.shape
        qkv = self._rms(x, layer["attn_norm"]) @ layer["wqkv"].t()
        lead = x.shape[:-1]
        qk = self._rope(qkv[..., :(s.heads + s.kv_heads) * s.head_dim].view(*lead, s.heads + s.kv_heads, s.head_dim),
                        rot)
        v = qkv[..., (s.heads + s.kv_heads) * s.head_dim:].view(*lead, s.kv_heads, s.head_dim)
        return qk[..., :s.heads, :], qk[..., s.heads:, :], v

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 logits; the product runs in the weights' dtype (no fp32 copy of the LM head)."""
        return (self._rms(x, self.final_norm) @ self.lm_head.t()).float()

    # ------------------------------------------------------------ whole sequences

    def forward_full(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [b, L, vocab] of whole sequences ``tokens`` [b, L] (no cache; the reference)."""
        b, n = tokens.shape
        rot = self._angles(torch.arange(n, device=self.device).expand(b, n))
        x = self.embed[tokens]
        for layer in self.layers:
            q, k, v = self._qkv(layer, x, rot)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=True)
            x = self._residual_proj(x, a.transpose(1, 2).reshape(b, n, -1), layer["wo"])
            x = self._mlp_block(layer, x)
        return self._logits(x)

    def prefill(self, tokens: torch.Tensor, lengths: torch.Tensor, kv: Optional["PrefillSink"]) -> torch.Tensor:
        """Prefill right-padded prompts ``tokens`` [b, L] of ``lengths`` [b]; writes their K and
        V through ``kv`` (if given) and returns the logits at each prompt's last token [b, vocab].
        Causal attention needs no padding mask: a valid query only sees earlier, valid keys."""
        b, n = tokens.shape
        rot = self._angles(torch.arange(n, device=self.device).expand(b, n))
        if kv is not None:
            kv.begin()
        x = self.embed[tokens]
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, rot)
            if kv is not None:
                kv.write_prefill(li, k, v)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               is_causal=True, enable_gqa=True)
            x = self._residual_proj(x, a.transpose(1, 2).reshape(b, n, -1), layer["wo"])
            x = self._mlp_block(layer, x)
        last = x[torch.arange(b, device=self.device), lengths - 1]
        return self._logits(last)

    def decode(self, tokens: torch.Tensor, pos: torch.Tensor, kv: "DecodeSink") -> torch.Tensor:
        """One decode step of ``tokens`` [B] at positions ``pos`` [B] over the paged cache
        ``kv``; returns the logits [B, vocab] (``attention`` picks the implementation)."""
        if self.attention == "paged":
            return self._decode_paged(tokens, pos, kv)
        return self._decode_gather(tokens, pos, kv)

    def _decode_paged(self, tokens: torch.Tensor, pos: torch.Tensor, kv: "DecodeSink") -> torch.Tensor:
        """The decode step with the Triton kernels (module docstring): K and V read in place."""
        from placement_opt.executor import llm_triton as kern

        s = self.shape
        B = tokens.shape[0]
        kv.begin(paged=True)
        ang = pos.to(torch.float32).unsqueeze(-1) * self.inv_freq  # [B, hd/2], shared by the layers
        cos, sin = ang.cos(), ang.sin()
        x = self.embed[tokens]  # [B, h]
        for li, layer in enumerate(self.layers):
            qkv = kern.rms_norm(x, layer["attn_norm"], NORM_EPS) @ layer["wqkv"].t()
            q = kern.rope_write(qkv, cos, sin, s.heads, s.kv_heads, kv.pool_data, kv.write_units[li], kv.new_offs)
            a = kern.paged_attention(q, kv.pool_data, kv.read_units[li], kv.lengths, s.kv_heads)
            x = self._residual_proj(x, a.view(B, -1), layer["wo"])
            y = kern.rms_norm(x, layer["mlp_norm"], NORM_EPS) @ layer["up"].t()
            y = kern.silu_mul(y) if s.gated else F.gelu(y)
            x = self._residual_proj(x, y, layer["down"])
        return self._logits(x)

    def _decode_gather(self, tokens: torch.Tensor, pos: torch.Tensor, kv: "DecodeSink") -> torch.Tensor:
        """The decode step without Triton: each request's blocks gathered, then two batched GEMMs."""
        s = self.shape
        B, group = tokens.shape[0], s.heads // s.kv_heads
        kv.begin()
        rot = self._angles(pos)  # [B, 1, hd]
        x = self.embed[tokens]  # [B, h]
        scale = 1.0 / math.sqrt(s.head_dim)
        invalid = ~kv.mask
        for li, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, rot)  # q [B, heads, hd], k and v [B, kvh, hd]
            kv.write_token(li, k, v)
            keys, values = kv.gather(li)  # [B, kvh, M*block, hd]
            # query heads of one KV head side by side: [B, kvh, group, hd] (head h reads KV head h // group)
            scores = (q * scale).view(B, s.kv_heads, group, s.head_dim) @ keys.transpose(-1, -2)
            probs = scores.masked_fill_(invalid, float("-inf")).softmax(-1, dtype=torch.float32).to(x.dtype)
            x = self._residual_proj(x, (probs @ values).view(B, -1), layer["wo"])
            x = self._mlp_block(layer, x)
        return self._logits(x)


class PrefillSink(Protocol):
    """Where a prefill's K and V go (built by :mod:`.llm_kvcache`)."""

    def begin(self) -> None:
        """Prepare what every layer reads (called first, inside a captured graph)."""

    def write_prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the prompts' K and V ([b, L, kv_heads, hd]; padding goes to scratch)."""


class DecodeSink(Protocol):
    """The paged cache as one decode step sees it (built by :mod:`.llm_kvcache`): where the
    new token's K and V go, every request's blocks and its valid positions (a mask for the
    gather path; lengths, unit tables and the pool itself for the paged kernels)."""

    mask: torch.Tensor
    lengths: torch.Tensor
    pool_data: torch.Tensor
    read_units: torch.Tensor
    write_units: torch.Tensor
    new_offs: torch.Tensor

    def begin(self, paged: bool = False) -> None:
        """Prepare what every layer of the step reads (called first, inside a captured graph)."""

    def write_token(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the new token's K and V ([B, kv_heads, hd])."""

    def gather(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's K and V of ``layer`` as [B, kv_heads, positions, hd]."""
        ...
