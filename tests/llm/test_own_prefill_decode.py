"""A decode step beside its own LLM's prefill, by the prefill's prompt
(benchmarks/fidelity/llm/own_prefill_decode.py; docs/fidelity-llm.md "A decode step beside its
own prefill, by the prompt"): the fit of the knee's form, and the committed job trace of v3i's
five-LLM seed 57, where the GPU's slowdown grows with the prompt and the calibration's one share
does not."""

from __future__ import annotations

import math

import pytest

from .helpers import fidelity_script


def test_the_fit_recovers_a_knee_and_beats_one_constant():
    """Steps drawn exactly from 1.3 x (1 + tokens / 500) fit back to c 1.3 and a knee within the
    grid's 2%, with no error left, where one constant leaves some."""
    script = fidelity_script("own_prefill_decode")
    steps = [("a", 1.3 * (1 + t / 500.0), t) for t in (8, 40, 100, 300, 700, 1500, 3000)]
    c, knee, rms, flat = script.fit_knee(steps)
    assert knee == pytest.approx(500.0, rel=0.02) and c == pytest.approx(1.3, rel=0.02)
    assert rms < 0.01 < flat
    with pytest.raises(ValueError):
        script.fit_knee([])


def test_bins_by_the_prefill_s_padded_prompt():
    script = fidelity_script("own_prefill_decode")
    assert [script.token_bin(t) for t in (0, 63, 64, 511, 2047, 2048, 10 ** 6)] == [0, 0, 1, 3, 5, 6, 6]
    means = script.bin_means([("a", 2.0, 10), ("a", 4.0, 20), ("b", 1.5, 600)])
    assert means == {("a", 0): (3.0, 2), ("b", 4): (1.5, 1)}


def test_on_the_gpu_the_step_slows_more_beside_a_longer_prompt():
    """Seed 57's round-robin run: measured, ``llm-7b``'s steps beside its own prefills of 512
    tokens or more are over twice as slow as those beside prefills under 64 tokens, and the knee's
    form fits the steps better than one constant; one share (v3g's 0.55, the knee off) simulates the
    two bins within 20% of each other, v3i's calibration with its knee over 1.8 times apart."""
    script = fidelity_script("own_prefill_decode")
    run = ["results-v3i-h200x3s57/h200x3s57-poisson-muxserve/round-robin"]
    measured, simulated = script.run_steps(run, {})
    _, one_share = script.run_steps(run, {"own_prefill_decode_share": 0.55, "own_prefill_decode_knee_tokens": 0.0})
    meas, sim, flat = script.bin_means(measured), script.bin_means(simulated), script.bin_means(one_share)
    short, long_ = meas[("llm-7b", 0)], meas[("llm-7b", 4)]
    assert short[1] >= 10 and long_[1] >= 10
    assert long_[0] > 2.0 * short[0]
    assert abs(math.log(flat[("llm-7b", 4)][0] / flat[("llm-7b", 0)][0])) < math.log(1.2)
    assert sim[("llm-7b", 4)][0] > 1.8 * sim[("llm-7b", 0)][0]
    _, _, rms, flat = script.fit_knee(measured)
    assert rms < 0.75 * flat
