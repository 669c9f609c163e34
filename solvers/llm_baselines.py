"""LLM baselines of the MuxServe evaluation: spatial partitioning, temporal multiplexing and
the greedy-memory placement of its ablation.

* ``spatial``: every LLM alone on its own mesh of the fewest GPUs that keep the hardware
  rules (weights, reserve and one request's KV cache; heads; a cost-table entry); GPUs left over then go, one
  doubling at a time, to the LLM whose Eq. 3 estimate falls furthest below its rate (when
  the meshes still pack into the nodes). Whole SMs, continuous batching, no sharing.
* ``temporal``: MuxServe's placement search, but each mesh runs one job at a time on all its
  SMs in FCFS order (AlpaServe-style temporal multiplexing), and the search estimates that
  scheduling (shares 1, colocated LLMs' decode steps one after another), so the baseline is
  the best temporal placement the search finds, not a MuxServe placement served worse. The
  placement records ``Placement.scheduling = "temporal"``, which the simulator honours.
* ``greedy-memory``: per mesh group, the highest-rate LLM first onto the mesh with the most
  free memory; the group with the best estimate wins.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.solvers.llm_estimator import build_tables
from placement_opt.solvers.mesh_greedy import FREE_MEMORY
from placement_opt.llm_units import llm_config, llm_specs, mesh_memory
from placement_opt.placement import Group, Placement
from placement_opt.settings import rule_set
from placement_opt.spaces import allocate_devices

from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.muxserve import (MeshSearchOptions, MuxServeOptions, RulesOptions, best_mesh_group_placement,
                                            deadline_of, mark_stopped, search_mesh_groups, to_placement)


@register
class Spatial(Solver):
    """Each LLM on dedicated GPUs (vLLM-style spatial partitioning)."""

    name = "spatial"
    summary = "each LLM alone on the fewest GPUs that hold it, spare GPUs to the most loaded (LLM baseline)"
    family = "llm"
    Options = RulesOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        cfg = llm_config(instance)
        specs = llm_specs(instance)
        cl = instance.cluster
        rules = rule_set(self.options.rules)
        tables = build_tables(specs, cl, cfg.max_batch, mesh_memory(instance, rules), full_share=True)
        t_of = {int(t): i for i, t in enumerate(tables.tps)}
        sizes = []
        for i, s in enumerate(specs):
            ok = [int(t) for t, f in zip(tables.tps, tables.feasible[i]) if f]
            if not ok:
                raise InputError(f"fits no mesh of one node under the {rules.name} rules", f"models[{s.name}]")
            sizes.append(min(ok))
        if allocate_devices(sizes, cl.nodes, cl.gpus_per_node) is None:
            raise InputError(f"the LLMs need {sum(sizes)} GPUs in dedicated meshes; the cluster cannot hold them",
                             "models")

        def deficit(i: int) -> float:
            est, _, _ = tables.estimate([i], t_of[sizes[i]])
            return est / specs[i].rate if specs[i].rate > 0 else np.inf

        grown = True
        while grown:
            grown = False
            for i in sorted(range(len(specs)), key=lambda i: (deficit(i), i)):
                if deficit(i) >= 1.0 - 1e-9:
                    break
                bigger = sizes[i] * 2
                if bigger not in t_of or not tables.feasible[i, t_of[bigger]]:
                    continue
                trial = sizes[:i] + [bigger] + sizes[i + 1:]
                if allocate_devices(trial, cl.nodes, cl.gpus_per_node) is not None:
                    sizes = trial
                    grown = True
                    break
        devices = allocate_devices(sizes, cl.nodes, cl.gpus_per_node)
        assert devices is not None  # the first sizes and every growth kept were checked to pack
        groups = tuple(Group(devices=d, pp=1, tp=len(d), models=(s.name,), sm_share=(1.0,))
                       for d, s in sorted(zip(devices, specs), key=lambda x: x[0][0]))
        return Placement(groups=groups, provenance={"rules": rules.name})


@register
class Temporal(Solver):
    """MuxServe's mesh search for temporal multiplexing (one job at a time per mesh)."""

    name = "temporal"
    summary = "MuxServe's mesh search for one job at a time per mesh in FCFS order (LLM baseline)"
    family = "llm"
    Options = MuxServeOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        return best_mesh_group_placement(instance, self.options, full_share=True, scheduling="temporal",
                                         deadline=deadline_of(time_limit))


@register
class GreedyMemory(Solver):
    """MuxServe's placement ablation baseline: highest rate first onto the most free memory."""

    name = "greedy-memory"
    summary = "highest-rate LLM first onto the mesh with the most free memory (LLM baseline)"
    family = "llm"
    Options = MeshSearchOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        stopped: Dict[str, bool] = {}
        search = search_mesh_groups(instance, FREE_MEMORY, options=self.options, deadline=deadline_of(time_limit),
                                    stopped=stopped)
        if not search.ranked:  # stopped before any mesh group was placed
            return Placement(groups=(), provenance={"search": {"mesh_groups": search.mesh_groups, **stopped}})
        return mark_stopped(to_placement(instance, search, search.ranked[0], rule_set(self.options.rules)), stopped)
