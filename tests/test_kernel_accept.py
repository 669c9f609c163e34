"""The attainment-only kernel (``accept_flow_shop``, used by the searches) decides as run_flow_shop does.

It writes nothing per request, so it is checked against the full kernel (itself checked
against the oracle in tests/test_simulator_oracle.py) on the same hypothesis cases: the same
accepted requests of every model, bit-identical busy seconds and final clocks.
"""

from __future__ import annotations

import functools
import types
from typing import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numba import njit

from placement_opt.simulate import build_tables, kernels, run_tables
from placement_opt.simulate.kernels import EARLIEST, SHORTEST_QUEUE, HostTables, accept_flow_shop, run_flow_shop
from test_simulator_oracle import SETTINGS, cases


@SETTINGS
@given(cases(batching=False))
def test_accept_flow_shop_matches_run_flow_shop(case):
    inst, groups, requests, config, initial = case
    tables = build_tables(inst, groups, config)
    start = np.zeros(int(tables.stage_ptr[-1])) if initial is None else \
        np.array([c for per_group in initial for c in per_group], dtype=np.float64)
    full = run_tables(tables, requests, len(inst.models), config, start)
    counts = np.zeros(len(inst.models), dtype=np.int64)
    busy = np.zeros(tables.n_groups)
    clocks = start.copy()
    policy = SHORTEST_QUEUE if config.dispatch == "shortest_queue" else EARLIEST
    accepted = accept_flow_shop((requests.arrival, requests.model, requests.deadline), tuple(tables), busy, clocks,
                                counts, config.overhead_s, policy)
    assert accepted == full.accepted
    assert counts.tolist() == np.bincount(requests.model[full.finish >= 0], minlength=len(inst.models)).tolist()
    assert busy.tobytes() == full.busy.tobytes()
    assert clocks.tobytes() == full.clocks.tobytes()


@st.composite
def wide_tables(draw):
    """Hand-made host tables beyond the oracle cases: up to 11 groups of 1-6 stages, models on
    up to 11 of them (so more than one block of four hosts), models without hosts, several
    components, latencies and start clocks that may be ``inf``, arrivals in order."""
    n_groups = draw(st.integers(1, 11))
    stages = draw(st.lists(st.integers(1, 6), min_size=n_groups, max_size=n_groups))
    stage_ptr = np.concatenate([[0], np.cumsum(stages)]).astype(np.int32)
    n_models = draw(st.integers(1, 6))
    host_group, host_model, host_lat_ptr, lat = [], [], [], []
    host_ptr = [0]
    value = st.one_of(st.sampled_from([0.05, 0.1, 0.25]), st.floats(0.001, 0.5), st.just(np.inf))
    island = draw(st.lists(st.integers(0, 2), min_size=n_groups, max_size=n_groups))  # components, mostly
    for m in range(n_models):
        mine = draw(st.integers(0, 2))
        wanted = draw(st.sets(st.integers(0, n_groups - 1), max_size=n_groups))
        for g in sorted(g for g in wanted if island[g] == mine or draw(st.integers(0, 19)) == 0):
            host_group.append(g)
            host_model.append(m)
            host_lat_ptr.append(len(lat))
            lat.extend(draw(st.lists(value, min_size=stages[g], max_size=stages[g])))
        host_ptr.append(len(host_group))
    i32 = lambda v: np.array(v, dtype=np.int32)  # noqa: E731
    tables = HostTables(host_ptr=i32(host_ptr), host_group=i32(host_group), host_model=i32(host_model),
                        host_lat_ptr=np.array(host_lat_ptr, dtype=np.int64), lat=np.array(lat, dtype=np.float64),
                        stage_ptr=stage_ptr, group_host_ptr=i32([0] * (n_groups + 1)), group_hosts=i32([]),
                        batch_sizes=np.array([1], dtype=np.int64))
    n = draw(st.integers(0, 80))
    arrival = np.cumsum(np.array(draw(st.lists(st.sampled_from([0.0, 0.01, 0.05, 0.2]), min_size=n, max_size=n))))
    model = np.array(draw(st.lists(st.integers(0, n_models - 1), min_size=n, max_size=n)), dtype=np.int32)
    deadline = arrival + np.array(draw(st.lists(st.floats(0.0, 2.0), min_size=n, max_size=n)))
    start = np.array(draw(st.lists(st.one_of(st.sampled_from([0.0, 0.3]), st.just(np.inf)),
                                   min_size=int(stage_ptr[-1]), max_size=int(stage_ptr[-1]))))
    return tables, (arrival, model, deadline), start, draw(st.integers(-1, n)), draw(st.sampled_from([0.0, 0.011]))


def _tiny_tables() -> HostTables:
    """One model on one single-stage group, with the dtypes that :func:`wide_tables` uses."""
    i32 = lambda *v: np.array(v, dtype=np.int32)  # noqa: E731
    return HostTables(host_ptr=i32(0, 1), host_group=i32(0), host_model=i32(0),
                      host_lat_ptr=np.zeros(1, dtype=np.int64), lat=np.array([0.1]), stage_ptr=i32(0, 1),
                      group_host_ptr=i32(0, 0), group_hosts=i32(), batch_sizes=np.array([1], dtype=np.int64))


#: requests per chunk of :func:`_small_chunks`
SMALL_CHUNK = 5


@functools.cache
def _small_chunks() -> Callable:
    """The earliest-dispatch kernel compiled with chunks of ``SMALL_CHUNK`` requests (grouped by
    component in every chunk), so that short cases cross chunk boundaries. Numba reads the
    module's ``_CHUNK`` when it compiles, which the first call does. The compilation (~10 s) is
    cached on disk, as the package's kernels are, under a name of its own that holds the chunk:
    numba keys its cache by the function's name, kernels.py's time stamp and the bytecode, not by
    the globals it read, so neither this nor the kernel's own compilation is loaded for the other
    (nor for another chunk)."""
    source = kernels._accept_earliest.py_func
    name = f"_accept_earliest_in_chunks_of_{SMALL_CHUNK}"
    func = types.FunctionType(source.__code__, kernels.__dict__, name, source.__defaults__)
    func.__qualname__ = name
    earliest = njit(cache=True)(func)
    requests = (np.zeros(1), np.zeros(1, dtype=np.int32), np.ones(1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernels, "_CHUNK", SMALL_CHUNK)
        assert earliest(requests, _tiny_tables(), np.zeros(1), np.zeros(1), np.zeros(1, dtype=np.int64),
                        0.0, 1) == 1
    earliest.disable_compile()  # another signature would compile outside the patch (chunks of _CHUNK): raise
    return earliest


@SETTINGS
@given(wide_tables(), st.booleans())
def test_accept_flow_shop_earliest_matches_run_flow_shop_on_wide_tables(case, small_chunks):
    """The earliest-dispatch path (blocks of four hosts, components one after another in every
    chunk, 4-stage groups in registers) against run_flow_shop, giving up exactly when the
    limit is passed; with chunks of 8192 requests and of 5."""
    tables, requests, start, max_rejected, overhead = case
    n = requests[0].shape[0]
    finish, group = np.empty(n), np.empty(n, dtype=np.int64)
    full_busy, full_clocks = np.zeros(tables.n_groups), start.copy()
    out = (finish, group, np.ones(n, dtype=np.int64), full_busy, full_clocks)
    full = run_flow_shop(requests, tuple(tables), out, overhead, EARLIEST)
    counts = np.zeros(len(tables.host_ptr) - 1, dtype=np.int64)
    busy, clocks = np.zeros(tables.n_groups), start.copy()
    if small_chunks:
        accepted = _small_chunks()(requests, tables, busy, clocks, counts, overhead, n if max_rejected < 0
                                   else max_rejected)
    else:
        accepted = accept_flow_shop(requests, tuple(tables), busy, clocks, counts, overhead, EARLIEST,
                                    max_rejected)
    if max_rejected >= 0 and n - full > max_rejected:
        assert accepted == -1
        return
    assert accepted == full
    assert counts.tolist() == np.bincount(requests[1][finish >= 0], minlength=len(counts)).tolist()
    assert busy.tobytes() == full_busy.tobytes()
    assert clocks.tobytes() == full_clocks.tobytes()


def _island_case(rng: np.random.Generator) -> tuple:
    """A random case of 2-3 components (islands of groups, each model on groups of one island),
    40 requests: most chunks of 5 hold requests of several components."""
    n_groups = int(rng.integers(2, 9))
    stages = rng.integers(1, 6, n_groups)
    island = rng.integers(0, 3, n_groups)
    island[:2] = [0, 1]
    host_ptr, host_group, lat_ptr, lat = [0], [], [], []
    n_models = int(rng.integers(2, 7))
    for m in range(n_models):
        groups = [g for g in range(n_groups) if island[g] == m % 3 and rng.random() < 0.7]
        for g in groups:
            host_group.append(g)
            lat_ptr.append(len(lat))
            lat.extend(rng.choice([0.05, 0.1, 0.25], stages[g]) * rng.uniform(0.5, 2.0))
        host_ptr.append(len(host_group))
    i32 = lambda v: np.array(v, dtype=np.int32)  # noqa: E731
    tables = HostTables(host_ptr=i32(host_ptr), host_group=i32(host_group), host_model=i32([0] * len(host_group)),
                        host_lat_ptr=np.array(lat_ptr, dtype=np.int64), lat=np.array(lat, dtype=np.float64),
                        stage_ptr=i32(np.concatenate([[0], np.cumsum(stages)])), group_host_ptr=i32([0] * (n_groups + 1)),
                        group_hosts=i32([]), batch_sizes=np.array([1], dtype=np.int64))
    arrival = np.cumsum(rng.choice([0.0, 0.02, 0.1], 40))
    requests = (arrival, rng.integers(0, n_models, 40).astype(np.int32), arrival + rng.uniform(0.1, 1.5, 40))
    return tables, requests


def test_earliest_chunks_cross_components():
    """Chunks of 5 requests of several components (grouped in every chunk) give the results of
    run_flow_shop on 200 seeded random cases."""
    rng = np.random.default_rng(14)
    for _ in range(200):
        tables, requests = _island_case(rng)
        n, n_clocks = 40, int(tables.stage_ptr[-1])
        finish, full_busy, full_clocks = np.empty(n), np.zeros(tables.n_groups), np.zeros(n_clocks)
        out = (finish, np.empty(n, dtype=np.int64), np.ones(n, dtype=np.int64), full_busy, full_clocks)
        full = run_flow_shop(requests, tuple(tables), out, 0.011, EARLIEST)
        counts, busy, clocks = np.zeros(len(tables.host_ptr) - 1, dtype=np.int64), np.zeros(tables.n_groups), \
            np.zeros(n_clocks)
        assert _small_chunks()(requests, tables, busy, clocks, counts, 0.011, n) == full
        assert counts.tolist() == np.bincount(requests[1][finish >= 0], minlength=len(counts)).tolist()
        assert busy.tobytes() == full_busy.tobytes() and clocks.tobytes() == full_clocks.tobytes()
