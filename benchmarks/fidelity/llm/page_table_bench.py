"""Host time the LLM engine spends filling a decode step's inputs, by pages per block.

A mesh's KV pool is cut into pages of the gcd of its LLMs' block unit counts
(:func:`~placement_opt.llm_units.page_units`), so an LLM colocated with others
holds each block as several pages (``pages_per_block``: 1 alone on its mesh, up to 32 for a
LLaMA-7B shape beside smaller LLMs) and every decode step builds its page table on the host
(:meth:`~placement_opt.executor.llm_kvcache.DecodeInputs.fill`): one entry per page of every
block of every request of the step. This script times that fill for the meshes of the
fidelity runs (``instances/fidelity-llm``: the five LLMs on one GPU, the 2-GPU and the 4-GPU
sets at TP 1, 2 and 4), at batch sizes and contexts like the runs', in ``--procs`` processes at
once (a TP mesh's ranks each fill their own inputs on the same host), and prints the time per
fill and per page entry (docs/fidelity-llm.md, "The decode step's page table"). On a GPU
(``--device cuda``) the host buffer is pinned and the copy asynchronous, as in the engine.

    python benchmarks/fidelity/llm/page_table_bench.py [--device cuda] [--procs 4] [--out FILE]

``--out`` keeps every fill and ``per_entry_ns`` (the median over the processes of each one's
slope), which ``benchmarks/llm_fidelity.py`` reads as ``llm.decode_page_entry_s``
(``page-table/`` holds the H100 machine's runs).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

#: (instance whose models share one mesh, TP degree): the fidelity runs' multi-LLM meshes and a
#: one-LLM mesh (pages per block 1) as the reference
MESHES = (("instances/fidelity-llm/measured/poisson.json", 1),
          ("instances/fidelity-llm/tp2/measured/poisson.json", 2),
          ("instances/fidelity-llm/gpu4/measured/poisson.json", 4))
BATCHES = (4, 16, 32)
CONTEXTS = (256, 1024)
REPEATS = 200


def _cases() -> List[Tuple[str, int, str, int, int]]:
    """(instance, TP, model, batch, context) of every timed fill."""
    from placement_opt import load_instance

    out = []
    for path, tp in MESHES:
        inst = load_instance(os.path.join(ROOT, path))
        for m in inst.models:
            for b in BATCHES:
                for c in CONTEXTS:
                    out.append((path, tp, m.name, b, c))
    return out


def _time_fills(device_name: str, cases: List[Tuple[str, int, str, int, int]], alone: bool) -> List[dict]:
    """Time :meth:`DecodeInputs.fill` for every case (median of ``REPEATS`` fills); ``alone``:
    the LLM on a mesh of its own (one page per block) instead of with its instance's LLMs."""
    import torch

    from placement_opt import load_instance
    from placement_opt.executor.llm_engine import buckets
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache
    from placement_opt.llm_units import page_units, pages_per_block

    device = torch.device(device_name)
    rows = []
    for path, tp, name, batch, context in cases:
        archs = {m.name: m.architecture for m in load_instance(os.path.join(ROOT, path)).models}
        arch = archs[name]
        mesh = [arch] if alone else list(archs.values())
        page, per_block = page_units(mesh, tp), pages_per_block(arch, mesh, tp)
        blocks = (context + 16) // 16  # the blocks of the step's next token
        pool = KVPool(batch * blocks * per_block + 1, page, 16, 1, device, torch.float16)
        cache = LLMCache(pool, arch, tp)
        for r in range(batch):
            cache.ensure(r, blocks)
        n_blocks = next(x for x in buckets(4096) if x >= blocks)
        inputs = DecodeInputs(cache, next(x for x in buckets(32) if x >= batch), n_blocks)
        requests, tokens, positions = list(range(batch)), [1] * batch, [context] * batch
        times = []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            inputs.fill(requests, tokens, positions)
            times.append(time.perf_counter() - t0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rows.append({"instance": path, "tp": tp, "model": name, "batch": batch, "context": context,
                     "alone": alone, "pages_per_block": per_block, "entries": batch * blocks * per_block,
                     "fill_ms": 1e3 * statistics.median(times)})
    return rows


def _worker(device_name: str, cases: list, out: "mp.Queue") -> None:
    out.put(_time_fills(device_name, cases, False) + _time_fills(device_name, cases, True))


def per_entry_ns(rows: List[dict]) -> float:
    """The least-squares slope of fill time on page entries over pairs of the same step shared
    and alone (the alone fill holds the rest of the step's work): ns per extra page entry."""
    alone = {(r["instance"], r["model"], r["batch"], r["context"]): r for r in rows if r["alone"]}
    dx, dy = [], []
    for r in rows:
        a = alone.get((r["instance"], r["model"], r["batch"], r["context"]))
        if not r["alone"] and a is not None and r["entries"] > a["entries"]:
            dx.append(r["entries"] - a["entries"])
            dy.append(r["fill_ms"] - a["fill_ms"])
    return 1e6 * sum(x * y for x, y in zip(dx, dy)) / sum(x * x for x in dx) if dx else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (pinned host buffer, asynchronous copy)")
    ap.add_argument("--procs", type=int, default=1, help="processes filling at once (a TP mesh's ranks)")
    ap.add_argument("--out", default=None, help="write every timed fill to this JSON file")
    args = ap.parse_args()
    cases = _cases()
    ctx = mp.get_context("spawn")
    queue: "mp.Queue" = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(args.device, cases, queue)) for _ in range(args.procs)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    rows = results[0]
    for r in rows:
        if not r["alone"]:
            print(f"tp {r['tp']} {r['model']:9s} batch {r['batch']:2d} context {r['context']:4d}: "
                  f"{r['pages_per_block']:2d} pages per block, {r['entries']:6d} entries, fill {r['fill_ms']:.3f} ms")
    per_entry = statistics.median(per_entry_ns(res) for res in results)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"device": args.device, "procs": args.procs, "per_entry_ns": round(per_entry, 2),
                       "rows": results}, f, indent=1)
        os.replace(tmp, args.out)
    print(f"per_entry_ns={per_entry:.1f} procs={args.procs} device={args.device}")


if __name__ == "__main__":
    main()
