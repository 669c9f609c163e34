"""Re-simulate committed fidelity trials with another instance (e.g. a newly calibrated stage clock).

Usage: python benchmarks/fidelity/reeval.py RUNS_ROOT --instance ARRIVALS=INSTANCE.json ...
       [--placement NAME=FILE ...] [--only SUBSTRING] [--json OUT]

RUNS_ROOT holds trial folders as `placeopt execute --slo-scale` wrote them (trials.json and one
slo-* folder per SLO scale, each with requests.csv). A folder's name ends in -ARRIVALS-PLACEMENT
(e.g. cal-four-gamma-tp4); the placement file is --placement NAME=FILE, or
RUNS_ROOT/placement-NAME-ARRIVALS.json, or instances/fidelity/placement[4]-NAME.json (placement4 for
4-GPU folders: a name part "four", or a first part ending in 4 such as warm4).

For every trial it prints, beside the measurement and the executor's own simulation (the "old"
model it admitted with):
* the new instance's full simulation of the same requests (same arrivals, models, deadlines):
  attainment and mean latency; the executor admitted with the old model, so the measured
  attainment is that of the old admission;
* the mean latency the new instance predicts for exactly the requests the executor admitted
  (no admission: deadlines lifted), which tests the stage clock alone;
* how many of those admitted requests finished late (measured), and how many of them the new
  instance flags (replayed through its clock, in the measured groups: predicted finish plus the
  tail margin, if it has one, past the deadline), with how many of the flagged were late.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
from typing import Dict, List, Optional

import numpy as np

from placement_opt import load_instance, load_placement
from placement_opt.executor.dispatch import Dispatcher
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.simulate.flowshop import run_groups, simulate_dnn
from placement_opt.workload import Requests, SLOSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def trial_requests(csv_path: str, instance: Instance) -> tuple[Requests, np.ndarray, np.ndarray, np.ndarray]:
    """The trial's requests (as replayed), which of them the executor admitted, their measured
    groups (-1: rejected) and whether they finished late."""
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    index = {name: i for i, name in enumerate(instance.model_names)}
    arrival = np.array([float(r["arrival_s"]) for r in rows])
    model = np.array([index[r["model"]] for r in rows], dtype=np.int32)
    deadline = np.array([float(r["deadline_s"]) for r in rows])
    admitted = np.array([r["admitted"] == "1" and r["finish_s"] != "" for r in rows])
    group = np.array([int(r["group"]) if a else -1 for r, a in zip(rows, admitted)])
    late = np.array([a and float(r["finish_s"]) > float(r["deadline_s"]) for r, a in zip(rows, admitted)])
    duration = float(np.ceil(arrival.max())) if len(arrival) else 0.0
    return Requests(arrival, model, deadline, duration), admitted, group, late


def admitted_latency(instance: Instance, placement: Placement, requests: Requests, admitted: np.ndarray) -> float:
    """Mean simulated latency of exactly the admitted requests, all served (no admission)."""
    sub = requests.select(admitted)
    free = Requests(sub.arrival, sub.model, np.full(len(sub), np.inf), sub.duration_s)
    res = run_groups(instance, placement.groups, free)
    return float(np.mean(res.finish - free.arrival))


def flagged(instance: Instance, placement: Placement, requests: Requests, group: np.ndarray) -> np.ndarray:
    """Which admitted requests (``group`` >= 0) the instance's clock, replayed in the measured
    groups without admission, predicts to finish (plus its tail margin) after their deadline."""
    dispatcher = Dispatcher(instance, placement.groups)
    out = np.zeros(len(requests), dtype=bool)
    for i in np.argsort(requests.arrival, kind="stable"):
        if group[i] < 0:
            continue
        d = dispatcher.place(int(group[i]), int(requests.model[i]), float(requests.arrival[i]))
        out[i] = d.late(float(requests.deadline[i]))  # the dispatcher's own admission rule
    return out


def placement_file(name: str, arrivals: str, root: str, explicit: Dict[str, str], four: bool) -> str:
    """Where the placement of a trial folder is (see the module's docstring)."""
    if name in explicit:
        return explicit[name]
    local = os.path.join(root, f"placement-{name}-{arrivals}.json")
    if os.path.exists(local):
        return local
    return os.path.join(ROOT, "instances", "fidelity", f"placement{'4' if four else ''}-{name}.json")


def evaluate(root: str, instances: Dict[str, str], placements: Dict[str, str], only: str) -> List[dict]:
    """One row per trial of every folder under ``root`` whose arrivals have an instance."""
    rows = []
    for folder in sorted(os.listdir(root)):
        trials_json = os.path.join(root, folder, "trials.json")
        parts = folder.split("-")
        arrivals = next((a for a in instances if a in parts), None)
        if not os.path.exists(trials_json) or arrivals is None or only not in folder:
            continue
        name = "-".join(parts[parts.index(arrivals) + 1:])
        base = load_instance(instances[arrivals])
        four = "four" in parts or parts[0].endswith("4")
        placement = load_placement(placement_file(name, arrivals, root, placements, four))
        for t in json.load(open(trials_json)):
            if t.get("status", "complete") != "complete":  # a trial the run's budget cut short
                continue
            wl = dataclasses.replace(base.workload, slo=SLOSpec(scale=t["slo_scale"]))
            inst = dataclasses.replace(base, workload=wl)
            requests, admitted, group, late = trial_requests(os.path.join(root, folder, t["trial"], "requests.csv"),
                                                             inst)
            new = simulate_dnn(inst, placement, requests)
            flags = flagged(inst, placement, requests, group)
            rows.append({"folder": folder, "arrivals": arrivals, "placement": name, "slo_scale": t["slo_scale"],
                         "measured": t["measured_slo_attainment"], "old": t["simulated_slo_attainment"],
                         "new": new["slo_attainment"], "lat_measured": t["measured_latency_mean_s"],
                         "lat_old": t["simulated_latency_mean_s"], "lat_new": new["latency_mean_s"],
                         "lat_new_same": admitted_latency(inst, placement, requests, admitted),
                         "late": int(late.sum()), "flagged": int(flags.sum()), "caught": int((flags & late).sum())})
    return rows


def _err(sim: Optional[float], measured: Optional[float]) -> float:
    return float("nan") if not sim or measured is None else measured / sim - 1.0


def print_table(rows: List[dict]) -> None:
    """Markdown table of every trial, then the largest differences."""
    print("| arrivals | placement | SLO scale | measured | old sim | diff (pp) | new sim | diff (pp) | "
          "latency measured (ms) | old sim | diff | new sim | diff | new sim, same admitted | diff | "
          "late | flagged (late) |")
    print("|" + "---|" * 17)
    for r in rows:
        print(f"| {r['arrivals']} | {r['placement']} | {r['slo_scale']:g} | {r['measured']:.4f} | {r['old']:.4f} | "
              f"{100 * (r['measured'] - r['old']):+.2f} | {r['new']:.4f} | {100 * (r['measured'] - r['new']):+.2f} | "
              f"{1e3 * r['lat_measured']:.2f} | {1e3 * r['lat_old']:.2f} | {100 * _err(r['lat_old'], r['lat_measured']):+.1f}% | "
              f"{1e3 * r['lat_new']:.2f} | {100 * _err(r['lat_new'], r['lat_measured']):+.1f}% | "
              f"{1e3 * r['lat_new_same']:.2f} | {100 * _err(r['lat_new_same'], r['lat_measured']):+.1f}% | "
              f"{r['late']} | {r['flagged']} ({r['caught']}) |")
    print()
    print(json.dumps(summary(rows)))


def summary(rows: List[dict]) -> dict:
    """Largest attainment differences (pp) and mean-latency errors, old and new model."""
    def worst(f) -> float:  # type: ignore[no-untyped-def]
        return round(max((abs(f(r)) for r in rows), default=float("nan")), 4)
    return {"trials": len(rows),
            "max_abs_diff_pp_old": worst(lambda r: 100 * (r["measured"] - r["old"])),
            "max_abs_diff_pp_new": worst(lambda r: 100 * (r["measured"] - r["new"])),
            "max_mean_latency_err_old": worst(lambda r: _err(r["lat_old"], r["lat_measured"])),
            "max_mean_latency_err_new": worst(lambda r: _err(r["lat_new"], r["lat_measured"])),
            "max_mean_latency_err_new_same_admitted": worst(lambda r: _err(r["lat_new_same"], r["lat_measured"]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="folder of trial folders")
    ap.add_argument("--instance", action="append", required=True, metavar="ARRIVALS=FILE",
                    help="instance to simulate the trials of these arrivals (poisson, gamma) with")
    ap.add_argument("--placement", action="append", default=[], metavar="NAME=FILE", help="placement of NAME")
    ap.add_argument("--only", default="", help="only trial folders whose name contains this")
    ap.add_argument("--json", help="write the rows and the summary here")
    args = ap.parse_args()
    instances = dict(p.split("=", 1) for p in args.instance)
    placements = dict(p.split("=", 1) for p in args.placement)
    rows = evaluate(args.runs, instances, placements, args.only)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary(rows)}, f, indent=1)


if __name__ == "__main__":
    main()
