"""Per-GPU weight memory of a group and whether another model fits it."""

from __future__ import annotations

import numpy as np

from .errors import InputError
from .placement import Group


def stage_bytes(instance, group: Group, where: str = "groups") -> np.ndarray:
    """Weight bytes each GPU of every stage of ``group`` holds for its models.

    A model without a profile for the group's (pp, tp) is an input error at ``where``.
    """
    out = np.zeros(group.pp)
    for name in group.models:
        cfg = instance.model_profiles[instance.model_index(name)].config(group.pp, group.tp)
        if cfg is None:
            raise InputError(f"model {name!r} has no profile for pp={group.pp} tp={group.tp}", f"{where}.models")
        out += np.asarray(cfg.stage_weight_bytes)
    return out


def model_stage_bytes(instance, model: int, pp: int, tp: int):
    """Per-stage per-GPU bytes of one model in config (pp, tp), or None when unprofiled."""
    cfg = instance.model_profiles[model].config(pp, tp)
    return None if cfg is None else np.asarray(cfg.stage_weight_bytes)


def fits(instance, used: np.ndarray, model: int, pp: int, tp: int) -> bool:
    """Whether ``model`` fits next to stage usage ``used`` under the usable memory."""
    need = model_stage_bytes(instance, model, pp, tp)
    if need is None:
        return False
    return bool(np.all(used + need <= instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)))
