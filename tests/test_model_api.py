"""The library API: dataclass validation, JSON round trips, solve -> simulate, determinism,
``count`` expansion, profile references and SLO specifications."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from placement_opt import (Architecture, Cluster, GPUSpec, Group, InputError, Link, ModelSpec, Placement, Window,
                           instance_from_dict, load_instance, load_placement, simulate, solve)
from placement_opt.cli.main import cli

PROFILE = {"weight_gb": 2.0, "configs": [
    {"pp": 1, "tp": 1, "stage_latency_s": {"1": [0.2], "2": [0.3]}, "stage_weight_gb": [2.0]},
    {"pp": 2, "tp": 1, "stage_latency_s": {"1": [0.11, 0.1], "2": [0.16, 0.15]}, "stage_weight_gb": [1.0, 1.0]},
]}


def instance_dict(**overrides) -> dict:
    d = {
        "name": "api",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "V100", "memory_gb": 16, "usable_memory_gb": 13}},
        "profiles": {"small": PROFILE},
        "models": [{"name": "a", "profile": "small"}, {"name": "b", "profile": "small", "count": 3}],
        "workload": {"duration_s": 120, "arrival": {"process": "gamma", "rate": 12, "cv": 3}, "slo": {"scale": 4}},
        "solver": {"name": "selective-replication"},
        "seed": 5,
    }
    d.update(overrides)
    return d


def gpu() -> GPUSpec:
    return GPUSpec("V100", 16e9, 13e9, 125e12, 900e9)


def test_dataclass_validation():
    link = Link(100e9, 1e-6)
    with pytest.raises(InputError, match="at least one node"):
        Cluster(nodes=0, gpus_per_node=8, gpu=gpu(), intra_node_link=link, inter_node_link=link)
    with pytest.raises(InputError, match="exceeds"):
        GPUSpec("V100", 16e9, 17e9, 125e12, 900e9)
    with pytest.raises(InputError, match="not divisible"):
        Architecture(layers=2, hidden=100, heads=3)
    with pytest.raises(InputError, match="unknown dtype"):
        Architecture(layers=2, hidden=96, heads=3, dtype="fp8x")
    with pytest.raises(InputError, match="architecture or a profile"):
        ModelSpec(name="x")
    with pytest.raises(InputError, match="pp x tp"):
        Group(devices=(0, 1, 2), pp=2, tp=1)
    cluster = Cluster(nodes=2, gpus_per_node=4, gpu=gpu(), intra_node_link=link, inter_node_link=link)
    assert cluster.n_gpus == 8 and cluster.node_of(5) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cluster.nodes = 3  # type: ignore[misc]


def test_from_dict_errors_name_the_field():
    with pytest.raises(InputError) as e:
        instance_from_dict(instance_dict(cluster={"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "V100"}}))
    assert e.value.field == "cluster.gpu.memory_gb" and "missing" in e.value.reason


def test_count_expansion():
    inst = instance_from_dict(instance_dict())
    assert inst.model_names == ["a", "b-0", "b-1", "b-2"]
    assert all(m.profile == "small" for m in inst.models)
    assert inst.model_index("b-2") == 3


def test_profiles_inline_or_path_relative_to_the_instance(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "small.json").write_text(json.dumps(PROFILE))
    (tmp_path / "inline.json").write_text(json.dumps(instance_dict()))
    (tmp_path / "by-path.json").write_text(json.dumps(instance_dict(profiles={"small": "profiles/small.json"})))
    inline = load_instance(str(tmp_path / "inline.json"))
    by_path = load_instance(str(tmp_path / "by-path.json"))
    for pp_tp in [(1, 1), (2, 1)]:
        a, b = inline.profiles["small"].config(*pp_tp), by_path.profiles["small"].config(*pp_tp)
        np.testing.assert_array_equal(a.stage_latency, b.stage_latency)
        assert a.batch_sizes == b.batch_sizes and a.stage_weight_bytes == b.stage_weight_bytes
    np.testing.assert_array_equal(inline.slo_seconds(), by_path.slo_seconds())
    np.testing.assert_array_equal(inline.requests().arrival, by_path.requests().arrival)
    # the path is relative to the instance file, not to the working directory
    assert by_path.profiles["small"].weight_bytes == 2e9


def test_in_memory_instance_matches_the_file(tmp_path):
    (tmp_path / "i.json").write_text(json.dumps(instance_dict()))
    from_file = load_instance(str(tmp_path / "i.json"))
    in_memory = instance_from_dict(instance_dict())
    np.testing.assert_array_equal(from_file.requests().arrival, in_memory.requests().arrival)
    assert from_file.sha256 and in_memory.sha256 and from_file.name == in_memory.name == "api"


def test_slo_scale_and_seconds():
    inst = instance_from_dict(instance_dict())
    np.testing.assert_allclose(inst.slo_seconds(), [4 * 0.2] * 4)  # scale x the one-GPU latency
    inst = instance_from_dict(instance_dict(workload={"duration_s": 10, "arrival": {"process": "poisson", "rate": 1},
                                                      "slo": {"seconds": 0.75}}))
    np.testing.assert_allclose(inst.slo_seconds(), [0.75] * 4)
    models = [{"name": "a", "profile": "small", "slo_s": 2.0}, {"name": "b", "profile": "small", "slo_scale": 10}]
    inst = instance_from_dict(instance_dict(models=models))
    np.testing.assert_allclose(inst.slo_seconds(), [2.0, 10 * 0.2])
    req = inst.requests()
    np.testing.assert_allclose(req.deadline - req.arrival, inst.slo_seconds()[req.model])


def test_placement_json_round_trip():
    p = Placement(
        groups=(Group(devices=(0, 1), pp=2, tp=1, models=("a", "b-0"), stage_layers=((0, 12), (12, 24))),
                Group(devices=(2,), models=("b-1",))),
        windows=(Window(0.0, (Group(devices=(0,), models=("a",)),)), Window(60.0, (Group(devices=(1,)),))),
        metrics={"slo_attainment": 0.5, "per_model": {"a": {"requests": 3}}},
        provenance={"solver": "round-robin", "seed": 1},
    )
    back = Placement.from_json(p.to_json())
    assert back == p
    assert Placement.from_json(back.to_json()).to_json() == p.to_json()


def test_solve_writes_what_simulate_reads(tmp_path):
    (tmp_path / "i.json").write_text(json.dumps(instance_dict()))
    runner = CliRunner()
    result = runner.invoke(cli, ["solve", str(tmp_path / "i.json"), "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    written = load_placement(str(tmp_path / "p.json"))
    assert written.provenance["solver"] == "selective-replication" and written.provenance["seed"] == 5
    assert len(written.provenance["instance_sha256"]) == 64
    result = runner.invoke(cli, ["simulate", str(tmp_path / "i.json"), str(tmp_path / "p.json"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == written.metrics
    result = runner.invoke(cli, ["show", str(tmp_path / "p.json")])
    assert result.exit_code == 0 and "SLO attainment" in result.stdout
    result = runner.invoke(cli, ["validate", str(tmp_path / "p.json")])
    assert result.exit_code == 0 and "valid placement" in result.stdout


def test_solve_json_output_parses(tmp_path):
    (tmp_path / "i.json").write_text(json.dumps(instance_dict()))
    result = CliRunner().invoke(cli, ["solve", str(tmp_path / "i.json"), "--solver", "round-robin", "--json"])
    assert result.exit_code == 0
    placement = Placement.from_json(result.stdout)
    assert placement.provenance["solver"] == "round-robin"
    assert placement.metrics["requests"] > 0


@pytest.mark.parametrize("solver", ["round-robin", "selective-replication"])
def test_determinism(solver):
    inst = instance_from_dict(instance_dict())
    first = solve(inst, solver=solver, seed=3)
    second = solve(instance_from_dict(instance_dict()), solver=solver, seed=3)
    assert first.groups == second.groups
    assert first.metrics == second.metrics
    strip = lambda p: {k: v for k, v in p.provenance.items() if k not in ("wall_time_s", "search")}  # noqa: E731
    assert strip(first) == strip(second)
    assert simulate(inst, first, seed=3) == first.metrics  # the seed drew the workload


def test_simulate_with_another_seed_changes_the_workload_only():
    inst = instance_from_dict(instance_dict())
    placement = solve(inst, solver="round-robin")
    again = simulate(inst, placement, seed=inst.seed)
    assert again == placement.metrics
    other = simulate(inst, placement, seed=inst.seed + 1)
    assert other["requests"] != placement.metrics["requests"] or other != placement.metrics


def test_metrics_fields():
    inst = instance_from_dict(instance_dict())
    m = solve(inst, solver="round-robin").metrics
    for key in ("requests", "accepted", "slo_attainment", "goodput_rps", "latency_mean_s", "latency_p50_s",
                "latency_p90_s", "latency_p99_s", "per_model", "group_busy_fraction"):
        assert key in m
    assert m["accepted"] == sum(v["accepted"] for v in m["per_model"].values())
    assert m["slo_attainment"] == pytest.approx(m["accepted"] / m["requests"])
    assert m["goodput_rps"] == pytest.approx(m["accepted"] / 120)
    assert m["latency_p50_s"] <= m["latency_p90_s"] <= m["latency_p99_s"]
    assert all(0 <= b <= 1 for b in m["group_busy_fraction"])


def test_api_doc_example(capsys):
    """The example of docs/api.md runs as written."""
    import os
    import re
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "api.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    exec(compile(blocks[-1], "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "expected SLO attainment" in out and "under twice the load" in out
    assert "refused: groups[0].devices device 7 does not exist" in out


def test_solve_seed_drives_the_workload():
    """`--seed` / solve(seed=...) draws another workload; the same seed gives the same numbers."""
    from placement_opt.solvers import run_solver
    inst = instance_from_dict(instance_dict())
    a = run_solver(inst, "round-robin", seed=1)
    b = run_solver(inst, "round-robin", seed=1)
    c = run_solver(inst, "round-robin", seed=0)
    assert a.metrics == b.metrics and a.provenance["seed"] == 1
    assert a.metrics["requests"] != c.metrics["requests"]
    assert a.metrics["requests"] == len(inst.requests(seed=1))


def test_negative_seed_is_an_input_error():
    inst = instance_from_dict(instance_dict())
    with pytest.raises(InputError, match="seed"):
        inst.requests(seed=-1)
