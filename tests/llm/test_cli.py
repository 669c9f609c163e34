"""``placeopt solve`` and ``placeopt simulate`` on an LLM instance, and input errors."""

import json
import os

from click.testing import CliRunner

from placement_opt.cli.main import cli as main

from .helpers import SMALL


def test_solve_then_simulate(tmp_path):
    out = tmp_path / "placement.json"
    runner = CliRunner()
    r = runner.invoke(main, ["solve", SMALL, "--solver", "muxserve", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "throughput (req/s)" in r.output
    placement = json.loads(out.read_text())
    assert placement["provenance"]["solver"] == "muxserve"
    r = runner.invoke(main, ["simulate", SMALL, str(out), "--json"])
    assert r.exit_code == 0, r.output
    metrics = json.loads(r.output)
    assert metrics["throughput_rps"] == placement["metrics"]["throughput_rps"]
    assert set(metrics["per_model"]) == {"llm-00-13b", "llm-01-7b", "llm-02-7b", "llm-03-13b"}


def test_bad_llm_section_is_a_one_line_error(tmp_path):
    with open(SMALL) as f:
        data = json.load(f)
    data["llm"]["polcy"] = "adbs"
    base = os.path.dirname(SMALL)
    data["cost_tables"] = {k: os.path.join(base, v) for k, v in data["cost_tables"].items()}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = CliRunner().invoke(main, ["validate", str(bad)])
    assert r.exit_code == 2
    assert "llm.polcy" in r.output and "Traceback" not in r.output


def test_compare_llm_solvers():
    r = CliRunner().invoke(main, ["compare", SMALL, "--solvers", "muxserve,spatial,temporal", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("{"):])["results"]
    assert [row["solver"] for row in rows] == ["muxserve", "spatial", "temporal"]
    assert all(0 <= row["slo_attainment"] <= 1 for row in rows)
