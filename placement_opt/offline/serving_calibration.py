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
* the stage's **warm-up** (issue 13): a GPU serves a stage faster after idle time than back to
  back (15.9 against 18.1 ms for a one-GPU stage of docs/fidelity.md's runs, ramping over about
  100 ms of busy time). Per configuration, the heat and cool times of the simulator's linear heat
  model (:class:`placement_opt.profile.ConfigProfile`) and, per stage, the latency at heat 0 over
  the one at heat 1 are fitted to every admitted request's latency by least squares (the heat
  replayed from the measured stage starts and ends); kept only where they explain at least 10% of
  the latency's spread (``MIN_WARM_GAIN``);
* every device's **latency scale**: median latency of *cold* requests (after 20 ms idle: equal
  heat) of a one-GPU (pp = tp = 1) group on that device over the one on device 0 in the same run.
  (Medians over all requests compared heat, not devices: a busier device looked 8% slower.)

* with ``--tail-margin PPxTP``, that configuration's **admission margin** (``tail_margin``): the
  dispatcher predicts stage clocks open loop, so when real stage times run slower than the fitted
  clock for a while (host gaps of 0.05-0.26 ms in spells on issue 13's tp=4 group), the error of a
  predicted finish grows with the busy period behind it. The calibration runs' admitted requests
  are replayed through the fitted clock (deadlines lifted); the margin is the ``TAIL_QUANTILE``
  quantile of (measured - predicted finish) / (predicted busy time of the group's last stage), over
  requests behind at least ``TAIL_MIN_BUSY_S`` of busy time. Reported for every configuration,
  written only for those asked (0, off, otherwise).

It writes the gaps, warm-up terms and margins into a copy of the profile (``stage_gap_s``,
``stage_idle_factor``, ``heat_time_s``, ``cool_time_s``, ``tail_margin``) and the scales into
copies of the instances (``cluster.latency_scale``). Runs used here must not be the trials
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

from placement_opt.cluster import Cluster
from placement_opt.executor.dispatch import Dispatcher
from placement_opt.instance import Instance, load_instance
from placement_opt.io import atomic_write_text
from placement_opt.placement import Group, Placement
from placement_opt.profile import Profile

StageKey = Tuple[int, int, int]  # (pp, tp, stage)
Config = Tuple[int, int]  # (pp, tp)
HEAT_TIMES_S = (0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.15, 0.2, 0.3)
COOL_TIMES_S = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.3)
MIN_WARM_GAIN = 0.10  # warm-up terms must cut the latency's RMS error by this fraction
COLD_IDLE_S = 0.02  # a request after this much idle time on its stage starts cold
TAIL_QUANTILE = 0.99  # the admission margin covers this share of the calibration runs' drift
TAIL_MIN_BUSY_S = 0.05  # drift ratios of requests behind shorter busy periods are noise


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
            out[(g, s)] = {"latency": list(end - start), "occupancy": list((start[1:] - start[:-1])[queued]),
                           "start": list(start), "end": list(end), "queued": list(queued)}
    return out


def replay_heat(start: np.ndarray, end: np.ndarray, heat_time: float, cool_time: float) -> np.ndarray:
    """Heat of a stage at every request's start (the simulator's linear model) when it was busy
    from ``start[i]`` to ``end[i]`` (sorted), cold before the first."""
    heat = np.empty(len(start))
    warmth, free = 0.0, -np.inf
    for i in range(len(start)):
        warmth = max(0.0, warmth - max(0.0, start[i] - free) / cool_time)
        heat[i] = warmth
        warmth = min(1.0, warmth + (end[i] - start[i]) / heat_time)
        free = end[i]
    return heat


def _warm_fit(series: Sequence[Tuple[np.ndarray, np.ndarray, float]], heat_time: float, cool_time: float
              ) -> Tuple[float, float, float]:
    """Least-squares (cold, hot) latency of one stage's ``series`` of (starts, ends, device scale)
    under these times, and the sum of squared errors (latencies divided by the device scale, so
    that devices of different speed pool)."""
    heat = np.concatenate([replay_heat(st, en, heat_time, cool_time) for st, en, _ in series])
    latency = np.concatenate([(en - st) / scale for st, en, scale in series])
    basis = np.c_[1.0 - heat, heat]
    coef = np.linalg.lstsq(basis, latency, rcond=None)[0]
    return float(coef[0]), float(coef[1]), float(np.sum((latency - basis @ coef) ** 2))


def warm_up(runs: Sequence[Tuple[str, Placement]], scales: Sequence[float] | None = None) -> Dict[Config, dict]:
    """Per (pp, tp) seen in the runs: heat and cool times and per-stage idle factors (cold over
    hot latency) of the best fit, with the evidence; ``kept`` False where the fit explains less
    than ``MIN_WARM_GAIN`` of the spread (tensor-parallel stages of 4 GPUs show no warm-up).
    ``scales``: every device's latency scale (:func:`device_scales`; all 1 by default)."""
    series: Dict[Config, Dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for csv_path, placement in runs:
        for (g, s), smp in stage_samples(csv_path, placement.groups).items():
            grp = placement.groups[g]
            scale = max(scales[d] for d in grp.devices[s * grp.tp:(s + 1) * grp.tp]) if scales else 1.0
            if len(smp["start"]) > 1:
                series[(grp.pp, grp.tp)][s].append((np.array(smp["start"]), np.array(smp["end"]), scale))
    out: Dict[Config, dict] = {}
    for cfg, stages in sorted(series.items()):
        spread = sum(float(np.sum((lat - lat.mean()) ** 2))
                     for lat in (np.concatenate([(en - st) / scale for st, en, scale in v]) for v in stages.values()))
        best = min(((sum(_warm_fit(v, ht, ct)[2] for v in stages.values()), ht, ct)
                    for ht in HEAT_TIMES_S for ct in COOL_TIMES_S))
        fits = [_warm_fit(stages[s], best[1], best[2]) for s in sorted(stages)]
        gain = 1.0 - float(np.sqrt(best[0] / spread)) if spread > 1e-12 else 0.0
        out[cfg] = {"heat_time_s": best[1], "cool_time_s": best[2], "gain": gain,
                    "kept": gain >= MIN_WARM_GAIN and len(fits) == cfg[0],
                    "stage_idle_factor": [cold / hot for cold, hot, _ in fits],
                    "cold_s": [cold for cold, _, _ in fits], "hot_s": [hot for _, hot, _ in fits]}
    return out


def device_scales(runs: Sequence[Tuple[str, Placement]], n_gpus: int) -> List[float]:
    """Latency scale of every device from its one-GPU groups (1.0 if unseen).

    Within each run, a device's median latency of cold requests (``COLD_IDLE_S`` idle before
    them, so every device is compared at the same heat; all its requests when some device has
    fewer than 5 cold ones, as in a saturated run) is divided by device 0's in the same run
    (only devices measured side by side are compared); the scale is the median of those ratios.
    """
    ratios: Dict[int, List[float]] = defaultdict(list)
    for csv_path, placement in runs:
        samples = stage_samples(csv_path, placement.groups)
        alone = {grp.devices[0]: samples[(g, 0)] for g, grp in enumerate(placement.groups)
                 if grp.pp == 1 and grp.tp == 1 and samples[(g, 0)]["latency"]}
        cold = {d: _cold_latencies(smp) for d, smp in alone.items()}
        if any(len(c) < 5 for c in cold.values()):  # a saturated run: every device equally hot
            cold = {d: np.array(smp["latency"]) for d, smp in alone.items()}
        medians = {d: float(np.median(c)) for d, c in cold.items()}
        if 0 in medians:
            for d, m in medians.items():
                ratios[d].append(m / medians[0])
    return [float(np.median(ratios[d])) if d in ratios else 1.0 for d in range(n_gpus)]


def _cold_latencies(sample: Dict[str, list]) -> np.ndarray:
    """Latencies of the requests that found their stage idle for ``COLD_IDLE_S`` or longer."""
    start, end = np.array(sample["start"]), np.array(sample["end"])
    idle = np.r_[np.inf, start[1:] - end[:-1]]
    return (end - start)[idle >= COLD_IDLE_S]


def _warm_shape(warm: Dict[Config, dict], pp: int, tp: int, s: int,
                sample: Dict[str, list]) -> np.ndarray:
    """Per queued pair of ``sample`` (stage ``s`` of a (pp, tp) group): the fraction of the
    back-to-back latency the simulator gives its first request (1 without kept warm-up terms)."""
    fit = warm.get((pp, tp))
    queued = np.array(sample["queued"], dtype=bool)
    if fit is None or not fit["kept"]:
        return np.ones(int(queued.sum()))
    factor = fit["stage_idle_factor"][s]
    heat = replay_heat(np.array(sample["start"]), np.array(sample["end"]), fit["heat_time_s"], fit["cool_time_s"])
    return (factor + (1.0 - factor) * heat[:-1])[queued]


def stage_gaps(instance: Instance, profile_name: str, runs: Sequence[Tuple[str, Placement]],
               scales: Sequence[float], warm: Dict[Config, dict] | None = None) -> Dict[StageKey, dict]:
    """Per (pp, tp, stage) of ``profile_name``'s configs: the gap that makes the simulated
    occupancy (with the ``warm`` terms, if given) equal the mean measured one (never below 0),
    with the evidence."""
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
                modelled = (float(cfg.stage_latency[cfg.batch_sizes.index(1), s]) * (1 + factor * grp.pp) * scale
                            * _warm_shape(warm or {}, grp.pp, grp.tp, s, samples[(g, s)]))
                pooled[(grp.pp, grp.tp, s)] += list(np.array(samples[(g, s)]["occupancy"]) - modelled)
    return {key: {"gap_s": max(0.0, float(np.mean(v))), "queued_pairs": len(v)}
            for key, v in sorted(pooled.items()) if v}


def finish_drift(instance: Instance, csv_path: str, groups: Sequence[Group]) -> List[Tuple[int, float, float]]:
    """Per admitted request of a run, replayed in arrival order through ``instance``'s stage clock
    (the executor's dispatcher, deadlines lifted): (group, measured - predicted finish, predicted
    time the group's last stage has been busy without a break when the request leaves it). Records
    without arrival or finish times (not written by ``placeopt execute``) give nothing."""
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1" and r.get("finish_s") and r.get("arrival_s")]
    rows.sort(key=lambda r: float(r["arrival_s"]))
    index = {name: i for i, name in enumerate(instance.model_names)}
    dispatcher = Dispatcher(instance, groups)
    out = []
    for r in rows:
        g = int(r["group"])
        decision = dispatcher.place(g, index[r["model"]], float(r["arrival_s"]))
        last = int(dispatcher.tables.stage_ptr[g + 1]) - 1
        out.append((g, float(r["finish_s"]) - decision.finish, decision.stage_ends[-1] - dispatcher.since[last]))
    return out


def tail_margins(instance: Instance, runs: Sequence[Tuple[str, Placement]]) -> Dict[Config, dict]:
    """Per (pp, tp) seen in the runs: the admission margin (see the module's docstring) with the
    evidence (requests behind ``TAIL_MIN_BUSY_S`` or more of busy time, and how many of all
    replayed requests finished later than predicted by more than 1 ms)."""
    ratios: Dict[Config, List[float]] = defaultdict(list)
    late: Dict[Config, int] = defaultdict(int)
    for csv_path, placement in runs:
        for g, drift, busy in finish_drift(instance, csv_path, placement.groups):
            grp = placement.groups[g]
            late[(grp.pp, grp.tp)] += int(drift > 1e-3)
            if busy >= TAIL_MIN_BUSY_S:
                ratios[(grp.pp, grp.tp)].append(drift / busy)
    return {cfg: {"tail_margin": max(0.0, float(np.quantile(ratios[cfg], TAIL_QUANTILE))) if ratios[cfg] else 0.0,
                  "requests": len(ratios[cfg]), "later_than_predicted_by_1ms": late[cfg]}
            for cfg in sorted(late)}


def calibrated_instance(instance: Instance, profile_name: str, profile: Profile, scales: Sequence[float]) -> Instance:
    """``instance`` with the calibrated ``profile`` and device ``scales`` (what --instance-out writes)."""
    cluster: Cluster = replace(instance.cluster, latency_scale=tuple(round(x, 4) for x in scales))
    return replace(instance, cluster=cluster, profiles={**instance.profiles, profile_name: profile})


def _profile(instance: Instance, profile_name: str) -> Profile:
    for spec, profile in zip(instance.models, instance.model_profiles):
        if spec.profile == profile_name:
            return profile
    raise SystemExit(f"no model of {instance.name} uses profile {profile_name!r}")


def with_gaps(profile: Profile, gaps: Dict[StageKey, dict], warm: Dict[Config, dict] | None = None) -> Profile:
    """``profile`` with ``stage_gap_s`` (and the kept ``warm`` terms) set on every configuration
    the calibration measured."""
    configs = dict(profile.configs)
    for (pp, tp), cfg in profile.configs.items():
        measured = [gaps.get((pp, tp, s)) for s in range(pp)]
        if all(m is not None for m in measured):
            cfg = replace(cfg, stage_gap_s=tuple(m["gap_s"] for m in measured if m is not None))
        fit = (warm or {}).get((pp, tp))
        if fit is not None and fit["kept"]:
            cfg = replace(cfg, stage_idle_factor=tuple(round(f, 4) for f in fit["stage_idle_factor"]),
                          heat_time_s=fit["heat_time_s"], cool_time_s=fit["cool_time_s"])
        configs[(pp, tp)] = cfg
    note = " Stage gaps and warm-up calibrated from executor runs (placement_opt.offline.serving_calibration)."
    return replace(profile, configs=configs, source=profile.source + note)


def with_margins(profile: Profile, margins: Dict[Config, float]) -> Profile:
    """``profile`` with the admission ``margins`` (``tail_margin``) set on those configurations."""
    if not margins:
        return profile
    configs = {key: replace(cfg, tail_margin=round(margins[key], 5)) if key in margins else cfg
               for key, cfg in profile.configs.items()}
    note = " Admission tail margin of " + ", ".join(f"{pp}x{tp}" for pp, tp in sorted(margins)) + " calibrated."
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
    ap.add_argument("--tail-margin", action="append", default=[], metavar="PPxTP",
                    help="fit and write the admission margin of this configuration (e.g. 1x4; repeatable; "
                         "off for the others)")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="fit only stage gaps and device scales (the stage clock of before issue 13's warm-up model)")
    args = ap.parse_args(argv)
    instance = load_instance(args.instance)
    runs = [(_requests_csv(d), Placement.from_dict(json.load(open(p)))) for d, p in args.run]
    scales = device_scales(runs, instance.cluster.n_gpus)
    warm = {} if args.no_warm_up else warm_up(runs, scales)
    gaps = stage_gaps(instance, args.profile_name, runs, scales, warm)
    profile = with_gaps(_profile(instance, args.profile_name), gaps, warm)
    tails = tail_margins(calibrated_instance(instance, args.profile_name, profile, scales), runs)
    wanted = {_config_arg(c) for c in args.tail_margin}
    profile = with_margins(profile, {c: v["tail_margin"] for c, v in tails.items() if c in wanted})
    atomic_write_text(args.profile_out, json.dumps(profile.to_dict(), indent=2) + "\n")
    for pair in args.instance_out:
        src, dst = pair.split("=", 1)
        _write_instance(src, dst, args.profile_name, args.profile_out, scales)
    report = {"latency_scale": scales,
              "gaps": [{"pp": k[0], "tp": k[1], "stage": k[2], **v} for k, v in gaps.items()],
              "warm_up": [{"pp": k[0], "tp": k[1], **v} for k, v in warm.items()],
              "tail_margin": [{"pp": k[0], "tp": k[1], "written": k in wanted, **v} for k, v in tails.items()]}
    if args.report:
        atomic_write_text(args.report, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


def _config_arg(text: str) -> Config:
    """(pp, tp) of a ``PPxTP`` argument."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise SystemExit(f"--tail-margin {text!r}: expected PPxTP, e.g. 1x4")
    return int(parts[0]), int(parts[1])


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
