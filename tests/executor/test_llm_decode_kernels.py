"""The decode step's operator count and the engine micro-benchmark (benchmarks/fidelity/llm/engine_bench.py).

The first H100 run found decode steps of small batches bound by their number of kernels
(~150 us per layer beyond the bytes moved): the step now computes what its layers share once,
and on GPUs runs the Triton kernels (paged attention in place, rotary + KV write, RMSNorm,
SwiGLU). Counting the aten operators one step dispatches on the CPU (each is one or more
kernels on a GPU) plus the Triton launches keeps that from creeping back; the benchmark runs
on the CPU as a smoke test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from placement_opt.model import Architecture  # noqa: E402

# these tests run the Triton kernels on CPU tensors: in Triton's interpreter (set before Triton is imported)
os.environ.setdefault("TRITON_INTERPRET", "1")
KERNELS = ("rms_norm", "rope_write", "paged_attention", "silu_mul")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VIEWS = {"view", "_unsafe_view", "t", "transpose", "permute", "slice", "select", "unsqueeze", "expand", "split",
         "split_with_sizes", "chunk", "alias", "detach", "squeeze"}


class _Count(TorchDispatchMode):
    """Counts the operators that compute (views and metadata changes excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []
        self.paused = False  # inside a Triton launch (the interpreter's own tensor work is not the step's)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if name not in VIEWS and not self.paused:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def _count_triton(monkeypatch, count: _Count) -> None:
    """Each Triton wrapper call counts as its kernels (paged attention: 2 when split)."""
    from placement_opt.executor import llm_triton

    def counted(name, fn):  # type: ignore[no-untyped-def]
        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            count.paused = True
            try:
                return fn(*args, **kwargs)
            finally:
                count.paused = False
                count.ops.append("triton." + name)
        return run

    for name in KERNELS:
        monkeypatch.setattr(llm_triton, name, counted(name, getattr(llm_triton, name)))


def _decode_ops(layers: int, attention: str = "gather", monkeypatch=None) -> list:  # type: ignore[no-untyped-def]
    from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache
    from placement_opt.llm_units import page_units
    from placement_opt.executor.llm_model import DecoderShard

    arch = Architecture(layers=layers, hidden=64, heads=4, kv_heads=2, vocab=97, ffn_ratio=2.0, gated_mlp=True,
                        tied_embeddings=False, learned_positions=False, dtype="fp32")
    cpu = torch.device("cpu")
    model = DecoderShard(arch, 1, 0, 1, None, cpu, torch.float32, attention)
    pool = KVPool(64, page_units([arch], 1), 16, 16, cpu, torch.float32)
    cache = LLMCache(pool, arch, 1)
    for r in range(2):
        cache.ensure(r, 2)
    inputs = DecodeInputs(cache, 2, 2)
    inputs.fill([0, 1], [3, 4], [5, 9])
    count = _Count()
    if attention != "paged":
        with count:
            model.decode(inputs.tokens, inputs.pos, inputs)
        return count.ops
    with monkeypatch.context() as patch:  # undone before the next count
        _count_triton(patch, count)
        with count:
            model.decode(inputs.tokens, inputs.pos, inputs)
    return count.ops


def _per_layer(attention: str = "gather", monkeypatch=None) -> list:  # type: ignore[no-untyped-def]
    """The operators one more decoder layer adds (the difference of a 3- and a 2-layer step)."""
    more, fewer = _decode_ops(3, attention, monkeypatch), _decode_ops(2, attention, monkeypatch)
    extra = list(more)
    for op in fewer:
        extra.remove(op)
    return extra


def test_a_decode_layer_dispatches_few_operators():
    """Gather path: 64 operators a layer before (the first H100 run's executor), 30 on the CPU
    (its RMSNorm is 6 operators there; CUDA builds fuse it)."""
    per_layer = _per_layer()
    assert len(per_layer) <= 32, f"{len(per_layer)} operators per decoder layer: {per_layer}"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_a_paged_decode_layer_is_nine_kernels(monkeypatch):
    """Paged path: RMSNorm, QKV GEMM, rotary + KV write, attention, output GEMM (+ residual),
    RMSNorm, gate/up GEMM, SwiGLU, down GEMM (+ residual): no gather, no mask, no softmax."""
    per_layer = _per_layer("paged", monkeypatch)
    assert sorted(per_layer) == sorted(["triton.rms_norm", "mm", "triton.rope_write", "triton.paged_attention",
                                        "addmm", "triton.rms_norm", "mm", "triton.silu_mul", "addmm"]), per_layer


def test_engine_bench_runs_and_reports_every_llm(tmp_path):
    out = tmp_path / "results" / "engine.json"
    out.parent.mkdir()
    instance = os.path.join(ROOT, "instances", "tiny", "llm-cpu.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fidelity", "llm", "engine_bench.py"), instance,
                    "-o", str(out), "--steps", "2", "--batch", "2", "--context", "20", "--mechanisms", "streams",
                    "--prefill-beside"],
                   check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    (run,) = data["runs"]
    assert [p["model"] for p in run["per_llm"]] == ["tiny-llm-a", "tiny-llm-b"]
    for p in run["per_llm"]:
        assert p["gpu_ms"] > 0 and p["together_gpu_ms"] > 0 and p["launch_us"] > 0 and p["bytes"] > 0
        assert p["prefill_alone_ms"] > 0 and p["prefill_beside_others_ms"] > 0 and p["prefill_beside_all_ms"] > 0
        other = "tiny-llm-b" if p["model"] == "tiny-llm-a" else "tiny-llm-a"
        assert set(p["decode_beside_prefill_others"]) == {other}
        assert set(p["decode_beside_prefill_all"]) == {"tiny-llm-a", "tiny-llm-b"}
        assert all(d["beside_ms"] > 0 and d["alone_ms"] > 0 for d in p["decode_beside_prefill_all"].values())
    assert run["round_ms"] > 0 and run["mechanism"] == "cpu-serial"
    report = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "llm_fidelity.py"), "--results",
                             str(out.parent)], capture_output=True, text=True, check=True).stdout
    assert any(line.startswith("engine cpu-serial SMs [0, 0]: decode round ") for line in report.splitlines())


def test_engine_bench_builds_chosen_llms_on_unequal_partitions(tmp_path):
    """``--models`` picks the instance's LLMs (a name again: a copy, ``NAME#2``) and ``--shares``
    gives each its SM share: the rounds of a small partition beside a large one."""
    out = tmp_path / "engine.json"
    instance = os.path.join(ROOT, "instances", "tiny", "llm-cpu.json")
    script = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "engine_bench.py")
    subprocess.run([sys.executable, script, instance, "-o", str(out), "--steps", "2", "--batch", "2", "--context", "20",
                    "--mechanisms", "streams", "--models", "tiny-llm-b,tiny-llm-b,tiny-llm-a", "--shares", "0.25,0.5,0.25"],
                   check=True, capture_output=True, timeout=300)
    data = json.loads(out.read_text())
    assert data["models"] == ["tiny-llm-b", "tiny-llm-b#2", "tiny-llm-a"] and data["shares"] == [0.25, 0.5, 0.25]
    (run,) = data["runs"]
    assert [(p["model"], p["share"]) for p in run["per_llm"]] == [("tiny-llm-b", 0.25), ("tiny-llm-b#2", 0.5),
                                                                  ("tiny-llm-a", 0.25)]
    assert run["per_llm"][0]["bytes"] == run["per_llm"][1]["bytes"] != run["per_llm"][2]["bytes"]  # a copy moves the same
    for bad, says in ((["--models", "nope"], "no LLM 'nope'"), (["--shares", "0.7,0.7"], "together at most 1"),
                      (["--shares", "0.5"], "1 shares for 2 LLMs")):
        r = subprocess.run([sys.executable, script, instance, "-o", str(tmp_path / "x.json"), *bad],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and says in r.stderr.strip().splitlines()[-1] and "Traceback" not in r.stderr
    assert not (tmp_path / "x.json").exists()
