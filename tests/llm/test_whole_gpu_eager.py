"""The eager prefill's launch on the whole GPU (``llm.prefill_eager_hold_full_s``, docs/fidelity-llm.md
"The eager launch on the whole GPU"): the hold reaches the kernel for an LLM holding the whole
GPU only, a prefill ends at the later of its GPU work and its launch, and the fit on v3i's
temporal job traces, with its check on a fresh set's held-out runs (the estimator's floor:
``test_estimator_prefill_terms.py``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.llm_units import llm_specs
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig
from placement_opt.simulate.llm import _POLICY_CODE, eager_hold_seconds, mesh_inputs
from placement_opt.simulate.meshsim import LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs, simulate_mesh

from .helpers import ROOT, load_benchmark

SET = os.path.join(ROOT, "instances", "fidelity-llm", "h200t75")


def _first_token(prefill_s: float, tail_s: float, hold_s: float) -> float:
    """The end of one eager prefill (2000 tokens, one output token) of an LLM alone on the whole
    GPU (temporal), its table time ``prefill_s``, launch 1 ms, ``tail_s`` the eager host time
    (how much later than its table time the prefill ends) and ``hold_s`` the launch's hold."""
    requests = MeshRequests(arrival=np.array([0.0]), llm=np.array([0], dtype=np.int64),
                            prompt=np.array([2000], dtype=np.int64), output=np.array([1], dtype=np.int64))
    llms = MeshLLMs(share=np.ones(1), kv_kib=np.ones(1, dtype=np.int64), rate=np.ones(1),
                    decode_host_s=np.zeros(1), prefill_host_s=np.full(1, 0.001),
                    prefill_eager_host_s=np.full(1, tail_s), prefill_eager_hold_s=np.full(1, hold_s))
    tables = LatencyTables(prefill=np.full((1, 5, 2), prefill_s), decode=np.full((1, 5, 2), 0.01),
                           lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=_POLICY_CODE["temporal"], pool=10000, block=16, max_batch=4, token_budget=4096,
                       period=5.0, frac=0.5, horizon=100.0, graph_tokens=1024)
    out = mesh_outputs(1, 1, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return float(out.finish[0])


def test_the_prefill_ends_at_the_later_of_its_gpu_work_and_its_launch():
    """A 100 ms prefill outlasts a 15 ms launch: it ends at 0.1 + the 2 ms tail. A 5 ms one waits
    for the launch: 1 + 15 ms. Without a hold of its own the launch is the tail, in series (the
    file before): 0.1 + 0.012."""
    assert _first_token(0.1, 0.002, 0.015) == pytest.approx(0.102)
    assert _first_token(0.005, 0.002, 0.015) == pytest.approx(0.016)
    assert _first_token(0.1, 0.012, 0.0) == pytest.approx(0.112)


def test_the_whole_gpu_hold_is_the_whole_gpus_and_the_partitions_the_partitions():
    """The hold of a TP-1 whole GPU is ``prefill_eager_hold_full_s``, where it was measured; at TP
    2 none of its own (the eager host time, with its TP term, holds the thread as before)."""
    cfg = LLMConfig(prefill_eager_hold_s=0.024, prefill_eager_hold_full_s=0.015)
    assert eager_hold_seconds(cfg, 1.0) == 0.015 and eager_hold_seconds(cfg, 0.2) == 0.024
    assert eager_hold_seconds(cfg, 1.0, tp=2) == 0.0 and eager_hold_seconds(cfg, 0.5, tp=2) == 0.024
    assert eager_hold_seconds(LLMConfig(prefill_eager_hold_s=0.024), 1.0) == 0.0


def test_the_hold_reaches_the_kernel_from_the_setting_alone():
    """h200t75's temporal placement built into the kernel's inputs from an ``LLMConfig`` with only
    the whole-GPU hold set: every LLM gets it, and the eager-prefill limit is on."""
    inst = load_instance(os.path.join(SET, "measured", "code.json"))
    group = load_placement(os.path.join(SET, "code-temporal.placement.json")).groups[0]
    specs = {s.name: s for s in llm_specs(inst)}
    cfg = LLMConfig(prefill_eager_hold_full_s=0.015)
    llms, _, settings = mesh_inputs(group, [specs[m] for m in group.models], 1e10, cfg, "temporal", 10.0)
    assert np.array_equal(llms.prefill_eager_hold_s, np.full(5, 0.015))
    assert settings.graph_tokens == cfg.prefill_graph_tokens > 0
    _, _, off = mesh_inputs(group, [specs[m] for m in group.models], 1e10, LLMConfig(), "temporal", 10.0)
    assert off.graph_tokens == 0


def test_the_fit_on_the_temporal_traces_and_its_held_out_check():
    """On h200t73's two temporal runs (the fit) the launch holds the thread about 15 ms beyond a
    graph launch and a GPU-bound eager prefill ends about 2 ms beyond its time alone; the later
    of the two fits launch to GPU end better than their sum, there and on h200t75's fresh
    temporal runs (held out)."""
    fid = load_benchmark("llm_fidelity")
    with open(os.path.join(fid.LLM, fid.GENERATIONS["v3i"].gpus[0].calibration)) as f:
        cal = json.load(f)
    assert cal["prefill_eager_hold_full_s"] == pytest.approx(0.0148, abs=5e-4)
    assert cal["prefill_eager_host_full_s"] == pytest.approx(0.0023, abs=3e-4)
    before = dict(cal, prefill_eager_host_full_s=0.012)
    hold, tail, after_rms, before_rms, count = fid.fit_whole_gpu_eager(fid.V3I_WHOLE_GPU_EAGER_TRACES, before)
    assert (round(hold, 6), round(tail, 6)) == (cal["prefill_eager_hold_full_s"], cal["prefill_eager_host_full_s"])
    assert count == 235 and after_rms < 0.7 * before_rms
    held_out = (("results-v3i-h200t75", "h200t75-conv-temporal"), ("results-v3i-h200t75", "h200t75-code-temporal"))
    assert not any(fid.is_fit_run(fid._find_run(w)) for w in held_out)
    points = fid.whole_gpu_eager_prefills(held_out, cal)[0]
    alone, gpu, _ = points.T
    launch = cal["prefill_host_full_s"] + cal["prefill_eager_hold_full_s"]
    rms_after = np.sqrt(np.mean(np.log(np.maximum(alone + cal["prefill_eager_host_full_s"], launch) / gpu) ** 2))
    rms_before = np.sqrt(np.mean(np.log((0.012 + np.maximum(alone, cal["prefill_host_full_s"])) / gpu) ** 2))
    assert len(points) > 100 and rms_after < 0.8 * rms_before  # 0.224 against 0.296
