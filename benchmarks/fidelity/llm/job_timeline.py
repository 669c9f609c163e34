"""The engine's job timeline against the simulator's, job by job (``placeopt execute --job-trace``).

A run made with the job trace has ``jobs.csv``: every job the mesh leaders ran, when the host
launched it and when the GPU ran it. This script rebuilds the simulator's own timeline of the
same requests with the run's engine generation and its current calibration (the cost tables and
host and contention fields ``benchmarks/llm_fidelity.py`` re-predicts the run with;
``--set FIELD=VALUE`` changes a field) and prints, per LLM and job kind:

* ``jobs``: how many ran (measured / simulated);
* ``host ms``: the mean time the scheduling thread spent launching one (what the simulator's
  host model charges);
* ``GPU ms``: the mean time from its GPU start to its end (table time and contention);
* ``x table``: how much the co-running jobs slow it: the median of that time over the job's
  table time at its SM share, batch and longest context (a graph prefill's at its CUDA-graph
  bucket where the calibration times it so, ``llm.prefill_at_bucket``), by how many other jobs of its mesh
  ran beside it (time-weighted, rounded). The trace keeps no mean context, and the simulator
  adds to the table a decode step's KV read (on a whole GPU of a one-GPU mesh: its stretch and
  seconds per request instead) and a prefill's collect time, so a job alone shows
  a little over 1 (an eager prefill's GPU time also holds its launch: its kernels come one by
  one from the host);

then per LLM its requests' mean wait from arrival to their prefill's launch and from that
launch to the prefill's end (the two parts of the TTFT), and the mesh's scheduling thread busy
share. Where the measured and simulated columns part is where the simulator's model of the
engine is wrong (docs/fidelity-llm.md "The job trace").

``--summary`` ends with a row per LLM and job kind over all the runs given: the median over
runs (and the range) of the simulator's mean GPU time of a job over the measured one, of its
job count over the measured, and of their product, the GPU time of those jobs in all.

Usage: python benchmarks/fidelity/llm/job_timeline.py RESULTS/RUN... [--set FIELD=VALUE ...] [--summary]
(RESULTS a folder under benchmarks/fidelity/llm, RUN its run's sub-folder, e.g.
``results-v3p-trace-x3/poisson-x3-muxserve/adbs``).
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


def co_runners(jobs: List[dict]) -> List[float]:
    """Per job, the time-weighted number of other jobs of its mesh on the GPU while it ran."""
    out = [0.0] * len(jobs)
    by_group: Dict[str, List[int]] = defaultdict(list)
    for i, j in enumerate(jobs):
        by_group[j["group"]].append(i)
    for idx in by_group.values():
        edges = sorted([(jobs[i]["device_start_s"], 1) for i in idx] + [(jobs[i]["device_end_s"], -1) for i in idx])
        times = np.array([e[0] for e in edges])
        count = np.cumsum([e[1] for e in edges])
        for i in idx:
            a, b = jobs[i]["device_start_s"], jobs[i]["device_end_s"]
            if b <= a:
                continue
            lo, hi = np.searchsorted(times, a, side="right"), np.searchsorted(times, b, side="left")
            cuts = np.concatenate(([a], times[lo:hi], [b]))
            running = np.concatenate(([count[lo - 1]], count[lo:hi]))
            out[i] = float(np.dot(np.diff(cuts), running) / (b - a)) - 1.0
    return out


def prefill_waits(jobs: List[dict], requests: List[dict], first: Sequence[float], tolerance: float
                  ) -> Dict[str, Tuple[float, float]]:
    """Per LLM its requests' mean (arrival -> prefill launch, launch -> prefill end): each
    request matched to the prefill of its LLM collected at its first token ``first[i]`` (the
    measured within ``tolerance``: the leader stamps the token just before it collects the job)."""
    prefills: Dict[str, List[dict]] = defaultdict(list)
    for j in jobs:
        if j["kind"] == "prefill":
            prefills[j["llm"]].append(j)
    parts: Dict[str, List[Tuple[float, float]]] = defaultdict(list)
    for r, t in zip(requests, first):
        arrival = float(r["arrival_s"])
        match = [j for j in prefills[r["model"]] if j["launch_s"] >= arrival - 1e-9 and abs(j["seen_s"] - t) <= tolerance]
        if t >= 0 and match:
            j = min(match, key=lambda j: abs(j["seen_s"] - t))
            parts[r["model"]].append((j["launch_s"] - arrival, j["device_end_s"] - j["launch_s"]))
    return {m: tuple(np.mean(v, axis=0)) for m, v in parts.items()}


def _ms(x: float) -> str:
    return f"{1e3 * x:.2f}"


#: per (LLM, job kind): the simulator's mean GPU time of a job over the measured, its job count over the
#: measured (one run's, :func:`report`)
Ratios = Dict[Tuple[str, str], Tuple[float, float]]


def report(spec: str, run: dict, overrides: Dict[str, float]) -> Tuple[List[str], Ratios]:
    """The report's lines for ``run`` (a traced run, ``llm_fidelity.traced_run``; ``spec``:
    RESULTS/RUN), and its :data:`Ratios` for ``--summary``."""
    inst = fid.traced_instance(run, overrides)
    measured = fid.traced_jobs(run)
    simulated, simulated_first = fid.simulated_run_rows(run, inst)
    lines = [f"== {spec}" + (f" with {overrides}" if overrides else "")]
    stats = {}
    for label, jobs in (("measured", measured), ("simulated", simulated)):
        tab, co = fid.traced_table_seconds(run, jobs, bool(inst.llm_settings.prefill_at_bucket)), co_runners(jobs)
        by: Dict[Tuple[str, str], List[Tuple[float, float, float, float]]] = defaultdict(list)
        for j, t, c in zip(jobs, tab, co):
            by[(j["llm"], j["kind"])].append((j["launched_s"] - j["launch_s"], j["device_end_s"] - j["device_start_s"],
                                              (j["device_end_s"] - j["device_start_s"]) / t if t > 0 else np.nan, c))
        stats[label] = by
    lines.append("llm       kind     jobs meas/sim   host ms meas/sim   GPU ms meas/sim   x table by co-runners "
                 "meas | sim (co-runners: median ratio)")
    ratios: Ratios = {}
    for key in sorted(set(stats["measured"]) | set(stats["simulated"])):
        m, s = (np.array(stats[x].get(key, np.zeros((0, 4)))).reshape(-1, 4) for x in ("measured", "simulated"))
        if len(m) and len(s):
            ratios[key] = (float(s[:, 1].mean() / m[:, 1].mean()), len(s) / len(m))

        def by_count(a: np.ndarray) -> str:
            groups = defaultdict(list)
            for ratio, c in zip(a[:, 2], a[:, 3]):
                groups[int(round(c))].append(ratio)
            return " ".join(f"{c}:{np.nanmedian(v):.2f}" for c, v in sorted(groups.items()) if len(v) >= 3)

        lines.append(f"{key[0]:<9} {key[1]:<8} {len(m):>5} / {len(s):<5}   {_ms(m[:, 0].mean()) if len(m) else '-':>6} / "
                     f"{_ms(s[:, 0].mean()) if len(s) else '-':<6}   {_ms(m[:, 1].mean()) if len(m) else '-':>6} / "
                     f"{_ms(s[:, 1].mean()) if len(s) else '-':<6}   {by_count(m)} | {by_count(s)}")
    requests, _, measured_first = fid.requests_by_id(run)
    meas_w = prefill_waits(measured, requests, measured_first, 3e-3)
    sim_w = prefill_waits(simulated, requests, simulated_first, 1e-9)
    lines.append("llm       TTFT parts ms: arrival->launch meas/sim   launch->prefill end meas/sim")
    for m in sorted(set(meas_w) | set(sim_w)):
        a, b = meas_w.get(m, (np.nan, np.nan)), sim_w.get(m, (np.nan, np.nan))
        lines.append(f"{m:<9} {_ms(a[0]):>8} / {_ms(b[0]):<8}   {_ms(a[1]):>8} / {_ms(b[1]):<8}")
    for label, jobs in (("measured", measured), ("simulated", simulated)):
        for g in sorted({j["group"] for j in jobs}):
            mine = [j for j in jobs if j["group"] == g]
            span = max(j["seen_s"] for j in mine) - min(j["launch_s"] for j in mine)
            busy = sum(j["launched_s"] - j["launch_s"] for j in mine) / span if span > 0 else 0.0
            lines.append(f"group {g} {label}: scheduling thread busy {100 * busy:.1f}% of {span:.1f} s")
    return lines, ratios


def summary(per_run: Sequence[Ratios]) -> List[str]:
    """The ``--summary`` rows over runs' :data:`Ratios`: per LLM and job kind the median (min-max)
    of the GPU time per job simulated / measured, of the job count, and of their product."""
    keys = sorted({k for r in per_run for k in r})
    lines = [f"over {len(per_run)} runs, simulated / measured: median [min-max] over runs",
             "llm       kind     GPU ms a job            jobs                    GPU time in all"]
    for key in keys:
        rows = np.array([(r[key][0], r[key][1], r[key][0] * r[key][1]) for r in per_run if key in r])
        cells = [f"{np.median(rows[:, c]):.3f} [{rows[:, c].min():.3f}-{rows[:, c].max():.3f}]" for c in range(3)]
        lines.append(f"{key[0]:<9} {key[1]:<8} " + "  ".join(f"{c:<22}" for c in cells).rstrip())
    return lines


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    fid.add_trace_arguments(ap)
    ap.add_argument("--summary", action="store_true",
                    help="end with each LLM's and job kind's simulated / measured GPU time and job count over the runs")
    args = ap.parse_args(argv)
    runs, overrides = fid.trace_script_inputs(ap, args.runs, args.overrides)
    per_run = []
    for spec, run in runs:
        lines, ratios = report(spec, run, overrides)
        print("\n".join(lines), flush=True)
        per_run.append(ratios)
    if args.summary:
        print("\n".join(summary(per_run)))


if __name__ == "__main__":
    main()
