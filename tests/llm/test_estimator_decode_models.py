"""The Eq. 3 estimator's two decode models, the simulator's ``llm.decode_kv_gbps`` (KV-read term)
and ``llm.own_prefill_decode_share`` (decode beside its own prefill on one SM partition), in the
estimator's mean-value form; and the vectorised eager-prefill test."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.llm_units import llm_config, llm_specs, mesh_memory
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig, rule_set
from placement_opt.simulate.meshsim import prefill_runs_eagerly
from placement_opt.solvers.llm_estimator import (_cycle, build_tables, eager_batches, latency_vectors,
                                                 own_prefill_slowdown, placement_estimates)

from .helpers import ROOT, SMALL, load_benchmark

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
TP2 = os.path.join(FIDELITY, "tp2")


def _with(inst, **fields: float):
    return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields))


def test_eager_batches_equal_the_per_batch_test():
    """One compiled call gives, for every batch, what the simulator's and engine's test says."""
    batches = np.arange(1, 65, dtype=np.int64)
    for longest in (1, 15, 16, 17, 100, 161, 700, 2049):
        for graph in (0, 16, 1024, 4096, 30000):
            want = [prefill_runs_eagerly(int(b), longest, graph) for b in batches]
            assert eager_batches(batches, longest, graph).tolist() == [1.0 if w else 0.0 for w in want]


def test_kv_term_adds_the_kv_bytes_of_the_step_at_the_mean_context():
    """A decode step of b requests lasts b x (prompt + output / 2) x KV bytes per token per GPU
    / (rate / tp**power) longer; prefills are unchanged; rate 0 leaves the vectors as they were."""
    inst = load_instance(os.path.join(TP2, "measured", "poisson.json"))
    spec = llm_specs(inst)[0]
    cfg = inst.llm_settings
    assert cfg.decode_kv_gbps > 0 and cfg.decode_kv_tp_power > 0
    off = dataclasses.replace(cfg, decode_kv_gbps=0.0)
    for tp in (1, 2):
        p0, d0 = latency_vectors(spec, tp, 1.0, 32, off)
        p1, d1 = latency_vectors(spec, tp, 1.0, 32, cfg)
        b = np.maximum(np.arange(33), 1)
        context = spec.prompt_tokens + spec.output_tokens / 2
        rate = cfg.decode_kv_gbps / tp ** cfg.decode_kv_tp_power
        extra = b * context * spec.kv_bytes_per_token / tp / (rate * 1e9)
        assert np.array_equal(p0, p1)
        assert np.allclose(d1 - d0, extra, rtol=1e-12, atol=0)
        assert extra[1] > 1e-5  # llm-7b, full multi-head attention: over ten microseconds per request on each GPU


def test_cycle_solves_the_shared_partition_fixed_point():
    """The round is self-consistent: round = prefills + out x (others' decode + own decode x
    (1 + f x slow)), f = own prefill / round; slow 0 gives Eq. 3's plain denominator exactly."""
    prefills, own_p, own_d, others_d, out, slow = 0.3, 0.1, 0.02, 0.0, 40.0, 3.0
    rnd = _cycle(prefills, others_d + own_d, own_p, own_d, out, slow)
    f = own_p / rnd
    assert rnd == pytest.approx(prefills + out * (others_d + own_d * (1 + f * slow)), rel=1e-12)
    assert _cycle(prefills, own_d, own_p, own_d, out, 0.0) == prefills + own_d * out


def test_slowdown_only_where_own_prefill_and_decode_can_overlap():
    """1/share - 1 on a partition whose two jobs fit the mesh; none at share > 0.5 (the
    simulator never runs both), under temporal scheduling, or with the model off."""
    cfg = LLMConfig(own_prefill_decode_share=0.25)
    assert own_prefill_slowdown(cfg, 0.2, False) == pytest.approx(3.0)
    assert own_prefill_slowdown(cfg, 0.5, False) == pytest.approx(3.0)
    assert own_prefill_slowdown(cfg, 0.6, False) == 0.0
    assert own_prefill_slowdown(cfg, 0.2, True) == 0.0
    assert own_prefill_slowdown(LLMConfig(), 0.2, False) == 0.0
    assert own_prefill_slowdown(None, 0.2, False) == 0.0


def test_slowdown_grows_with_the_prompt_past_the_knee():
    """``own_prefill_decode_knee_tokens`` 200: at the LLM's mean prompt of 200 tokens the step
    keeps 0.25 / 2 of its speed (slowdown 7); a prompt of 0 or the knee off keeps 1/0.25 - 1;
    where the share is off the knee does nothing."""
    cfg = LLMConfig(own_prefill_decode_share=0.25, own_prefill_decode_knee_tokens=200.0)
    assert own_prefill_slowdown(cfg, 0.2, False, 200.0) == pytest.approx(7.0)
    assert own_prefill_slowdown(cfg, 0.2, False, 0.0) == pytest.approx(3.0)
    assert own_prefill_slowdown(LLMConfig(own_prefill_decode_share=0.25), 0.2, False, 200.0) == pytest.approx(3.0)
    assert own_prefill_slowdown(LLMConfig(own_prefill_decode_knee_tokens=200.0), 0.2, False, 200.0) == 0.0


def test_both_models_off_leave_every_estimate_identical():
    """Explicit zeros are the defaults: tables and placement estimates bit-identical."""
    inst = load_instance(SMALL)
    specs = llm_specs(inst)
    memory = mesh_memory(inst, rule_set("placeopt"))
    cfg = dataclasses.replace(inst.llm_settings, contention_hbm_gbps=500.0, decode_host_s=0.004)
    zeros = dataclasses.replace(cfg, decode_kv_gbps=0.0, own_prefill_decode_share=0.0)
    a = build_tables(specs, inst.cluster, 64, memory, llm=cfg)
    b = build_tables(specs, inst.cluster, 64, memory, llm=zeros)
    assert np.array_equal(a.P, b.P) and np.array_equal(a.D, b.D) and np.array_equal(a.share, b.share)
    assert not a.slow.any()
    assert a.estimate([0, 1, 2], 0)[0] == b.estimate([0, 1, 2], 0)[0]


def test_shared_partition_lowers_a_colocated_partition_estimate():
    """Five LLMs at 0.2 of one GPU, rates x3: with the calibrated share 0.25 every saturated
    LLM is estimated lower; the placement's TP-2 spatial twin (share 1) is unchanged."""
    inst = _scaled(os.path.join(FIDELITY, "measured", "poisson-x3.json"), 3.0)
    placement = load_placement(os.path.join(FIDELITY, "poisson-x3-muxserve.placement.json"))
    off = placement_estimates(_with(inst, own_prefill_decode_share=0.0), placement)
    on = placement_estimates(_with(inst, own_prefill_decode_share=0.25), placement)
    rates = {s.name: s.rate for s in llm_specs(inst)}
    saturated = [m for m in off if off[m] < rates[m] * (1 - 1e-9)]
    assert saturated and all(on[m] < off[m] for m in saturated)
    spatial = load_placement(os.path.join(TP2, "poisson-spatial.placement.json"))
    tp2 = _scaled(os.path.join(TP2, "measured", "poisson.json"), 3.0)
    assert (placement_estimates(_with(tp2, own_prefill_decode_share=0.25), spatial)
            == placement_estimates(_with(tp2, own_prefill_decode_share=0.0), spatial))



def test_placement_estimates_read_policy_and_shares_as_the_simulator():
    """Under the temporal policy every LLM has the whole mesh (``simulate.llm.sm_shares``), whether
    the policy comes from the placement's ``scheduling`` or the instance's ``llm.policy``: a
    temporal placement whose groups name SM halves is estimated as with whole GPUs, and the
    same groups under adbs at their halves (lower: a saturated load, rates x3)."""
    inst = _scaled(os.path.join(TP2, "measured", "poisson.json"), 3.0)
    whole = load_placement(os.path.join(TP2, "poisson-temporal.placement.json"))
    assert whole.scheduling == "temporal" and all(sh == 1.0 for g in whole.groups for sh in g.sm_share)
    halves = dataclasses.replace(whole, groups=[dataclasses.replace(g, sm_share=(0.5,) * len(g.models))
                                                for g in whole.groups])
    assert placement_estimates(inst, halves) == placement_estimates(inst, whole)
    by_instance = _with(inst, policy="temporal")
    unscheduled = dataclasses.replace(halves, scheduling=None)
    assert placement_estimates(by_instance, unscheduled) == placement_estimates(inst, whole)
    adbs = placement_estimates(_with(inst, policy="adbs"), unscheduled)
    assert adbs != placement_estimates(inst, whole)


def _scaled(path: str, scale: float):
    return load_benchmark("estimator_vs_sim").load_scaled(path, scale)


def test_estimates_move_toward_the_simulator_on_the_tp2_placements():
    """``tp2/measured/poisson.json`` (calibrated KV rate) at 3 x its rates, every placement of
    ``tp2/``: with the KV term the estimator's per-LLM throughput is nearer the simulator's
    (mean |error| 48% -> 34%), for every LLM, never past it (the estimate stays optimistic)."""
    script = load_benchmark("estimator_vs_sim")
    inst = script.load_scaled(os.path.join(TP2, "measured", "poisson.json"), 3.0)
    before, after = [], []
    for name in ("colocated", "muxserve", "spatial", "temporal"):
        for sim, blind, seen in script.compare(inst, os.path.join(TP2, f"poisson-{name}.placement.json")).values():
            assert sim <= seen <= blind
            before.append(blind / sim - 1)
            after.append(seen / sim - 1)
    assert np.mean(after) < np.mean(before) - 0.1
    assert llm_config(inst).decode_kv_gbps > 0
