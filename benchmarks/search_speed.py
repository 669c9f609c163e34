"""Search speed and quality (issue 14): kernel speed, search CPU, held-out attainment, scale.

Points (issue 14, item 2): the bundled S1-S4 and align-bert2.6b (full workloads) and every
Fig. 12 sweep point of ``benchmarks/solver_comparison.py`` (S3 set, 60 s workloads). Each
point is solved by the default ``alpaserve`` in one process (``backend=serial``) and scored on
its training workload and on two fresh seeds (``HELDOUT_SEEDS``: the held-out attainment is
their mean).

``--record-baseline`` solves every point with the solver as it is and writes
``benchmarks/search_speed/baseline.json``; a normal run compares against that file:
``heldout_delta_pp`` is the worst (lowest) change of held-out attainment over the points, in
percentage points.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from placement_opt import instance_from_dict  # noqa: E402
from placement_opt.io import atomic_write_text  # noqa: E402
from placement_opt.simulate import build_tables, run_tables  # noqa: E402
from placement_opt.simulate.kernels import EARLIEST, accept_flow_shop  # noqa: E402
from placement_opt.simulate import simulate  # noqa: E402
from placement_opt.solvers import run_solver  # noqa: E402
from simulator_speed import instance_data, placement_groups  # noqa: E402

BASELINE = os.path.join(ROOT, "benchmarks", "search_speed", "baseline.json")
HELDOUT_SEEDS = (1001, 1002)
BUNDLED = ["s1", "s2", "s3", "s4", "align-bert2.6b"]
SWEEP_DURATION = 60.0
INSTANCES = os.path.join(ROOT, "instances", "alpaserve")


def load_json(name: str) -> dict:
    """The bundled instance ``name`` as a dict."""
    with open(os.path.join(INSTANCES, f"{name}.json")) as f:
        return json.load(f)


def variant(base: dict, label: str, *, nodes: int | None = None, rate_scale: float = 1.0, cv_scale: float = 1.0,
            slo_scale: float | None = None, duration: float | None = None):
    """``base`` (an instance dict) named ``label`` with the point's settings: the same points as the
    Fig. 12 sweeps of solver_comparison.py, built here as when the baseline was recorded."""
    d = json.loads(json.dumps(base))
    d["name"] = label
    if nodes is not None:
        d["cluster"]["nodes"] = nodes
    w = d["workload"]
    w["arrival"]["rate"] = w["arrival"]["rate"] * rate_scale
    if "cv" in w["arrival"]:
        w["arrival"]["cv"] = w["arrival"]["cv"] * cv_scale
    if slo_scale is not None:
        w["slo"] = {"scale": slo_scale}
    if duration is not None:
        w["duration_s"] = duration
    return instance_from_dict(d, base_dir=INSTANCES)


def fig12_points() -> list[tuple[str, dict]]:
    """The distinct Fig. 12 sweep points of solver_comparison.py (S3 set on 32 GPUs by default)."""
    kws = ([dict(nodes=n) for n in (2, 3, 4, 6)] + [dict(nodes=4, rate_scale=r) for r in (0.5, 2, 3)]
           + [dict(nodes=4, cv_scale=c) for c in (0.5, 2, 3)] + [dict(nodes=4, slo_scale=s) for s in (0.5, 1, 2, 10)])
    return [("s3-fig12-" + ",".join(f"{k}={v}" for k, v in sorted(kw.items())), kw) for kw in kws]


def points(only: str = "") -> list:
    """(label, instance) of every point, optionally those whose label contains ``only``."""
    out = [(name, variant(load_json(name), name)) for name in BUNDLED]
    s3 = load_json("s3")
    out += [(label, variant(s3, label, duration=SWEEP_DURATION, **kw)) for label, kw in fig12_points()]
    return [(label, inst) for label, inst in out if only in label]


def solve_point(inst, options: dict | None = None) -> dict:
    """Solve in this process and score on training and held-out workloads; CPU seconds of the solve."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    placement = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False, **(options or {})})
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    heldout = [simulate(inst, placement, seed=s)["slo_attainment"] for s in HELDOUT_SEEDS]
    return {"train": placement.metrics["slo_attainment"], "heldout": heldout,
            "heldout_mean": statistics.fmean(heldout), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "replicas": sum(len(g.models) for g in placement.groups), "groups": len(placement.groups)}


def record_baseline(only: str) -> None:
    """Solve every point with today's solver and write BASELINE."""
    rows = {}
    for label, inst in points(only):
        rows[label] = solve_point(inst)
        print(f"  {label:40s} {json.dumps(rows[label])}", file=sys.stderr, flush=True)
    data = {"note": "alpaserve default options, backend=serial, before issue 14's changes; heldout seeds "
                    f"{list(HELDOUT_SEEDS)}; cpu_s measured on the 2-core shared dev machine",
            "heldout_seeds": list(HELDOUT_SEEDS), "points": rows}
    os.makedirs(os.path.dirname(BASELINE), exist_ok=True)
    atomic_write_text(BASELINE, json.dumps(data, indent=1) + "\n")


# --- kernel --------------------------------------------------------------------------------------

@njit(cache=True)
def previous_kernel(arrival, model, deadline, host_ptr, host_group, host_lat_ptr, lat, stage_ptr,
                    finish, group_out, busy, clocks, overhead):
    """The flow-shop kernel as it was before issue 14 (earliest dispatch), kept here only as the
    same-run baseline: two passes per request (finish, then occupy), int64 tables, every
    request's finish and group written."""
    accepted = 0
    for i in range(arrival.shape[0]):
        m = model[i]
        h = -1
        best = np.inf
        for k in range(host_ptr[m], host_ptr[m + 1]):
            c = clocks[stage_ptr[host_group[k] + 1] - 1]
            if c < best:
                best = c
                h = k
        if h >= 0:
            g = host_group[h]
            off = host_lat_ptr[h]
            s0 = stage_ptr[g]
            t = arrival[i]
            for s in range(stage_ptr[g + 1] - s0):
                c = clocks[s0 + s]
                if c > t:
                    t = c
                t += lat[off + s]
            end = t + overhead
            if end <= deadline[i]:
                finish[i] = end
                group_out[i] = g
                accepted += 1
                t = arrival[i]
                for s in range(stage_ptr[g + 1] - s0):
                    c = clocks[s0 + s]
                    if c > t:
                        t = c
                    t += lat[off + s]
                    clocks[s0 + s] = t
                    busy[g] += lat[off + s]
                continue
        finish[i] = -1.0
        group_out[i] = -1
    return accepted


def kernel_case(duration_s: float):
    """The issue's kernel case: 64 x BERT-1.3B on 16 groups of 4 stages (benchmarks/simulator_speed.py)
    at 100 req/s for ``duration_s`` seconds; returns (instance, tables, requests)."""
    inst = instance_from_dict(instance_data(duration_s, 100.0, "earliest"))
    return inst, build_tables(inst, placement_groups(inst)), inst.requests()


def time_kernels(duration_s: float, repeat: int) -> dict:
    """Best-of-``repeat`` requests/s of the previous kernel, run_flow_shop and accept_flow_shop on
    the same case, interleaved so that machine noise hits all three alike; checks they agree."""
    inst, tables, req = kernel_case(duration_s)
    n, n_models, overhead = len(req), len(inst.models), inst.simulator.overhead_s
    i64 = [np.asarray(a, dtype=np.int64) for a in (tables.host_ptr, tables.host_group, tables.host_lat_ptr)]
    stage64 = tables.stage_ptr.astype(np.int64)
    model64 = req.model.astype(np.int64)

    def previous():
        fin, grp = np.empty(n), np.empty(n, dtype=np.int64)
        busy, clocks = np.zeros(tables.n_groups), np.zeros(int(stage64[-1]))
        return previous_kernel(req.arrival, model64, req.deadline, i64[0], i64[1], i64[2], tables.lat, stage64,
                               fin, grp, busy, clocks, overhead), fin

    def full():
        res = run_tables(tables, req, n_models, inst.simulator)
        return res.accepted, res.finish

    def attainment():
        counts = np.zeros(n_models, dtype=np.int64)
        acc = accept_flow_shop((req.arrival, req.model, req.deadline), tuple(tables), np.zeros(tables.n_groups),
                               np.zeros(int(tables.stage_ptr[-1])), counts, overhead, EARLIEST)
        return acc, counts

    runs = {"previous": previous, "run_flow_shop": full, "accept_flow_shop": attainment}
    best = {k: np.inf for k in runs}
    outputs = {}
    for _ in range(repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            outputs[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    same = (np.array_equal(outputs["previous"][1].view(np.int64), outputs["run_flow_shop"][1].view(np.int64))
            and outputs["previous"][0] == outputs["run_flow_shop"][0] == outputs["accept_flow_shop"][0])
    return {"requests": n, "same_decisions": bool(same),
            **{f"{k}_requests_per_s": n / v for k, v in best.items()}}


def search_points(only: str, options: dict) -> dict:
    """Solve every point with today's code; per point its numbers and the held-out change (points)
    against the baseline file."""
    with open(BASELINE) as f:
        base = json.load(f)["points"]
    rows = {}
    for label, inst in points(only):
        row = solve_point(inst, options)
        if label in base:
            row["heldout_delta_pp"] = round(100 * (row["heldout_mean"] - base[label]["heldout_mean"]), 4)
            row["baseline_cpu_s"] = base[label]["cpu_s"]
        rows[label] = row
        print(f"  {label:40s} train={row['train']:.4f} heldout={row['heldout_mean']:.4f} "
              f"delta={row.get('heldout_delta_pp', float('nan')):+.3f}pp cpu={row['cpu_s']:.2f}s "
              f"(baseline {row.get('baseline_cpu_s', float('nan')):.2f}s) replicas={row['replicas']}",
              file=sys.stderr, flush=True)
    return rows


def anytime_curve(label: str, limits: tuple) -> dict:
    """Attainment (training) of the placement ``alpaserve`` returns under each time limit, one process."""
    inst = dict(points(label))[label]
    out = {}
    for limit in limits:
        p = run_solver(inst, "alpaserve", time_limit=limit, options={"backend": "serial", "progress": False})
        out[str(limit)] = p.metrics["slo_attainment"]
        print(f"  anytime {label} {limit:>4} s: {out[str(limit)]:.4f}", file=sys.stderr, flush=True)
    return out


def scale_run(models: int, gpus: int, time_limit: float) -> dict:
    """Solve a generated instance (benchmarks/scale_instance.py) with ``placeopt solve`` in a child
    process, one worker; wall seconds to the placement, its attainment and the child's peak memory."""
    import resource
    import subprocess
    import tempfile
    from scale_instance import scale_instance
    with tempfile.TemporaryDirectory() as tmp:
        path, out = os.path.join(tmp, "instance.json"), os.path.join(tmp, "placement.json")
        atomic_write_text(path, json.dumps(scale_instance(models, gpus)))
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "placement_opt.cli.main", "solve", path, "--solver", "alpaserve",
                               "-O", "backend=serial", "-O", "progress=false", "--time-limit", str(time_limit),
                               "-o", out], capture_output=True, text=True)
        wall = time.perf_counter() - start
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        # 0: finished within the limit; 3: stopped by it with a placement (docs/cli.md)
        ok = proc.returncode in (0, 3) and os.path.exists(out)
        attainment = json.load(open(out))["metrics"]["slo_attainment"] if ok else None
    row = {"models": models, "gpus": gpus, "time_limit_s": time_limit, "wall_s": round(wall, 1), "ok": ok,
           "exit_status": proc.returncode,
           "attainment": attainment, "peak_rss_mb_max_child_so_far": round(peak_mb)}
    print(f"  scale {models} models / {gpus} GPUs: {json.dumps(row)}", file=sys.stderr, flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record-baseline", action="store_true", help="solve with today's solver, write baseline.json")
    ap.add_argument("--only", default="", help="only points whose label contains this")
    ap.add_argument("--search-only", action="store_true", help="only the search points")
    ap.add_argument("--kernel-only", action="store_true", help="only the kernel measurement")
    ap.add_argument("--kernel-seconds", type=float, default=20000.0,
                    help="workload seconds of the kernel case (100 req/s: 20000 s = 2 M requests)")
    ap.add_argument("--repeat", type=int, default=5, help="kernel runs of each variant; the best counts")
    ap.add_argument("--scale-limit", type=float, default=240.0,
                    help="--time-limit of the generated 200- and 1000-model solves (s)")
    args = ap.parse_args(argv)
    if args.kernel_only:
        print(json.dumps(time_kernels(args.kernel_seconds, args.repeat), indent=1))
        return 0
    if args.record_baseline:
        record_baseline(args.only)
        return 0
    if args.search_only:
        search_points(args.only, {})
        return 0
    solve_point(variant(load_json("s2"), "warm-up", duration=10.0))  # Numba caches loaded before timing
    kernel = time_kernels(args.kernel_seconds, args.repeat)
    print(f"kernel: {json.dumps(kernel)}", file=sys.stderr, flush=True)
    rows = search_points("", {})
    cpu = [r["cpu_s"] for r in rows.values()]
    curve = anytime_curve("s3", (1, 2, 5, 10, 30))
    scale = [scale_run(200, 256, args.scale_limit), scale_run(1000, 1024, args.scale_limit)]
    result = {"conditions": f"{os.cpu_count()} cores shared with other jobs; search CPU is process time of one "
                            "process (backend=serial)", "kernel": kernel, "points": rows, "anytime_s3": curve,
              "scale": scale}
    atomic_write_text(os.path.join(ROOT, "benchmarks", "search_speed", "latest.json"), json.dumps(result, indent=1) + "\n")
    delta = min(r["heldout_delta_pp"] for r in rows.values() if "heldout_delta_pp" in r)
    print(f"kernel_requests_per_s={kernel['accept_flow_shop_requests_per_s']:.0f} "
          f"median_cpu_s={statistics.median(cpu):.2f} max_cpu_s={max(cpu):.2f} heldout_delta_pp={delta:.3f} "
          f"scale_1024_s={scale[1]['wall_s']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
