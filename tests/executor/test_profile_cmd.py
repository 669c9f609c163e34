"""placeopt profile measures a tiny model on CPU and writes a profile instances can load."""

import json

import pytest

pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from placement_opt.cli.main import cli  # noqa: E402
from placement_opt.profile import Profile  # noqa: E402


def test_profile_writes_a_loadable_profile(tmp_path):
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4, "seq_len": 16, "vocab": 50}))
    out, details = tmp_path / "p.json", tmp_path / "d.json"
    r = CliRunner().invoke(cli, ["profile", str(arch), "--name", "t", "--backend", "gloo", "--configs", "1x1,2x1",
                                 "--batch-sizes", "1,2", "--warmup", "1", "--repeats", "3", "-o", str(out),
                                 "--details", str(details)])
    assert r.exit_code == 0, r.output
    assert "profile t: 100%" in r.stderr and "1/1 [" in r.stderr  # the bar: one TP degree of one
    prof = Profile.from_dict("t", json.loads(out.read_text()), "profiles.t")
    assert set(prof.configs) == {(1, 1), (2, 1)}
    one, two = prof.config(1, 1), prof.config(2, 1)
    assert one.batch_sizes == (1, 2) and (one.stage_latency > 0).all()
    assert two.stage_layers == ((0, 1), (1, 2))
    # fp32 on CPU: every parameter is 4 bytes; two stages hold the whole model between them
    assert abs(sum(two.stage_weight_bytes) - one.stage_weight_bytes[0]) < 1e-6 * one.stage_weight_bytes[0]
    d = json.loads(details.read_text())
    assert {p["piece"] for p in d["pieces"]} == {"embedding", "layer", "final_norm"}


def test_profile_bad_config_is_one_line_error(tmp_path):
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4}))
    r = CliRunner().invoke(cli, ["profile", str(arch), "--name", "t", "--backend", "gloo", "--configs", "3x1",
                                 "-o", str(tmp_path / "p.json")])
    assert r.exit_code == 2
    assert "--configs: 3 stages but only 2 layers" in r.output


@pytest.mark.parametrize("content, args, message", [
    ({"models": 5}, [], "models: expected a list"),
    ({"layers": 2, "hidden": 64, "heads": 4}, ["--devices", "-2"], "--devices: must be >= 1"),
    ({"layers": 2, "hidden": 64, "heads": 4}, ["--devices", "0"], "--devices: must be >= 1"),
    ({"layers": 2, "hidden": 64, "heads": 4}, ["--cpu-threads", "0"], "--cpu-threads: must be >= 1"),
    ({"layers": 2, "hidden": 64, "heads": 4}, ["-o", "/nonexistent-folder/p.json"], "does not exist"),
    ({"layers": 2, "hidden": 64, "heads": 4}, ["--details", "/nonexistent-folder/d.json"], "--details: folder"),
])
def test_profile_bad_input_is_one_line_error_before_profiling(tmp_path, content, args, message):
    """Malformed sources and options are refused up front with exit 2, not a traceback
    (nor a failure after the profiling ran)."""
    src = tmp_path / "src.json"
    src.write_text(json.dumps(content))
    base = ["profile", str(src), "--name", "t", "--backend", "gloo", "--configs", "1x1", "-o", str(tmp_path / "p.json")]
    r = CliRunner().invoke(cli, base + args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA GPUs")
def test_profile_nccl_without_gpus_is_one_line_error(tmp_path):
    """--backend nccl on a host without GPUs is an input error (it was a StopIteration traceback)."""
    arch = tmp_path / "arch.json"
    arch.write_text(json.dumps({"layers": 2, "hidden": 64, "heads": 4}))
    r = CliRunner().invoke(cli, ["profile", str(arch), "--name", "t", "--backend", "nccl", "-o", str(tmp_path / "p")])
    assert r.exit_code == 2, r.output
    assert "--backend: nccl needs CUDA GPUs; none is present" in r.output
