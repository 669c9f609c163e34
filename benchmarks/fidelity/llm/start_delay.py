"""A job's GPU start held back until another LLM's job ends (measured on the job traces).

The executor launches each job on its LLM's own stream, so its GPU work should start as soon
as the launch call returns: the trace's ``device_start_s`` is then at or before its
``launched_s``. The five-LLM runs of engine generation v3h (the job's tokens copied back to a
pinned host buffer on its stream, ``llm_engine.MeshEngine.launch``) show jobs whose start
waits several milliseconds past the launch and comes a few microseconds after another LLM's
job on the same GPU ends: the GPU ran them one after the other, where the simulator (and the
engine before) ran them side by side. This counts them per run:

* ``delayed``: jobs whose GPU start came more than :data:`DELAY_S` after their launch returned;
* ``held``: those of them that started within :data:`HELD_S` of another LLM's job's end on
  the same mesh (the job they waited for);
* ``held s``: the seconds those jobs waited (start minus launch), summed;
* per kind, the 90th percentile of start minus launch (ms; negative: the GPU began before the
  launch call returned).

Usage: python benchmarks/fidelity/llm/start_delay.py [FOLDER ...] [-o report.txt]
(default: the one-GPU H200 families of ``beside_decode.default_folders``)
"""

from __future__ import annotations

import argparse
import bisect
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: the fidelity report's readers
sys.path.insert(0, HERE)

import beside_decode  # noqa: E402
import llm_fidelity as lf  # noqa: E402

from placement_opt.io import atomic_write_text  # noqa: E402

#: a job counts as delayed when its GPU start comes this long after its launch returned
DELAY_S = 1e-3
#: a delayed job counts as held by another when it starts within this long after that one's end
HELD_S = 1e-4


def start_delays(jobs: List[dict]) -> Dict[str, float]:
    """The counts of the module docstring over the rows of one job trace (``traced_jobs``)."""
    ends: Dict[int, List[tuple]] = {}
    for j in jobs:
        ends.setdefault(j["group"], []).append((j["device_end_s"], j["llm"], j["kind"]))
    times = {}
    for g, rows in ends.items():
        rows.sort()
        times[g] = [r[0] for r in rows]
    out = {"jobs": len(jobs), "delayed": 0, "held": 0, "held_s": 0.0}
    waits: Dict[str, List[float]] = {"decode": [], "prefill": []}
    for j in jobs:
        wait = j["device_start_s"] - j["launched_s"]
        waits[j["kind"]].append(wait)
        if wait <= DELAY_S:
            continue
        out["delayed"] += 1
        rows, t = ends[j["group"]], times[j["group"]]
        i = bisect.bisect_right(t, j["device_start_s"]) - 1
        while i >= 0 and rows[i][1] == j["llm"]:  # its own LLM's jobs end before it on their own stream
            i -= 1
        if i >= 0 and j["device_start_s"] - t[i] <= HELD_S:
            out["held"] += 1
            out["held_s"] += wait
    for kind, w in waits.items():
        out[f"{kind}_p90_ms"] = 1e3 * float(np.percentile(w, 90)) if w else float("nan")
    return out


def run_lines(folders: Sequence[str]) -> List[str]:
    """One line per whole traced run on SM partitions of ``folders`` (``beside_decode.traced_on_partitions``)
    and, per engine generation, the share of its jobs held."""
    out = [f"{'run':<58} {'jobs':>6} {'delayed':>8} {'held':>6} {'held s':>7} {'p90 decode':>10} {'p90 prefill':>11}"]
    per_gen: Dict[str, List[int]] = {}
    for folder in folders:
        for run in lf.load_runs(folder):
            if not beside_decode.traced_on_partitions(run):
                continue
            c = start_delays(lf.traced_jobs(run))
            name = f"{os.path.basename(run['folder'])}/{run['name']}"
            out.append(f"{name:<58} {c['jobs']:>6} {c['delayed']:>8} {c['held']:>6} {c['held_s']:>7.2f} "
                       f"{c['decode_p90_ms']:>10.2f} {c['prefill_p90_ms']:>11.2f}")
            gen = os.path.basename(run["folder"]).split("-")[1]
            acc = per_gen.setdefault(gen, [0, 0, 0])
            acc[0] += 1
            acc[1] += c["jobs"]
            acc[2] += c["held"]
    for gen, (runs, jobs, held) in sorted(per_gen.items()):
        out.append(f"{gen}: {runs} runs, {held} of {jobs} jobs held by another LLM's job ({100 * held / jobs:.2f}%)")
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", help="results folders (default: the H200 partition families)")
    ap.add_argument("-o", "--out", help="write the report here too (atomically)")
    args = ap.parse_args(argv)
    folders = [os.path.join(lf.LLM, f) if not os.path.isabs(f) else f for f in args.folders] or beside_decode.default_folders()
    text = "\n".join(run_lines(folders))
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
