"""MuxServe benchmark: placement time, throughput vs the baselines, ADBS ablation, simulator speed.

Everything is measured in this run (same machine, same process):

* ``placement_ms``: the ``muxserve`` solve (warm: Numba kernels compiled by a first solve)
  on the largest instances, 16 LLMs (ChatLMSYS 2000) and 19 LLMs (synthetic alpha 0.9) on
  32 GPUs; the larger of the two medians of 3 runs;
* throughput (rate-weighted mean per-LLM req/s, the paper's metric, and total req/s) of
  MuxServe, spatial and temporal on every ChatLMSYS load, simulated over the instances'
  300 s; ``muxserve_vs_spatial`` / ``muxserve_vs_temporal`` are the smallest ratios over the
  loads (> 1 means MuxServe wins at every load);
* the ADBS ablation (65B at 1 req/s + 30B at 8 req/s, 4 : 1 lengths) under adbs,
  round-robin and fcfs, averaged over 3 seeds;
* Eq. 3 estimator vs simulator: per-LLM relative error of the MuxServe placement's
  estimated throughput at each ChatLMSYS load;
* ``sim_requests_per_s``: requests per wall-clock second simulating one hour of the highest
  ChatLMSYS load (ADBS, MuxServe placement);
* ``infeasible_placements``: placements that break a hardware rule of their rule set
  (``placement_opt.llm_rules``), over every bundled LLM instance x LLM solver x rule set
  (target 0); pairs where no placement exists under the rules are listed, not counted.

Run: ``python benchmarks/muxserve_bench.py [--quick]`` (``--quick``: one load, 10 simulated minutes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np

from placement_opt import load_instance
from placement_opt.errors import InputError
from placement_opt.llm_rules import llm_rule_violations
from placement_opt.settings import RULES
from placement_opt.offline.llm_catalog import ablation_requests
from placement_opt.solvers.llm_estimator import placement_estimates
from placement_opt.simulate.llm import simulate_llm
from placement_opt.solvers import llm_baselines, muxserve  # noqa: F401  (registration)
from placement_opt.solvers.base import make_solver

HERE = os.path.dirname(os.path.abspath(__file__))
MUX = os.path.join(HERE, "..", "instances", "muxserve")
LOADS = (500, 800, 1200, 1600, 2000)
PAPER = {  # REFERENCE.md section 3: MuxServe / spatial / temporal, req/s (rate-weighted mean)
    500: (4.20, 3.87, 3.51), 800: (5.38, 4.64, 2.73), 1200: (6.32, 5.07, 4.70),
    1600: (7.59, 5.36, 5.19), 2000: (7.84, 5.67, 5.36)}


def inst(name):
    return load_instance(os.path.join(MUX, name))


def placement_ms():
    times = []
    for name in ("chatlmsys-2000.json", "synthetic-a0.9.json"):
        i = inst(name)
        make_solver("muxserve").solve(i)  # compile
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            make_solver("muxserve").solve(i)
            runs.append(time.perf_counter() - t)
        times.append(float(np.median(runs)) * 1e3)
        print(f"placement {name}: median {times[-1]:.1f} ms over 3 runs")
    return max(times)


def compare(loads):
    ratios_s, ratios_t = [], []
    print("\nChatLMSYS throughput (rate-weighted mean per-LLM req/s | total req/s), 300 s simulated")
    print(f"{'load':>5} {'muxserve':>16} {'spatial':>16} {'temporal':>16} {'mux/spa':>8} {'mux/tmp':>8}"
          f"   paper mux/spa mux/tmp")
    errors = []
    for load in loads:
        i = inst(f"chatlmsys-{load}.json")
        res = {}
        for solver in ("muxserve", "spatial", "temporal"):
            pl = make_solver(solver).solve(i)
            res[solver] = simulate_llm(i, pl)
            if solver == "muxserve":
                est = placement_estimates(i, pl)
                sim = res[solver]["per_model"]
                for name, e in est.items():
                    s = sim[name]["throughput_rps"]
                    errors.append((load, name, e, s, (e - s) / s if s > 0 else np.nan))
        w = {k: v["throughput_weighted_rps"] for k, v in res.items()}
        tot = {k: v["throughput_rps"] for k, v in res.items()}
        rs, rt = w["muxserve"] / w["spatial"], w["muxserve"] / w["temporal"]
        ratios_s.append(rs)
        ratios_t.append(rt)
        p = PAPER[load]
        print(f"{load:>5} {w['muxserve']:7.2f} | {tot['muxserve']:6.1f} {w['spatial']:7.2f} | {tot['spatial']:6.1f} "
              f"{w['temporal']:7.2f} | {tot['temporal']:6.1f} {rs:8.2f} {rt:8.2f}   {p[0] / p[1]:13.2f} {p[0] / p[2]:7.2f}")
    print("\nEq. 3 estimate vs simulated throughput of every LLM (MuxServe placement)")
    print(f"{'load':>5} {'llm':>12} {'estimate':>9} {'simulated':>9} {'error':>7}")
    for load, name, e, s, err in errors:
        print(f"{load:>5} {name:>12} {e:9.2f} {s:9.2f} {err:+7.1%}")
    abs_err = np.abs([x[4] for x in errors if np.isfinite(x[4])])
    print(f"estimator |error|: mean {abs_err.mean():.1%}, median {np.median(abs_err):.1%}, max {abs_err.max():.1%}")
    return min(ratios_s), min(ratios_t)


def ablation(seeds=(0, 1, 2)):
    i = inst("adbs-ablation.json")
    pl = make_solver("muxserve").solve(i)
    out = {p: [] for p in ("adbs", "round-robin", "fcfs")}
    for seed in seeds:
        req = ablation_requests(i, seed=seed)
        for p in out:
            out[p].append(simulate_llm(i, pl, req, p)["throughput_rps"])
    print("\nADBS ablation (65B @ 1 + 30B @ 8 req/s, 4:1 lengths, 60 s, shares "
          f"{pl.groups[0].sm_share}): " + ", ".join(f"{p} {np.mean(v):.2f}" for p, v in out.items())
          + " req/s   (paper: FCFS 3.9, round robin 5.8, ADBS 7.5)")


def sim_speed(duration):
    i = inst("chatlmsys-2000.json")
    pl = make_solver("muxserve").solve(i)
    req = i.requests(replace(i.workload, duration_s=duration))
    simulate_llm(i, pl, i.requests())  # compile
    t = time.perf_counter()
    m = simulate_llm(i, pl, req)
    wall = time.perf_counter() - t
    print(f"\nsimulated {duration:.0f} s of ChatLMSYS 2000 ({len(req)} requests) in {wall:.2f} s; "
          f"throughput {m['throughput_rps']:.1f} req/s, {m['tokens_per_s']:.0f} tokens/s")
    return len(req) / wall


def infeasible_placements():
    """Rule violations of every LLM solver's placement on every bundled LLM instance, both rule sets."""
    solvers = ("muxserve", "spatial", "temporal", "greedy-memory")
    bad = 0
    print("\nhardware rules: every bundled LLM instance x LLM solver x rule set")
    for name in sorted(f for f in os.listdir(MUX) if f.endswith(".json")):
        i = inst(name)
        for rules in RULES:
            for solver in solvers:
                try:
                    pl = make_solver(solver, {"rules": rules}).solve(i)
                except InputError as e:
                    print(f"  {name} {solver} rules={rules}: no placement ({e.one_line()})")
                    continue
                problems = llm_rule_violations(pl, i)
                bad += bool(problems)
                for p in problems:
                    print(f"  {name} {solver} rules={rules}: {p}")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    ms = placement_ms()
    rs, rt = compare((2000,) if args.quick else LOADS)
    ablation((0,) if args.quick else (0, 1, 2))
    rps = sim_speed(600.0 if args.quick else 3600.0)
    bad = infeasible_placements()
    print(f"placement_ms={ms:.1f} muxserve_vs_spatial={rs:.3f} muxserve_vs_temporal={rt:.3f} "
          f"sim_requests_per_s={rps:.0f} infeasible_placements={bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
