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
from types import FrameType
from typing import Any, Optional, Sequence

import click

from placement_opt.version import __version__
from placement_opt.errors import InputError
from placement_opt.limits import DEFAULT_MEMORY_BYTES, note_stop_signal, set_memory_budget, stop_requested
from placement_opt.solvers.base import SearchStopped
from placement_opt.cli.common import EXIT_BAD_INPUT, EXIT_TIME_LIMIT_EMPTY, exit_interrupted


#: the Python function that Numba-compiled code calls back into (``numba_unpickle`` in its C
#: helpers: to unpickle, e.g., the class of an array it returns), as (module, name); the compiled
#: code does not check the call for an exception
_NATIVE_CALLBACK = ("numba.core.serialize", "_numba_unpickle")


def _in_native_callback(frame: Optional[FrameType]) -> bool:
    """Whether ``frame`` runs inside :data:`_NATIVE_CALLBACK`: it is that function's frame or a
    callee's (the unpickling calls into pickle, importlib, NumPy and more)."""
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) == _NATIVE_CALLBACK:
            return True
        frame = frame.f_back
    return False


class StopSignal(KeyboardInterrupt):
    """What the stop handler raises: a ``KeyboardInterrupt`` (every ``except KeyboardInterrupt``
    takes it) of its own class. A stop that landed in code CPython runs from source text
    (SciPy's array-API shim, ``exec("from numpy import *")``, while Numba loaded a cached kernel)
    ended 3 of 90 interrupted ``simulate`` runs by SIGINT (status -2) after the command had
    printed its line and exited with 130; with this class, 0 of 125. The likely cause (a small
    ``exec`` case did not reproduce it): CPython marks an interrupt unhandled, and ``python -m``
    then ends by SIGINT, where a ``KeyboardInterrupt`` of exactly that class leaves such code
    (``run_eval_code_obj``)."""


def _on_stop_signal(signum: int, frame: Optional[FrameType]) -> None:
    """SIGINT and SIGTERM: record the request (searches then return their best so far) and
    raise :class:`StopSignal` to leave whatever Python code is running. Not inside a callback
    from Numba-compiled code (:func:`_in_native_callback`): that code does not check the call
    for an exception, and one raised there crashed the process (SIGSEGV, when a SIGINT came as
    ``merge_sorted_runs`` returned its arrays). There the stop is only recorded: a search stops
    at its next check as always, a command that does not poll (``simulate``) finishes, and the
    next signal, which lands elsewhere, raises."""
    note_stop_signal(signum)
    if not _in_native_callback(frame):
        raise StopSignal


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
