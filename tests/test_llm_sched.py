"""The LLM executor's scheduler makes the simulator's decisions (proof on a virtual clock).

The executor cannot call the Numba mesh kernel step by step, so it carries a Python port of
its policy decisions (:class:`placement_opt.executor.llm_sched.MeshScheduler`). Driven on a
virtual clock with the kernel's own job times (``run_virtual``), it must give every request
the kernel's first-token time, finish time (or drop / unfinished) and preemption count, on
the same random meshes the kernel's oracle test draws (tied arrivals, small pools with
preemption and drops, quota moves), for every policy, with the kernel's host-thread and
HBM-contention models off and on. If either side changes a rule, this test fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_oracle import POLICIES
from test_llm_simulator_oracle import POLICY_CODE, mesh_cases, run_kernel, small_case

from placement_opt.executor.llm_sched import run_virtual
from placement_opt.simulate.meshsim import (LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                            simulate_mesh)


def mesh_inputs(case, timing=None):
    """The kernel's inputs of a case of the oracle test (its argument tuple); ``timing``:
    (hbm_gbps, decode and prefill host seconds per LLM, weight bytes per LLM, KV bytes per token per LLM)."""
    (arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch, token_budget,
     policy, period, frac, horizon, _n_bins) = case
    K = len(shares)
    hbm, decode_host, prefill_host, weights, kv = timing or (0.0, [], [], [], [])
    requests = MeshRequests(arrival=np.array(arrival, dtype=np.float64), llm=np.array(llm, dtype=np.int64),
                            prompt=np.array(prompt, dtype=np.int64), output=np.array(output, dtype=np.int64))
    llms = MeshLLMs(share=np.array([1.0] * K if policy == "temporal" else shares, dtype=np.float64),
                    kv_kib=np.array(kvu, dtype=np.int64), rate=np.array(rate, dtype=np.float64),
                    weight_bytes=np.array(weights, dtype=np.float64), kv_bytes=np.array(kv, dtype=np.float64),
                    decode_host_s=np.array(decode_host, dtype=np.float64),
                    prefill_host_s=np.array(prefill_host, dtype=np.float64))
    tables = LatencyTables(prefill=np.array(P, dtype=np.float64), decode=np.array(D, dtype=np.float64),
                           lgrid=np.array(lgrid, dtype=np.float64))
    cfg = MeshSettings(policy=POLICY_CODE[policy], pool=pool, block=block, max_batch=max_batch,
                       token_budget=token_budget, period=period, frac=frac, horizon=horizon, hbm_gbps=hbm)
    return requests, llms, tables, cfg


def run_scheduler(case, timing=None):
    """``run_virtual`` on a case of the oracle test (its argument tuple)."""
    return run_virtual(*mesh_inputs(case, timing))


def run_timed_kernel(case, timing):
    """``simulate_mesh`` on a case with the host and contention models set by ``timing``."""
    requests, llms, tables, cfg = mesh_inputs(case, timing)
    out = mesh_outputs(len(requests.arrival), len(llms.share), 4)
    simulate_mesh(requests, llms, tables, cfg, out)
    return dict(first=out.first, finish=out.finish, preempts=out.preempt_count)


@st.composite
def timings(draw, n_llms):
    """Host and contention settings that matter at the oracle cases' job times (5-300 ms):
    demands of 3-200 GB/s against 5-100 GB/s of HBM (stretches up to tens), launches of
    0-20 ms per decode step and 0-300 ms per prefill, per LLM; sometimes one model alone."""
    hbm = draw(st.sampled_from([0.0, 5.0, 20.0, 100.0]))
    decode_host = draw(st.lists(st.sampled_from([0.0, 0.001, 0.02]), min_size=n_llms, max_size=n_llms))
    prefill_host = draw(st.lists(st.sampled_from([0.0, 0.05, 0.3]), min_size=n_llms, max_size=n_llms))
    weights = draw(st.lists(st.sampled_from([1e8, 1e9, 5e9]), min_size=n_llms, max_size=n_llms))
    kv = draw(st.lists(st.sampled_from([0.0, 1e5, 1e7]), min_size=n_llms, max_size=n_llms))
    return hbm, decode_host, prefill_host, weights, kv


@st.composite
def timed_cases(draw, policy):
    case = draw(mesh_cases(policy))
    return case, draw(timings(len(case[4])))


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


@pytest.mark.parametrize("policy", POLICIES)
def test_scheduler_matches_kernel_with_host_and_contention_models(policy):
    """The port's virtual clock applies the kernel's duration model: jobs launched one after
    another on the scheduling thread, ended jobs noticed when it is free, running jobs
    re-timed by HBM contention. Same first tokens, finishes and preemptions, bit for bit."""
    seen = {"stretched": 0, "host_delayed": 0}

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
              database=None)
    @given(timed_cases(policy))
    def check(drawn):
        case, timing = drawn
        kernel = run_timed_kernel(case, timing)
        sched = run_scheduler(case, timing)
        assert np.array_equal(np.asarray(sched.finish), kernel["finish"]), "finish times differ"
        assert np.array_equal(np.asarray(sched.first), kernel["first"]), "first-token times differ"
        assert sched.preemptions == kernel["preempts"].tolist(), "preemption counts differ"
        plain = run_timed_kernel(case, None)
        if not np.array_equal(plain["finish"], kernel["finish"]):
            seen["stretched" if timing[0] > 0 else "host_delayed"] += 1

    check()
    assert seen["stretched"] >= 5 and seen["host_delayed"] >= 5, seen  # both models changed outcomes


def test_scheduler_preempts_and_finishes_like_kernel():
    """A hand-sized case with preemption under every policy: equal, and preemption happened."""
    for policy in POLICIES:
        case = small_case(policy, pool=64, output=[30, 30, 30, 30])
        assert_same_decisions(case)
        assert sum(run_scheduler(case).preemptions) > 0
