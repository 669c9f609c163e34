"""``alpaserve-greedy``: AlpaServe Algorithm 1 on one fixed group partition and parallel config.

The cluster is cut into equal groups of ``group_size`` GPUs (plus a remainder group when
the size does not divide the cluster), every group runs ``pp`` x ``tp``, and the
simulator-guided greedy (:func:`solvers.greedy.greedy_selection`) picks the models of every
group. ``fast=true`` switches to the paper's one-simulation-per-round heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.spaces import GroupPartitions, allocate_devices
from placement_opt.validation import option

from placement_opt.solvers.backends import Progress
from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.greedy import Shell, greedy_selection, to_groups
from placement_opt.solvers.round_robin import smallest_pipeline_size


@dataclass(frozen=True)
class AlpaServeGreedyOptions:
    group_size: int = option(0, minimum=0,
                             help="GPUs per group; 0 = the fewest that hold every model as a tp-way pipeline")
    tp: int = option(1, minimum=1, help="tensor-parallel degree of every group (pp = group_size / tp)")
    beam: int = option(1, minimum=1, help="beam width")
    fast: bool = option(False, help="one simulation per round: most-unserved model onto the least-utilised group")
    prune: bool = option(True, help="exact bound pruning of candidates (same answer, fewer simulations)")
    progress: bool = option(True, help="report candidates evaluated and best attainment on stderr")


def shells_for(instance: Instance, sizes: Sequence[int], configs: Sequence[Tuple[int, int]]
               ) -> List[Tuple[Tuple[int, ...], int, int]]:
    """[(devices, pp, tp)] for groups of ``sizes`` with ``configs``, placed on real devices."""
    cl = instance.cluster
    devices = allocate_devices(sizes, cl.nodes, cl.gpus_per_node)
    if devices is None:
        raise InputError(f"groups of sizes {list(sizes)} do not fit the cluster's nodes", "solver.options")
    return [(d, pp, tp) for d, (pp, tp) in zip(devices, configs)]


def fixed_partition(instance: Instance, group_size: int, tp: int) -> List[Tuple[Tuple[int, ...], int, int]]:
    """Equal groups of ``group_size`` (remainder group when valid) all running (size / tp, tp)."""
    cl = instance.cluster
    if group_size < 1 or group_size > cl.n_gpus:
        raise InputError(f"must be between 1 and {cl.n_gpus}", "solver.options.group_size")
    if tp < 1 or group_size % tp:
        raise InputError(f"tp {tp} does not divide group_size {group_size}", "solver.options.tp")
    parts = list(GroupPartitions(cl.n_gpus, cl.gpus_per_node, [group_size]))
    if not parts:
        raise InputError(f"groups of {group_size} GPUs cannot respect the node size {cl.gpus_per_node}",
                         "solver.options.group_size")
    sizes = parts[0]
    configs = [(s // tp, tp) if s % tp == 0 else (s, 1) for s in sizes]
    return shells_for(instance, sizes, configs)


@register
class AlpaServeGreedy(Solver):
    """Algorithm 1: fixed equal groups and config, simulator-guided greedy (beam) model selection."""

    name = "alpaserve-greedy"
    summary = "AlpaServe Algorithm 1: fixed group partition and config, greedy model selection"
    Options = AlpaServeGreedyOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        o = self.options
        size = o.group_size or smallest_pipeline_size(instance, o.tp)
        shells = fixed_partition(instance, size, o.tp)
        reporter = Progress(self.name, instance, enabled=o.progress)
        groups, stats = greedy_selection(instance, shells, beam=o.beam, time_limit=time_limit, fast=o.fast,
                                         prune=o.prune, progress=greedy_progress(reporter, instance, shells))
        placement = Placement(groups=tuple(groups), provenance={"search": stats})
        reporter.done(stats["candidates_evaluated"], lambda: placement)
        return placement


def greedy_progress(reporter: Progress, instance: Instance, shells: Sequence[Shell]) -> Callable[[int, tuple], None]:
    """The greedy's progress callback for ``reporter``: the placement an interrupted greedy
    returns is its best state's models on the shells."""
    def report(evaluated: int, best_models: tuple) -> None:
        reporter.update(evaluated, lambda: Placement(groups=tuple(to_groups(instance, shells, best_models))))
    return report
