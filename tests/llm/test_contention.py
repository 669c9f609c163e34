"""The mesh simulator's host-thread and HBM-contention models, and the estimator seeing them.

Hand-timed meshes check the kernel's rules (docs/llm.md, "Host and contention models");
``tests/test_llm_sched.py`` proves the executor's scheduler port applies the same ones; the
fidelity check re-predicts the committed H100 run with the calibrated parameters.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.placement import load_placement
from placement_opt.simulate.llm import _POLICY_CODE, simulate_llm
from placement_opt.simulate.meshsim import (LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                            simulate_mesh)
from placement_opt.solvers import make_solver

from .helpers import ROOT, SMALL

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")
OFF = {"contention_hbm_gbps": 0.0, "contention_hbm_cap_gbps": 0.0, "decode_host_s": 0.0, "prefill_host_s": 0.0,
       "decode_host_full_s": 0.0, "prefill_host_full_s": 0.0, "decode_kv_gbps": 0.0}


def run_mesh(arrival: List[float], llm: List[int], output: List[int], prefill_s: float, decode_s: float,
             hbm_gbps: float = 0.0, decode_host_s: float = 0.0, prefill_host_s: float = 0.0,
             hbm_cap_gbps: float = 0.0, hbm_curve_gbps: float = 0.0, hbm_curve_power: float = 2.0
             ) -> Dict[str, np.ndarray]:
    """Two LLMs at half the SMs each, constant job times, 1 GB of weights each (no KV bytes),
    round-robin policy, the given HBM bandwidth, bandwidth cap, loaded-latency curve and host
    seconds per job (both LLMs)."""
    K, max_batch = 2, 4
    n = len(arrival)
    requests = MeshRequests(arrival=np.array(arrival), llm=np.array(llm, dtype=np.int64),
                            prompt=np.full(n, 4, dtype=np.int64), output=np.array(output, dtype=np.int64))
    llms = MeshLLMs(share=np.array([0.5, 0.5]), kv_kib=np.ones(K, dtype=np.int64), rate=np.ones(K),
                    weight_bytes=np.full(K, 1e9), kv_bytes=np.zeros(K), decode_host_s=np.full(K, decode_host_s),
                    prefill_host_s=np.full(K, prefill_host_s))
    tables = LatencyTables(prefill=np.full((K, max_batch + 1, 2), prefill_s),
                           decode=np.full((K, max_batch + 1, 2), decode_s), lgrid=np.array([1.0, 1000.0]))
    cfg = MeshSettings(policy=_POLICY_CODE["round-robin"], pool=1000, block=4, max_batch=max_batch,
                       token_budget=4096, period=5.0, frac=0.5, horizon=100.0, hbm_gbps=hbm_gbps,
                       hbm_cap_gbps=hbm_cap_gbps, hbm_curve_gbps=hbm_curve_gbps, hbm_curve_power=hbm_curve_power)
    out = mesh_outputs(n, K, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return {"first": out.first, "finish": out.finish}


def test_overlapping_jobs_stretch_each_other_by_the_others_demand():
    """LLM 1's prefill and LLM 0's decode step overlap from 0.1 s: each moves 1 GB in 0.1 s
    alone (10 GB/s), so against 10 GB/s of HBM each takes 1 + 10/10 = 2x: both end at 0.3 s;
    LLM 1's decode step then runs alone, unstretched."""
    plain = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1)
    assert plain["first"].tolist() == pytest.approx([0.1, 0.2]) and plain["finish"].tolist() == pytest.approx([0.2, 0.3])
    got = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_gbps=10.0)
    assert got["first"].tolist() == pytest.approx([0.1, 0.3])
    assert got["finish"].tolist() == pytest.approx([0.3, 0.4])
    # a job alone is never stretched, however small the bandwidth
    alone = run_mesh([0.0], [0], [3], 0.1, 0.1, hbm_gbps=1e-3)
    assert alone["finish"].tolist() == pytest.approx([0.3])


def test_jobs_demanding_more_than_the_bandwidth_cap_share_it():
    """The same overlap (10 GB/s each from 0.1 s): against 40 GB/s of contention bandwidth each
    job alone would stretch 1 + 10/40 = 1.25x (both end at 0.225 s); a 10 GB/s cap serves the
    20 GB/s they demand together at 2x (0.3 s), a 40 GB/s cap is never reached (1.25x), and the
    cap alone stretches by 2x too. A job alone under the cap is not stretched."""
    linear = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_gbps=40.0)
    assert linear["first"].tolist() == pytest.approx([0.1, 0.225])
    assert linear["finish"].tolist() == pytest.approx([0.225, 0.325])
    for hbm in (40.0, 0.0):
        capped = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_gbps=hbm, hbm_cap_gbps=10.0)
        assert capped["first"].tolist() == pytest.approx([0.1, 0.3])
        assert capped["finish"].tolist() == pytest.approx([0.3, 0.4])
    loose = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_gbps=40.0, hbm_cap_gbps=40.0)
    assert loose["finish"].tolist() == pytest.approx([0.225, 0.325])
    alone = run_mesh([0.0], [0], [3], 0.1, 0.1, hbm_cap_gbps=10.0)
    assert alone["finish"].tolist() == pytest.approx([0.3])


def test_loaded_latency_curve_serves_each_job_its_demand_over_the_loaded_latency():
    """The curve 1 + x / 10 (GB/s): two jobs of 10 GB/s offer 2 x 10 x 2 = 40, so the HBM serves
    A with A (1 + A / 10) = 40, A = 15.62 GB/s at latency 2.562, and each job stretches 2.562 / 2
    = 1.281 (served 7.81 GB/s each: the two sum to A). A job of 1 GB/s beside one of 9 GB/s
    stretches more than the heavy one, and a job alone not at all."""
    from placement_opt.simulate.meshsim import contention_stretch, hbm_latency, offered_load, served_latency

    loaded = served_latency(2 * offered_load(10.0, 10.0, 1.0), 10.0, 1.0)
    a = (np.sqrt(1 + 16) - 1) / 0.2
    assert loaded == pytest.approx(1 + a / 10) == pytest.approx(2.5616, abs=1e-4)
    factor = contention_stretch(20.0, 10.0, loaded, 0.0, 0.0, 10.0, 1.0)
    assert factor == pytest.approx(loaded / 2) and 2 * 10.0 / factor == pytest.approx(a)
    pair = served_latency(offered_load(1.0, 10.0, 2.4) + offered_load(9.0, 10.0, 2.4), 10.0, 2.4)
    small, heavy = (contention_stretch(10.0, d, pair, 0.0, 0.0, 10.0, 2.4) for d in (1.0, 9.0))
    assert small > heavy > 1.0 and small == pytest.approx(pair / hbm_latency(1.0, 10.0, 2.4))
    alone = served_latency(offered_load(9.0, 10.0, 2.4), 10.0, 2.4)
    assert contention_stretch(9.0, 9.0, alone, 0.0, 0.0, 10.0, 2.4) == 1.0
    assert served_latency(5.0, 0.0, 2.0) == 1.0  # the curve off


def test_decode_steps_stretch_by_the_loaded_latency_curve():
    """The overlap of the first test (LLM 1's prefill and LLM 0's decode step, 10 GB/s each, from
    0.1 s) under the curve 1 + x / 10 alone. The prefill keeps its time (the curve is the decode
    steps'): it ends at 0.2 s, when LLM 0's step, at 1.2808 x (the test above), has 0.1 - 0.1 / f
    left. LLM 1's decode step then runs beside it at the same stretch, so LLM 0 ends at 0.1 +
    0.1 f and LLM 1, alone for the rest, at 0.1 + 0.1 f + 0.1 / f. With a 5 GB/s cap the cap's
    stretch wins for both jobs: 20 GB/s over max(5, its own 10), 2 x."""
    f = (1 + (np.sqrt(17) - 1) / 2) / 2
    got = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_curve_gbps=10.0, hbm_curve_power=1.0)
    assert got["first"].tolist() == pytest.approx([0.1, 0.2])
    assert got["finish"].tolist() == pytest.approx([0.1 + 0.1 * f, 0.1 + 0.1 * f + 0.1 / f])
    capped = run_mesh([0.0, 0.0], [0, 1], [2, 2], 0.1, 0.1, hbm_cap_gbps=5.0, hbm_curve_gbps=10.0, hbm_curve_power=1.0)
    assert capped["finish"].tolist() == pytest.approx([0.3, 0.4])


def test_estimator_stretch_applies_the_bandwidth_cap():
    """The estimator's decode stretch of a member is the kernel's formula over the members'
    demands at their batches: two members moving 1 GB per 0.1 s step (10 GB/s each)."""
    from placement_opt.solvers.llm_estimator import _stretch

    D = np.full((2, 3), 0.1)
    args = (np.arange(2), np.arange(2), D, np.full(2, 2.0), np.full(2, 1e9), np.zeros(2), np.full(2, 4.0),
            np.ones(2, dtype=np.int64))
    assert _stretch(0, *args, 0.0, 0.0) == 1.0
    assert _stretch(0, *args, 40.0, 0.0) == pytest.approx(1.25)
    assert _stretch(0, *args, 40.0, 10.0) == pytest.approx(2.0)
    assert _stretch(0, *args, 0.0, 10.0) == pytest.approx(2.0)
    assert _stretch(0, *args, 40.0, 40.0) == pytest.approx(1.25)
    # the loaded-latency curve 1 + x / 10: 1.2808 (the kernel's, test above), beside a 40 GB/s rate too
    curve = (1 + (np.sqrt(17) - 1) / 2) / 2
    assert _stretch(0, *args, 0.0, 0.0, 10.0, 1.0) == pytest.approx(curve)
    assert _stretch(0, *args, 40.0, 0.0, 10.0, 1.0) == pytest.approx(curve)


def test_eq3_slows_colocated_members_by_the_curve():
    """Eq. 3 of two members with 0.1 s prefills and decode steps of about 1 GB (10 GB/s), their rates
    out of reach: the curve 1 + x / 10 stretches both decode steps 1.2808 x, so each member's
    throughput falls; the curve's arguments off leave it as it was."""
    from placement_opt.solvers.llm_estimator import PREFILL_BESIDE, unit_throughput

    def eq3(*curve):
        tpt, batch = np.zeros(2), np.zeros(2, dtype=np.int64)
        table = np.full((2, 3), 0.1)
        total = unit_throughput(np.arange(2), np.arange(2), table, table, np.full(2, 2.0), np.full(2, 1e3),
                                np.full(2, 1e9), np.full(2, 1e5), np.full(2, 4.0), 1e12, 0.0, 2, False, tpt, batch,
                                0.0, 0.0, np.zeros(2), np.zeros(len(PREFILL_BESIDE)), np.full(2, 0.5), *curve)
        return total, tpt

    plain, curved, off = eq3(), eq3(10.0, 1.0), eq3(0.0, 1.0)
    assert curved[0] < plain[0] and np.all(curved[1] < plain[1])
    assert off[0] == plain[0]


def test_jobs_launch_one_after_another_on_the_scheduling_thread():
    """Decode steps start after their 10 ms launch; a prefill runs during its 50 ms launch."""
    got = run_mesh([0.0], [0], [3], 0.1, 0.1, decode_host_s=0.01, prefill_host_s=0.05)
    assert got["first"].tolist() == pytest.approx([0.1])
    assert got["finish"].tolist() == pytest.approx([0.1 + 2 * (0.01 + 0.1)])


def test_a_prefill_launch_holds_back_decodes_and_completions():
    """LLM 0's prefill (0.1 s on the GPU) takes its 0.2 s launch; LLM 1's request, arrived at
    0.15 s, is seen at 0.2 s, and its prefill launch (0.2-0.4 s) delays LLM 0's next decode
    step to 0.4 s. Without the host model everything runs back to back."""
    plain = run_mesh([0.0, 0.15], [0, 1], [3, 2], 0.1, 0.05)
    assert plain["first"].tolist() == pytest.approx([0.1, 0.25])
    assert plain["finish"].tolist() == pytest.approx([0.2, 0.3])
    got = run_mesh([0.0, 0.15], [0, 1], [3, 2], 0.1, 0.05, prefill_host_s=0.2)
    assert got["first"].tolist() == pytest.approx([0.2, 0.4])
    assert got["finish"].tolist() == pytest.approx([0.5, 0.45])


def _with(inst, **fields: float):
    return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields))


@pytest.mark.parametrize("run, policy, tpot", [("results-v3c/poisson-muxserve/fcfs", "fcfs", False),
                                               ("results-v3c/poisson-muxserve/adbs", "adbs", True)])
def test_calibrated_models_predict_the_measured_h100_runs(run: str, policy: str, tpot: bool):
    """Two committed H100 runs of the current engine (v3w: every CUDA-graph bucket captured at
    start-up) that its host times were not fitted on (five LLMs on 24-SM partitions, Poisson;
    the fit used the round-robin trial; fcfs was the workers' first trial), re-predicted
    with the measured tables: the calibrated models (in the measured instance) bring total
    throughput within 2% (off: over 5% high) and, on the warm adbs trial, every LLM's
    throughput within 10% and the mean TPOT within 15% (off: 2.3x)."""
    inst = load_instance(os.path.join(FIDELITY, "measured", "poisson.json"))
    assert inst.llm_settings.contention_hbm_gbps > 0 and inst.llm_settings.prefill_host_s > 0
    placement = load_placement(os.path.join(FIDELITY, "poisson-muxserve.placement.json"))
    with open(os.path.join(RESULTS, run, "summary.json")) as f:
        measured = json.load(f)["measured"]
    after = simulate_llm(inst, placement, policy=policy)
    before = simulate_llm(_with(inst, **OFF), placement, policy=policy)

    def err(sim: dict, key: str) -> float:
        return abs(measured[key] - sim[key]) / sim[key]

    assert err(after, "throughput_rps") < 0.02 < 0.05 < err(before, "throughput_rps")
    if tpot:
        assert err(after, "tpot_mean_s") < 0.15 < 1.0 < err(before, "tpot_mean_s")
        worst = max(abs(m["throughput_rps"] - after["per_model"][n]["throughput_rps"]) / m["throughput_rps"]
                    for n, m in measured["per_model"].items())
        assert worst < 0.10


def test_estimator_sees_contention_and_places_accordingly():
    """Under HBM contention the Eq. 3 estimate of a colocated unit falls, MuxServe stops
    putting all four LLMs on one mesh, and its placement scores higher in the contention-aware
    simulator than the contention-blind one."""
    inst = load_instance(SMALL)
    contended = _with(inst, contention_hbm_gbps=2000.0)
    blind = make_solver("muxserve").solve(inst)
    aware = make_solver("muxserve").solve(contended)
    assert any(len(g.models) == 4 for g in blind.groups)
    assert all(len(g.models) < 4 for g in aware.groups)
    assert simulate_llm(contended, aware)["throughput_rps"] > simulate_llm(contended, blind)["throughput_rps"] * 1.05


def test_estimator_unit_stretch_and_host_costs():
    """One LLM alone is unaffected by contention; two colocated ones are estimated lower with
    it; host costs lengthen every decode step, floor every prefill and so raise the share an
    LLM needs."""
    from placement_opt.llm_units import llm_specs, mesh_memory
    from placement_opt.settings import rule_set
    from placement_opt.solvers.llm_estimator import build_tables

    inst = load_instance(SMALL)
    specs = llm_specs(inst)
    memory = mesh_memory(inst, rule_set("placeopt"))
    plain = build_tables(specs, inst.cluster, 64, memory, llm=inst.llm_settings)
    cfg = dataclasses.replace(inst.llm_settings, contention_hbm_gbps=500.0, decode_host_s=0.004, prefill_host_s=0.5)
    timed = build_tables(specs, inst.cluster, 64, memory, llm=cfg)
    assert timed.share[1, 0] > plain.share[1, 0]  # the 7B LLM needs more SMs to meet its rate
    row = plain.row(2, 0)  # same share (30 %) in both
    assert timed.share[2, 0] == plain.share[2, 0]
    assert np.allclose(timed.D[row], plain.D[row] + 0.004)
    assert np.allclose(timed.P[row], np.maximum(plain.P[row], 0.5)) and (timed.P[row] == 0.5).any()
    stretched = dataclasses.replace(plain, hbm_gbps=500.0)
    assert stretched.estimate([1], 0)[0] == plain.estimate([1], 0)[0]
    assert stretched.estimate([1, 2], 0)[0] < plain.estimate([1, 2], 0)[0]


def test_plain_stream_host_time_predicts_the_temporal_run():
    """The temporal placement (plain streams, one job at a time) of ``results-v3b``: with the
    decode host time measured on its back-to-back steps (``calibration-v3.json``, its engine
    generation's, 0.46 ms) the simulator predicts the total throughput within 2%, every LLM's within 5% and the mean
    TPOT within 5%; with the old value (the partition fit scaled by the engine's host ratio,
    0.79 ms) the backlog grows and llm-8b's last request is served 10 s later (over 20%)."""
    with open(os.path.join(RESULTS, "calibration-v3.json")) as f:
        cal = json.load(f)
    inst = _with(load_instance(os.path.join(FIDELITY, "measured", "poisson.json")),
                 **{k: float(cal.get(k, 0.0)) for k in OFF})
    placement = load_placement(os.path.join(FIDELITY, "poisson-temporal.placement.json"))
    with open(os.path.join(RESULTS, "results-v3b", "poisson-temporal", "summary.json")) as f:
        measured = json.load(f)["measured"]

    def worst_llm(sim: dict) -> float:
        return max(abs(m["throughput_rps"] - sim["per_model"][n]["throughput_rps"]) / sim["per_model"][n]["throughput_rps"]
                   for n, m in measured["per_model"].items())

    after = simulate_llm(inst, placement)
    assert cal["decode_host_full_s"] < 0.0006
    assert abs(measured["throughput_rps"] / after["throughput_rps"] - 1) < 0.02
    assert abs(measured["tpot_mean_s"] / after["tpot_mean_s"] - 1) < 0.05
    assert worst_llm(after) < 0.05
    scaled = simulate_llm(_with(inst, decode_host_full_s=0.000788, prefill_host_full_s=0.012471), placement)
    assert worst_llm(scaled) > 0.20


def _one_prefill_finish(prompt: int, eager_host_s: float, graph_tokens: int) -> float:
    """Finish of a lone one-token request of ``prompt`` tokens (prefill 0.1 s) on a one-LLM mesh."""
    requests = MeshRequests(arrival=np.zeros(1), llm=np.zeros(1, dtype=np.int64),
                            prompt=np.array([prompt], dtype=np.int64), output=np.ones(1, dtype=np.int64))
    llms = MeshLLMs(share=np.ones(1), kv_kib=np.ones(1, dtype=np.int64), rate=np.ones(1),
                    decode_host_s=np.zeros(1), prefill_host_s=np.zeros(1), prefill_eager_host_s=np.full(1, eager_host_s))
    tables = LatencyTables(prefill=np.full((1, 5, 2), 0.1), decode=np.full((1, 5, 2), 0.01), lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=_POLICY_CODE["fcfs"], pool=10000, block=16, max_batch=4, token_budget=4096, period=5.0,
                       frac=0.5, horizon=100.0, graph_tokens=graph_tokens)
    out = mesh_outputs(1, 1, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return float(out.finish[0])


def test_an_eager_prefill_costs_its_host_seconds_more():
    """A prompt over the graph limit (2000 tokens pad to 2048 > 1024) ends 50 ms later with a
    50 ms eager host time; one within it (1000 pads to 1024) does not; no limit: no eager cost."""
    assert _one_prefill_finish(2000, 0.05, 1024) == pytest.approx(0.15)
    assert _one_prefill_finish(1000, 0.05, 1024) == pytest.approx(0.1)
    assert _one_prefill_finish(2000, 0.05, 0) == pytest.approx(0.1)


def test_calibrated_eager_prefill_cost_predicts_the_held_out_code_trace():
    """``results-v3c/code-temporal`` (held out: the eager costs are fitted on the conv runs):
    with the calibrated eager-prefill host time the mean TTFT and TPOT are within 25% (without
    it, TTFT 2.8x the prediction); the default settings leave it off."""
    with open(os.path.join(RESULTS, "calibration.json")) as f:
        cal = json.load(f)
    fields = {k: float(cal.get(k, 0.0)) for k in list(OFF) + ["prefill_eager_host_s", "prefill_eager_host_full_s"]}
    inst = _with(load_instance(os.path.join(FIDELITY, "measured", "code.json")), **fields)
    placement = load_placement(os.path.join(FIDELITY, "code-temporal.placement.json"))
    with open(os.path.join(RESULTS, "results-v3c", "code-temporal", "summary.json")) as f:
        measured = json.load(f)["measured"]
    after = simulate_llm(inst, placement)
    assert abs(measured["ttft_mean_s"] / after["ttft_mean_s"] - 1) < 0.25
    assert abs(measured["tpot_mean_s"] / after["tpot_mean_s"] - 1) < 0.25
    before = simulate_llm(_with(inst, prefill_eager_host_s=0.0, prefill_eager_host_full_s=0.0), placement)
    assert measured["ttft_mean_s"] / before["ttft_mean_s"] > 2.0
    assert load_instance(os.path.join(ROOT, "instances", "fidelity-llm", "code.json")).llm_settings.prefill_eager_host_s == 0
