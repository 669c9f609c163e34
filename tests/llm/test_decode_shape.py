"""The decode-shape benchmark (benchmarks/fidelity/llm/decode_shape_bench.py) and what it measured.

On one H200 the engine's decode step at a batch just past a power of two costs far more than a
straight line between the table's batches (the graph of the next power of two replays): the
committed measurements show it, and the benchmark itself runs on the CPU as a smoke test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "decode_shape_bench.py")
DATA = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "decode-shape-h200")


def _bench():
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("decode_shape_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("n", [1, 2, 9, 17, 32])
def test_every_pattern_keeps_the_mean_context(n):
    bench = _bench()
    uniform, spread, one_long = (bench.contexts(p, n, 480, 1600) for p in bench.PATTERNS)
    assert uniform == [480] * n
    assert len(spread) == len(one_long) == n
    assert abs(sum(spread) / n - 480) < 1
    if n > 1:
        assert max(spread) == 2 * 480 - 16 and min(spread) == 16
        assert max(one_long) == 1600 and abs(sum(one_long) / n - 480) < 0.6 * 1600 / n


def test_bench_runs_on_the_cpu_and_writes_every_figure(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "shape.json"
    instance = os.path.join(ROOT, "instances", "tiny", "llm-cpu.json")
    subprocess.run([sys.executable, BENCH, instance, "-o", str(out), "--batches", "1,3,4", "--steps", "1",
                    "--context", "24", "--long", "60"], check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and not os.path.exists(str(out) + ".tmp")
    keys = {(r["model"], r["pattern"], r["batch"]) for r in data["rows"]}
    assert keys == {(m, p, b) for m in ("tiny-llm-a", "tiny-llm-b") for p in ("uniform", "spread", "one-long")
                    for b in (1, 3, 4)}
    assert all(r["gpu_ms"] > 0 for r in data["rows"])


@pytest.mark.parametrize("context", [256, 480, 1024])
@pytest.mark.parametrize("model", ["llm-3b", "llm-7b", "llm-8b"])
def test_h200_step_past_a_bucket_pays_much_of_the_next_graph(context, model):
    with open(os.path.join(DATA, f"shape-c{context}.json")) as f:
        data = json.load(f)
    assert data["device"] == "NVIDIA H200"
    ms = {r["batch"]: r["gpu_ms"] for r in data["rows"] if r["model"] == model and r["pattern"] == "uniform"}
    part = (ms[17] - ms[16]) / (ms[32] - ms[16])
    # a straight line between the table's batches 16 and 32 gives 1/16 of the way; measured 34-66%
    assert 0.3 < part < 0.7, part
