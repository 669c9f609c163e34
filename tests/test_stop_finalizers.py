"""A stop signal that lands inside a finalizer is not printed as "Exception ignored" + traceback."""

import gc
import sys

import pytest

from placement_opt import limits
from placement_opt.cli import main as cli_main


class _InterruptedFinalizer:
    def __del__(self):
        raise KeyboardInterrupt


def _drop_one() -> None:
    obj = _InterruptedFinalizer()
    del obj
    gc.collect()


@pytest.fixture
def hook(monkeypatch):
    monkeypatch.setattr(sys, "unraisablehook", cli_main._quiet_stop_in_finalizers)
    return monkeypatch


def test_a_recorded_stop_in_a_finalizer_is_silent(hook, capfd):
    hook.setattr(limits, "_stop_signal", 2)
    _drop_one()
    assert capfd.readouterr().err == ""


def test_without_a_stop_the_default_report_stays(hook, capfd):
    hook.setattr(limits, "_stop_signal", None)
    _drop_one()
    err = capfd.readouterr().err
    assert "Exception ignored" in err and "KeyboardInterrupt" in err
