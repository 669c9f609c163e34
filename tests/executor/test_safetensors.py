"""Weights loaded from a safetensors file give the same stage as the seeded weights they hold."""

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from placement_opt.executor.layers import safetensors_source, seeded_source  # noqa: E402
from placement_opt.executor.network import TransformerStage, request_tokens  # noqa: E402
from placement_opt.model import Architecture  # noqa: E402

ARCH = Architecture(layers=2, hidden=64, heads=4, seq_len=16, vocab=100)
CPU = torch.device("cpu")


def _save_seeded_weights(path, seed):
    """Build the unsharded model from seeded weights, recording every full tensor it asks for."""
    recorded = {}
    base = seeded_source(seed, CPU)

    def source(name, shape):
        recorded[name] = base(name, shape).contiguous()
        return recorded[name]

    stage = TransformerStage(ARCH, (0, ARCH.layers), source, device=CPU)
    safetensors_torch.save_file(recorded, str(path))
    return stage


def test_safetensors_weights_reproduce_the_model(tmp_path):
    path = tmp_path / "weights.safetensors"
    seeded = _save_seeded_weights(path, seed=3)
    loaded = TransformerStage(ARCH, (0, ARCH.layers), safetensors_source(str(path), CPU), device=CPU)
    tokens = request_tokens(ARCH, 2, seed=5, device=CPU)
    assert torch.equal(seeded(tokens), loaded(tokens))
    # and a pipeline split of the loaded weights computes the same function
    first = TransformerStage(ARCH, (0, 1), safetensors_source(str(path), CPU), device=CPU)
    second = TransformerStage(ARCH, (1, 2), safetensors_source(str(path), CPU), device=CPU)
    assert torch.allclose(second(first(tokens)), seeded(tokens), rtol=1e-6, atol=1e-6)


def test_safetensors_file_with_a_wrong_shape_is_refused(tmp_path):
    path = tmp_path / "weights.safetensors"
    _save_seeded_weights(path, seed=3)
    tensors = safetensors_torch.load_file(str(path))
    tensors["embed.tokens.weight"] = torch.zeros(7, ARCH.hidden)
    safetensors_torch.save_file(tensors, str(path))
    with pytest.raises(ValueError, match="embed.tokens.weight"):
        TransformerStage(ARCH, (0, ARCH.layers), safetensors_source(str(path), CPU), device=CPU)
