"""Where every executor process sits in a placement: group, stage, tensor-parallel rank.

One process runs per GPU (or per CPU "device" with gloo) of every group that serves at
least one model. Global ranks follow the placement's device order; this module is pure
Python so the layout can be checked without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.placement import Group


@dataclass(frozen=True)
class RankPlan:
    """One process: its device, its group's stage and TP position, and its pipeline neighbours."""

    rank: int
    device: int
    group: int
    stage: int
    tp_rank: int
    tp_ranks: Tuple[int, ...]
    prev_rank: Optional[int]
    next_rank: Optional[int]
    n_stages: int

    @property
    def is_first_stage(self) -> bool:
        return self.stage == 0

    @property
    def is_last_stage(self) -> bool:
        return self.stage == self.n_stages - 1

    @property
    def reports(self) -> bool:
        """TP rank 0 of every stage reports the stage's start and end times."""
        return self.tp_rank == 0


def even_layer_split(layers: int, pp: int) -> Tuple[Tuple[int, int], ...]:
    """Contiguous [start, end) layer ranges, as even as rounding allows (the profile's rule)."""
    if pp > layers:
        raise InputError(f"{pp} stages but only {layers} layers", "groups.pp")
    bounds = np.linspace(0, layers, pp + 1).round().astype(int)
    return tuple((int(bounds[i]), int(bounds[i + 1])) for i in range(pp))


def stage_ranges(group: Group, layers: int) -> Tuple[Tuple[int, int], ...]:
    """The group's own ``stage_layers`` when given (checked against ``layers``), else an even split."""
    if group.stage_layers is None:
        return even_layer_split(layers, group.pp)
    if group.stage_layers[-1][1] != layers:
        raise InputError(f"stage_layers cover {group.stage_layers[-1][1]} layers but the model has {layers}",
                         "groups.stage_layers")
    return group.stage_layers


def serving_groups(groups: Sequence[Group]) -> list[int]:
    """Indices of the groups that serve at least one model (only those get processes)."""
    return [g for g, grp in enumerate(groups) if grp.models]


def rank_plans(groups: Sequence[Group], layers_of: dict[str, int]) -> list[RankPlan]:
    """Every process of the placement, rank-ordered.

    ``layers_of`` maps a model name to its layer count; all models of a group must split
    alike, so a group's stage ranges come from its first model and the others must agree
    in layer count when the group gives explicit ``stage_layers``.
    """
    plans: list[RankPlan] = []
    rank_of_device: dict[int, int] = {}
    for g in serving_groups(groups):
        for dev in groups[g].devices:
            rank_of_device[dev] = len(rank_of_device)
    for g in serving_groups(groups):
        grp = groups[g]
        depth = {layers_of[m] for m in grp.models}
        if grp.stage_layers is not None and len(depth) > 1:
            raise InputError("a group with explicit stage_layers must serve models of one depth",
                             f"groups[{g}].stage_layers")
        for s in range(grp.pp):
            stage_devs = grp.devices[s * grp.tp:(s + 1) * grp.tp]
            tp_ranks = tuple(rank_of_device[d] for d in stage_devs)
            for j, dev in enumerate(stage_devs):
                prev_rank = rank_of_device[grp.devices[(s - 1) * grp.tp + j]] if s > 0 else None
                next_rank = rank_of_device[grp.devices[(s + 1) * grp.tp + j]] if s < grp.pp - 1 else None
                plans.append(RankPlan(rank=rank_of_device[dev], device=dev, group=g, stage=s, tp_rank=j,
                                      tp_ranks=tp_ranks, prev_rank=prev_rank, next_rank=next_rank,
                                      n_stages=grp.pp))
    plans.sort(key=lambda p: p.rank)
    return plans


def model_layer_range(group: Group, stage: int, layers: int) -> Tuple[int, int]:
    """Layer range of ``stage`` for a model of ``layers`` layers served by ``group``."""
    return stage_ranges(group, layers)[stage]


def tp_groups(plans: Sequence[RankPlan]) -> list[Tuple[int, ...]]:
    """Every tensor-parallel subgroup of more than one rank, in a fixed order all ranks agree on."""
    seen: list[Tuple[int, ...]] = []
    for p in plans:
        if len(p.tp_ranks) > 1 and p.tp_ranks not in seen:
            seen.append(p.tp_ranks)
    return seen
