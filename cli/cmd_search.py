"""Search commands: ``space`` (how big the placement space is), ``evaluate`` (score a placement
on another workload) and ``compare`` (several solvers side by side)."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Optional, Sequence

import click

from placement_opt.errors import InputError
from placement_opt.instance import Instance, check_workload
from placement_opt.io import read_json
from placement_opt.simulate import simulate
from placement_opt.workload import Workload

from placement_opt.cli.cmd_core import check_cli_options, check_run_options, parse_cli_options
from placement_opt.cli.common import INSTANCE, JSON_FLAG, emit_json, progress, read_instance, read_placement, table

OPTION = click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE",
                      help="Search option (repeatable); as for `solve --solver alpaserve`.")


@click.command()
@INSTANCE
@OPTION
@JSON_FLAG
def space(instance: str, options: tuple[str, ...], as_json: bool) -> None:
    """Print the size of INSTANCE's AlpaServe search space, level by level, before and after pruning."""
    from placement_opt.solvers.alpaserve import AlpaServe
    from placement_opt.spaces import summarize
    inst = read_instance(instance)
    if inst.is_llm:
        raise InputError("the AlpaServe search space is defined for DNN (non-LLM) instances", "models")
    settings = AlpaServe.Options(**check_cli_options(AlpaServe.Options, parse_cli_options(options)))
    info = summarize(inst, settings)
    if as_json:
        emit_json({**info, "levels": {k: {"unpruned": u, "kept": v} for k, (u, v) in info["levels"].items()}})
        return
    click.echo(f"{info['instance']}: {info['models']} models, {info['gpus']} GPUs, device unit {info['device_unit']}")
    rows = [[k.replace("_", " "), u, v, f"{100 * (1 - v / u):.1f}%" if u else "-"]
            for k, (u, v) in info["levels"].items()]
    click.echo(table(["level", "before pruning", "after pruning", "pruned"], rows))


def read_workload(path: str, instance: Optional[Instance] = None) -> Workload:
    """A workload JSON object, or an instance file whose ``workload`` is taken (checked
    against ``instance``: its model names and request volume)."""
    data = read_json(path)
    field = "workload"
    if isinstance(data, dict) and "workload" in data:
        data = data["workload"]
    try:
        workload = Workload.from_dict(data, field, os.path.dirname(os.path.abspath(path)))
        if instance is not None:
            check_workload(instance, workload)
        return workload
    except InputError as e:
        raise e.with_file(path) from None


@click.command()
@INSTANCE
@click.argument("placement", type=click.Path(dir_okay=False))
@click.option("--workload", "workload_path", required=True, type=click.Path(dir_okay=False),
              help="Workload JSON (or an instance file whose workload is used) to score on.")
@click.option("--seed", type=int, default=None, help="Seed of the other workload (default: the instance's).")
@JSON_FLAG
def evaluate(instance: str, placement: str, workload_path: str, seed: Optional[int], as_json: bool) -> None:
    """Score PLACEMENT on a different workload than INSTANCE's (robustness, AlpaServe section 6.4).

    Models and SLOs stay the instance's; only the arrivals change.
    """
    check_run_options(None, seed)
    inst = read_instance(instance)
    plc = read_placement(placement, inst)
    other = read_workload(workload_path, inst)
    own = simulate(inst, plc)
    moved = simulate(inst, plc, workload=other, seed=seed)
    if as_json:
        emit_json({"own_workload": own, "other_workload": moved})
        return
    keys = [("slo_attainment", "SLO attainment"), ("goodput_rps", "goodput (req/s)"),
            ("latency_p99_s", "latency p99 (s)"), ("requests", "requests")]
    click.echo(table(["metric", "own workload", "other workload"],
                     [[label, own.get(k), moved.get(k)] for k, label in keys]))


def split_options(options: Sequence[str], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``key=value`` applies to every solver that has the option; ``solver:key=value`` to one.
    Returns each solver's options converted to their declared types."""
    from placement_opt.solvers import get_solver_class
    per: dict[str, dict[str, str]] = {n: {} for n in names}
    for key, value in parse_cli_options(options).items():
        if ":" in key:
            name, key = key.split(":", 1)
            if name not in per:
                raise InputError(f"solver {name!r} is not in --solvers", f"--option {name}:{key}")
            per[name][key] = value
            continue
        takers = [n for n in names
                  if key.replace("-", "_") in {f.name for f in dataclasses.fields(get_solver_class(n).Options)}]
        if not takers:
            raise InputError("no solver in --solvers has this option", f"--option {key}")
        for n in takers:
            per[n][key] = value
    return {n: check_cli_options(get_solver_class(n).Options, raw) if raw else {} for n, raw in per.items()}


def compare_rows(inst: Instance, names: Sequence[str], per_options: Optional[dict[str, dict[str, Any]]] = None,
                 time_limit: Optional[float] = None, seed: Optional[int] = None,
                 echo: Optional[Callable[[str], None]] = None) -> list[dict[str, Any]]:
    """Solve with each solver, simulate, and return one row of metrics per solver."""
    from placement_opt.solvers import run_solver
    from placement_opt.solvers.base import solver_for
    for n in names:  # every solver and its options are checked before the first solve
        solver_for(inst, n, (per_options or {}).get(n, {}))
    rows = []
    for k, n in enumerate(names, 1):
        if echo:
            echo(f"solving {inst.name} with {n} ({k}/{len(names)})")
        start = time.perf_counter()
        placement = run_solver(inst, n, time_limit=time_limit, seed=seed, options=(per_options or {}).get(n, {}))
        wall = time.perf_counter() - start
        m = placement.metrics
        used = max(sum(1 for g in gs if g.models) for gs in placement.all_group_sets)
        row = {"solver": n, "slo_attainment": m["slo_attainment"], "goodput_rps": m.get("goodput_rps"),
               "latency_p99_s": m.get("latency_p99_s"), "solve_s": round(wall, 3), "groups_used": used,
               "windows": len(placement.windows) or None}
        if inst.is_llm:
            row["throughput_rps"] = m.get("throughput_rps")
            row["throughput_weighted_rps"] = m.get("throughput_weighted_rps")
        rows.append(row)
    return rows


@click.command()
@INSTANCE
@click.option("--solvers", "solver_list", required=True, help="Comma-separated solver names.")
@click.option("--time-limit", type=float, default=None, help="Per-solver time limit in seconds.")
@click.option("--seed", type=int, default=None,
              help="Seed of the workload every solver optimises and is scored on (default: the instance's).")
@OPTION
@JSON_FLAG
def compare(instance: str, solver_list: str, time_limit: Optional[float], seed: Optional[int],
            options: tuple[str, ...], as_json: bool) -> None:
    """Solve INSTANCE with several solvers and tabulate attainment, goodput, p99, solve time, groups."""
    check_run_options(time_limit, seed)
    names = [s.strip() for s in solver_list.split(",") if s.strip()]
    if not names:
        raise InputError("give at least one solver", "--solvers")
    inst = read_instance(instance)
    try:
        rows = compare_rows(inst, names, split_options(options, names), time_limit, seed, echo=progress)
    except InputError as e:
        raise e.with_file(instance) from None
    if as_json:
        emit_json({"instance": inst.name, "results": rows})
        return
    headers = ["solver", "SLO attainment", "goodput (req/s)", "p99 latency (s)", "solve (s)", "groups used"]
    keys = ["solver", "slo_attainment", "goodput_rps", "latency_p99_s", "solve_s", "groups_used"]
    if inst.is_llm:
        headers += ["throughput (req/s)", "rate-weighted throughput (req/s)"]
        keys += ["throughput_rps", "throughput_weighted_rps"]
    click.echo(table(headers, [[r[k] for k in keys] for r in rows]))


COMMANDS = [space, evaluate, compare]
