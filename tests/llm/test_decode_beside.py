"""A decode step's time by what ran beside it, measured and simulated
(benchmarks/fidelity/llm/decode_beside.py; docs/fidelity-llm.md "A decode step by what ran beside
it, and a contention sensitivity per LLM (tried, not adopted)")."""

from __future__ import annotations

import pytest

from .helpers import fidelity_script


def _job(llm: str, kind: str, start: float, end: float, group: int = 0) -> dict:
    return {"llm": llm, "kind": kind, "group": group, "device_start_s": start, "device_end_s": end}


def test_a_step_takes_the_first_class_that_holds():
    script = fidelity_script("decode_beside")
    assert script.step_class(0.6, 0.0, 0.0) == "own"
    assert script.step_class(0.4, 0.7, 0.9) == "prefill"
    assert script.step_class(0.0, 0.01, 1.0) == "decodes"
    assert script.step_class(0.0, 0.2, 1.0) == "mixed"  # prefills for over a twentieth: not decodes only
    assert script.step_class(0.01, 0.0, 0.02) == "alone"
    assert script.step_class(0.2, 0.0, 0.0) == "mixed"


def test_overlaps_count_own_prefills_others_prefills_and_others_jobs():
    """A 2 ms step of ``a``: its own prefill over its first half, ``b``'s prefill over its last
    quarter and ``b``'s decode step over all of it; ``a``'s own other decode step and a job of
    another mesh are not counted."""
    script = fidelity_script("decode_beside")
    jobs = [_job("a", "decode", 0.0, 2.0), _job("a", "prefill", -1.0, 1.0), _job("b", "prefill", 1.5, 3.0),
            _job("b", "decode", -0.5, 2.5), _job("a", "decode", 2.0, 4.0), _job("c", "decode", 0.0, 2.0, group=1)]
    own, prefill, other = script.overlaps(jobs, 0, range(len(jobs) - 1))
    assert (own, prefill, other) == pytest.approx((0.5, 0.25, 1.25))
    assert script.step_class(own, prefill, other) == "own"  # half its time beside its own prefill


def test_on_a_traced_run_the_small_llms_steps_beside_others_are_simulated_long():
    """Seed 69's fcfs run (v3i, five LLMs on one H200): every LLM has steps in the own, prefill
    and decodes classes on both sides, in about the same parts; ``llm-0.4b``'s steps beside other
    LLMs' prefills are simulated over 5% longer than the GPU ran them, ``llm-8b``'s within 3%
    (the finding of the docs' section)."""
    pytest.importorskip("torch")
    script = fidelity_script("decode_beside")
    import llm_fidelity as fid

    run = fid.traced_run("results-v3i-h200x3s69/h200x3s69-poisson-muxserve/fcfs")
    measured = script.stretches(run, fid.traced_jobs(run))
    simulated = script.stretches(run, fid.simulated_run_rows(run, fid.traced_instance(run, {}))[0])
    for llm in ("llm-0.4b", "llm-1b", "llm-3b", "llm-7b", "llm-8b"):
        for cls in ("own", "prefill", "decodes"):
            m, s = measured[(llm, cls)], simulated[(llm, cls)]
            assert len(m) >= 100 and abs(len(s) / len(m) - 1) < 0.2, (llm, cls)

    def ratio(llm: str, cls: str) -> float:
        return float(sorted(simulated[(llm, cls)])[len(simulated[(llm, cls)]) // 2]
                     / sorted(measured[(llm, cls)])[len(measured[(llm, cls)]) // 2])

    assert ratio("llm-0.4b", "prefill") > 1.05
    assert abs(ratio("llm-8b", "prefill") - 1) < 0.03
    lines = script.lines_for(measured, simulated)
    assert lines[0].startswith("llm") and len(lines) == 1 + len(set(measured) | set(simulated))
