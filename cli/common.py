"""Helpers shared by the commands: loading inputs, printing tables, writing outputs."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Iterable, Optional, Sequence

import click

from placement_opt.errors import InputError
from placement_opt.instance import Instance, load_instance
from placement_opt.io import atomic_write_text
from placement_opt.feasibility import check_placement
from placement_opt.placement import Placement, load_placement
from placement_opt.workload import Requests

#: exit statuses (docs/cli.md, "Errors and exit status"); 128 + N: stopped by signal N
#: (SIGINT 130, SIGTERM 143) with nothing written
EXIT_BAD_INPUT = 2
EXIT_STOPPED = 3  # stopped by the time limit or a signal; the best placement so far was written
EXIT_UNSERVED = 4  # the placement leaves models unserved (if it serves none, nothing was written)
EXIT_TIME_LIMIT_EMPTY = 124  # the time limit passed before any placement was found; nothing written

INSTANCE = click.argument("instance", type=click.Path(dir_okay=False))
JSON_FLAG = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def exit_interrupted(signum: Optional[int], what: str) -> None:
    """Say that signal ``signum`` (SIGINT if unknown) stopped the command, and ``what`` became
    of its outputs, and exit with 128 + it."""
    signum = signum or signal.SIGINT
    click.echo(f"placeopt: interrupted ({signal.Signals(signum).name}) {what}", err=True)
    sys.exit(128 + signum)


def read_instance(path: str) -> Instance:
    return load_instance(path)


def read_requests(instance: Instance, path: str) -> Requests:
    """The instance's requests; errors in the workload (e.g. a trace) name ``path`` unless they
    name their own file."""
    try:
        return instance.requests()
    except InputError as e:
        raise e.with_file(path) from None


def read_placement(path: str, instance: Optional[Instance] = None) -> Placement:
    placement = load_placement(path)
    if instance is not None:
        try:
            check_placement(placement, instance)
        except InputError as e:
            raise e.with_file(path) from None
    return placement


def progress(message: str) -> None:
    """Progress and status lines go to stderr so stdout stays parseable."""
    click.echo(message, err=True)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def check_output_path(path: str | None, inputs: Sequence[str] = ()) -> None:
    """Refuse an output path that cannot be written, or that is one of the command's
    ``inputs`` (writing there would destroy the input), before any long computation."""
    if path is None or path == "-":
        return
    if os.path.isdir(path):
        raise InputError("is a directory", "--output", path)
    for given in inputs:
        if _same_file(path, given):
            raise InputError(f"is the input file {given}: refusing to overwrite it", "--output", path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"folder {folder} does not exist", "--output", path)


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (the same inode, or the same resolved path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet)
        return os.path.realpath(a) == os.path.realpath(b)


def write_output(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``-``: stdout); a failure is an input error."""
    if path == "-":
        sys.stdout.write(text)
        return
    try:
        if os.path.exists(path) and not os.path.isfile(path):  # /dev/null, a FIFO: write into it, never
            with open(path, "w") as f:                          # rename a file over it
                f.write(text)
            return
        atomic_write_text(path, text)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", "--output", path) from None


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return "\n".join(row.rstrip() for row in out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def metrics_summary(metrics: dict[str, Any]) -> str:
    keys = [("slo_attainment", "SLO attainment"), ("goodput_rps", "goodput (req/s)"),
            ("throughput_rps", "throughput (req/s)"), ("latency_mean_s", "latency mean (s)"),
            ("latency_p50_s", "latency p50 (s)"), ("latency_p99_s", "latency p99 (s)"),
            ("requests", "requests"), ("accepted", "accepted")]
    return "\n".join(f"{label:20s} {_fmt(metrics[k])}" for k, label in keys if k in metrics)
