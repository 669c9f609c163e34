"""MuxServe placement (ICML'24, Algorithms 1 and 2): colocate LLMs on meshes for throughput.

1. Parallel candidates (Algorithm 2, :func:`placement_opt.solvers.llm_estimator.build_tables`): per
   LLM and TP degree, the smallest SM share (30-100 %) whose Eq. 3 estimate meets its rate.
2. Mesh groups (:mod:`placement_opt.spaces.meshes`): one power-of-two split per node, pruned to
   at most one mesh per LLM and a largest mesh that holds the largest LLM (267 groups for 16
   to 19 LLMs on 4 x 8 GPUs, as the reference implementation evaluates).
3. Per group, LLMs in decreasing rate x size go greedily to the mesh with the largest
   estimated throughput gain under memory and SM constraints (:mod:`placement_opt.solvers.mesh_greedy`,
   Numba); the group with the highest estimated throughput wins. Estimates saturate at the
   rates, so ties are common: they go to the group that oversubscribes SMs least, then to
   the one whose units estimate most at twice the rates (headroom), then the first.
4. ``refine=K`` re-ranks the K best groups by simulating them (objective ``throughput``:
   requests/s; ``slo_attainment``: SLO attainment).

SM shares written into the placement: the candidates' shares normalised to sum to 1 on each
mesh, so every colocated LLM's decode job can run at once (a lone LLM gets the whole mesh).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.solvers.llm_estimator import EstimatorTables, build_tables
from placement_opt.solvers.mesh_greedy import GAIN, place_on_meshes
from placement_opt.spaces.meshes import mesh_devices, mesh_groups
from placement_opt.llm_units import LLMSpec, llm_config, llm_specs
from placement_opt.placement import Group, Placement
from placement_opt.simulate.llm import simulate_llm
from placement_opt.validation import option

from placement_opt.solvers.base import Solver, register


@dataclass(frozen=True)
class MuxServeOptions:
    refine: int = option(0, minimum=0, help="re-rank this many best mesh groups with the simulator; 0 = estimator only")


@dataclass(frozen=True)
class GroupResult:
    estimate: float
    group: Tuple[Tuple[int, ...], ...]  # per-node splits
    assign: np.ndarray  # mesh index of every LLM
    unit_tpt: np.ndarray
    sm_excess: float  # SM shares beyond full meshes (LLMs forced onto meshes whose SMs were taken)
    headroom: float = 0.0  # estimate of the same units at twice the rates (tie-break)


def smallest_meshes(specs: Sequence[LLMSpec], tables: EstimatorTables) -> List[int]:
    """The fewest GPUs of a mesh that holds each LLM; an LLM that fits no mesh is an input error."""
    need = []
    for i, spec in enumerate(specs):
        feasible_tps = [int(t) for t, ok in zip(tables.tps, tables.feasible[i]) if ok]
        if not feasible_tps:
            raise InputError("fits no mesh: no node holds its weights plus one request's KV cache",
                             f"models[{spec.name}]")
        need.append(min(feasible_tps))
    return need


def search_mesh_groups(instance: Instance, rule: int = GAIN, full_share: bool = False
                       ) -> Tuple[List[LLMSpec], EstimatorTables, List[GroupResult], int]:
    """Estimator tables and every feasible mesh group's greedy placement, best first (and how
    many mesh groups were enumerated)."""
    cfg = llm_config(instance)
    specs = llm_specs(instance)
    cl = instance.cluster
    tables = build_tables(specs, cl, cfg.max_batch, cfg.kv_reserve_fraction, full_share=full_share)
    need = smallest_meshes(specs, tables)
    groups = mesh_groups(cl.nodes, cl.gpus_per_node, max_meshes=len(specs), min_largest=max(need))
    tp_index = {int(t): i for i, t in enumerate(tables.tps)}
    per_gpu = cl.gpu.usable_memory_bytes * (1.0 - cfg.kv_reserve_fraction)
    if rule == GAIN:
        ranked = sorted(range(len(specs)), key=lambda i: (-specs[i].rate * specs[i].weight_bytes, i))
    else:
        ranked = sorted(range(len(specs)), key=lambda i: (-specs[i].rate, i))
    order = np.asarray(ranked, dtype=np.int64)
    results = []
    for group in groups:
        sizes = [s for split in group for s in split]
        mesh_t = np.array([tp_index[s] for s in sizes], dtype=np.int64)
        cap = np.array([per_gpu * s for s in sizes])
        assign = np.full(len(specs), -1, dtype=np.int64)
        unit_tpt = np.zeros(len(sizes))
        excess = np.zeros(1)
        est = place_on_meshes(mesh_t, cap, order, rule, tables.feasible, tables.share, tables.P, tables.D,
                              tables.out_len, tables.rate, tables.weights, tables.kv, tables.tokens,
                              tables.max_batch, assign, unit_tpt, excess)
        if est >= 0:
            results.append(GroupResult(est, group, assign, unit_tpt, float(excess[0])))
    if not results:
        raise InputError("no mesh group holds every LLM with room for its KV cache", "models")
    return specs, tables, rank(results, tables, per_gpu), len(groups)


def rank(results: List[GroupResult], tables: EstimatorTables, per_gpu: float) -> List[GroupResult]:
    """Best first: estimate (to 0.1 %), then less SM oversubscription, then more headroom
    (the same units' estimate at twice the rates), then enumeration order."""
    top = max(r.estimate for r in results)
    tied = [r for r in results if r.estimate >= top * (1 - 1e-3)]
    doubled = replace(tables, rate=tables.rate * 2.0)
    scored = []
    for r in tied:
        head = 0.0
        sizes = [s for split in r.group for s in split]
        for d, size in enumerate(sizes):
            members = np.flatnonzero(r.assign == d)
            if len(members):
                t = int(np.flatnonzero(tables.tps == size)[0])
                head += doubled.estimate(members, t, per_gpu * size)[0]
        scored.append(replace(r, headroom=head))
    scored.sort(key=lambda r: (round(r.sm_excess, 6), -r.headroom))
    rest = sorted((r for r in results if r.estimate < top * (1 - 1e-3)), key=lambda r: -r.estimate)
    return scored + rest


def to_placement(instance: Instance, specs: Sequence[LLMSpec], tables: EstimatorTables, result: GroupResult,
                 full_share: bool = False, scheduling: Optional[str] = None, **provenance: Any) -> Placement:
    """Groups of the non-empty meshes with their LLMs and SM shares."""
    devices = mesh_devices(result.group, instance.cluster.gpus_per_node)
    out = []
    for d, devs in enumerate(devices):
        members = [i for i in range(len(specs)) if result.assign[i] == d]
        if not members:
            continue
        t = int(np.flatnonzero(tables.tps == len(devs))[0])
        shares = np.array([tables.share[i, t] for i in members])
        if full_share or len(members) == 1:
            shares[:] = 1.0
        else:
            shares = shares / shares.sum()
        sm_share = tuple(float(round(min(s, 1.0), 4)) for s in shares)
        out.append(Group(devices=devs, pp=1, tp=len(devs), models=tuple(specs[i].name for i in members),
                         sm_share=sm_share))
    search = {"mesh_groups": provenance.pop("mesh_groups", None), "estimated_throughput_rps": result.estimate,
              "mesh_group": [list(s) for s in result.group]}
    return Placement(groups=tuple(out), provenance={"search": search, **provenance}, scheduling=scheduling)


def refine_by_simulation(instance: Instance, specs: Sequence[LLMSpec], tables: EstimatorTables,
                         results: Sequence[GroupResult], k: int, full_share: bool = False,
                         scheduling: Optional[str] = None, **provenance: Any) -> Placement:
    """The best of the ``k`` top groups by simulated objective (ties: the better estimate).

    The ``throughput`` objective is rate-weighted (``throughput_weighted_rps``, the MuxServe
    paper's metric); ``slo_attainment`` is the share of requests within their SLO.
    """
    key = "slo_attainment" if instance.objective == "slo_attainment" else "throughput_weighted_rps"
    best: Optional[Placement] = None
    best_val = -np.inf
    for r in results[:k]:
        pl = to_placement(instance, specs, tables, r, full_share, scheduling, **provenance)
        val = simulate_llm(instance, pl)[key]
        if val > best_val + 1e-12:
            best, best_val = pl, val
    assert best is not None  # k >= 1 and results is never empty (search_mesh_groups raises)
    return best


@register
class MuxServe(Solver):
    """Enumeration-based greedy LLM placement with the Eq. 3 estimator (MuxServe)."""

    name = "muxserve"
    summary = "MuxServe: mesh groups x greedy colocation by estimated throughput (LLM)"
    family = "llm"
    Options = MuxServeOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        return best_mesh_group_placement(instance, self.options.refine)


def best_mesh_group_placement(instance: Instance, refine: int, full_share: bool = False,
                              scheduling: Optional[str] = None) -> Placement:
    """The estimator's best mesh group, or with ``refine`` > 0 the simulator's best of the top ``refine``."""
    specs, tables, results, n_groups = search_mesh_groups(instance, GAIN)
    if refine > 0:
        return refine_by_simulation(instance, specs, tables, results, refine, full_share=full_share,
                                    scheduling=scheduling, mesh_groups=n_groups)
    return to_placement(instance, specs, tables, results[0], full_share=full_share, scheduling=scheduling,
                        mesh_groups=n_groups)
