"""Decode steps on SM partitions beside other LLMs' decode steps (benchmarks/fidelity/llm/beside_decode.py),
read from the committed job traces of one H200: a small partition beside a large one stretches
well past the contention model, the large one and the steps alone on a partition do not
(docs/fidelity-llm.md "A small partition beside a large one")."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from .helpers import ROOT, load_benchmark

SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "beside_decode.py")
US31 = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "results-v3g-h200us31")


def _script():
    load_benchmark("llm_fidelity")  # the module the script imports, registered under its name
    spec = importlib.util.spec_from_file_location("beside_decode", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(placement):
    lf = sys.modules["llm_fidelity"]
    return next(r for r in lf.load_runs(US31) if r["name"] == f"h200us31-poisson-{placement}")


def test_family_drops_the_seed_and_the_repeat_mark():
    script = _script()
    assert script.family("results-v3g-h200us31r") == "h200us"
    assert script.family("results-v3s-h200x3s20") == "h200x3s"
    assert script.family("results-v3g-h200u3s35") == "h200u3s"
    assert script.family("results-v3s-h200s11") == "h200s"


def test_steps_read_off_the_trace_keep_their_overlaps_in_range():
    script = _script()
    names, rows = script.beside_steps(_run("skewed"))
    c = {name: k for k, name in enumerate(script.STEP_COLUMNS)}
    assert set(names) == {"llm-1b", "llm-8b"} and len(names) == len(rows) > 10000
    assert np.all(rows[:, c["gpu_s"]] > 0) and np.all(rows[:, c["alone_s"]] > 0)
    # the 1b holds 0.25 of the GPU (32 SMs), the 8b 0.75; a step has at most one other LLM beside it
    assert set(np.round(rows[:, c["share"]], 2)) == {0.25, 0.75}
    assert set(np.round(rows[:, c["others_share"]], 2)) <= {0.0, 0.25, 0.75}
    assert np.all(rows[:, c["others_decoding"]] <= 1.0 + 1e-9)
    # alone on its partition the model's step holds: the medians within 5%
    alone = rows[(rows[:, c["others_decoding"]] == 0) & (rows[:, c["prefilling"]] == 0)]
    assert abs(np.median(alone[:, c["gpu_s"]] / alone[:, c["alone_s"]]) - 1) < 0.05


def test_small_partition_beside_a_large_one_stretches_past_the_model():
    script = _script()
    by = {(name, share): a for (_, name, share, others), a in script.grouped([_run(p) for p in
                                                                             ("skewed", "equal", "reverse")])
          if others >= 0}
    ratio = {k: float(np.median(a[:, 0] / a[:, 1])) for k, a in by.items() if len(a) > 200}
    # measured on one H200: llm-1b at 0.25 beside llm-8b's decode steps 1.27 x the model, at 0.5
    # 1.15 x, at 0.62 1.06 x: the smaller its partition, the further past the model
    assert ratio[("llm-1b", 0.25)] > ratio[("llm-1b", 0.5)] > ratio[("llm-1b", 0.62)]
    assert ratio[("llm-1b", 0.25)] > 1.2
    # the large partition beside the small one stays within 6% of it
    assert abs(ratio[("llm-8b", 0.75)] - 1) < 0.06


def test_script_writes_its_groups_atomically(tmp_path):
    out = tmp_path / "beside.json"
    subprocess.run([sys.executable, SCRIPT, "results-v3g-h200us32", "--min-steps", "100", "-o", str(out)],
                   check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    assert data["folders"] == ["results-v3g-h200us32"] and not os.path.exists(str(out) + ".tmp")
    assert data["groups"] and all(g["steps"] >= 100 and g["measured"] > 0 for g in data["groups"])
    assert {g["llm"] for g in data["groups"]} == {"llm-1b", "llm-8b"}
