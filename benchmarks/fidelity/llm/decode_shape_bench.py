"""Decode-step GPU time on one whole GPU by batch and by how the batch's contexts spread.

The cost tables time a decode step of ``b`` requests, every one at one context, at the
CUDA-graph batch buckets (1, 2, 4, ..., 32); the engine replays the graph of the smallest bucket
that holds its batch, and a serving batch mixes contexts (in the H200 runs its longest request
holds 2.2-2.8 x the mean context at batches of 17-32). The job traces show the step's GPU time
against the simulator's reading of the table moving in a sawtooth over the batch (up to +5% just
past a bucket, -5% at the next one; docs/fidelity-llm.md), differently for an LLM with 32 KV
heads and one with 8. This benchmark times the engine's own decode step
(:class:`~placement_opt.executor.llm_engine.MeshEngine`, every LLM of the instance holding the
whole GPU on plain streams) for every batch in ``--batches`` under context patterns of one mean:

* ``uniform``: every request at ``--context`` (the table's setting; at a bucket batch it is the
  table's own point);
* ``spread``: contexts evenly spaced from 16 to ``2 x context - 16`` (longest about 2 x mean);
* ``one-long``: one request at ``--long`` tokens, the others at the context that keeps the mean
  (at least 16 tokens: at small batches the mean then rises, and the row records it).

Each figure is the median GPU time (CUDA events on the LLM's decode stream) of ``--steps``
steps after three warm-up steps, the contexts growing one token a step. The KV blocks are
reserved but not filled by prefills: a decode step reads the same bytes whatever they hold.

Usage (GPU): python benchmarks/fidelity/llm/decode_shape_bench.py instances/fidelity-llm/h200g4s14/poisson.json -o shape.json
(without a GPU it runs on the CPU with wall-clock timing, as a smoke test of the benchmark itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_bench import _architectures, _engine, _event  # noqa: E402  (the engine built as there)

PATTERNS = ("uniform", "spread", "one-long")


def contexts(pattern: str, n: int, context: int, long: int) -> List[int]:
    """The ``n`` contexts of ``pattern`` (module docstring), all of mean about ``context``."""
    if pattern == "uniform" or n == 1:
        return [context] * n
    if pattern == "spread":
        lo, hi = 16, 2 * context - 16
        return [round(lo + (hi - lo) * i / (n - 1)) for i in range(n)]
    if pattern == "one-long":
        rest = max(16, round((n * context - long) / (n - 1)))
        return [long] + [rest] * (n - 1)
    raise ValueError(f"unknown pattern {pattern!r}")


def step_ms(torch: Any, engine: Any, k: int, requests: List[int], ctx: List[int], steps: int) -> float:
    """Median GPU ms of LLM k's decode step of ``requests`` at contexts ``ctx`` (growing)."""
    from placement_opt.executor.llm_sched import DECODE, Job

    stream = engine.llms[k].streams[1]
    times = []
    now = list(ctx)
    for i in range(steps + 3):
        start, end = _event(torch), _event(torch)
        start.record(stream)
        engine.launch(Job(DECODE, k, requests, now))
        end.record(stream)
        end.synchronize()
        engine.finish(DECODE, k)
        now = [c + 1 for c in now]
        if i >= 3:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(torch: Any, llms: List[tuple], batches: List[int], context: int, long: int, steps: int
            ) -> List[Dict[str, Any]]:
    """One row per (LLM, pattern, batch): its contexts' mean and longest and the step's GPU ms."""
    top = max(batches)
    longest = max(long, 2 * context) + steps + 8
    engine = _engine(torch, llms, 1.0, False, top, math.ceil((longest + 16) / 16))
    rows = []
    for k, (name, _) in enumerate(llms):
        for p, pattern in enumerate(PATTERNS):
            for n in batches:
                requests = [k * 100000 + p * 1000 + n * 40 + i for i in range(n)]
                ctx = contexts(pattern, n, context, long)
                ms = step_ms(torch, engine, k, requests, ctx, steps)
                for r in requests:
                    engine.release(k, r, True)
                rows.append({"model": name, "pattern": pattern, "batch": n, "mean_context": sum(ctx) / n,
                             "longest_context": max(ctx), "gpu_ms": round(ms, 5)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance", help="LLM instance JSON whose models are built")
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--batches", default="1,2,4,6,8,9,12,16,17,20,24,28,32",
                    help="comma-separated batch sizes (default 1,2,4,6,8,9,12,16,17,20,24,28,32)")
    ap.add_argument("--context", type=int, default=480, help="mean context of every pattern (default 480)")
    ap.add_argument("--long", type=int, default=1600, help="the long request's context in one-long (default 1600)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per figure (median; default 20)")
    ap.add_argument("--models", default="", help="comma-separated LLM names to time (default: all)")
    args = ap.parse_args()
    import torch

    llms = _architectures(args.instance)
    if args.models:
        keep = args.models.split(",")
        llms = [m for m in llms if m[0] in keep]
    batches = [int(b) for b in args.batches.split(",")]
    rows = measure(torch, llms, batches, args.context, args.long, args.steps)
    out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
           "torch": torch.__version__, "instance": args.instance, "context": args.context, "long": args.long,
           "steps": args.steps, "rows": rows}
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
