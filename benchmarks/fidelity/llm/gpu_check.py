"""GPU self-check of the LLM executor before the fidelity runs (prints one line per check).

1. green contexts: whether this torch build and driver create them, with how many SMs; and
   for unequal shares (a context of several groups of one split) that each context holds the
   SMs asked and runs at their pace, on SMs disjoint from the others';
2. paged KV decode (fp32 on the GPU) gives the greedy tokens of full recomputation, with the
   engine's decode attention (the Triton paged kernels) and with the gather path;
3. the Triton paged-attention kernel equals a plain torch reference (fp16 and bf16, GQA and
   MHA, short contexts and split long ones, scattered blocks), and a LLaMA-shaped fp16
   decoder's logits and greedy tokens are the same with the paged kernels and the gather path;
4. an engine with CUDA graphs (decode and prefill buckets captured at start-up, replays
   included; no bucket met after start-up), green-context
   streams and paged attention produces the tokens of one running eagerly on plain streams
   with the gather path, for the same jobs (at least 80% equal: fp16 GEMMs on different SM
   counts may differ in the last bit and flip a near-tie).

Exit status 1 if a correctness check fails (green contexts missing is reported, not a failure:
the executor then falls back to plain streams and says so).

Usage (GPU): python benchmarks/fidelity/llm/gpu_check.py
"""

from __future__ import annotations

import sys


def _busy_ms(torch, x, streams) -> float:  # type: ignore[no-untyped-def]
    """Milliseconds for 20 products ``x @ x`` on each of ``streams`` at once (a compute-bound
    load: its time falls with the SMs of the stream's partition)."""
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for s in streams:
        s.wait_event(start)
        with torch.cuda.stream(s):
            for _ in range(20):
                x @ x
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def green_contexts(torch) -> str:  # type: ignore[no-untyped-def]
    """Two LLMs of share 0.5: which mechanism the executor gets, their SM counts, and whether
    their SMs are disjoint (a compute-bound loop on both at once takes about as long as on one)."""
    from placement_opt.executor.llm_greenctx import partition_sms

    dev = torch.device("cuda", 0)
    plan = partition_sms(dev, [0.5, 0.5], torch)
    x = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    a, b = plan.streams[0][1], plan.streams[1][1]
    _busy_ms(torch, x, [a])
    alone, both = _busy_ms(torch, x, [a]), _busy_ms(torch, x, [a, b])
    return (f"{plan.mechanism} SMs {plan.sm_counts} {plan.fallback or ''}; one partition {alone:.1f} ms, both "
            f"at once {both:.1f} ms (ratio {both / alone:.2f}: ~1 disjoint SMs, ~2 shared)")


def unequal_partitions(torch, shares) -> tuple:  # type: ignore[no-untyped-def]
    """LLMs of unequal ``shares``: a partition of several groups of one split must hold all of
    them. Per partition the SMs asked, the SMs the driver reads back from its context, and a
    compute-bound loop's time alone; then all at once. Passes when the plan is green contexts,
    every context holds the SMs asked, time x SMs agrees within 25% over the partitions (a context
    short of groups would run slower than its count says) and all at once takes at most 1.5 x the
    slowest alone: disjoint SMs (an H200 measured 1.23-1.26 x, the whole GPU's compute then sharing
    its power and clocks, as two halves do in ``green_contexts``); shared SMs would take 2 x and
    more. Any other mechanism fails from compute capability 9.0 (where the executor's green
    contexts are expected) and is skipped, said so in the line, before it."""
    from placement_opt.executor.llm_greenctx import partition_sms, sm_counts

    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    asked = sm_counts(shares, props.multi_processor_count, (props.major, props.minor))
    plan = partition_sms(dev, shares, torch)
    x = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    decode = [s[1] for s in plan.streams]
    _busy_ms(torch, x, decode[:1])
    alone = [_busy_ms(torch, x, [s]) for s in decode]
    together = _busy_ms(torch, x, decode)
    work = [t * n for t, n in zip(alone, plan.sm_counts)]
    green = plan.mechanism == "green-contexts"
    ok = (green and plan.sm_counts == asked and max(work) <= 1.25 * min(work) and together <= 1.5 * max(alone))
    line = (f"{plan.mechanism} ({plan.layout or plan.fallback}) SMs asked {asked}, held {plan.sm_counts}; alone "
            f"{', '.join(f'{t:.1f}' for t in alone)} ms (x SMs spread {max(work) / min(work):.2f}), all at once "
            f"{together:.1f} ms ({together / max(alone):.2f} x the slowest)")
    if not green and props.major < 9:
        return line + " (skipped: no green contexts before compute capability 9.0)", True
    return line, ok


def five_partitions(torch) -> str:  # type: ignore[no-untyped-def]
    """The muxserve placement's partitioning: five LLMs of share 0.2 (mechanism, real SM counts)."""
    from placement_opt.executor.llm_greenctx import partition_sms

    plan = partition_sms(torch.device("cuda", 0), [0.2] * 5, torch)
    return f"{plan.mechanism} SMs {plan.sm_counts} (sum {sum(plan.sm_counts)}) {plan.fallback or ''}"


def paged_equals_full(torch, attention: str) -> bool:  # type: ignore[no-untyped-def]
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillInputs
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard
    from placement_opt.model import Architecture

    arch = Architecture(layers=4, hidden=256, heads=4, kv_heads=2, vocab=500, ffn_ratio=2.5, gated_mlp=True,
                        tied_embeddings=False, learned_positions=False, dtype="fp32")
    dev = torch.device("cuda", 0)
    model = DecoderShard(arch, 7, 0, 1, None, dev, torch.float32, attention)
    pool = KVPool(256, page_units([arch], 1), 16, 64, dev, torch.float32)
    cache = LLMCache(pool, arch, 1)
    seq = list(range(3, 40))
    cache.ensure(0, 8)
    logits = model.prefill(torch.tensor([seq], device=dev), torch.tensor([len(seq)], device=dev),
                           PrefillInputs.of(cache, [0], [len(seq)]))
    seq.append(int(logits.argmax()))
    for _ in range(20):
        inputs = DecodeInputs(cache, 2, 8)
        inputs.fill([0], [seq[-1]], [len(seq) - 1])
        seq.append(int(model.decode(inputs.tokens, inputs.pos, inputs)[0].argmax()))
    ref = seq[:37]
    while len(ref) < len(seq):
        ref.append(int(model.forward_full(torch.tensor([ref], device=dev))[0, -1].argmax()))
    return ref == seq


def paged_kernel_matches(torch) -> tuple:  # type: ignore[no-untyped-def]
    """Worst relative error of the Triton paged attention against a torch reference over
    fp16/bf16, GQA 4 and MHA, and contexts from 1 token to 3000 (split over programs)."""
    import math

    from placement_opt.executor import llm_triton

    dev = torch.device("cuda", 0)
    gen = torch.Generator(device=dev).manual_seed(5)
    worst = 0.0
    cases = [(torch.float16, 32, 8, [1, 15, 16, 17, 700, 3000]), (torch.bfloat16, 32, 32, [3000, 64]),
             (torch.float16, 8, 2, [1] * 32)]
    for dtype, heads, kvh, lens in cases:
        hd, block, batch = 128, 16, len(lens)
        n_blocks = max(lens) // block + 1
        pool = torch.randn(4096, block, hd, device=dev, dtype=dtype, generator=gen)
        units = torch.randint(1, 4096, (2, batch, kvh, n_blocks), device=dev, generator=gen)
        q = torch.randn(batch, heads, hd, device=dev, dtype=dtype, generator=gen)
        lengths = torch.tensor(lens, device=dev)
        out = llm_triton.paged_attention(q, pool, units, lengths, kvh).float()
        for b, n in enumerate(lens):
            k = pool[units[0, b]].reshape(kvh, -1, hd)[:, :n].float().repeat_interleave(heads // kvh, 0)
            v = pool[units[1, b]].reshape(kvh, -1, hd)[:, :n].float().repeat_interleave(heads // kvh, 0)
            p = (q[b].float().unsqueeze(1) @ k.transpose(1, 2) / math.sqrt(hd)).softmax(-1)
            ref = (p @ v).squeeze(1)
            worst = max(worst, float((out[b] - ref).abs().max() / ref.abs().max()))
    return worst, worst < 2e-2


def paged_equals_gather(torch) -> tuple:  # type: ignore[no-untyped-def]
    """A LLaMA-shaped fp16 decoder (GQA 32/8, head size 128) decoding 4 requests of different
    lengths for 24 steps with either attention from the same prefill: largest logit gap
    (relative) and the fraction of greedy tokens equal."""
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillInputs
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard
    from placement_opt.model import Architecture

    arch = Architecture(layers=4, hidden=4096, heads=32, kv_heads=8, vocab=32000, ffn_ratio=3.5, gated_mlp=True,
                        tied_embeddings=False, learned_positions=False, dtype="fp16")
    dev = torch.device("cuda", 0)
    runs = []
    for attention in ("paged", "gather"):
        model = DecoderShard(arch, 3, 0, 1, None, dev, torch.float16, attention)
        pool = KVPool(1024, page_units([arch], 1), 16, 128, dev, torch.float16)
        cache = LLMCache(pool, arch, 1)
        lens = [5, 100, 333, 700]
        seqs = [list(range(7 + r, 7 + r + n)) for r, n in enumerate(lens)]
        for r in range(4):
            cache.ensure(r, 48)
        inputs = PrefillInputs(cache, 4, max(lens))
        inputs.fill(range(4), lens, seqs)
        first = model.prefill(inputs.tokens, inputs.lengths, inputs).argmax(-1).tolist()
        logits = []
        for s, t in zip(seqs, first):
            s.append(t)
        for _ in range(24):
            step = DecodeInputs(cache, 4, 48)
            step.fill(range(4), [s[-1] for s in seqs], [len(s) - 1 for s in seqs])
            lg = model.decode(step.tokens, step.pos, step)
            logits.append(lg)
            for s, t in zip(seqs, lg.argmax(-1).tolist()):
                s.append(t)
        runs.append((seqs, torch.stack(logits)))
        del model, pool
    (a, la), (b, lb) = runs
    gap = float((la - lb).abs().max() / lb.abs().max())
    same = sum(x == y for sa, sb in zip(a, b) for x, y in zip(sa, sb)) / sum(len(s) for s in a)
    return gap, same


def graphs_equal_eager(torch) -> tuple:  # noqa: D103  # type: ignore[no-untyped-def]
    from placement_opt.executor.llm_engine import EngineSpec, LLMBuild, MeshEngine
    from placement_opt.executor.llm_sched import DECODE, PREFILL, Job
    from placement_opt.model import Architecture

    arch = Architecture(layers=4, hidden=512, heads=4, kv_heads=2, vocab=1000, ffn_ratio=2.5, gated_mlp=True,
                        tied_embeddings=False, learned_positions=False, dtype="fp16")
    builds = (LLMBuild("a", arch, 1, 0.5), LLMBuild("b", arch, 2, 0.5))
    out = []
    mechanisms = []
    for graphs in (True, False):
        spec = EngineSpec(llms=builds, tp=1, tp_rank=0, pool_pages=2000, block=16, max_batch=4, max_blocks=8,
                          cuda_graphs=graphs, green_contexts=graphs, attention="auto" if graphs else "gather")
        eng = MeshEngine(spec, torch.device("cuda", 0), [(None, None), (None, None)])
        eng.warm_up()
        mechanisms.append((eng.mechanism, eng.sm, getattr(eng, "fallback_reason", None), eng.attention,
                           eng.attention_fallback, eng.prefill_graph_fallback))
        # the second round's prefills fall in the first round's buckets: graph replays
        for first, (a, b) in enumerate((([0, 1], [2]), ([3, 4], [5]))):
            eng.launch(Job(PREFILL, 0, a, [20, 33] if first == 0 else [22, 40]))
            eng.launch(Job(PREFILL, 1, b, [50] if first == 0 else [60]))
            eng.finish(PREFILL, 0)
            eng.finish(PREFILL, 1)
            ctx_a = [len(eng.tokens[r]) for r in a]
            ctx_b = [len(eng.tokens[r]) for r in b]
            for step in range(10):
                eng.launch(Job(DECODE, 0, a, [c + step for c in ctx_a]))
                eng.launch(Job(DECODE, 1, b, [c + step for c in ctx_b]))
                eng.finish(DECODE, 0)
                eng.finish(DECODE, 1)
        mechanisms[-1] += (len(eng.llms[0].prefill_graphs), eng.cold_buckets, eng.warmup)
        out.append([t for r in sorted(eng.tokens) for t in eng.tokens[r]])
    same = sum(a == b for a, b in zip(*out)) / len(out[0])
    return same, mechanisms


def main() -> None:
    import torch

    print("device", torch.cuda.get_device_name(0), "SMs", torch.cuda.get_device_properties(0).multi_processor_count,
          "torch", torch.__version__, "cuda", torch.version.cuda)
    print("green contexts:", green_contexts(torch))
    print("five 0.2 shares:", five_partitions(torch))
    oks = []
    # the muxserve solver's shares on the bundled instances (h100-llama-mix, chatlmsys-500 and -2000)
    for shares in ([0.25, 0.5, 0.25], [0.37, 0.62], [0.33] * 3, [0.34] + [0.13] * 5):
        line, ok = unequal_partitions(torch, shares)
        print(f"shares {shares}: {line}: {ok}")
        oks.append(ok)
    for attention in ("auto", "gather"):
        oks.append(paged_equals_full(torch, attention))
        print(f"paged KV decode equals full recompute (fp32, attention {attention}):", oks[-1])
    try:
        worst, ok = paged_kernel_matches(torch)
        print(f"Triton paged attention vs torch reference: worst relative error {worst:.2e}: {ok}")
        gap, equal = paged_equals_gather(torch)
        print(f"decoder fp16 paged vs gather: largest logit gap {gap:.2e} (relative), {equal:.3f} of tokens equal")
        oks += [ok, equal >= 0.9]
    except Exception as e:  # the engine then serves with the gather path (attention_fallback)
        print(f"Triton paged attention FAILED: {type(e).__name__}: {e}")
        oks.append(False)
    same, mechanisms = graphs_equal_eager(torch)
    # fp16 on different SM counts may pick other GEMM kernels: a near-tie can flip a token
    print(f"graphs + SM partitioning + paged vs eager + plain streams + gather: {same:.3f} of tokens equal; "
          f"engines (mechanism, SMs, fallback, attention, attention fallback, prefill graph fallback, LLM a's "
          f"prefill graphs, buckets first met after start-up, warm-up) {mechanisms}")
    cold = [m[-2] for m in mechanisms]
    sys.exit(0 if all(oks) and same >= 0.8 and not any(cold) else 1)


if __name__ == "__main__":
    main()
