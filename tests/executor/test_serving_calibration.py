"""Stage gaps and device latency scales: parsed, applied by the simulator, and calibrated from runs."""

import csv
import json
import os

import numpy as np
import pytest

from placement_opt.errors import InputError
from placement_opt.instance import load_instance
from placement_opt.offline.serving_calibration import _main, device_scales, stage_gaps, stage_samples
from placement_opt.placement import Group, Placement
from placement_opt.profile import ConfigProfile
from placement_opt.simulate.tables import build_tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOUR = os.path.join(ROOT, "instances", "fidelity", "four-models-poisson.json")
SIMPLE = os.path.join(ROOT, "instances", "fidelity", "placement4-simple.json")


def _config(extra):
    return ConfigProfile.from_dict({"pp": 2, "tp": 1, "stage_latency_s": {"1": [0.01, 0.02]},
                                    "stage_weight_gb": [1, 1], **extra}, "c")


def test_stage_gap_parsed_and_round_tripped():
    cfg = _config({"stage_gap_s": [0.0001, 0.0002]})
    assert cfg.stage_gap_s == (0.0001, 0.0002)
    assert _config({}).stage_gap_s == ()
    assert ConfigProfile.from_dict(cfg.to_dict(), "c").stage_gap_s == cfg.stage_gap_s
    with pytest.raises(InputError, match="expected 2 entries"):
        _config({"stage_gap_s": [0.1]})
    with pytest.raises(InputError, match="stage_gap_s"):
        _config({"stage_gap_s": [-1, 0]})


def _four_models(tmp_path, scales=None, gaps=None):
    """The four-models fidelity instance, optionally with device scales and a tp=1 stage gap."""
    with open(FOUR) as f:
        d = json.load(f)
    profile_path = os.path.join(os.path.dirname(FOUR), d["profiles"]["transformer-5b"])
    with open(profile_path) as f:
        profile = json.load(f)
    if gaps is not None:
        for c in profile["configs"]:
            if (c["pp"], c["tp"]) == (1, 1):
                c["stage_gap_s"] = gaps
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    d["profiles"]["transformer-5b"] = "profile.json"
    if scales is not None:
        d["cluster"]["latency_scale"] = scales
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(d))
    return load_instance(str(path))


def test_simulator_applies_device_scale_and_gap(tmp_path):
    groups = [Group(devices=(d,), pp=1, tp=1, models=(f"model-{m}",)) for d, m in enumerate("abcd")]
    plain = build_tables(_four_models(tmp_path), groups)
    scaled = build_tables(_four_models(tmp_path, scales=[1.0, 1.1, 1.0, 1.0], gaps=[0.0002]), groups)
    per_group = {int(g): float(plain.lat[p]) for g, p in zip(plain.host_group, plain.host_lat_ptr)}
    per_group_scaled = {int(g): float(scaled.lat[p]) for g, p in zip(scaled.host_group, scaled.host_lat_ptr)}
    assert per_group_scaled[0] == pytest.approx(per_group[0] + 0.0002)
    assert per_group_scaled[1] == pytest.approx(per_group[1] * 1.1 + 0.0002)  # the gap is host time: not scaled


def test_latency_scale_needs_one_entry_per_device(tmp_path):
    with pytest.raises(InputError, match="one per device"):
        _four_models(tmp_path, scales=[1.0, 1.0])


def _write_run(path, groups, service, gap, n=40):
    """requests.csv of a saturated run: every group serves ``n`` queued requests back to back."""
    rows = []
    for g, grp in enumerate(groups):
        t = 0.0
        for i in range(n):
            row = {"request": len(rows), "group": g, "admitted": 1, "dispatch_s": 0.0}
            for s in range(grp.pp):
                ready = row["dispatch_s"] if s == 0 else row[f"stage{s - 1}_end_s"]
                start = max(ready, t + gap if i else 0.0) if s == 0 else ready + gap
                row[f"stage{s}_start_s"], row[f"stage{s}_end_s"] = start, start + service[g]
            t = row["stage0_end_s"]
            rows.append(row)
    fields = sorted({k for r in rows for k in r})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def test_calibration_recovers_gap_and_device_scale(tmp_path):
    inst = load_instance(FOUR)
    placement = Placement.from_dict(json.load(open(SIMPLE)))
    profiled = inst.model_profiles[0].config(1, 1).stage_latency[0, 0]
    factor = 1 + inst.simulator.stage_overhead_factor
    service = [profiled * factor, profiled * factor * 1.1, profiled * factor, profiled * factor]
    csv_path = tmp_path / "requests.csv"
    _write_run(csv_path, placement.groups, service, gap=0.0003)
    samples = stage_samples(str(csv_path), placement.groups)
    assert len(samples[(0, 0)]["occupancy"]) == 39  # every pair queued
    scales = device_scales([(str(csv_path), placement)], 4)
    assert scales == pytest.approx([1.0, 1.1, 1.0, 1.0])
    gaps = stage_gaps(inst, "transformer-5b", [(str(csv_path), placement)], scales)
    assert gaps[(1, 1, 0)]["gap_s"] == pytest.approx(0.0003, rel=1e-6)
    out = tmp_path / "cal.json"
    _main([FOUR, "transformer-5b", "--run", str(tmp_path), SIMPLE, "--profile-out", str(tmp_path / "p.json"),
           "--instance-out", f"{FOUR}={out}"])
    calibrated = load_instance(str(out))
    assert calibrated.cluster.latency_scale == pytest.approx((1.0, 1.1, 1.0, 1.0), abs=1e-4)
    assert calibrated.model_profiles[0].config(1, 1).stage_gap_s == pytest.approx((0.0003,), rel=1e-6)
    assert np.isfinite(calibrated.model_profiles[0].config(1, 1).stage_latency).all()
