"""``placeopt export``: MuxServe YAML and vLLM / SGLang launch scripts, against golden files.

Re-record the golden files after an intended change with ``PLACEOPT_RECORD_EXPORT=1``.
"""

import os

import pytest
from click.testing import CliRunner

from placement_opt import load_instance
from placement_opt.cli.main import cli as main
from placement_opt.llm_export import export_files
from placement_opt.solvers import llm_baselines, muxserve  # noqa: F401  (registration)
from placement_opt.solvers.base import make_solver

from .helpers import ROOT, SMALL

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_export")
CASES = {"muxserve": "muxserve", "vllm": "placeopt", "sglang": "placeopt"}  # target: rule set of the placement


@pytest.mark.parametrize("target", sorted(CASES))
def test_export_matches_the_golden_files(target):
    inst = load_instance(SMALL)
    placement = make_solver("muxserve", {"rules": CASES[target]}).solve(inst)
    files = export_files(placement, inst, target)
    folder = os.path.join(GOLDEN, target)
    if os.environ.get("PLACEOPT_RECORD_EXPORT"):
        os.makedirs(folder, exist_ok=True)
        for name, text in files.items():
            with open(os.path.join(folder, name), "w") as f:
                f.write(text)
    assert sorted(files) == sorted(os.listdir(folder))
    for name, text in files.items():
        with open(os.path.join(folder, name)) as f:
            assert text == f.read(), f"{target}/{name} differs from the golden file"


def test_export_numbers_follow_the_memory_plan():
    inst = load_instance(SMALL)
    placement = make_solver("muxserve", {"rules": "muxserve"}).solve(inst)
    yaml_text = export_files(placement, inst, "muxserve")
    text = "".join(yaml_text[n] for n in sorted(yaml_text) if n.endswith(".yaml"))
    assert "tensor_parallel_size:" in text and "mps_percentage: [" in text
    # the reference's prefill shares by size: 80 % for a 7B, 90 % for a 13B
    assert "mps_percentage: [80," in text or "mps_percentage: [90," in text
    scripts = export_files(make_solver("muxserve").solve(inst), inst, "vllm")
    assert all("--tensor-parallel-size" in t and "CUDA_VISIBLE_DEVICES=" in t
               for n, t in scripts.items() if n.endswith(".sh"))


def test_cli_export_writes_a_folder_and_refuses_dnn_and_broken_placements(tmp_path):
    runner = CliRunner()
    placement = tmp_path / "p.json"
    assert runner.invoke(main, ["solve", SMALL, "--solver", "muxserve", "-o", str(placement)]).exit_code == 0
    out = tmp_path / "vllm"
    r = runner.invoke(main, ["export", str(placement), "--instance", SMALL, "--to", "vllm", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "README.md").exists() and any(p.suffix == ".sh" for p in out.iterdir())
    dnn = os.path.join(ROOT, "instances", "tiny", "two-models.json")
    r = runner.invoke(main, ["export", str(placement), "--instance", dnn, "--to", "vllm", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "only LLM placements can be exported" in r.output
    broken = tmp_path / "broken.json"
    broken.write_text(placement.read_text().replace('"tp": 4', '"tp": 3', 1))
    r = runner.invoke(main, ["export", str(broken), "--instance", SMALL, "--to", "sglang", "-o", str(tmp_path / "y")])
    assert r.exit_code == 2 and "broken.json" in r.output
