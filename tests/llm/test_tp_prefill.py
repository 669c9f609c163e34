"""The TP prefill collect term (``llm.prefill_host_tp_s``): the mesh kernel's rule on a
hand-timed mesh, the fit's extraction of back-to-back prefills from a hand-timed
``requests.csv``, and the calibrated value on the committed 2 x H100 temporal run.

On plain streams a TP-2 prefill of the executor's engine exceeds its cost-table time by a
median 1.64 ms, a TP-1 one by 0.41 ms: the ranks collect the first tokens after the GPU work,
serially (docs/fidelity-llm.md, "The TP-2 temporal placement: host stalls, max_batch and the
prefill collect").
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.placement import load_placement
from placement_opt.simulate.llm import simulate_llm
from placement_opt.simulate.meshsim import LatencyTables

from .helpers import ROOT, load_benchmark, lone_request

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def test_a_prefill_lasts_its_collect_time_longer():
    """Collect 2 ms: first token at 0.102 s, the two decode steps after it (0.122 s); off:
    0.1 and 0.12 s."""
    assert lone_request(100, 3) == pytest.approx((0.1, 0.12))
    assert lone_request(100, 3, dict(prefill_collect_s=0.002)) == pytest.approx((0.102, 0.122))



def test_back_to_back_prefills_are_timed_from_the_previous_event(tmp_path, monkeypatch):
    """Hand-timed tokens (prefill table 10 ms): request 1 arrived (15 ms) before the mesh's event
    at 26 ms and got its first token at 37.5 ms: 1.5 ms beyond the table. Request 0's prefill
    (no earlier event) and request 2's (arrived at 46 ms, after the last event at 45 ms: the mesh
    was idle) are not back to back."""
    script = load_benchmark("llm_fidelity")
    rows = [("0", "0.0", "0.012 0.019 0.026"), ("1", "0.015", "0.0375 0.045"), ("2", "0.046", "0.058")]
    folder = tmp_path / "results-x"
    (folder / "run").mkdir(parents=True)
    with open(folder / "run" / "requests.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request", "model", "arrival_s", "prompt_tokens", "token_times_s"])
        for req, arrival, times in rows:
            w.writerow([req, "m", arrival, 100, times])
    tables = LatencyTables(prefill=np.full((1, 5, 2), 0.01), decode=np.full((1, 5, 2), 0.005),
                           lgrid=np.array([1.0, 4096.0]))
    monkeypatch.setattr(script, "_mesh_step_tables", lambda run: {"m": (tables, 0, 0.0, 1)})
    monkeypatch.setattr(script, "mesh_models", lambda run: [(1, ["m"])])
    got = script.plain_stream_prefills({"folder": str(folder), "name": "run"})
    assert got.tolist() == pytest.approx([0.0015])
    # the events of another mesh (here: TP 2) are not this mesh's, and a TP filter keeps its own only
    monkeypatch.setattr(script, "mesh_models", lambda run: [(2, ["other"]), (1, ["m"])])
    assert script.plain_stream_prefills({"folder": str(folder), "name": "run"}).tolist() == pytest.approx([0.0015])
    assert script.plain_stream_prefills({"folder": str(folder), "name": "run"}, tp=2).tolist() == []


def _with(inst, **fields: float):
    return dataclasses.replace(inst, llm=dataclasses.replace(inst.llm_settings, **fields))


def test_calibrated_collect_predicts_the_tp2_temporal_ttft():
    """``results-v3-tp2/tp2-poisson-temporal`` (the fit run): with the calibrated collect (per
    rank and per mesh) the mean TTFT is within 10% (off: 19% too low); a TP-1 mesh (the 1-GPU
    Poisson temporal run) is unchanged by it; the bundled instance keeps it off."""
    with open(os.path.join(RESULTS, "calibration.json")) as f:
        cal = json.load(f)
    assert cal["prefill_host_tp_s"] > 0 and cal["prefill_host_mesh_s"] > 0
    inst = load_instance(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"))
    assert inst.llm_settings.prefill_host_tp_s == cal["prefill_host_tp_s"]
    assert inst.llm_settings.prefill_host_mesh_s == cal["prefill_host_mesh_s"]
    placement = load_placement(os.path.join(FIDELITY, "tp2", "poisson-temporal.placement.json"))
    with open(os.path.join(RESULTS, "results-v3-tp2", "tp2-poisson-temporal", "summary.json")) as f:
        measured = json.load(f)["measured"]
    after = simulate_llm(inst, placement, policy=None)
    off = simulate_llm(_with(inst, prefill_host_tp_s=0.0, prefill_host_mesh_s=0.0), placement, policy=None)
    assert abs(measured["ttft_mean_s"] / after["ttft_mean_s"] - 1) < 0.10
    assert measured["ttft_mean_s"] / off["ttft_mean_s"] - 1 > 0.15
    one = load_instance(os.path.join(FIDELITY, "measured", "poisson.json"))
    one_placement = load_placement(os.path.join(FIDELITY, "poisson-temporal.placement.json"))
    assert simulate_llm(one, one_placement, policy=None) == simulate_llm(
        _with(one, prefill_host_tp_s=0.0, prefill_host_mesh_s=0.0), one_placement, policy=None)
    assert load_instance(os.path.join(FIDELITY, "tp2", "poisson.json")).llm_settings.prefill_host_tp_s == 0
