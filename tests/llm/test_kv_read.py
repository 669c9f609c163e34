"""The decode KV-read term (``llm.decode_kv_gbps``): the mesh kernel's rule on a hand-timed
mesh, its fit on synthetic steps, and the calibrated value on the committed H100 runs.

On plain streams a decode step of the executor's engine exceeds its cost-table time by a host
constant plus an amount that follows the KV bytes the step reads, at one rate for every model
(docs/fidelity-llm.md, "Per-LLM decode time: the KV-read term").
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.placement import load_placement
from placement_opt.simulate.llm import simulate_llm
from placement_opt.simulate.meshsim import (FCFS, LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                            simulate_mesh)

from .helpers import ROOT, load_benchmark

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def _lone_request_finish(prompt: int, output: int, kv_bytes: float, decode_kv_gbps: float) -> float:
    """Finish of one request on a one-LLM mesh: prefill 0.1 s, decode steps 0.01 s in the table."""
    requests = MeshRequests(arrival=np.zeros(1), llm=np.zeros(1, dtype=np.int64),
                            prompt=np.array([prompt], dtype=np.int64), output=np.array([output], dtype=np.int64))
    llms = MeshLLMs(share=np.ones(1), kv_kib=np.ones(1, dtype=np.int64), rate=np.ones(1),
                    weight_bytes=np.zeros(1), kv_bytes=np.full(1, kv_bytes))
    tables = LatencyTables(prefill=np.full((1, 5, 2), 0.1), decode=np.full((1, 5, 2), 0.01),
                           lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=FCFS, pool=100000, block=16, max_batch=4, token_budget=4096, period=5.0, frac=0.5,
                       horizon=100.0, decode_kv_gbps=decode_kv_gbps)
    out = mesh_outputs(1, 1, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return float(out.finish[0])


def test_a_decode_step_lasts_its_kv_bytes_over_the_rate_longer():
    """A 1000-token prompt, 3 output tokens: two decode steps at contexts 1001 and 1002, 1 MB of
    KV per token, 1000 GB/s: each step 1.001 / 1.002 ms longer; rate 0 (off): table times only."""
    assert _lone_request_finish(1000, 3, 1e6, 0.0) == pytest.approx(0.12)
    assert _lone_request_finish(1000, 3, 1e6, 1000.0) == pytest.approx(0.12 + 1.001e-3 + 1.002e-3)



def test_fit_recovers_a_shared_rate_with_one_host_constant_per_run(monkeypatch):
    """Two synthetic plain-stream runs, host constants 0.25 and 1.6 ms, one KV rate (0.35 ms/GB)
    and noise: the least-absolute-deviations fit finds the rate within the grid step."""
    script = load_benchmark("llm_fidelity")
    rng = np.random.default_rng(0)
    runs = {}
    for name, host in (("tp1", 0.25e-3), ("tp2", 1.6e-3)):
        gb = rng.uniform(0.0, 3.0, 4000)
        runs[name] = np.column_stack([host + gb * 0.35e-3 + rng.laplace(0.0, 0.1e-3, gb.size), gb])
    monkeypatch.setattr(script, "plain_stream_steps", lambda run: runs[run])
    gbps, mad = script.fit_kv_gbps(["tp1", "tp2"])  # type: ignore[list-item]
    assert 1e3 / gbps == pytest.approx(0.35, abs=0.011)
    assert mad < 0.2e-3


def _with(inst, **fields: float):
    return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields))


def test_calibrated_kv_rate_splits_the_time_between_the_llms():
    """``results-v3c/conv-temporal`` (the KV rate is fitted on the Poisson temporal and spatial
    runs; conv is held out for it): with the calibrated rate the mean TPOT is within 6% and every
    LLM's mean TPOT within 10% (off, the host times as calibrated: TPOT 13% low, llm-3b's 23%)."""
    with open(os.path.join(RESULTS, "calibration.json")) as f:
        cal = json.load(f)
    assert cal["decode_kv_gbps"] > 0
    fields = {k: float(cal.get(k, 0.0)) for k in ("contention_hbm_gbps", "decode_host_s", "prefill_host_s",
                                                  "decode_host_full_s", "prefill_host_full_s", "decode_kv_gbps",
                                                  "prefill_eager_host_s", "prefill_eager_host_full_s")}
    inst = _with(load_instance(os.path.join(FIDELITY, "measured", "conv.json")), **fields)
    placement = load_placement(os.path.join(FIDELITY, "conv-temporal.placement.json"))
    with open(os.path.join(RESULTS, "results-v3c", "conv-temporal", "summary.json")) as f:
        measured = json.load(f)["measured"]

    def worst_tpot(sim: dict) -> float:
        return max(abs(m["tpot_mean_s"] / sim["per_model"][n]["tpot_mean_s"] - 1) for n, m in measured["per_model"].items())

    after = simulate_llm(inst, placement)
    assert abs(measured["tpot_mean_s"] / after["tpot_mean_s"] - 1) < 0.06
    assert worst_tpot(after) < 0.10
    off = simulate_llm(_with(inst, decode_kv_gbps=0.0), placement)
    assert measured["tpot_mean_s"] / off["tpot_mean_s"] - 1 > 0.10
    assert worst_tpot(off) > 0.20
    assert load_instance(os.path.join(FIDELITY, "conv.json")).llm_settings.decode_kv_gbps == 0


def test_back_to_back_steps_are_paired_per_mesh():
    """A spatial run's meshes step at once, so consecutive token events of the whole run rarely
    belong to one LLM (5205 pairs on ``gpu4-poisson-spatial``, mostly the small LLMs); paired per
    mesh, every mesh's steps count (22537 pairs, ``llm-7b``'s 3763 among them); a one-mesh
    temporal run is unchanged (14191 pairs, as its calibration records)."""
    script = load_benchmark("llm_fidelity")

    def run(folder, name):
        return next(r for r in script.load_runs(os.path.join(RESULTS, folder)) if r["name"] == name)

    assert len(script.plain_stream_steps(run("results-v3-gpu4", "gpu4-poisson-spatial"))) == 22537
    assert len(script.plain_stream_steps(run("results-v3c", "poisson-temporal"))) == 14191
