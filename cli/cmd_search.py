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
from placement_opt.limits import process_start
from placement_opt.placement import Placement
from placement_opt.simulate import simulate
from placement_opt.workload import Workload

from placement_opt.cli.cmd_core import check_cli_options, check_run_options, parse_cli_options
from placement_opt.cli.common import (EXIT_STOPPED, EXIT_TIME_LIMIT_EMPTY, INSTANCE, JSON_FLAG, emit_json, progress,
                                      read_instance, read_placement, table)

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
                 echo: Optional[Callable[[str], None]] = None,
                 counted_from: Optional[float] = None) -> list[dict[str, Any]]:
    """Solve with each solver, simulate, and return one row of metrics per solver.

    ``time_limit`` is per solver; the first solver's counts from ``counted_from`` (the CLI:
    the process's start), each next one's from the end of the one before. A solver stopped by
    the limit keeps its best placement's row (``stopped``); one whose limit passed before it
    had any placement gets a row without metrics. An interrupt (Ctrl-C, SIGTERM) ends the
    comparison: the rows so far are returned, the last one ``stopped: "interrupted"``, and
    :class:`~placement_opt.solvers.base.SearchStopped` is raised if there is none."""
    from placement_opt.solvers import run_solver
    from placement_opt.solvers.base import SearchStopped, solver_for
    for n in names:  # every solver and its options are checked before the first solve
        solver_for(inst, n, (per_options or {}).get(n, {}))
    rows: list[dict[str, Any]] = []
    for k, n in enumerate(names, 1):
        if echo:
            echo(f"solving {inst.name} with {n} ({k}/{len(names)})")
        start = time.perf_counter()
        try:
            placement = run_solver(inst, n, time_limit=time_limit, seed=seed, options=(per_options or {}).get(n, {}),
                                   counted_from=counted_from if k == 1 else None)
        except (SearchStopped, KeyboardInterrupt) as e:
            reason = e.reason if isinstance(e, SearchStopped) else "interrupted"
            if reason == "interrupted" and not rows:
                raise
            rows.append({"solver": n, "stopped": f"{reason}, no placement",
                         "solve_s": round(time.perf_counter() - start, 3)})
            if reason == "interrupted":
                break
            continue
        rows.append(_compare_row(inst, n, placement, time.perf_counter() - start))
        if rows[-1].get("stopped") == "interrupted":
            break
    return rows


def _compare_row(inst: Instance, name: str, placement: Placement, wall: float) -> dict[str, Any]:
    """The row of solver ``name``'s (simulated) placement found in ``wall`` seconds."""
    m = placement.metrics
    used = max(sum(1 for g in gs if g.models) for gs in placement.all_group_sets)
    row = {"solver": name, "slo_attainment": m["slo_attainment"], "goodput_rps": m.get("goodput_rps"),
           "latency_p99_s": m.get("latency_p99_s"), "solve_s": round(wall, 3), "groups_used": used,
           "windows": len(placement.windows) or None}
    if inst.is_llm:
        row["throughput_rps"] = m.get("throughput_rps")
        row["throughput_weighted_rps"] = m.get("throughput_weighted_rps")
    if "stopped" in placement.provenance:
        row["stopped"] = placement.provenance["stopped"]
    return row


def compare_status(rows: Sequence[dict[str, Any]]) -> int:
    """The exit status of a comparison (docs/cli.md): 0 every solver finished; 3 some solver
    was stopped (time limit or interrupt) and some row has a placement; 124 no solver found a
    placement within the time limit."""
    if not any("stopped" in r for r in rows):
        return 0
    return EXIT_STOPPED if any("slo_attainment" in r for r in rows) else EXIT_TIME_LIMIT_EMPTY


@click.command()
@INSTANCE
@click.option("--solvers", "solver_list", required=True, help="Comma-separated solver names.")
@click.option("--time-limit", type=float, default=None,
              help="Per-solver time limit in seconds, as for solve (the first solver's counts from the "
                   "command's start).")
@click.option("--seed", type=int, default=None,
              help="Seed of the workload every solver optimises and is scored on (default: the instance's).")
@OPTION
@JSON_FLAG
def compare(instance: str, solver_list: str, time_limit: Optional[float], seed: Optional[int],
            options: tuple[str, ...], as_json: bool) -> None:
    """Solve INSTANCE with several solvers and tabulate attainment, goodput, p99, solve time, groups.

    Exit status: 0 every solver finished; 3 some solver was stopped by --time-limit (its row
    has its best placement so far) or Ctrl-C/SIGTERM (the comparison ends there, rows so far
    printed); 124 no solver found a placement within the time limit."""
    check_run_options(time_limit, seed)
    names = [s.strip() for s in solver_list.split(",") if s.strip()]
    if not names:
        raise InputError("give at least one solver", "--solvers")
    inst = read_instance(instance)
    try:
        rows = compare_rows(inst, names, split_options(options, names), time_limit, seed, echo=progress,
                            counted_from=process_start())
    except InputError as e:
        raise e.with_file(instance) from None
    if as_json:
        emit_json({"instance": inst.name, "results": rows})
    else:
        headers = ["solver", "SLO attainment", "goodput (req/s)", "p99 latency (s)", "solve (s)", "groups used"]
        keys = ["solver", "slo_attainment", "goodput_rps", "latency_p99_s", "solve_s", "groups_used"]
        if inst.is_llm:
            headers += ["throughput (req/s)", "rate-weighted throughput (req/s)"]
            keys += ["throughput_rps", "throughput_weighted_rps"]
        if any("stopped" in r for r in rows):
            headers.append("stopped")
            keys.append("stopped")
        click.echo(table(headers, [[r.get(k) for k in keys] for r in rows]))
    for r in rows:
        if "stopped" in r:
            progress(f"placeopt: {r['solver']} was stopped ({r['stopped']})"
                     + ("; its row is the best placement found so far" if "slo_attainment" in r else ""))
    raise SystemExit(compare_status(rows))


COMMANDS = [space, evaluate, compare]
