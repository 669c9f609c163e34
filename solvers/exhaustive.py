"""``exhaustive``: every partition, parallel config and model selection (tiny instances only).

The test oracle that measures the heuristics' optimality gap. Partitions are multisets of
node-respecting group sizes (unused devices allowed), every group picks a profiled config
that fits some model, every group a memory-feasible subset of the models; interchangeable
groups (same size and config) are enumerated once (:class:`ModelSelections` with
``symmetric=True``). Each candidate is simulated in full.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Iterator, List, Optional, Tuple

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.placement import Group, Placement
from placement_opt.spaces import ModelSelections, ParallelConfigs, allocate_devices
from placement_opt.spaces.partitions import AllPartitions
from placement_opt.validation import option

from placement_opt.solvers.backends import Progress
from placement_opt.solvers.base import Solver, register


@dataclass(frozen=True)
class ExhaustiveOptions:
    max_candidates: int = option(200000, minimum=1,
                                 help="refuse spaces larger than this (counted before searching)")
    progress: bool = option(True, help="report placements evaluated and best attainment on stderr")


# a placement of the space: group sizes, their (pp, tp) configs, every group's model indices
Candidate = Tuple[Tuple[int, ...], List[Tuple[int, int]], Tuple[Tuple[int, ...], ...]]


def exhaustive_space(instance: Instance, deadline: Optional[float] = None
                     ) -> Iterator[Tuple[Tuple[int, ...], List[Tuple[int, int]], ModelSelections]]:
    """Yield (sizes, configs, ModelSelections) for every partition and config assignment; stop
    early once ``deadline`` (a ``time.perf_counter()`` value) has passed (partitions whose
    sizes no config fits yield nothing, and a large cluster has very many of them)."""
    cl = instance.cluster
    for sizes in AllPartitions(cl.n_gpus, cl.gpus_per_node):
        if deadline is not None and time.perf_counter() > deadline:
            return
        per_size = {s: list(ParallelConfigs(instance, s)) for s in set(sizes)}
        runs = [(s, len(list(g))) for s, g in itertools.groupby(sizes)]
        choices = [list(itertools.combinations_with_replacement(per_size[s], k)) for s, k in runs]
        for pick in itertools.product(*choices):
            configs = [c for run in pick for c in run]
            if len(configs) != len(sizes):
                continue
            yield sizes, configs, ModelSelections(instance, configs, symmetric=True)


def count_exhaustive(instance: Instance, limit: int | None = None, deadline: float | None = None) -> Optional[int]:
    """Placements in the exhaustive space; with ``limit``, stops counting once past it (the
    space of a non-tiny instance is astronomically large, and so is the time to count it).
    None if ``deadline`` (a ``time.perf_counter()`` value) passes first."""
    total = 0
    for _, _, sel in exhaustive_space(instance, deadline):
        total += sel.count()
        if limit is not None and total > limit:
            return total
    return None if deadline is not None and time.perf_counter() > deadline else total


@register
class Exhaustive(Solver):
    """Enumerate every placement and simulate each (tiny instances: the oracle for the heuristics)."""

    name = "exhaustive"
    summary = "every partition, config and model selection, simulated (tiny instances; test oracle)"
    Options = ExhaustiveOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        start = time.perf_counter()
        deadline = None if time_limit is None else start + time_limit
        total = count_exhaustive(instance, limit=self.options.max_candidates, deadline=deadline)
        if total is None:  # the time limit passed while counting: nothing searched
            return Placement(groups=(), provenance={"search": {"timed_out": True, "interrupted": False}})
        if total > self.options.max_candidates:
            raise InputError(f"the space has more than {self.options.max_candidates} placements (max_candidates)",
                             "solver.options.max_candidates")
        ev = PlacementEvaluator(instance)
        all_models = tuple(range(len(instance.models)))
        progress = Progress(self.name, instance, enabled=self.options.progress, total=total, unit="placements")
        best_accepted = -1
        best: Optional[Candidate] = None
        evaluated = 0
        stopped = ""
        try:
            for sizes, configs, selections in exhaustive_space(instance, deadline):
                for sel in selections:
                    acc = int(ev.accepted_of_component(configs, sel, all_models).sum())
                    evaluated += 1
                    if acc > best_accepted:
                        best_accepted, best = acc, (sizes, configs, sel)
                    if progress.due():
                        chosen = best
                        progress.update(evaluated, lambda: _placement(instance, chosen))
                    if deadline is not None and time.perf_counter() > deadline:
                        raise TimeoutError
        except TimeoutError:
            stopped = "timed_out"
        except KeyboardInterrupt:
            stopped = "interrupted"
        if not stopped and deadline is not None and time.perf_counter() > deadline:
            stopped = "timed_out"  # the enumeration itself ran past the deadline
        if best is None and stopped == "timed_out":
            return Placement(groups=(), provenance={"search": {"timed_out": True, "interrupted": False}})
        if best is None:  # Ctrl-C before the first candidate: nothing to return
            raise KeyboardInterrupt
        stats = {"space": total, "candidates_evaluated": evaluated,
                 "best_attainment": best_accepted / max(ev.n_requests, 1),
                 "timed_out": stopped == "timed_out", "interrupted": stopped == "interrupted",
                 "seconds": round(time.perf_counter() - start, 4)}
        found = _placement(instance, best)
        assert found is not None  # best is set
        placement = found.with_provenance(search=stats)
        progress.done(evaluated, lambda: placement)
        return placement


def _placement(instance: Instance, candidate: Optional[Candidate]) -> Optional[Placement]:
    """The candidate (sizes, configs, model selection) as a placement on the cluster's devices."""
    if candidate is None:
        return None
    sizes, configs, sel = candidate
    cl = instance.cluster
    devices = allocate_devices(sizes, cl.nodes, cl.gpus_per_node)
    assert devices is not None  # AllPartitions yields only sizes that pack into the nodes
    names = instance.model_names
    return Placement(groups=tuple(Group(devices=d, pp=pp, tp=tp, models=tuple(names[m] for m in ms))
                                  for d, (pp, tp), ms in zip(devices, configs, sel)))
