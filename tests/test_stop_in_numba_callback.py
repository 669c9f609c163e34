"""The ``placeopt`` command's stop handler and Numba's callbacks into Python.

A Numba-compiled function calls back into Python to unpickle some objects (e.g. the class of
an array it returns: ``numba.core.serialize._numba_unpickle``) and does not check that call for
an exception: a ``KeyboardInterrupt`` raised there crashed ``placeopt simulate`` with SIGSEGV
(exit -11) in about one run in four when a SIGINT came 1.3-1.45 s after the start on a 2-core machine
(``tests/hostile``'s interrupt test failed that way). There the handler now only records the
stop; elsewhere it raises as before, a ``KeyboardInterrupt`` of its own class (``StopSignal``).
"""

from __future__ import annotations

import signal
import sys

import pytest

from placement_opt.cli import main as cli_main
from placement_opt.limits import clear_stop_request, stop_requested


@pytest.fixture(autouse=True)
def no_stop_recorded():
    clear_stop_request()
    yield
    clear_stop_request()


def _frame_from(module: str, function: str, call=None):
    """A live frame of function ``function`` of module ``module``; with ``call``, the frame of
    ``call()`` made from it (a callee of it)."""
    namespace = {"__name__": module, "sys": sys}
    exec(f"def {function}(call):\n    return call() if call else sys._getframe()", namespace)
    return namespace[function](call)


def _own_frame():
    return sys._getframe()


def test_a_stop_inside_numbas_callback_is_recorded_not_raised():
    from numba.core.serialize import _numba_unpickle  # the function this installed Numba calls back

    assert (_numba_unpickle.__module__, _numba_unpickle.__name__) == cli_main._NATIVE_CALLBACK
    cli_main._on_stop_signal(signal.SIGINT, _frame_from("numba.core.serialize", "_numba_unpickle"))
    assert stop_requested() == signal.SIGINT
    # deeper: the unpickling has called into other modules (pickle, importlib, NumPy)
    callee = _frame_from("numba.core.serialize", "_numba_unpickle", call=_own_frame)
    assert callee.f_globals["__name__"] == __name__ and callee.f_back.f_globals["__name__"] == "numba.core.serialize"
    cli_main._on_stop_signal(signal.SIGTERM, callee)
    assert stop_requested() == signal.SIGTERM


def test_a_stop_elsewhere_in_numba_or_in_our_code_is_raised_at_once():
    # elsewhere in the same module (e.g. numba loading a cached function) too: that is no callback
    elsewhere = (_frame_from("numba.core.serialize", "_rebuild_reduction"),
                 _frame_from("numba.core.compiler", "compile"), sys._getframe(), None)
    for frame in elsewhere:
        with pytest.raises(KeyboardInterrupt) as raised:
            cli_main._on_stop_signal(signal.SIGINT, frame)
        assert type(raised.value) is cli_main.StopSignal  # not exactly KeyboardInterrupt: see its docstring
        assert stop_requested() == signal.SIGINT
