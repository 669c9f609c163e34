"""Selective replication: one GPU per group, simulator-guided greedy replica selection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.validation import option

from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.greedy import greedy_selection


@dataclass(frozen=True)
class SelectiveReplicationOptions:
    beam: int = option(1, minimum=1, help="beam width of the greedy selection")


@register
class SelectiveReplication(Solver):
    """Every GPU its own group (no model parallelism); repeatedly add the (model, GPU)
    replica that most increases SLO attainment while memory allows (AlpaServe's baseline)."""

    name = "selective-replication"
    summary = "one GPU per group, greedy replica selection by simulation (baseline)"
    Options = SelectiveReplicationOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        shells = [((d,), 1, 1) for d in range(instance.cluster.n_gpus)]
        groups, stats = greedy_selection(instance, shells, beam=self.options.beam, time_limit=time_limit)
        return Placement(groups=tuple(groups), provenance={"search": stats})
