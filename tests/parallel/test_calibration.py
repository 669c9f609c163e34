"""The shipped fitted parameters reproduce their recorded fit errors on the shipped data."""

import numpy as np
import pytest

from placement_opt.costs.calibration import _params, calibration_for, measured_links
from placement_opt.offline.fit_calibration import (H100, _roofline, bert_predictions, collective_samples,
                                                   fit_alpha_beta, op_samples, rel_errors)
from placement_opt.costs.costmodel import CommModel, flat_collective_time
from placement_opt import Link

from parallel_fixtures import V100


def test_h100_operator_fit_errors_match_the_recorded_ones():
    calib = calibration_for(H100)
    assert calib.gpu_key == "H100"
    recorded = _params()["fit_errors"]
    for fam, (flops, nbytes, secs) in op_samples().items():
        p = calib.family(fam)
        err = rel_errors(_roofline(flops, nbytes, p.compute_eff, p.memory_eff, p.overhead_s, H100), secs)
        rec = recorded[f"h100/{fam}"]
        assert np.median(err) == pytest.approx(rec["median_rel_error"], abs=2e-3)
        assert np.median(err) < 0.3
    # matmuls reach a realistic share of the H100's dense fp16 peak
    assert 0.4 < calib.family("matmul").compute_eff < 0.9


def test_dgx_collectives_follow_alpha_beta():
    for key, (nbytes, secs) in collective_samples().items():
        n = int(key.split("/")[1][2:])
        factor = 1.0 if key.startswith("send-recv") else 2.0 * (n - 1) / n
        alpha, bw = fit_alpha_beta(nbytes, secs, factor)
        err = rel_errors(alpha + factor * nbytes / bw, secs)
        assert np.median(err) < 0.1
        assert 5e-6 < alpha < 1e-4
    links = measured_links()
    assert 250e9 < links["intra"].bandwidth < 450e9  # NVLink bus bandwidth of the 8-GPU all-reduce
    assert 20e9 < links["inter"].bandwidth < 50e9  # one 400 Gb/s NIC
    # the alpha-beta formula itself: all-reduce moves 2(n-1)/n of the bytes
    link = Link(bandwidth=100e9, latency_s=1e-5)
    assert flat_collective_time("all-reduce", 1e9, 4, link) == pytest.approx(1e-5 + 1.5e-2)
    assert flat_collective_time("all-gather", 1e9, 4, link) == pytest.approx(1e-5 + 0.75e-2)
    assert flat_collective_time("all-to-all", 1e9, 4, link) == pytest.approx(1e-5 + 0.1875e-2)
    # a 2D mesh (two nodes) is slower than one node for the same collective
    flat = CommModel(n=8, gpus_per_node=8, intra=link, inter=Link(12.5e9, 2e-5))
    wide = CommModel(n=16, gpus_per_node=8, intra=link, inter=Link(12.5e9, 2e-5))
    assert wide.collective("all-reduce", 1e8) > flat.collective("all-reduce", 1e8)


def test_v100_bert_profile_fit():
    calib = calibration_for(V100)
    assert calib.gpu_key == "V100"
    meas, pred, tps = bert_predictions(calib)
    err = rel_errors(pred, meas)
    assert np.median(err[tps == 1]) < 0.2
    assert np.median(err[tps > 1]) < 0.25
