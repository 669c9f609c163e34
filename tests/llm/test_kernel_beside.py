"""A decode step kernel by kernel, alone and beside another LLM's (benchmarks/fidelity/llm/kernel_beside.py):
the profiler trace's kernels split into steps and classes, and the committed H200 measurement,
where a small LLM's kernels beside ``llm-8b`` stretch far more than beside its own copy
(docs/fidelity-llm.md "Engine rounds on unequal partitions")."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from .helpers import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "kernel_beside.py")
DATA = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "kernel-beside-h200")


def _script():
    sys.path.insert(0, os.path.dirname(SCRIPT))  # the script imports engine_bench beside it
    spec = importlib.util.spec_from_file_location("kernel_beside", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel(ts, dur, name, stream):
    return {"ph": "X", "cat": "kernel", "ts": ts, "dur": dur, "name": name, "args": {"stream": stream}}


def test_a_trace_splits_into_steps_and_classes():
    kb = _script()
    trace = {"traceEvents": [
        _kernel(30.0, 5.0, "_rms_norm_kernel", 7), _kernel(0.0, 10.0, "nvjet_sm90_hsh_x", 7),
        _kernel(12.0, 8.0, "_paged_attention_kernel", 7), _kernel(100.0, 12.0, "nvjet_sm90_hsh_x", 7),
        _kernel(114.0, 8.0, "_paged_attention_kernel", 7), _kernel(125.0, 9.0, "_rms_norm_kernel", 7),
        _kernel(1.0, 50.0, "nvjet_other_llm", 9), {"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1, "name": "aten::mm"}]}
    streams = kb.stream_kernels(trace)
    assert sorted(streams) == [7, 9] and [k[2] for k in streams[7][:3]] == [
        "nvjet_sm90_hsh_x", "_paged_attention_kernel", "_rms_norm_kernel"]  # in time order
    steps = kb.split_steps(streams[7], 3)
    assert len(steps) == 2
    summary = kb.step_summary(steps)
    assert summary["kernels_us"] == pytest.approx((23 + 29) / 2)
    assert summary["span_us"] == pytest.approx((35 + 34) / 2) and summary["gaps_us"] == pytest.approx((12 + 5) / 2)
    assert summary["by_kernel_us"]["nvjet_sm90_hsh_x"] == pytest.approx(11.0)
    assert [kb.kernel_class(n) for n in ("nvjet_a", "void cublasLt::splitKreduce_kernel<>", "_combine_kernel",
                                         "_paged_attention_kernel", "_silu_mul_kernel")] == [
        "weights", "weights", "attention", "attention", "small"]
    lines = kb.compare(summary, kb.step_summary([[(0.0, 22.0, "nvjet_sm90_hsh_x"), (22.0, 8.0, "_paged_attention_kernel"),
                                                  (30.0, 5.0, "_rms_norm_kernel")]]))
    assert lines[1].split()[-3:] == ["11.0", "22.0", "2.00"]
    assert any(line.startswith("class weights") and "2.00" in line for line in lines)


def _classes(name):
    kb = _script()
    with open(os.path.join(DATA, name)) as f:
        data = json.load(f)
    out = {}
    for label in ("alone", "beside"):
        sums = {c: 0.0 for c in kb.CLASSES}
        for kernel, us in data[label]["by_kernel_us"].items():
            sums[kb.kernel_class(kernel)] += us
        out[label] = sums
    return data, {c: out["beside"][c] / out["alone"][c] for c in kb.CLASSES}


def test_beside_llm_8b_a_small_llms_kernels_stretch_most_in_its_small_kernels():
    data, beside_8b = _classes("k-1b-8b-50-50.json")
    assert data["device"].startswith("NVIDIA H200") and data["sm_counts"] == [64, 64]
    _, beside_copy = _classes("k-1b-1b-50-50.json")
    _, big = _classes("k-8b-1b-75-25.json")
    assert beside_8b["small"] > 1.8 and beside_8b["weights"] > 1.4  # beside llm-8b at the same share
    assert beside_copy["small"] < 1.35 and beside_copy["weights"] < 1.2  # beside another llm-1b
    assert all(r < 1.12 for r in big.values())  # llm-8b beside llm-1b hardly slows


def test_the_report_prints_the_committed_one():
    names = sorted(n for n in os.listdir(DATA) if n.endswith(".json"))
    out = subprocess.run([sys.executable, SCRIPT, "--report", *[os.path.join(DATA, n) for n in names]],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    with open(os.path.join(DATA, "report.txt")) as f:
        assert out == f.read()
