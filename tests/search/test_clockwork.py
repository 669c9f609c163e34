"""Clockwork++: one selective-replication placement per window, replayed window by window."""

import math

import pytest

from placement_opt import check_placement, simulate
from placement_opt.solvers import run_solver

from .helpers import tiny


def test_windows_are_replayed():
    inst = tiny("tiny-4gpu-mixed")
    p = run_solver(inst, "clockwork++", options={"window_s": 15.0, "backend": "serial", "progress": False})
    check_placement(p, inst)
    assert len(p.windows) == math.ceil(inst.workload.duration_s / 15.0)
    assert [w.start_s for w in p.windows] == [0.0, 15.0, 30.0, 45.0]
    assert p.metrics["windows"] == len(p.windows)
    assert simulate(inst, p)["slo_attainment"] == p.metrics["slo_attainment"]
    # placements differ between windows when the load moves (otherwise windows would be pointless)
    assert len({w.groups for w in p.windows}) > 1


def test_one_window_is_selective_replication():
    inst = tiny("tiny-4gpu-bert")
    cw = run_solver(inst, "clockwork++", options={"window_s": 1000.0, "backend": "serial", "progress": False})
    sr = run_solver(inst, "selective-replication")
    assert len(cw.windows) == 1
    assert cw.windows[0].groups == sr.groups
    assert cw.metrics["slo_attainment"] == pytest.approx(sr.metrics["slo_attainment"])


def test_time_limit_spans_all_windows():
    """With no time, no window is solved: the search says so instead of returning an empty
    placement (issue 15.2)."""
    import time

    from placement_opt.solvers.base import SearchStopped

    inst = tiny("tiny-4gpu-mixed")
    start = time.perf_counter()
    with pytest.raises(SearchStopped) as stopped:
        run_solver(inst, "clockwork++", time_limit=0.0, options={"window_s": 5.0, "backend": "serial", "progress": False})
    assert stopped.value.reason == "time limit"
    assert time.perf_counter() - start < 5


def test_unsolved_windows_take_the_nearest_solved_window():
    """A window the search did not reach keeps the placement of the last solved window before it
    (the first solved one for windows before any), never an empty window."""
    from placement_opt.placement import Group
    from placement_opt.solvers.clockwork import _fill_windows

    a, b = [Group(devices=(0,), models=("m1",))], [Group(devices=(0,), models=("m2",))]
    bounds = [(0.0, 5.0), (5.0, 10.0), (10.0, 15.0), (15.0, 20.0)]
    windows = _fill_windows(bounds, [None, (a, {}), None, (b, {})])
    assert [w.groups for w in windows] == [tuple(a), tuple(a), tuple(a), tuple(b)]
    assert [w.start_s for w in windows] == [0.0, 5.0, 10.0, 15.0]


def test_progress_reports_the_attainment_of_the_solved_windows(capsys):
    """Progress lines used to print 'best attainment 0.0000' whatever the windows achieved."""
    inst = tiny("tiny-4gpu-bert")
    p = run_solver(inst, "clockwork++", options={"window_s": 1000.0, "backend": "serial"})
    done = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.startswith("clockwork++: 100%") and done.endswith("done]")
    shown = float(done.split("best ")[1].split()[0])
    assert shown == round(p.metrics["slo_attainment"], 4)  # the saved placement's score, as reported
