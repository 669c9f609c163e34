"""Compare the placement solvers on the bundled AlpaServe instances and on sweeps of them.

A thin user of ``placeopt sweep`` (``placement_opt.cli.cmd_sweep``): every placement is solved
on its training workload (the instance's seed) and scored there and on two held-out workloads
(fresh seeds); the tables show both, training / held-out, since the training figure overfits.
Writes ``docs/solver_comparison.md`` (tables) and, when matplotlib is installed (the ``plots``
extra), ``docs/solver_comparison_fig12.png`` and ``docs/solver_comparison_fig17.png``:

* the bundled instances (``instances/alpaserve/*.json``, full workloads; ``arch-*`` have profiles
  from the auto-parallelization cost model) with every baseline;
* paper Fig. 12: SLO attainment of AlpaServe, Selective Replication and Clockwork++ as the
  number of GPUs, the rate scale, the CV scale and the SLO scale vary, on the S3 model set;
* paper Fig. 17 (ablation): full search (``alpaserve``) vs greedy with fixed 4-stage groups
  (``mp-greedy-4``) vs round robin on 4-stage groups, as rate and CV vary.

Sweeps use a shorter workload (``--sweep-duration``, default 60 s instead of 200 s) so the
whole run takes minutes; Clockwork++ re-places every quarter of the workload there. Jobs run
in parallel, each solve in one process (``--workers``, default every core); the sweep CSVs go
to ``--csv-dir`` (default a fresh temporary folder), and a run given the folder of an
interrupted one resumes it. The last line reads ``instances=<n> alpaserve_best_or_tied=<m>
median_solve_s=<t> alpaserve_best_or_tied_heldout=<h>``: how many instance variants were
compared, on how many ``alpaserve`` has the highest training attainment (ties count), its
median solve time, and on how many it has the highest mean held-out attainment. Run:
``python benchmarks/solver_comparison.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from placement_opt import load_instance
from placement_opt.cli.cmd_sweep import SweepConfig, base_settings, run_sweep, sweep_defaults, sweep_points, variant
from placement_opt.io import atomic_write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTANCES = os.path.join(ROOT, "instances", "alpaserve")
DOCS = os.path.join(ROOT, "docs")
BUNDLED = ["s1", "s2", "s3", "s4", "align-bert2.6b", "arch-s1", "arch-s2", "arch-s3", "arch-s4"]
TINY_DIR = os.path.join(ROOT, "tests", "search", "data")
TINY = ["tiny-2gpu-tight", "tiny-3gpu-mixed", "tiny-4gpu-bert", "tiny-4gpu-mixed", "tiny-4gpu-skewed", "tiny-2x2-five"]
GAP_SOLVERS = [("alpaserve", {"backend": "serial"}), ("alpaserve screen=full", {"backend": "serial", "screen": "full"}),
               ("selective-replication", None), ("round-robin", None)]
MAIN_SOLVERS = ["alpaserve", "selective-replication", "clockwork++", "round-robin", "mp-equal", "mp-greedy-4"]
FIG12_SOLVERS = ["alpaserve", "selective-replication", "clockwork++"]
FIG17_SOLVERS = ["alpaserve", "mp-greedy-4", "round-robin"]
QUIET = {"progress": False}


HELDOUT_SEEDS = 2
SWEEP_BASE = {"gpus": [32], "slo_scale": [5]}  # S3 on 32 GPUs: not trivially served, as in the paper's S3 runs
ABLATION_BASE = {"gpus": [24], "slo_scale": [5]}


def instance_path(name: str) -> str:
    return os.path.join(INSTANCES, f"{name}.json")


def solver_options(solvers, duration=None, ablation=False, serial=True):
    """Each solver's options: quiet, and serial where jobs run in parallel (else each search
    uses its own process pool over the cores), Clockwork++ re-placing every quarter of a
    sweep's workload, the ablation's round robin on 4-stage pipelines."""
    opts = {n: {k: v for k, v in sweep_defaults(n).items() if serial or k != "backend"} for n in solvers}
    if "clockwork++" in opts:
        opts["clockwork++"]["window_s"] = 60.0 if duration is None or duration >= 180 else duration / 4
    if "round-robin" in solvers and ablation:
        opts["round-robin"] = {"group_size": 4}
    return opts


def sweep(name, axes, solvers, csv_path, workers, duration=None, ablation=False):
    """The rows of one sweep of instance ``name`` (every combination of ``axes``); with one
    worker each search uses its process pool, as ``placeopt solve`` does."""
    path = instance_path(name)
    inst = load_instance(path)
    options = solver_options(solvers, duration, ablation, serial=workers > 1)
    config = SweepConfig(instance_path=path, solvers=tuple(solvers), options=options,
                         heldout_seeds=tuple(inst.seed + 1 + k for k in range(HELDOUT_SEEDS)), time_limit=None)
    if duration is not None:
        axes = {**axes, "duration_s": [duration]}
    return run_sweep(config, sweep_points(inst, axes), csv_path, workers)


def by_point(rows, solvers):
    """Rows grouped per point, in order: [(point row, {solver: row})]."""
    out = []
    for i in range(0, len(rows), len(solvers)):
        group = rows[i:i + len(solvers)]
        out.append((group[0], {r["solver"]: r for r in group}))
    return out


def summary(instance, per_solver):
    """One instance variant's result: its rows and whether alpaserve is best (training, held-out)."""
    def best(column):
        top = max(float(r[column]) for r in per_solver.values())
        return float(per_solver["alpaserve"][column]) >= top - 1e-9
    return {"instance": instance, "rows": per_solver, "alpaserve_best": best("train_attainment"),
            "alpaserve_best_heldout": best("heldout_attainment"),
            "alpaserve_solve_s": float(per_solver["alpaserve"]["solve_s"])}


def bundled(names, csv_dir):
    """Every bundled instance with every main solver, full workloads, one solve at a time
    (each search on its process pool over the cores, as ``placeopt solve`` runs it), so the
    solve times are those a user sees."""
    out = []
    for name in names:
        rows = sweep(name, {}, MAIN_SOLVERS, os.path.join(csv_dir, f"{name}.csv"), 1)
        out.append(summary(name, {r["solver"]: r for r in rows}))
        print(f"  {name:16s} " + "  ".join(f"{s}={float(out[-1]['rows'][s]['train_attainment']):.3f}/"
                                           f"{float(out[-1]['rows'][s]['heldout_attainment']):.3f}"
                                           for s in MAIN_SOLVERS), file=sys.stderr, flush=True)
    return out


def sweeps(quick: bool, duration: float, csv_dir: str, workers: int):
    """Fig. 12 and Fig. 17: one sweep per axis, the others at the base; a figure's sweeps share
    one CSV, so their common base point is solved once."""
    fig12 = {
        "gpus": [16, 32, 48] if quick else [16, 24, 32, 48],
        "rate_scale": [1, 3] if quick else [0.5, 1, 2, 3],
        "cv_scale": [1, 3] if quick else [0.5, 1, 2, 3],
        "slo_scale": [1, 5] if quick else [0.5, 1, 2, 5, 10],
    }
    fig17 = {
        "rate_scale": [1, 2] if quick else [0.5, 1, 1.5, 2],
        "cv_scale": [1, 2] if quick else [0.5, 1, 2, 3],
    }
    results = {"fig12": {}, "fig17": {}}
    unique = {}
    for fig, spec, base, solvers in (("fig12", fig12, SWEEP_BASE, FIG12_SOLVERS),
                                     ("fig17", fig17, ABLATION_BASE, FIG17_SOLVERS)):
        print(f"{fig}:", file=sys.stderr)
        for axis, values in spec.items():
            rows = sweep("s3", {**base, axis: values}, solvers, os.path.join(csv_dir, f"s3-{fig}.csv"), workers,
                         duration, ablation=fig == "fig17")
            results[fig][axis] = [(float(point[axis]), per) for point, per in by_point(rows, solvers)]
            for point, per in by_point(rows, solvers):
                key = (fig,) + tuple(point[k] for k in ("gpus", "rate_scale", "cv_scale", "slo_scale"))
                unique[key] = summary(f"s3-{fig}", per)
    results["unique"] = list(unique.values())
    return results


def tiny_gaps():
    """Optimality gaps against ``exhaustive`` on the tiny test instances (percentage points)."""
    from placement_opt import load_instance
    from placement_opt.solvers import run_solver
    from placement_opt.solvers.exhaustive import count_exhaustive
    print("optimality gaps on tiny instances:", file=sys.stderr)
    rows = []
    for name in TINY:
        inst = load_instance(os.path.join(TINY_DIR, f"{name}.json"))
        best = run_solver(inst, "exhaustive", options=QUIET).metrics["slo_attainment"]
        row = {"instance": name, "models": len(inst.models), "gpus": inst.cluster.n_gpus,
               "placements": count_exhaustive(inst), "exhaustive": best}
        for label, opts in GAP_SOLVERS:
            solver = label.split()[0]
            got = run_solver(inst, solver, options={} if opts is None else {**QUIET, **opts}).metrics["slo_attainment"]
            row[label] = got
        rows.append(row)
        print(f"  {name:18s} exhaustive={best:.4f} " + " ".join(f"{k}={row[k]:.4f}" for k, _ in GAP_SOLVERS),
              file=sys.stderr)
    return rows


def paper_style_greedy(inst, shells):
    """Algorithm 1 as the paper states it (the same-run baseline): every candidate simulated in full."""
    import numpy as np

    from placement_opt.simulate.evaluator import PlacementEvaluator
    from placement_opt.feasibility import fits, model_stage_bytes
    from placement_opt.solvers.greedy import to_groups
    ev = PlacementEvaluator(inst)
    models = [[] for _ in shells]
    used = [np.zeros(pp) for _, pp, _ in shells]
    best = 0
    while True:
        top = None
        for m in range(len(inst.models)):
            for g, (_, pp, tp) in enumerate(shells):
                if m in models[g] or not fits(inst, used[g], m, pp, tp):
                    continue
                trial = [list(x) for x in models]
                trial[g].append(m)
                acc = int(ev.accepted_per_model(to_groups(inst, shells, trial)).sum())
                if top is None or acc > top[0]:
                    top = (acc, m, g)
        if top is None:
            return best
        acc, m, g = top
        models[g].append(m)
        used[g] = used[g] + model_stage_bytes(inst, m, *shells[g][1:])
        best = max(best, acc)


def speed():
    """Same-run ratios: the paper-style greedy vs ours, and a full-greedy search vs screen-then-refine."""
    from placement_opt.solvers import run_solver
    from placement_opt.solvers.alpaserve_greedy import fixed_partition
    from placement_opt.solvers.greedy import greedy_selection
    s1 = load_instance(instance_path("s1"))
    inst = variant(s1, {**base_settings(s1), "duration_s": 30.0})
    shells = fixed_partition(inst, 4, 1)
    t0 = time.perf_counter()
    paper = paper_style_greedy(inst, shells)
    t1 = time.perf_counter()
    _, stats = greedy_selection(inst, shells)
    t2 = time.perf_counter()
    full = run_solver(inst, "alpaserve", options={**QUIET, "backend": "serial", "screen": "full"})
    t3 = time.perf_counter()
    fast = run_solver(inst, "alpaserve", options={**QUIET, "backend": "serial"})
    t4 = time.perf_counter()
    out = {"greedy_paper_s": t1 - t0, "greedy_ours_s": t2 - t1, "greedy_same_answer": paper == stats["accepted"],
           "search_full_s": t3 - t2, "search_fast_s": t4 - t3,
           "search_full_attainment": full.metrics["slo_attainment"],
           "search_fast_attainment": fast.metrics["slo_attainment"]}
    print(f"greedy (S1, 30 s, 4-GPU groups): paper-style {out['greedy_paper_s']:.2f} s, ours {out['greedy_ours_s']:.2f} s, "
          f"ratio {out['greedy_paper_s'] / out['greedy_ours_s']:.1f}x, same answer {out['greedy_same_answer']}")
    print(f"alpaserve search (S1, 30 s, serial): screen=full {out['search_full_s']:.2f} s "
          f"({out['search_full_attainment']:.4f}), screen=fast {out['search_fast_s']:.2f} s "
          f"({out['search_fast_attainment']:.4f}), ratio {out['search_full_s'] / out['search_fast_s']:.1f}x")
    return out


def cell(row):
    """``training / held-out`` attainment of a sweep row."""
    return f"{float(row['train_attainment']):.3f} / {float(row['heldout_attainment']):.3f}"


def markdown(main, sw, duration, wall, gaps, sp, workers) -> str:
    lines = ["# Solver comparison", "",
             "Written by `benchmarks/solver_comparison.py`, a user of `placeopt sweep` ([sweep.md](sweep.md)).",
             "Every cell is **training / held-out** SLO attainment: the placement is solved on the instance's",
             f"workload (seed 0) and scored there, then on {HELDOUT_SEEDS} fresh workloads (seeds 1 and 2; their mean",
             "is shown). The training figure is what the solver optimised and overfits; the held-out one is",
             "what a deployment would see. Solve times are wall seconds on this machine (2 cores shared with",
             "other sessions): on the bundled instances one solve at a time, each search on its process pool",
             f"over the cores; in the sweeps {workers} solves at a time, each in one process (whole run",
             f"{wall:.0f} s). Sweeps use {duration:g} s workloads;",
             "Clockwork++ re-places every quarter of a sweep's workload (60 s windows on the full instances).", "",
             "## Bundled instances (full workloads)", ""]
    head = "| instance | " + " | ".join(MAIN_SOLVERS) + " | alpaserve solve (s) |"
    lines += [head, "|" + "---|" * (len(MAIN_SOLVERS) + 2)]
    for v in main:
        lines.append(f"| {v['instance']} | " + " | ".join(cell(v["rows"][s]) for s in MAIN_SOLVERS)
                     + f" | {v['alpaserve_solve_s']:.1f} |")
    lines += ["", "## Search speed (same run, S1 model set with a 30 s workload, one process)", "",
              "| measurement | paper-style | ours | ratio |", "|---|---|---|---|",
              f"| Algorithm 1 on 4-GPU groups (same answer: {sp['greedy_same_answer']}) | {sp['greedy_paper_s']:.2f} s | "
              f"{sp['greedy_ours_s']:.2f} s | {sp['greedy_paper_s'] / sp['greedy_ours_s']:.1f}x |",
              f"| alpaserve: full greedy on every task vs screen-then-refine (attainment "
              f"{sp['search_full_attainment']:.4f} vs {sp['search_fast_attainment']:.4f}) | {sp['search_full_s']:.2f} s | "
              f"{sp['search_fast_s']:.2f} s | {sp['search_full_s'] / sp['search_fast_s']:.1f}x |"]
    lines += ["", "## Optimality gaps on tiny instances (percentage points below `exhaustive`, training workload)", "",
              "| instance | models | GPUs | placements | exhaustive | " + " | ".join(k for k, _ in GAP_SOLVERS) + " |",
              "|" + "---|" * (5 + len(GAP_SOLVERS))]
    for r in gaps:
        lines.append(f"| {r['instance']} | {r['models']} | {r['gpus']} | {r['placements']} | {r['exhaustive']:.4f} | "
                     + " | ".join(f"{100 * (r['exhaustive'] - r[k]):.2f}" for k, _ in GAP_SOLVERS) + " |")
    for fig, title, solvers in (("fig12", "Fig. 12 sweeps (S3 model set, 32 GPUs unless varied)", FIG12_SOLVERS),
                                ("fig17", "Fig. 17 ablation (S3 model set, 24 GPUs)", FIG17_SOLVERS)):
        lines += ["", f"## {title}", ""]
        for axis, points in sw[fig].items():
            label = AXIS_LABELS[axis]
            lines += [f"### SLO attainment vs {label}", "", f"| {label} | " + " | ".join(solvers)
                      + " | alpaserve solve (s) |", "|" + "---|" * (len(solvers) + 2)]
            for x, per in points:
                lines.append(f"| {x:g} | " + " | ".join(cell(per[s]) for s in solvers)
                             + f" | {float(per['alpaserve']['solve_s']):.1f} |")
            lines.append("")
    return "\n".join(lines) + "\n"


AXIS_LABELS = {"gpus": "GPUs", "rate_scale": "rate scale", "cv_scale": "CV scale", "slo_scale": "SLO scale"}


def plots(sw) -> list[str]:
    """The Fig. 12 and Fig. 17 figures (held-out solid, training dashed), if matplotlib is installed."""
    from placement_opt.errors import InputError
    from placement_opt.plots import require_matplotlib, save_sweep_figure
    try:
        require_matplotlib()
    except InputError:
        print("matplotlib is not installed (pip install 'placeopt[plots]'): no plots", file=sys.stderr)
        return []
    written = []
    for fig, solvers in (("fig12", FIG12_SOLVERS), ("fig17", FIG17_SOLVERS)):
        panels = [(axis, [row for _, per in points for row in per.values()]) for axis, points in sw[fig].items()]
        path = os.path.join(DOCS, f"solver_comparison_{fig}.png")
        save_sweep_figure(path, panels, solvers)
        written.append(path)
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sweep points and bundled instances")
    ap.add_argument("--sweep-duration", type=float, default=60.0, help="workload seconds of sweep variants")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="jobs run at once (default: every core)")
    ap.add_argument("--csv-dir", default=None, help="folder of the sweep CSVs (default: a fresh temporary one); "
                                                    "the folder of an interrupted run resumes it")
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/")
    args = ap.parse_args(argv)
    csv_dir = args.csv_dir or tempfile.mkdtemp(prefix="solver-comparison-")
    os.makedirs(csv_dir, exist_ok=True)
    print(f"sweep CSVs in {csv_dir}", file=sys.stderr)
    start = time.perf_counter()
    print("bundled instances (training / held-out):", file=sys.stderr)
    main_results = bundled(["s1", "s3"] if args.quick else BUNDLED, csv_dir)
    gaps = tiny_gaps()
    sp = speed()
    sw = sweeps(args.quick, args.sweep_duration, csv_dir, args.workers)
    wall = time.perf_counter() - start
    all_variants = main_results + sw.pop("unique")
    s3 = next((v for v in main_results if v["instance"] == "s3"), None)
    if s3 is not None:
        others = max(float(r["train_attainment"]) for n, r in s3["rows"].items() if n != "alpaserve")
        ours = float(s3["rows"]["alpaserve"]["train_attainment"])
        print(f"s3: alpaserve solve {s3['alpaserve_solve_s']:.1f} s (target < 60), attainment {ours:.4f} vs best "
              f"baseline {others:.4f} ({'ok' if ours >= others - 1e-9 and s3['alpaserve_solve_s'] < 60 else 'MISSED'})")
    if not args.no_docs:
        os.makedirs(DOCS, exist_ok=True)
        atomic_write_text(os.path.join(DOCS, "solver_comparison.md"),
                          markdown(main_results, sw, args.sweep_duration, wall, gaps, sp, args.workers))
        for p in plots(sw):
            print(f"wrote {os.path.relpath(p, ROOT)}", file=sys.stderr)
    gap = max(100 * (r["exhaustive"] - r["alpaserve"]) for r in gaps)
    print(f"tiny instances: largest alpaserve gap to exhaustive {gap:.2f} points (target <= 2)")
    solve_times = [v["alpaserve_solve_s"] for v in all_variants]
    print(f"instances={len(all_variants)} alpaserve_best_or_tied={sum(v['alpaserve_best'] for v in all_variants)} "
          f"median_solve_s={statistics.median(solve_times):.2f} "
          f"alpaserve_best_or_tied_heldout={sum(v['alpaserve_best_heldout'] for v in all_variants)}")


if __name__ == "__main__":
    main()
