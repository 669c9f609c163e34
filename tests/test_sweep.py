"""``placeopt sweep`` (issue 16.2): points x solvers, training and held-out attainment, a
process pool, a CSV that an interrupted sweep resumes from, one-line errors."""

from __future__ import annotations

import csv
import os

import pytest
from click.testing import CliRunner

from placement_opt import load_instance
from placement_opt.cli import cmd_sweep
from placement_opt.cli.main import cli

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search", "data")
TINY = os.path.join(DATA, "tiny-4gpu-mixed.json")
ARGS = [TINY, "--vary", "rate_scale=0.5,2", "--vary", "slo_scale=2,8", "--solvers", "round-robin,selective-replication"]


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def rows_without_timing(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        return [{k: v for k, v in row.items() if k != "solve_s"} for row in csv.DictReader(fh)]


def test_sweep_rows_parallel_and_plot(tmp_path):
    out, png = str(tmp_path / "s.csv"), str(tmp_path / "s.png")
    result = run_cli("sweep", *ARGS, "--workers", "2", "-o", out, "--plot", png)
    assert result.exit_code == 0, result.output
    rows = rows_without_timing(out)
    assert len(rows) == 8  # 2 x 2 points, 2 solvers
    assert {(r["rate_scale"], r["slo_scale"]) for r in rows} == {("0.5", "2"), ("0.5", "8"), ("2", "2"), ("2", "8")}
    assert all(r["heldout_seeds"] == "1;2" and r["train_seed"] == "0" for r in rows)
    for r in rows:
        assert 0 <= float(r["heldout_min_attainment"]) <= float(r["heldout_attainment"]) <= 1
    # more load, fewer requests within their SLO; a looser SLO, more
    att = {(r["rate_scale"], r["slo_scale"], r["solver"]): float(r["train_attainment"]) for r in rows}
    assert att[("2", "8", "round-robin")] < att[("0.5", "8", "round-robin")]
    assert att[("0.5", "2", "round-robin")] < att[("0.5", "8", "round-robin")]
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    # the same sweep in one process gives the same rows
    serial = str(tmp_path / "serial.csv")
    assert run_cli("sweep", *ARGS, "--workers", "1", "-o", serial).exit_code == 0
    assert rows_without_timing(serial) == rows


def test_interrupted_sweep_resumes_only_missing_jobs(tmp_path, monkeypatch):
    full = str(tmp_path / "full.csv")
    assert run_cli("sweep", *ARGS, "--workers", "1", "-o", full).exit_code == 0
    calls = []
    real = cmd_sweep.run_job

    def interrupted(config, point, solver):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append((point["rate_scale"], point["slo_scale"], solver))
        return real(config, point, solver)

    part = str(tmp_path / "part.csv")
    monkeypatch.setattr(cmd_sweep, "run_job", interrupted)
    result = run_cli("sweep", *ARGS, "--workers", "1", "-o", part)
    assert result.exit_code == 130
    assert len(rows_without_timing(part)) == 3  # every finished job was saved
    with open(part) as fh:
        kept = fh.read().splitlines()[1:]
    calls.clear()
    monkeypatch.setattr(cmd_sweep, "run_job", lambda *job: (calls.append(job[1:]), real(*job))[1])
    result = run_cli("sweep", *ARGS, "--workers", "1", "-o", part)
    assert result.exit_code == 0, result.output
    assert len(calls) == 5 and "3 of 8 jobs done already" in result.stderr
    assert rows_without_timing(part) == rows_without_timing(full)
    with open(part) as fh:
        lines = fh.read().splitlines()
    assert all(line in lines for line in kept)  # rows computed before are kept verbatim
    calls.clear()
    assert run_cli("sweep", *ARGS, "--workers", "1", "-o", part).exit_code == 0 and not calls


def test_variants():
    inst = load_instance(TINY)
    base = cmd_sweep.base_settings(inst)
    v = cmd_sweep.variant(inst, {**base, "rate_scale": 2.0, "cv_scale": 0.5, "gpus": 2.0, "duration_s": 30.0})
    assert v.workload.process.rate == 2 * inst.workload.process.rate
    assert v.workload.process.cv == 0.5 * inst.workload.process.cv
    assert v.cluster.n_gpus == 2 and v.workload.duration_s == 30.0
    assert len(v.requests()) / 30.0 > 1.5 * len(inst.requests()) / 60.0


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("placeopt: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args, needles", [
    (["--vary", "speed=1,2"], ["--vary", "rate_scale"]),
    (["--vary", "rate_scale=1,x"], ["--vary rate_scale", "numbers"]),
    (["--vary", "rate_scale=-1"], ["--vary rate_scale", "positive"]),
    (["--vary", "gpus=6"], ["--vary gpus", "whole number of 4-GPU nodes"]),
    (["--vary", "gpus=2.5"], ["--vary gpus", "whole numbers"]),
    (["--vary", "rate_scale=1", "--seeds", "-1"], ["--seeds"]),
])
def test_bad_sweeps_are_one_line_errors(args, needles):
    assert_one_line_error(run_cli("sweep", TINY, "--solvers", "round-robin", *args), *needles)


def test_resume_refuses_another_configuration(tmp_path):
    out = str(tmp_path / "s.csv")
    args = [TINY, "--vary", "rate_scale=1", "--solvers", "round-robin", "--workers", "1", "-o", out]
    assert run_cli("sweep", *args).exit_code == 0
    assert_one_line_error(run_cli("sweep", *args, "--seeds", "1"), out, "heldout_seeds")
    with open(out, "w") as fh:
        fh.write("a,b\n1,2\n")
    assert_one_line_error(run_cli("sweep", *args), out, "not a placeopt sweep CSV")
