"""End to end on CPU: placeopt solve, then placeopt execute --backend gloo on the tiny instance."""

import csv
import json
import os

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from placement_opt import load_instance, load_placement  # noqa: E402
from placement_opt.cli.main import cli  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "instances", "tiny", "executor-cpu.json")


def test_solve_then_execute(tmp_path):
    runner = CliRunner()
    placement = tmp_path / "p.json"
    r = runner.invoke(cli, ["solve", TINY, "-o", str(placement)])
    assert r.exit_code == 0, r.output
    out = tmp_path / "run"
    # 6 of the instance's 30 s keep CI short; `placeopt execute` without --duration replays all of it
    r = runner.invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "--duration", "6",
                            "--hang-timeout", "20", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    measured = json.loads((out / "metrics.json").read_text())
    simulated = json.loads((out / "simulated.json").read_text())
    inst = load_instance(TINY)
    n = int((inst.requests().arrival < 6).sum())
    assert measured["requests"] == simulated["requests"] == n > 50
    assert f"execute trial 1: 100%" in r.stderr and f"{n}/{n} [" in r.stderr  # the bar ends at every request
    # the same metrics JSON as `placeopt simulate`
    assert set(measured) == set(simulated)
    assert summary["status"] == "complete" and summary["unfinished"] == 0
    assert summary["admitted"] == simulated["accepted"]  # same admission rule as the simulator
    # lenient on timing (shared CI CPUs): most admitted requests really met their SLO
    assert measured["slo_attainment"] >= 0.5 * simulated["slo_attainment"]
    with open(out / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == n
    served = [r for r in rows if r["admitted"] == "1"]
    for r in served:
        assert float(r["arrival_s"]) <= float(r["stage0_start_s"]) <= float(r["stage0_end_s"]) == float(r["finish_s"])
    groups = load_placement(str(placement)).groups
    assert {int(r["group"]) for r in served} == set(range(len(groups)))


def test_input_errors_are_one_line(tmp_path):
    inst = json.loads(open(TINY).read())
    del inst["models"][0]["architecture"]
    inst["profiles"]["tiny-transformer"] = os.path.join(ROOT, "instances", "tiny", "executor-cpu-profile.json")
    bad = tmp_path / "no-arch.json"
    bad.write_text(json.dumps(inst))
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    r = CliRunner().invoke(cli, ["execute", str(bad), str(placement), "--backend", "gloo", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "models[tiny-a].architecture: the executor builds models from their architecture" in r.output
    inst = json.loads(open(TINY).read())
    inst["models"][0]["weights"] = "missing.safetensors"
    inst["profiles"]["tiny-transformer"] = os.path.join(ROOT, "instances", "tiny", "executor-cpu-profile.json")
    bad.write_text(json.dumps(inst))
    r = CliRunner().invoke(cli, ["execute", str(bad), str(placement), "--backend", "gloo", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "models[tiny-a].weights:" in r.output


def test_pipeline_placement_over_slo_scales(tmp_path):
    placement = tmp_path / "pipeline.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0, 1], "pp": 2, "tp": 1,
                                                 "models": ["tiny-a", "tiny-b"]}]}))
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "--duration", "3",
                                 "--slo-scale", "5,20", "--warmup", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    trials = json.loads((out / "trials.json").read_text())
    assert [t["trial"] for t in trials] == ["slo-5", "slo-20"]
    assert all(t["status"] == "complete" and t["unfinished"] == 0 for t in trials)
    loose, tight = (json.loads((out / name / "simulated.json").read_text()) for name in ("slo-20", "slo-5"))
    assert loose["accepted"] >= tight["accepted"]
    with open(out / "slo-20" / "requests.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1"]
    assert rows
    for row in rows:  # the activation goes from stage 0 to stage 1
        assert float(row["stage0_end_s"]) <= float(row["stage1_start_s"]) <= float(row["stage1_end_s"])
        assert float(row["stage1_end_s"]) == float(row["finish_s"])


def test_output_dir_that_is_a_file_is_an_input_error(tmp_path):
    """-o naming an existing file is refused before any worker starts (was a FileExistsError traceback)."""
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    taken = tmp_path / "taken"
    taken.write_text("")
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "-o", str(taken)])
    assert r.exit_code == 2, r.output
    assert "--output-dir: exists and is not a folder" in r.output


def test_cpu_workers_that_cannot_fit_host_memory_are_refused(monkeypatch):
    """A gloo run whose fp32 weights exceed the host's memory is an input error before any
    worker starts (it used to spawn one process per device and exhaust the host)."""
    from placement_opt.errors import InputError
    from placement_opt.executor import controller
    from placement_opt.placement import Group, Placement

    inst = load_instance(TINY)
    placement = Placement(groups=(Group(devices=(0,), pp=1, tp=1, models=("tiny-a",)),
                                  Group(devices=(1,), pp=1, tp=1, models=("tiny-b",))))
    controller.check_executable(inst, placement, "gloo")  # fits the real host
    monkeypatch.setattr(controller, "host_memory_bytes", lambda: 10**6)
    with pytest.raises(InputError, match="groups: the CPU workers would hold"):
        controller.check_executable(inst, placement, "gloo")


def _execute_variant(tmp_path, edit):
    """`placeopt execute` of tiny-a alone on a copy of the tiny instance changed by ``edit``."""
    inst = json.loads(open(TINY).read())
    edit(inst)
    inst["profiles"]["tiny-transformer"] = os.path.join(ROOT, "instances", "tiny", "executor-cpu-profile.json")
    variant = tmp_path / "variant.json"
    variant.write_text(json.dumps(inst))
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    return CliRunner().invoke(cli, ["execute", str(variant), str(placement), "--backend", "gloo",
                                    "-o", str(tmp_path / "o")])


def test_dispatch_input_errors_come_before_any_worker_starts(tmp_path, monkeypatch):
    """simulator.batching (which the executor cannot replay) is refused before the workers
    are spawned and build their models (it used to be found only when the first trial began)."""
    from placement_opt.executor import controller

    def no_workers(*args, **kwargs):
        raise AssertionError("workers were started")

    monkeypatch.setattr(controller, "_Workers", no_workers)
    r = _execute_variant(tmp_path, lambda inst: inst["simulator"].update(batching=True))
    assert r.exit_code == 2, r.output
    assert "simulator.batching" in r.output


def test_repeated_slo_scales_are_an_input_error(tmp_path):
    """Two equal --slo-scale values would write the same slo-X folder, the second trial
    overwriting the first; they are refused up front."""
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "--slo-scale", "2,1.5,2.0",
                                 "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert "--slo-scale: 2 is repeated" in r.output


@pytest.mark.parametrize("flag", ["--policy=fcfs", "--job-trace"])
def test_llm_only_options_on_a_dnn_instance_are_input_errors(tmp_path, flag):
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", flag, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert flag.split("=")[0] in r.output and "LLM instances" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("flag,value", [("--duration", "nan"), ("--hang-timeout", "inf"), ("--start-timeout", "nan"),
                                        ("--slo-scale", "2,nan")])
def test_non_finite_numbers_are_input_errors(tmp_path, flag, value):
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["tiny-a"]}]}))
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", flag, value,
                                 "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert flag in r.output and "Traceback" not in r.output


def test_closed_loop_admission_end_to_end(tmp_path):
    """`--admission closed-loop` on the 2-stage pipeline: recorded in the summary, and no admitted
    request is predicted to leave stage 0 before the request ahead of it that had already been
    measured leaving it (10 ms before the dispatch, so its report was read)."""
    placement = tmp_path / "pipeline.json"
    placement.write_text(json.dumps({"groups": [{"devices": [0, 1], "pp": 2, "tp": 1,
                                                 "models": ["tiny-a", "tiny-b"]}]}))
    out = tmp_path / "run"
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "--duration", "4",
                                 "--slo-scale", "5", "--warmup", "1", "--admission", "closed-loop", "-o", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["unfinished"] == 0
    assert summary["admission"] == "closed-loop" and summary["admitted"] > 20
    assert summary["clock_corrections"] >= 0 and summary["clock_correction_max_s"] >= 0.0
    with open(out / "requests.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["admitted"] == "1"]
    checked = 0
    for ahead, row in zip(rows, rows[1:]):
        if float(ahead["stage0_end_s"]) < float(row["dispatch_s"]) - 0.01:
            assert float(row["stage0_predicted_end_s"]) > float(ahead["stage0_end_s"])
            checked += 1
    assert checked > 10
    late_ends = sum(float(x["stage0_end_s"]) > float(x["stage0_predicted_end_s"]) for x in rows)
    if late_ends:  # the CPU ran slower than the profile somewhere: the clocks were corrected
        assert summary["clock_corrections"] > 0 and summary["clock_correction_max_s"] > 0.0
    r = CliRunner().invoke(cli, ["execute", TINY, str(placement), "--backend", "gloo", "--admission", "sideways"])
    assert r.exit_code == 2 and "--admission" in r.output
