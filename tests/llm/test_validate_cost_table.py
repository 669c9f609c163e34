"""`placeopt validate` checks LLM cost-table files as cost tables, not as instances."""

import json
import os

from click.testing import CliRunner

from placement_opt.cli.main import cli

from .helpers import TABLES


def test_validate_accepts_a_shipped_cost_table():
    r = CliRunner().invoke(cli, ["validate", os.path.join(TABLES, "llama-7b-a100.json")])
    assert r.exit_code == 0, r.output
    assert "valid cost table (LLM llama-7b)" in r.output


def test_validate_names_the_bad_field_of_a_cost_table(tmp_path):
    with open(os.path.join(TABLES, "llama-7b-a100.json")) as f:
        table = json.load(f)
    del table["model"]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    r = CliRunner().invoke(cli, ["validate", str(path)])
    assert r.exit_code == 2
    assert f"{path}: model: missing required field" in r.output
