"""Operator graphs of a transformer's layers, with per-token costs.

A model becomes a chain of *units* for the inter-op DP: the embedding, ``layers``
transformer layers (dense or mixture-of-experts) and the LM head. Each unit is a small
operator graph; every operator records its FLOPs, bytes moved and output activation
bytes *per token* (so a batch of ``b`` requests of ``seq_len`` tokens costs ``b x
seq_len`` times as much) plus its weight bytes, and which sharding it admits:

* ``matmul`` ``[K] x [K, N]``: replicated, column split (``N``), row split (``K``, the
  contraction, resolved by an all-reduce of the output);
* ``attention`` core: replicated or split by heads;
* ``embedding``: replicated, vocabulary split (all-reduce) or hidden split;
* ``experts`` (MoE up/down projections): replicated, split inside every expert like a
  matmul, or split by expert (expert parallelism);
* ``norm``: replicated only (it needs the whole hidden vector).

Elementwise operators (bias, activation, residual add) are *followers*: they are merged
into their producer by :func:`merge_followers` and take its output sharding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Tuple

from placement_opt.model import Architecture


@dataclass(frozen=True)
class Operator:
    """One operator of a layer graph; costs are per token unless named ``weight``."""

    name: str
    kind: str  # matmul | attention | norm | embedding | experts_up | experts_down | elementwise
    family: str  # cost-model family (costmodel.FAMILIES)
    flops: float
    bytes_moved: float  # activation traffic per token (weights are added once per call)
    weight_bytes: float
    out_bytes: float  # output activation bytes per token
    inputs: Tuple[int, ...] = ()
    split_in: int = 1  # size of the dimension a row split cuts (K, or experts)
    split_out: int = 1  # size of the dimension a column split cuts (N, heads, or hidden)
    experts: int = 0
    follower_flops: float = 0.0  # merged elementwise work, per token
    follower_bytes: float = 0.0

    @property
    def is_follower(self) -> bool:
        return self.kind == "elementwise"


@dataclass(frozen=True)
class LayerGraph:
    """The operators of one unit in topological order (inputs refer to earlier indices)."""

    kind: str  # embedding | transformer | moe | head
    ops: Tuple[Operator, ...]
    out_bytes: float  # activation bytes per token leaving the unit (sent between stages)
    output_replicated: bool = True  # the unit boundary needs a replicated activation


def _matmul(name: str, k: int, n: int, d: int, inputs: Tuple[int, ...], bias: bool = True,
            per_token_factor: float = 1.0) -> Operator:
    """A ``[K] x [K, N]`` matmul of ``d``-byte elements (with an N-wide bias unless ``bias`` is False)."""
    weight = (k * n + (n if bias else 0)) * d
    return Operator(name=name, kind="matmul", family="matmul", flops=2.0 * k * n * per_token_factor,
                    bytes_moved=(k + n) * d * per_token_factor, weight_bytes=weight, out_bytes=n * d,
                    inputs=inputs, split_in=k, split_out=n)


def _norm(name: str, h: int, d: int, inputs: Tuple[int, ...], weight: bool = True) -> Operator:
    """A layer norm over ``h`` features (with scale and shift weights unless ``weight`` is False)."""
    return Operator(name=name, kind="norm", family="norm", flops=8.0 * h, bytes_moved=2.0 * h * d,
                    weight_bytes=(2 * h * d if weight else 0), out_bytes=h * d, inputs=inputs)


def _elementwise(name: str, width: int, d: int, inputs: Tuple[int, ...], reads: int = 2,
                 flops_per: float = 2.0) -> Operator:
    """An elementwise follower reading ``reads`` ``width``-wide tensors and writing one."""
    return Operator(name=name, kind="elementwise", family="elementwise", flops=flops_per * width,
                    bytes_moved=(reads + 1) * width * d, weight_bytes=0.0, out_bytes=width * d, inputs=inputs)


def _attention_block(arch: Architecture, start: int) -> List[Operator]:
    """Operators ln1 .. out-proj + residual of a layer, indices from ``start``."""
    h, d, s = arch.hidden, arch.dtype_bytes, arch.seq_len
    kvh = arch.kv_heads or arch.heads
    hd = h // arch.heads
    qkv_width = h + 2 * kvh * hd
    i = start
    ops = [
        _norm("ln1", h, d, (i - 1,) if i else ()),
        replace(_matmul("qkv", h, qkv_width, d, (i,)), weight_bytes=(h * qkv_width + 3 * h) * d),
        Operator(name="attention", kind="attention", family="attention", flops=4.0 * s * h,
                 bytes_moved=(qkv_width + h) * d, weight_bytes=0.0, out_bytes=h * d, inputs=(i + 1,),
                 split_out=arch.heads if kvh == arch.heads else _gcd(arch.heads, kvh)),
        _matmul("out_proj", h, h, d, (i + 2,)),
        _elementwise("residual1", h, d, (i + 3,)),
    ]
    return ops


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _activation(arch: Architecture, width: int, d: int, inputs: Tuple[int, ...]) -> Operator:
    """The MLP's activation: GELU of the up projection, or (``gated_mlp``) SiLU of the gate
    times the up projection, reading both halves of the fused gate-and-up output."""
    if arch.gated_mlp:
        return _elementwise("swiglu", width, d, inputs, reads=2, flops_per=8.0)
    return _elementwise("gelu", width, d, inputs, reads=1, flops_per=8.0)


def transformer_layer(arch: Architecture, moe: bool = False) -> LayerGraph:
    """One dense (or MoE) transformer layer: attention block then MLP (or experts) block.

    A gated MLP's gate and up matrices form one ``hidden x 2 ffn`` up projection."""
    h, d, f, up = arch.hidden, arch.dtype_bytes, arch.ffn_hidden, arch.mlp_up_width
    ops = _attention_block(arch, 0)
    i = len(ops)
    ops.append(_norm("ln2", h, d, (i - 1,)))
    if not moe:
        ops += [
            _matmul("mlp_up", h, up, d, (i,)),
            _activation(arch, f, d, (i + 1,)),
            _matmul("mlp_down", f, h, d, (i + 2,)),
            _elementwise("residual2", h, d, (i + 3,)),
        ]
    else:
        e, k = arch.moe_experts, min(arch.moe_top_k, arch.moe_experts)
        ops += [
            _matmul("gate", h, e, d, (i,), bias=False),
            _elementwise("top_k", e, d, (i + 1,), reads=1, flops_per=4.0),
            Operator(name="experts_up", kind="experts_up", family="matmul", flops=2.0 * h * up * k,
                     bytes_moved=k * (h + up) * d, weight_bytes=e * (h * up + up) * d, out_bytes=k * up * d,
                     inputs=(i, i + 2), split_in=h, split_out=up, experts=e),  # tokens from ln2, routing from gate
            _activation(arch, k * f, d, (i + 3,)),
            Operator(name="experts_down", kind="experts_down", family="matmul", flops=2.0 * f * h * k,
                     bytes_moved=k * (h + f) * d, weight_bytes=e * (f * h + h) * d, out_bytes=h * d,
                     inputs=(i + 4,), split_in=f, split_out=h, experts=e),
            _elementwise("residual2", h, d, (i + 5,)),
        ]
    return LayerGraph(kind="moe" if moe else "transformer", ops=tuple(ops), out_bytes=h * d)


def embedding_unit(arch: Architecture) -> LayerGraph:
    """Token embedding (vocab x hidden) plus learned positions (seq_len x hidden) if the model has them."""
    h, d = arch.hidden, arch.dtype_bytes
    rows = arch.vocab + (arch.seq_len if arch.learned_positions else 0)
    op = Operator(name="embedding", kind="embedding", family="embedding", flops=h,
                  bytes_moved=3.0 * h * d, weight_bytes=rows * h * d, out_bytes=h * d,
                  split_in=arch.vocab, split_out=h)
    return LayerGraph(kind="embedding", ops=(op,), out_bytes=h * d)


def head_unit(arch: Architecture) -> LayerGraph:
    """Final norm and the LM head (tied to the embedding when both sit in one stage, if ``tied_embeddings``)."""
    h, d = arch.hidden, arch.dtype_bytes
    ops = (_norm("ln_f", h, d, (), weight=False), _matmul("lm_head", h, arch.vocab, d, (0,), bias=False))
    return LayerGraph(kind="head", ops=ops, out_bytes=arch.vocab * d, output_replicated=False)


def model_units(arch: Architecture) -> Tuple[LayerGraph, ...]:
    """The DP chain: embedding, ``arch.layers`` transformer layers, LM head."""
    dense = transformer_layer(arch)
    moe = transformer_layer(arch, moe=True) if arch.moe_experts > 1 else None
    layers: List[LayerGraph] = []
    for layer in range(arch.layers):
        is_moe_layer = layer % arch.moe_every == arch.moe_every - 1
        layers.append(moe if moe is not None and is_moe_layer else dense)
    return (embedding_unit(arch), *layers, head_unit(arch))


def merge_followers(graph: LayerGraph) -> LayerGraph:
    """Fold every elementwise follower into its producer; inputs are re-indexed."""
    merged: list[Operator] = []
    index_of: Dict[int, int] = {}
    for i, op in enumerate(graph.ops):
        if op.is_follower and op.inputs:
            target = index_of[op.inputs[0]]
            prod = merged[target]
            merged[target] = replace(prod, follower_flops=prod.follower_flops + op.flops,
                                     follower_bytes=prod.follower_bytes + op.bytes_moved, out_bytes=op.out_bytes)
            index_of[i] = target
        else:
            index_of[i] = len(merged)
            merged.append(replace(op, inputs=tuple(index_of[j] for j in op.inputs)))
    return replace(graph, ops=tuple(merged))


def mlp_chain(layers: int, hidden: int, dtype_bytes: int = 2, ffn: int | None = None) -> LayerGraph:
    """A stack of ``layers`` matmuls with an elementwise activation after each.

    Widths alternate hidden -> ffn -> hidden ...; the output must be replicated. This is
    the textbook graph whose forward optimum is Megatron's pattern (REFERENCE.md section 2).
    """
    ffn = hidden if ffn is None else ffn
    ops: List[Operator] = []
    width = hidden
    for i in range(layers):
        out = ffn if i % 2 == 0 else hidden
        ops.append(_matmul(f"matmul{i}", width, out, dtype_bytes, (len(ops) - 1,) if ops else ()))
        ops.append(_elementwise(f"act{i}", out, dtype_bytes, (len(ops) - 1,), reads=1))
        width = out
    return LayerGraph(kind="mlp", ops=tuple(ops), out_bytes=width * dtype_bytes)
