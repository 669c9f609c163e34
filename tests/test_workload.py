"""Workloads: arrival statistics, rate splits, trace replay and refit, determinism, array types."""

from __future__ import annotations

import numpy as np
import pytest

from placement_opt import instance_from_dict
from placement_opt.errors import InputError
from placement_opt.workload import (fit_gamma, gamma_arrivals, mmpp_arrivals, mmpp_mean_rate, poisson_arrivals,
                                    power_law_split, read_trace, refit_arrivals)


def gap_stats(times: np.ndarray, duration: float) -> tuple[float, float]:
    gaps = np.diff(times)
    return len(times) / duration, float(gaps.std() / gaps.mean())


def instance(workload: dict, n_models: int = 4, base_dir: str = ".", **extra):
    return instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "V100", "memory_gb": 16}},
        "profiles": {"p": {"derive": {"latency_s": 0.1, "weight_gb": 1.0, "max_gpus": 4}}},
        "models": [{"name": "m", "profile": "p", "count": n_models}] if n_models > 1 else
                  [{"name": "m", "profile": "p"}],
        "workload": workload,
        **extra,
    }, base_dir=base_dir)


def test_poisson_rate_and_cv():
    times = poisson_arrivals(np.random.default_rng(1), 50.0, 2000.0)
    rate, cv = gap_stats(times, 2000.0)
    assert rate == pytest.approx(50.0, rel=0.02)
    assert cv == pytest.approx(1.0, rel=0.02)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < 2000.0


@pytest.mark.parametrize("cv_target", [0.5, 3.0])
def test_gamma_rate_and_cv(cv_target):
    times = gamma_arrivals(np.random.default_rng(2), 20.0, cv_target, 10000.0)
    rate, cv = gap_stats(times, 10000.0)
    assert rate == pytest.approx(20.0, rel=0.05)
    assert cv == pytest.approx(cv_target, rel=0.05)


def test_gamma_arrivals_start_offset():
    times = gamma_arrivals(np.random.default_rng(3), 10.0, 1.0, 50.0, start=100.0)
    assert times.min() >= 100.0 and times.max() < 150.0


def test_mmpp_rate_and_burstiness():
    rates, switch = (2.0, 20.0), (0.1, 0.4)
    assert mmpp_mean_rate(rates, switch) == pytest.approx((2.0 * 0.4 + 20.0 * 0.1) / 0.5)
    times = mmpp_arrivals(np.random.default_rng(4), rates, switch, 20000.0)
    rate, cv = gap_stats(times, 20000.0)
    assert rate == pytest.approx(mmpp_mean_rate(rates, switch), rel=0.05)
    assert cv > 1.2  # modulation makes it burstier than Poisson
    assert np.all(np.diff(times) >= 0)


def test_power_law_split():
    rates = power_law_split(64.0, 8, 0.5)
    assert rates.sum() == pytest.approx(64.0)
    np.testing.assert_allclose(rates / rates[0], (np.arange(8) + 1.0) ** -0.5)
    np.testing.assert_allclose(power_law_split(10.0, 5, 0.0), np.full(5, 2.0))


def test_power_law_split_through_the_instance():
    inst = instance({"duration_s": 5000, "arrival": {"process": "poisson", "rate": 40},
                     "rate_split": {"kind": "power_law", "exponent": 1.0}})
    counts = np.bincount(inst.requests().model, minlength=4)
    expected = power_law_split(40.0, 4, 1.0) * 5000
    np.testing.assert_allclose(counts, expected, rtol=0.05)


def test_equal_split_and_per_model_override():
    inst = instance({"duration_s": 4000, "arrival": {"process": "gamma", "rate": 8, "cv": 2},
                     "per_model": {"m-3": {"process": "poisson", "rate": 10}}})
    counts = np.bincount(inst.requests().model, minlength=4)
    np.testing.assert_allclose(counts[:3], 2 * 4000, rtol=0.1)
    assert counts[3] == pytest.approx(10 * 4000, rel=0.05)


def test_arrays_dtypes_sorted_and_deadlines():
    inst = instance({"duration_s": 100, "arrival": {"process": "gamma", "rate": 20, "cv": 4}, "slo": {"seconds": 0.5}})
    req = inst.requests()
    assert req.arrival.dtype == np.float64 and req.model.dtype == np.int32 and req.deadline.dtype == np.float64
    assert np.all(np.diff(req.arrival) >= 0)
    np.testing.assert_array_equal(req.deadline, req.arrival + 0.5)
    assert len(req) > 1000 and req.duration_s == 100


def test_seeded_determinism():
    wl = {"duration_s": 300, "arrival": {"process": "gamma", "rate": 30, "cv": 3}}
    a = instance(wl, seed=7).requests()
    b = instance(wl, seed=7).requests()
    c = instance(wl, seed=8).requests()
    for x, y in [(a.arrival, b.arrival), (a.model, b.model), (a.deadline, b.deadline)]:
        np.testing.assert_array_equal(x, y)
    assert len(a) != len(c) or not np.array_equal(a.arrival, c.arrival)
    inst = instance(wl, seed=7)
    np.testing.assert_array_equal(inst.requests(seed=8).arrival, c.arrival)


def test_adding_a_model_keeps_the_other_models_arrivals():
    """Model i draws from its own stream, so a fifth model leaves the first four unchanged."""
    per = {f"m-{i}": {"process": "poisson", "rate": 5.0} for i in range(4)}
    four = instance({"duration_s": 200, "per_model": per}, n_models=4).requests()
    five = instance({"duration_s": 200, "per_model": per}, n_models=5).requests()
    keep = five.model < 4
    np.testing.assert_array_equal(four.arrival, five.arrival[keep])
    np.testing.assert_array_equal(four.model, five.model[keep])


TRACE = """arrival_s,model,prompt_tokens,output_tokens
0.50,m-1,10,5
0.10,m-0,20,0
2.00,m-0,30,7
1.25,m-1,40,8
9.00,m-0,50,9
"""


def test_trace_replay(tmp_path):
    (tmp_path / "trace.csv").write_text(TRACE)
    trace = read_trace(str(tmp_path / "trace.csv"))
    np.testing.assert_array_equal(trace.arrival_s, [0.1, 0.5, 1.25, 2.0, 9.0])
    assert trace.model == ["m-0", "m-1", "m-1", "m-0", "m-0"]
    np.testing.assert_array_equal(trace.prompt_tokens, [20, 10, 40, 30, 50])
    np.testing.assert_array_equal(trace.output_tokens, [0, 5, 8, 7, 9])
    inst = instance({"duration_s": 5.0, "trace": "trace.csv", "slo": {"seconds": 1.0}}, n_models=2,
                    base_dir=str(tmp_path))
    req = inst.requests()
    np.testing.assert_array_equal(req.arrival, [0.1, 0.5, 1.25, 2.0])  # 9.0 is past the duration
    np.testing.assert_array_equal(req.model, [0, 1, 1, 0])
    np.testing.assert_array_equal(req.deadline, req.arrival + 1.0)
    np.testing.assert_array_equal(req.prompt_tokens, [20, 10, 40, 30])
    assert req.model.dtype == np.int32 and req.arrival.dtype == np.float64


def test_trace_time_scale_and_round_robin_models(tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s\n0\n1\n2\n3\n4\n5\n")
    inst = instance({"duration_s": 2.6, "trace": {"path": "t.csv", "time_scale": 2.0}}, n_models=2,
                    base_dir=str(tmp_path))
    req = inst.requests()
    np.testing.assert_array_equal(req.arrival, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    np.testing.assert_array_equal(req.model, [0, 1, 0, 1, 0, 1])


def test_trace_with_a_byte_order_mark(tmp_path):
    """Spreadsheet exports start with a UTF-8 BOM; the header is still found."""
    (tmp_path / "bom.csv").write_bytes("\ufeffarrival_s,model\n0.5,m-0\n".encode("utf-8"))
    trace = read_trace(str(tmp_path / "bom.csv"))
    np.testing.assert_array_equal(trace.arrival_s, [0.5])
    assert trace.model == ["m-0"]


def test_malformed_trace(tmp_path):
    (tmp_path / "bad.csv").write_text("arrival_s,model\n1.0,m-0\n-2.0,m-0\n")
    with pytest.raises(InputError, match="must be >= 0"):
        read_trace(str(tmp_path / "bad.csv"))
    (tmp_path / "nohead.csv").write_text("")
    with pytest.raises(InputError, match="empty trace"):
        read_trace(str(tmp_path / "nohead.csv"))


def test_fit_gamma_recovers_rate_and_cv():
    times = gamma_arrivals(np.random.default_rng(5), 15.0, 2.5, 20000.0)
    rate, cv = fit_gamma(times, 0.0, 20000.0)
    assert rate == pytest.approx(15.0, rel=0.05)
    assert cv == pytest.approx(2.5, rel=0.05)


def windowed_trace(rng) -> tuple[np.ndarray, list[float]]:
    """Three 500 s windows at 2, 10 and 30 req/s."""
    rates = [2.0, 10.0, 30.0]
    parts = [gamma_arrivals(rng, r, 1.0, 500.0, start=500.0 * k) for k, r in enumerate(rates)]
    return np.concatenate(parts), rates


def test_refit_preserves_per_window_rates():
    times, rates = windowed_trace(np.random.default_rng(6))
    refit = refit_arrivals(np.random.default_rng(7), times, 1500.0, 500.0)
    counts = np.histogram(refit, bins=[0, 500, 1000, 1500])[0] / 500.0
    np.testing.assert_allclose(counts, rates, rtol=0.12)
    scaled = refit_arrivals(np.random.default_rng(7), times, 1500.0, 500.0, rate_scale=2.0)
    np.testing.assert_allclose(np.histogram(scaled, bins=[0, 500, 1000, 1500])[0] / 500.0,
                               np.array(rates) * 2.0, rtol=0.12)
    assert np.all(np.diff(refit) >= 0)


def test_refit_scales_cv():
    times = gamma_arrivals(np.random.default_rng(8), 20.0, 1.0, 4000.0)
    refit = refit_arrivals(np.random.default_rng(9), times, 4000.0, 4000.0, cv_scale=3.0)
    _, cv = fit_gamma(refit, 0.0, 4000.0)
    assert cv == pytest.approx(3.0, rel=0.1)


def test_refit_through_the_instance(tmp_path):
    times, rates = windowed_trace(np.random.default_rng(10))
    rows = "\n".join(f"{float(t)!r},m-{i % 2}" for i, t in enumerate(times))
    (tmp_path / "trace.csv").write_text("arrival_s,model\n" + rows + "\n")
    wl = {"duration_s": 1500, "trace": {"path": "trace.csv", "refit_window_s": 500, "rate_scale": 1.5}}
    inst = instance(wl, n_models=2, base_dir=str(tmp_path), seed=3)
    req = inst.requests()
    per_window = np.histogram(req.arrival, bins=[0, 500, 1000, 1500])[0] / 500.0
    np.testing.assert_allclose(per_window, np.array(rates) * 1.5, rtol=0.12)
    assert np.all(np.diff(req.arrival) >= 0) and req.model.dtype == np.int32
    again = instance(wl, n_models=2, base_dir=str(tmp_path), seed=3).requests()
    np.testing.assert_array_equal(req.arrival, again.arrival)


def _stable_merge_reference(runs: list[np.ndarray], labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.concatenate(runs) if runs else np.empty(0)
    ids = np.repeat(labels, [len(r) for r in runs]).astype(np.int32)
    order = np.argsort(values, kind="stable")
    return values[order], ids[order]


@pytest.mark.parametrize("case", ["bursty", "ties", "empty_runs", "one_run", "crowded"])
def test_merge_sorted_runs_is_a_stable_sort(case):
    """The compiled merge of per-model arrivals orders exactly as a stable sort (ties: lower run
    first, then order within the run), whatever the runs look like."""
    from placement_opt.workload.processes import merge_sorted_runs
    rng = np.random.default_rng(5)
    if case == "bursty":
        runs = [gamma_arrivals(np.random.default_rng([1, i]), 5.0 / (i + 1), 4.0, 500.0) for i in range(13)]
    elif case == "ties":
        runs = [np.sort(rng.integers(0, 50, size=rng.integers(0, 300))).astype(np.float64) for _ in range(9)]
    elif case == "empty_runs":
        runs = [np.empty(0), np.sort(rng.uniform(0, 1, 40)), np.empty(0), np.sort(rng.uniform(0, 1, 3)), np.empty(0)]
    elif case == "one_run":
        runs = [np.sort(rng.uniform(0, 10, 1000))]
    else:  # every value in a few buckets: the crowded-bucket sort
        runs = [np.sort(np.concatenate([np.full(100, 3.0), rng.uniform(2.9, 3.1, 200), [1e6]])) for _ in range(4)]
    labels = np.arange(len(runs), dtype=np.int32) * 3 + 1
    starts = np.zeros(len(runs) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(r) for r in runs])
    got = merge_sorted_runs(np.concatenate(runs), starts, labels)
    want = _stable_merge_reference(runs, labels)
    assert np.array_equal(got[0].view(np.int64), want[0].view(np.int64))
    assert np.array_equal(got[1], want[1])


def test_merge_sorted_runs_of_nothing():
    from placement_opt.workload.processes import merge_sorted_runs
    values, labels = merge_sorted_runs(np.empty(0), np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int32))
    assert len(values) == 0 and len(labels) == 0


@pytest.mark.parametrize("arrival", [{"process": "gamma", "rate": 40, "cv": 4}, {"process": "poisson", "rate": 40},
                                     {"process": "mmpp", "rates": [5, 80], "switch_rates": [0.2, 1.0]}])
def test_generated_requests_equal_the_stable_sort_of_per_model_draws(arrival):
    """generate_requests merges the per-model streams as a stable sort of their concatenation did
    before (same requests bit for bit: the golden results do not move)."""
    from placement_opt.workload.generate import _arrivals, model_processes
    inst = instance({"duration_s": 300, "arrival": arrival, "rate_split": {"kind": "power_law", "exponent": 1.0}},
                    n_models=6)
    got = inst.requests()
    runs = [_arrivals(np.random.default_rng([inst.seed, i]), p, 300.0)
            for i, p in enumerate(model_processes(inst.workload, inst.model_names))]
    times, ids = _stable_merge_reference(runs, np.arange(6, dtype=np.int32))
    assert np.array_equal(got.arrival.view(np.int64), times.view(np.int64))
    assert np.array_equal(got.model, ids)
    assert np.array_equal(got.deadline, times + inst.slo_seconds()[ids])
