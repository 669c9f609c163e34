"""Feasibility of placements: per-GPU weight memory of a group, whether another model fits
it, and the full check of a placement against an instance (:func:`check_placement`)."""

from __future__ import annotations

from typing import Optional, Set

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.llm_rules import llm_rule_violations
from placement_opt.placement import Group, Placement


def stage_bytes(instance: Instance, group: Group, where: str = "groups") -> np.ndarray:
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


def model_stage_bytes(instance: Instance, model: int, pp: int, tp: int) -> Optional[np.ndarray]:
    """Per-stage per-GPU bytes of one model in config (pp, tp), or None when unprofiled."""
    cfg = instance.model_profiles[model].config(pp, tp)
    return None if cfg is None else np.asarray(cfg.stage_weight_bytes)


def fits(instance: Instance, used: np.ndarray, model: int, pp: int, tp: int) -> bool:
    """Whether ``model`` fits next to stage usage ``used`` under the usable memory."""
    need = model_stage_bytes(instance, model, pp, tp)
    if need is None:
        return False
    return bool(np.all(used + need <= instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)))


def check_placement(placement: Placement, instance: Instance) -> None:
    """Validate a placement against an instance: devices, configurations, models, memory."""
    names = set(instance.model_names)
    n_gpus = instance.cluster.n_gpus
    budget = instance.cluster.gpu.usable_memory_bytes
    for wi, groups in enumerate(placement.all_group_sets):
        prefix = f"windows[{wi}]." if placement.windows else ""
        used: Set[int] = set()
        for gi, g in enumerate(groups):
            where = f"{prefix}groups[{gi}]"
            for dev in g.devices:
                if dev >= n_gpus:
                    raise InputError(f"device {dev} does not exist (cluster has {n_gpus})", f"{where}.devices")
                if dev in used:
                    raise InputError(f"device {dev} is in two groups", f"{where}.devices")
                used.add(dev)
            for m in g.models:
                if m not in names:
                    raise InputError(f"no model named {m!r} in the instance", f"{where}.models")
            if len(set(g.models)) != len(g.models):
                raise InputError("a model is listed twice", f"{where}.models")
            if instance.is_llm:
                continue
            need = stage_bytes(instance, g, where).max(initial=0.0)
            if need > budget * (1 + 1e-9):
                raise InputError(f"models need {need / 1e9:.2f} GB per GPU, over the budget of "
                                 f"{budget / 1e9:.2f} GB", f"{where}.models")
    if instance.is_llm:
        problems = llm_rule_violations(placement, instance)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise InputError(problems[0].reason + more, problems[0].field)
