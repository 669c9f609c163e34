"""Round-robin placement: fixed-size groups, models assigned to groups in turn."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.feasibility import fits, model_stage_bytes
from placement_opt.instance import Instance
from placement_opt.placement import Group, Placement
from placement_opt.spaces.partitions import allocate_devices, require_valid_group_size
from placement_opt.validation import option

from placement_opt.solvers.base import Solver, register


@dataclass(frozen=True)
class RoundRobinOptions:
    group_size: int = option(0, minimum=0, help="GPUs per group; 0 = the fewest that hold every model in a pipeline")
    tp: int = option(1, minimum=1, help="tensor-parallel degree inside a group (pp = group_size / tp)")
    replicate: bool = option(True, help="keep cycling through the models until no replica fits")


@register
class RoundRobin(Solver):
    """Cycle through the models, putting each on the next group with room.

    Without replication every model is placed once; with it (default) the cycle repeats
    until a full pass places nothing, so memory is used as in the paper's baseline.
    """

    name = "round-robin"
    summary = "fixed-size groups, models assigned in turn (baseline)"
    Options = RoundRobinOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        opts = self.options
        size = opts.group_size or smallest_pipeline_size(instance, opts.tp)
        if size > instance.cluster.n_gpus:
            raise InputError(f"group size {size} exceeds the cluster's {instance.cluster.n_gpus} GPUs",
                             "solver.options.group_size")
        tp = min(opts.tp, size)
        if size % tp:
            raise InputError(f"tp {tp} does not divide group size {size}", "solver.options.tp")
        cl = instance.cluster
        require_valid_group_size(size, cl.gpus_per_node, "solver.options.group_size")
        devices = allocate_devices((size,) * (cl.n_gpus // size), cl.nodes, cl.gpus_per_node)
        assert devices is not None  # equal groups of a valid size always tile the cluster
        pp = size // tp
        deadline = None if time_limit is None else time.perf_counter() + time_limit
        models, timed_out = _assign_in_turn(instance, len(devices), pp, tp, opts.replicate, deadline)
        groups = tuple(Group(devices=d, pp=pp, tp=tp, models=tuple(ms)) for d, ms in zip(devices, models))
        return Placement(groups=groups, provenance={"search": {"timed_out": True}} if timed_out else {})


def _assign_in_turn(instance: Instance, n_groups: int, pp: int, tp: int, replicate: bool,
                    deadline: Optional[float]) -> tuple[list[list[str]], bool]:
    """Every group's models: each model in turn on the next group with room, cycling (with
    ``replicate``) until a full pass places nothing. Stops at ``deadline`` (a
    ``time.perf_counter()`` value; a large cluster takes long) with what it has placed, and
    says whether it did."""
    used = [np.zeros(pp) for _ in range(n_groups)]
    models: list[list[str]] = [[] for _ in range(n_groups)]
    cursor = 0
    while True:
        placed = False
        for m in range(len(instance.models)):
            for k in range(n_groups):
                if deadline is not None and time.perf_counter() > deadline:
                    return models, True
                g = (cursor + k) % n_groups
                if instance.model_names[m] in models[g] or not fits(instance, used[g], m, pp, tp):
                    continue
                need = model_stage_bytes(instance, m, pp, tp)
                assert need is not None  # fits() is False for a config the model has no profile of
                used[g] += need
                models[g].append(instance.model_names[m])
                cursor = (g + 1) % n_groups
                placed = True
                break
        if not placed or not replicate:
            return models, False


def smallest_pipeline_size(instance: Instance, tp: int = 1) -> int:
    """The fewest GPUs (a power of two) on which every model fits as a tp-way pipeline."""
    budget = instance.cluster.gpu.usable_memory_bytes
    size = max(1, tp)
    while size <= instance.cluster.n_gpus:
        ok = True
        for prof in instance.model_profiles:
            cfg = prof.config(size // tp, tp)
            if cfg is None or cfg.max_stage_weight_bytes > budget:
                ok = False
                break
        if ok:
            return size
        size *= 2
    return instance.cluster.n_gpus
