"""Where a decode step's host time goes: the engine's ``launch`` and ``finish``, against a baseline engine.

The job traces put a decode launch's host time at 0.13-0.45 ms a step on an H200 (each LLM's
median per run) and the engine micro-benchmark at 0.25 ms for ``llm-8b`` at 16 requests, against
a GPU step of 2-10 ms; near saturation that time, which moves with the machine's host pace, sets
the mean TTFT (docs/fidelity-llm.md). This builds the executor's own
:class:`~placement_opt.executor.llm_engine.MeshEngine` with one of the fidelity instance's LLMs
at a time (a whole GPU, or an SM partition with ``--share``), its job trace on as in the fidelity
runs, and times the host seconds of ``launch`` and ``finish`` of ``--steps`` back-to-back decode
steps per batch (median). With ``--baseline FILE`` (an earlier revision's ``llm_engine.py``, e.g.
``git show REV:placement_opt/executor/llm_engine.py > FILE``) it builds that engine too, the two
taking one step each in turn, and prints each point's ratio new / baseline: both in the same run
and the same seconds, so the machine's pace, which moves up to 2 x within seconds, falls on both
alike.
``--profile`` adds a ``cProfile`` pass of the engine's steps (the functions by own time).

Usage (GPU): python benchmarks/fidelity/llm/launch_host_bench.py instances/fidelity-llm/poisson.json \
  -o launch-host.json [--baseline old_engine.py --models llm-1b,llm-8b --batches 1,16,32 --share 1]
(without a GPU it runs on the CPU, where jobs run inside ``launch``: a smoke test only).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import sys
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import engine_bench as eb  # noqa: E402

#: decode steps run before the timed ones (graphs and caches warm)
WARM_STEPS = 3


def load_engine_class(path: str) -> Any:
    """``MeshEngine`` of the engine module at ``path`` (its own imports resolve in the installed package)."""
    spec = importlib.util.spec_from_file_location("baseline_llm_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.MeshEngine


def _profile_rows(prof: cProfile.Profile, steps: int, top: int) -> List[Dict[str, Any]]:
    """The ``top`` functions by own time per step (microseconds, with cProfile's overhead), with their cumulative time."""
    rows = [{"function": f"{os.path.basename(path)}:{line}:{name}", "calls_per_step": calls / steps,
             "own_us": 1e6 * own / steps, "cumulative_us": 1e6 * cum / steps}
            for (path, line, name), (_, calls, own, cum, _) in pstats.Stats(prof).stats.items()]
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def _engines(torch: Any, arch: tuple, batch: int, args: argparse.Namespace, classes: List[Any]) -> List[Any]:
    """One warmed-up engine per class in ``classes`` (None: the executor's) with ``arch`` alone at
    ``args.share``, its job trace on as in the fidelity runs, and each one's decode stepper."""
    max_blocks = (args.context + args.steps * (2 if args.profile else 1) + WARM_STEPS + 64) // 16 + 1
    out = []
    for cls in classes:
        engine = eb._engine(torch, [arch], args.share, args.share < 1.0, batch, max_blocks, longest=args.context,
                            engine_class=cls)
        engine.trace.begin()  # the fidelity runs trace their jobs: time the traced path
        out.append(eb._Steps(torch, engine, batch, args.context, batch))
    return out


def _step(timer: Any) -> tuple:
    """One decode step of the stepper's LLM: (launch host s, finish host s, GPU s)."""
    ev = timer.launch(0)
    fin = timer.finish(0, ev)
    return ev[2], fin, ev[0].elapsed_time(ev[1]) / 1e3


def point(torch: Any, arch: tuple, batch: int, args: argparse.Namespace, baseline: Optional[Any]) -> Dict[str, Any]:
    """One (LLM, batch): the engine's ``launch`` and ``finish`` host microseconds and GPU
    milliseconds (median and 10th percentile over ``args.steps``) and, with ``baseline``, the
    baseline engine's, the two stepping in turn (one step each, over and over), so both meet
    the same moments of the machine's pace; their ratios (of the medians). With ``args.profile``
    a cProfile pass of as many steps of the engine (its functions by own time)."""
    names = ["engine"] + (["baseline"] if baseline is not None else [])
    timers = _engines(torch, arch, batch, args, [None] + ([baseline] if baseline is not None else []))
    samples: Dict[str, List[tuple]] = {n: [] for n in names}
    for i in range(args.steps + WARM_STEPS):
        for name, timer in zip(names, timers):
            t = _step(timer)
            if i >= WARM_STEPS:
                samples[name].append(t)
    row: Dict[str, Any] = {"model": arch[0], "batch": batch, "context": args.context, "share": args.share}
    for name in names:
        launch, finish, gpu = (sorted(x) for x in zip(*samples[name]))
        row[name] = {"launch_us": 1e6 * statistics.median(launch), "launch_p10_us": 1e6 * launch[len(launch) // 10],
                     "finish_us": 1e6 * statistics.median(finish), "gpu_ms": 1e3 * statistics.median(gpu)}
    if args.profile:
        prof = cProfile.Profile()
        for _ in range(args.steps):
            prof.enable()
            _step(timers[0])
            prof.disable()
        row["profile"] = _profile_rows(prof, args.steps, args.top)
    if baseline is not None:
        e, b = row["engine"], row["baseline"]
        row["ratio"] = {"launch": e["launch_us"] / b["launch_us"], "finish": e["finish_us"] / b["finish_us"],
                        "launch_plus_finish": (e["launch_us"] + e["finish_us"]) / (b["launch_us"] + b["finish_us"]),
                        "gpu": e["gpu_ms"] / b["gpu_ms"]}
    del timers
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def _line(row: Dict[str, Any]) -> str:
    e = row["engine"]
    text = (f"{row['model']} b{row['batch']} share {row['share']}: launch {e['launch_us']:.1f} us (p10 "
            f"{e['launch_p10_us']:.1f}) finish {e['finish_us']:.1f} us gpu {e['gpu_ms']:.3f} ms")
    if "ratio" in row:
        b, q = row["baseline"], row["ratio"]
        text += (f" | baseline launch {b['launch_us']:.1f} finish {b['finish_us']:.1f} gpu {b['gpu_ms']:.3f} | ratio "
                 f"launch {q['launch']:.3f} finish {q['finish']:.3f} launch+finish {q['launch_plus_finish']:.3f} "
                 f"gpu {q['gpu']:.3f}")
    return text


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("instance", help="LLM instance JSON whose models are built (instances/fidelity-llm/poisson.json)")
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--baseline", help="another engine module file (an earlier llm_engine.py) timed alike in this run")
    ap.add_argument("--models", default="llm-1b,llm-8b", help="LLMs of the instance, comma-separated")
    ap.add_argument("--batches", default="1,16,32", help="requests per decode step, comma-separated")
    ap.add_argument("--context", type=int, default=512, help="tokens of every request at the first step")
    ap.add_argument("--share", type=float, default=1.0, help="SM share (below 1: a green-context partition)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per engine and round (median)")
    ap.add_argument("--profile", action="store_true", help="a cProfile pass of the engine's steps per point")
    ap.add_argument("--top", type=int, default=15, help="functions the profile keeps")
    args = ap.parse_args(argv)
    import torch

    archs = {name: (name, a) for name, a in eb._architectures(args.instance)}
    baseline = load_engine_class(args.baseline) if args.baseline else None
    rows = []
    for name in args.models.split(","):
        for b in (int(x) for x in args.batches.split(",")):
            rows.append(point(torch, archs[name], b, args, baseline))
            print(_line(rows[-1]), flush=True)
            for p in rows[-1].get("profile", [])[:10]:
                print(f"    {p['own_us']:7.1f} us own {p['cumulative_us']:7.1f} cum {p['calls_per_step']:5.1f} x {p['function']}")
    if baseline is not None:
        lf = [r["ratio"]["launch_plus_finish"] for r in rows]
        print(f"launch+finish new/baseline: median {statistics.median(lf):.3f} (min {min(lf):.3f}, max {max(lf):.3f})")
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"device": device, "baseline": args.baseline, "args": vars(args), "rows": rows}, f, indent=1)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
