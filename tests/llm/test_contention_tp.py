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
from placement_opt.solvers.llm_estimator import (build_tables, mesh_contention_gbps, placement_estimates,
                                                 unit_throughput)
from placement_opt.solvers.mesh_greedy import FREE_MEMORY, GAIN, place_on_meshes
from placement_opt.solvers.muxserve import _place_group

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


def _powered_tables():
    """The 2-GPU set at 3 x its rates (capacities) with power 0.9, its tables with and without it."""
    script = load_benchmark("estimator_vs_sim")
    inst = script.load_scaled(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"), 3.0)
    assert inst.llm_settings.contention_hbm_gbps > 0 and inst.llm_settings.contention_tp_power == 0
    powered = _with(inst, contention_tp_power=0.9)
    specs = llm_specs(inst)
    rules = rule_set("placeopt")
    memory = mesh_memory(inst, rules)
    plain = build_tables(specs, inst.cluster, inst.llm_settings.max_batch, memory, llm=inst.llm_settings)
    tables = build_tables(specs, inst.cluster, inst.llm_settings.max_batch, memory, llm=powered.llm_settings)
    return inst, powered, specs, rules, memory, plain, tables


def test_the_estimator_follows_on_tp_meshes_only():
    """With the power the colocated TP-2 unit of the 7B and 8B is estimated lower, the one-GPU
    unit (muxserve) exactly as without it; power 0 gives the whole-mesh rate of before (the
    per-GPU rate times the GPUs, exactly), so the estimates are bit-identical."""
    inst, powered, specs, rules, memory, plain, tables = _powered_tables()
    colocated = load_placement(os.path.join(FIDELITY, "tp2", "poisson-colocated.placement.json"))
    one_gpu = load_placement(os.path.join(FIDELITY, "tp2", "poisson-muxserve.placement.json"))
    before, after = placement_estimates(inst, colocated), placement_estimates(powered, colocated)
    assert all(after[m] < before[m] for m in before)
    assert placement_estimates(powered, one_gpu) == placement_estimates(inst, one_gpu)
    for gbps in (5400.0, 2800.3, 1e-3):
        for size in (1.0, 2.0, 4.0, 8.0):
            assert mesh_contention_gbps(gbps, 0.0, size) == gbps * size
    tp2 = list(tables.tps).index(2)
    members = np.arange(len(specs), dtype=np.int64)
    tpt, batch = np.zeros(len(specs)), np.zeros(len(specs), dtype=np.int64)
    old_form = unit_throughput(members * len(plain.tps) + tp2, members, plain.P, plain.D, plain.out_len, plain.rate,
                               plain.weights, plain.kv, plain.tokens, plain.memory.per_gpu * 2.0,
                               plain.memory.reserve * 2.0, plain.max_batch, plain.serial_decode, tpt, batch,
                               plain.hbm_gbps * 2.0, plain.hbm_cap_gbps * 2.0, plain.slow, plain.beside(2.0),
                               plain.share.reshape(-1))
    assert plain.estimate(members, tp2)[0] == old_form
    assert tables.estimate(members, tp2)[0] < old_form


@pytest.mark.parametrize("rule", [GAIN, FREE_MEMORY])
def test_the_mesh_greedy_and_the_search_scale_the_rate_per_mesh(rule):
    """The mesh greedy (either rule) and the MuxServe search's group placement put both LLMs on
    one TP-2 mesh with the estimate the tables give them there (the rate scaled by the power the
    same way); without passing the power the greedy's estimate would be higher."""
    inst, powered, specs, rules, memory, plain, tables = _powered_tables()
    tp2 = list(tables.tps).index(2)
    members = np.arange(len(specs), dtype=np.int64)
    expected = tables.estimate(members, tp2)[0]

    def greedy(*power):
        assign = np.full(len(specs), -1, dtype=np.int64)
        unit_tpt = np.zeros(1)
        est = place_on_meshes(np.array([tp2], dtype=np.int64), np.array([2.0]), members, rule, tables.feasible,
                              tables.share, tables.P, tables.D, tables.out_len, tables.rate, tables.weights, tables.kv,
                              tables.tokens, tables.max_batch, memory.per_gpu, memory.reserve, memory.weight_cap, 1.0,
                              rules.max_llms_per_mesh, False, assign, unit_tpt, tables.hbm_gbps, tables.hbm_cap_gbps,
                              tables.slow, tables.beside(1.0), *power)
        assert est >= 0 and (assign == 0).all()
        return unit_tpt[0]

    assert greedy(tables.hbm_tp_power) == pytest.approx(expected, rel=1e-12)
    assert greedy() > expected * (1 + 1e-6)
    found = _place_group(((2,),), 0, specs, tables, {int(t): i for i, t in enumerate(tables.tps)}, [members], rule,
                         memory, rules, True)
    assert found is not None and found.unit_tpt[0] == pytest.approx(expected, rel=1e-12)


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
    over 12% (the 7B and 8B on SM halves of two H100s slow each other more than on one)."""
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
        assert off["tpot_err"] > 0.12
