"""Engine generation v3g: the executor's SM partitions from one split of the whole device, its
engine rounds and H200 calibration, and its runs on one H200 (docs/fidelity-llm.md "One split of
the device: SM partitions alike")."""

from __future__ import annotations

import json
import os

import numpy as np

from .helpers import ROOT, load_benchmark

FIDELITY = os.path.join(ROOT, "benchmarks", "fidelity", "llm")
LAYOUT = "one-split of 24-SM groups"


def _steps_alone(script, name):
    """An H200 engine round's LLMs in launch order, their decode steps alone (ms) and its run."""
    with open(os.path.join(FIDELITY, "engine-h200", f"{name}.json")) as f:
        data = json.load(f)
    [run] = [r for r in data["runs"] if r["mechanism"] == "green-contexts"]
    return [p["model"] for p in run["per_llm"]], {p["model"]: script.step_alone_ms(p) for p in run["per_llm"]}, run


def test_the_partitions_of_one_split_run_a_decode_step_alike():
    """Five copies of ``llm-8b`` (batch 16, context 512, 24 SMs each): the sequential splits ran the
    fifth 14% slower alone (``engine-order-five-8b-copies-*``); one split runs all five within 1%.
    The five LLMs with ``llm-8b`` fifth or first: every LLM's step alone within 3% between the two
    orders, ``llm-8b``'s within 1% (sequential splits: 16-20% slower fifth)."""
    script = load_benchmark("llm_fidelity")
    names, copies, run = _steps_alone(script, "one-split-copies-8b-b16-c512")
    assert run["sm_layout"] == LAYOUT and run["sm_counts"] == [24] * 5
    assert names == [f"llm-8b-p{i}" for i in range(1, 6)] and max(copies.values()) / min(copies.values()) < 1.01
    last_order, last, _ = _steps_alone(script, "one-split-b16-c512")
    first_order, first, _ = _steps_alone(script, "one-split-8b-first-b16-c512")
    assert last_order[-1] == "llm-8b" and first_order[0] == "llm-8b" and sorted(last) == sorted(first)
    assert all(abs(last[m] / first[m] - 1) < 0.03 for m in last) and abs(last["llm-8b"] / first["llm-8b"] - 1) < 0.01


def test_v3g_s_h200_calibration_is_v3s_s_with_its_own_fields_measured_anew():
    """``calibration-v3g-h200.json`` is v3s's H200 calibration but for the contention rate, refitted
    on the one-split rounds (9500 -> 9600 GB/s: the layout barely moves it), the speed a decode
    step keeps beside its own LLM's prefill, measured on one H200's job traces (0.25, the H100's,
    -> 0.55), the decode step on SM partitions, fitted on the unequal-share runs' traces (none
    in v3s's: ``test_partition_decode.py``), and the prefill beside its own decode step with its
    stretch beside the other LLMs' jobs (``test_own_decode_prefill.py``). v3g's own file is v3s's."""
    script = load_benchmark("llm_fidelity")
    [gpu] = script.GENERATIONS["v3g"].gpus
    assert gpu.engines == script.H200_ONE_SPLIT_ROUNDS and gpu.traces == script.H200_TRACES and gpu.fit_own_prefill
    files = {}
    for name in ("v3s", "v3s-h200", "v3g", "v3g-h200"):
        with open(os.path.join(FIDELITY, f"calibration-{name}.json")) as f:
            files[name] = {k: v for k, v in json.load(f).items() if k != "fit"}
    assert files["v3g"] == files["v3s"]
    old, new = files["v3s-h200"], files["v3g-h200"]
    assert {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)} == {
        "contention_hbm_gbps", "own_prefill_decode_share", "decode_partition_stretch", "decode_partition_request_s",
        "own_decode_prefill_share", "prefill_beside_gbps", "prefill_beside_requests", "prefill_beside_share_power"}
    assert (old["contention_hbm_gbps"], new["contention_hbm_gbps"]) == (9500.0, 9600.0)
    assert (old["own_prefill_decode_share"], new["own_prefill_decode_share"]) == (0.25, 0.55)
    hbm, rms = script.fit_contention(script.engine_rounds(gpu.engines), gpu.rounds)[:2]
    assert hbm == new["contention_hbm_gbps"] and rms < 0.035


def test_own_prefill_slowdowns_compare_a_step_beside_its_llm_s_prefill_with_its_clear_neighbours():
    """Only a decode step at least 80% beside a prefill of its own LLM (same mesh) counts, against
    the mean of its nearest steps (two either side) clear of one."""
    script = load_benchmark("llm_fidelity")

    def job(llm, kind, start, end, group=0, requests=1, longest=100):
        return {"group": group, "llm": llm, "kind": kind, "device_start_s": start, "device_end_s": end,
                "requests": requests, "longest_context": longest}

    jobs = [job("a", "prefill", 2.0, 4.0), *(job("a", "decode", a, b) for a, b in
                                             ((0, 1), (1, 2), (2, 4), (4, 5), (5, 6.5), (6.5, 7), (7.4, 8.4))),
            job("a", "prefill", 7.0, 7.5), job("b", "decode", 2.0, 3.0), job("a", "decode", 2.0, 5.0, group=1)]
    # a's step (2, 4) twice as long as its clear neighbours (mean 1.125); (7.4, 8.4) only 10% beside
    # a prefill; b's step beside another LLM's prefill and a's step on another mesh: none
    assert script.own_prefill_slowdowns(jobs) == [2.0 / 1.125]
    # with its LLM and the padded prompt of the prefill it lies beside (3 requests, longest 50)
    jobs[0] = job("a", "prefill", 2.0, 4.0, requests=3, longest=50)
    assert script.own_prefill_steps(jobs) == [("a", 2.0 / 1.125, 150)]
    # prefills nested in one another count once, as their union: the step (15, 16) lies in (10, 20)
    nested = [job("c", "prefill", 10.0, 20.0), job("c", "prefill", 11.0, 12.0),
              *(job("c", "decode", a, a + 1.0) for a in (7.0, 8.0, 15.0, 21.0, 22.0))]
    assert script.own_prefill_slowdowns(nested) == [1.0]


def test_the_share_is_the_grid_value_nearest_the_measured_slowdown_inside_the_grid():
    """Bisection over :data:`OWN_PREFILL_SHARES` on a slowdown that falls as the share grows picks
    the value whose slowdown is nearest the measured (in log), and refuses one at the grid's end."""
    import pytest

    script = load_benchmark("llm_fidelity")
    slowdown = lambda share: 0.9 / share  # noqa: E731 - a stand-in for the simulated timelines
    assert script.nearest_share(slowdown, 1.8) == 0.5 and script.nearest_share(slowdown, 2.0) == 0.45
    assert script.OWN_PREFILL_SHARES[-1] < 1.0  # the setting's range ends below 1
    for measured in (5.0, 0.9):
        with pytest.raises(ValueError, match="end of its grid"):
            script.nearest_share(slowdown, measured)


def test_one_h200_s_traces_measure_a_decode_step_beside_its_own_prefill_near_half_speed():
    """On h200x3s16's adbs trace (one of the H200 calibration's fit runs) a decode step beside its
    own LLM's graph prefill runs 1.6-2.0x its clear neighbours (median); the simulator's timeline of
    the same requests gives that within 10% at v3g's share (0.55), and over 1.5x it at the H100's 0.25
    (docs/fidelity-llm.md "One split of the device")."""
    script = load_benchmark("llm_fidelity")
    with open(os.path.join(FIDELITY, "calibration-v3g-h200.json")) as f:
        calibration = json.load(f)
    run = script._find_run(script.H200_TRACES[0])
    measured = float(np.median(script.own_prefill_slowdowns(script.traced_jobs(run))))

    def simulated(share: float) -> float:
        return script.simulated_own_prefill_slowdown([run], calibration, share)

    assert 1.6 < measured < 2.0
    assert abs(simulated(calibration["own_prefill_decode_share"]) / measured - 1) < 0.1
    assert simulated(0.25) / measured > 1.5


def test_v3g_s_runs_measured_within_5pct_of_their_committed_predictions():
    """The 3 x load's policy ablation on one H200 with one split (seeds 19 and 20 again, fresh 29
    and 30), predicted and committed before they ran (``predictions/v3g-h200x3.jsonl``), and seed
    30's fcfs again on a fresh machine (``v3g-h200x3s30r.jsonl``, with the own-prefill share 0.5;
    one policy, so its run folder has no policy level): each ran with the one-split layout on the
    H200 its tables were profiled on, under the policy predicted, its total throughput within 5% of
    the committed prediction and every LLM's within 10%."""
    with open(os.path.join(FIDELITY, "predictions", "v3g-h200x3.jsonl")) as f:
        lines = [json.loads(line) for line in f.read().splitlines()]
    with open(os.path.join(FIDELITY, "predictions", "v3g-h200x3s30r.jsonl")) as f:
        [again] = [json.loads(line) for line in f.read().splitlines()]
    lines.append(dict(again, run=again["run"].rsplit("/", 1)[0]))
    assert len(lines) == 13 and {line["generation"] for line in lines} == {"v3g"}
    for line in lines:
        with open(os.path.join(FIDELITY, line["run"], "summary.json")) as f:
            summary = json.load(f)
        assert summary["policy"] == line["policy"]
        assert summary["tables_match_device"] is True and summary["tables_gpu"] == ["H200"]
        [worker] = summary["worker_info"].values()
        assert worker["sm_layout"] == LAYOUT and worker["sm_counts"] == [24] * 5
        measured = summary["measured"]
        assert abs(measured["throughput_rps"] / line["throughput_rps"] - 1) < 0.05, line["run"]
        for model, rps in line["per_llm_rps"].items():
            assert abs(measured["per_model"][model]["throughput_rps"] / rps - 1) < 0.10, (line["run"], model)
