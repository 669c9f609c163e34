"""Core commands: validate, solve, simulate, show, solvers."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Iterable, Optional

import click

from placement_opt.errors import InputError
from placement_opt.feasibility import Violation, placement_violations
from placement_opt.instance import Instance, check_instance_size
from placement_opt.io import read_json
from placement_opt.limits import process_start
from placement_opt.placement import Placement
from placement_opt.progress import slow_step
from placement_opt.simulate import simulate

from placement_opt.cli.common import (EXIT_STOPPED, EXIT_UNSERVED, INSTANCE, JSON_FLAG, check_output_path, emit_json, metrics_summary, progress, read_instance,
                     read_placement, read_requests, table, write_output)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", default=None, type=click.Path(dir_okay=False),
              help="With a placement FILE: also check it against this instance (devices and models exist, "
                   "profiles, memory) and list every violation.")
@JSON_FLAG
def validate(file: str, instance_path: Optional[str], as_json: bool) -> None:
    """Check an instance, a placement (has "groups"), a profile (has "configs"), an LLM cost
    table (has "format" and "tp") or an architecture (has "layers", "hidden", "heads"; the
    input of `placeopt profile`) for errors. A placement's violations are all listed."""
    head = read_json(file, precheck=check_instance_size)  # a huge instance is refused before its objects are walked
    is_placement = isinstance(head, dict) and "groups" in head and "cluster" not in head
    if instance_path is not None and not is_placement:
        raise InputError(f"{file} is not a placement: --instance applies to a placement only", "--instance")
    if is_placement:
        info = validate_placement(file, head, instance_path)
    else:
        info = validate_other(file, head)
    if as_json:
        emit_json({"valid": True, **info})
    else:
        detail = {"instance": lambda: f"{info['models']} models, {info['gpus']} GPUs, {info['requests']} requests",
                  "placement": lambda: f"{info['groups']} groups" + (f", fits {info['instance']}"
                                                                      if "instance" in info else ""),
                  "profile": lambda: f"{info['configs']} parallel configs",
                  "architecture": lambda: f"{info['layers']} layers",
                  "cost table": lambda: f"LLM {info['model']}"}[info["kind"]]()
        click.echo(f"{file}: valid {info['kind']} ({detail})")


def validate_placement(file: str, head: dict, instance_path: Optional[str]) -> dict[str, Any]:
    """Check placement ``file`` (parsed as ``head``), on its own and against the instance at
    ``instance_path`` if given; every violation is printed, then the command exits with status 2."""
    violations = group_parse_violations(head)
    placement = None
    if not violations:
        placement = read_placement(file)
        inst = read_instance(instance_path) if instance_path is not None else None
        violations = placement_violations(placement, inst)
    if violations:
        for v in violations:
            click.echo(f"placeopt: error: {v.error(file).one_line()}", err=True)
        click.echo(f"placeopt: {file}: {len(violations)} violation{'s' if len(violations) > 1 else ''}", err=True)
        raise SystemExit(2)
    assert placement is not None
    info: dict[str, Any] = {"file": file, "kind": "placement", "groups": len(placement.groups)}
    if instance_path is not None:
        info["instance"] = instance_path
    return info


def group_parse_violations(head: dict) -> list[Violation]:
    """The parse error of each malformed group of a placement document (wrong types, pp x tp
    not the number of devices...), so that all of them are listed, not only the first."""
    from placement_opt.placement import Group
    located = [(f"groups[{i}]", g) for i, g in enumerate(head["groups"])] if isinstance(head["groups"], list) else []
    windows = head.get("windows")
    for wi, w in enumerate(windows if isinstance(windows, list) else []):
        if isinstance(w, dict) and isinstance(w.get("groups"), list):
            located += [(f"windows[{wi}].groups[{i}]", g) for i, g in enumerate(w["groups"])]
    out = []
    for where, g in located:
        try:
            Group.from_dict(g, where)
        except InputError as e:
            out.append(Violation(e.field, e.reason))
    return out


def validate_other(file: str, head: Any) -> dict[str, Any]:
    """Check an architecture, a cost table, a profile or an instance; what it is, for the report."""
    if isinstance(head, dict) and ({"layers", "hidden", "heads"} <= set(head) or "hf_config" in head) \
            and "cluster" not in head:
        from placement_opt.model import Architecture
        try:
            arch = Architecture.from_dict(head, "", os.path.dirname(os.path.abspath(file)))
        except InputError as e:
            raise e.with_file(file) from None
        return {"file": file, "kind": "architecture", "layers": arch.layers}
    if isinstance(head, dict) and "format" in head and "tp" in head and "cluster" not in head:
        from placement_opt.costs.costtable import CostTable
        try:
            table_ = CostTable.from_dict(file, head, "")
        except InputError as e:
            raise e.with_file(file) from None
        return {"file": file, "kind": "cost table", "model": table_.model}
    if isinstance(head, dict) and "configs" in head and "cluster" not in head:
        from placement_opt.profile import Profile
        try:
            profile = Profile.from_dict(file, head, "")
        except InputError as e:
            raise e.with_file(file) from None
        return {"file": file, "kind": "profile", "configs": len(profile.configs)}
    inst = read_instance(file)
    check_solver(inst, file)
    return {"file": file, "kind": "instance", "name": inst.name, "models": len(inst.models),
            "gpus": inst.cluster.n_gpus, "requests": len(read_requests(inst, file)), "sha256": inst.sha256}


PLOT_OPTION = click.option("--plot", "plot_path", default=None, metavar="OUT.png",
                           help="Also draw a figure to this PNG (needs the plots extra: pip install 'placeopt[plots]').")


@click.command()
@INSTANCE
@click.option("--solver", "solver_name", default=None, help="Registered solver (default: the instance's).")
@click.option("--time-limit", type=float, default=None,
              help="Seconds from the command's start (loading included) to the best placement found, plus one "
                   "simulation of it.")
@click.option("--seed", type=int, default=None, help="Seed (default: the instance's).")
@click.option("--option", "-O", "options", multiple=True, metavar="KEY=VALUE", help="Solver option (repeatable).")
@click.option("-o", "--output", default=None, help="Write the placement JSON here (atomically).")
@click.option("--allow-unserved", is_flag=True,
              help="Exit 0 even if the placement leaves models unserved (they are still listed on stderr).")
@JSON_FLAG
def solve(instance: str, solver_name: Optional[str], time_limit: Optional[float], seed: Optional[int],
          options: tuple[str, ...], output: Optional[str], allow_unserved: bool, as_json: bool) -> None:
    """Find a placement for INSTANCE and print (or write) it with its simulated metrics.

    Exit status: 0 done; 3 stopped by --time-limit, Ctrl-C or SIGTERM, with the best placement
    so far written; 4 models left unserved (listed on stderr; --allow-unserved: 0)."""
    from placement_opt.solvers import run_solver
    check_run_options(time_limit, seed)
    check_output_path(output, inputs=[instance])
    inst = read_instance(instance)
    name = solver_name or inst.solver
    opts = check_solver(inst, instance, name, parse_cli_options(options))
    with slow_step("drawing the workload"):
        read_requests(inst, instance)  # read a trace now, so its errors come before any progress line
    resolve_costs(inst, instance)
    progress(f"solving {inst.name} ({len(inst.models)} models, {inst.cluster.n_gpus} GPUs) with {name}")
    try:
        placement = run_solver(inst, name, time_limit=time_limit, seed=seed, options=opts,
                               counted_from=process_start())
    except InputError as e:  # solver name and options come from the instance or the command line
        raise e.with_file(instance) from None
    unserved = placement.provenance.get("unserved_models", [])
    if len(unserved) == len(inst.models):
        progress(f"placeopt: error: {name} placed no model (none of the {len(unserved)} models fits its "
                 "groups); nothing written")
        raise SystemExit(EXIT_UNSERVED)
    report_solution(placement, output, as_json)
    raise SystemExit(solve_status(placement, name, allow_unserved))


def report_solution(placement: Placement, output: Optional[str], as_json: bool) -> None:
    """Write the placement to ``output`` (``-``: stdout, alone) and print it, or its JSON."""
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


def solve_status(placement: Placement, name: str, allow_unserved: bool) -> int:
    """Say on stderr how the search ended if not finished, list unserved models, and return
    the exit status: 3 stopped early, 4 models unserved (unless allowed), else 0."""
    stopped = placement.provenance.get("stopped")
    if stopped is not None:
        how = "the time limit" if stopped == "time limit" else "an interrupt"
        progress(f"placeopt: {name} was stopped by {how}; this is the best placement found so far")
    unserved = placement.provenance.get("unserved_models", [])
    if unserved:
        shown = ", ".join(unserved[:20]) + (f" and {len(unserved) - 20} more" if len(unserved) > 20 else "")
        progress(f"placeopt: {'warning' if allow_unserved or stopped else 'error'}: {len(unserved)} model"
                 f"{'s' if len(unserved) > 1 else ''} left unserved by {name}: {shown}")
    if stopped is not None:
        return EXIT_STOPPED
    return EXIT_UNSERVED if unserved and not allow_unserved else 0


def resolve_costs(inst: Instance, file: str) -> None:
    """Resolve every model's costs now (measured profiles or tables, else the cost model and
    auto-parallelization), saying so if it takes more than a second, so the search that follows
    starts at once instead of silently doing this first."""
    with slow_step("resolving model costs (profiles, auto-parallelization)"):
        try:
            if inst.is_llm:
                inst.llm_cost_tables
            else:
                inst.model_profiles
        except InputError as e:
            raise e.with_file(file) from None


def check_solver(inst: Instance, file: str, name: str | None = None,
                 cli_options: dict[str, str] | None = None) -> dict[str, Any]:
    """The solver (default: the instance's) must be registered and accept its options, which
    are the instance's ``solver.options`` when it is the instance's solver, plus the command
    line's ``cli_options`` (strings). Returns those converted to the options' types."""
    from placement_opt.solvers import get_solver_class, make_solver
    name = name or inst.solver
    try:
        options_class = get_solver_class(name).Options
    except InputError as e:
        raise e.with_file(file) from None
    typed = check_cli_options(options_class, cli_options or {})
    try:
        merged = dict(inst.solver_options) if name == inst.solver else {}
        make_solver(name, {**merged, **typed})
    except InputError as e:
        raise e.with_file(file) from None
    return typed


def check_cli_options(options_class: type, cli_options: dict[str, str]) -> dict[str, Any]:
    """``-O KEY=VALUE`` options checked against ``options_class`` on their own: an error names
    the option as typed (``-O beam``), not the instance file, which is not at fault."""
    from placement_opt.solvers.base import check_options
    try:
        return check_options(options_class, cli_options, "-O", from_text=True)
    except InputError as e:
        raise InputError(e.reason, e.field.replace("-O.", "-O ", 1)) from None


def check_run_options(time_limit: Optional[float], seed: Optional[int]) -> None:
    if time_limit is not None and not (math.isfinite(time_limit) and time_limit > 0):
        raise InputError(f"must be a positive number of seconds, got {time_limit}", "--time-limit")
    if seed is not None and seed < 0:
        raise InputError(f"must be >= 0, got {seed}", "--seed")


def parse_cli_options(options: Iterable[str]) -> dict[str, str]:
    """``-O KEY=VALUE`` items as {KEY: VALUE}; the values stay text, converted to each option's
    declared type by ``solvers.base.check_options(..., from_text=True)``."""
    out = {}
    for item in options:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", "--option")
        key, value = item.split("=", 1)
        out[key] = value
    return out


@click.command(name="simulate")
@INSTANCE
@click.argument("placement", type=click.Path(dir_okay=False))
@click.option("--seed", type=int, default=None, help="Workload seed (default: the instance's).")
@PLOT_OPTION
@JSON_FLAG
def simulate_cmd(instance: str, placement: str, seed: Optional[int], plot_path: Optional[str], as_json: bool) -> None:
    """Simulate PLACEMENT (as written by `placeopt solve`) on INSTANCE's workload."""
    check_run_options(None, seed)
    plt_ready = _check_plot(plot_path)
    inst = read_instance(instance)
    read_requests(inst, instance)
    plc = read_placement(placement, inst)
    metrics = simulate(inst, plc, seed=seed)
    if plt_ready and plot_path:
        from placement_opt.plots import save_simulation_figure
        save_simulation_figure(plot_path, inst, plc, metrics, seed)
        progress(f"wrote {plot_path}")
    if as_json:
        emit_json(metrics)
    else:
        click.echo(metrics_summary(metrics))
        click.echo(per_model_text(metrics))


def show_text(placement: Placement) -> str:
    rows = []
    for w, groups in enumerate(placement.all_group_sets):
        for i, g in enumerate(groups):
            devs = f"{g.devices[0]}-{g.devices[-1]}" if len(g.devices) > 1 else str(g.devices[0])
            row = [i, devs, g.pp, g.tp, len(g.models), ", ".join(g.models) or "-"]
            rows.append(([w] if placement.windows else []) + row)
    headers = (["window"] if placement.windows else []) + ["group", "devices", "pp", "tp", "#models", "models"]
    return table(headers, rows)


def per_model_text(metrics: dict[str, Any]) -> str:
    per = metrics.get("per_model", {})
    if not per:
        return ""
    headers = ["model", "requests", "accepted", "SLO attainment"]
    keys = ["requests", "accepted", "slo_attainment"]
    if any("throughput_rps" in v for v in per.values()):  # LLM metrics
        headers.append("throughput (req/s)")
        keys.append("throughput_rps")
    return table(headers, [[name] + [v.get(k) for k in keys] for name, v in per.items()])


def _check_plot(plot_path: Optional[str]) -> bool:
    """Whether a figure is asked for; refuses a path that cannot be written or a missing
    matplotlib before any work."""
    if plot_path is None:
        return False
    check_output_path(plot_path)
    from placement_opt.plots import require_matplotlib
    require_matplotlib()
    return True


@click.command()
@click.argument("placement", type=click.Path(dir_okay=False))
@PLOT_OPTION
@click.option("--instance", "instance_path", default=None, type=click.Path(dir_okay=False),
              help="The placement's instance: checks the placement and adds memory use per GPU to --plot.")
@JSON_FLAG
def show(placement: str, plot_path: Optional[str], instance_path: Optional[str], as_json: bool) -> None:
    """Print PLACEMENT's groups, configs, models and per-model attainment (--plot: draw its device map)."""
    _check_plot(plot_path)
    inst = read_instance(instance_path) if instance_path else None
    plc = read_placement(placement, inst)
    if plot_path:
        from placement_opt.plots import save_placement_figure
        save_placement_figure(plot_path, plc, inst)
        progress(f"wrote {plot_path}")
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
@click.argument("name", required=False)
@JSON_FLAG
def solvers(name: Optional[str], as_json: bool) -> None:
    """List the registered solvers, or with NAME one solver and its options (type, default,
    constraint, help: what `-O KEY=VALUE` and an instance's solver.options accept)."""
    from placement_opt.solvers import solver_names
    if name is not None:
        show_solver(name, as_json)
    elif as_json:
        emit_json([solver_info(n) for n in solver_names()])
    else:
        infos = [solver_info(n) for n in solver_names()]
        click.echo(table(["solver", "instances", "summary"], [(i["name"], i["family"], i["summary"]) for i in infos]))


def solver_info(name: str) -> dict[str, Any]:
    """A registered solver as ``{name, family, summary, options}``, its options as declared."""
    from placement_opt.solvers import get_solver_class
    from placement_opt.validation import describe_fields
    cls = get_solver_class(name)
    return {"name": name, "family": cls.family, "summary": cls.summary, "options": describe_fields(cls.Options)}


def show_solver(name: str, as_json: bool) -> None:
    """Print one solver's summary and a table of its options."""
    info = solver_info(name)
    if as_json:
        emit_json(info)
        return
    click.echo(f"{name} ({info['family']} instances): {info['summary']}")
    if not info["options"]:
        click.echo("no options")
        return
    rows = [(o["name"], o["type"], json.dumps(o["default"]), o["constraint"] or None, o["help"])
            for o in info["options"]]
    click.echo(table(["option", "type", "default", "constraint", "help"], rows))


COMMANDS = [validate, solve, simulate_cmd, show, solvers]
