"""``placeopt validate PLACEMENT [--instance INSTANCE]`` lists every violation of a placement
(issue 15.4): self-consistency on its own, devices, models, profiles and memory against an
instance; and the rules are pluggable (``feasibility.register_rule``)."""

from __future__ import annotations

import copy
import json

from click.testing import CliRunner

from inputs import GOOD, GOOD_PLACEMENT
from placement_opt import feasibility
from placement_opt.errors import InputError
from placement_opt.instance import instance_from_dict
from placement_opt.placement import Placement
from placement_opt.cli.main import cli


def run_validate(tmp_path, placement: dict, with_instance: bool):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(placement))
    args = ["validate", str(path)]
    if with_instance:
        inst = tmp_path / "i.json"
        inst.write_text(json.dumps(GOOD))
        args += ["--instance", str(inst)]
    return str(path), CliRunner().invoke(cli, args)


def error_lines(result) -> list[str]:
    assert "Traceback" not in result.output
    return [line for line in result.stderr.splitlines() if line.startswith("placeopt: error: ")]


def test_valid_placement_against_its_instance(tmp_path):
    path, result = run_validate(tmp_path, GOOD_PLACEMENT, True)
    assert result.exit_code == 0, result.output
    assert f"{path}: valid placement (2 groups, fits" in result.stdout


def test_every_self_consistency_violation_is_listed_without_an_instance(tmp_path):
    p = copy.deepcopy(GOOD_PLACEMENT)
    p["groups"][0].update(devices=[0, 0], tp=2, models=["model-a", "model-a"])  # device and model twice
    p["groups"][1].update(devices=[0])  # device 0 in two groups
    path, result = run_validate(tmp_path, p, False)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert lines == [f"placeopt: error: {path}: groups[0].devices: device 0 is listed twice",
                     f"placeopt: error: {path}: groups[0].models: model 'model-a' is listed twice",
                     f"placeopt: error: {path}: groups[1].devices: device 0 is in two groups (groups[0] and this one)"]
    assert result.stderr.splitlines()[-1] == f"placeopt: {path}: 3 violations"


def test_every_instance_violation_is_listed(tmp_path):
    p = {"groups": [{"devices": [0, 1], "pp": 1, "tp": 2, "models": ["model-a"]},   # tp 2 is unprofiled
                    {"devices": [5], "pp": 1, "tp": 1, "models": ["ghost"]},      # no such device, model
                    {"devices": [1], "pp": 1, "tp": 1, "models": ["model-a", "model-b"]}]}  # over memory
    path, result = run_validate(tmp_path, p, True)
    assert result.exit_code == 2
    text = "\n".join(error_lines(result))
    for needle in ("groups[2].devices: device 1 is in two groups", "groups[1].devices: device 5 does not exist",
                   "groups[1].models: no model named 'ghost'", "groups[0].models: model 'model-a' has no profile for pp=1 tp=2",
                   "groups[2].models: models need 26.80 GB per GPU, over the budget of 13.96 GB"):
        assert needle in text, (needle, text)
    assert len(error_lines(result)) == 5


def test_each_malformed_group_is_listed(tmp_path):
    p = copy.deepcopy(GOOD_PLACEMENT)
    p["groups"][0]["pp"] = 2
    p["groups"][1]["tp"] = "one"
    path, result = run_validate(tmp_path, p, False)
    assert result.exit_code == 2
    assert error_lines(result) == [f"placeopt: error: {path}: groups[0].devices: 1 devices but pp x tp = 2",
                                   f"placeopt: error: {path}: groups[1].tp: expected an integer, got str"]


def test_instance_option_is_for_placements_only(tmp_path):
    inst = tmp_path / "i.json"
    inst.write_text(json.dumps(GOOD))
    result = CliRunner().invoke(cli, ["validate", str(inst), "--instance", str(inst)])
    assert result.exit_code == 2
    assert error_lines(result) == [f"placeopt: error: --instance: {inst} is not a placement: "
                                   "--instance applies to a placement only"]


def test_a_registered_rule_is_checked_and_listed():
    """A new rule (as the LLM hardware rules are added) joins check_placement and the listing."""
    inst = instance_from_dict(copy.deepcopy(GOOD))
    placement = Placement.from_dict(GOOD_PLACEMENT)

    def no_model_b(plc, instance):
        for gi, g in enumerate(plc.groups):
            if "model-b" in g.models:
                yield feasibility.Violation(f"groups[{gi}].models", "model-b is not allowed")

    assert feasibility.placement_violations(placement, inst) == []
    feasibility.register_rule(no_model_b)
    try:
        assert feasibility.placement_violations(placement, inst) == [
            feasibility.Violation("groups[1].models", "model-b is not allowed")]
        try:
            feasibility.check_placement(placement, inst)
        except InputError as e:
            assert e.one_line() == "groups[1].models: model-b is not allowed"
        else:
            raise AssertionError("check_placement accepted a violation")
    finally:
        feasibility._RULES.remove((no_model_b, True))
