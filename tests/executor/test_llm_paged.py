"""The decode step's fused weights and Triton kernels, and the static (bucketed) prefill.

* fused weights: each TP rank's fused QKV and gate/up matrices are the rank's slices of the
  unsharded model's Q, K, V (gate, up) parts, fused in the same order;
* the Triton kernels (run by Triton's interpreter on CPUs: ``TRITON_INTERPRET=1``) equal
  plain torch references: paged attention over a scrambled block table (GQA and MHA, one
  program per request and context split over programs), the rotary + KV write, RMSNorm,
  SwiGLU; bf16 is left to the GPU check (the interpreter's ``tl.dot`` mishandles bf16);
* a MeshEngine serves the same greedy tokens with paged attention as with the gather path,
  and falls back to the gather path (saying why) when the paged kernel fails at warm-up;
* a prefill padded to its bucket (extra rows and positions) gives the logits of the exact
  prefill and writes the same K and V, and the buckets pad at most a third.
"""

from __future__ import annotations

import importlib.util
import math
import os

import pytest

torch = pytest.importorskip("torch")

from placement_opt.model import Architecture  # noqa: E402

# these tests run the Triton kernels on CPU tensors: in Triton's interpreter (set before Triton is imported)
os.environ.setdefault("TRITON_INTERPRET", "1")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
CPU = torch.device("cpu")
ARCH = Architecture(layers=2, hidden=64, heads=4, kv_heads=2, vocab=97, ffn_ratio=2.0, gated_mlp=True,
                    tied_embeddings=False, learned_positions=False, dtype="fp32")


def test_fused_weights_are_the_ranks_slices_of_each_part():
    from placement_opt.executor.llm_model import DecoderShard

    full = DecoderShard(ARCH, 5, 0, 1, None, CPU, torch.float32)
    hd, q_rows, kv_rows, ffn = 16, 4 * 16, 2 * 16, ARCH.ffn_hidden
    for tp in (2,):
        for rank in range(tp):
            part = DecoderShard(ARCH, 5, rank, tp, None, CPU, torch.float32)
            for lf, lp in zip(full.layers, part.layers):
                q, k, v = lf["wqkv"].split([q_rows, kv_rows, kv_rows])
                nq, nkv = q_rows // tp, kv_rows // tp
                want = torch.cat([q[rank * nq:(rank + 1) * nq], k[rank * nkv:(rank + 1) * nkv],
                                  v[rank * nkv:(rank + 1) * nkv]])
                assert torch.equal(lp["wqkv"], want)
                gate, up = lf["up"].split([ffn, ffn])
                nf = ffn // tp
                assert torch.equal(lp["up"], torch.cat([gate[rank * nf:(rank + 1) * nf], up[rank * nf:(rank + 1) * nf]]))
                assert torch.equal(lp["wo"], lf["wo"][:, rank * nq:(rank + 1) * nq])
                assert torch.equal(lp["down"], lf["down"][:, rank * nf:(rank + 1) * nf])
            assert part.shape.heads == 2 and part.shape.kv_heads == 1 and hd == part.shape.head_dim


def _reference_attention(q, pool, units, lengths, kv_heads):
    """Per request and head: softmax(q K^T / sqrt(hd)) V over its first ``lengths[b]`` positions."""
    batch, heads, hd = q.shape
    out = torch.empty_like(q, dtype=torch.float32)
    for b in range(batch):
        n = int(lengths[b])
        k = pool[units[0, b]].reshape(kv_heads, -1, hd)[:, :n].float().repeat_interleave(heads // kv_heads, 0)
        v = pool[units[1, b]].reshape(kv_heads, -1, hd)[:, :n].float().repeat_interleave(heads // kv_heads, 0)
        p = (q[b].float().unsqueeze(1) @ k.transpose(1, 2) / math.sqrt(hd)).softmax(-1)
        out[b] = (p @ v).squeeze(1)
    return out


@needs_triton
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
@pytest.mark.parametrize("heads,kv_heads,lengths", [(4, 2, [1, 5, 16, 17, 60]), (2, 2, [700]), (6, 1, [1, 300])])
def test_paged_attention_equals_reference(dtype, tol, heads, kv_heads, lengths):
    from placement_opt.executor import llm_triton

    gen = torch.Generator().manual_seed(heads * 1000 + len(lengths))
    hd, block = 16, 4
    n_blocks = max(lengths) // block + 2
    pool = torch.randn(3000, block, hd, generator=gen).to(dtype)
    units = torch.randint(1, 3000, (2, len(lengths), kv_heads, n_blocks), generator=gen)
    q = torch.randn(len(lengths), heads, hd, generator=gen).to(dtype)
    lens = torch.tensor(lengths)
    out = llm_triton.paged_attention(q, pool, units, lens, kv_heads)
    ref = _reference_attention(q, pool, units, lens, kv_heads)
    assert out.dtype == dtype and out.shape == q.shape
    assert float((out.float() - ref).abs().max()) <= tol * max(1.0, float(ref.abs().max()))


def test_long_contexts_at_small_batches_are_split():
    from placement_opt.executor import llm_triton

    assert llm_triton.attention_splits(1, 32, 2048) == (8, 256)
    assert llm_triton.attention_splits(32, 32, 2048)[0] == 1
    assert llm_triton.attention_splits(1, 32, 128)[0] == 1
    splits, per = llm_triton.attention_splits(2, 2, 700)
    assert per % llm_triton.TILE == 0 and (splits - 1) * per < 700 <= splits * per


@needs_triton
def test_rope_write_rotates_like_the_model_and_writes_the_pool():
    from placement_opt.executor import llm_triton
    from placement_opt.executor.llm_model import DecoderShard

    model = DecoderShard(ARCH, 2, 0, 1, None, CPU, torch.float32)
    gen = torch.Generator().manual_seed(3)
    batch, heads, kvh, hd, block = 3, 4, 2, 16, 4
    qkv = torch.randn(batch, (heads + 2 * kvh) * hd, generator=gen)
    pos = torch.tensor([0, 7, 30])
    ang = pos.float().unsqueeze(-1) * model.inv_freq
    pool = torch.zeros(40, block, hd)
    units = torch.tensor([[[3, 4], [5, 6], [7, 8]], [[9, 10], [11, 12], [13, 14]]])  # [2, B, kv_heads]
    offs = (pos % block).view(batch, 1)
    q = llm_triton.rope_write(qkv, ang.cos(), ang.sin(), heads, kvh, pool, units, offs)
    rot = model._angles(pos.unsqueeze(-1))  # [B, 1, 1, hd]
    qk = model._rope(qkv[:, :(heads + kvh) * hd].view(batch, 1, heads + kvh, hd), rot).squeeze(1)
    assert torch.allclose(q, qk[:, :heads], atol=1e-6)
    v = qkv[:, (heads + kvh) * hd:].view(batch, kvh, hd)
    for b in range(batch):
        for j in range(kvh):
            assert torch.allclose(pool[units[0, b, j], int(offs[b])], qk[b, heads + j], atol=1e-6)
            assert torch.equal(pool[units[1, b, j], int(offs[b])], v[b, j])


@needs_triton
def test_rms_norm_and_silu_mul_kernels():
    from placement_opt.executor import llm_triton

    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(3, 72, generator=gen), torch.randn(72, generator=gen)
    assert torch.allclose(llm_triton.rms_norm(x, w, 1e-5), torch.nn.functional.rms_norm(x, (72,), w, 1e-5),
                          atol=1e-5)
    y = torch.randn(3, 2 * 1500, generator=gen)  # more columns than one program's block
    assert torch.allclose(llm_triton.silu_mul(y), torch.nn.functional.silu(y[:, :1500]) * y[:, 1500:], atol=1e-5)


def _engine(attention):
    from placement_opt.executor.llm_engine import EngineSpec, LLMBuild, MeshEngine

    other = Architecture(layers=3, hidden=48, heads=3, kv_heads=1, vocab=61, ffn_ratio=3.0, dtype="fp32")
    spec = EngineSpec(llms=(LLMBuild("a", ARCH, 1, 0.5), LLMBuild("b", other, 2, 0.5)), tp=1, tp_rank=0,
                      pool_pages=300, block=4, max_batch=4, max_blocks=12, cuda_graphs=False, attention=attention)
    return MeshEngine(spec, CPU, [(None, None), (None, None)])


def _serve(engine):
    """Prefill three requests (two LLMs), then eight decode steps each; every request's tokens."""
    from placement_opt.executor.llm_sched import DECODE, PREFILL, Job

    engine.warm_up()
    engine.launch(Job(PREFILL, 0, [0, 1], [9, 4]))
    engine.finish(PREFILL, 0)
    engine.launch(Job(PREFILL, 1, [2], [13]))
    engine.finish(PREFILL, 1)
    for step in range(8):
        engine.launch(Job(DECODE, 0, [0, 1], [10 + step, 5 + step]))
        engine.finish(DECODE, 0)
        engine.launch(Job(DECODE, 1, [2], [14 + step]))
        engine.finish(DECODE, 1)
    return {r: list(t) for r, t in engine.tokens.items()}


@needs_triton
def test_engine_tokens_equal_with_paged_and_gather_attention():
    paged, gather = _engine("paged"), _engine("gather")
    assert paged.attention == "paged" and gather.attention == "gather"
    assert _serve(paged) == _serve(gather)


@needs_triton
def test_a_failing_paged_kernel_falls_back_to_gather(monkeypatch):
    from placement_opt.executor import llm_triton

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel image for this device")

    monkeypatch.setattr(llm_triton, "paged_attention", broken)
    engine = _engine("paged")
    tokens = _serve(engine)
    assert engine.attention == "gather" and "no kernel image" in engine.attention_fallback
    assert tokens == _serve(_engine("gather"))


def test_padded_prefill_equals_exact_prefill():
    from placement_opt.executor.llm_kvcache import KVPool, LLMCache, PrefillInputs
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard

    model = DecoderShard(ARCH, 9, 0, 1, None, CPU, torch.float32)
    prompts = [[5, 6, 7, 8, 9, 10, 11], [3, 2, 1]]
    lens = [len(p) for p in prompts]
    logits, pools = [], []
    for shape in ((2, 7), (4, 16)):  # exact, and the engine's bucket of a larger batch
        pool = KVPool(64, page_units([ARCH], 1), 4, 16, CPU, torch.float32)
        cache = LLMCache(pool, ARCH, 1)
        for r in range(2):
            cache.ensure(r, 2)
        inputs = PrefillInputs(cache, *shape)
        inputs.fill([0, 1], lens, prompts)
        logits.append(model.prefill(inputs.tokens, inputs.lengths, inputs)[:2])
        pools.append(pool.data[pool.page:].clone())  # page 0 is scratch: padding writes there
    assert torch.allclose(logits[0], logits[1], atol=1e-5)
    assert torch.allclose(pools[0], pools[1], atol=1e-6)


def test_prefill_buckets_pad_at_most_a_third():
    from placement_opt.executor.llm_engine import PREFILL_GRAPH_TOKENS, prefill_bucket, prefill_length_bucket

    sizes = sorted({prefill_length_bucket(n) for n in range(1, 4097)})
    assert sizes[:8] == [16, 24, 32, 48, 64, 96, 128, 192]
    for n in range(17, 4097):
        padded = prefill_length_bucket(n)
        assert n <= padded and 3 * (padded - n) <= padded  # padding is at most a third of the bucket
    assert prefill_bucket(3, 100) == (4, 128)
    assert prefill_bucket(1, PREFILL_GRAPH_TOKENS) == (1, PREFILL_GRAPH_TOKENS)
    assert prefill_bucket(4, 1000) is None and 4 * 1024 > PREFILL_GRAPH_TOKENS
