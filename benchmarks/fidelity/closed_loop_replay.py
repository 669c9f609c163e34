"""What would closed-loop admission have done on a measured saturated one-stage group? (issue 13)

Usage: python benchmarks/fidelity/closed_loop_replay.py INSTANCE PLACEMENT TRIAL_DIR [--group G]

For every trial (slo-* folders, or the folder itself) of TRIAL_DIR, run by the executor on
PLACEMENT (one group G of one stage), this replays *all* the trial's requests (admitted or not)
through the executor's :class:`~placement_opt.executor.dispatch.Dispatcher`, open loop and
closed loop, against a virtual stage that runs as the measured one did at the same moment: a
request starting at time t takes the service time (end - start) of the measured request that
started last before t, and the stage stays busy for that request's measured host gap (the next
queued start minus its end) after it. The closed-loop dispatcher learns every virtual stage end
once the virtual clock has passed it. The open-loop column checks the virtual stage against the
measured late count; the closed-loop one estimates what ``--admission closed-loop`` would
measure. An estimate only: the real stage's slow spells need not follow the requests as here.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import heapq
import json
import os
from typing import Dict, List, Tuple

import numpy as np

from placement_opt import load_instance, load_placement
from placement_opt.executor.dispatch import Dispatcher
from placement_opt.instance import Instance
from placement_opt.workload import SLOSpec


def _read(path: str) -> List[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def measured_stage(rows: List[dict], group: int) -> Dict[str, np.ndarray]:
    """The measured stage of ``group`` in start order: start, service time and host gap after
    each request (where the next one queued behind it; else the previous gap carries on)."""
    done = sorted((r for r in rows if r["admitted"] == "1" and r["finish_s"] and int(r["group"]) == group),
                  key=lambda r: float(r["stage0_start_s"]))
    start = np.array([float(r["stage0_start_s"]) for r in done])
    end = np.array([float(r["stage0_end_s"]) for r in done])
    ready = np.array([float(r["dispatch_s"]) for r in done])
    gap = np.full(len(done), np.nan)
    queued = ready[1:] < end[:-1]
    gap[:-1][queued] = (start[1:] - end[:-1])[queued]
    valid = np.where(~np.isnan(gap), np.arange(len(gap)), 0)
    gap = gap[np.maximum.accumulate(valid)]  # carry the last measured gap forward
    gap[np.isnan(gap)] = float(np.nanmedian(gap)) if np.any(~np.isnan(gap)) else 0.0
    lag = np.median((start - ready)[np.concatenate(([True], ~queued))])
    return {"start": start, "service": end - start, "gap": gap, "lag": np.array([lag])}


def replay(instance: Instance, groups: tuple, rows: List[dict], stage: Dict[str, np.ndarray], group: int,
           closed_loop: bool) -> Tuple[int, int, int]:
    """Dispatch every request of the trial against the virtual stage: (admitted, late, on time)."""
    names = {n: i for i, n in enumerate(instance.model_names)}
    d = Dispatcher(instance, groups, closed_loop=closed_loop)
    free, lag = -np.inf, float(stage["lag"][0])
    reports: List[Tuple[float, int]] = []
    admitted = late = 0
    for k, r in enumerate(sorted(rows, key=lambda r: float(r["arrival_s"]))):
        now, deadline = float(r["arrival_s"]), float(r["deadline_s"])
        while reports and reports[0][0] <= now:
            end, j = heapq.heappop(reports)
            d.observe(j, 0, end)
        dec = d.decide(names[r["model"]], now, deadline, request=k)
        if dec.group != group:
            continue
        start = max(now + lag, free)
        j = max(0, int(np.searchsorted(stage["start"], start, side="right")) - 1)
        end = start + float(stage["service"][j])
        free = end + float(stage["gap"][j])
        heapq.heappush(reports, (end, k))
        admitted += 1
        late += int(end > deadline)
    return admitted, late, admitted - late


def _trials(folder: str) -> List[Tuple[str, float]]:
    index = os.path.join(folder, "trials.json")
    if not os.path.exists(index):
        return [(folder, json.load(open(os.path.join(folder, "summary.json")))["slo_scale"])]
    return [(os.path.join(folder, t["trial"]), t["slo_scale"]) for t in json.load(open(index))
            if t.get("status", "complete") == "complete"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("instance", help="the instance the trials ran (its profile and simulator settings)")
    ap.add_argument("placement", help="the placement the trials ran")
    ap.add_argument("trials", nargs="+", help="trial folders (trials.json and slo-* subfolders, or one trial)")
    ap.add_argument("--group", type=int, default=0, help="the one-stage group to replay")
    args = ap.parse_args()
    base = load_instance(args.instance)
    groups = load_placement(args.placement).groups
    print("| trial | SLO scale | requests | attainment simulated | measured | late measured | virtual open loop: "
          "attainment (late) | virtual closed loop: attainment (late) |")
    print("|---|---|---|---|---|---|---|---|")
    for folder in args.trials:
        for path, scale in _trials(folder):
            inst = dataclasses.replace(base, workload=dataclasses.replace(base.workload, slo=SLOSpec(scale=scale)))
            rows = _read(os.path.join(path, "requests.csv"))
            summary = json.load(open(os.path.join(path, "summary.json")))
            stage = measured_stage(rows, args.group)
            n = len(rows)
            cells = []
            for closed in (False, True):
                _, late, on_time = replay(inst, groups, rows, stage, args.group, closed)
                cells.append(f"{on_time / n:.4f} ({late})")
            print(f"| {os.path.basename(folder.rstrip('/'))} | {scale:g} | {n} | "
                  f"{summary['simulated']['slo_attainment']:.4f} | {summary['measured']['slo_attainment']:.4f} | "
                  f"{summary['late']} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
