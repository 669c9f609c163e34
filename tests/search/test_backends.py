"""Backends: a process pool and Ray return exactly what the serial search returns."""

import pytest

from placement_opt.solvers import run_solver

from .helpers import shortened, tiny


def _solve(inst, solver, **opts):
    p = run_solver(inst, solver, options={"progress": False, **opts})
    return p.groups, p.windows, p.metrics["slo_attainment"]


def test_local_pool_matches_serial():
    inst = shortened("alpaserve/s1.json", 30)
    serial = _solve(inst, "alpaserve", backend="serial")
    local = _solve(inst, "alpaserve", backend="local", workers=2)
    assert serial == local
    inst = tiny("tiny-4gpu-mixed")
    assert _solve(inst, "clockwork++", backend="serial", window_s=20.0) == \
        _solve(inst, "clockwork++", backend="local", workers=2, window_s=20.0)


def test_ray_matches_serial():
    ray = pytest.importorskip("ray")
    inst = tiny("tiny-4gpu-mixed")
    serial = _solve(inst, "alpaserve", backend="serial")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert _solve(inst, "alpaserve", backend="ray") == serial
    finally:
        ray.shutdown()
