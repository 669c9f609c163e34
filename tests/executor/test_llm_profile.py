"""``placeopt profile`` for LLMs on CPU: a tiny grid becomes a cost table instances can use."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from placement_opt import instance_from_dict  # noqa: E402
from placement_opt.cli.main import cli  # noqa: E402
from placement_opt.costs.costtable import CostTable  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = os.path.join(ROOT, "instances", "tiny", "llm-cpu.json")


def test_llm_profile_writes_a_usable_cost_table(tmp_path):
    out, details = tmp_path / "ct.json", tmp_path / "d.json"
    r = CliRunner().invoke(cli, ["profile", TINY, "--model", "tiny-llm-a", "--backend", "gloo", "--tp", "1,2",
                                 "--batch-sizes", "1,2,4", "--seq-lens", "8,16,32", "--token-budget", "64",
                                 "--warmup", "1", "--repeats", "2", "-o", str(out), "--details", str(details)])
    assert r.exit_code == 0, r.output
    raw = json.loads(out.read_text())
    table = CostTable.from_dict("tiny", raw, "cost_table")
    assert table.tp_degrees == (1, 2)
    t1 = raw["tp"]["1"]
    assert t1["batch"] == [1, 2, 4] and t1["seq_len"] == [8, 16, 32] and t1["sm_share"] == [1.0]
    # batch 4 x 32 tokens exceeds the budget of 64: not measured; everything else is, and positive
    assert t1["prefill_ms"][0][2][2] is None and t1["prefill_ms"][0][0][2] > 0
    assert all(v > 0 for row in t1["decode_ms"][0] for v in row)
    d = json.loads(details.read_text())
    assert d["memory"]["2"]["weight_bytes_per_gpu"] < d["memory"]["1"]["weight_bytes_per_gpu"]
    # an instance can reference it, and the simulator uses it
    data = json.loads(open(TINY).read())
    data["cost_tables"] = {"tiny": str(out)}
    for m in data["models"]:
        m["cost_table"] = "tiny"
    inst = instance_from_dict(data)
    assert inst.llm_cost_tables[0].tables[1].decode_s.shape == (1, 3, 3)
    # the leave-one-out interpolation error of the docs reads it
    report = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fidelity", "llm", "interp_error.py"),
                             str(out)], capture_output=True, text=True, check=True).stdout.strip().splitlines()
    assert report[-1].startswith("interpolation_error_mean=") and "points=" in report[-1]
    assert int(report[-1].split("points=")[1]) >= 8  # both tp degrees, prefill and decode


def test_llm_profile_rejects_sm_shares_on_cpu(tmp_path):
    r = CliRunner().invoke(cli, ["profile", TINY, "--model", "tiny-llm-a", "--backend", "gloo", "--sm-shares",
                                 "0.5,1", "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--sm-shares" in r.output and "Traceback" not in r.output
