"""The LLM executor's scheduler makes the simulator's decisions (proof on a virtual clock).

The executor cannot call the Numba mesh kernel step by step, so it carries a Python port of
its policy decisions (:class:`placement_opt.executor.llm_sched.MeshScheduler`). Driven on a
virtual clock with the kernel's own job times (``run_virtual``), it must give every request
the kernel's first-token time, finish time (or drop / unfinished) and preemption count, on
the same random meshes the kernel's oracle test draws (tied arrivals, small pools with
preemption and drops, quota moves), for every policy, with each of the kernel's duration
terms (host thread, eager prefills, prefill collect and stretch, decode KV read, HBM and
own-prefill contention) off and on. If either side changes a rule, this test fails.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_oracle import POLICIES
from test_llm_simulator_oracle import POLICY_CODE, mesh_cases, run_kernel, small_case

from placement_opt.executor.llm_sched import run_virtual
from placement_opt.simulate.meshsim import (LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                            simulate_mesh)


class Timing(NamedTuple):
    """The kernel's duration-model settings of a case: every optional ``MeshSettings`` timing
    term and every optional per-LLM ``MeshLLMs`` array (lists over the LLMs)."""

    hbm_gbps: float
    decode_kv_gbps: float
    own_prefill_decode: float
    graph_tokens: int
    decode_host: List[float]
    prefill_host: List[float]
    eager_host: List[float]
    eager_hold: List[float]
    collect: List[float]
    stretch: List[float]
    weights: List[float]
    kv: List[float]
    block_host: List[float]
    hbm_cap_gbps: float = 0.0
    prefill_beside: float = 0.0
    prefill_beside_delay: float = 0.0
    prefill_beside_gbps: float = 0.0
    prefill_beside_requests: float = 0.0
    prefill_beside_knee: float = 0.0
    prefill_beside_power: float = 0.0
    prefill_at_longest: bool = False
    decode_stretch: Sequence[float] = ()
    decode_wave: Sequence[float] = ()
    decode_request: Sequence[float] = ()
    own_decode_prefill: float = 0.0
    prefill_at_bucket: bool = False
    hbm_curve_gbps: float = 0.0
    hbm_curve_power: float = 2.0
    prefill_beside_knee_s: float = 0.0
    own_prefill_decode_knee: float = 0.0
    own_decode_prefill_knee: float = 0.0
    prefill_beside_eager_knee_s: float = 0.0
    decode_combine: Sequence[float] = ()
    kv_heads: Sequence[int] = ()
    combine_splits: Sequence[int] = ()


NO_TIMING = Timing(0.0, 0.0, 0.0, 0, [], [], [], [], [], [], [], [], [])


def _f64(values):
    return np.array(values, dtype=np.float64)


def mesh_inputs(case, timing=None):
    """The kernel's inputs of a case of the oracle test (its argument tuple) with the duration
    models set by ``timing`` (a :class:`Timing`; None: all off, the per-LLM arrays empty)."""
    (arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch, token_budget,
     policy, period, frac, horizon, _n_bins) = case
    K = len(shares)
    tm = timing or NO_TIMING
    requests = MeshRequests(arrival=_f64(arrival), llm=np.array(llm, dtype=np.int64),
                            prompt=np.array(prompt, dtype=np.int64), output=np.array(output, dtype=np.int64))
    llms = MeshLLMs(share=_f64([1.0] * K if policy == "temporal" else shares),
                    kv_kib=np.array(kvu, dtype=np.int64), rate=_f64(rate),
                    weight_bytes=_f64(tm.weights), kv_bytes=_f64(tm.kv), decode_host_s=_f64(tm.decode_host),
                    prefill_host_s=_f64(tm.prefill_host), prefill_eager_host_s=_f64(tm.eager_host),
                    prefill_eager_hold_s=_f64(tm.eager_hold), prefill_collect_s=_f64(tm.collect),
                    prefill_stretch=_f64(tm.stretch), decode_block_host_s=_f64(tm.block_host),
                    decode_stretch=_f64(tm.decode_stretch), decode_wave=_f64(tm.decode_wave),
                    decode_request_s=_f64(tm.decode_request), decode_combine_s=_f64(tm.decode_combine),
                    attention_kv_heads=np.array(tm.kv_heads, dtype=np.int64),
                    combine_spill_splits=np.array(tm.combine_splits, dtype=np.int64))
    tables = LatencyTables(prefill=_f64(P), decode=_f64(D), lgrid=_f64(lgrid))
    cfg = MeshSettings(policy=POLICY_CODE[policy], pool=pool, block=block, max_batch=max_batch,
                       token_budget=token_budget, period=period, frac=frac, horizon=horizon, hbm_gbps=tm.hbm_gbps,
                       hbm_cap_gbps=tm.hbm_cap_gbps,
                       graph_tokens=tm.graph_tokens, decode_kv_gbps=tm.decode_kv_gbps,
                       own_prefill_decode=tm.own_prefill_decode, prefill_beside=tm.prefill_beside,
                       prefill_beside_delay=tm.prefill_beside_delay, prefill_beside_gbps=tm.prefill_beside_gbps,
                       prefill_beside_requests=tm.prefill_beside_requests, prefill_beside_knee=tm.prefill_beside_knee,
                       prefill_beside_power=tm.prefill_beside_power, prefill_at_longest=tm.prefill_at_longest,
                       own_decode_prefill=tm.own_decode_prefill, prefill_at_bucket=tm.prefill_at_bucket,
                       hbm_curve_gbps=tm.hbm_curve_gbps, hbm_curve_power=tm.hbm_curve_power,
                       prefill_beside_knee_s=tm.prefill_beside_knee_s,
                       own_prefill_decode_knee=tm.own_prefill_decode_knee,
                       own_decode_prefill_knee=tm.own_decode_prefill_knee,
                       prefill_beside_eager_knee_s=tm.prefill_beside_eager_knee_s)
    return requests, llms, tables, cfg


def run_scheduler(case, timing=None):
    """``run_virtual`` on a case of the oracle test (its argument tuple)."""
    return run_virtual(*mesh_inputs(case, timing))


def run_timed_kernel(case, timing):
    """``simulate_mesh`` on a case with the duration models set by ``timing``."""
    requests, llms, tables, cfg = mesh_inputs(case, timing)
    out = mesh_outputs(len(requests.arrival), len(llms.share), 4)
    simulate_mesh(requests, llms, tables, cfg, out)
    return dict(first=out.first, finish=out.finish, preempts=out.preempt_count)


@st.composite
def timings(draw, n_llms):
    """Duration-model settings that matter at the oracle cases' job times (5-300 ms) and sizes
    (prompts of 1-80 tokens, batches of 1-8), each term off (0) or on: HBM demands of 3-200 GB/s
    against 5-100 GB/s and a bandwidth cap of 1-20 GB/s (stretches up to tens); decode KV reads
    of up to ~9 GB at 20-200 GB/s;
    a decode beside its own prefill at a quarter or half speed; eager prefills over 16 or 64
    padded tokens with their launch delay and (apart, or 0: the same) thread hold; launches of
    0-20 ms per decode step and 0-300 ms per prefill; page-table fills of 0-2 ms per KV block a
    decode step's requests hold; prefill collects of 0-50 ms and graph prefill stretches of
    1-3x, per LLM; graph prefills on partitions beside other jobs 1.37 or 3 times slower and
    5 or 50 ms later, or by the others' demand at 10-100 GB/s and their decode requests at 2 or
    20 per unit, over 1 + tokens / 8 or 64 (which stretches eager prefills too), times the
    LLM's share to the power 0.4 or 1.5; prefills timed
    at their longest prompt or the mean, and graph prefills at their CUDA-graph bucket or not; decode steps 1.07 or 1.5 times their table time in place of
    the KV read, and 1 or 10 ms more per request, per LLM; a prefill beside its own decode step at
    0.4 or 0.7 of its speed; decode steps 2 or 20 ms longer where their split-combine spills (one
    or eight KV heads, spilling at one split: every step, or at two or 32: none of these short
    contexts; per LLM). Each per-LLM array is sometimes empty (the kernel's zeros), apart from the
    others."""
    def per_llm(values):
        return draw(st.lists(st.sampled_from(values), min_size=n_llms, max_size=n_llms))

    def optional(values):
        return per_llm(values) if draw(st.booleans()) else []

    hbm = draw(st.sampled_from([0.0, 5.0, 20.0, 100.0]))
    decode_kv_gbps = draw(st.sampled_from([0.0, 20.0, 200.0]))
    own = draw(st.sampled_from([0.0, 0.25, 0.5]))
    graph_tokens = draw(st.sampled_from([0, 16, 64]))
    decode_host = optional([0.0, 0.001, 0.02])
    prefill_host = optional([0.0, 0.05, 0.3])
    weights = optional([1e8, 1e9, 5e9])
    kv = optional([0.0, 1e5, 1e7])
    combine = optional([0.0, 0.002, 0.02])
    kv_heads, combine_splits = (per_llm([1, 8]), per_llm([1, 1, 2, 32])) if combine else ([], [])
    return Timing(hbm, decode_kv_gbps, own, graph_tokens, decode_host, prefill_host,
                  eager_host=optional([0.0, 0.013, 0.1]), eager_hold=optional([0.0, 0.05, 0.2]),
                  collect=optional([0.0, 0.001, 0.05]), stretch=optional([0.0, 1.0, 1.5, 3.0]), weights=weights,
                  kv=kv, block_host=optional([0.0, 1e-4, 2e-3]),
                  hbm_cap_gbps=draw(st.sampled_from([0.0, 1.0, 5.0, 20.0])),
                  prefill_beside=draw(st.sampled_from([0.0, 0.37, 2.0])),
                  prefill_beside_delay=draw(st.sampled_from([0.0, 0.005, 0.05])),
                  prefill_beside_gbps=draw(st.sampled_from([0.0, 10.0, 100.0])),
                  prefill_beside_requests=draw(st.sampled_from([0.0, 2.0, 20.0])),
                  prefill_beside_knee=draw(st.sampled_from([0.0, 8.0, 64.0])),
                  prefill_beside_power=draw(st.sampled_from([0.0, 0.4, 1.5])),
                  prefill_at_longest=draw(st.booleans()),
                  decode_stretch=optional([0.0, 1.07, 1.5]), decode_wave=optional([0.0, 0.5, 2.0, 8.0]),
                  decode_request=optional([0.0, 0.001, 0.01]),
                  own_decode_prefill=draw(st.sampled_from([0.0, 0.4, 0.7])),
                  prefill_at_bucket=draw(st.booleans()),
                  hbm_curve_gbps=draw(st.sampled_from([0.0, 2.0, 10.0, 50.0])),
                  hbm_curve_power=draw(st.sampled_from([1.0, 2.4, 4.0])),
                  prefill_beside_knee_s=draw(st.sampled_from([0.0, 0.01, 0.1])),
                  own_prefill_decode_knee=draw(st.sampled_from([0.0, 4.0, 64.0])),
                  own_decode_prefill_knee=draw(st.sampled_from([0.0, 4.0, 64.0])),
                  prefill_beside_eager_knee_s=draw(st.sampled_from([0.0, 0.003, 0.3])),
                  decode_combine=combine, kv_heads=kv_heads, combine_splits=combine_splits)


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


#: Each duration term of :class:`Timing` switched off (its effect on the kernel is counted).
TERMS_OFF = {
    "hbm_gbps": dict(hbm_gbps=0.0),
    "hbm_cap_gbps": dict(hbm_cap_gbps=0.0),
    "hbm_curve_gbps": dict(hbm_curve_gbps=0.0),
    "decode_kv_gbps": dict(decode_kv_gbps=0.0),
    "own_prefill_decode": dict(own_prefill_decode=0.0),
    "graph_tokens": dict(graph_tokens=0),
    "host": dict(decode_host=[], prefill_host=[]),
    "eager_hold": dict(eager_hold=[]),
    "collect": dict(collect=[]),
    "stretch": dict(stretch=[]),
    "block_host": dict(block_host=[]),
    "prefill_beside": dict(prefill_beside=0.0),
    "prefill_beside_delay": dict(prefill_beside_delay=0.0),
    "prefill_beside_gbps": dict(prefill_beside_gbps=0.0),
    "prefill_beside_requests": dict(prefill_beside_requests=0.0),
    "prefill_beside_knee": dict(prefill_beside_knee=0.0),
    "prefill_beside_knee_s": dict(prefill_beside_knee_s=0.0),
    "own_prefill_decode_knee": dict(own_prefill_decode_knee=0.0),
    "own_decode_prefill_knee": dict(own_decode_prefill_knee=0.0),
    "prefill_beside_eager_knee_s": dict(prefill_beside_eager_knee_s=0.0),
    "prefill_beside_power": dict(prefill_beside_power=0.0),
    "prefill_at_longest": dict(prefill_at_longest=False),
    "decode_stretch": dict(decode_stretch=[]),
    "decode_wave": dict(decode_wave=[]),
    "decode_request": dict(decode_request=[]),
    "decode_combine": dict(decode_combine=[], kv_heads=[], combine_splits=[]),
    "own_decode_prefill": dict(own_decode_prefill=0.0),
    "prefill_at_bucket": dict(prefill_at_bucket=False),
}


@pytest.mark.parametrize("policy", POLICIES)
def test_scheduler_matches_kernel_with_duration_models(policy):
    """The port's virtual clock applies every one of the kernel's duration terms: jobs
    launched one after another on the scheduling thread (eager prefills holding it longer,
    decode steps their page-table fill),
    ended jobs noticed when it is free, prefills stretched and collected, decode steps reading
    their KV, running jobs re-timed by HBM contention (and its bandwidth cap), by their own
    LLM's prefill (over its prompt's length) and, prefills on partitions, by their own LLM's decode step and the jobs beside them (their demand, their
    decode requests, over the prompt's length, by a power of their SM share), prefills timed at their longest prompt or
    their CUDA-graph bucket, decode
    steps stretched in place of their KV read, decode steps timed at their effective context and
    lasting more per request they hold and where their split-combine spills. Same
    first tokens, finishes and preemptions, bit for bit; and each term, switched off alone,
    changes the kernel's outcome in some cases (so the equality covers it; the prefill's table
    point, rarely at stake in these cases, on a hand-sized one below; under the temporal
    baseline, whose jobs never overlap, the ten terms between running jobs change nothing)."""
    seen = {name: 0 for name in TERMS_OFF}

    @settings(max_examples=320, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
              database=None)
    @given(timed_cases(policy))
    def check(drawn):
        case, timing = drawn
        kernel = run_timed_kernel(case, timing)
        sched = run_scheduler(case, timing)
        assert np.array_equal(np.asarray(sched.finish), kernel["finish"]), "finish times differ"
        assert np.array_equal(np.asarray(sched.first), kernel["first"]), "first-token times differ"
        assert sched.preemptions == kernel["preempts"].tolist(), "preemption counts differ"
        for name, off in TERMS_OFF.items():
            if not np.array_equal(run_timed_kernel(case, timing._replace(**off))["finish"], kernel["finish"]):
                seen[name] += 1

    check()
    # they act only between jobs running at once
    overlap = ("hbm_gbps", "hbm_cap_gbps", "hbm_curve_gbps", "own_prefill_decode", "prefill_beside", "prefill_beside_delay",
               "prefill_beside_gbps", "prefill_beside_requests", "prefill_beside_knee", "prefill_beside_power",
               "own_decode_prefill", "prefill_beside_knee_s", "own_prefill_decode_knee",
               "own_decode_prefill_knee", "prefill_beside_eager_knee_s")
    if policy == "temporal":  # one job at a time
        assert all(seen[name] == 0 for name in overlap), seen
        seen = {name: count for name, count in seen.items() if name not in overlap}
    # a prefill's table point matters only in the few drawn cases that batch prompts of several
    # lengths (and not at all at the longest where the bucket is on):
    # test_scheduler_times_prefills_at_the_kernel_s_table_point covers both on a hand-sized case
    seen = {name: count for name, count in seen.items() if name not in PREFILL_POINT_TERMS}
    assert min(seen.values()) >= 1, seen  # every other term changed some outcome


#: the terms of a prefill's table point (mean, longest prompt, CUDA-graph bucket)
PREFILL_POINT_TERMS = ("prefill_at_longest", "prefill_at_bucket")


@pytest.mark.parametrize("policy", POLICIES)
def test_scheduler_times_prefills_at_the_kernel_s_table_point(policy):
    """Prompts of 24, 40 and 80 tokens arriving together, the table linear in length and batch
    (1 ms per padded token): at their mean, at their longest prompt and at their CUDA-graph
    bucket (4 x 96 tokens) the prefills last apart, and the port makes the kernel's decisions at
    each, eager prefills too (a graph limit of 256 padded tokens: the batch runs eagerly; the
    other LLM's lone prompt of 16 tokens is a bucket's own shape)."""
    lgrid = [0.0, 1000.0]
    P = [[[0.0, 1e-3 * b * 1000.0] for b in range(5)]] * 2
    case = small_case(policy, arrival=[0.0, 0.0, 0.0, 0.2], llm=[0, 0, 0, 1], prompt=[24, 40, 80, 16],
                      output=[3, 3, 3, 3], P=P, lgrid=lgrid)
    finishes = []
    for at_longest, at_bucket, graph_tokens in ((False, False, 0), (True, False, 0), (False, True, 0),
                                                (False, True, 256)):
        timing = NO_TIMING._replace(prefill_at_longest=at_longest, prefill_at_bucket=at_bucket,
                                    graph_tokens=graph_tokens)
        kernel = run_timed_kernel(case, timing)
        sched = run_scheduler(case, timing)
        assert np.array_equal(np.asarray(sched.finish), kernel["finish"]), "finish times differ"
        assert np.array_equal(np.asarray(sched.first), kernel["first"]), "first-token times differ"
        finishes.append(tuple(kernel["finish"]))
    mean, longest, bucket, eager = finishes
    assert len({mean, longest, bucket}) == 3  # each point times the batched prefill apart
    assert eager == longest  # the batch run eagerly is padded to its longest prompt only


def test_scheduler_preempts_and_finishes_like_kernel():
    """A hand-sized case with preemption under every policy: equal, and preemption happened."""
    for policy in POLICIES:
        case = small_case(policy, pool=64, output=[30, 30, 30, 30])
        assert_same_decisions(case)
        assert sum(run_scheduler(case).preemptions) > 0
