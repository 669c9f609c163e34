"""A prefill beside its own LLM's decode step on one SM partition (``llm.own_decode_prefill_share``;
``MeshSettings.own_decode_prefill``): the kernel's formula, a lone LLM on a partition in the
simulator, the fit on the job traces of one H200 (one LLM alone on a partition, and the five-LLM
and pair runs) and the fresh runs predicted with it before they ran (docs/fidelity-llm.md "A
prefill beside its own decode step")."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from placement_opt import load_instance, simulate
from placement_opt.placement import load_placement
from placement_opt.simulate.meshsim import prefill_beside_stretch, prefill_factor_beside

from .helpers import ROOT, beside_settings, committed_predictions, load_benchmark

FIDELITY = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def test_the_own_decode_step_leaves_the_others_and_the_prefill_keeps_its_share():
    """Beside its own decode step (300 GB/s, 10 requests) and another LLM's (700 GB/s, 5
    requests): with the share 0.5 the prefill's stretch counts the other LLM's job only and is
    over 0.5; beside its own step alone, 1 / 0.5; off, every job counts as before; alone, 1."""
    on, off = beside_settings(own_decode_prefill=0.5), beside_settings(own_decode_prefill=0.0)
    # prefill: 0.1 s, 200 tokens, demand 100; running: itself, its own decode, one other
    both = prefill_factor_beside(0.1, 200, 0.4, 1100.0, 100.0, 15, 3, True, 300.0, 10, False, on)
    assert both == pytest.approx(prefill_beside_stretch(0.1, 200, 0.4, 700.0, 5, False, on) / 0.5)
    assert prefill_factor_beside(0.1, 200, 0.4, 400.0, 100.0, 10, 2, True, 300.0, 10, False, on) == pytest.approx(2.0)
    assert (prefill_factor_beside(0.1, 200, 0.4, 1100.0, 100.0, 15, 3, True, 300.0, 10, False, off)
            == pytest.approx(prefill_beside_stretch(0.1, 200, 0.4, 1000.0, 15, False, off)))
    assert prefill_factor_beside(0.1, 200, 0.4, 100.0, 100.0, 0, 1, False, 0.0, 0, False, on) == 1.0


def test_the_knee_gives_a_longer_prefill_more_of_its_partition():
    """``own_decode_prefill_knee`` 200 tokens: beside its own decode step alone, a prefill of 200
    padded tokens keeps 1 - 0.5 / 2 = 0.75 of its speed and one of 600 keeps 0.875 (the part it
    loses over 1 + tokens / knee); without the knee both keep 0.5."""
    kneed = beside_settings(own_decode_prefill=0.5)._replace(own_decode_prefill_knee=200.0)
    for tokens, speed in ((200, 0.75), (600, 0.875)):
        assert prefill_factor_beside(0.1, tokens, 0.4, 400.0, 100.0, 10, 2, True, 300.0, 10, False, kneed) == pytest.approx(
            1.0 / speed)
    assert prefill_factor_beside(0.1, 600, 0.4, 400.0, 100.0, 10, 2, True, 300.0, 10, False,
                                 beside_settings(own_decode_prefill=0.5)) == pytest.approx(2.0)


def test_a_lone_llm_on_a_partition_waits_longer_for_its_first_tokens():
    """``llm-1b`` alone on 24 SMs (``h200p36``'s p20): with the share on its prefills run beside
    its decode steps at that part of their speed, so the mean TTFT grows as the share falls,
    and its TPOT barely moves; a whole GPU is untouched by the field."""
    inst = load_instance(os.path.join(ROOT, "instances", "fidelity-llm", "h200p36", "measured", "poisson.json"))
    placement = load_placement(os.path.join(ROOT, "instances", "fidelity-llm", "h200p36", "poisson-p20.placement.json"))

    def with_share(share: float):
        return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, own_decode_prefill_share=share))

    ttft = [simulate(with_share(s), placement)["ttft_mean_s"] for s in (0.0, 0.9, 0.6)]
    assert ttft[1] < ttft[2] and ttft[0] < ttft[2]
    off, on = simulate(with_share(0.0), placement), simulate(with_share(0.6), placement)
    assert on["tpot_mean_s"] == pytest.approx(off["tpot_mean_s"], rel=0.05)


def test_the_fit_on_the_h200_traces_gives_the_calibrations_fields():
    """``fit_own_decode_prefill`` on the H200's five-LLM, lone-LLM and pair traces (the knee and
    delay from the trace fit) reproduces the committed calibration's share and stretch beside
    others (its power of the SM share too), and fits better than the model that counts the own
    decode step as any other job."""
    script = load_benchmark("llm_fidelity")
    with open(os.path.join(FIDELITY, "calibration-v3g-h200.json")) as f:
        cal = json.load(f)
    runs = script.H200_TRACES + script.H200_OWN_DECODE_TRACES + script.H200_PARTITION_TRACES
    fields, rms, before, count = script.fit_own_decode_prefill(runs, cal)
    assert fields == {k: cal[k] for k in ("prefill_beside_gbps", "prefill_beside_requests", "own_decode_prefill_share",
                                          "prefill_beside_share_power")}
    assert count > 4000 and rms < 0.134 < 0.2 < before


def test_the_fresh_lone_llms_meet_their_prediction_and_the_old_model_did_not():
    """``h200p40`` and ``h200p41`` (one LLM alone on 32-64 SMs, written after the fit and predicted
    before they ran, ``predictions/v3g-h200-own.jsonl``): mean TTFT within 10% and throughput and
    TPOT within 3% of the prediction; the prediction without the field
    (``v3g-h200-own-before.jsonl``) missed the TTFT of the 32-SM run by over 30%."""
    new, old = committed_predictions("v3g-h200-own.jsonl"), committed_predictions("v3g-h200-own-before.jsonl")
    lone = [run for run in new if "h200p4" in run]
    assert len(lone) == 4
    for run in lone:
        with open(os.path.join(FIDELITY, run, "summary.json")) as f:
            measured = json.load(f)["measured"]
        assert measured["ttft_mean_s"] == pytest.approx(new[run]["ttft_mean_s"], rel=0.10), run
        for key in ("throughput_rps", "tpot_mean_s"):
            assert measured[key] == pytest.approx(new[run][key], rel=0.03), (run, key)
    run = "results-v3g-h200p40/h200p40-poisson-p30"
    with open(os.path.join(FIDELITY, run, "summary.json")) as f:
        assert json.load(f)["measured"]["ttft_mean_s"] > 1.3 * old[run]["ttft_mean_s"]
