"""Core commands: validate, solve, simulate, show, solvers."""

from __future__ import annotations

import json
import math

import click

from placement_opt.errors import InputError
from placement_opt.simulate import simulate

from placement_opt.cli.common import (INSTANCE, JSON_FLAG, check_output_path, emit_json, metrics_summary, progress, read_instance,
                     read_placement, read_requests, table, write_output)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@JSON_FLAG
def validate(file, as_json):
    """Check an instance, a placement (has "groups"), a profile (has "configs"), an LLM cost
    table (has "format" and "tp") or an architecture (has "layers", "hidden", "heads"; the
    input of `placeopt profile`) for errors."""
    try:
        with open(file) as f:
            head = json.load(f)
    except (OSError, ValueError, RecursionError):  # the loaders below report what is wrong
        head = None
    if isinstance(head, dict) and "groups" in head and "cluster" not in head:
        placement = read_placement(file)
        info = {"file": file, "kind": "placement", "groups": len(placement.groups)}
    elif isinstance(head, dict) and {"layers", "hidden", "heads"} <= set(head) and "cluster" not in head:
        from placement_opt.model import Architecture
        try:
            Architecture.from_dict(head, "")
        except InputError as e:
            raise e.with_file(file) from None
        info = {"file": file, "kind": "architecture", "layers": head["layers"]}
    elif isinstance(head, dict) and "format" in head and "tp" in head and "cluster" not in head:
        from placement_opt.costs.costtable import CostTable
        from placement_opt.validation import reject_non_finite
        try:
            reject_non_finite(head)
            table_ = CostTable.from_dict(file, head, "")
        except InputError as e:
            raise e.with_file(file) from None
        info = {"file": file, "kind": "cost table", "model": table_.model}
    elif isinstance(head, dict) and "configs" in head and "cluster" not in head:
        from placement_opt.profile import Profile
        from placement_opt.validation import reject_non_finite
        try:
            reject_non_finite(head)
            profile = Profile.from_dict(file, head, "")
        except InputError as e:
            raise e.with_file(file) from None
        info = {"file": file, "kind": "profile", "configs": len(profile.configs)}
    else:
        inst = read_instance(file)
        check_solver(inst, file)
        info = {"file": file, "kind": "instance", "name": inst.name, "models": len(inst.models),
                "gpus": inst.cluster.n_gpus, "requests": len(read_requests(inst, file)), "sha256": inst.sha256}
    if as_json:
        emit_json({"valid": True, **info})
    else:
        detail = {"instance": lambda: f"{info['models']} models, {info['gpus']} GPUs, {info['requests']} requests",
                  "placement": lambda: f"{info['groups']} groups",
                  "profile": lambda: f"{info['configs']} parallel configs",
                  "architecture": lambda: f"{info['layers']} layers",
                  "cost table": lambda: f"LLM {info['model']}"}[info["kind"]]()
        click.echo(f"{file}: valid {info['kind']} ({detail})")


@click.command()
@INSTANCE
@click.option("--solver", "solver_name", default=None, help="Registered solver (default: the instance's).")
@click.option("--time-limit", type=float, default=None, help="Stop searching after this many seconds.")
@click.option("--seed", type=int, default=None, help="Seed (default: the instance's).")
@click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE", help="Solver option (repeatable).")
@click.option("-o", "--output", default=None, help="Write the placement JSON here (atomically).")
@JSON_FLAG
def solve(instance, solver_name, time_limit, seed, options, output, as_json):
    """Find a placement for INSTANCE and print (or write) it with its simulated metrics."""
    from placement_opt.solvers import run_solver
    check_run_options(time_limit, seed)
    check_output_path(output)
    inst = read_instance(instance)
    opts = parse_cli_options(options)
    name = solver_name or inst.solver
    check_solver(inst, instance, name, opts)
    read_requests(inst, instance)  # read a trace now, so its errors come before any progress line
    progress(f"solving {inst.name} ({len(inst.models)} models, {inst.cluster.n_gpus} GPUs) with {name}")
    try:
        placement = run_solver(inst, name, time_limit=time_limit, seed=seed, options=opts)
    except InputError as e:  # solver name and options come from the instance or the command line
        raise e.with_file(instance) from None
    if output:
        write_output(output, placement.to_json() + "\n")
        if output == "-":  # stdout holds the placement JSON alone, so it can be redirected or piped
            return
        progress(f"wrote {output}")
    if as_json:
        click.echo(placement.to_json())
    else:
        click.echo(show_text(placement))
        click.echo(metrics_summary(placement.metrics))


def check_solver(inst, file: str, name: str | None = None, options: dict | None = None) -> None:
    """The solver (default: the instance's) must be registered and accept its options, which
    are the instance's ``solver.options`` when it is the instance's solver, plus ``options``."""
    from placement_opt.solvers import make_solver
    name = name or inst.solver
    merged = dict(inst.solver_options) if name == inst.solver else {}
    merged.update(options or {})
    try:
        make_solver(name, merged)
    except InputError as e:
        raise e.with_file(file) from None


def check_run_options(time_limit, seed) -> None:
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise InputError(f"must be a positive number of seconds, got {time_limit}", "--time-limit")
    if seed is not None and seed < 0:
        raise InputError(f"must be >= 0, got {seed}", "--seed")


def parse_cli_options(options) -> dict:
    out = {}
    for item in options:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", "--option")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


@click.command(name="simulate")
@INSTANCE
@click.argument("placement", type=click.Path(dir_okay=False))
@click.option("--seed", type=int, default=None, help="Workload seed (default: the instance's).")
@JSON_FLAG
def simulate_cmd(instance, placement, seed, as_json):
    """Simulate PLACEMENT (as written by `placeopt solve`) on INSTANCE's workload."""
    check_run_options(None, seed)
    inst = read_instance(instance)
    read_requests(inst, instance)
    plc = read_placement(placement, inst)
    metrics = simulate(inst, plc, seed=seed)
    if as_json:
        emit_json(metrics)
    else:
        click.echo(metrics_summary(metrics))
        click.echo(per_model_text(metrics))


def show_text(placement) -> str:
    rows = []
    for w, groups in enumerate(placement.all_group_sets):
        for i, g in enumerate(groups):
            devs = f"{g.devices[0]}-{g.devices[-1]}" if len(g.devices) > 1 else str(g.devices[0])
            row = [i, devs, g.pp, g.tp, len(g.models), ", ".join(g.models) or "-"]
            rows.append(([w] if placement.windows else []) + row)
    headers = (["window"] if placement.windows else []) + ["group", "devices", "pp", "tp", "#models", "models"]
    return table(headers, rows)


def per_model_text(metrics: dict) -> str:
    per = metrics.get("per_model", {})
    if not per:
        return ""
    headers = ["model", "requests", "accepted", "SLO attainment"]
    keys = ["requests", "accepted", "slo_attainment"]
    if any("throughput_rps" in v for v in per.values()):  # LLM metrics
        headers.append("throughput (req/s)")
        keys.append("throughput_rps")
    return table(headers, [[name] + [v.get(k) for k in keys] for name, v in per.items()])


@click.command()
@click.argument("placement", type=click.Path(dir_okay=False))
@JSON_FLAG
def show(placement, as_json):
    """Print PLACEMENT's groups, configs, models and per-model attainment."""
    plc = read_placement(placement)
    if as_json:
        emit_json(plc.to_dict())
        return
    click.echo(show_text(plc))
    if plc.metrics:
        click.echo()
        click.echo(metrics_summary(plc.metrics))
        click.echo(per_model_text(plc.metrics))
    if plc.provenance:
        p = plc.provenance
        click.echo(f"\nsolver {p.get('solver')} seed {p.get('seed')} wall {p.get('wall_time_s')} s, "
                   f"placeopt {p.get('placeopt_version')}, instance sha256 {str(p.get('instance_sha256'))[:12]}")


@click.command()
@JSON_FLAG
def solvers(as_json):
    """List the registered solvers."""
    from placement_opt.solvers import get_solver_class, solver_names
    rows = [(n, get_solver_class(n).family, get_solver_class(n).summary) for n in solver_names()]
    if as_json:
        emit_json([{"name": n, "family": f, "summary": s} for n, f, s in rows])
    else:
        click.echo(table(["solver", "instances", "summary"], rows))


COMMANDS = [validate, solve, simulate_cmd, show, solvers]
