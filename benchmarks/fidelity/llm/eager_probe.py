"""Where an eager prefill's launch spends its host time (the engine's prefills over the graph limit).

The job trace (docs/fidelity-llm.md "The job trace") measured the scheduling thread held
55-115 ms by each eager prefill launch (a prompt over ``PREFILL_GRAPH_TOKENS``), on SM
partitions and on plain streams alike, for every model (16 to 32 layers) and prompt length: not
a per-kernel cost. This probe builds the executor's :class:`~placement_opt.executor.llm_engine.MeshEngine`
with one LLM of the fidelity instance, launches eager prefills of several lengths (each twice,
a fresh request each time) and prints per launch its host seconds, the caching allocator's
device allocations (``cudaMalloc`` calls: segments) and frees it made during it, and its
allocation retries (a retry frees the cache and synchronises the device); then the top host
operations of one launch under ``torch.profiler``.

Usage (GPU): python benchmarks/fidelity/llm/eager_probe.py instances/fidelity-llm/measured/code.json
    [--model llm-1b] [--share 0.2] [--lengths 1100,2048,4000] [-o out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List

import torch

from placement_opt.executor.llm_engine import MeshEngine
from placement_opt.executor.llm_sched import PREFILL, Job
from placement_opt.model import Architecture

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_bench import _engine  # noqa: E402  (the micro-benchmark's warmed-up engine)

ALLOCATOR_KEYS = ("segment.all.allocated", "segment.all.freed", "num_alloc_retries", "num_device_alloc",
                  "num_device_free")


def _allocator() -> Dict[str, int]:
    stats = torch.cuda.memory_stats()
    return {k: int(stats.get(k, 0)) for k in ALLOCATOR_KEYS}


def probe(engine: MeshEngine, lengths: List[int]) -> List[Dict[str, Any]]:
    """Per length, two eager prefill launches (fresh requests): host ms and allocator deltas."""
    out, r = [], 5000
    for n in lengths:
        for repeat in range(2):
            r += 1
            engine.sync()
            before = _allocator()
            t0 = time.perf_counter()
            engine.launch(Job(PREFILL, 0, [r], [n]))
            host = time.perf_counter() - t0
            after = _allocator()
            engine.finish(PREFILL, 0)
            engine.sync()
            wall = time.perf_counter() - t0
            engine.release(0, r, True)
            out.append({"tokens": n, "repeat": repeat, "host_ms": round(host * 1e3, 2), "wall_ms": round(wall * 1e3, 2),
                        **{k: after[k] - before[k] for k in ALLOCATOR_KEYS}})
            print(out[-1], flush=True)
    return out


def profile_one(engine: MeshEngine, n: int) -> str:
    """The top host operations of one eager launch of ``n`` tokens (``torch.profiler``)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    engine.sync()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        engine.launch(Job(PREFILL, 0, [9999], [n]))
    engine.finish(PREFILL, 0)
    engine.sync()
    engine.release(0, 9999, True)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("instance")
    ap.add_argument("--model", default="llm-1b")
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--lengths", default="1100,2048,4000")
    ap.add_argument("-o", "--output", default=None)
    args = ap.parse_args()
    with open(args.instance) as f:
        arch = next(Architecture(**m["architecture"]) for m in json.load(f)["models"] if m["name"] == args.model)
    lengths = [int(x) for x in args.lengths.split(",")]
    result: Dict[str, Any] = {"model": args.model, "share": args.share}
    for green in (True, False):
        longest = max(lengths)  # start-up runs it once: the probe's longest length is not met new
        engine = _engine(torch, [(args.model, arch)], args.share, green, 1, (longest + 16) // 16, longest)
        label = engine.mechanism
        print(f"== {label} ({engine.sm} SMs)", flush=True)
        result[label] = {"launches": probe(engine, lengths)}
        table = profile_one(engine, lengths[0] + 7)
        print(table, flush=True)
        result[label]["profile"] = table
        del engine
        torch.cuda.empty_cache()
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
