"""``placeopt parallelize``: plan, config list, JSON, and one-line input errors."""

import json

from click.testing import CliRunner

from placement_opt.cli.main import cli

INSTANCE = {
    "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu": {"name": "V100-16GB", "memory_gb": 16, "usable_memory_gb": 13.96}},
    "profiles": {"measured": {"derive": {"latency_s": 0.15, "weight_gb": 2.6, "max_gpus": 8}}},
    "models": [{"name": "bert", "count": 3, "architecture": {"layers": 24, "hidden": 2048, "heads": 32}},
               {"name": "p", "profile": "measured"}],
    "workload": {"duration_s": 10, "arrival": {"process": "poisson", "rate": 2.0}, "rate_split": {"kind": "equal"},
                 "slo": {"scale": 5}},
}


def _run(tmp_path, *args):
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(INSTANCE))
    return CliRunner().invoke(cli, ["parallelize", str(path), *args])


def test_plan_text_and_json(tmp_path):
    res = _run(tmp_path, "--model", "bert-1", "--gpus", "4", "--pp", "2", "--tp", "2")
    assert res.exit_code == 0, res.output
    assert "qkv=column" in res.output and "mlp_down=row+all-reduce" in res.output
    res = _run(tmp_path, "--model", "bert-1", "--gpus", "4", "--pp", "2", "--tp", "2", "--json")
    d = json.loads(res.output)
    assert d["pp"] == 2 and len(d["stages"]) == 2 and d["fits_memory"]
    assert d["sharding"]["transformer"]["fast"]["collectives"] == {"all-reduce": 2}
    res = _run(tmp_path, "--model", "bert-0", "--gpus", "4", "--json", "--solver", "highs")
    configs = json.loads(res.output)["configs"]
    assert [(c["pp"], c["tp"]) for c in configs] == [(4, 1), (2, 2), (1, 4)]


def test_input_errors_are_one_line(tmp_path):
    for args, field in [(["--model", "nope", "--gpus", "2"], "--model"),
                        (["--model", "p", "--gpus", "2"], "--model"),
                        (["--model", "bert-0", "--gpus", "4", "--pp", "2"], "--pp/--tp"),
                        (["--model", "bert-0", "--gpus", "4", "--pp", "3", "--tp", "2"], "n_gpus")]:
        res = _run(tmp_path, *args)
        assert res.exit_code == 2
        assert f"placeopt: error: {field}:" in res.output
        assert "Traceback" not in res.output
