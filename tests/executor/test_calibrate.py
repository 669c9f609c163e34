"""Cost model vs the profile measured on two H200s (instances/fidelity), raw and calibrated."""

import json
import os

import pytest

pytest.importorskip("placement_opt.parallel")

from placement_opt.cluster import GPUSpec, Link  # noqa: E402
from placement_opt.offline.executor_calibration import calibration_report  # noqa: E402
from placement_opt.profile import Profile  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIDELITY = os.path.join(ROOT, "instances", "fidelity")
RESULTS = os.path.join(ROOT, "benchmarks", "fidelity", "results")


def test_report_on_measured_h200_profile():
    with open(os.path.join(FIDELITY, "profile-gpu.json")) as f:
        profile = Profile.from_dict("m", json.load(f), "profile")
    with open(os.path.join(RESULTS, "profile-gpu-details.json")) as f:
        details = json.load(f)
    gpu = GPUSpec("H200", 141e9, 130e9, 989e12, 4.8e12)
    report = calibration_report(profile, details, gpu, Link(450e9, 5e-6))
    stages = {(r["pp"], r["tp"], r["stage"]): r for r in report["stages"]}
    assert set(stages) == {(1, 1, 0), (2, 1, 0), (2, 1, 1), (1, 2, 0)}
    for r in stages.values():
        assert r["cost_model_s"] > 0 and r["measured_s"] > 0
        if r["fitted_on"]:  # the factor makes the pp=1 stage exact
            assert abs(r["calibrated_error"]) < 1e-9
    # the two pipeline stages are held out; the model is within 10% of them
    assert report["held_out_mean_abs_error_calibrated"] < 0.10
    assert report["held_out_mean_abs_error_cost_model"] < 0.10
