"""LLM fidelity: measured against simulated, from the committed results of the GPU runs.

Reads every results folder ``benchmarks/fidelity/llm/results*/`` (one per GPU run of an
engine version, written by ``benchmarks/fidelity/llm/run_gpu.sh``; ``results`` is the first H100
run, ``results-v2`` the run after the engine fixes, ...): every ``summary.json`` under it (one
per run and policy: ``placeopt execute`` of an LLM instance, the simulator's prediction beside
the measurement), ``roofline.json`` and ``engine.json`` (the engine micro-benchmark). Prints,
per folder, the engine benchmark's summary, one row per run, the placement and policy
rankings per workload; and as its last line, for the newest folder that has any result,

    max_throughput_err=<x> max_llm_err=<y> max_ttft_err=<t> max_attain_pp=<z> ranking_ok=<0|1> decode_roofline=<r>

Errors are fractions (|measured - simulated| / simulated), the worst over the runs;
attainment in points; ``ranking_ok`` is 1 when, for every workload, the placements (and the
policies of the ablation) ordered by measured total throughput are ordered the same by the
simulator; ``decode_roofline`` is the worst fraction of the HBM roofline (specified
bandwidth) of the 7B decode step over batch 1-32 at a 512-token context. ``nan`` marks a
figure with no result behind it.

Usage: python benchmarks/llm_fidelity.py [--results DIR]  (one folder instead of all)
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
LLM = os.path.join(HERE, "fidelity", "llm")


def results_folders() -> List[str]:
    """``results``, then ``results-v2``, ``results-v3``... (oldest first)."""
    found = [p for p in glob.glob(os.path.join(LLM, "results*")) if os.path.isdir(p)]
    return sorted(found, key=lambda p: (len(os.path.basename(p)), os.path.basename(p)))


def load_runs(results: str) -> List[dict]:
    """Every completed run under ``results``: its name (folder), workload, placement, policy, summary."""
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "**", "summary.json"), recursive=True)):
        with open(path) as f:
            s = json.load(f)
        rel = os.path.relpath(os.path.dirname(path), results).split(os.sep)
        workload, _, placement = rel[0].partition("-")
        runs.append({"name": "/".join(rel), "workload": workload, "placement": placement or rel[0],
                     "policy": s["policy"], "summary": s})
    return runs


def _worst(values: List[Optional[float]]) -> float:
    known = [abs(v) for v in values if v is not None]
    return max(known) if known else math.nan


def _order(items: Dict[str, Tuple[float, float]], which: int) -> List[str]:
    return sorted(items, key=lambda k: -items[k][which])


def rankings(runs: List[dict]) -> Tuple[List[str], bool]:
    """Per workload, placements (adbs or their own policy) and, for muxserve, policies ordered
    by measured and by simulated throughput; returns the report lines and whether all agree."""
    lines, ok, compared = [], True, False
    for w in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == w and r["summary"]["status"] == "complete"]
        placements = {r["placement"]: (r["summary"]["measured"]["throughput_rps"],
                                       r["summary"]["simulated"]["throughput_rps"])
                      for r in mine if r["policy"] in ("adbs", "temporal")}
        policies = {r["policy"]: (r["summary"]["measured"]["throughput_rps"],
                                  r["summary"]["simulated"]["throughput_rps"])
                    for r in mine if r["placement"] == "muxserve"}
        for what, items in (("placements", placements), ("policies", policies)):
            if len(items) < 2:
                continue
            measured, simulated = _order(items, 0), _order(items, 1)
            compared = True
            ok &= measured == simulated
            lines.append(f"{w} {what}: measured {' > '.join(measured)}; simulated {' > '.join(simulated)}")
    return lines, ok and compared


def roofline(results: str) -> float:
    """The worst roofline fraction over batch 1-32 at context 512 (nan without results)."""
    path = os.path.join(results, "roofline.json")
    if not os.path.exists(path):
        return math.nan
    with open(path) as f:
        points = json.load(f)["points"]
    fr = [p["roofline_fraction_spec"] for p in points if p["context"] == 512 and p["batch"] <= 32
          and p["roofline_fraction_spec"] is not None]
    return min(fr) if fr else math.nan


def engine_lines(results: str) -> List[str]:
    """The engine micro-benchmark's summary per mechanism (none without ``engine.json``)."""
    path = os.path.join(results, "engine.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    lines = []
    for run in data["runs"]:
        per = run["per_llm"]
        overlap = "-" if run["overlap"] is None else f"{run['overlap']:.2f}"
        lines.append(f"engine {run['mechanism']} SMs {run['sm_counts']}: decode round {run['round_ms']:.1f} ms "
                     f"(alone: sum {run['sum_alone_ms']:.1f}, max {run['max_alone_ms']:.1f}; overlap {overlap}), "
                     f"aggregate {run['aggregate_gbps_together']:.0f} GB/s; host per step launch "
                     f"{max(p['launch_us'] for p in per):.0f} us, finish {max(p['finish_us'] for p in per):.0f} us; "
                     f"slowdown together {min(p['slowdown_together'] for p in per):.2f}-"
                     f"{max(p['slowdown_together'] for p in per):.2f}x")
    return lines


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3f}"


def report(results: str) -> Tuple[List[dict], bool]:
    """Print one results folder; returns its runs and whether its rankings agree."""
    runs = load_runs(results)
    print(f"== {os.path.relpath(results, HERE)}")
    for line in engine_lines(results):
        print(line)
    print(f"{'run':32} {'status':9} {'tput meas':>9} {'sim':>7} {'err':>6} {'llm err':>7} {'ttft err':>8} "
          f"{'tpot err':>8} {'attain pp':>9}  SM partitioning")
    for r in runs:
        s, e = r["summary"], r["summary"]["errors"]
        print(f"{r['name']:32} {s['status'][:9]:9} {s['measured']['throughput_rps']:9.3f} "
              f"{s['simulated']['throughput_rps']:7.3f} {_fmt(e['throughput_err']):>6} {_fmt(e['max_llm_err']):>7} "
              f"{_fmt(e['ttft_err']):>8} {_fmt(e['tpot_err']):>8} {e['slo_attainment_pp']:9.2f}  "
              f"{','.join(s['sm_partitioning'])}")
    lines, ranking_ok = rankings(runs)
    for line in lines:
        print(line)
    return runs, ranking_ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=None, help="one folder of GPU results (default: every results* folder)")
    args = ap.parse_args()
    folders = [args.results] if args.results else results_folders()
    last, runs, ranking_ok = folders[-1] if folders else LLM, [], False
    for folder in folders:
        folder_runs, ok = report(folder)
        if folder_runs or os.path.exists(os.path.join(folder, "roofline.json")):
            last, runs, ranking_ok = folder, folder_runs, ok
    print(f"(last line: {os.path.relpath(last, HERE)})")
    errs = [r["summary"]["errors"] for r in runs]
    print(f"max_throughput_err={_worst([e['throughput_err'] for e in errs]):.4f} "
          f"max_llm_err={_worst([e['max_llm_err'] for e in errs]):.4f} "
          f"max_ttft_err={_worst([e['ttft_err'] for e in errs]):.4f} "
          f"max_attain_pp={_worst([e['slo_attainment_pp'] for e in errs]):.2f} "
          f"ranking_ok={int(ranking_ok)} decode_roofline={roofline(last):.3f}")


if __name__ == "__main__":
    main()
