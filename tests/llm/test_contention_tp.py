"""The contention stretch on tensor-parallel meshes (``llm.contention_tp_power``): the rate at
which colocated jobs slow each other falls as ``contention_hbm_gbps / tp**power``, in the mesh
kernel and in the Eq. 3 estimator alike; fitted on the GPU's seed-0 two-LLM TP-2 colocated run
(docs/fidelity-llm.md, "Colocated jobs on a TP-2 mesh slow each other more")."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.llm_units import llm_specs, mesh_memory
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig, rule_set
from placement_opt.simulate.llm import contention_gbps, mesh_settings, simulate_llm
from placement_opt.simulate.meshsim import FCFS
from placement_opt.solvers.llm_estimator import build_tables, mesh_contention_gbps, placement_estimates
from placement_opt.solvers.mesh_greedy import GAIN, place_on_meshes

from .helpers import ROOT, load_benchmark

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def _with(inst, **fields: float):
    return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields))


def test_the_rate_falls_with_the_tp_degree():
    """``contention_gbps``: ``contention_hbm_gbps / tp**contention_tp_power``; a TP-1 mesh keeps
    the rate, power 0 keeps it at every degree (exactly), a rate of 0 stays off; the kernel's
    settings and the estimator's whole-mesh rate (times the GPUs) follow it."""
    cfg = LLMConfig(contention_hbm_gbps=5400.0, contention_tp_power=0.9)
    assert [contention_gbps(cfg, tp) for tp in (1, 2, 4)] == pytest.approx([5400.0, 5400.0 / 2 ** 0.9,
                                                                           5400.0 / 4 ** 0.9])
    assert mesh_settings(cfg, FCFS, 1000, 10.0, 2).hbm_gbps == pytest.approx(5400.0 / 2 ** 0.9)
    assert mesh_settings(cfg, FCFS, 1000, 10.0).hbm_gbps == 5400.0
    assert contention_gbps(LLMConfig(contention_hbm_gbps=5400.0), 4) == 5400.0
    assert contention_gbps(LLMConfig(contention_tp_power=2.0), 4) == 0.0
    assert mesh_contention_gbps(5400.0, 0.9, 2.0) == pytest.approx(2 * 5400.0 / 2 ** 0.9)
    assert mesh_contention_gbps(5400.0, 0.0, 4.0) == 5400.0 * 4.0


def test_the_power_slows_only_the_tp_meshes_colocated_llms():
    """The 4-GPU set's muxserve placement (two LLMs on SM halves of a TP-2 mesh, two LLMs alone
    on one GPU each): the power changes what the TP-2 mesh's LLMs do, slower, and leaves the
    single-GPU LLMs exactly as they were; the 2-GPU set's muxserve placement (two LLMs on halves
    of one GPU) does not change at all."""
    inst = load_instance(os.path.join(FIDELITY, "gpu4", "measured", "poisson.json"))
    assert inst.llm_settings.contention_hbm_gbps > 0
    placement = load_placement(os.path.join(FIDELITY, "gpu4", "poisson-muxserve.placement.json"))
    tp_models = {m for g in placement.groups if g.tp > 1 for m in g.models}
    assert tp_models and len(tp_models) < len(inst.models)
    off = simulate_llm(_with(inst, contention_tp_power=0.0), placement)["per_model"]
    on = simulate_llm(_with(inst, contention_tp_power=1.0), placement)["per_model"]
    for name in on:
        if name in tp_models:
            assert on[name]["tpot_mean_s"] > off[name]["tpot_mean_s"]
        else:
            assert on[name] == off[name]
    tp1 = load_instance(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"))
    one_gpu = load_placement(os.path.join(FIDELITY, "tp2", "poisson-muxserve.placement.json"))
    assert all(g.tp == 1 for g in one_gpu.groups)
    assert (simulate_llm(_with(tp1, contention_tp_power=1.0), one_gpu)
            == simulate_llm(_with(tp1, contention_tp_power=0.0), one_gpu))


def test_the_estimator_follows_on_tp_meshes_only():
    """At 3 x the 2-GPU set's rates (capacities): with the power the colocated TP-2 unit of the
    7B and 8B is estimated lower, the one-GPU unit (muxserve) exactly as without it; power 0 is
    bit-identical to the field's default; the mesh greedy's estimate of each mesh equals the
    tables' (the rate scaled per mesh the same way)."""
    script = load_benchmark("estimator_vs_sim")
    inst = script.load_scaled(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"), 3.0)
    assert inst.llm_settings.contention_hbm_gbps > 0 and inst.llm_settings.contention_tp_power == 0
    colocated = load_placement(os.path.join(FIDELITY, "tp2", "poisson-colocated.placement.json"))
    one_gpu = load_placement(os.path.join(FIDELITY, "tp2", "poisson-muxserve.placement.json"))
    powered = _with(inst, contention_tp_power=0.9)
    before, after = placement_estimates(inst, colocated), placement_estimates(powered, colocated)
    assert all(after[m] < before[m] for m in before)
    assert placement_estimates(powered, one_gpu) == placement_estimates(inst, one_gpu)

    specs = llm_specs(inst)
    rules = rule_set("placeopt")
    memory = mesh_memory(inst, rules)
    plain = build_tables(specs, inst.cluster, inst.llm_settings.max_batch, memory, llm=inst.llm_settings)
    zero = build_tables(specs, inst.cluster, inst.llm_settings.max_batch, memory,
                        llm=dataclasses.replace(inst.llm_settings, contention_tp_power=0.0))
    tables = build_tables(specs, inst.cluster, inst.llm_settings.max_batch, memory, llm=powered.llm_settings)
    tp2 = list(tables.tps).index(2)
    assert zero.estimate([0, 1], tp2)[0] == plain.estimate([0, 1], tp2)[0]
    assert tables.estimate([0, 1], tp2)[0] < plain.estimate([0, 1], tp2)[0]
    sizes = np.array([2.0])
    mesh_t = np.array([tp2], dtype=np.int64)
    assign = np.full(len(specs), -1, dtype=np.int64)
    unit_tpt = np.zeros(1)
    est = place_on_meshes(mesh_t, sizes, np.arange(len(specs)), GAIN, tables.feasible, tables.share, tables.P,
                          tables.D, tables.out_len, tables.rate, tables.weights, tables.kv, tables.tokens,
                          tables.max_batch, memory.per_gpu, memory.reserve, memory.weight_cap, 1.0,
                          rules.max_llms_per_mesh, False, assign, unit_tpt, tables.hbm_gbps, tables.hbm_cap_gbps,
                          tables.slow, tables.beside(1.0), tables.hbm_tp_power)
    assert est >= 0 and (assign == 0).all()
    assert unit_tpt[0] == pytest.approx(tables.estimate(np.arange(len(specs)), tp2)[0], rel=1e-12)


def test_the_fit_takes_the_power_of_least_tpot_error(monkeypatch):
    """``fit_contention_tp_power`` tries the grid and keeps the power whose re-predicted mean TPOT
    is nearest the measured one (a stand-in simulator whose TPOT grows with the power)."""
    script = load_benchmark("llm_fidelity")
    measured = {"throughput_rps": 1.0, "ttft_mean_s": 0.1, "tpot_mean_s": 0.01361, "slo_attainment": 1.0,
                "per_model": {}}

    def predict(run, model):
        sim = dict(measured, tpot_mean_s=0.010 * (1.0 + 0.4 * model["contention_tp_power"]), per_model={})
        return sim, 1.0

    monkeypatch.setattr(script, "predict", predict)
    power, err = script.fit_contention_tp_power({"summary": {"measured": measured}}, {})
    assert power == pytest.approx(0.9) and err < 0.01


def test_the_calibrated_power_predicts_the_held_out_colocated_runs():
    """v3f's calibration holds the power fitted on the seed-0 colocated run (0.9: 2894 GB/s per
    GPU at TP 2 against 5400 on one GPU); on the held-out seeds 1 and 2 the two LLMs' mean TPOT is
    then within 3% of the GPU's and the throughput within 1%, where without it the TPOT misses by
    over 13% (the 7B and 8B on SM halves of two H100s slow each other more than on one)."""
    script = load_benchmark("llm_fidelity")
    model = script.generation_model(script.GENERATIONS["v3f"])
    assert model["contention_tp_power"] == pytest.approx(0.9)
    for folder, name in (("results-v3f-tp2s1", "tp2s1-poisson-colocated"),
                         ("results-v3f-tp2s2", "tp2s2-poisson-colocated")):
        run = next(r for r in script.load_runs(os.path.join(RESULTS, folder)) if r["name"] == name)
        assert not script.is_fit_run(run)
        measured = run["summary"]["measured"]
        on = script.errors(measured, script.predict(run, model)[0])
        off = script.errors(measured, script.predict(run, dict(model, contention_tp_power=0.0))[0])
        assert abs(on["tpot_err"]) < 0.03 and abs(on["throughput_err"]) < 0.01
        assert off["tpot_err"] > 0.13
