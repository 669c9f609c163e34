"""Which kernels of a decode step stretch beside another LLM's: the step kernel by kernel, alone and beside.

``unequal_rounds.py`` found a small LLM's decode step (``llm-1b``, ``llm-3b``) beside ``llm-8b``
running 10-15% past the contention model at every SM share up to 0.5, a thing the bytes beside
it do not explain. This builds the executor's :class:`~placement_opt.executor.llm_engine.MeshEngine`
with two of the instance's LLMs on SM partitions (``--models VICTIM,OTHER --shares S1,S2``, as
``engine_bench.py``), and under PyTorch's profiler (CUPTI kernel records, CUDA graph replays
included) runs ``--steps`` decode steps of the first LLM alone, then as many again each launched
just after a step of the second (longer) one, so that it runs beside it from start to end. From
the profiler's trace it takes the first LLM's kernels (those on its decode stream) and prints,
per kernel name, its mean GPU microseconds a step alone and beside and their ratio, and for the
whole step: the kernels' sum, the step's span (first kernel start to last kernel end) and the
gaps between kernels, alone and beside. A stretch that sits in some kernels (say the weight
GEMVs against the attention over the KV cache) or in the gaps says what a model of it must see.

Usage (GPU): python benchmarks/fidelity/llm/kernel_beside.py instances/fidelity-llm/poisson.json \
  --models llm-1b,llm-8b --shares 0.25,0.75 -o kernels.json [--batch 16 --context 512 --steps 20]
(without a GPU it runs on the CPU, where no kernel is recorded: a smoke test of the script only);
``kernel_beside.py --report kernels.json ...`` prints outputs written before, with no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from typing import Any, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_bench as eb  # noqa: E402

from placement_opt.io import atomic_write_text  # noqa: E402

#: kernel names are cut to this many characters (template arguments make them long)
NAME_CHARS = 70
#: the kernel classes of a decode step, by name: the weights' matrix products (cuBLAS's nvjet and
#: split-K kernels), the paged attention over the KV cache (its split-KV pass and the combine),
#: and everything else: RMSNorm, rotary + KV write, SwiGLU, copies and small elementwise kernels
CLASSES = ("weights", "attention", "small")


def stream_kernels(trace: dict) -> Dict[int, List[Tuple[float, float, str]]]:
    """Per CUDA stream its kernels (start us, duration us, name) in a profiler's Chrome trace."""
    out: Dict[int, List[Tuple[float, float, str]]] = defaultdict(list)
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "kernel" and ev.get("ph") == "X":
            out[int(ev.get("args", {}).get("stream", -1))].append((float(ev["ts"]), float(ev["dur"]), str(ev["name"])))
    for kernels in out.values():
        kernels.sort()
    return out


def split_steps(kernels: List[Tuple[float, float, str]], per_step: int) -> List[List[Tuple[float, float, str]]]:
    """``kernels`` (one stream's, in order) cut into steps of ``per_step`` kernels each."""
    return [kernels[i:i + per_step] for i in range(0, len(kernels) - per_step + 1, per_step)]


def step_summary(steps: List[List[Tuple[float, float, str]]]) -> Dict[str, Any]:
    """Mean per step: GPU us per kernel name, the kernels' sum, the step's span and its gaps."""
    by_name: Dict[str, float] = defaultdict(float)
    total = span = 0.0
    for step in steps:
        for _, dur, name in step:
            by_name[name[:NAME_CHARS]] += dur
        total += sum(d for _, d, _ in step)
        span += step[-1][0] + step[-1][1] - step[0][0]
    n = max(len(steps), 1)
    return {"steps": len(steps), "kernels_us": total / n, "span_us": span / n, "gaps_us": (span - total) / n,
            "by_kernel_us": {k: v / n for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])}}


def kernel_class(name: str) -> str:
    """One of :data:`CLASSES` for a kernel name."""
    if name.startswith("nvjet") or "cublasLt" in name or "gemm" in name.lower():
        return "weights"
    if name in ("_paged_attention_kernel", "_combine_kernel"):
        return "attention"
    return "small"


def class_lines(alone: Dict[str, Any], beside: Dict[str, Any]) -> List[str]:
    """Per kernel class (:func:`kernel_class`): us a step alone and beside, the ratio, and its part
    of the step's kernel time alone."""
    sums = {label: defaultdict(float) for label in ("alone", "beside")}
    for label, summary in (("alone", alone), ("beside", beside)):
        for name, us in summary["by_kernel_us"].items():
            sums[label][kernel_class(name)] += us
    lines = []
    for c in CLASSES:
        a, b = sums["alone"][c], sums["beside"][c]
        part = a / alone["kernels_us"] if alone["kernels_us"] > 0 else float("nan")
        lines.append(_row("class " + c, a, b) + f"  ({100 * part:.0f}% of the step alone)")
    return lines


def _row(label: str, alone_us: float, beside_us: float) -> str:
    """One line of the report: ``label``, the microseconds alone and beside, their ratio."""
    ratio = beside_us / alone_us if alone_us > 0 else float("nan")
    return f"{label:<{NAME_CHARS}}  {alone_us:>8.1f}  {beside_us:>9.1f}  {ratio:>5.2f}"


def compare(alone: Dict[str, Any], beside: Dict[str, Any]) -> List[str]:
    """The report's lines: per kernel name alone / beside us a step and the ratio, then the totals."""
    lines = [f"{'kernel':<{NAME_CHARS}}  alone us  beside us  ratio"]
    lines += [_row(name, us, beside["by_kernel_us"].get(name, 0.0)) for name, us in alone["by_kernel_us"].items()]
    lines += class_lines(alone, beside)
    lines += [_row("step " + key[:-3], alone[key], beside[key]) for key in ("kernels_us", "gaps_us", "span_us")]
    return lines


def _profiled(torch: Any, run: Any) -> dict:
    """The Chrome trace of ``run()`` under PyTorch's profiler (CUDA kernels where there is a GPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        run()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)


def measure(torch: Any, llms: List[tuple], shares: List[float], batch: int, context: int, steps: int
            ) -> Dict[str, Any]:
    """The first LLM's decode steps alone and beside the second's, kernel by kernel."""
    max_blocks = (context + 4 * steps + 64) // 16 + 2
    engine = eb._engine(torch, llms, shares, True, batch, max_blocks)
    run = eb._Steps(torch, engine, batch, context, 1)
    for _ in range(3):  # warm both up outside the profile
        run.finish(0, run.launch(0))
        run.finish(1, run.launch(1))

    def alone() -> None:
        for _ in range(steps):
            run.finish(0, run.launch(0))

    def beside() -> None:
        for _ in range(steps):
            other = run.launch(1)
            run.finish(0, run.launch(0))
            run.finish(1, other)

    traces = {"alone": _profiled(torch, alone), "beside": _profiled(torch, beside)}
    alone_streams = stream_kernels(traces["alone"])
    if not alone_streams:  # no kernel recorded (the CPU)
        return {"mechanism": engine.mechanism, "sm_counts": engine.sm, "alone": step_summary([]),
                "beside": step_summary([])}
    victim = max(alone_streams, key=lambda s: len(alone_streams[s]))  # the only stream busy alone
    per_step = len(alone_streams[victim]) // steps
    summaries = {label: step_summary(split_steps(stream_kernels(tr).get(victim, []), per_step))
                 for label, tr in traces.items()}
    return {"mechanism": engine.mechanism, "sm_counts": engine.sm, "kernels_per_step": per_step, **summaries}


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("instance", nargs="?", help="LLM instance JSON whose models are built "
                                                "(instances/fidelity-llm/poisson.json)")
    ap.add_argument("-o", "--output", help="JSON file to write")
    ap.add_argument("--models", help="VICTIM,OTHER: the LLM whose kernels are read and the one beside")
    ap.add_argument("--shares", help="their SM shares, e.g. 0.25,0.75")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the comparison of outputs written before "
                                                               "(no GPU needed) instead of measuring")
    ap.add_argument("--batch", type=int, default=16, help="requests per decode step (default 16)")
    ap.add_argument("--context", type=int, default=512, help="tokens of every request's context (default 512)")
    ap.add_argument("--steps", type=int, default=20, help="profiled steps alone and beside (default 20)")
    args = ap.parse_args(argv)
    if args.report:
        for path in args.report:
            with open(path) as f:
                data = json.load(f)
            print(f"== {os.path.basename(path)}: {data['models'][0]} at {data['shares'][0]:g} beside "
                  f"{data['models'][1]} at {data['shares'][1]:g}, SMs {data['sm_counts']}, batch {data['batch']}")
            print("\n".join(compare(data["alone"], data["beside"])))
        return
    if not (args.instance and args.output and args.models and args.shares):
        ap.error("INSTANCE, -o, --models and --shares are needed to measure (or --report JSON...)")
    try:
        llms = eb._architectures(args.instance, [m for m in args.models.split(",") if m])
        if len(llms) != 2:
            raise ValueError(f"--models: two LLMs (the one read, the one beside), got {len(llms)}")
        shares = eb._shares(args.shares, 0.0, 2)
    except ValueError as e:
        ap.error(str(e))
    import torch

    out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
           "models": [n for n, _ in llms], "shares": shares, "batch": args.batch, "context": args.context,
           **measure(torch, llms, shares, args.batch, args.context, args.steps)}
    print("\n".join(compare(out["alone"], out["beside"])))
    atomic_write_text(args.output, json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
