"""Tensor-parallel linear layers and deterministic weight initialisation.

Every full (unsharded) parameter is drawn from its own generator seeded by the model seed
and the parameter's name, then sliced for the tensor-parallel rank. A sharded model and
the unsharded one therefore hold the same numbers, which is what lets a test compare
their outputs. Loading from a safetensors file slices the stored full tensors the same way.
"""

from __future__ import annotations

import zlib
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

#: Standard deviation of the random weights (GPT-2's initialiser scale).
INIT_STD = 0.02

#: ``full_tensor(name, shape)`` returns the unsharded parameter ``name``.
FullTensorSource = Callable[[str, tuple], torch.Tensor]


def seeded_source(seed: int, device: torch.device) -> FullTensorSource:
    """Full parameters drawn N(0, INIT_STD) (weights) from a generator per (seed, name) on ``device``.

    Biases (names ending ``.bias``) start at zero and LayerNorm scales at one, as usual.
    """

    def full_tensor(name: str, shape: tuple) -> torch.Tensor:
        if name.endswith(".bias"):
            return torch.zeros(shape, device=device)
        if name.endswith("norm.weight"):
            return torch.ones(shape, device=device)
        gen = torch.Generator(device=device)
        gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63 - 1))
        return torch.randn(shape, generator=gen, device=device) * INIT_STD

    return full_tensor


def safetensors_source(path: str, device: torch.device) -> FullTensorSource:
    """Full parameters read from a safetensors file (names as :func:`parameter_names` lists)."""
    from safetensors import safe_open

    handle = safe_open(path, framework="pt", device=str(device))
    keys = set(handle.keys())

    def full_tensor(name: str, shape: tuple) -> torch.Tensor:
        if name not in keys:
            raise KeyError(f"{path} has no tensor {name!r}")
        t = handle.get_tensor(name)
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{path}: tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        return t.float()

    return full_tensor


class ColumnParallelLinear(nn.Module):
    """y = x W^T + b with W's output rows split over the TP group; the output stays sharded.

    ``blocks`` lists the full parameters (name, rows) stacked along the output dimension
    (e.g. Q, K and V); each is split over the TP ranks on its own and this rank's rows
    of every block are fused into one local weight, so one matrix product serves all.
    """

    def __init__(self, source: FullTensorSource, blocks: list, in_features: int, tp_rank: int, tp_size: int,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        weights, biases = [], []
        for name, rows in blocks:
            if rows % tp_size:
                raise ValueError(f"{name}: {rows} outputs do not split over {tp_size} ranks")
            local = slice(tp_rank * (rows // tp_size), (tp_rank + 1) * (rows // tp_size))
            weights.append(source(f"{name}.weight", (rows, in_features))[local])
            biases.append(source(f"{name}.bias", (rows,))[local])
        self.weight = nn.Parameter(torch.cat(weights).to(device=device, dtype=dtype).contiguous(),
                                   requires_grad=False)
        self.bias = nn.Parameter(torch.cat(biases).to(device=device, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_shard W_shard^T) + b with W's input columns split over the TP group."""

    def __init__(self, source: FullTensorSource, name: str, in_features: int, out_features: int,
                 tp_rank: int, tp_size: int, tp_group: Optional[object], dtype: torch.dtype,
                 device: torch.device):
        super().__init__()
        if in_features % tp_size:
            raise ValueError(f"{name}: {in_features} inputs do not split over {tp_size} ranks")
        cols = in_features // tp_size
        w = source(f"{name}.weight", (out_features, in_features))[:, tp_rank * cols:(tp_rank + 1) * cols]
        self.weight = nn.Parameter(w.to(device=device, dtype=dtype).contiguous(), requires_grad=False)
        self.bias = nn.Parameter(source(f"{name}.bias", (out_features,)).to(device=device, dtype=dtype),
                                 requires_grad=False)
        self.tp_size = tp_size
        self.tp_group = tp_group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.linear(x, self.weight)
        if self.tp_size > 1:
            dist.all_reduce(y, group=self.tp_group)
        return y + self.bias
