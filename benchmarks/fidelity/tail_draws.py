"""Does stage-time noise explain the late requests of a saturated one-stage group? (issue 13)

Usage: python benchmarks/fidelity/tail_draws.py CALIBRATION_DIR TRIAL_DIR [TRIAL_DIR ...]
       [--group G] [--seeds N] [--overhead S]

Replays exactly the requests the executor admitted to group G (default 0; a one-stage group) of
every trial (slo-* folders) through one FIFO stage, and counts those that finish after their
deadline, with three occupancy models:

* the calibration run's mean measured occupancy of queued requests times a ratio drawn
  independently from that run's occupancies over their mean (the stage-time tail alone);
* the trial's own mean measured occupancy, the same for every request (a shift of the mean,
  which the executor's open-loop clock did not know);
* the trial's own mean times the calibration's ratios (shift and tail).

Draws use seeds 0..N-1 (default 20) and are averaged, so the numbers repeat.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from typing import Dict, List

import numpy as np


def _rows(path: str, group: int) -> Dict[str, np.ndarray]:
    """Admitted requests of ``group`` (arrival order): arrival, deadline, finish, stage 0 start/end."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1" and r["finish_s"] and int(r["group"]) == group]
    rows.sort(key=lambda r: float(r["arrival_s"]))
    keys = ("arrival_s", "deadline_s", "finish_s", "stage0_start_s", "stage0_end_s", "dispatch_s")
    return {k: np.array([float(r[k]) for r in rows]) for k in keys}


def queued_occupancy(d: Dict[str, np.ndarray]) -> np.ndarray:
    """Start spacings of consecutive requests that queued (the later one was dispatched before the
    earlier one ended), in start order."""
    order = np.argsort(d["stage0_start_s"], kind="stable")
    start, end, ready = d["stage0_start_s"][order], d["stage0_end_s"][order], d["dispatch_s"][order]
    return np.diff(start)[ready[1:] < end[:-1]]


def replay_late(d: Dict[str, np.ndarray], occupancy: np.ndarray, overhead: float) -> int:
    """Late requests when each admitted request occupies the stage for ``occupancy[i]``."""
    free, late = -np.inf, 0
    for a, dl, occ in zip(d["arrival_s"], d["deadline_s"], occupancy):
        free = max(free, a) + occ
        late += free + overhead > dl
    return late


def mean_late(d: Dict[str, np.ndarray], mean: float, shape: np.ndarray, seeds: int, overhead: float) -> float:
    """Mean late count over ``seeds`` replays with occupancy ``mean`` x iid draws from ``shape``."""
    n = len(d["arrival_s"])
    return float(np.mean([replay_late(d, mean * np.random.default_rng(s).choice(shape, n), overhead)
                          for s in range(seeds)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calibration", help="calibration run folder (requests.csv) of the same placement")
    ap.add_argument("trials", nargs="+", help="trial folders (trials.json and slo-* subfolders)")
    ap.add_argument("--group", type=int, default=0, help="the one-stage group to replay")
    ap.add_argument("--seeds", type=int, default=20, help="draws per trial (seeds 0..N-1)")
    ap.add_argument("--overhead", type=float, default=0.0005, help="the instance's overhead_s")
    args = ap.parse_args()
    cal = queued_occupancy(_rows(os.path.join(args.calibration, "requests.csv"), args.group))
    shape = cal / cal.mean()
    print(f"calibration occupancy: mean {1e3 * cal.mean():.3f} ms, p50/p90/p99 ratio "
          f"{' '.join(f'{x:.4f}' for x in np.percentile(shape, [50, 90, 99]))}")
    print("| trial | SLO scale | admitted | trial's mean occupancy (ms) | late measured | calibration mean + tail | "
          "trial's mean | trial's mean + tail |")
    print("|---|---|---|---|---|---|---|---|")
    for folder in args.trials:
        for t in json.load(open(os.path.join(folder, "trials.json"))):
            if t.get("status", "complete") != "complete":
                continue
            d = _rows(os.path.join(folder, t["trial"], "requests.csv"), args.group)
            mean = float(queued_occupancy(d).mean())
            late = int((d["finish_s"] > d["deadline_s"]).sum())
            shifted = replay_late(d, np.full(len(d["arrival_s"]), mean), args.overhead)
            print(f"| {os.path.basename(folder)} | {t['slo_scale']:g} | {len(d['arrival_s'])} | {1e3 * mean:.3f} | "
                  f"{late} | {mean_late(d, float(cal.mean()), shape, args.seeds, args.overhead):.1f} | {shifted} | "
                  f"{mean_late(d, mean, shape, args.seeds, args.overhead):.1f} |")


if __name__ == "__main__":
    main()
