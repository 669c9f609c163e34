"""The stage clock's warm-up model (issue 13): a GPU serves a stage faster after idle time.

Parsed from profiles, followed by the simulator's kernel and the executor's dispatcher alike,
and fitted from executor runs by placement_opt.offline.serving_calibration.
"""

import csv
import dataclasses

import numpy as np
import pytest

from placement_opt import instance_from_dict
from placement_opt.errors import InputError
from placement_opt.executor.dispatch import Dispatcher
from placement_opt.offline.serving_calibration import replay_heat, tail_margins, warm_up
from placement_opt.placement import Group, Placement
from placement_opt.profile import ConfigProfile, Profile
from placement_opt.simulate.flowshop import run_groups
from placement_opt.workload import Requests

WARM = {"stage_idle_factor": [0.8], "heat_time_s": 0.1, "cool_time_s": 0.02}


def _config(extra: dict, pp: int = 1) -> ConfigProfile:
    return ConfigProfile.from_dict({"pp": pp, "tp": 1, "stage_latency_s": {"1": [0.01] * pp},
                                    "stage_weight_gb": [1] * pp, **extra}, "c")


def test_warm_up_terms_parsed_round_tripped_and_checked():
    cfg = _config(WARM)
    assert cfg.warms_up and cfg.stage_idle_factor == (0.8,) and cfg.heat_time_s == 0.1
    assert ConfigProfile.from_dict(cfg.to_dict(), "c").to_dict() == cfg.to_dict()
    assert not _config({}).warms_up and "heat_time_s" not in _config({}).to_dict()
    with pytest.raises(InputError, match="go together") as e:
        _config({"stage_idle_factor": [0.8], "heat_time_s": 0.1})
    assert e.value.field == "c.cool_time_s"
    with pytest.raises(InputError, match="expected 2 entries"):
        _config(WARM, pp=2)
    with pytest.raises(InputError, match="heat_time_s"):
        _config({**WARM, "heat_time_s": 0})


def _instance(warm: dict | None, dispatch: str = "earliest", rate: float = 40.0):
    """Two models, a one-GPU group each and a shared 2-stage pipeline; 10 ms per stage."""
    configs = [{"pp": 1, "tp": 1, "stage_latency_s": {"1": [0.01]}, "stage_weight_gb": [1]},
               {"pp": 2, "tp": 1, "stage_latency_s": {"1": [0.006, 0.005]}, "stage_weight_gb": [1, 1]}]
    if warm is not None:
        configs[0].update(warm)
        configs[1].update({**warm, "stage_idle_factor": [0.9, 0.85]})
    return instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "g", "memory_gb": 16}},
        "profiles": {"p": {"weight_gb": 2.0, "configs": configs}},
        "models": [{"name": "a", "profile": "p"}, {"name": "b", "profile": "p"}],
        "workload": {"duration_s": 30, "arrival": {"process": "gamma", "rate": rate, "cv": 3}, "slo": {"scale": 3}},
        "simulator": {"dispatch": dispatch, "overhead_s": 0.0005, "stage_overhead_factor": 0.0},
    })


GROUPS = (Group(devices=(0,), models=("a",)), Group(devices=(1,), models=("b",)),
          Group(devices=(2, 3), pp=2, tp=1, models=("a", "b")))


def test_idle_factor_one_gives_the_back_to_back_clock_exactly():
    """Warm-up terms that change nothing (factor 1) give bit-identical results to none."""
    plain = _instance(None)
    neutral = _instance({"stage_idle_factor": [1.0], "heat_time_s": 0.1, "cool_time_s": 0.02})
    neutral = dataclasses.replace(neutral, profiles={"p": Profile.from_dict("p", {
        "weight_gb": 2.0, "configs": [{**c.to_dict(), "stage_idle_factor": [1.0] * c.pp}
                                      for c in neutral.model_profiles[0].configs.values()]}, "p")})
    a, b = run_groups(plain, GROUPS, plain.requests()), run_groups(neutral, GROUPS, neutral.requests())
    assert a.accepted > 100
    np.testing.assert_array_equal(a.finish, b.finish)
    np.testing.assert_array_equal(a.group, b.group)


def _one_group_run(arrivals: list[float]):
    inst = _instance(WARM)
    req = Requests(np.array(arrivals), np.zeros(len(arrivals), dtype=np.int32), np.full(len(arrivals), np.inf), 1.0)
    return run_groups(inst, GROUPS[:1], req).finish - 0.0005  # the stage's end


def test_heat_ramps_while_busy_and_cools_while_idle():
    ends = _one_group_run([0.0] * 15 + [10.0])
    service = np.diff(np.r_[0.0, ends[:15]], prepend=np.nan)[1:]
    service = np.r_[service, ends[15] - 10.0]
    assert service[0] == pytest.approx(0.008)  # cold: 0.8 x 10 ms
    # heat grows by each request's time / 0.1 s, so service rises to 10 ms once 0.1 s were busy
    assert np.all(np.diff(service[:15]) >= 0) and service[14] == pytest.approx(0.01)
    assert service[1] == pytest.approx(0.008 + 0.002 * 0.08)
    assert service[15] == pytest.approx(0.008)  # 10 s idle: cold again
    # idle time cools: 0.2 ms idle takes 0.01 of the first request's 0.08 heat; 10 ms takes it all
    ends = _one_group_run([0.0, 0.0082])
    assert ends[1] - 0.0082 == pytest.approx(0.008 + 0.002 * 0.07)
    ends = _one_group_run([0.0, 0.018])
    assert ends[1] - 0.018 == pytest.approx(0.008)


def test_warm_clock_admits_more_than_the_back_to_back_one():
    plain, warm = _instance(None, rate=80.0), _instance(WARM, rate=80.0)
    a, b = run_groups(plain, GROUPS, plain.requests()), run_groups(warm, GROUPS, warm.requests())
    assert b.accepted > a.accepted
    assert np.mean(b.finish[b.finish >= 0]) != np.mean(a.finish[a.finish >= 0])


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
def test_dispatcher_follows_the_warm_clock_of_the_simulator(dispatch):
    inst = _instance(WARM, dispatch, rate=80.0)
    req = inst.requests()
    res = run_groups(inst, GROUPS, req)
    d = Dispatcher(inst, GROUPS)
    decisions = [d.decide(int(req.model[i]), float(req.arrival[i]), float(req.deadline[i])) for i in range(len(req))]
    assert 0 < res.accepted < len(req)
    np.testing.assert_array_equal(res.group, [x.group for x in decisions])
    np.testing.assert_allclose(res.finish, [x.finish for x in decisions], rtol=0, atol=1e-12)


def _served(path, arrivals: np.ndarray, cold: float, hot: float, heat_time: float, cool_time: float) -> None:
    """requests.csv of one one-GPU group whose stage follows the linear heat model exactly."""
    rows, free, warmth = [], 0.0, 0.0
    for i, a in enumerate(arrivals):
        start = max(a, free)
        warmth = max(0.0, warmth - (start - free) / cool_time)
        d = cold + (hot - cold) * warmth
        warmth = min(1.0, warmth + d / heat_time)
        free = start + d
        rows.append({"request": i, "model": "a", "group": 0, "admitted": 1, "dispatch_s": a,
                     "stage0_start_s": start, "stage0_end_s": free})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_calibration_recovers_the_warm_up_of_a_run(tmp_path):
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / 50.0, 600) * rng.choice([0.2, 3.0], 600))
    _served(tmp_path / "requests.csv", arrivals, 0.016, 0.018, 0.1, 0.02)
    placement = Placement(groups=(Group(devices=(0,), models=("a",)),))
    fit = warm_up([(str(tmp_path / "requests.csv"), placement)])[(1, 1)]
    assert fit["kept"] and fit["gain"] > 0.9
    assert (fit["heat_time_s"], fit["cool_time_s"]) == (0.1, 0.02)
    assert fit["stage_idle_factor"][0] == pytest.approx(0.016 / 0.018, abs=1e-6)


def test_replay_heat_matches_the_kernel_rule():
    start = np.array([0.0, 0.01, 0.05])
    end = np.array([0.01, 0.02, 0.06])
    np.testing.assert_allclose(replay_heat(start, end, 0.1, 0.02), [0.0, 0.1, max(0.0, 0.2 - 0.03 / 0.02)])


def _gap_instance(warm: dict | None, dispatch: str = "earliest", rate: float = 80.0, tail: float = 0.0):
    """:func:`_instance` with stage gaps of 1 ms (0.5 and 0.7 ms on the pipeline's stages) and
    the admission margin ``tail``."""
    inst = _instance(warm, dispatch, rate)
    profile = inst.model_profiles[0].to_dict()
    for c in profile["configs"]:
        c["stage_gap_s"] = [0.001] if c["pp"] == 1 else [0.0005, 0.0007]
        if tail:
            c["tail_margin"] = tail
    return dataclasses.replace(inst, profiles={"p": Profile.from_dict("p", profile, "p")})


def test_gap_occupies_the_stage_but_does_not_delay_the_request():
    """A lone request pays its stages' latencies only; the next one waits for the gap too."""
    inst = _gap_instance(None)
    req = Requests(np.array([0.0, 0.0]), np.zeros(2, dtype=np.int32), np.full(2, np.inf), 1.0)
    alone = run_groups(inst, GROUPS[:1], req)  # the one-GPU group: 10 ms latency, 1 ms gap
    assert alone.finish[0] - 0.0005 == pytest.approx(0.01)  # no gap in its latency
    assert alone.finish[1] - 0.0005 == pytest.approx(0.011 + 0.01)  # waits until the stage's gap is over
    assert alone.clocks[0] == pytest.approx(0.022)
    pipe = run_groups(inst, GROUPS[2:], req)  # 6 + 5 ms, gaps 0.5 and 0.7 ms
    assert pipe.finish[0] - 0.0005 == pytest.approx(0.011)  # neither gap paid
    assert pipe.finish[1] - 0.0005 == pytest.approx(0.0065 + 0.006 + 0.005)  # second starts after stage 0's gap
    np.testing.assert_allclose(pipe.clocks, [0.013, 0.0182])


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
@pytest.mark.parametrize("warm", [None, WARM])
@pytest.mark.parametrize("tail", [0.0, 0.05])
def test_dispatcher_follows_the_gaps_of_the_simulator(dispatch, warm, tail):
    inst = _gap_instance(warm, dispatch, tail=tail)
    req = inst.requests()
    res = run_groups(inst, GROUPS, req)
    d = Dispatcher(inst, GROUPS)
    decisions = [d.decide(int(req.model[i]), float(req.arrival[i]), float(req.deadline[i])) for i in range(len(req))]
    assert 0 < res.accepted < len(req)
    np.testing.assert_array_equal(res.group, [x.group for x in decisions])
    np.testing.assert_allclose(res.finish, [x.finish for x in decisions], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.clocks, d.clocks, rtol=0, atol=1e-12)
    # the gaps change the admission (without them the same requests get other outcomes)
    plain = run_groups(_instance(warm, dispatch, 80.0), GROUPS, req)
    assert not np.array_equal(plain.finish, res.finish)


def test_tail_margin_rejects_requests_behind_long_busy_periods():
    """The margin grows with the busy period (the request's own time included): it rejects more."""
    plain, margin = _gap_instance(WARM), _gap_instance(WARM, tail=0.05)
    a, b = run_groups(plain, GROUPS, plain.requests()), run_groups(margin, GROUPS, margin.requests())
    assert b.accepted < a.accepted
    for deadline, accepted in ((0.00891, 1), (0.00889, 0)):  # alone: cold 8 ms + 0.5 ms overhead + 5% of 8 ms
        req = Requests(np.array([0.0]), np.zeros(1, dtype=np.int32), np.array([deadline]), 1.0)
        assert run_groups(margin, GROUPS[:1], req).accepted == accepted
    with pytest.raises(InputError, match="tail_margin"):
        _config({"tail_margin": 0.9})


def test_tail_margin_fit_measures_the_drift_of_a_slow_saturated_stage(tmp_path):
    """A stage that really takes 2% longer than the clock, queued for its whole run: the fitted
    margin is about 2% of the busy time (the drift grows with it), and the fit of a stage that
    keeps its clock is 0."""
    inst = _instance(None)
    placement = Placement(groups=GROUPS[:1])
    arrivals = np.arange(200) * 0.009  # 10 ms stage at 9 ms spacing: the queue never drains
    for slowdown, expected in ((1.02, 0.02), (1.0, 0.0)):
        rows, free = [], 0.0
        for i, a in enumerate(arrivals):
            start = max(a, free)
            free = start + 0.01 * slowdown
            rows.append({"request": i, "model": "a", "arrival_s": a, "group": 0, "admitted": 1, "dispatch_s": a,
                         "stage0_start_s": start, "stage0_end_s": free, "finish_s": free})
        path = tmp_path / f"requests-{slowdown}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        fit = tail_margins(inst, [(str(path), placement)])[(1, 1)]
        assert fit["requests"] > 150 and fit["tail_margin"] == pytest.approx(expected, abs=2e-3)
