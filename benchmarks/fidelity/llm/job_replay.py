"""Replay a run's job trace: the shared scheduler's decisions with the GPU's own job times.

A run made with ``placeopt execute --job-trace`` has ``jobs.csv``: every job the mesh leaders
ran, its launch on the host and its GPU start and end. This script drives the scheduler the
executor and the simulator share (``executor.llm_sched.run_virtual``) on a virtual clock
whose job times are the measured ones instead of the simulator's model: the n-th prefill (or
decode step) of an LLM launched in the replay holds the thread, starts, runs and is collected
as the n-th measured one of that LLM did (its host seconds, its delay to its GPU start, its
GPU seconds and its collect lag, verbatim). Where the replay's decisions are the engine's,
its first tokens are the measured ones; so a replay that reproduces the measured TTFT shows
the policy decisions right on the GPU and puts the simulator's error in its job times.
``--replay prefill`` replays the prefills only (decode steps keep the simulator's model and
contention, the replayed prefills' HBM demand counted), ``decode`` the decode steps only:
which job times the simulator's TTFT error comes from. After the first decision that differs
(another batch, at 3 x load a different quota moment) the n-th job is another job and the
replay only approximates.

Prints per LLM the mean TTFT measured / replayed / simulated (the run's generation and its
current calibration, or the committed instance for a folder of no generation; ``--set
FIELD=VALUE`` changes a calibration field of the model, for the jobs the replay models and for
the simulated column).

``--summary`` ends with a line over all the runs given: how many have their mean TTFT within
the issue's 15% of the measured one, replayed and simulated, and the mean |error| of each (the
error as ``llm_fidelity.py`` takes it, measured over the model, less 1).

Usage: python benchmarks/fidelity/llm/job_replay.py RESULTS/RUN... [--replay prefill,decode]
[--set FIELD=VALUE ...] [--summary]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter, defaultdict
from typing import Dict, List, Sequence, Set, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity

import llm_fidelity as fid  # noqa: E402

from placement_opt.executor.llm_sched import DECODE, PREFILL, VirtualJobs  # noqa: E402


class TracedJobs(VirtualJobs):
    """:class:`VirtualJobs` whose jobs of the ``kinds`` replay the measured ones of the same LLM
    and kind of its mesh in launch order (``measured[(llm name, kind)]``): the thread's hold, the
    GPU start delay, the GPU time and the collect lag as measured, never re-timed (their HBM
    demand, bytes over their time alone, still counts for the modelled jobs beside them),
    launched ``gap`` seconds after the scheduler chose them at the earliest (:func:`loop_gap`);
    jobs of other kinds, and jobs beyond the measured ones of their LLM and kind (``unmatched``
    counts them), keep the model."""

    def __init__(self, llms, tables, cfg, names: Sequence[str], measured: Dict[Tuple[str, str], List[dict]],
                 kinds: Set[str], gap: float):
        super().__init__(llms, tables, cfg)
        self.names, self.measured, self.kinds, self.gap = list(names), measured, kinds, gap
        self.taken: Counter = Counter()
        self.unmatched = 0
        self.timed = True

    def launch(self, jobs, t, host_free):
        for job in jobs:
            key = (self.names[job.llm], job.kind)
            rows = self.measured.get(key, [])
            if job.kind not in self.kinds or self.taken[key] >= len(rows):
                self.unmatched += job.kind in self.kinds
                host_free = super().launch([job], t, host_free)
                continue
            m = rows[self.taken[key]]
            self.taken[key] += 1
            j = self.slot(job.kind, job.llm)
            begin = max(t + self.gap, host_free)
            host_free = begin + (m["launched_s"] - m["launch_s"])
            self.start[j] = begin + max(0.0, m["device_start_s"] - m["launch_s"])
            self.work[j] = (m["device_end_s"] - m["device_start_s"]) + max(0.0, m["seen_s"] - m["device_end_s"])
            self.end[j] = self.start[j] + self.work[j]
            self.mark[j], self.factor[j] = self.start[j], 1.0
            self.alone[j] = self.duration(job)
            self.demand[j] = self.moved(job) / self.alone[j] / 1e9 if self.alone[j] > 0 else 0.0
            self.beside[j], self.fixed[j] = False, True
            self.launched[j] = (job, begin, host_free)
        return host_free


def loop_gap(jobs: List[dict]) -> float:
    """The median time from a job's collect to the next launch on a mesh where nothing else was
    in flight: the leader's loop between a decision and its launch, which the trace does not
    time (about 0.1 ms on one GPU; about 1 ms on a TP-2 mesh, whose leader first broadcasts
    the iteration's operations to its followers)."""
    ordered = sorted(jobs, key=lambda j: j["launch_s"])
    gaps, last_seen = [], -np.inf
    for a, b in zip(ordered, ordered[1:]):
        last_seen = max(last_seen, a["seen_s"])  # every job launched before b collected by then
        if last_seen == a["seen_s"] and 0.0 <= b["launch_s"] - a["seen_s"] < 0.01:
            gaps.append(b["launch_s"] - a["seen_s"])
    return float(np.median(gaps)) if gaps else 0.0


def replay(run: dict, kinds: Set[str], overrides: Dict[str, float]) -> Tuple[np.ndarray, np.ndarray, int]:
    """Every request's first-token time in the replay of ``run``'s trace (the ``kinds`` of jobs
    replayed) and in the simulator's own timeline (-1: none), and how many jobs of those kinds
    the replay launched beyond the measured ones (modelled)."""
    from placement_opt.placement import load_placement

    inst = fid.traced_instance(run, overrides)
    placement = load_placement(fid.run_inputs(run)[1])
    trace = fid.traced_jobs(run)
    measured: Dict[int, Dict[Tuple[str, str], List[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in sorted(trace, key=lambda r: r["launch_s"]):
        measured[row["group"]][(row["llm"], row["kind"])].append(row)
    clocks: List[TracedJobs] = []

    def clock(group, llms, tables, cfg):
        clocks.append(TracedJobs(llms, tables, cfg, placement.groups[group].models, measured[group], kinds,
                                 loop_gap([j for j in trace if j["group"] == group])))
        return clocks[-1]

    replayed = fid.simulated_run_jobs(run, inst, clock=clock)[1]
    return replayed, fid.simulated_run_jobs(run, inst)[1], sum(c.unmatched for c in clocks)


def mean_ttfts(run: dict, kinds: Set[str], overrides: Dict[str, float]
               ) -> Tuple[Dict[str, Tuple[float, float, float]], int]:
    """Per LLM and for ``"all"`` the mean TTFT (ms) measured, replayed and simulated, and how
    many jobs the replay modelled beyond the measured ones (:func:`replay`)."""
    replayed, simulated, unmatched = replay(run, kinds, overrides)
    rows, arrival, measured = fid.requests_by_id(run)
    models = np.array([r["model"] for r in rows])

    def ttft(first: np.ndarray, sel: np.ndarray) -> float:
        ok = sel & (first >= 0)
        return 1e3 * float(np.mean(first[ok] - arrival[ok])) if ok.any() else float("nan")

    out = {}
    for m in sorted(set(models)) + ["all"]:
        sel = models == m if m != "all" else np.ones(len(models), dtype=bool)
        out[m] = (ttft(measured, sel), ttft(replayed, sel), ttft(simulated, sel))
    return out, unmatched


def report(spec: str, ttfts: Dict[str, Tuple[float, float, float]], kinds: Set[str], overrides: Dict[str, float],
           unmatched: int) -> List[str]:
    """The replay's lines for the run ``spec`` (RESULTS/RUN) from its :func:`mean_ttfts`."""
    lines = [f"== {spec}: replayed {', '.join(sorted(kinds))}" + (f" with {overrides}" if overrides else "")
             + (f" ({unmatched} jobs beyond the measured ones modelled)" if unmatched else ""),
             "llm       mean TTFT ms: measured  replayed  simulated"]
    for m, (measured, replayed, simulated) in ttfts.items():
        lines.append(f"{m:<9} {measured:>18.1f}  {replayed:>8.1f}  {simulated:>9.1f}")
    return lines


def summary(alls: Sequence[Tuple[float, float, float]], tolerance: float = 0.15) -> str:
    """The ``--summary`` line over runs' ``"all"`` rows (measured, replayed, simulated mean TTFT):
    per model (replayed, simulated) the runs within ``tolerance`` and the mean |error|, the
    error measured / model - 1 as the fidelity report takes it."""
    parts = []
    for label, col in (("replayed", 1), ("simulated", 2)):
        errors = [abs(row[0] / row[col] - 1.0) for row in alls]
        parts.append(f"{label} {sum(e <= tolerance for e in errors)} (mean |error| {np.mean(errors):.3f})")
    return f"over {len(alls)} runs, mean TTFT within {100 * tolerance:.0f}%: " + ", ".join(parts)


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    fid.add_trace_arguments(ap, "the model")
    ap.add_argument("--replay", default="prefill,decode",
                    help="the job kinds whose measured times are replayed (prefill, decode or both)")
    ap.add_argument("--summary", action="store_true",
                    help="end with the runs within 15%% of the measured mean TTFT, replayed and simulated")
    args = ap.parse_args(argv)
    kinds = {k for k in args.replay.split(",") if k}
    if not kinds or not kinds <= {PREFILL, DECODE}:
        ap.error(f"--replay {args.replay}: kinds are {PREFILL} and {DECODE}")
    runs, overrides = fid.trace_script_inputs(ap, args.runs, args.overrides)
    alls = []
    for spec, run in runs:
        ttfts, unmatched = mean_ttfts(run, kinds, overrides)
        print("\n".join(report(spec, ttfts, kinds, overrides, unmatched)), flush=True)
        alls.append(ttfts["all"])
    if args.summary:
        print(summary(alls))


if __name__ == "__main__":
    main()
