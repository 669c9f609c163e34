"""``placeopt init``: a starter instance from the shipped GPU and model catalogs that validates
and solves as written; bad flags are one-line errors with exit status 2; no silent overwrite."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from placement_opt import load_instance
from placement_opt.catalog import gpu_catalog, model_catalog, starter_instance
from placement_opt.cli.main import cli
from placement_opt.cluster import Cluster


def run_cli(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("placeopt: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("flags", [
    ["--gpus", "2", "--gpu", "v100", "--models", "bert-1.3b:2,moe-1.3b", "--rate", "4"],
    ["--llm", "--gpus", "2", "--gpu", "a100", "--models", "llama-7b:2,mistral-7b", "--rate", "2"],
], ids=["dnn", "llm"])
def test_init_validate_solve(tmp_path, flags):
    instance = str(tmp_path / "starter.json")
    result = run_cli("init", *flags, "-o", instance)
    assert result.exit_code == 0, result.output
    assert run_cli("validate", instance).exit_code == 0
    placement = str(tmp_path / "placement.json")
    result = run_cli("solve", instance, "-o", placement)
    assert result.exit_code == 0, result.output
    assert json.load(open(placement))["groups"]
    inst = load_instance(instance)
    assert inst.name == "starter" and "placeopt init" in inst.description
    assert {m.family for m in inst.models} == {"llm" if "--llm" in flags else "dnn"}


def test_the_instance_documents_itself(tmp_path):
    doc = starter_instance("s", "h100", 16, [("llama-3-8b", 2), ("bert-1.3b", 1)], 10.0, llm=False)
    assert (doc["cluster"]["nodes"], doc["cluster"]["gpus_per_node"]) == (2, 8)
    assert doc["cluster"]["gpu"]["name"] == "H100-SXM5-80GB"
    for entry in doc["models"]:
        assert entry["architecture"]["name"] == entry["name"] and entry["architecture"]["source"]
    assert "16 H100-SXM5-80GB GPUs (2 nodes of 8)" in doc["description"]
    assert "slo_attainment and alpaserve" in doc["description"]


def test_catalogs_are_valid():
    for key, entry in gpu_catalog().items():
        Cluster.from_dict({"nodes": 1, "gpus_per_node": entry["gpus_per_node"], "gpu": entry["gpu"],
                           "intra_node_link": entry["intra_node_link"],
                           "inter_node_link": entry["inter_node_link"]})
        assert entry["source"], key
    for name, model in model_catalog().items():
        assert model.source and set(model.families) <= {"dnn", "llm"}, name
    assert {"v100", "a100", "h100"} <= set(gpu_catalog())


def test_list_shows_the_catalogs():
    result = run_cli("init", "--list")
    assert result.exit_code == 0
    assert "H100-SXM5-80GB" in result.stdout and "mixtral-8x7b" in result.stdout


def test_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "mine.json"
    out.write_text("edited by hand\n")
    assert_one_line_error(run_cli("init", "-o", str(out)), "--output", "exists", "--force")
    assert out.read_text() == "edited by hand\n"
    assert run_cli("init", "-o", str(out), "--force").exit_code == 0
    assert json.loads(out.read_text())["name"] == "mine"
    assert os.listdir(tmp_path) == ["mine.json"]  # written atomically: no temporary file left


@pytest.mark.parametrize("flags, needles", [
    (["--gpu", "x100"], ["--gpu", "unknown GPU 'x100'", "h100"]),
    (["--models", "llama-70b:2"], ["--models", "unknown model 'llama-70b'"]),
    (["--models", "bert-1.3b:0"], ["--models bert-1.3b", "between 1 and"]),
    (["--models", "bert-1.3b:two"], ["whole number"]),
    (["--models", "bert-1.3b,bert-1.3b:2"], ["listed twice"]),
    (["--gpus", "12"], ["--gpus", "nodes of 8"]),
    (["--gpus", "0"], ["--gpus", "between 1 and"]),
    (["--gpus", "many"], ["--gpus", "whole number"]),
    (["--rate", "0"], ["--rate", "> 0"]),
    (["--rate", "fast"], ["--rate", "expected a number"]),
    (["--llm", "--models", "bert-large"], ["--models", "cannot be served as llm"]),
    (["--gpu", "v100", "--gpus", "1", "--models", "mixtral-8x7b"], ["would not load", "fits nowhere"]),
])
def test_bad_flags_are_one_line_errors(tmp_path, flags, needles):
    out = tmp_path / "never.json"
    assert_one_line_error(run_cli("init", *flags, "-o", str(out)), *needles)
    assert not out.exists()


def test_output_is_required():
    assert_one_line_error(run_cli("init"), "--output")


@pytest.mark.parametrize("llm", [False, True], ids=["dnn", "llm"])
def test_schema_accepts_the_starter_instance(llm):
    jsonschema = pytest.importorskip("jsonschema")
    path = os.path.join(os.path.dirname(__file__), "..", "placement_opt", "schema", "instance.schema.json")
    with open(path) as f:
        validator = jsonschema.Draft202012Validator(json.load(f))
    doc = starter_instance("s", "a100", 8, [("llama-2-7b", 2), ("opt-1.3b", 1)], 10.0, llm=llm)
    assert not list(validator.iter_errors(doc))
