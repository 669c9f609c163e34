"""Golden results: every bundled instance x every applicable solver, and every bundled placement.

A refactoring that must not change behaviour is checked against this file: ``--record``
solves every instance under ``instances/`` with every solver of its family (fixed seed, no
time limit, so the answers are deterministic) and re-simulates every bundled placement file
with its instance, storing placements and metrics (wall-clock times removed) in
``benchmarks/golden/results.json.xz`` (xz-compressed: 5.3 MB of JSON, and every device call
carries the repository's tracked files under 64 MiB); ``--check`` (the default) recomputes everything and
reports every difference, exiting 1 if there is one. Numbers are compared to a relative
:data:`FLOAT_RTOL`: another numpy or numba release may sum in another order and move the last
digits (1e-13 seen), which is not a change of behaviour; everything else is compared exactly.

Run: ``python benchmarks/golden.py [--record | --check] [--jobs N] [--only SUBSTRING]``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "golden", "results.json.xz")
SEED = 0
#: relative tolerance of a number's comparison with the golden file (rounding of another library release)
FLOAT_RTOL = 1e-9
#: keys whose values are wall-clock measurements, not behaviour
_TIME_KEYS = ("wall_time_s", "time_limit_s", "elapsed_s", "wall_s", "cpu_s", "solve_s", "placement_ms", "seconds")
#: search work counters that depend on how the process pool spreads tasks over workers (each
#: worker memoises its own simulations), not on the answer
_POOL_COUNTERS = ("simulations", "candidates_evaluated", "screened", "tasks_pruned_by_bound")
#: bundled placements and the instance each was written for
_PLACEMENTS = {
    "instances/fidelity/placement-alpaserve-gamma.json": "instances/fidelity/two-models-gamma.json",
    "instances/fidelity/placement-alpaserve-poisson.json": "instances/fidelity/two-models-poisson.json",
    "instances/fidelity/placement-pipeline.json": "instances/fidelity/two-models-gamma.json",
    "instances/fidelity/placement-simple.json": "instances/fidelity/two-models-gamma.json",
    "instances/fidelity/placement-tp2.json": "instances/fidelity/two-models-poisson.json",
}


def _strip_times(value, path: str = ""):
    """``value`` without wall-clock times and worker-dependent work counters."""
    if isinstance(value, dict):
        return {k: _strip_times(v, f"{path}.{k}") for k, v in value.items()
                if not (k in _TIME_KEYS or k.endswith("_wall_s") or k.endswith("time_s")
                        or (path.endswith("provenance.search") and k in _POOL_COUNTERS))}
    if isinstance(value, list):
        return [_strip_times(v, path) for v in value]
    return value


def instance_files() -> list[str]:
    """Every bundled instance file (placements, profiles and architectures excluded)."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "instances")):
        for name in files:
            path = os.path.join(dirpath, name)
            if not name.endswith(".json"):
                continue
            with open(path) as fh:
                doc = json.load(fh)
            if isinstance(doc, dict) and "cluster" in doc and "models" in doc:
                out.append(os.path.relpath(path, ROOT))
    return sorted(out)


def _tasks(only: str | None) -> list[tuple[str, str | None]]:
    from placement_opt import load_instance
    from placement_opt.solvers import get_solver_class, solver_names
    tasks: list[tuple[str, str | None]] = []
    for rel in instance_files():
        inst = load_instance(os.path.join(ROOT, rel))
        for name in solver_names():
            family = get_solver_class(name).family
            if family == "any" or (family == "llm") == inst.is_llm:
                tasks.append((rel, name))
    tasks += [(rel, None) for rel in _PLACEMENTS]
    return [t for t in tasks if only is None or only in f"{t[0]}:{t[1]}"]


def _run(task: tuple[str, str | None]) -> tuple[str, dict]:
    from placement_opt import InputError, load_instance, load_placement, simulate
    from placement_opt.solvers import run_solver
    rel, solver = task
    key = f"{rel}:{solver}" if solver else f"{rel}:simulate"
    try:
        if solver is None:
            inst = load_instance(os.path.join(ROOT, _PLACEMENTS[rel]))
            placement = load_placement(os.path.join(ROOT, rel))
            return key, {"metrics": _strip_times(json.loads(json.dumps(simulate(inst, placement))), "metrics")}
        inst = load_instance(os.path.join(ROOT, rel))
        placement = run_solver(inst, solver, seed=SEED)
        return key, _strip_times(json.loads(placement.to_json()), "")
    except InputError as exc:  # a solver refusing an instance is behaviour too
        return key, {"error": str(exc)}


def compute(only: str | None, jobs: int) -> dict:
    tasks = _tasks(only)
    # longest-running families first so the pool ends together
    tasks.sort(key=lambda t: ("alpaserve/" not in t[0], t[1] not in ("alpaserve", "clockwork++", "exhaustive")))
    results = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for key, value in pool.map(_run, tasks):
            results[key] = value
            print(f"done {key}", file=sys.stderr, flush=True)
    return dict(sorted(results.items()))


def _numbers(a, b) -> bool:
    """Whether ``a`` and ``b`` are both numbers (not flags) and at least one is a float."""
    kinds = (int, float)
    return (isinstance(a, kinds) and isinstance(b, kinds) and not isinstance(a, bool) and not isinstance(b, bool)
            and (isinstance(a, float) or isinstance(b, float)))


def _diff(path: str, a, b, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing' if k not in b else 'new'}")
            else:
                _diff(f"{path}.{k}", a[k], b[k], out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(f"{path}[{i}]", x, y, out)
    elif _numbers(a, b) and math.isclose(a, b, rel_tol=FLOAT_RTOL):
        return
    elif a != b:
        out.append(f"{path}: {json.dumps(a)[:120]} -> {json.dumps(b)[:120]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true", help="store the results as the golden file")
    mode.add_argument("--check", action="store_true", help="compare with the golden file (default)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--only", help="only tasks whose 'instance:solver' key contains this")
    args = ap.parse_args()
    results = compute(args.only, args.jobs)
    if args.record:
        stored = {}
        if args.only and os.path.exists(RESULTS):
            with lzma.open(RESULTS, "rt") as fh:
                stored = json.load(fh)
        stored.update(results)
        os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
        tmp = RESULTS + ".tmp"
        with lzma.open(tmp, "wt") as fh:
            json.dump(dict(sorted(stored.items())), fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, RESULTS)
        print(f"recorded {len(results)} results in {os.path.relpath(RESULTS, ROOT)}")
        return 0
    with lzma.open(RESULTS, "rt") as fh:
        golden = json.load(fh)
    diffs: list[str] = []
    for key, value in results.items():
        if key not in golden:
            diffs.append(f"{key}: not in the golden file")
        else:
            _diff(key, golden[key], value, diffs)
    if not args.only:
        diffs += [f"{key}: no longer computed" for key in golden if key not in results]
    for line in diffs:
        print(line)
    print(f"golden_tasks={len(results)} differences={len(diffs)}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
