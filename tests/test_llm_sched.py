"""The LLM executor's scheduler makes the simulator's decisions (proof on a virtual clock).

The executor cannot call the Numba mesh kernel step by step, so it carries a Python port of
its policy decisions (:class:`placement_opt.executor.llm_sched.MeshScheduler`). Driven on a
virtual clock with the kernel's own job times (``run_virtual``), it must give every request
the kernel's first-token time, finish time (or drop / unfinished) and preemption count, on
the same random meshes the kernel's oracle test draws (tied arrivals, small pools with
preemption and drops, quota moves), for every policy. If either side changes a rule, this
test fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from llm_oracle import POLICIES
from test_llm_simulator_oracle import POLICY_CODE, mesh_cases, run_kernel, small_case

from placement_opt.executor.llm_sched import run_virtual
from placement_opt.simulate.meshsim import LatencyTables, MeshLLMs, MeshRequests, MeshSettings


def run_scheduler(case):
    """``run_virtual`` on a case of the oracle test (its argument tuple)."""
    (arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch, token_budget,
     policy, period, frac, horizon, _n_bins) = case
    K = len(shares)
    requests = MeshRequests(arrival=np.array(arrival, dtype=np.float64), llm=np.array(llm, dtype=np.int64),
                            prompt=np.array(prompt, dtype=np.int64), output=np.array(output, dtype=np.int64))
    llms = MeshLLMs(share=np.array([1.0] * K if policy == "temporal" else shares, dtype=np.float64),
                    kv_kib=np.array(kvu, dtype=np.int64), rate=np.array(rate, dtype=np.float64))
    tables = LatencyTables(prefill=np.array(P, dtype=np.float64), decode=np.array(D, dtype=np.float64),
                           lgrid=np.array(lgrid, dtype=np.float64))
    cfg = MeshSettings(policy=POLICY_CODE[policy], pool=pool, block=block, max_batch=max_batch,
                       token_budget=token_budget, period=period, frac=frac, horizon=horizon)
    return run_virtual(requests, llms, tables, cfg)


def assert_same_decisions(case) -> None:
    kernel = run_kernel(case)
    sched = run_scheduler(case)
    assert np.array_equal(np.asarray(sched.finish), kernel["finish"]), "finish times differ"
    assert np.array_equal(np.asarray(sched.first), kernel["first"]), "first-token times differ"
    assert sched.preemptions == kernel["preempts"].tolist(), "preemption counts differ"


@pytest.mark.parametrize("policy", POLICIES)
def test_scheduler_matches_kernel(policy):
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
    @given(mesh_cases(policy))
    def check(case):
        assert_same_decisions(case)

    check()


def test_scheduler_preempts_and_finishes_like_kernel():
    """A hand-sized case with preemption under every policy: equal, and preemption happened."""
    for policy in POLICIES:
        case = small_case(policy, pool=64, output=[30, 30, 30, 30])
        assert_same_decisions(case)
        assert sum(run_scheduler(case).preemptions) > 0
