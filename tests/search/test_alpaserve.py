"""Algorithm 2 end to end: beats the baselines, deterministic, anytime."""

import time

import pytest

from placement_opt import check_placement
from placement_opt.errors import InputError
from placement_opt.solvers import run_solver
from placement_opt.solvers.base import SearchStopped

from .helpers import repo_instance, shortened, tiny

BASELINES = ("selective-replication", "round-robin", "mp-equal", "mp-greedy-2", "clockwork++")


@pytest.mark.parametrize("name", ["tiny-4gpu-bert", "tiny-4gpu-mixed"])
def test_alpaserve_at_least_every_baseline(name):
    inst = tiny(name)
    ours = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False})
    check_placement(ours, inst)
    for b in BASELINES:
        opts = {"backend": "serial", "progress": False, "window_s": 20.0} if b == "clockwork++" else {}
        theirs = run_solver(inst, b, options=opts)
        assert ours.metrics["slo_attainment"] >= theirs.metrics["slo_attainment"] - 1e-12, b


def test_alpaserve_on_a_bundled_instance_beats_replication():
    inst = shortened("alpaserve/s1.json", 30)
    ours = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False})
    sr = run_solver(inst, "selective-replication")
    check_placement(ours, inst)
    assert ours.metrics["slo_attainment"] >= sr.metrics["slo_attainment"]
    assert ours.provenance["search"]["tasks"] >= ours.provenance["search"]["screened"]


def test_alpaserve_is_deterministic():
    inst = tiny("tiny-4gpu-mixed")
    a = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False})
    b = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False})
    assert a.groups == b.groups and a.metrics == b.metrics


def test_time_limit_returns_valid_placement():
    """A binding limit: the search stops on time with a complete placement (the fast greedy's
    first combination, built before the search, when the search completed none)."""
    inst = shortened("alpaserve/s3.json", 30)
    # numba's start-up before the clock starts: the first draw and the first search in a process
    # compile (or, from a clean clone, compile and cache) the jitted draw, bounds and simulator,
    # seconds more than the limit, which a test run earlier in the same process would otherwise
    # have paid (run alone, or first in a pytest-xdist worker, the search stopped with nothing)
    inst.requests()
    run_solver(shortened("alpaserve/s3.json", 2), "alpaserve", options={"backend": "serial", "progress": False})
    start = time.perf_counter()
    p = run_solver(inst, "alpaserve", time_limit=0.3, options={"backend": "serial", "progress": False})
    assert time.perf_counter() - start < 0.3 + 1.0  # the final simulation comes on top
    check_placement(p, inst)
    assert p.provenance["search"]["timed_out"]
    assert p.metrics["slo_attainment"] > 0
    assert sum(g.n_gpus for g in p.groups) <= inst.cluster.n_gpus


def test_time_limit_before_any_placement_is_a_search_stopped():
    """A limit that passes before even the first combination is built: nothing, said so."""
    inst = shortened("alpaserve/s3.json", 30)
    with pytest.raises(SearchStopped, match="time limit"):
        run_solver(inst, "alpaserve", time_limit=1e-6, options={"backend": "serial", "progress": False})


def test_bad_options_are_input_errors():
    inst = tiny("tiny-4gpu-bert")
    for opts in ({"backend": "mpi"}, {"screen": "some"}, {"beam": 0}, {"bucket_threshold": "x"},
                 {"group_sizes": "2,x"}, {"max_buckets": 0}, {"balance_tolerance": 0.5}, {"device_unit": 3}):
        with pytest.raises(InputError):
            run_solver(inst, "alpaserve", options=opts)
    with pytest.raises(InputError):
        run_solver(inst, "alpaserve-greedy", options={"group_size": 3})
    with pytest.raises(InputError):
        run_solver(inst, "exhaustive", options={"max_candidates": 5, "progress": False})


def test_ctrl_c_returns_best_so_far(monkeypatch):
    from placement_opt.solvers import alpaserve as mod
    real = mod.run_bucket_task
    calls = []

    def interrupted_third_call(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(mod, "run_bucket_task", interrupted_third_call)
    inst = tiny("tiny-4gpu-mixed")
    p = run_solver(inst, "alpaserve", options={"backend": "serial", "progress": False})
    check_placement(p, inst)
    assert p.provenance["search"]["interrupted"]
    assert p.provenance["search"]["prescreened"] + p.provenance["search"]["screened"] == 2
    assert p.metrics["slo_attainment"] > 0


def test_exhaustive_refuses_a_large_space_without_counting_all_of_it():
    """Counting S1's space to compare it with max_candidates used to run for hours."""
    from placement_opt.solvers.exhaustive import count_exhaustive
    inst = tiny("tiny-4gpu-bert")
    full = count_exhaustive(inst)
    assert 5 < count_exhaustive(inst, limit=5) < full
    with pytest.raises(InputError, match="more than 200000"):
        run_solver(repo_instance("alpaserve/s1.json"), "exhaustive", options={"progress": False})


def test_exhaustive_interrupted_before_any_candidate(monkeypatch):
    """Ctrl-C before the first simulation is an interruption (exit 130), not a TypeError."""
    from placement_opt.simulate.evaluator import PlacementEvaluator

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(PlacementEvaluator, "accepted_of_component", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_solver(tiny("tiny-4gpu-bert"), "exhaustive", options={"progress": False})


def test_a_time_limit_reuses_the_fallbacks_fast_greedy_in_the_screen(monkeypatch):
    """Under a time limit the first combination's pairs run task 0's fast greedy before the search
    (the fallback); the screen then takes those results instead of running the same jobs again.
    A limit that does not bind: the same placement as no limit, and the same Algorithm 1 runs."""
    from placement_opt.solvers import alpaserve

    calls: list[tuple] = []
    original = alpaserve.run_bucket_task

    def counted(bucket, sizes, configs, fast, beam, wall_deadline, fraction=1.0):
        calls.append((bucket, sizes, configs, fast, beam, fraction))
        return original(bucket, sizes, configs, fast, beam, wall_deadline, fraction)

    monkeypatch.setattr(alpaserve, "run_bucket_task", counted)
    inst = tiny("tiny-4gpu-mixed")
    options = {"backend": "serial", "progress": False, "prescreen": 0}  # the screen runs every task
    unlimited = run_solver(inst, "alpaserve", options=options)
    runs_unlimited = sorted(calls)
    calls.clear()
    limited = run_solver(inst, "alpaserve", time_limit=600.0, options=options)
    assert limited.groups == unlimited.groups and limited.metrics == unlimited.metrics
    assert not limited.provenance["search"]["timed_out"]
    assert sorted(calls) == runs_unlimited  # the fallback's runs were the screen's: none ran twice
