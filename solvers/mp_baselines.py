"""Model-parallel baselines: ``mp-greedy-N`` (fixed N-GPU pipelines, greedy selection) and
``mp-equal`` (one model per dedicated group, one fixed config).

``mp-greedy-4`` is the paper's ablation "greedy placement with 4-stage pipelines for all
groups" (Fig. 17): no search over partitions or configs, only Algorithm 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.feasibility import fits
from placement_opt.instance import Instance
from placement_opt.placement import Group, Placement
from placement_opt.spaces import valid_group_size
from placement_opt.spaces.buckets import model_loads
from placement_opt.validation import option

from placement_opt.solvers.alpaserve_greedy import fixed_partition, greedy_progress
from placement_opt.solvers.backends import Progress
from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.greedy import greedy_selection

MP_GREEDY_SIZES = (2, 4, 8)


@dataclass(frozen=True)
class MPGreedyOptions:
    tp: int = option(1, minimum=1, help="tensor-parallel degree inside a group (pp = N / tp)")
    beam: int = option(1, minimum=1, help="beam width of the greedy selection")
    progress: bool = option(True, help="report candidates evaluated and best attainment on stderr")


class _MPGreedy(Solver):
    group_size: ClassVar[int] = 0
    Options = MPGreedyOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        size = min(self.group_size, instance.cluster.n_gpus)
        shells = fixed_partition(instance, size, min(self.options.tp, size))
        reporter = Progress(self.name, instance, enabled=self.options.progress)
        groups, stats = greedy_selection(instance, shells, beam=self.options.beam, time_limit=time_limit,
                                         progress=greedy_progress(reporter, instance, shells))
        placement = Placement(groups=tuple(groups), provenance={"search": stats})
        reporter.done(stats["candidates_evaluated"], lambda: placement)
        return placement


def _make_mp_greedy(n: int) -> type[Solver]:
    cls = type(f"MPGreedy{n}", (_MPGreedy,), {
        "name": f"mp-greedy-{n}",
        "summary": f"fixed {n}-GPU pipelines ({n} stages / tp), greedy model selection (ablation baseline)",
        "group_size": n,
        "__doc__": f"Equal groups of {n} GPUs, each a {n}-GPU pipeline; Algorithm 1 picks their models.",
    })
    return register(cls)


for _n in MP_GREEDY_SIZES:
    globals()[f"MPGreedy{_n}"] = _make_mp_greedy(_n)


@dataclass(frozen=True)
class MPEqualOptions:
    group_size: int = option(0, minimum=0,
                             help="GPUs per group; 0 = the largest valid size that gives every model a group")
    tp: int = option(1, minimum=1, help="tensor-parallel degree (pp = group_size / tp)")


@register
class MPEqual(Solver):
    """Dedicated model parallelism: equal groups, one model each, all in the same (pp, tp).

    Models take groups in decreasing order of load; groups left over replicate the model
    with the highest load per replica. Models that fit no group stay unplaced.
    """

    name = "mp-equal"
    summary = "one model per equal-size group, fixed config (dedicated model parallelism baseline)"
    Options = MPEqualOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        cl = instance.cluster
        o = self.options
        size = o.group_size or self._auto_size(instance)
        if size < 1 or size > cl.n_gpus or not valid_group_size(size, cl.gpus_per_node):
            raise InputError(f"group size {size} does not fit the cluster's nodes", "solver.options.group_size")
        if size % o.tp:
            raise InputError(f"tp {o.tp} does not divide group size {size}", "solver.options.tp")
        shells = [s for s in fixed_partition(instance, size, o.tp) if len(s[0]) == size]
        pp, tp = size // o.tp, o.tp
        loads = model_loads(instance)
        order = sorted(range(len(instance.models)), key=lambda m: (-loads[m], m))
        placeable = [m for m in order if fits(instance, np.zeros(pp), m, pp, tp)]
        replicas = np.zeros(len(instance.models), dtype=np.int64)
        chosen: list[int] = []
        for _ in shells:
            if not placeable:
                break
            m = max(placeable, key=lambda x: (loads[x] / (replicas[x] + 1), -x)) if len(chosen) >= len(placeable) \
                else placeable[len(chosen)]
            replicas[m] += 1
            chosen.append(m)
        names = instance.model_names
        groups = tuple(Group(devices=d, pp=pp, tp=tp, models=(names[chosen[i]],) if i < len(chosen) else ())
                       for i, (d, _, _) in enumerate(shells))
        return Placement(groups=groups)

    def _auto_size(self, instance: Instance) -> int:
        """The largest size that still gives every model its own group, but no smaller than
        the fewest GPUs that hold every model."""
        cl = instance.cluster
        tp = self.options.tp
        sizes = [s for s in range(tp, cl.n_gpus + 1) if valid_group_size(s, cl.gpus_per_node) and s % tp == 0]
        if not sizes:
            raise InputError(f"no group size is a multiple of tp={tp}", "solver.options.tp")
        fit_all = [s for s in sizes if all(fits(instance, np.zeros(s // tp), m, s // tp, tp)
                                           for m in range(len(instance.models)))]
        floor = min(fit_all) if fit_all else max(sizes)
        enough = [s for s in sizes if s >= floor and cl.n_gpus // s >= len(instance.models)]
        return max(enough) if enough else floor
