"""HBM contention as a loaded-latency curve: fitted on engine rounds, then re-predicting the one-GPU runs.

``kernel_beside.py`` found that beside ``llm-8b`` a small LLM's weight products stretch as much as
``llm-8b``'s own beside its copy, though it demands half the bytes, and ``unequal_rounds.py``
that no rate and cap of the linear model fit the unequal and the even rounds together. The
simulator's optional curve (``llm.contention_curve_gbps``, ``contention_curve_power``:
:func:`~placement_opt.simulate.meshsim.served_latency`) models why: the HBM's access time rises
with the load it serves, each running job keeps its accesses in flight, so a job is served its
demand times its latency alone over the loaded one. A small job, whose latency alone is low,
thus loses more than the heavy job beside it.

The curve stretches decode steps only (a prefill, compute-bound, keeps few accesses in flight;
every running job loads the HBM). It is a floor beside the linear rate and the cap: a step takes
the largest of the three stretches. This fits the curve's scale and power on a grid over the
unequal rounds and the even-split ones together, the calibration's rate and cap kept, and prints
the RMS log error of both against the calibration's. Then it re-predicts every whole one-GPU
H200 run on SM partitions (``beside_decode.default_folders``) with the run's calibration, with
and without the curve, and prints each run's errors ((measured - simulated) / simulated) and,
per family, their means and how many meet the issue's targets. Last, from the decode steps of
the job traces (``beside_decode.py -o latency-curve/beside-linear.json`` and ``--curve SCALE,POWER
-o latency-curve/beside-curve.json``), per family the RMS over steps of log(measured stretch /
model) without and with the curve. With ``--own-share``, ``own_prefill_decode_share`` refitted on
its fit traces without and with the curve: the one calibrated field fitted against the
simulator's timelines rather than measured job times alone.

Usage: python benchmarks/fidelity/llm/latency_curve.py [--calibration calibration-v3h-h200.json]
[--no-runs] [--own-share] [-o report.txt]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity
sys.path.insert(0, HERE)

import beside_decode  # noqa: E402
import llm_fidelity as fid  # noqa: E402
import unequal_rounds  # noqa: E402

from placement_opt.io import atomic_write_text  # noqa: E402

#: the fit's grid: the curve's scale (GB/s per GPU) and power
CURVE_GRID = np.arange(3000.0, 7001.0, 100.0)
POWER_GRID = np.round(np.arange(1.0, 4.001, 0.1), 2)
#: the issue's targets a run's errors are counted against: (error, bound, label)
TARGETS = (("throughput_err", 0.05, "throughput 5%"), ("max_llm_err", 0.10, "per-LLM 10%"),
           ("ttft_err", 0.15, "TTFT 15%"), ("tpot_err", 0.15, "TPOT 15%"),
           ("slo_attainment_pp", 3.0, "attainment 3 pp"))


def fit_curve(rounds: List[List[dict]], rate: float, cap: float, curves: Sequence[float] = CURVE_GRID,
              powers: Sequence[float] = POWER_GRID) -> Tuple[float, float, float]:
    """(scale, power, RMS log error) of the grid point whose replay (beside the linear ``rate``
    and the ``cap``) fits ``rounds`` best."""
    best = (0.0, 0.0, math.inf)
    for power in powers:
        for curve in curves:
            err = fid.replay_rms(rate, rounds, cap, float(curve), float(power))
            if err < best[2]:
                best = (float(curve), float(power), err)
    return best


def curve_model(base: Dict[str, float], curve: float, power: float) -> Dict[str, float]:
    """The calibration ``base`` with the curve on."""
    return dict(base, contention_curve_gbps=curve, contention_curve_power=power)


def partition_runs() -> List[dict]:
    """The whole one-GPU H200 runs on SM partitions of :func:`beside_decode.default_folders`."""
    return [r for f in beside_decode.default_folders() for r in fid.load_runs(f)
            if fid.whole_trial(r) and fid.partition_groups(r)]


def run_errors(run: dict, curve: float, power: float) -> Tuple[dict, dict]:
    """``run``'s errors (:func:`llm_fidelity.errors`) with its calibration and with the curve."""
    base = fid.generation_model(fid.generation_of(run["folder"]), run["folder"])
    out = []
    for model in (base, curve_model(base, curve, power)):
        sim, attain = fid.predict(run, model)
        out.append(fid.errors(run["summary"]["measured"], sim, attain))
    return out[0], out[1]


def _row(e: dict) -> str:
    return (f"{e['throughput_err']:+7.3f} {e['max_llm_err']:6.3f} {e['ttft_err']:+7.3f} {e['tpot_err']:+7.3f} "
            f"{e['slo_attainment_pp']:+6.1f}")


def _summary(errs: List[dict]) -> str:
    means = " ".join(f"{np.mean([abs(e[k]) for e in errs]):.3f}" for k in ("throughput_err", "ttft_err", "tpot_err"))
    met = ", ".join(f"{label} {sum(abs(e[k]) <= bound for e in errs)}" for k, bound, label in TARGETS)
    return f"mean |throughput|, |TTFT|, |TPOT| {means}; within {met}"


def fit_lines(calibration: Dict[str, float]) -> Tuple[List[str], float, float]:
    """The fit's report lines, and the fitted scale and power."""
    rate, cap = calibration["contention_hbm_gbps"], calibration["contention_hbm_cap_gbps"]
    unequal = fid.engine_rounds(tuple(unequal_rounds.unequal_paths()))
    even = fid.engine_rounds(unequal_rounds.EVEN_ROUNDS)
    curve, power, _ = fit_curve(unequal + even, rate, cap)
    out = [f"loaded-latency curve fitted on {len(unequal)} unequal and {len(even)} even-split rounds "
           f"(rate {rate:g}, cap {cap:g} GB/s kept): scale {curve:g} GB/s, power {power:g}"]
    for label, model in ((f"calibration (rate {rate:g}, cap {cap:g})", (0.0, 2.0)), ("with the curve", (curve, power))):
        errs = [[e for per in unequal_rounds.log_errors(rounds, rate, cap, *model) for e in per]
                for rounds in (unequal, even)]
        rms = [math.sqrt(np.mean(np.square(e))) for e in errs]
        out.append(f"{label}: RMS log error unequal {rms[0]:.4f}, even {rms[1]:.4f}, "
                   f"worst {max(errs[0] + errs[1], key=abs):+.3f}")
    return out, curve, power


def run_lines(runs: List[dict], curve: float, power: float) -> List[str]:
    """Per run its errors with the calibration and with the curve; per family the summaries."""
    head = ("calibration: tput    llm    TTFT    TPOT  att", "with the curve: tput    llm    TTFT    TPOT  att")
    out = [f"{'run':<58} {head[0]:>45} | {head[1]:>49}"]
    families: Dict[str, List[Tuple[dict, dict]]] = collections.defaultdict(list)
    for run in runs:
        before, after = run_errors(run, curve, power)
        families[beside_decode.family(run["folder"])].append((before, after))
        name = f"{os.path.basename(run['folder'])}/{run['name']}"
        out.append(f"{name:<58} {_row(before):>45} | {_row(after):>49}")
    for fam, pairs in families.items():
        for k, label in ((0, "calibration"), (1, "with the curve")):
            out.append(f"{fam} ({len(pairs)} runs), {label}: {_summary([p[k] for p in pairs])}")
    return out


#: the decode steps' groups of beside_decode.py without and with the curve (committed)
BESIDE = ("latency-curve/beside-linear.json", "latency-curve/beside-curve.json")


def trace_lines(paths: Sequence[str] = BESIDE) -> List[str]:
    """Per family of the two ``beside_decode.py`` outputs ``paths`` (without, with the curve; the
    same folders), the step-weighted RMS of the groups' log(median measured / model) beside
    other LLMs' decode steps."""
    sums: Dict[str, List[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    groups = []
    for path in paths:
        with open(os.path.join(HERE, path)) as f:
            groups.append(json.load(f))
    if groups[0]["folders"] != groups[1]["folders"]:
        raise ValueError(f"{paths[0]} and {paths[1]} read other folders")
    key = lambda g: (g["family"], g["llm"], g["share"], g["others_share"])  # noqa: E731
    curved = {key(g): g for g in groups[1]["groups"]}
    for g in groups[0]["groups"]:
        if g["others_share"] is None:
            continue
        for fam in (g["family"], "all"):
            acc = sums[fam]
            acc[0] += g["steps"] * math.log(g["ratio"]) ** 2
            acc[1] += g["steps"] * math.log(curved[key(g)]["ratio"]) ** 2
            acc[2] += g["steps"]
    return [f"decode steps beside others, {fam} ({int(n)} steps): RMS log(measured / model) "
            f"{math.sqrt(a / n):.3f} without the curve, {math.sqrt(b / n):.3f} with it"
            for fam, (a, b, n) in sorted(sums.items(), key=lambda kv: (kv[0] == "all", kv[0]))]


def own_share_lines(calibration: Dict[str, float], curve: float, power: float,
                    traces: Sequence[Tuple[str, str]] = fid.H200_TRACES) -> List[str]:
    """``own_prefill_decode_share`` refitted on ``traces`` (the H200 calibration's own-prefill fit
    runs; :func:`llm_fidelity.fit_own_prefill_share`) without and with the curve. Why: it is the
    one field of the calibration fitted against the simulator's own timelines, where the decode
    steps' contention model enters; the others are fitted on measured job times alone."""
    base = {k: v for k, v in calibration.items() if k != "fit"}
    out = []
    for label, model in (("without the curve", base), ("with the curve", curve_model(base, curve, power))):
        share, note = fid.fit_own_prefill_share(tuple(traces), model)
        out.append(f"own_prefill_decode_share refitted {label}: {share:g} ({note.split(': ', 1)[1]})")
    return out


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", default="calibration-v3h-h200.json",
                    help="calibration file under benchmarks/fidelity/llm whose rate and cap the curve is set against")
    ap.add_argument("--no-runs", action="store_true", help="the fit only, no re-prediction of the runs")
    ap.add_argument("--own-share", action="store_true",
                    help="refit own_prefill_decode_share on its fit traces without and with the curve (about 50 s)")
    ap.add_argument("-o", "--out", help="write the report here too (atomically)")
    args = ap.parse_args(argv)
    with open(os.path.join(HERE, args.calibration)) as f:
        calibration = json.load(f)
    out, curve, power = fit_lines(calibration)
    if not args.no_runs:
        out += run_lines(partition_runs(), curve, power)
    out += trace_lines()
    if args.own_share:
        out += own_share_lines(calibration, curve, power)
    text = "\n".join(out)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
