"""HuggingFace config.json files as architectures (placement_opt.hf_config, ``placeopt import-hf``,
an instance's ``"architecture": {"hf_config": ...}``).

The shipped configs (placement_opt/data/hf_configs, sources in its README) must convert to
architectures whose own weight count is within 1% of the models' published sizes, and the
cost model's operator graphs must hold exactly those weights.
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from placement_opt import InputError, instance_from_dict
from placement_opt.cli.main import cli
from placement_opt.hf_config import architecture_fields
from placement_opt.model import Architecture
from placement_opt.parallel.graph import model_units

from inputs import GOOD

HF_DIR = os.path.join(os.path.dirname(__file__), "..", "placement_opt", "data", "hf_configs")

#: published parameter counts (model cards and papers; placement_opt/data/hf_configs/README.md)
PUBLISHED = {
    "llama-7b": 6.7e9,            # LLaMA paper (Touvron et al. 2023), Table 2: 6.7B
    "llama-2-7b": 6.74e9,         # huggingface.co/meta-llama/Llama-2-7b-hf: 6.74B params
    "llama-3-8b": 8.03e9,         # huggingface.co/meta-llama/Meta-Llama-3-8B: 8.03B params
    "mistral-7b": 7.24e9,         # huggingface.co/mistralai/Mistral-7B-v0.1: 7.24B params
    "qwen2-7b": 7.62e9,           # huggingface.co/Qwen/Qwen2-7B: 7.62B params
    "mixtral-8x7b": 46.7e9,       # Mistral AI, "Mixtral of experts": 46.7B total parameters
    "bert-large-uncased": 336e6,  # huggingface.co/google-bert/bert-large-uncased: 336M parameters
    "gpt2": 124e6,                # huggingface.co/openai-community/gpt2: 124M parameters
    "opt-1.3b": 1.32e9,           # huggingface.co/facebook/opt-1.3b: 1.32B params
}


def hf_path(name: str) -> str:
    return os.path.join(HF_DIR, f"{name}.json")


def convert(name: str) -> Architecture:
    return Architecture.from_dict({"hf_config": hf_path(name)}, "architecture")


def test_every_shipped_config_has_a_published_size():
    shipped = sorted(f[:-5] for f in os.listdir(HF_DIR) if f.endswith(".json"))
    assert shipped == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_published_size(name):
    arch = convert(name)
    assert arch.param_count() == pytest.approx(PUBLISHED[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_operator_graphs_hold_the_architectures_weights(name):
    """The auto-parallelization cost model sees the same weights (the LM head shares the
    embedding's table only when tied)."""
    arch = convert(name)
    units = model_units(arch)
    total = sum(op.weight_bytes for unit in units for op in unit.ops)
    if arch.tied_embeddings:
        total -= sum(op.weight_bytes for op in units[-1].ops)
    assert total == arch.weight_bytes()


def test_llama_family_fields():
    arch = convert("llama-3-8b")
    assert (arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.vocab, arch.seq_len) == \
        (32, 4096, 32, 8, 128256, 8192)
    assert arch.ffn_hidden == 14336 and arch.dtype == "bf16"
    assert arch.gated_mlp and not arch.tied_embeddings and not arch.learned_positions
    assert convert("llama-2-7b").kv_heads == 32 and convert("llama-2-7b").dtype == "fp16"
    assert convert("qwen2-7b").ffn_hidden == 18944  # a ratio that is no short decimal still round-trips


def test_mixtral_is_moe_in_every_layer():
    arch = convert("mixtral-8x7b")
    assert (arch.moe_experts, arch.moe_top_k, arch.moe_every) == (8, 2, 1)
    assert arch.gated_mlp and arch.kv_heads == 8


def test_bert_gpt2_opt_have_learned_positions_and_tied_heads():
    for name, (hidden, ffn, positions) in {"bert-large-uncased": (1024, 4096, 512), "gpt2": (768, 3072, 1024),
                                           "opt-1.3b": (2048, 8192, 2048)}.items():
        arch = convert(name)
        assert (arch.hidden, arch.ffn_hidden, arch.seq_len) == (hidden, ffn, positions), name
        assert arch.tied_embeddings and arch.learned_positions and not arch.gated_mlp, name
        assert arch.kv_heads is None, name


def test_new_fields_change_the_count_by_one_matrix_each():
    base = Architecture(layers=2, hidden=64, heads=4, seq_len=16, vocab=100, ffn_ratio=2.0)
    h, f = 64, 128
    assert Architecture(**{**vars(base), "gated_mlp": True}).param_count() - base.param_count() == 2 * (h * f + f)
    assert Architecture(**{**vars(base), "tied_embeddings": False}).param_count() - base.param_count() == 100 * h
    assert base.param_count() - Architecture(**{**vars(base), "learned_positions": False}).param_count() == 16 * h


def test_defaults_keep_the_old_numbers():
    """Files without the new fields describe BERT/GPT models exactly as before."""
    arch = Architecture.from_dict({"layers": 24, "hidden": 2048, "heads": 32}, "architecture")
    assert arch.param_count() == 1317650432  # the BERT-1.3B shape of the AlpaServe instances
    assert "gated_mlp" not in arch.to_dict() and "name" not in arch.to_dict()


def test_name_and_source_only_document():
    plain = Architecture.from_dict({"layers": 2, "hidden": 64, "heads": 4}, "a")
    named = Architecture.from_dict({"layers": 2, "hidden": 64, "heads": 4, "name": "x", "source": "y"}, "a")
    assert named == plain and hash(named) == hash(plain)
    assert Architecture.from_dict(named.to_dict(), "a").to_dict() == named.to_dict()


def test_instance_architecture_from_hf_config_is_relative_to_the_instance(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(open(hf_path("gpt2")).read())
    doc = json.loads(json.dumps(GOOD))
    doc["models"][0].pop("profile", None)
    doc["models"][0]["architecture"] = {"hf_config": "cfg/config.json", "seq_len": 256, "dtype": "fp32"}
    inst = instance_from_dict(doc, base_dir=str(tmp_path))
    arch = inst.models[0].architecture
    assert arch.hidden == 768 and arch.seq_len == 256 and arch.dtype == "fp32"  # overrides win
    assert arch.source == "HuggingFace config cfg/config.json"


@pytest.mark.parametrize("config, needles", [
    ({"model_type": "t5"}, ["model_type", "unknown model_type 't5'", "supported: bert"]),
    ({"hidden_size": 8}, ["no model_type"]),
    ({"model_type": "llama", "hidden_size": 8}, ["missing fields num_attention_heads, num_hidden_layers",
                                                 "vocab_size", "intermediate_size", "'llama' config"]),
    ({"model_type": "mixtral", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1,
      "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 16}, ["num_local_experts"]),
    ({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1, "vocab_size": 10}, ["missing field n_positions"]),
    ({"model_type": "bert", "hidden_size": 8, "num_attention_heads": 3, "num_hidden_layers": 1, "vocab_size": 10,
      "max_position_embeddings": 8, "intermediate_size": 16}, ["not divisible by 3"]),
    ({"model_type": "mistral", "hidden_size": 5120, "num_attention_heads": 32, "head_dim": 128,
      "num_hidden_layers": 1, "vocab_size": 10, "max_position_embeddings": 8, "intermediate_size": 16},
     ["head_dim", "differs"]),
    ({"model_type": "opt", "hidden_size": 1024, "word_embed_proj_dim": 512, "num_attention_heads": 16,
      "num_hidden_layers": 1, "vocab_size": 10, "max_position_embeddings": 8, "ffn_dim": 16}, ["word_embed_proj_dim"]),
    ({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1.5, "vocab_size": 10, "n_positions": 4},
     ["n_layer", "positive integer"]),
    ({"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1, "vocab_size": 10, "n_positions": 4,
      "torch_dtype": "float8_e4m3fn"}, ["unsupported dtype"]),
    ({"model_type": "qwen2", "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 10,
      "max_position_embeddings": 8, "intermediate_size": 16, "tie_word_embeddings": "yes"}, ["true or false"]),
])
def test_bad_configs_name_the_file_and_the_problem(config, needles):
    with pytest.raises(InputError) as err:
        architecture_fields(config, "some/config.json")
    assert err.value.file == "some/config.json"
    for needle in needles:
        assert needle in err.value.one_line()


def test_bad_hf_config_in_an_instance_names_the_field_and_the_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    doc = json.loads(json.dumps(GOOD))
    doc["models"][0]["architecture"] = {"hf_config": "config.json"}
    with pytest.raises(InputError) as err:
        instance_from_dict(doc, base_dir=str(tmp_path))
    assert err.value.field == "models[0].architecture.hf_config"
    assert "config.json: missing fields" in err.value.reason
    doc["models"][0]["architecture"] = {"hf_config": "config.json", "colour": 1}
    with pytest.raises(InputError, match="colour"):
        instance_from_dict(doc, base_dir=str(tmp_path))


def test_import_hf_writes_an_architecture_file_that_validates(tmp_path):
    out = tmp_path / "mistral.json"
    result = CliRunner().invoke(cli, ["import-hf", hf_path("mistral-7b"), "--name", "mistral", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "7.24" in result.stderr  # the parameter count, in billions
    written = json.loads(out.read_text())
    assert written["name"] == "mistral" and written["kv_heads"] == 8 and written["gated_mlp"] is True
    assert Architecture.from_dict(written, "") == convert("mistral-7b")
    assert CliRunner().invoke(cli, ["validate", str(out)]).exit_code == 0


def test_import_hf_dtype_and_default_name(tmp_path):
    folder = tmp_path / "Qwen2-7B"
    folder.mkdir()
    (folder / "config.json").write_text(open(hf_path("qwen2-7b")).read())
    result = CliRunner().invoke(cli, ["import-hf", str(folder / "config.json"), "--dtype", "int8"])
    assert result.exit_code == 0, result.output
    written = json.loads(result.stdout)
    assert written["name"] == "Qwen2-7B" and written["dtype"] == "int8"


@pytest.mark.parametrize("args, needle", [
    (["--dtype", "fp8"], "--dtype"),
    ([], "unknown model_type 't5'"),
])
def test_import_hf_errors_are_one_line_with_exit_2(tmp_path, args, needle):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "t5"}))
    result = CliRunner().invoke(cli, ["import-hf", str(config), *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("placeopt: error: ") and needle in lines[0]


def test_schema_accepts_hf_config_and_the_new_fields():
    jsonschema = pytest.importorskip("jsonschema")
    with open(os.path.join(HF_DIR, "..", "..", "schema", "instance.schema.json")) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/architecture"})
    for document in ({"hf_config": "config.json"}, {"hf_config": "config.json", "seq_len": 512},
                     convert("mixtral-8x7b").to_dict(), {**convert("gpt2").to_dict(), "name": "gpt2"}):
        assert not list(validator.iter_errors(document)), document
    for document in ({"layers": 2, "hidden": 8}, {"hf_config": ""}, {"hf_config": "c.json", "gated_mlp": 1}):
        assert list(validator.iter_errors(document)), document
