"""placeopt space / evaluate / compare."""

import json
import os

from click.testing import CliRunner

from placement_opt.cli.main import cli

from .helpers import ROOT, data


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_space_counts(tmp_path):
    r = run("space", data("tiny-4gpu-mixed"), "--json")
    assert r.exit_code == 0, r.output
    levels = json.loads(r.output)["levels"]
    assert levels["greedy_calls"]["kept"] >= 1
    assert all(v["unpruned"] is None or v["kept"] <= v["unpruned"] for v in levels.values())
    r = run("space", data("tiny-4gpu-mixed"), "-O", "bucket_threshold=2.0")
    assert r.exit_code == 0 and "greedy calls" in r.output
    r = CliRunner().invoke(cli, ["space", data("tiny-4gpu-mixed"), "-O", "nope=1"])
    assert r.exit_code == 2 and "nope" in r.output


def test_compare_json_and_table():
    r = run("compare", data("tiny-4gpu-bert"), "--solvers", "alpaserve,selective-replication,round-robin",
            "-O", "progress=false", "-O", "alpaserve:backend=serial", "--json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("{"):])["results"]
    assert [x["solver"] for x in rows] == ["alpaserve", "selective-replication", "round-robin"]
    assert rows[0]["slo_attainment"] >= max(x["slo_attainment"] for x in rows[1:])
    assert all(x["groups_used"] >= 1 and x["solve_s"] >= 0 for x in rows)
    r = run("compare", data("tiny-4gpu-bert"), "--solvers", "round-robin,mp-equal")
    assert r.exit_code == 0 and "p99 latency" in r.output
    r = CliRunner().invoke(cli, ["compare", data("tiny-4gpu-bert"), "--solvers", "nosuch"])
    assert r.exit_code == 2 and "unknown solver" in r.output


def test_evaluate_on_other_workload(tmp_path):
    plc = tmp_path / "p.json"
    r = run("solve", data("tiny-4gpu-bert"), "--solver", "selective-replication", "-o", str(plc))
    assert r.exit_code == 0, r.output
    heavy = tmp_path / "heavy.json"
    heavy.write_text(json.dumps({"duration_s": 60, "arrival": {"process": "gamma", "rate": 40, "cv": 4},
                                 "slo": {"scale": 5}}))
    r = run("evaluate", data("tiny-4gpu-bert"), str(plc), "--workload", str(heavy), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["other_workload"]["requests"] > out["own_workload"]["requests"]
    assert out["other_workload"]["slo_attainment"] < out["own_workload"]["slo_attainment"]
    # an instance file works as the other workload too
    r = run("evaluate", data("tiny-4gpu-bert"), str(plc), "--workload", data("tiny-4gpu-bert"))
    assert r.exit_code == 0 and "other workload" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"duration_s": -1}))
    r = CliRunner().invoke(cli, ["evaluate", data("tiny-4gpu-bert"), str(plc), "--workload", str(bad)])
    assert r.exit_code == 2 and "duration_s" in r.output


def test_evaluate_refuses_a_workload_the_instance_would_refuse(tmp_path):
    """The other workload gets the instance's own checks: model names, MMPP switching and request
    volume (these used to hang or run out of memory with a traceback), and --seed must be >= 0."""
    plc = tmp_path / "p.json"
    assert run("solve", data("tiny-4gpu-bert"), "--solver", "round-robin", "-o", str(plc)).exit_code == 0
    cases = [({"duration_s": 10, "arrival": {"process": "mmpp", "rates": [1, 1], "switch_rates": [1e9, 1e9]}},
              "switch_rates"),
             ({"duration_s": 1e8, "arrival": {"process": "poisson", "rate": 1e4}}, "expected requests"),
             ({"duration_s": 10, "arrival": {"process": "poisson", "rate": 1},
               "per_model": {"nosuch": {"process": "poisson", "rate": 1}}}, "no model named 'nosuch'")]
    for i, (workload, needle) in enumerate(cases):
        path = tmp_path / f"w{i}.json"
        path.write_text(json.dumps({**workload, "slo": {"scale": 5}}))
        r = CliRunner().invoke(cli, ["evaluate", data("tiny-4gpu-bert"), str(plc), "--workload", str(path)])
        assert r.exit_code == 2 and needle in r.output and str(path) in r.output, r.output
    r = CliRunner().invoke(cli, ["evaluate", data("tiny-4gpu-bert"), str(plc), "--workload",
                                 data("tiny-4gpu-bert"), "--seed", "-1"])
    assert r.exit_code == 2 and "--seed" in r.output, r.output


def test_compare_checks_time_limit_and_seed():
    for args, needle in ((["--time-limit", "nan"], "--time-limit"), (["--time-limit", "inf"], "--time-limit"),
                         (["--seed", "-3"], "--seed")):
        r = CliRunner().invoke(cli, ["compare", data("tiny-4gpu-bert"), "--solvers", "round-robin", *args])
        assert r.exit_code == 2 and needle in r.output, r.output


def test_compare_checks_every_solver_before_solving():
    """A solver of the wrong family is refused up front, naming the instance file."""
    path = os.path.join(ROOT, "instances", "tiny", "two-models.json")
    r = CliRunner().invoke(cli, ["compare", path, "--solvers", "round-robin,muxserve"])
    assert r.exit_code == 2
    assert "solving" not in r.output
    assert "two-models.json: solver: solver 'muxserve' does not solve non-LLM instances" in r.output


def test_compare_shows_throughput_on_llm_instances():
    path = os.path.join(ROOT, "instances", "muxserve", "small-4llm-4gpu.json")
    r = CliRunner().invoke(cli, ["compare", path, "--solvers", "spatial", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["results"][0]
    assert row["throughput_rps"] > 0 and row["throughput_weighted_rps"] > 0
