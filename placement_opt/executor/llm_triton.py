"""Triton kernels of the LLM decode step: paged attention in place, fused rotary + KV write,
RMSNorm, SwiGLU.

Why: the H100 runs measured the decode step of a LLaMA-2-7B shape at 33-59% of the HBM
roofline. At small batches the step was bound by its ~30 kernels a layer (each a few
microseconds even inside a CUDA graph); at large batch x context by the gather that copied
every request's K and V blocks into one contiguous tensor before attention (K and V crossed
HBM three times). With these kernels a decode layer is nine or ten kernels (RMSNorm, the QKV
GEMM, rotary + KV write, attention (+ combine), the output GEMM, RMSNorm, the gate/up GEMM,
SwiGLU, the down GEMM) and attention reads each K and V block once, where the pool holds it.

* :func:`paged_attention`: one program per (request, KV head, split of the context); the
  program holds the query heads that share its KV head (grouped-query attention: a
  ``group x head_dim`` tile) and walks the request's valid positions ``TILE`` tokens at a
  time, looking every block's unit up in the step's unit table (the block table), with an
  online softmax in base 2. Long contexts at small batches are split over several programs
  (flash-decoding) whose partial results a second kernel combines; otherwise the first
  kernel writes the output.
* :func:`rope_write`: rotates Q and K of the fused QKV product (the rotate-half convention of
  :meth:`~.llm_model.DecoderShard._rope`), writes the new token's K and V into the pool and
  Q into a buffer, in one kernel.
* :func:`rms_norm` and :func:`silu_mul` (``silu(gate) * up`` of the fused gate/up product).

The module imports without Triton (:func:`available` says whether the kernels exist); the
decoder then uses the gather + batched-GEMM attention. CPU tests run the kernels with
``TRITON_INTERPRET=1`` (set before this module is first imported).
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the decoder keeps its gather path
    triton = None

# the attention's rules live with the simulator, which times them (its combine spill)
from placement_opt.simulate.meshsim import ATTENTION_TILE as TILE  # tokens per attention iteration
from placement_opt.simulate.meshsim import COMBINE_WARPS, attention_pads, attention_splits, power_of_two_at_least

LOG2E = 1.4426950408889634


def available() -> bool:
    """Whether Triton imported (the kernels exist)."""
    return triton is not None


def supported(head_dim: int) -> bool:
    """Whether the kernels serve this head size (``tl.dot`` needs at least 16 columns)."""
    return available() and head_dim >= 16


if triton is not None:

    @triton.jit
    def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _silu_mul_kernel(y_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        g = tl.load(y_ptr + row * 2 * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(y_ptr + row * 2 * n_cols + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, (g / (1.0 + tl.exp(-g)) * u).to(out_ptr.dtype.element_ty),
                 mask=mask)

    @triton.jit(do_not_specialize=["batch", "H", "KVH"])
    def _rope_write_kernel(qkv_ptr, cos_ptr, sin_ptr, q_ptr, pool_ptr, units_ptr, offs_ptr, batch, H, KVH,
                           HALF: tl.constexpr, HALFP: tl.constexpr, BLOCK_TOK: tl.constexpr):
        b = tl.program_id(0)
        h = tl.program_id(1)  # query heads first, then KV heads
        d = tl.arange(0, HALFP)
        dm = d < HALF
        row = qkv_ptr + b * (H + 2 * KVH) * 2 * HALF
        c = tl.load(cos_ptr + b * HALF + d, mask=dm, other=0.0)
        s = tl.load(sin_ptr + b * HALF + d, mask=dm, other=0.0)
        x1 = tl.load(row + h * 2 * HALF + d, mask=dm, other=0.0).to(tl.float32)
        x2 = tl.load(row + h * 2 * HALF + HALF + d, mask=dm, other=0.0).to(tl.float32)
        y1 = x1 * c - x2 * s
        y2 = x2 * c + x1 * s
        if h < H:
            dst = q_ptr + (b * H + h) * 2 * HALF
            tl.store(dst + d, y1.to(q_ptr.dtype.element_ty), mask=dm)
            tl.store(dst + HALF + d, y2.to(q_ptr.dtype.element_ty), mask=dm)
        else:
            j = h - H
            off = tl.load(offs_ptr + b)
            unit_k = tl.load(units_ptr + b * KVH + j)  # units [2, batch, KVH]: K then V
            unit_v = tl.load(units_ptr + (batch + b) * KVH + j)
            kdst = pool_ptr + (unit_k * BLOCK_TOK + off) * 2 * HALF
            tl.store(kdst + d, y1.to(pool_ptr.dtype.element_ty), mask=dm)
            tl.store(kdst + HALF + d, y2.to(pool_ptr.dtype.element_ty), mask=dm)
            vsrc = row + (H + KVH + j) * 2 * HALF
            vdst = pool_ptr + (unit_v * BLOCK_TOK + off) * 2 * HALF
            tl.store(vdst + d, tl.load(vsrc + d, mask=dm, other=0.0), mask=dm)
            tl.store(vdst + HALF + d, tl.load(vsrc + HALF + d, mask=dm, other=0.0), mask=dm)

    @triton.jit(do_not_specialize=["batch", "n_blocks", "split_tokens", "KVH", "G", "splits"])
    def _paged_attention_kernel(q_ptr, pool_ptr, units_ptr, len_ptr, out_ptr, part_ptr, ml_ptr,
                                batch, n_blocks, split_tokens, qk_scale, KVH, G, splits,
                                GP: tl.constexpr, HD: tl.constexpr, HDP: tl.constexpr, BLOCK_TOK: tl.constexpr,
                                TILE_T: tl.constexpr, SPLIT: tl.constexpr, IEEE: tl.constexpr):
        b = tl.program_id(0)
        kh = tl.program_id(1)
        sp = tl.program_id(2)
        length = tl.load(len_ptr + b).to(tl.int32)
        lo = sp * split_tokens
        hi = tl.minimum(lo + split_tokens, length)
        g = tl.arange(0, GP)
        d = tl.arange(0, HDP)
        gm = g < G
        dm = d < HD
        heads = (b * KVH + kh) * G + g  # query head kh * G + g of request b, [B, H, HD] layout
        q = tl.load(q_ptr + heads[:, None] * HD + d[None, :], mask=gm[:, None] & dm[None, :], other=0.0)
        m_i = tl.full([GP], float("-inf"), tl.float32)
        l_i = tl.zeros([GP], tl.float32)
        acc = tl.zeros([GP, HDP], tl.float32)
        k_units = units_ptr + (b * KVH + kh) * n_blocks  # units [2, batch, KVH, n_blocks]: K then V
        v_units = units_ptr + ((batch + b) * KVH + kh) * n_blocks
        t_off = tl.arange(0, TILE_T)
        for start in range(lo, hi, TILE_T):
            t = start + t_off
            tm = t < hi
            blk = t // BLOCK_TOK
            within = t % BLOCK_TOK
            uk = tl.load(k_units + blk, mask=tm, other=0)
            k = tl.load(pool_ptr + (uk * BLOCK_TOK + within)[:, None] * HD + d[None, :],
                        mask=tm[:, None] & dm[None, :], other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = tl.where(tm[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            uv = tl.load(v_units + blk, mask=tm, other=0)
            v = tl.load(pool_ptr + (uv * BLOCK_TOK + within)[:, None] * HD + d[None, :],
                        mask=tm[:, None] & dm[None, :], other=0.0)
            if IEEE:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
        if not SPLIT:
            out = acc / l_i[:, None]
            tl.store(out_ptr + heads[:, None] * HD + d[None, :], out.to(out_ptr.dtype.element_ty),
                     mask=gm[:, None] & dm[None, :])
        else:
            part = ((b * KVH + kh) * splits + sp) * GP + g  # partials [batch, KVH, SPLITS, GP, (HDP | 2)]
            tl.store(part_ptr + part[:, None] * HDP + d[None, :], acc, mask=gm[:, None])
            tl.store(ml_ptr + part * 2, m_i, mask=gm)
            tl.store(ml_ptr + part * 2 + 1, l_i, mask=gm)

    @triton.jit(do_not_specialize=["KVH", "G", "splits"])
    def _combine_kernel(part_ptr, ml_ptr, out_ptr, KVH, G, splits, GP: tl.constexpr, HD: tl.constexpr,
                        HDP: tl.constexpr, SP: tl.constexpr):
        b = tl.program_id(0)
        kh = tl.program_id(1)
        sp = tl.arange(0, SP)
        g = tl.arange(0, GP)
        d = tl.arange(0, HDP)
        sg = (sp[:, None] < splits) & (g[None, :] < G)  # [SP, GP]
        part = ((b * KVH + kh) * splits + sp[:, None]) * GP + g[None, :]
        m = tl.load(ml_ptr + part * 2, mask=sg, other=float("-inf"))
        l_s = tl.load(ml_ptr + part * 2 + 1, mask=sg, other=0.0)
        m_max = tl.where(g < G, tl.max(m, axis=0), 0.0)  # split 0 always holds a valid token
        w = tl.exp2(m - m_max[None, :])  # empty splits: exp2(-inf) = 0
        total = tl.sum(w * l_s, axis=0)
        acc = tl.load(part_ptr + part[:, :, None] * HDP + d[None, None, :], mask=sg[:, :, None], other=0.0)
        out = tl.sum(acc * w[:, :, None], axis=0) / tl.where(g < G, total, 1.0)[:, None]
        heads = (b * KVH + kh) * G + g
        tl.store(out_ptr + heads[:, None] * HD + d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=(g[:, None] < G) & (d[None, :] < HD))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of the rows of ``x`` [rows, n] (contiguous) with ``weight`` [n], in fp32, one kernel."""
    out = torch.empty_like(x)
    n = x.shape[-1]
    block = power_of_two_at_least(n)
    _rms_norm_kernel[(x.numel() // n,)](x, weight, out, n, eps, BLOCK=block, num_warps=8 if block >= 4096 else 4)
    return out


def silu_mul(y: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of the fused product ``y`` [rows, 2 x ffn] (gate columns first)."""
    rows, cols = y.shape[0], y.shape[1] // 2
    out = torch.empty((rows, cols), device=y.device, dtype=y.dtype)
    block = min(1024, power_of_two_at_least(cols))
    _silu_mul_kernel[(rows, triton.cdiv(cols, block))](y, out, cols, BLOCK=block, num_warps=4)
    return out


def rope_write(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, kv_heads: int,
               pool: torch.Tensor, write_units: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rotate Q and K of the fused product ``qkv`` [B, (heads + 2 kv_heads) x hd] by the angles
    ``cos``/``sin`` [B, hd/2] (fp32), store the new token's K and V in ``pool`` (units
    ``write_units`` [2, B, kv_heads], row ``offs`` [B] of their blocks) and return the rotated
    Q [B, heads, hd]."""
    batch = qkv.shape[0]
    half = pool.shape[-1] // 2
    q = torch.empty((batch, heads, 2 * half), device=qkv.device, dtype=qkv.dtype)
    _rope_write_kernel[(batch, heads + kv_heads)](qkv, cos, sin, q, pool, write_units, offs, batch, heads, kv_heads,
                                                  HALF=half, HALFP=power_of_two_at_least(half), BLOCK_TOK=pool.shape[1],
                                                  num_warps=1)
    return q


def paged_attention(q: torch.Tensor, pool: torch.Tensor, read_units: torch.Tensor, lengths: torch.Tensor,
                    kv_heads: int) -> torch.Tensor:
    """Attention of the queries ``q`` [B, heads, hd] over each request's first ``lengths[b]``
    positions, read in place from ``pool`` [units, block, hd] through ``read_units``
    [2, B, kv_heads, n_blocks] (K and V unit of every block); returns [B, heads, hd]."""
    batch, heads, hd = q.shape
    n_blocks, block = read_units.shape[-1], pool.shape[1]
    group = heads // kv_heads
    splits, per = attention_splits(batch, kv_heads, n_blocks * block)
    gp, hdp = attention_pads(group, hd)
    out = torch.empty_like(q)
    part: Any = out
    ml: Any = out
    if splits > 1:
        part = torch.empty((batch, kv_heads, splits, gp, hdp), device=q.device, dtype=torch.float32)
        ml = torch.empty((batch, kv_heads, splits, gp, 2), device=q.device, dtype=torch.float32)
    _paged_attention_kernel[(batch, kv_heads, splits)](
        q, pool, read_units, lengths, out, part, ml, batch, n_blocks, per, LOG2E / math.sqrt(hd), kv_heads, group,
        splits, GP=gp, HD=hd, HDP=hdp, BLOCK_TOK=block, TILE_T=TILE, SPLIT=splits > 1,
        IEEE=q.dtype == torch.float32, num_warps=4)
    if splits > 1:
        _combine_kernel[(batch, kv_heads)](part, ml, out, kv_heads, group, splits, GP=gp, HD=hd, HDP=hdp,
                                           SP=power_of_two_at_least(splits), num_warps=COMBINE_WARPS)
    return out
