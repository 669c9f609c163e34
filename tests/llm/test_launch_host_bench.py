"""The decode launch's host time against a baseline engine (benchmarks/fidelity/llm/launch_host_bench.py):
its CPU run steps the executor's engine and an earlier one in turn and writes both; the committed
H200 result shows the launch path with the pinned token copy at about 0.6 x the one before
(docs/fidelity-llm.md "The decode step's host path")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .helpers import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "launch_host_bench.py")
ENGINE = os.path.join(ROOT, "placement_opt", "executor", "llm_engine.py")
COMMITTED = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "launch-host")


def test_cpu_run_times_the_engine_and_the_baseline_step_for_step(tmp_path):
    out = tmp_path / "launch.json"
    done = subprocess.run([sys.executable, SCRIPT, os.path.join(ROOT, "instances", "tiny", "llm-cpu.json"), "-o",
                           str(out), "--baseline", ENGINE, "--models", "tiny-llm-a", "--batches", "1,2",
                           "--context", "8", "--steps", "3"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and [r["batch"] for r in data["rows"]] == [1, 2]
    for row in data["rows"]:
        for name in ("engine", "baseline"):
            assert row[name]["launch_us"] > 0 and row[name]["finish_us"] > 0 and row[name]["gpu_ms"] > 0
        assert row["ratio"]["launch_plus_finish"] > 0
    assert "launch+finish new/baseline" in done.stdout


def test_committed_h200_result_halves_finish_and_cuts_launch():
    for name in ("launch-host-h200.json", "launch-host-h200-s05.json"):
        with open(os.path.join(COMMITTED, name)) as f:
            data = json.load(f)
        assert "H200" in data["device"]
        for row in data["rows"]:
            assert row["ratio"]["finish"] < 0.5 and row["ratio"]["launch"] < 0.8
            assert 0.55 < row["ratio"]["launch_plus_finish"] < 0.7
            assert abs(row["ratio"]["gpu"] - 1.0) < 0.05  # the GPU work is the same
