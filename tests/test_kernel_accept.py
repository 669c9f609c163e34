"""The attainment-only kernel (``accept_flow_shop``, used by the searches) decides as run_flow_shop does.

It writes nothing per request, so it is checked against the full kernel (itself checked
against the oracle in tests/test_simulator_oracle.py) on the same hypothesis cases: the same
accepted requests of every model, bit-identical busy seconds and final clocks.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given

from placement_opt.simulate import build_tables, run_tables
from placement_opt.simulate.kernels import EARLIEST, SHORTEST_QUEUE, accept_flow_shop
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
