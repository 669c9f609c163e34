"""A decode step's time by what ran beside it, on the GPU and in the simulator (``--job-trace`` runs).

``job_timeline.py`` gives each LLM's mean decode step, measured and simulated. This script splits
the steps of both timelines of a run (the trace, and the simulator's own timeline of the same
requests with the run's generation and calibration, ``--set FIELD=VALUE`` changing a field) by
what ran on their mesh while they did, each step taking the first that holds:

* ``own``: its own LLM's prefill beside it for at least half its GPU time (they share the LLM's
  SM partition);
* ``prefill``: other LLMs' prefills for at least half its time;
* ``decodes``: other LLMs' jobs for at least half its time, prefills for under a twentieth;
* ``alone``: other jobs for under a twentieth of its time;
* ``mixed``: the rest.

Per LLM and class it prints the part of the LLM's steps in the class and the median of a step's
GPU time over its table time at its batch and longest context (``x table``: the stretch the
co-running jobs give it, the batch taken out), measured | simulated. ``--summary`` ends with the
same per LLM and class over all the runs given, steps pooled: where the simulator's steps are
longer than the GPU's, and beside what.

Usage: python benchmarks/fidelity/llm/decode_beside.py RESULTS/RUN... [--set FIELD=VALUE ...] [--summary]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity

import llm_fidelity as fid  # noqa: E402

#: the classes, in the order a step is tested for them (module docstring)
CLASSES = ("own", "prefill", "decodes", "alone", "mixed")
#: the part of a step's time that puts it in ``own`` / ``prefill`` / ``decodes``
MOST = 0.5
#: the part under which other jobs (``alone``) or prefills (``decodes``) count as none
NONE = 0.05

#: per (LLM, class): every step's GPU time over its table time
Stretches = Dict[Tuple[str, str], List[float]]


def step_class(own: float, prefill: float, other: float) -> str:
    """The class of a decode step that ran its own LLM's prefill beside it ``own`` of its GPU
    time, other LLMs' prefills ``prefill`` and other LLMs' jobs of any kind ``other``."""
    if own >= MOST:
        return "own"
    if prefill >= MOST:
        return "prefill"
    if other >= MOST and own + prefill < NONE:
        return "decodes"
    if own + other < NONE:
        return "alone"
    return "mixed"


def overlaps(jobs: List[dict], i: int, near: Sequence[int]) -> Tuple[float, float, float]:
    """The parts of job ``i``'s GPU time that its own LLM's prefills, other LLMs' prefills and
    other LLMs' jobs of its mesh ran beside it (``near``: indices of the mesh's jobs that may
    overlap it; each overlapping job counted once, so two at once count twice)."""
    a, b = jobs[i]["device_start_s"], jobs[i]["device_end_s"]
    own = prefill = other = 0.0
    for k in near:
        j = jobs[k]
        if k == i:
            continue
        o = min(b, j["device_end_s"]) - max(a, j["device_start_s"])
        if o <= 0:
            continue
        if j["llm"] == jobs[i]["llm"]:
            own += o if j["kind"] == "prefill" else 0.0
        else:
            other += o
            prefill += o if j["kind"] == "prefill" else 0.0
    took = b - a
    return own / took, prefill / took, other / took


def stretches(run: dict, jobs: List[dict]) -> Stretches:
    """Per (LLM, class) the GPU time over table time of every decode step of ``jobs`` (a trace's
    rows or the simulator's timeline as rows)."""
    table = fid.traced_table_seconds(run, jobs)
    by_group: Dict[int, List[int]] = defaultdict(list)
    for i in sorted(range(len(jobs)), key=lambda i: jobs[i]["device_start_s"]):
        by_group[jobs[i]["group"]].append(i)
    out: Stretches = defaultdict(list)
    for idx in by_group.values():
        starts = np.array([jobs[i]["device_start_s"] for i in idx])
        longest = max((jobs[i]["device_end_s"] - jobs[i]["device_start_s"] for i in idx), default=0.0)
        for i in idx:
            j = jobs[i]
            took = j["device_end_s"] - j["device_start_s"]
            if j["kind"] != "decode" or took <= 0 or table[i] <= 0:
                continue
            lo = int(np.searchsorted(starts, j["device_start_s"] - longest))
            hi = int(np.searchsorted(starts, j["device_end_s"]))
            cls = step_class(*overlaps(jobs, i, idx[lo:hi]))
            out[(j["llm"], cls)].append(took / table[i])
    return out


def lines_for(measured: Stretches, simulated: Stretches) -> List[str]:
    """Per LLM and class: the part of the LLM's steps in the class and the median stretch,
    measured | simulated."""
    lines = ["llm       class     steps meas / sim   part meas / sim   x table meas / sim   sim/meas"]
    for llm in sorted({k[0] for k in measured} | {k[0] for k in simulated}):
        total = {x: sum(len(v) for k, v in d.items() if k[0] == llm) for x, d in (("m", measured), ("s", simulated))}
        for cls in CLASSES:
            m, s = measured.get((llm, cls), []), simulated.get((llm, cls), [])
            if not m and not s:
                continue
            med_m = float(np.median(m)) if m else float("nan")
            med_s = float(np.median(s)) if s else float("nan")
            lines.append(f"{llm:<9} {cls:<8} {len(m):>7} / {len(s):<7}  {len(m) / max(total['m'], 1):6.3f} / "
                         f"{len(s) / max(total['s'], 1):<6.3f}   {med_m:7.3f} / {med_s:<7.3f}   {med_s / med_m:7.3f}")
    return lines


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    fid.add_trace_arguments(ap)
    ap.add_argument("--summary", action="store_true", help="end with the classes over all the runs, steps pooled")
    args = ap.parse_args(argv)
    runs, overrides = fid.trace_script_inputs(ap, args.runs, args.overrides)
    pooled: Tuple[Stretches, Stretches] = (defaultdict(list), defaultdict(list))
    for spec, run in runs:
        inst = fid.traced_instance(run, overrides)
        measured = stretches(run, fid.traced_jobs(run))
        simulated = stretches(run, fid.simulated_run_rows(run, inst)[0])
        print("\n".join([f"== {spec}" + (f" with {overrides}" if overrides else "")] + lines_for(measured, simulated)),
              flush=True)
        for into, got in zip(pooled, (measured, simulated)):
            for k, v in got.items():
                into[k].extend(v)
    if args.summary:
        print(f"over {len(runs)} runs, steps pooled")
        print("\n".join(lines_for(*pooled)))


if __name__ == "__main__":
    main()
