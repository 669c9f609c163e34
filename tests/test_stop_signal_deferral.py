"""The ``placeopt`` command's stop handler and Numba's callbacks into Python.

A Numba-compiled function calls back into Python to unpickle some objects (e.g. the class of
an array it returns, ``numba/core/serialize.py``) and does not check that call for an
exception: a ``KeyboardInterrupt`` raised there crashed ``placeopt simulate`` with SIGSEGV
(exit -11) in about one run in four when a SIGINT came 1.3-1.45 s after the start on a 2-core
machine (``tests/hostile``'s interrupt test failed that way). The handler now defers such a stop
until the code has returned (SIGALRM after 20 ms).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numba
import pytest

from placement_opt.cli import main as cli_main
from placement_opt.limits import clear_stop_request, stop_requested


@pytest.fixture
def stop_handlers():
    """The command's stop handlers installed in this process, and everything put back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    cli_main.install_stop_handlers()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sys.unraisablehook = sys.__unraisablehook__
        clear_stop_request()


def _frame_in(filename: str):
    """A live frame whose code comes from ``filename``."""
    return eval(compile("sys._getframe()", filename, "eval"), {"sys": sys})


def test_a_stop_inside_numbas_callback_is_raised_once_out_of_it(stop_handlers):
    callback = os.path.join(os.path.dirname(numba.__file__), "core", "serialize.py")
    cli_main._on_stop_signal(signal.SIGINT, _frame_in(callback))  # returns: deferred, not raised
    assert stop_requested() == signal.SIGINT
    assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= cli_main._DEFER_S
    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        time.sleep(2.0)  # SIGALRM comes while this test's own code runs: the stop is raised here
    assert time.perf_counter() - started < 1.0


def test_a_stop_elsewhere_in_numba_or_in_our_code_is_raised_at_once(stop_handlers):
    compiler = os.path.join(os.path.dirname(numba.__file__), "core", "compiler.py")
    for frame in (_frame_in(compiler), sys._getframe()):
        with pytest.raises(KeyboardInterrupt):
            cli_main._on_stop_signal(signal.SIGTERM, frame)
        assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    assert stop_requested() == signal.SIGTERM
