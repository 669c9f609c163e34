"""An eager prefill on a TP mesh (``llm.prefill_eager_host_tp_s``): its GPU work waits for
every rank's kernel-by-kernel launch, so it lasts longer per rank beyond the first. Measured
on the H100 plain-stream runs (back-to-back eager prefills beyond their table): 45-60 ms at
TP 1, 140-195 ms at TP 4 (docs/fidelity-llm.md, "The eager prefill at TP 4").

The rule in the simulator's and the estimator's host seconds, the calibration's measurement,
and the held-out seed-1 TP-4 temporal run of v3w's engine, whose throughput the term brings
from 6% off to within 2%.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.llm_units import llm_specs
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig
from placement_opt.simulate.llm import host_seconds, simulate_llm
from placement_opt.solvers.llm_estimator import eager_batches, latency_vectors

from .helpers import ROOT, load_benchmark

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def test_only_the_eager_prefill_grows_per_extra_rank():
    """host_seconds: the eager value gains (tp - 1) x the term on a partition and on the whole
    GPU; the decode and graph-prefill values do not move; TP 1 is as without it."""
    base = LLMConfig(decode_host_s=5e-4, prefill_host_s=0.016, decode_host_full_s=2e-4, prefill_host_full_s=3e-4,
                     prefill_eager_host_s=0.025, prefill_eager_host_full_s=0.05)
    on = dataclasses.replace(base, prefill_eager_host_tp_s=0.04)
    for share in (0.5, 1.0):
        for tp in (1, 2, 4):
            d0, p0, e0 = host_seconds(base, share, tp)
            d1, p1, e1 = host_seconds(on, share, tp)
            assert (d1, p1) == (d0, p0)
            assert e1 - e0 == pytest.approx(0.04 * (tp - 1), abs=1e-15)


def test_the_estimator_charges_it_to_eager_batches_only():
    """latency_vectors: at TP 4 the prefill of a batch that runs eagerly (padded size over the
    graph limit at the LLM's mean prompt) takes 3 x the term longer; a graph batch and every
    decode step are unchanged."""
    inst = load_instance(os.path.join(FIDELITY, "gpu4", "measured", "poisson.json"))
    spec = llm_specs(inst)[3]
    off = dataclasses.replace(inst.llm_settings, prefill_eager_host_tp_s=0.0)
    on = dataclasses.replace(off, prefill_eager_host_tp_s=0.04)
    p0, d0 = latency_vectors(spec, 4, 1.0, 32, off)
    p1, d1 = latency_vectors(spec, 4, 1.0, 32, on)
    b = np.maximum(np.arange(33), 1).astype(np.int64)
    eager = eager_batches(b, int(np.ceil(spec.prompt_tokens)), off.prefill_graph_tokens) > 0
    assert eager.any() and not eager.all()
    assert np.allclose((p1 - p0)[eager], 0.12, rtol=0, atol=1e-12)
    assert np.array_equal(p1[~eager], p0[~eager]) and np.array_equal(d1, d0)


def test_calibration_measures_it_on_the_tp4_fit_run():
    """v3w's value is (median eager excess on its TP-4 fit run - the same on its TP-1 eager fit
    run) / 3, and the run shows several times the TP-1 excess."""
    script = load_benchmark("llm_fidelity")
    gen = script.GENERATIONS["v3w"]
    with open(os.path.join(RESULTS, gen.calibration)) as f:
        cal = json.load(f)
    tp4, n4 = script._median_eager_excess(gen.fit_tp_wide)
    tp1, n1 = script._median_eager_excess(gen.fit_eager[1])
    assert n4 >= script.MIN_EAGER and n1 >= script.MIN_EAGER
    assert tp4 > 3 * tp1 > 0
    assert cal["prefill_eager_host_tp_s"] == pytest.approx((tp4 - tp1) / 3, abs=1e-6)
    assert script.tp_eager_host(gen, gen.fit_eager[1])[0] == pytest.approx(cal["prefill_eager_host_tp_s"], abs=1e-6)


def test_the_term_predicts_the_held_out_tp4_run():
    """``results-v3-gpu4b/gpu4s1-poisson-temporal4`` (held out: one TP-4 mesh of four LLMs,
    seed 1, 17 eager prefills): simulated throughput within 2% of the measured with the term,
    over 5% high without it."""
    inst = load_instance(os.path.join(FIDELITY, "gpu4s1", "measured", "poisson.json"))
    assert inst.llm_settings.prefill_eager_host_tp_s > 0
    placement = load_placement(os.path.join(FIDELITY, "gpu4s1", "poisson-temporal4.placement.json"))
    with open(os.path.join(RESULTS, "results-v3-gpu4b", "gpu4s1-poisson-temporal4", "summary.json")) as f:
        measured = json.load(f)["measured"]["throughput_rps"]
    with_term = simulate_llm(inst, placement, policy=None)["throughput_rps"]
    llm = dataclasses.replace(inst.llm_settings, prefill_eager_host_tp_s=0.0)
    without = simulate_llm(dataclasses.replace(inst, llm=llm), placement, policy=None)["throughput_rps"]
    assert abs(with_term / measured - 1) < 0.02
    assert without / measured - 1 > 0.05
