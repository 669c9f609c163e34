"""The Numba flow-shop kernels against the plain-Python oracle (tests/oracle.py).

Hypothesis draws small random instances (models, profiles with several batch sizes,
groups of 1-4 stages, some models hosted twice and some nowhere), random requests with
tied arrivals and tight or loose deadlines, and random simulator settings (both dispatch
policies, overheads, batching, stages already busy at the start). The kernel must agree
with the oracle exactly: the same accepted requests, bit-identical finish times, the same
group and batch of every request, and the same busy seconds and final clocks. Time-varying
placements (windows) are checked the same way.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle import oracle_simulate
from placement_opt import Group, Placement, SimulatorConfig, Window, instance_from_dict
from placement_opt.simulate import build_tables, run_tables, run_windows
from placement_opt.workload import Requests

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A few exact values make ties (equal clocks, equal arrivals) common.
latency = st.one_of(st.sampled_from([0.05, 0.1, 0.25, 0.4]), st.floats(0.001, 0.8))
gap = st.one_of(st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.1, 0.3]), st.floats(0.0, 0.5))


@st.composite
def cases(draw, batching: bool):
    n_models = draw(st.integers(1, 5))
    shapes = draw(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2])), min_size=1, max_size=4))
    sizes = draw(st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4))
    if draw(st.integers(0, 9)):
        sizes.add(1)  # now and then a profile lacks batch size 1
    profiles = {}
    for m in range(n_models):
        configs = []
        for pp, tp in sorted(set(shapes)):
            rows = {}
            for b in sorted(sizes):
                if b == 1 or draw(st.integers(0, 4)):  # some batch sizes unprofiled
                    rows[str(b)] = [draw(latency) * b ** 0.7 for _ in range(pp)]
            if not rows:
                rows[str(min(sizes))] = [draw(latency) for _ in range(pp)]
            configs.append({"pp": pp, "tp": tp, "stage_latency_s": rows, "stage_weight_gb": [0.01] * pp})
        profiles[f"p{m}"] = {"weight_gb": 0.01 * len(shapes), "configs": configs}
    n_gpus = sum(pp * tp for pp, tp in shapes)
    data = {
        "cluster": {"nodes": 1, "gpus_per_node": n_gpus, "gpu": {"name": "test", "memory_gb": 16}},
        "profiles": profiles,
        "models": [{"name": f"m{m}", "profile": f"p{m}"} for m in range(n_models)],
        "workload": {"duration_s": 100, "arrival": {"process": "poisson", "rate": 1.0}},
    }
    inst = instance_from_dict(data)
    groups, dev = [], 0
    for pp, tp in shapes:
        hosted = draw(st.lists(st.integers(0, n_models - 1), unique=True, max_size=n_models))
        groups.append(Group(devices=tuple(range(dev, dev + pp * tp)), pp=pp, tp=tp,
                            models=tuple(f"m{m}" for m in hosted)))
        dev += pp * tp
    n = draw(st.integers(0, 60))
    arrival = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    model = np.array(draw(st.lists(st.integers(0, n_models - 1), min_size=n, max_size=n)), dtype=np.int32)
    if draw(st.booleans()):  # one SLO per model, as instances have
        slo = np.array(draw(st.lists(st.floats(0.01, 3.0), min_size=n_models, max_size=n_models)))
        deadline = arrival + slo[model]
    else:  # arbitrary deadlines
        deadline = arrival + np.array(draw(st.lists(st.floats(0.0, 3.0), min_size=n, max_size=n)), dtype=np.float64)
    config = SimulatorConfig(
        dispatch=draw(st.sampled_from(["earliest", "shortest_queue"])),
        overhead_s=draw(st.sampled_from([0.0, 0.011, 0.1])),
        stage_overhead_factor=draw(st.sampled_from([0.0, 0.009, 0.1])),
        batching=batching,
        max_batch=draw(st.sampled_from([1, 2, 4, 16])),
    )
    requests = Requests(arrival, model, deadline, float(arrival[-1]) + 1.0 if n else 1.0)
    initial = None
    if draw(st.integers(0, 3)) == 0:  # stages busy at the start, as in a later window of a time-varying placement
        initial = [[draw(st.sampled_from([0.0, 0.3, 1.0])) for _ in range(pp)] for pp, _ in shapes]
    return inst, groups, requests, config, initial


def assert_same(inst, groups, requests, config, initial=None):
    tables = build_tables(inst, groups, config)
    start = None if initial is None else np.array([c for per_group in initial for c in per_group])
    got = run_tables(tables, requests, len(inst.models), config, start)
    finish, group, batch, busy, clocks = oracle_simulate(inst, groups, requests, config, initial)
    expected_finish = np.array(finish, dtype=np.float64)
    assert np.array_equal(got.finish >= 0, expected_finish >= 0), "accepted sets differ"
    assert got.finish.tobytes() == expected_finish.tobytes(), "finish times differ"
    assert got.group.tolist() == group
    assert got.batch.tolist() == batch
    assert got.busy.tobytes() == np.array(busy, dtype=np.float64).tobytes()
    flat = [c for per_group in clocks for c in per_group]
    assert got.clocks.tobytes() == np.array(flat, dtype=np.float64).tobytes()
    return got


@SETTINGS
@given(cases(batching=False))
def test_flow_shop_kernel_matches_oracle(case):
    assert_same(*case)


@SETTINGS
@given(cases(batching=True))
def test_batched_kernel_matches_oracle(case):
    assert_same(*case)


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
@pytest.mark.parametrize("batching", [False, True])
def test_kernel_matches_oracle_on_a_loaded_instance(dispatch, batching):
    """A bigger case than hypothesis draws: 6 models, 3 groups, about 8000 Gamma (CV 3) requests."""
    profile = {"derive": {"latency_s": 0.2, "weight_gb": 2.0, "max_gpus": 4, "layers": 8}}
    inst = instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": {"name": "V100", "memory_gb": 16, "usable_memory_gb": 13}},
        "profiles": {"bert": profile},
        "models": [{"name": "bert", "profile": "bert", "count": 6}],
        "workload": {"duration_s": 200, "arrival": {"process": "gamma", "rate": 40, "cv": 3},
                     "rate_split": {"kind": "power_law", "exponent": 0.5}, "slo": {"scale": 2}},
        "simulator": {"dispatch": dispatch, "batching": batching},
    })
    names = inst.model_names
    groups = [Group(devices=(0, 1, 2, 3), pp=4, tp=1, models=tuple(names)),
              Group(devices=(4, 5), pp=2, tp=1, models=tuple(names[:3])),
              Group(devices=(6, 7), pp=1, tp=2, models=tuple(names[2:]))]
    got = assert_same(inst, groups, inst.requests(), inst.simulator)
    assert 0 < got.accepted < len(inst.requests())  # the case exercises both admission outcomes


def test_rejected_request_uses_no_resources():
    """A request that would miss its deadline leaves the clocks as they were (admission control)."""
    inst = instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu": {"name": "g", "memory_gb": 16}},
        "profiles": {"p": {"weight_gb": 1, "configs": [
            {"pp": 1, "tp": 1, "stage_latency_s": {"1": [1.0]}, "stage_weight_gb": [1]}]}},
        "models": [{"name": "a", "profile": "p"}],
        "workload": {"duration_s": 10, "arrival": {"process": "poisson", "rate": 1}},
    })
    config = SimulatorConfig(overhead_s=0.0, stage_overhead_factor=0.0)
    groups = [Group(devices=(0,), models=("a",))]
    # request 1 arrives while request 0 runs and would finish at 2.0 > its deadline 1.9
    requests = Requests(np.array([0.0, 0.5, 1.5]), np.zeros(3, dtype=np.int32), np.array([1.0, 1.9, 2.5]), 3.0)
    got = assert_same(inst, groups, requests, config)
    assert got.finish.tolist() == [1.0, -1.0, 2.5]


def oracle_windows(inst, placement, requests, config):
    """Time-varying placements: each window's groups serve the requests arriving in it; a stage
    starts free no earlier than the latest clock of its devices in earlier windows."""
    finish = [-1.0] * len(requests)
    device_free = [0.0] * inst.cluster.n_gpus
    starts = [w.start_s for w in placement.windows] + [np.inf]
    for k, window in enumerate(placement.windows):
        picked = [i for i, a in enumerate(requests.arrival)
                  if (starts[k] <= a < starts[k + 1]) or (k == 0 and a < starts[0])]
        sub = requests.select(np.array(picked, dtype=np.int64))
        initial = [[max(device_free[d] for d in g.devices[s * g.tp:(s + 1) * g.tp]) for s in range(g.pp)]
                   for g in window.groups]
        sub_finish, _, _, _, clocks = oracle_simulate(inst, window.groups, sub, config, initial)
        for i, f in zip(picked, sub_finish):
            finish[i] = f
        for g, stage_clocks in zip(window.groups, clocks):
            for s, c in enumerate(stage_clocks):
                for d in g.devices[s * g.tp:(s + 1) * g.tp]:
                    device_free[d] = c
    return finish


@st.composite
def windowed_cases(draw):
    n_models = draw(st.integers(1, 4))
    configs = [{"pp": pp, "tp": 1, "stage_latency_s": {"1": [draw(latency) for _ in range(pp)]},
                "stage_weight_gb": [0.01] * pp} for pp in (1, 2, 4)]
    inst = instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "test", "memory_gb": 16}},
        "profiles": {"p": {"weight_gb": 0.03, "configs": configs}},
        "models": [{"name": "m", "profile": "p", "count": n_models}] if n_models > 1 else
                  [{"name": "m", "profile": "p"}],
        "workload": {"duration_s": 100, "arrival": {"process": "poisson", "rate": 1.0}},
        "simulator": {"dispatch": draw(st.sampled_from(["earliest", "shortest_queue"])),
                      "batching": draw(st.booleans())},
    })
    windows, start = [], draw(st.sampled_from([0.0, 0.5]))
    for _ in range(draw(st.integers(1, 3))):
        devices = draw(st.permutations(range(4)))
        groups, used = [], 0
        for size in draw(st.lists(st.sampled_from([1, 2, 4]), max_size=3)):
            if used + size > 4:
                break
            hosted = draw(st.lists(st.sampled_from(inst.model_names), unique=True, max_size=n_models))
            groups.append(Group(devices=tuple(devices[used:used + size]), pp=size, models=tuple(hosted)))
            used += size
        windows.append(Window(start, tuple(groups)))
        start += draw(st.sampled_from([0.2, 0.5, 1.0]))
    n = draw(st.integers(0, 40))
    arrival = np.cumsum(np.array(draw(st.lists(gap, min_size=n, max_size=n)), dtype=np.float64))
    model = np.array(draw(st.lists(st.integers(0, n_models - 1), min_size=n, max_size=n)), dtype=np.int32)
    deadline = arrival + np.array(draw(st.lists(st.floats(0.05, 3.0), min_size=n, max_size=n)), dtype=np.float64)
    return inst, Placement(groups=(), windows=tuple(windows)), Requests(arrival, model, deadline, 10.0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(windowed_cases())
def test_time_varying_placement_matches_oracle(case):
    inst, placement, requests = case
    finish, _ = run_windows(inst, placement, requests)
    expected = np.array(oracle_windows(inst, placement, requests, inst.simulator), dtype=np.float64)
    assert finish.tobytes() == expected.tobytes()


def test_time_varying_placement_reports_busy_fractions_per_window():
    from placement_opt import load_instance, simulate
    inst = load_instance(os.path.join(os.path.dirname(__file__), "..", "instances", "tiny", "two-models.json"))
    g0 = Group((0,), 1, 1, ("model-a",))
    g1 = Group((1,), 1, 1, ("model-b",))
    both = Group((0, 1), 2, 1, ("model-a", "model-b"))
    placement = Placement(groups=(g0, g1), windows=(Window(0.0, (g0, g1)), Window(300.0, (both,))))
    m = simulate(inst, placement)
    fractions = m["window_group_busy_fraction"]
    assert [len(f) for f in fractions] == [2, 1]
    assert all(0 < x < 1.5 for f in fractions for x in f)
    # one model's share of one GPU in the first window: about rate x latency
    assert abs(fractions[0][0] - 1.5 * 0.4) < 0.15
