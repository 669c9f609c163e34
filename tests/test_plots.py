"""Figures (issue 16.3): ``show --plot`` (device map; memory per GPU, or LLM SM shares and KV
pools) and ``simulate --plot`` (attainment, latency CDF; LLM throughput, TTFT/TPOT,
utilisation over time), rendered headless; a missing matplotlib is a one-line error."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from placement_opt import load_instance
from placement_opt.cli.main import cli
from placement_opt.plots import request_latencies
from placement_opt.simulate import simulate
from placement_opt.solvers import run_solver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DNN = os.path.join(ROOT, "tests", "search", "data", "tiny-4gpu-mixed.json")
LLM = os.path.join(ROOT, "instances", "muxserve", "small-4llm-4gpu.json")
PNG = b"\x89PNG\r\n\x1a\n"


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def is_png(path: str) -> bool:
    with open(path, "rb") as fh:
        data = fh.read()
    return data[:8] == PNG and len(data) > 10_000


@pytest.mark.parametrize("instance, solver", [(DNN, "alpaserve"), (LLM, "muxserve")], ids=["dnn", "llm"])
def test_show_and_simulate_plots(tmp_path, instance, solver):
    placement = str(tmp_path / "p.json")
    assert run_cli("solve", instance, "--solver", solver, "-o", placement).exit_code == 0
    for args in (["show", placement, "--plot", str(tmp_path / "show.png")],
                 ["show", placement, "--instance", instance, "--plot", str(tmp_path / "show-mem.png")],
                 ["simulate", instance, placement, "--plot", str(tmp_path / "sim.png")]):
        result = run_cli(*args)
        assert result.exit_code == 0, result.output
        assert is_png(args[-1]) and f"wrote {args[-1]}" in result.stderr


def test_latency_cdf_is_the_simulated_latencies():
    inst = load_instance(DNN)
    placement = run_solver(inst, "round-robin")
    lat = request_latencies(inst, placement)
    metrics = simulate(inst, placement)
    assert lat.size == metrics["accepted"]
    assert np.isclose(np.percentile(lat, 99), metrics["latency_p99_s"])


def test_missing_matplotlib_is_a_one_line_error(tmp_path, monkeypatch):
    placement = str(tmp_path / "p.json")
    assert run_cli("solve", DNN, "--solver", "round-robin", "-o", placement).exit_code == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    for args in (["show", placement, "--plot", str(tmp_path / "a.png")],
                 ["simulate", DNN, placement, "--plot", str(tmp_path / "b.png")],
                 ["sweep", DNN, "--vary", "rate_scale=1", "--solvers", "round-robin", "--plot", str(tmp_path / "c.png")]):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert lines == ["placeopt: error: --plot: matplotlib is not installed (pip install 'placeopt[plots]')"]
        assert not os.path.exists(args[-1])
