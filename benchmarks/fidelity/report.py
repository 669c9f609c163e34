"""Tables of docs/fidelity.md from a fidelity run's output (see run_gpu.sh).

Usage: python benchmarks/fidelity/report.py RUNS_DIR [--gap-profile profile-gpu-gap.json]
RUNS_DIR holds poisson-simple/, gamma-pipeline/, ... as `placeopt execute --slo-scale` wrote them.
With --gap-profile the simulator is re-run on the same requests with that profile, to show how
much of the latency gap the back-to-back profile explains.
"""

import argparse
import csv
import dataclasses
import json
import os

import numpy as np

from placement_opt import load_instance, load_placement
from placement_opt.profile import Profile
from placement_opt.simulate.flowshop import simulate_dnn
from placement_opt.workload import SLOSpec

HERE = os.path.dirname(os.path.abspath(__file__))


def stage_stats(path):
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1" and r["finish_s"]]
    d = [float(r["stage0_end_s"]) - float(r["stage0_start_s"]) for r in rows]
    return float(np.median(d)) if d else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--gap-profile")
    ap.add_argument("--prefix", default="", help="run folder prefix (gap- for the fullgap phase)")
    ap.add_argument("--instance-suffix", default="", help="instance file suffix (-gap for the fullgap phase)")
    args = ap.parse_args()
    print("| arrivals | placement | SLO scale | attainment simulated | measured | diff (pp) | mean latency "
          "simulated (ms) | measured (ms) | diff | late | stage-0 median (ms)"
          + (" | sim. latency, idle-gap profile (ms)" if args.gap_profile else "") + " |")
    print("|" + "---|" * (11 + bool(args.gap_profile)))
    worst = 0.0
    for arrivals in ("poisson", "gamma"):
        inst = load_instance(os.path.join(HERE, f"two-models-{arrivals}{args.instance_suffix}.json"))
        gap_inst = None
        if args.gap_profile:
            with open(args.gap_profile) as f:
                prof = Profile.from_dict("transformer-5b", json.load(f), "profile")
            gap_inst = dataclasses.replace(inst, profiles={"transformer-5b": prof})
        for plc in ("simple", "pipeline", "tp2", "alpaserve"):
            run = os.path.join(args.runs, f"{args.prefix}{arrivals}-{plc}")
            if not os.path.isdir(run):
                continue
            with open(os.path.join(run, "trials.json")) as f:
                trials = json.load(f)
            for t in trials:
                ms, ss = t["measured_slo_attainment"], t["simulated_slo_attainment"]
                ml, sl = t["measured_latency_mean_s"], t["simulated_latency_mean_s"]
                worst = max(worst, abs(ms - ss))
                extra = ""
                if gap_inst is not None:
                    wl = dataclasses.replace(gap_inst.workload, slo=SLOSpec(scale=t["slo_scale"]))
                    gi = dataclasses.replace(gap_inst, workload=wl)
                    req = gi.requests()
                    dur = json.load(open(os.path.join(run, t["trial"], "metrics.json")))["requests"]
                    sub = req.select(np.arange(len(req)) < dur)
                    pl = load_placement(os.path.join(run, "..", f"placement-alpaserve-{arrivals}.json")) \
                        if plc == "alpaserve" else load_placement(os.path.join(HERE, f"placement-{plc}.json"))
                    extra = f" | {simulate_dnn(gi, pl, sub)['latency_mean_s'] * 1e3:.2f}"
                s0 = stage_stats(os.path.join(run, t["trial"], "requests.csv"))
                print(f"| {arrivals} | {plc} | {t['slo_scale']:g} | {ss:.4f} | {ms:.4f} | {100 * (ms - ss):+.2f} | "
                      f"{sl * 1e3:.2f} | {ml * 1e3:.2f} | {100 * (ml / sl - 1):+.1f}% | {t['late']} | {s0 * 1e3:.2f}"
                      f"{extra} |")
    print(f"\nlargest attainment difference: {100 * worst:.2f} percentage points")


if __name__ == "__main__":
    main()
