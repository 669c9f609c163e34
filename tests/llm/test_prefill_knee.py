"""A prefill's stretch beside other LLMs' jobs with its knee in its time alone against the knee in
its prompt tokens (benchmarks/fidelity/llm/prefill_knee.py): on the committed job traces of v3g's
five-LLM seed 29, which neither knee was fitted on (docs/fidelity-llm.md "The prefill's knee in its
time alone")."""

from __future__ import annotations

import json
import os

import numpy as np

from .helpers import fidelity_script


def test_the_time_knee_times_the_large_llms_prefills_of_a_held_out_five_llm_run():
    """Seed 29 (v3g's engine, the five LLMs at 3 x load, three policies): with the knee in tokens
    the model stretches ``llm-7b``'s and ``llm-8b``'s prefills about 10% too much (measured over
    modelled GPU time 0.9 or less) and the small ones' too little, 15% or more apart; with v3i's
    knee in time (and its own-partition knees) every LLM is within 6%, all within 8% of each
    other, and the RMS log error is lower."""
    script = fidelity_script("prefill_knee")
    runs = script.traced_runs(("results-v3g-h200x3s29",))
    assert len(runs) == 3
    points, llms = script.graph_prefills(runs)
    assert len(points) == len(llms) > 1000 and set(llms) == {"llm-0.4b", "llm-1b", "llm-3b", "llm-7b", "llm-8b"}
    scores = {}
    for label, name in script.CALIBRATIONS:
        with open(os.path.join(script.HERE, name)) as f:
            scores[label] = script.knee_scores(points, llms, json.load(f))
    (tokens_rms, tokens), (time_rms, time) = scores["knee in tokens (v3g)"], scores["time and own knees (v3i)"]
    assert tokens["llm-7b"] < 0.9 and tokens["llm-8b"] < 0.9
    assert all(abs(s - 1.0) < 0.06 for s in time.values()), time
    assert max(time.values()) - min(time.values()) < 0.08 < 0.15 < max(tokens.values()) - min(tokens.values())
    assert time_rms < tokens_rms


def test_a_family_without_runs_has_no_prefills():
    script = fidelity_script("prefill_knee")
    points, llms = script.graph_prefills(script.traced_runs(("results-none-such",)))
    assert points.shape == (0, 10) and len(llms) == 0 and np.all(np.isfinite(points))


def test_both_sides_of_the_shared_partition_fit_a_five_llm_run_better():
    """On one of v3i's fit runs (seed 57, round-robin) the own-decode share with its knee in
    prompt tokens (``fit_own_decode_prefill_knee``) fits the graph prefills with a lower RMS log
    error than v3g's calibration (one share, the knee in tokens), at a knee inside its grid, the
    stretch's token knee 0."""
    script = fidelity_script("prefill_knee")
    fields, rms, before, count = script.fit_own_knee((("results-v3i-h200x3s57", "h200x3s57-poisson-muxserve/round-robin"),),
                                                     "calibration-v3g-h200.json")
    assert count > 500
    assert 0 < fields["own_decode_prefill_knee_tokens"] < 4096 and fields["prefill_beside_knee_tokens"] == 0
    assert rms < 0.9 * before
