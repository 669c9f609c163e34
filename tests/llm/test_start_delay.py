"""A job's GPU start held back until another LLM's job ends (benchmarks/fidelity/llm/start_delay.py):
counted on hand-made trace rows, then on the committed job traces of one H200, where the v3h
engine's five-LLM runs hold about a sixth of their jobs and v3g's the same load none
(docs/fidelity-llm.md "Five LLMs on the v3h engine: jobs held back on the GPU")."""

from __future__ import annotations

import math
import os
import subprocess
import sys

from .helpers import ROOT, fidelity_script

SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "start_delay.py")


def _job(llm, kind, launched, start, end, group=0):
    return {"group": group, "llm": llm, "kind": kind, "launched_s": launched, "device_start_s": start,
            "device_end_s": end}


def test_a_start_right_after_another_llms_end_counts_as_held():
    script = fidelity_script("start_delay")
    jobs = [_job("a", "decode", 0.0, 0.0, 0.010),
            _job("b", "decode", 0.001, 0.010003, 0.012),  # waited 9 ms, began 3 us after a's end: held
            _job("a", "decode", 0.0101, 0.0100, 0.020),  # began before its launch returned
            _job("b", "prefill", 0.013, 0.0165, 0.030),  # waited 3.5 ms, but nothing ended just before
            _job("c", "decode", 0.021, 0.0225, 0.025, group=1)]  # another mesh: a's end does not count
    c = script.start_delays(jobs)
    assert (c["jobs"], c["delayed"], c["held"]) == (5, 3, 1)
    assert math.isclose(c["held_s"], 0.009003)


def test_its_own_llms_end_does_not_count():
    script = fidelity_script("start_delay")
    jobs = [_job("a", "prefill", 0.0, 0.0, 0.010), _job("a", "decode", 0.001, 0.010002, 0.015)]
    assert script.start_delays(jobs)["held"] == 0


def test_v3h_five_llm_runs_hold_jobs_and_v3g_ones_do_not():
    script = fidelity_script("start_delay")
    lf = sys.modules["llm_fidelity"]
    v3h = script.start_delays(lf.traced_jobs(lf.find_run("results-v3h-h200x3s58/h200x3s58-poisson-muxserve/fcfs")))
    v3g = script.start_delays(lf.traced_jobs(lf.find_run("results-v3g-h200x3s30/h200x3s30-poisson-muxserve/fcfs")))
    assert v3h["held"] > 0.1 * v3h["jobs"]  # 4627 of 28758
    assert v3h["held"] > 0.9 * v3h["delayed"]
    assert v3h["decode_p90_ms"] > 1.0
    assert v3g["delayed"] == 0 and v3g["decode_p90_ms"] < 0


def test_the_committed_report_is_what_the_script_prints():
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, check=True, timeout=300).stdout
    with open(os.path.join(ROOT, "benchmarks", "fidelity", "llm", "start-delay", "report.txt")) as f:
        assert out == f.read()


def test_v3i_holds_none_on_the_same_arrivals():
    """v3i (v3h on 32 CUDA hardware queues) ran seed 58's fcfs arrivals again: no job waits past
    its launch for another LLM's job."""
    script = fidelity_script("start_delay")
    lf = sys.modules["llm_fidelity"]
    v3i = script.start_delays(lf.traced_jobs(lf.find_run("results-v3i-h200x3s58/h200x3s58-poisson-muxserve/fcfs")))
    assert v3i["jobs"] > 25000 and v3i["delayed"] == 0 and v3i["decode_p90_ms"] < 0
