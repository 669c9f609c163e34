"""The LLM simulator: accounting invariants, KV limits, preemption, policies, determinism."""

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.errors import InputError
from placement_opt.offline.llm_catalog import ablation_requests
from placement_opt.placement import Group, Placement
from placement_opt.simulate import simulate
from placement_opt.simulate.llm import simulate_llm
from placement_opt.solvers.base import make_solver

from .helpers import ABLATION, SMALL


def one_mesh(inst, shares=None):
    n = inst.cluster.n_gpus
    return Placement(groups=(Group(devices=tuple(range(n)), pp=1, tp=n, models=tuple(inst.model_names),
                                   sm_share=shares),))


def tight_instance(tmp_path, usable_gb, duration=20, drain=600):
    with open(SMALL) as f:
        data = json.load(f)
    base = os.path.dirname(SMALL)
    data["cost_tables"] = {k: os.path.join(base, v) for k, v in data["cost_tables"].items()}
    data["cluster"]["gpu"]["usable_memory_gb"] = usable_gb
    data["workload"]["duration_s"] = duration
    data["llm"]["drain_s"] = drain
    data["llm"]["runtime_reserve_gb"] = 0.0  # the pool is what these tests tighten
    path = tmp_path / "tight.json"
    path.write_text(json.dumps(data))
    return load_instance(str(path))


def test_every_request_is_accounted_for_and_kv_stays_in_the_pool():
    inst = load_instance(SMALL)
    m = simulate(inst, one_mesh(inst, (0.25, 0.25, 0.25, 0.25)))
    assert m["requests"] == len(inst.requests())
    assert m["finished"] + m["dropped"] + m["unfinished"] == m["requests"]
    assert sum(v["requests"] for v in m["per_model"].values()) == m["requests"]
    g = m["groups"][0]
    assert 0 < g["kv_peak_utilisation"] <= 1.0
    assert g["sm_peak"] <= 1.0 + 1e-9
    assert all(0 <= x <= 1.0 + 1e-9 for x in g["sm_utilisation_series"] + g["kv_utilisation_series"])
    assert m["ttft_p50_s"] <= m["latency_p50_s"]
    assert 0 < m["slo_attainment"] <= 1


def test_preemption_recomputes_when_blocks_run_out(tmp_path):
    # 24 GB per GPU: 4 GPUs hold the 77 GB of weights and 14 GB of KV cache for 15 req/s
    inst = tight_instance(tmp_path, 24.0)
    m = simulate(inst, one_mesh(inst, (0.25, 0.25, 0.25, 0.25)))
    assert m["preemptions"] > 0
    assert m["groups"][0]["kv_peak_utilisation"] <= 1.0
    assert m["finished"] == m["requests"]  # preempted requests are recomputed and finish in the drain time


def test_a_request_larger_than_the_pool_is_dropped(tmp_path):
    inst = tight_instance(tmp_path, 21.0, duration=5, drain=60)  # 2.4 GB of KV cache: 2900 13B tokens
    req = inst.requests()
    prompt, output = req.prompt_tokens.copy(), req.output_tokens.copy()
    big = int(np.flatnonzero(req.model == 0)[0])  # a 13B request of 2048 + 2048 tokens
    prompt[big], output[big] = 2048, 2048
    m = simulate_llm(inst, one_mesh(inst, (0.25, 0.25, 0.25, 0.25)),
                     replace(req, prompt_tokens=prompt, output_tokens=output))
    assert m["dropped"] == 1
    assert m["preemptions"] >= 1  # it ran until its context outgrew the pool, then could not come back
    assert m["finished"] + m["dropped"] + m["unfinished"] == m["requests"]


def test_overfull_mesh_is_an_input_error():
    inst = load_instance(SMALL)
    pl = Placement(groups=(Group(devices=(0,), pp=1, tp=1, models=tuple(inst.model_names)),))
    with pytest.raises(InputError) as e:
        simulate(inst, pl)
    assert e.value.field == "groups[0].models"


def test_adbs_beats_round_robin_beats_fcfs_on_the_ablation_pair():
    inst = load_instance(ABLATION)
    placement = make_solver("muxserve").solve(inst)
    req = ablation_requests(inst)
    tput = {p: simulate_llm(inst, placement, req, p)["throughput_rps"] for p in ("adbs", "round-robin", "fcfs")}
    assert tput["adbs"] > tput["round-robin"] > tput["fcfs"]


def test_temporal_runs_one_job_at_a_time_and_is_deterministic():
    inst = load_instance(SMALL)
    pl = one_mesh(inst, (0.25, 0.25, 0.25, 0.25))
    a = simulate_llm(inst, pl, None, "temporal")
    b = simulate_llm(inst, pl, None, "temporal")
    assert a == b
    assert a["groups"][0]["sm_share"] == [1.0] * 4 and a["groups"][0]["sm_peak"] == 1.0
    adbs = simulate_llm(inst, pl, None, "adbs")
    assert adbs["throughput_rps"] > a["throughput_rps"]


def test_trace_workload_brings_real_token_counts():
    inst = load_instance(os.path.join(os.path.dirname(SMALL), "splitwise-conv-2llm.json"))
    req = inst.requests()
    assert len(req) == 456 and req.prompt_tokens.mean() > 500  # Splitwise conversations: long prompts
    m = simulate(inst, make_solver("muxserve").solve(inst))
    assert m["finished"] == m["requests"]
    # every LLM's span runs from 0 to its last finish (between the duration and the simulated time)
    assert req.output_tokens.sum() / m["simulated_s"] <= m["tokens_per_s"] <= req.output_tokens.sum() / 120.0
    assert m["ttft_p50_s"] < m["latency_p50_s"] and m["tpot_p50_s"] > 0


def test_adbs_rebalancing_moves_quota_from_the_least_to_the_most_utilised_llm():
    """Decode steps can take every LLM past its quota; re-balancing must then leave the quotas
    alone rather than move quota from the most utilised LLM to the least (it used to)."""
    from placement_opt.simulate.meshsim import LLM_STATE, _rebalance

    def rebalanced(used):
        llms = np.zeros(2, dtype=LLM_STATE)
        llms["used"], llms["quota"] = used, [100, 100]
        _rebalance(llms, 0.5)
        return llms["quota"].tolist()

    assert rebalanced([20, 90]) == [60, 140]  # half of LLM 0's 80 unused KiB go to LLM 1
    assert rebalanced([120, 200]) == [100, 100]


@pytest.mark.parametrize("policy", ["adbs", "round-robin", "fcfs"])
def test_only_the_request_that_cannot_fit_the_pool_is_dropped(policy):
    """FCFS tries only the oldest LLM's prefill; when that request can never fit, the other
    LLMs' waiting requests (which fit) must not be dropped with it (they used to be)."""
    from placement_opt.simulate.meshsim import (LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                                simulate_mesh)
    from placement_opt.simulate.llm import _POLICY_CODE

    K, max_batch = 2, 4
    lgrid = np.array([1.0, 10000.0])
    P = np.full((K, max_batch + 1, 2), 0.01)
    D = np.full((K, max_batch + 1, 2), 0.01)
    arrival = np.array([0.0, 0.0, 0.5])
    llm = np.array([0, 1, 1], dtype=np.int64)
    prompt = np.array([2000, 10, 10], dtype=np.int64)  # the first needs 2000 KiB of a 1000 KiB pool
    output = np.array([5, 5, 5], dtype=np.int64)
    out = mesh_outputs(3, K, 10)
    simulate_mesh(MeshRequests(arrival, llm, prompt, output),
                  MeshLLMs(np.array([0.5, 0.5]), np.array([1, 1], dtype=np.int64), np.array([1.0, 1.0])),
                  LatencyTables(P, D, lgrid),
                  MeshSettings(policy=_POLICY_CODE[policy], pool=1000, block=16, max_batch=max_batch,
                               token_budget=4096, period=5.0, frac=0.5, horizon=100.0), out)
    assert out.finish[0] == -2.0
    assert out.finish[1] > 0 and out.finish[2] > 0
