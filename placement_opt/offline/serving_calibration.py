"""Calibrate the simulator's stage clock to the executor from short saturated calibration runs.

A profile times one stage alone; a server also spends host time between two queued requests
(launching the next replay, receiving its activations, sending the last output), and cards
of one model differ in speed. Both move attainment near saturation, where a 1% longer service
time decides whether a queue drains. This module reads the per-request records of
``placeopt execute`` runs (``requests.csv``: every stage's start and end on the host clock) and
measures, for every group and stage, requests that queued back to back:

* the stage's **occupancy**: spacing of consecutive starts, which the simulator must reproduce
  as ``latency x (1 + stage_overhead_factor x pp) x device scale + gap``. The gap is fitted to
  the *mean* occupancy: in a queue that does not drain, the predicted clock drifts from the real
  one by the sum of the per-request differences, so the mean is what must match;
* every device's **latency scale**: median stage latency of a one-GPU (pp = tp = 1) group on
  that device over the one on the profile's device (device 0) in the same run.

It writes the gaps into a copy of the profile (``stage_gap_s`` per configuration) and the scales
into copies of the instances (``cluster.latency_scale``). Runs used here must not be the trials
the calibrated instances are then tested on (use another workload seed).

Run ``python -m placement_opt.offline.serving_calibration INSTANCE PROFILE_NAME --run DIR PLACEMENT
[--run ...] --profile-out FILE [--instance-out IN=OUT ...]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections import defaultdict
from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

import numpy as np

from placement_opt.instance import Instance, load_instance
from placement_opt.io import atomic_write_text
from placement_opt.placement import Group, Placement
from placement_opt.profile import Profile

StageKey = Tuple[int, int, int]  # (pp, tp, stage)


def stage_samples(csv_path: str, groups: Sequence[Group]) -> Dict[Tuple[int, int], Dict[str, List[float]]]:
    """Per (group, stage): latencies of admitted requests and start spacings of queued pairs.

    A pair is queued at a stage when the later request was ready there (dispatched, or out of
    the previous stage) before the earlier one ended, so the stage never idled between them.
    """
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1"]
    out: Dict[Tuple[int, int], Dict[str, List[float]]] = {}
    for g, grp in enumerate(groups):
        mine = [r for r in rows if int(r["group"]) == g]
        for s in range(grp.pp):
            start = np.array([float(r[f"stage{s}_start_s"]) for r in mine])
            end = np.array([float(r[f"stage{s}_end_s"]) for r in mine])
            ready = np.array([float(r["dispatch_s"] if s == 0 else r[f"stage{s - 1}_end_s"]) for r in mine])
            order = np.argsort(start, kind="stable")
            start, end, ready = start[order], end[order], ready[order]
            queued = ready[1:] < end[:-1]
            out[(g, s)] = {"latency": list(end - start), "occupancy": list((start[1:] - start[:-1])[queued])}
    return out


def device_scales(runs: Sequence[Tuple[str, Placement]], n_gpus: int) -> List[float]:
    """Latency scale of every device from its one-GPU groups (1.0 if unseen).

    Within each run, a device's median stage latency is divided by device 0's in the same run
    (a whole machine's speed drifts between runs, by 12% in docs/fidelity.md's runs, so only
    devices measured side by side are compared); the scale is the median of those ratios.
    """
    ratios: Dict[int, List[float]] = defaultdict(list)
    for csv_path, placement in runs:
        samples = stage_samples(csv_path, placement.groups)
        medians = {grp.devices[0]: float(np.median(samples[(g, 0)]["latency"]))
                   for g, grp in enumerate(placement.groups)
                   if grp.pp == 1 and grp.tp == 1 and samples[(g, 0)]["latency"]}
        if 0 in medians:
            for d, m in medians.items():
                ratios[d].append(m / medians[0])
    return [float(np.median(ratios[d])) if d in ratios else 1.0 for d in range(n_gpus)]


def stage_gaps(instance: Instance, profile_name: str, runs: Sequence[Tuple[str, Placement]],
               scales: Sequence[float]) -> Dict[StageKey, dict]:
    """Per (pp, tp, stage) of ``profile_name``'s configs: the gap that makes the simulated
    occupancy equal the mean measured one (never below 0), with the evidence."""
    profile = _profile(instance, profile_name)
    factor = instance.simulator.stage_overhead_factor
    pooled: Dict[StageKey, List[float]] = defaultdict(list)
    for csv_path, placement in runs:
        samples = stage_samples(csv_path, placement.groups)
        for g, grp in enumerate(placement.groups):
            cfg = profile.config(grp.pp, grp.tp)
            if cfg is None or 1 not in cfg.batch_sizes:
                continue
            for s in range(grp.pp):
                stage_devices = grp.devices[s * grp.tp:(s + 1) * grp.tp]
                scale = max(scales[d] for d in stage_devices)
                modelled = float(cfg.stage_latency[cfg.batch_sizes.index(1), s]) * (1 + factor * grp.pp) * scale
                pooled[(grp.pp, grp.tp, s)] += [o - modelled for o in samples[(g, s)]["occupancy"]]
    return {key: {"gap_s": max(0.0, float(np.mean(v))), "queued_pairs": len(v)}
            for key, v in sorted(pooled.items()) if v}


def _profile(instance: Instance, profile_name: str) -> Profile:
    for spec, profile in zip(instance.models, instance.model_profiles):
        if spec.profile == profile_name:
            return profile
    raise SystemExit(f"no model of {instance.name} uses profile {profile_name!r}")


def with_gaps(profile: Profile, gaps: Dict[StageKey, dict]) -> Profile:
    """``profile`` with ``stage_gap_s`` set on every configuration the calibration measured."""
    configs = dict(profile.configs)
    for (pp, tp), cfg in profile.configs.items():
        measured = [gaps.get((pp, tp, s)) for s in range(pp)]
        if all(m is not None for m in measured):
            configs[(pp, tp)] = replace(cfg, stage_gap_s=tuple(m["gap_s"] for m in measured if m is not None))
    note = " Stage gaps calibrated from executor runs (placement_opt.offline.serving_calibration)."
    return replace(profile, configs=configs, source=profile.source + note)


def _main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("instance", help="instance the calibration runs executed")
    ap.add_argument("profile_name", help="the instance's profile to calibrate")
    ap.add_argument("--run", nargs=2, action="append", required=True, metavar=("DIR", "PLACEMENT"),
                    help="a run's folder (holding requests.csv, or one slo-* subfolder) and its placement")
    ap.add_argument("--profile-out", required=True, help="write the calibrated profile here")
    ap.add_argument("--instance-out", action="append", default=[], metavar="IN=OUT",
                    help="copy instance IN to OUT with the calibrated profile and latency scales")
    ap.add_argument("--report", help="write the measurements (JSON) here")
    args = ap.parse_args(argv)
    instance = load_instance(args.instance)
    runs = [(_requests_csv(d), Placement.from_dict(json.load(open(p)))) for d, p in args.run]
    scales = device_scales(runs, instance.cluster.n_gpus)
    gaps = stage_gaps(instance, args.profile_name, runs, scales)
    profile = with_gaps(_profile(instance, args.profile_name), gaps)
    atomic_write_text(args.profile_out, json.dumps(profile.to_dict(), indent=2) + "\n")
    for pair in args.instance_out:
        src, dst = pair.split("=", 1)
        _write_instance(src, dst, args.profile_name, args.profile_out, scales)
    report = {"latency_scale": scales,
              "gaps": [{"pp": k[0], "tp": k[1], "stage": k[2], **v} for k, v in gaps.items()]}
    if args.report:
        atomic_write_text(args.report, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


def _requests_csv(folder: str) -> str:
    direct = os.path.join(folder, "requests.csv")
    if os.path.exists(direct):
        return direct
    trials = sorted(d for d in os.listdir(folder) if os.path.exists(os.path.join(folder, d, "requests.csv")))
    if len(trials) != 1:
        raise SystemExit(f"{folder}: expected requests.csv or exactly one trial folder holding one")
    return os.path.join(folder, trials[0], "requests.csv")


def _write_instance(src: str, dst: str, profile_name: str, profile_path: str, scales: Sequence[float]) -> None:
    """Copy instance JSON ``src`` to ``dst`` using the calibrated profile and the device scales."""
    with open(src) as f:
        d = json.load(f)
    d["profiles"][profile_name] = os.path.relpath(profile_path, os.path.dirname(os.path.abspath(dst)))
    d["cluster"]["latency_scale"] = [round(s, 4) for s in scales]
    d["name"] = d["name"] + "-calibrated"
    atomic_write_text(dst, json.dumps(d, indent=1) + "\n")


if __name__ == "__main__":
    _main()
