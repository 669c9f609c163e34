"""Entry point of the ``placeopt`` command.

Every module ``placement_opt.cli.cmd_*`` contributes the click commands in its
``COMMANDS`` list, so features add commands without touching this file. Input errors
become one line on stderr and exit status 2, never a traceback; SIGINT and SIGTERM stop any
command (a search returns its best placement so far); the exit statuses are below and in
docs/cli.md.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import signal
import sys
import threading
from typing import Any, Optional, Sequence

import click

from placement_opt.version import __version__
from placement_opt.errors import InputError
from placement_opt.limits import DEFAULT_MEMORY_BYTES, note_stop_signal, set_memory_budget, stop_requested
from placement_opt.solvers.base import SearchStopped
from placement_opt.cli.common import EXIT_BAD_INPUT, EXIT_TIME_LIMIT_EMPTY, exit_interrupted


def _on_stop_signal(signum: int, _frame: Any) -> None:
    """SIGINT and SIGTERM: record the request (searches then return their best so far) and
    raise ``KeyboardInterrupt`` to leave whatever Python code is running."""
    note_stop_signal(signum)
    raise KeyboardInterrupt


def _quiet_stop_in_finalizers(unraisable: Any) -> None:
    """A stop signal that lands inside a finalizer (``__del__``, e.g. llvmlite's while Numba
    compiles) cannot propagate; Python would print it as "Exception ignored" with a traceback.
    The stop is already recorded and handled by the command, so only that case is silenced."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and stop_requested() is not None:
        return
    sys.__unraisablehook__(unraisable)


def install_stop_handlers() -> None:
    """Let SIGINT and SIGTERM stop a command the same way (SIGTERM would otherwise end the
    process at once, without the best-so-far placement or a message)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_stop_signal)
    sys.unraisablehook = _quiet_stop_in_finalizers


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        if threading.current_thread() is threading.main_thread():
            install_stop_handlers()
        try:
            return super().invoke(ctx)
        except InputError as e:
            click.echo(f"placeopt: error: {e.one_line()}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except SearchStopped as e:
            if e.reason == "time limit":
                click.echo("placeopt: the time limit passed before any placement was found; nothing written", err=True)
                sys.exit(EXIT_TIME_LIMIT_EMPTY)
            exit_interrupted(e.signum, "before any placement was found; nothing written")
        except KeyboardInterrupt:
            exit_interrupted(stop_requested(), "nothing written")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="placeopt")
@click.option("--max-memory", type=float, default=None, metavar="GB",
              help=f"Memory budget of the run in GB (default {DEFAULT_MEMORY_BYTES / 1e9:g}): workloads whose "
                   "estimated peak memory is over it are refused before anything is allocated.")
def cli(max_memory: Optional[float]) -> None:
    """Place many deep-learning models on a GPU cluster for SLO attainment or throughput."""
    if max_memory is not None:
        if not (math.isfinite(max_memory) and max_memory > 0):
            raise InputError(f"must be a positive number of GB, got {max_memory}", "--max-memory")
        set_memory_budget(max_memory * 1e9)


def _load_commands() -> None:
    import placement_opt.cli as pkg
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"placement_opt.cli.{info.name}")
            for command in getattr(module, "COMMANDS", []):
                cli.add_command(command)


_load_commands()


def main(argv: Optional[Sequence[str]] = None) -> None:
    cli.main(args=argv, prog_name="placeopt")


if __name__ == "__main__":
    main()
