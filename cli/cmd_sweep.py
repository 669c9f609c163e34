"""``placeopt sweep``: solve variants of an instance with several solvers and score each
placement on its training workload and on held-out workloads (fresh seeds).

A sweep point sets some of :data:`SETTINGS` (the rest keep the instance's values); every
(point, solver) pair is a job, solved in a process pool (``--workers``, default every core).
Each finished job is written to the CSV at once (atomically), so an interrupted sweep
resumes: rows already in the CSV for the same configuration are not computed again, and the
final CSV is the same as an uninterrupted run's (timings aside). Rows hold every setting, so
sweeps along different axes that share a point (the base point) share its row.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import multiprocessing
import os
import signal
import time
from typing import Any, Iterable, Iterator, Optional, Sequence

import click

from placement_opt.cluster import Cluster
from placement_opt.errors import InputError
from placement_opt.instance import Instance, load_instance
from placement_opt.io import atomic_write_text
from placement_opt.progress import ProgressBar
from placement_opt.simulate import simulate
from placement_opt.workload import Workload
from placement_opt.workload.spec import SLOSpec

from placement_opt.cli.cmd_core import check_run_options
from placement_opt.cli.cmd_search import OPTION, split_options
from placement_opt.cli.common import INSTANCE, JSON_FLAG, check_output_path, emit_json, progress, table

#: what a sweep may vary: the workload's rate and CV multiplied, its SLO scale and duration
#: set, the cluster's GPU count (whole nodes, or one node of fewer GPUs)
SETTINGS = ("rate_scale", "cv_scale", "slo_scale", "gpus", "duration_s")
#: columns identifying the configuration a row was computed under (a resume must match them)
CONFIG_COLUMNS = ("instance_sha256", "train_seed", "heldout_seeds", "time_limit_s", "options")
RESULT_COLUMNS = ("train_attainment", "heldout_attainment", "heldout_min_attainment", "solve_s")
COLUMNS = ("instance",) + SETTINGS + ("solver",) + RESULT_COLUMNS + CONFIG_COLUMNS
#: solver options a sweep sets unless told otherwise: points already run in parallel
SWEEP_DEFAULTS = {"progress": False, "backend": "serial"}


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What every job of a sweep shares."""

    instance_path: str
    solvers: tuple[str, ...]
    options: dict[str, dict[str, Any]]  # per solver
    heldout_seeds: tuple[int, ...]
    time_limit: Optional[float]


def parse_vary(items: Sequence[str]) -> dict[str, list[float]]:
    """``--vary NAME=V1,V2,...`` items as {NAME: values}; a name given twice is an error."""
    axes: dict[str, list[float]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or name not in SETTINGS:
            raise InputError(f"expected NAME=V1,V2,... with NAME one of {', '.join(SETTINGS)}, got {item!r}", "--vary")
        if name in axes:
            raise InputError(f"{name} is given twice", "--vary")
        try:
            numbers = [float(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise InputError(f"values must be numbers, got {values!r}", f"--vary {name}") from None
        if not numbers or any(not (v > 0) or v == float("inf") for v in numbers):
            raise InputError(f"give one or more positive numbers, got {values!r}", f"--vary {name}")
        if name == "gpus" and any(v != int(v) for v in numbers):
            raise InputError(f"GPU counts must be whole numbers, got {values!r}", f"--vary {name}")
        axes[name] = numbers
    return axes


def base_settings(instance: Instance) -> dict[str, float]:
    """The instance's own value of every setting."""
    return {"rate_scale": 1.0, "cv_scale": 1.0, "slo_scale": float(instance.workload.slo.scale or 0.0),
            "gpus": float(instance.cluster.n_gpus), "duration_s": float(instance.workload.duration_s)}


def sweep_points(instance: Instance, axes: dict[str, list[float]]) -> list[dict[str, float]]:
    """Every combination of the axes' values, the other settings at the instance's values."""
    base = base_settings(instance)
    names = list(axes)
    return [{**base, **dict(zip(names, combo))} for combo in itertools.product(*(axes[n] for n in names))]


def variant(instance: Instance, point: dict[str, float]) -> Instance:
    """``instance`` with the point's settings applied."""
    base = base_settings(instance)
    w = instance.workload
    rate, cv = point["rate_scale"], point["cv_scale"]
    if rate != 1.0 or cv != 1.0:
        w = _scaled_workload(w, rate, cv)
    if point["slo_scale"] != base["slo_scale"]:
        w = dataclasses.replace(w, slo=SLOSpec(scale=point["slo_scale"]))
    if point["duration_s"] != base["duration_s"]:
        w = dataclasses.replace(w, duration_s=point["duration_s"])
    cluster = instance.cluster
    if point["gpus"] != base["gpus"]:
        cluster = _resized_cluster(cluster, int(point["gpus"]))
    label = ",".join(f"{k}={_fmt(point[k])}" for k in SETTINGS if point[k] != base[k])
    return dataclasses.replace(instance, workload=w, cluster=cluster,
                               name=f"{instance.name}[{label}]" if label else instance.name)


def _scaled_workload(w: Workload, rate: float, cv: float) -> Workload:
    """Arrival rates times ``rate``, gamma CVs times ``cv`` (a trace through its own scales)."""
    def process(p: Any) -> Any:
        scaled = p.scaled(rate)
        if cv != 1.0:
            if p.kind != "gamma":
                raise InputError(f"cv_scale needs gamma arrivals (this workload's process is {p.kind})", "--vary cv_scale")
            scaled = dataclasses.replace(scaled, cv=min(p.cv * cv, 100.0))
        return scaled
    trace = w.trace
    if trace is not None:
        trace = dataclasses.replace(trace, rate_scale=trace.rate_scale * rate, cv_scale=trace.cv_scale * cv)
    return dataclasses.replace(w, process=None if w.process is None else process(w.process),
                               per_model={k: process(p) for k, p in w.per_model.items()}, trace=trace)


def _resized_cluster(cluster: Cluster, gpus: int) -> Cluster:
    """The cluster with ``gpus`` GPUs: whole nodes, or one node when fewer than a node's."""
    per = cluster.gpus_per_node
    if gpus < per:
        return dataclasses.replace(cluster, nodes=1, gpus_per_node=gpus)
    if gpus % per:
        raise InputError(f"{gpus} GPUs is not a whole number of {per}-GPU nodes", "--vary gpus")
    return dataclasses.replace(cluster, nodes=gpus // per)


def _fmt(value: float) -> str:
    return f"{value:g}"


def run_job(config: SweepConfig, point: dict[str, float], solver: str) -> dict[str, str]:
    """Solve one point with one solver; its CSV row (training and held-out attainment)."""
    from placement_opt.solvers import run_solver
    base = load_instance(config.instance_path)
    inst = variant(base, point)
    start = time.perf_counter()
    placement = run_solver(inst, solver, time_limit=config.time_limit, options=config.options.get(solver, {}))
    solve_s = time.perf_counter() - start
    heldout = [float(simulate(inst, placement, seed=s)["slo_attainment"]) for s in config.heldout_seeds]
    row = {"instance": base.name, **{k: _fmt(point[k]) for k in SETTINGS}, "solver": solver,
           "train_attainment": f"{placement.metrics['slo_attainment']:.6f}",
           "heldout_attainment": f"{sum(heldout) / len(heldout):.6f}" if heldout else "",
           "heldout_min_attainment": f"{min(heldout):.6f}" if heldout else "",
           "solve_s": f"{solve_s:.3f}"}
    return {**row, **config_columns(config, inst), "options": options_text(config, solver)}


def config_columns(config: SweepConfig, instance: Instance) -> dict[str, str]:
    """The configuration columns of a row but its solver's options: what every row of a
    resumed sweep must share with this one."""
    return {"instance_sha256": instance.sha256, "train_seed": str(instance.seed),
            "heldout_seeds": ";".join(str(s) for s in config.heldout_seeds),
            "time_limit_s": "" if config.time_limit is None else _fmt(config.time_limit)}


def options_text(config: SweepConfig, solver: str) -> str:
    """The ``options`` column: the solver's options in this sweep, as JSON."""
    return json.dumps(config.options.get(solver, {}), sort_keys=True, separators=(",", ":"))


def row_key(row: dict[str, str]) -> tuple[str, ...]:
    """A row's point and solver: what identifies its job."""
    return tuple(_fmt(float(row[k])) for k in SETTINGS) + (row["solver"],)


def read_rows(path: str, expected: dict[str, str], config: SweepConfig) -> list[dict[str, str]]:
    """The rows of an earlier (perhaps interrupted) sweep's CSV at ``path``; refuses one of
    another configuration (``expected``: the configuration columns this sweep writes, and
    the options of ``config``'s solvers)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or list(reader.fieldnames) != list(COLUMNS):
            raise InputError("is not a placeopt sweep CSV (its columns differ); choose another -o", "--output", path)
        rows = list(reader)
    for i, row in enumerate(rows):
        mine = {**expected, "options": options_text(config, row["solver"])} if row["solver"] in config.solvers \
            else expected
        for column, value in mine.items():
            if row[column] != value:
                raise InputError(f"row {i + 2} was computed with another {column} ({row[column]!r}, this sweep "
                                 f"{value!r}); choose another -o", "--output", path)
    return rows


def csv_text(rows: Iterable[dict[str, str]]) -> str:
    """The rows as CSV, ordered by point then solver name, so the text does not depend on the
    order jobs finished in."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in sorted(rows, key=lambda r: (tuple(float(r[k]) for k in SETTINGS), r["solver"])):
        writer.writerow(row)
    return out.getvalue()


def _pool_init() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops the pool


def _run_packed(job: tuple[SweepConfig, dict[str, float], str]) -> dict[str, str]:
    return run_job(*job)


def run_jobs(jobs: list[tuple[SweepConfig, dict[str, float], str]], workers: int) -> Iterator[dict[str, str]]:
    """The rows of ``jobs`` as they finish: in this process for one worker, else in a pool
    (stopped at once if the consumer stops, e.g. on Ctrl-C) of spawned processes: a forked
    worker inherits the locks of the caller's other threads (a library's thread pool, a
    progress bar) in whatever state they were, and one such worker once waited forever on one
    (the test suite's sweep, forked from a process that had run torch)."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield run_job(*job)
        return
    pool = multiprocessing.get_context("spawn").Pool(min(workers, len(jobs)), initializer=_pool_init)
    try:
        yield from pool.imap_unordered(_run_packed, jobs)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


def run_sweep(config: SweepConfig, points: list[dict[str, float]], output: Optional[str], workers: int,
              show_progress: bool = True) -> list[dict[str, str]]:
    """Run the jobs of ``points`` not already in ``output``'s CSV, writing it after every job;
    returns this sweep's rows (points in order, solvers in the given order)."""
    inst = load_instance(config.instance_path)
    expected = config_columns(config, variant(inst, points[0]))
    rows = {row_key(r): r for r in (read_rows(output, expected, config) if output else [])}
    wanted = [(config, p, s) for p in points for s in config.solvers]
    keys = [row_key({**{k: _fmt(p[k]) for k in SETTINGS}, "solver": s}) for _, p, s in wanted]
    todo = [job for job, key in zip(wanted, keys) if key not in rows]
    if output and len(todo) < len(wanted):
        progress(f"resuming from {output}: {len(wanted) - len(todo)} of {len(wanted)} jobs done already")
    bar = ProgressBar("sweep", total=len(todo), unit="jobs", enabled=show_progress and bool(todo))
    for n, row in enumerate(run_jobs(todo, workers), 1):
        rows[row_key(row)] = row
        if output:
            atomic_write_text(output, csv_text(rows.values()))
        heldout = f" held-out {float(row['heldout_attainment']):.3f}" if row["heldout_attainment"] else ""
        bar.update(n, postfix=f"{row['solver']} train {float(row['train_attainment']):.3f}{heldout}")
    bar.close()
    return [rows[k] for k in keys]


def _number(text: str) -> Optional[float]:
    return float(text) if text else None


def _print_table(rows: list[dict[str, str]], axes: Sequence[str]) -> None:
    headers = list(axes) + ["solver", "train attainment", "held-out attainment", "held-out min", "solve (s)"]
    body: list[list[Any]] = [
        [r[a] for a in axes] + [r["solver"], float(r["train_attainment"]), _number(r["heldout_attainment"]),
                                _number(r["heldout_min_attainment"]), float(r["solve_s"])] for r in rows]
    click.echo(table(headers, body))


@click.command()
@INSTANCE
@click.option("--vary", "vary", multiple=True, metavar="NAME=V1,V2,...", required=True,
              help=f"A setting and its values (repeatable: the points are every combination); NAME is one of "
                   f"{', '.join(SETTINGS)}. rate_scale and cv_scale multiply the workload's, slo_scale, "
                   f"duration_s and gpus set them.")
@click.option("--solvers", "solver_list", required=True, help="Comma-separated solver names.")
@click.option("--seeds", type=int, default=2, show_default=True,
              help="Held-out workloads (fresh seeds after the instance's) each placement is also scored on.")
@click.option("--time-limit", type=float, default=None, help="Per-solve time limit in seconds.")
@OPTION
@click.option("--workers", type=int, default=0, help="Jobs run at once (default 0: one per core).")
@click.option("-o", "--output", default=None,
              help="CSV of the results, written after every job; an existing one of the same sweep is resumed.")
@click.option("--plot", "plot_path", default=None, help="Draw attainment against the first varied setting to this PNG "
                                                         "(needs the plots extra: pip install 'placeopt[plots]').")
@JSON_FLAG
def sweep(instance: str, vary: tuple[str, ...], solver_list: str, seeds: int, time_limit: Optional[float],
          options: tuple[str, ...], workers: int, output: Optional[str], plot_path: Optional[str], as_json: bool) -> None:
    """Solve variants of INSTANCE with several solvers; report each placement's attainment on
    its training workload and on held-out workloads (fresh seeds)."""
    check_run_options(time_limit, None)
    if seeds < 0:
        raise InputError(f"must be >= 0, got {seeds}", "--seeds")
    if workers < 0:
        raise InputError(f"must be >= 0 (0: one per core), got {workers}", "--workers")
    names = tuple(s.strip() for s in solver_list.split(",") if s.strip())
    if not names:
        raise InputError("give at least one solver", "--solvers")
    axes = parse_vary(vary)
    check_output_path(output)
    check_output_path(plot_path)
    if plot_path:
        from placement_opt.plots import require_matplotlib
        require_matplotlib()
    inst = load_instance(instance)
    per = split_options(options, names)
    config = SweepConfig(instance_path=instance, solvers=names, heldout_seeds=tuple(inst.seed + 1 + k for k in range(seeds)),
                         time_limit=time_limit, options={n: {**sweep_defaults(n), **per[n]} for n in names})
    points = sweep_points(inst, axes)
    _check_jobs(inst, config, points)
    rows = run_sweep(config, points, output, workers or os.cpu_count() or 1)
    if output:
        progress(f"wrote {output}")
    if plot_path:
        from placement_opt.plots import save_sweep_figure
        save_sweep_figure(plot_path, [(next(iter(axes)), rows)], names, title=inst.name)
        progress(f"wrote {plot_path}")
    if as_json:
        emit_json({"instance": inst.name, "axes": axes, "results": rows})
    else:
        _print_table(rows, list(axes))


def sweep_defaults(name: str) -> dict[str, Any]:
    """:data:`SWEEP_DEFAULTS` restricted to the options solver ``name`` has."""
    from placement_opt.solvers import get_solver_class
    fields = {f.name for f in dataclasses.fields(get_solver_class(name).Options)}
    return {k: v for k, v in SWEEP_DEFAULTS.items() if k in fields}


def _check_jobs(inst: Instance, config: SweepConfig, points: list[dict[str, float]]) -> None:
    """Every point builds a valid instance and every solver accepts it, before any job runs."""
    from placement_opt.solvers.base import solver_for
    for p in points:
        variant(inst, p)
    for n in config.solvers:
        try:
            solver_for(inst, n, config.options[n])
        except InputError as e:
            raise e.with_file(config.instance_path) from None


COMMANDS = [sweep]
