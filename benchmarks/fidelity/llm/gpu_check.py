"""GPU self-check of the LLM executor before the fidelity runs (prints one line per check).

1. green contexts: whether this torch build and driver create them, with how many SMs;
2. paged KV decode (fp32 on the GPU) gives the greedy tokens of full recomputation;
3. an engine with CUDA graphs and green-context streams produces the tokens of one running
   eagerly on plain streams, for the same jobs (at least 80% equal: fp16 GEMMs on different
   SM counts may differ in the last bit and flip a near-tie).

Exit status 1 if a correctness check fails (green contexts missing is reported, not a failure:
the executor then falls back to plain streams and says so).

Usage (GPU): python benchmarks/fidelity/llm/gpu_check.py
"""

from __future__ import annotations

import sys


def green_contexts(torch) -> str:  # type: ignore[no-untyped-def]
    """Two LLMs of share 0.5: which mechanism the executor gets, their SM counts, and whether
    their SMs are disjoint (a compute-bound loop on both at once takes about as long as on one)."""
    from placement_opt.executor.llm_greenctx import partition_sms

    dev = torch.device("cuda", 0)
    plan = partition_sms(dev, [0.5, 0.5], torch)
    x = torch.randn(8192, 8192, device=dev, dtype=torch.float16)

    def run(streams) -> float:  # type: ignore[no-untyped-def]
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

    a, b = plan.streams[0][1], plan.streams[1][1]
    run([a])
    alone, both = run([a]), run([a, b])
    return (f"{plan.mechanism} SMs {plan.sm_counts} {plan.fallback or ''}; one partition {alone:.1f} ms, both "
            f"at once {both:.1f} ms (ratio {both / alone:.2f}: ~1 disjoint SMs, ~2 shared)")


def five_partitions(torch) -> str:  # type: ignore[no-untyped-def]
    """The muxserve placement's partitioning: five LLMs of share 0.2 (mechanism, real SM counts)."""
    from placement_opt.executor.llm_greenctx import partition_sms

    plan = partition_sms(torch.device("cuda", 0), [0.2] * 5, torch)
    return f"{plan.mechanism} SMs {plan.sm_counts} (sum {sum(plan.sm_counts)}) {plan.fallback or ''}"


def paged_equals_full(torch) -> bool:  # type: ignore[no-untyped-def]
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillWrite, page_units
    from placement_opt.executor.llm_model import DecoderShard
    from placement_opt.model import Architecture

    arch = Architecture(layers=4, hidden=256, heads=4, kv_heads=2, vocab=500, ffn_ratio=2.5, gated_mlp=True,
                        tied_embeddings=False, learned_positions=False, dtype="fp32")
    dev = torch.device("cuda", 0)
    model = DecoderShard(arch, 7, 0, 1, None, dev, torch.float32)
    pool = KVPool(256, page_units([arch], 1), 16, 64, dev, torch.float32)
    cache = LLMCache(pool, arch, 1)
    seq = list(range(3, 40))
    cache.ensure(0, 8)
    logits = model.prefill(torch.tensor([seq], device=dev), torch.tensor([len(seq)], device=dev),
                           PrefillWrite(cache, [0], [len(seq)]))
    seq.append(int(logits.argmax()))
    for _ in range(20):
        inputs = DecodeInputs(cache, 2, 8)
        inputs.fill([0], [seq[-1]], [len(seq) - 1])
        seq.append(int(model.decode(inputs.tokens, inputs.pos, inputs)[0].argmax()))
    ref = seq[:37]
    while len(ref) < len(seq):
        ref.append(int(model.forward_full(torch.tensor([ref], device=dev))[0, -1].argmax()))
    return ref == seq


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
                          cuda_graphs=graphs, green_contexts=graphs)
        eng = MeshEngine(spec, torch.device("cuda", 0), [(None, None), (None, None)])
        eng.warm_up()
        mechanisms.append((eng.mechanism, eng.sm, getattr(eng, "fallback_reason", None)))
        eng.launch(Job(PREFILL, 0, [0, 1], [20, 33]))
        eng.launch(Job(PREFILL, 1, [2], [50]))
        eng.finish(PREFILL, 0)
        eng.finish(PREFILL, 1)
        for step in range(10):
            eng.launch(Job(DECODE, 0, [0, 1], [21 + step, 34 + step]))
            eng.launch(Job(DECODE, 1, [2], [51 + step]))
            eng.finish(DECODE, 0)
            eng.finish(DECODE, 1)
        out.append([t for r in sorted(eng.tokens) for t in eng.tokens[r]])
    same = sum(a == b for a, b in zip(*out)) / len(out[0])
    return same, mechanisms


def main() -> None:
    import torch

    print("device", torch.cuda.get_device_name(0), "SMs", torch.cuda.get_device_properties(0).multi_processor_count,
          "torch", torch.__version__, "cuda", torch.version.cuda)
    print("green contexts:", green_contexts(torch))
    print("five 0.2 shares:", five_partitions(torch))
    ok_paged = paged_equals_full(torch)
    print("paged KV decode equals full recompute (fp32):", ok_paged)
    same, mechanisms = graphs_equal_eager(torch)
    # fp16 on different SM counts may pick other GEMM kernels: a near-tie can flip a token
    print(f"graphs + SM partitioning vs eager + plain streams: {same:.3f} of tokens equal; engines {mechanisms}")
    sys.exit(0 if ok_paged and same >= 0.8 else 1)


if __name__ == "__main__":
    main()
