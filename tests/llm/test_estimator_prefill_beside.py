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
from placement_opt.solvers.llm_estimator import (PREFILL_BESIDE, _prefill_beside, placement_estimates,
                                                 prefill_beside_params, unit_throughput)

from .helpers import ROOT

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")

# two LLMs of one latency row each: prefill 0.05 s, decode step 0.01 s at every batch
P = np.full((2, 9), 0.05)
D = np.full((2, 9), 0.01)
OUT = np.array([100.0, 100.0])
WEIGHTS = np.array([2e9, 4e9])
KV = np.array([1e5, 1e5])
TOKENS = np.array([300.0, 300.0])  # prompt 200 + output 100


def test_the_stretch_counts_the_other_members_demand_requests_and_its_prompt():
    """Member 0 beside member 1 at batch 3: demand (4e9 + 3 x 250 x 1e5) / 0.01 s = 407.5 GB/s,
    3 requests; its own batch 2 of 200-token prompts (400 tokens): at 100 GB/s, 6 requests per
    unit and a knee of 400 tokens the factor is 1 + 0.1 + (4.075 + 0.5) / 2, plus the delay;
    alone, or with every term off, (1, 0)."""
    rows = np.array([0, 1])
    llms = np.array([0, 1])
    batch = np.array([2, 3])
    beside = np.array([0.1, 0.002, 100.0, 6.0, 400.0])
    factor, extra = _prefill_beside(0, rows, llms, D, OUT, WEIGHTS, KV, TOKENS, batch, beside)
    assert factor == pytest.approx(1.1 + (4.075 + 0.5) / 2) and extra == 0.002
    assert _prefill_beside(0, rows[:1], llms[:1], D, OUT, WEIGHTS, KV, TOKENS, batch, beside) == (1.0, 0.0)
    assert _prefill_beside(0, rows, llms, D, OUT, WEIGHTS, KV, TOKENS, batch, np.zeros(5)) == (1.0, 0.0)


def _estimate(P_: np.ndarray, beside: np.ndarray, serial: bool = False) -> float:
    tpt = np.zeros(2)
    batch = np.zeros(2, dtype=np.int64)
    return unit_throughput(np.array([0, 1]), np.array([0, 1]), P_, D, OUT, np.array([50.0, 50.0]), WEIGHTS, KV,
                           TOKENS, 80e9, 1e9, 8, serial, tpt, batch, 0.0, 0.0, np.zeros(2), beside)


def test_a_fixed_stretch_is_the_same_unit_with_longer_prefills():
    """With only the fixed stretch (1: twice the table time, whatever the others do) the unit's
    estimate is, bit for bit, that of the same unit with its prefill table doubled; a stretch
    lowers the estimate of a loaded unit; temporal units (one job at a time) have none."""
    stretched = _estimate(P, np.array([1.0, 0.0, 0.0, 0.0, 0.0]))
    assert stretched == _estimate(2.0 * P, np.zeros(5))
    assert stretched < _estimate(P, np.zeros(5))
    assert _estimate(P, np.array([1.0, 0.0, 0.0, 0.0, 0.0]), serial=True) == _estimate(P, np.zeros(5), serial=True)


def test_the_parameters_come_from_the_settings_with_the_meshs_bandwidth():
    """``prefill_beside_params``: the settings' five fields in order, the bandwidth times the
    mesh's GPUs (the members' demand is the whole mesh's); zeros without settings."""
    llm = LLMConfig(prefill_beside_gbps=3250.3, prefill_beside_requests=96.55, prefill_beside_knee_tokens=1312.0)
    assert prefill_beside_params(llm, 2.0).tolist() == [0.0, 0.0, 6500.6, 96.55, 1312.0]
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
