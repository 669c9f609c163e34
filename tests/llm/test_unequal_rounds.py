"""Engine rounds on unequal SM partitions (benchmarks/fidelity/llm/unequal_rounds.py), measured on
one H200 with ``engine_bench.py --models --shares``: a small LLM beside ``llm-8b`` stretches past
the contention model at every share up to 0.5, and no single rate and cap fits them and the even
splits together (docs/fidelity-llm.md "A small partition beside a large one")."""

from __future__ import annotations

import math
import os
import subprocess
import sys

from .helpers import ROOT, fidelity_script, h200_calibration

SCRIPT = os.path.join(ROOT, "benchmarks", "fidelity", "llm", "unequal_rounds.py")
LLM = os.path.join(ROOT, "benchmarks", "fidelity", "llm")


def _script():
    return fidelity_script("unequal_rounds")


def test_the_committed_rounds_are_unequal_pairs_on_green_contexts():
    script = _script()
    paths = script.unequal_paths()
    assert len(paths) == 15 and all(p.startswith("engine-h200-unequal" + os.sep) for p in paths)
    rounds = sys.modules["llm_fidelity"].engine_rounds(tuple(paths))
    assert len(rounds) == 15
    for per in rounds:
        assert sum(p["share"] for p in per) <= 1 + 1e-9
        # the real SM counts: whole 8-SM groups of the H200's 132, at most the share's
        assert all(p["sm"] % 8 == 0 and 0 < p["sm"] <= 132 * p["share"] for p in per)
    shares = {tuple(sorted(p["share"] for p in per)) for per in rounds}
    assert (0.25, 0.75) in shares and (0.5, 0.5) in shares


def test_a_small_llm_beside_llm_8b_runs_past_the_model_the_large_one_does_not():
    script = _script()
    cal = h200_calibration()
    paths = [p for p in script.unequal_paths() if "-1b-8b-" in p and "-8b-8b-" not in p]
    rounds = sys.modules["llm_fidelity"].engine_rounds(tuple(paths))
    errors = script.log_errors(rounds, cal["contention_hbm_gbps"], cal["contention_hbm_cap_gbps"])
    for per, errs in zip(rounds, errors):
        for p, e in zip(per, errs):
            # replayed / measured: the replay itself, checked against the measured slowdown
            assert math.isfinite(e)
            if p["model"] == "llm-8b":
                assert abs(e) < 0.03, (p["model"], p["share"], e)
            elif p["share"] <= 0.5:
                assert e < -0.06, (p["model"], p["share"], e)  # 6-13% short


def test_a_refit_on_both_trades_the_even_splits_for_the_unequal_ones():
    script = _script()
    lf = sys.modules["llm_fidelity"]
    cal = h200_calibration()
    unequal = lf.engine_rounds(tuple(script.unequal_paths()))
    even = lf.engine_rounds(script.EVEN_ROUNDS)
    rate, cap, err = script.refit(unequal + even)
    assert (rate, cap) == (8400.0, 3700.0) and err == lf.replay_rms(rate, unequal + even, cap)
    before = [lf.replay_rms(cal["contention_hbm_gbps"], r, cal["contention_hbm_cap_gbps"]) for r in (unequal, even)]
    after = [lf.replay_rms(rate, r, cap) for r in (unequal, even)]
    assert after[0] < before[0] and after[1] > before[1]  # better on the unequal rounds, worse on the even
    worst = min(e for per in script.log_errors(unequal, rate, cap) for e in per)
    assert worst < -0.1  # still a small LLM beside llm-8b more than 10% short


def test_the_script_prints_the_committed_report():
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, check=True, timeout=300).stdout
    with open(os.path.join(LLM, "engine-h200-unequal", "report.txt")) as f:
        assert out == f.read()
