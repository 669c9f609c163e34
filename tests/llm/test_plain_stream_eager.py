"""The eager prefill launch on plain streams (the whole GPU, one job at a time), measured on the
committed warm temporal runs (``results-v3c``): its cost adds to the prefill's GPU work (no
overlap: the excess beyond the table does not shrink as the table time grows), the conv fit
run's mean excess is the TTFT-fitted ``prefill_eager_host_full_s``, and the held-out code run's
eager launches cost every model ~20 ms more (docs/fidelity-llm.md, "The eager launch on plain
streams")."""

from __future__ import annotations

import json
import os
from types import ModuleType

import numpy as np

from .helpers import ROOT, load_benchmark

RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")



def _excess(script: ModuleType, name: str) -> np.ndarray:
    """(excess, table) seconds of every back-to-back eager prefill of ``results-v3c/<name>``."""
    per_model = script.plain_stream_eager_prefills(script._find_run(("results-v3c", name)))
    return np.array([x for rows in per_model.values() for x in rows])


def test_plain_stream_eager_launch_adds_to_the_gpu_work_and_differs_by_run():
    script = load_benchmark("llm_fidelity")
    conv, code = _excess(script, "conv-temporal"), _excess(script, "code-temporal")
    assert len(conv) >= 60 and len(code) >= 12
    # serial: an overlapping launch (end = max(launch, table)) would give a slope near -1
    for rows in (conv, code):
        assert abs(np.polyfit(rows[:, 1], rows[:, 0], 1)[0]) < 0.2
    with open(os.path.join(RESULTS, "calibration.json")) as f:
        fitted = json.load(f)["prefill_eager_host_full_s"]
    assert abs(conv[:, 0].mean() - fitted) < 0.004  # the TTFT fit is the fit run's mean excess
    assert code[:, 0].mean() - conv[:, 0].mean() > 0.010  # the held-out run's launches cost more
