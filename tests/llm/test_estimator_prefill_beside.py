"""The Eq. 3 estimator's form of the simulator's prefill stretch beside other jobs
(``llm.prefill_beside_stretch``, ``_delay_s``, ``_gbps``, ``_requests``, ``_knee_tokens``): a
member's prefill lasts ``(1 + s + (demand / gbps + requests / q) / (1 + tokens / knee)) x its
table seconds + delay`` beside the other members' decode steps at their batches."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig
from placement_opt.solvers.llm_estimator import (BESIDE_TERMS, PREFILL_BESIDE, _beside_seconds, _beside_terms, build_tables,
                                                 placement_estimates, prefill_beside_params, unit_throughput)

from .helpers import ROOT

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")

# two LLMs of one latency row each: prefill 0.05 s, decode step 0.01 s at every batch
P = np.full((2, 9), 0.05)
D = np.full((2, 9), 0.01)
OUT = np.array([100.0, 100.0])
WEIGHTS = np.array([2e9, 4e9])
KV = np.array([1e5, 1e5])
TOKENS = np.array([300.0, 300.0])  # prompt 200 + output 100
OFF = np.zeros(len(PREFILL_BESIDE))  # every term of the stretch off


def _params(values) -> np.ndarray:
    """A prefill-beside parameter vector: ``values`` (the first fields of :data:`PREFILL_BESIDE`),
    the rest 0 (off)."""
    values = np.asarray(values, dtype=np.float64)
    return np.append(values, np.zeros(len(PREFILL_BESIDE) - len(values)))


def _terms(i: int, batch: np.ndarray, params: np.ndarray, shares=(0.4, 0.6)) -> np.ndarray:
    out = np.zeros(BESIDE_TERMS)
    _beside_terms(i, np.array([0, 1]), np.array([0, 1]), D, OUT, WEIGHTS, KV, TOKENS, batch,
                  np.asarray(shares, dtype=np.float64), params, out)
    return out


def test_the_stretch_counts_the_other_members_demand_requests_and_its_prompt():
    """Member 0 (share 0.4, so its own decode step runs beside its prefill too) beside member 1
    at batch 3, itself at batch 2: demand (2e9 + 2 x 250 x 1e5) / 0.01 s + (4e9 + 3 x 250 x 1e5)
    / 0.01 s = 612.5 GB/s, 5 requests; at 100 GB/s, 5 requests per unit and a knee of 400 tokens
    (200-token prompts: half a unit per request of its batch) its prefill of 50 ms at batch 2
    lasts (1.1 + (6.125 + 1) / 2) x 50 ms + 2 ms. Member 1 (share 0.6: no own decode beside)
    counts member 0 only. Alone, on the whole GPU, or with every term off: exactly its table
    time."""
    params = _params([0.1, 0.002, 100.0, 5.0, 400.0, 0.0, 0.0, 0.0, 0.0])
    batch = np.array([2, 3])
    terms = _terms(0, batch, params)
    assert _beside_seconds(0.05, 2, terms) == pytest.approx((1.1 + (6.125 + 1.0) / 2) * 0.05 + 0.002)
    other = _terms(1, batch, params)
    assert other[1] == pytest.approx(2.05 / 100 * 100 + 2 / 5)  # member 0's 205 GB/s and 2 requests
    alone = np.zeros(BESIDE_TERMS)
    _beside_terms(0, np.array([0]), np.array([0]), D, OUT, WEIGHTS, KV, TOKENS, batch, np.array([0.4]), params, alone)
    for t in (alone, _terms(0, batch, params, shares=(1.0, 1.0)), _terms(0, batch, OFF)):
        assert _beside_seconds(0.05, 2, t) == 0.05


def test_the_own_decode_step_leaves_the_others_and_the_prefill_keeps_its_share():
    """With ``own_decode_prefill_share`` 0.5 (``params[5]``), member 0 (share 0.4: its own decode
    step beside its prefill) counts member 1 alone (its 4e9 + 3 x 250 x 1e5 bytes over 0.01 s =
    407.5 GB/s, 3 requests) and its whole stretch is over 0.5; a lone member at share 0.4 lasts
    its table time over 0.5; member 1 (share 0.6: no own decode step beside) is unchanged, and a
    member on the whole GPU keeps its table time."""
    params = _params([0.1, 0.002, 100.0, 5.0, 400.0, 0.5, 0.0, 0.0, 0.0])
    batch = np.array([2, 3])
    terms = _terms(0, batch, params)
    assert _beside_seconds(0.05, 2, terms) == pytest.approx(((1.1 + (4.075 + 0.6) / 2) * 0.05 + 0.002) / 0.5)
    assert _terms(1, batch, params).tolist() == _terms(1, batch, _params(np.append(params[:5], [0.0, 0.0, 0.0, 0.0]))).tolist()
    alone = np.zeros(BESIDE_TERMS)
    _beside_terms(0, np.array([0]), np.array([0]), D, OUT, WEIGHTS, KV, TOKENS, batch, np.array([0.4]), params, alone)
    assert _beside_seconds(0.05, 2, alone) == pytest.approx(0.1)
    assert _beside_seconds(0.05, 2, _terms(0, batch, params, shares=(1.0, 1.0))) == 0.05


def test_the_load_grows_with_the_prefills_sm_share_to_the_power():
    """With ``prefill_beside_share_power`` 0.4 (``params[6]``) the demand and request terms of
    member 0 (share 0.4) are 0.4 ** 0.4 times those without it, and member 1's (share 0.6) 0.6 **
    0.4 times: the simulator's ``prefill_beside_stretch`` at the member's share."""
    params = _params([0.1, 0.002, 100.0, 5.0, 400.0, 0.5, 0.0, 0.0, 0.0])
    batch = np.array([2, 3])
    powered = _params(np.append(params[:6], [0.4, 0.0, 0.0]))
    for i, share in ((0, 0.4), (1, 0.6)):
        plain, scaled = _terms(i, batch, params), _terms(i, batch, powered)
        assert scaled[1] == pytest.approx(plain[1] * share ** 0.4)
        assert [scaled[0], scaled[2], scaled[3]] == [plain[0], plain[2], plain[3]]


def test_the_own_share_s_knee_gives_a_longer_prefill_more_of_its_partition():
    """With ``own_decode_prefill_share`` 0.5 and its knee 400 tokens (``params[8]``), member 0's
    prefill at batch 2 (prompt 200: b x prompt / knee = 1) keeps 1 - 0.5 / 2 = 0.75 of its speed
    beside its own decode step, at batch 6 1 - 0.5 / 4 = 0.875: its stretch beside the others over
    that instead of 0.5; the lone member's table time likewise; without the knee the terms are the
    ones before."""
    params = _params([0.1, 0.002, 100.0, 5.0, 400.0, 0.5, 0.0, 0.0, 400.0])
    batch = np.array([2, 3])
    plain, kneed = _terms(0, batch, _params(np.append(params[:8], 0.0))), _terms(0, batch, params)
    for b, speed in ((2, 0.75), (6, 0.875)):
        assert _beside_seconds(0.05, b, kneed) == pytest.approx(_beside_seconds(0.05, b, plain) * 0.5 / speed)
    alone = np.zeros(BESIDE_TERMS)
    _beside_terms(0, np.array([0]), np.array([0]), D, OUT, WEIGHTS, KV, TOKENS, batch, np.array([0.4]), params, alone)
    assert _beside_seconds(0.05, 2, alone) == pytest.approx(0.05 / 0.75)


def test_the_time_knee_shrinks_the_load_of_a_longer_prefill():
    """With ``prefill_beside_knee_s`` 25 ms (``params[7]``) the load of a prefill of table time p
    is over ``1 + p / 25 ms`` too, beside the token knee: a 50 ms prefill's load is a third of
    what it is without the time knee, a 5 ms one's 1 / 1.2; the base, the token knee and the delay
    are unchanged, and with the knee at 0 the terms are the ones before."""
    params = _params([0.1, 0.002, 100.0, 5.0, 400.0, 0.0, 0.0, 0.025, 0.0])
    batch = np.array([2, 3])
    plain, kneed = _terms(0, batch, _params(np.append(params[:7], [0.0, 0.0]))), _terms(0, batch, params)
    assert kneed[4] == pytest.approx(40.0) and plain[4] == 0.0
    assert kneed[:4].tolist() == plain[:4].tolist()
    for p in (0.05, 0.005):
        load = _beside_seconds(p, 2, plain) - p * plain[0] - plain[3]
        assert _beside_seconds(p, 2, kneed) - p * kneed[0] - kneed[3] == pytest.approx(load / (1.0 + p / 0.025))


def test_an_eager_prefill_takes_its_own_time_knee():
    """With ``prefill_beside_eager_knee_s`` 0.2 s (``params[9]``) and the graph limit 1024 tokens
    (``params[10]``) beside the 25 ms time knee: member 0's prefill of two 200-token prompts
    (padded 2 x 256, a graph) keeps the 25 ms knee, one of eight (eager) takes 0.2 s; without
    the eager knee both take 25 ms."""
    timed = _params([0.1, 0.002, 100.0, 5.0, 0.0, 0.0, 0.0, 0.025, 0.0])
    both = timed.copy()
    both[9], both[10] = 0.2, 1024.0
    for b, eager in ((2, False), (8, True)):
        batch = np.array([b, 3])
        plain, kneed = _terms(0, batch, timed), _terms(0, batch, both)
        p = 0.05
        base = p * plain[0] + plain[3]
        load = (_beside_seconds(p, b, plain) - base) * (1.0 + p / 0.025)
        expected = load / (1.0 + p / 0.2) if eager else load / (1.0 + p / 0.025)
        assert _beside_seconds(p, b, kneed) - base == pytest.approx(expected)
        assert _beside_seconds(p, b, plain) - base == pytest.approx(load / (1.0 + p / 0.025))


def _estimate(P_: np.ndarray, beside: np.ndarray, serial: bool = False, shares=(0.5, 0.5)) -> float:
    tpt = np.zeros(2)
    batch = np.zeros(2, dtype=np.int64)
    return unit_throughput(np.array([0, 1]), np.array([0, 1]), P_, D, OUT, np.array([50.0, 50.0]), WEIGHTS, KV,
                           TOKENS, 80e9, 1e9, 8, serial, tpt, batch, 0.0, 0.0, np.zeros(2), beside,
                           np.asarray(shares, dtype=np.float64))


def test_a_fixed_stretch_is_the_same_unit_with_longer_prefills():
    """With only the fixed stretch (1: twice the table time, whatever the others do) the unit's
    estimate is, bit for bit, that of the same unit with its prefill table doubled; a stretch
    lowers the estimate of a loaded unit; temporal units (one job at a time) have none."""
    stretched = _estimate(P, _params([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    assert stretched == _estimate(2.0 * P, OFF)
    assert stretched < _estimate(P, OFF)
    assert _estimate(P, _params([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), serial=True) == _estimate(P, OFF, serial=True)
    # on the whole GPU (share 1) the simulator does not stretch a prefill beside others: neither here
    assert _estimate(P, _params([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), shares=(1.0, 1.0)) == _estimate(P, OFF)
    # a knee alone divides nothing: bit-identical to off
    assert _estimate(P, _params([0.0, 0.0, 0.0, 0.0, 400.0, 0.0, 0.0, 0.0, 0.0])) == _estimate(P, OFF)


def test_a_members_own_batch_search_prices_each_candidate_at_its_own_knee():
    """With a knee the stretch falls as the member's own batch grows; the Eq. 3 batch search
    prices each batch it tries at that batch's stretch, so the estimate with the request term on
    and a knee is at least the one without the knee (a shorter stretch at every batch) and at
    most the one without the term."""
    with_knee = _estimate(P, _params([0.0, 0.0, 0.0, 2.0, 200.0, 0.0, 0.0, 0.0, 0.0]))
    no_knee = _estimate(P, _params([0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    assert no_knee < with_knee < _estimate(P, OFF)


def test_the_mesh_greedy_estimates_its_meshes_as_the_tables_do():
    """``place_on_meshes`` (the search's inner loop) scales the stretch's bandwidth to each mesh
    as ``EstimatorTables.estimate`` does: on the measured 2-GPU set with the stretch on, the
    group's estimate of every mesh equals the tables' estimate of its LLMs there (at 3 x the
    rates, where the estimates are capacities and the stretch lowers them)."""
    from placement_opt.llm_units import llm_specs, mesh_memory
    from placement_opt.settings import rule_set
    from placement_opt.solvers.mesh_greedy import GAIN, place_on_meshes

    inst = load_instance(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"))
    llm = dataclasses.replace(inst.llm_settings, prefill_beside_gbps=3250.3, prefill_beside_requests=96.55,
                              prefill_beside_knee_tokens=1312.0)
    specs = llm_specs(inst)
    rules = rule_set("placeopt")
    memory = mesh_memory(inst, rules)
    tables = build_tables(specs, inst.cluster, llm.max_batch, memory, llm=llm)
    tables = dataclasses.replace(tables, rate=3.0 * tables.rate)  # capacities, not the rates they cap at
    off = dataclasses.replace(tables, host=dataclasses.replace(llm, prefill_beside_gbps=0.0,
                                                               prefill_beside_requests=0.0))
    assert tables.estimate([0, 1], 1)[0] < off.estimate([0, 1], 1)[0]  # the stretch acts on the TP-2 mesh
    for sizes in ([2.0], [1.0, 1.0]):
        sizes = np.array(sizes)
        mesh_t = np.array([list(tables.tps).index(int(x)) for x in sizes], dtype=np.int64)
        assign = np.full(len(specs), -1, dtype=np.int64)
        unit_tpt = np.zeros(len(sizes))
        est = place_on_meshes(mesh_t, sizes, np.arange(len(specs)), GAIN, tables.feasible, tables.share, tables.P,
                              tables.D, tables.out_len, tables.rate, tables.weights, tables.kv, tables.tokens,
                              tables.max_batch, memory.per_gpu, memory.reserve, memory.weight_cap, 1.0,
                              rules.max_llms_per_mesh, False, assign, unit_tpt, tables.hbm_gbps, tables.hbm_cap_gbps,
                              tables.slow, tables.beside(1.0))
        assert est >= 0
        for d in range(len(sizes)):
            members = np.flatnonzero(assign == d)
            if len(members):
                assert unit_tpt[d] == pytest.approx(tables.estimate(members, mesh_t[d])[0], rel=1e-12)


def test_the_parameters_come_from_the_settings_with_the_meshs_bandwidth():
    """``prefill_beside_params``: the settings' fields in order, the bandwidth times the
    mesh's GPUs (the members' demand is the whole mesh's); zeros without settings."""
    llm = LLMConfig(prefill_beside_gbps=3250.3, prefill_beside_requests=96.55, prefill_beside_knee_tokens=1312.0,
                    own_decode_prefill_share=0.57, prefill_beside_share_power=0.4, prefill_beside_knee_s=0.012,
                    own_decode_prefill_knee_tokens=512.0)
    assert prefill_beside_params(llm, 2.0).tolist() == [0.0, 0.0, 6500.6, 96.55, 1312.0, 0.57, 0.4, 0.012, 512.0,
                                                        0.0, float(llm.prefill_graph_tokens)]
    assert prefill_beside_params(None).tolist() == [0.0] * len(PREFILL_BESIDE)


def test_the_estimate_of_the_five_llm_gpu_at_3x_load_reads_the_slower_prefills():
    """The 3 x load on the five-LLM H100 with v3f's fitted stretch (3250 GB/s, 96.5 requests,
    knee 1312 tokens): the 7B and 8B, whose prefills beside four decoding LLMs the GPU runs 2.5-3
    x their table time, are estimated lower than without it, the small LLMs still at their
    rates; the whole GPU's estimate moves towards the 17.4-17.7 req/s measured."""
    inst = load_instance(os.path.join(FIDELITY, "measured", "poisson-x3.json"))
    placement = load_placement(os.path.join(FIDELITY, "poisson-x3-muxserve.placement.json"))
    fields = dict(prefill_beside_gbps=3250.3, prefill_beside_requests=96.55, prefill_beside_knee_tokens=1312.0)
    on = placement_estimates(dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields)),
                             placement)
    off = placement_estimates(inst, placement)
    assert on["llm-7b"] < off["llm-7b"] and on["llm-8b"] < off["llm-8b"]
    assert on["llm-0.4b"] == off["llm-0.4b"]
    assert 17.0 < sum(on.values()) < sum(off.values())


def test_estimator_vs_sim_takes_a_calibration_files_fields():
    """``estimator_vs_sim.py --calibration``: the instance takes the file's ``llm`` fields as the
    settings' types (v3f's: the fitted stretch and the flag ``prefill_at_longest``), the fit
    record left out."""
    from .helpers import load_benchmark

    script = load_benchmark("estimator_vs_sim")
    inst = load_instance(os.path.join(FIDELITY, "measured", "poisson-x3.json"))
    cal = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "calibration-v3f.json")
    llm = script.calibrated(inst, cal).llm_settings
    assert llm.prefill_at_longest is True and llm.prefill_beside_gbps == 3250.3
    assert llm.prefill_host_s == 0.000696 and not inst.llm_settings.prefill_at_longest
