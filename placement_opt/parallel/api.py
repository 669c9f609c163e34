"""``parallelize``: a model on ``pp x tp`` GPUs -> stage latencies, memory and sharding plan.

Steps: build the unit chain (:mod:`.graph`); for every distinct unit kind solve the
intra-op ILP on a ``tp``-GPU mesh twice, for the fastest plan and for the leanest one
(:mod:`.intraop`, memoised: all transformer layers of a model are identical); run the
inter-op DP over the chain (:mod:`.interop`) at batch 1; re-evaluate the chosen plans at
every batch size. Results are memoised by (architecture, GPU, links, pp, tp, solver).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from placement_opt.cluster import Cluster, GPUSpec, Link
from placement_opt.errors import InputError
from placement_opt.model import Architecture, ModelSpec
from placement_opt.profile import ConfigProfile, Profile, parallel_configs
from placement_opt.costs.calibration import calibration_for
from placement_opt.costs.costmodel import Calibration, CommModel
from placement_opt.parallel.graph import LayerGraph, model_units
from placement_opt.parallel.interop import InterOpTable, stage_dp, uniform_partition
from placement_opt.parallel.intraop import IntraOpPlan, build_problem, evaluate, solve

BATCH_SIZES = (1, 2, 4, 8, 16)
#: Largest GPU count :func:`architecture_profile` enumerates.
MAX_PROFILE_GPUS = 64


@dataclass(frozen=True, eq=False)
class UnitCosts:
    """A unit kind's fast and lean plans on one mesh with their latency per batch size."""

    kind: str
    fast: IntraOpPlan
    lean: IntraOpPlan
    fast_latency: np.ndarray  # by batch size
    lean_latency: np.ndarray
    activation_bytes: float  # peak per-GPU activation at the largest batch size (fast plan)


@dataclass(frozen=True, eq=False)
class ParallelizedModel:
    """A model parallelized on ``pp`` stages of ``tp`` GPUs each."""

    pp: int
    tp: int
    batch_sizes: Tuple[int, ...]
    units: Tuple[str, ...]  # unit kind along the chain (embedding, transformer/moe..., head)
    stage_layers: Tuple[Tuple[int, int], ...]  # [start, end) unit ranges
    stage_latency: np.ndarray  # [batch, stage] seconds, send/recv to the next stage included
    stage_weight_bytes: Tuple[float, ...]  # per GPU
    stage_activation_bytes: Tuple[float, ...]  # per GPU, peak, at the largest batch size
    stage_lean: Tuple[bool, ...]  # stage runs its units' leanest plans to fit memory
    stage_collectives: Tuple[Dict[str, int], ...]  # collective counts per forward pass
    plans: Dict[str, Tuple[IntraOpPlan, IntraOpPlan]]  # unit kind -> (fast, lean)
    memory_budget: float
    solver: str

    @property
    def n_gpus(self) -> int:
        return self.pp * self.tp

    @property
    def fits_memory(self) -> bool:
        return max(self.stage_weight_bytes) <= self.memory_budget * (1 + 1e-9)

    def latency(self, batch: int = 1) -> float:
        return float(self.stage_latency[self.batch_sizes.index(batch)].sum())

    def to_config_profile(self) -> ConfigProfile:
        return ConfigProfile(pp=self.pp, tp=self.tp, batch_sizes=self.batch_sizes,
                             stage_latency=self.stage_latency.copy(), stage_weight_bytes=self.stage_weight_bytes,
                             stage_layers=self.stage_layers)

    def to_dict(self) -> dict:
        """JSON view: stages, latencies (s), memory (GB) and the sharding plan."""
        plans = {}
        for kind, (fast, lean) in self.plans.items():
            plans[kind] = {name: {"ops": dict(zip(p.ops, p.choice)), "weight_gb_per_gpu": p.weight_bytes / 1e9,
                                  "collectives": _count(p.collectives)}
                           for name, p in (("fast", fast), ("lean", lean))}
        return {
            "pp": self.pp, "tp": self.tp, "n_gpus": self.n_gpus, "solver": self.solver,
            "fits_memory": self.fits_memory, "memory_budget_gb": self.memory_budget / 1e9,
            "stages": [
                {"units": list(self.stage_layers[s]),
                 "unit_kinds": _runs(self.units[self.stage_layers[s][0]:self.stage_layers[s][1]]),
                 "plan": "lean" if self.stage_lean[s] else "fast",
                 "latency_s": {str(b): float(self.stage_latency[i, s]) for i, b in enumerate(self.batch_sizes)},
                 "weight_gb_per_gpu": self.stage_weight_bytes[s] / 1e9,
                 "activation_gb_per_gpu": self.stage_activation_bytes[s] / 1e9,
                 "collectives": self.stage_collectives[s]}
                for s in range(self.pp)],
            "latency_s": {str(b): self.latency(b) for b in self.batch_sizes},
            "sharding": plans,
        }


def _count(colls: Iterable[Tuple[str, float]]) -> Dict[str, int]:
    """How many collectives of each kind ``colls`` (kind, bytes) holds."""
    out: Dict[str, int] = {}
    for kind, _ in colls:
        out[kind] = out.get(kind, 0) + 1
    return out


def _runs(kinds: Sequence[str]) -> List[str]:
    """Summarise a unit-kind sequence: ['embedding', 'transformer x12'] (counts if it alternates)."""
    out: List[list] = []
    for k in kinds:
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    if len(out) > 4:  # e.g. dense and MoE layers alternating: count each kind instead
        counts: Dict[str, int] = {}
        for k in kinds:
            counts[k] = counts.get(k, 0) + 1
        out = [[k, c] for k, c in counts.items()]
    return [k if c == 1 else f"{k} x{c}" for k, c in out]


def _architecture(model: Union[ModelSpec, Architecture]) -> Architecture:
    if isinstance(model, Architecture):
        return model
    if isinstance(model, ModelSpec) and model.architecture is not None:
        return model.architecture
    raise InputError("parallelize needs a model with an architecture", "model")


def parallelize(model: Union[ModelSpec, Architecture], cluster: Cluster, n_gpus: int, pp: int, tp: int, *,
                solver: str = "cp-sat", batch_sizes: Tuple[int, ...] = BATCH_SIZES) -> ParallelizedModel:
    """Parallelize ``model`` on ``n_gpus = pp x tp`` GPUs of ``cluster`` (memoised).

    Stages get contiguous unit ranges (unit 0 is the embedding, the last the LM head) found
    by the inter-op DP; each stage's ``tp`` GPUs run the ILP-optimal sharding. Stages whose
    weights exceed the GPU's usable memory are avoided when possible; otherwise the result
    keeps honest per-GPU memory and ``fits_memory`` is False.
    """
    arch = _architecture(model)
    _check_config(arch, cluster, n_gpus, pp, tp)
    batch_sizes = tuple(sorted(set(int(b) for b in batch_sizes)))
    return _parallelize_memo(arch, cluster.gpu, cluster.intra_node_link, cluster.inter_node_link,
                             cluster.gpus_per_node, pp, tp, solver, batch_sizes)


def _check_config(arch: Architecture, cluster: Cluster, n_gpus: int, pp: int, tp: int) -> None:
    for name, v in (("n_gpus", n_gpus), ("pp", pp), ("tp", tp)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", name)
    if pp * tp != n_gpus:
        raise InputError(f"pp x tp = {pp * tp} does not equal n_gpus = {n_gpus}", "n_gpus")
    if n_gpus > cluster.n_gpus:
        raise InputError(f"{n_gpus} GPUs requested but the cluster has {cluster.n_gpus}", "n_gpus")
    units = arch.layers + 2
    if pp > units:
        raise InputError(f"{pp} stages exceed the {units} units (embedding, {arch.layers} layers, head)", "pp")


@lru_cache(maxsize=4096)
def _parallelize_memo(arch: Architecture, gpu: GPUSpec, intra: Link, inter: Link, gpus_per_node: int, pp: int,
                      tp: int, solver: str, batch_sizes: Tuple[int, ...]) -> ParallelizedModel:
    """:func:`parallelize` memoised on hashable parts (a cluster just big enough for ``pp x tp``)."""
    cluster = Cluster(nodes=max(1, -(-pp * tp // gpus_per_node)), gpus_per_node=gpus_per_node, gpu=gpu,
                      intra_node_link=intra, inter_node_link=inter)
    return parallelize_with(arch, cluster, pp * tp, pp, tp, calibration_for(gpu), solver=solver,
                            batch_sizes=batch_sizes)


def parallelize_with(arch: Architecture, cluster: Cluster, n_gpus: int, pp: int, tp: int, calib: Calibration,
                     solver: str = "cp-sat", batch_sizes: Tuple[int, ...] = BATCH_SIZES,
                     bounds: Optional[Tuple[Tuple[int, int], ...]] = None) -> ParallelizedModel:
    """:func:`parallelize` with explicit cost-model parameters (not memoised; used by the fit).

    ``bounds`` imposes a stage split (e.g. :func:`.interop.uniform_partition`) instead of the DP's.
    """
    if pp * tp != n_gpus:
        raise InputError(f"pp x tp = {pp * tp} does not equal n_gpus = {n_gpus}", "n_gpus")
    chain = _Chain.build(arch, cluster, n_gpus, tp, calib, solver, batch_sizes)
    units, kinds, costs, send_time = chain.units, chain.kinds, chain.costs, chain.send_time
    lat_fast, mem_fast, lat_lean, mem_lean = chain.lat_fast, chain.mem_fast, chain.lat_lean, chain.mem_lean
    budget = cluster.gpu.usable_memory_bytes
    send = chain.send_at_batch_1(pp)
    if bounds is not None:
        if len(bounds) != pp or bounds[0][0] != 0 or bounds[-1][1] != len(units):
            raise InputError(f"expected {pp} contiguous unit ranges covering 0..{len(units)}", "bounds")
        stage_bounds = tuple(bounds)
        part_lean = tuple(bool(mem_fast[a:b].sum() > budget) for a, b in stage_bounds)
    else:
        part = stage_dp(lat_fast, mem_fast, lat_lean, mem_lean, send, budget, pp).partition(pp)
        part_lean = part.lean
        if not part.bounds:  # nothing fits: balance latency with the lean plans, report memory honestly
            part = stage_dp(lat_lean, mem_lean, lat_lean, mem_lean, send, np.inf, pp).partition(pp)
            part_lean = tuple(True for _ in range(pp))
        stage_bounds = part.bounds
    lat = np.zeros((len(batch_sizes), pp))
    weights, acts, colls = [], [], []
    for s, ((a, b), lean) in enumerate(zip(stage_bounds, part_lean)):
        stage_units = kinds[a:b]
        for i, bs in enumerate(batch_sizes):
            per = [(costs[k].lean_latency if lean else costs[k].fast_latency)[i] for k in stage_units]
            lat[i, s] = sum(per) + (send_time(s, arch.seq_len * bs, units[b - 1]) if s < pp - 1 else 0.0)
        plans = [costs[k].lean if lean else costs[k].fast for k in stage_units]
        w = sum(p.weight_bytes for p in plans)
        if a == 0 and b == len(units) and arch.tied_embeddings:
            w -= _tied_head_bytes(plans[0], plans[-1])
        weights.append(float(w))
        acts.append(max(costs[k].activation_bytes for k in set(stage_units)))
        count: Dict[str, int] = {}
        for p in plans:
            for kind, n in _count(p.collectives).items():
                count[kind] = count.get(kind, 0) + n
        if s < pp - 1:
            count["send-recv"] = 1
        colls.append(count)
    return ParallelizedModel(
        pp=pp, tp=tp, batch_sizes=tuple(batch_sizes), units=kinds, stage_layers=stage_bounds, stage_latency=lat,
        stage_weight_bytes=tuple(weights), stage_activation_bytes=tuple(acts), stage_lean=tuple(part_lean),
        stage_collectives=tuple(colls), plans={k: (c.fast, c.lean) for k, c in costs.items()},
        memory_budget=budget, solver=solver,
    )


@dataclass(frozen=True, eq=False)
class _Chain:
    """The DP's inputs: per-unit fast/lean latency (batch 1) and weights on a tp-GPU mesh."""

    arch: Architecture
    units: Tuple[LayerGraph, ...]
    kinds: Tuple[str, ...]
    costs: Dict[str, UnitCosts]
    send_comm: CommModel
    group_gpus: int
    tp: int
    gpus_per_node: int
    lat_fast: np.ndarray
    mem_fast: np.ndarray
    lat_lean: np.ndarray
    mem_lean: np.ndarray

    @classmethod
    def build(cls, arch: Architecture, cluster: Cluster, n_gpus: int, tp: int, calib: Calibration, solver: str,
              batch_sizes: Tuple[int, ...]) -> "_Chain":
        """The chain of ``arch`` on ``tp``-GPU stages of an ``n_gpus``-GPU group, every unit kind's plans solved."""
        units = model_units(arch)
        kinds = tuple(u.kind for u in units)
        comm = CommModel.for_group(cluster, tp, calib)
        distinct = {u.kind: u for u in units}
        costs = {k: _unit_costs(u, arch.seq_len, tp, cluster.gpu, comm, calib, solver, batch_sizes)
                 for k, u in distinct.items()}
        return cls(arch=arch, units=units, kinds=kinds, costs=costs,
                   send_comm=CommModel.for_group(cluster, 2, calib), group_gpus=n_gpus, tp=tp,
                   gpus_per_node=cluster.gpus_per_node,
                   lat_fast=np.array([costs[k].fast_latency[0] for k in kinds]),
                   mem_fast=np.array([costs[k].fast.weight_bytes for k in kinds]),
                   lat_lean=np.array([costs[k].lean_latency[0] for k in kinds]),
                   mem_lean=np.array([costs[k].lean.weight_bytes for k in kinds]))

    def send_time(self, stage: int, tokens: int, unit: LayerGraph) -> float:
        """Send/recv after ``stage``; across nodes when the stage ends on a node boundary."""
        g = self.gpus_per_node
        cross = self.group_gpus > g and ((stage + 1) * self.tp) % g == 0
        return self.send_comm.send_recv(unit.out_bytes * tokens, cross)

    def send_at_batch_1(self, stages: int) -> np.ndarray:
        # every boundary carries one layer's output activation (embedding and layers alike)
        return np.array([self.send_time(s, self.arch.seq_len, self.units[1]) for s in range(stages)])


def inter_op_table(model: Union[ModelSpec, Architecture], cluster: Cluster, n_gpus: int, tp: int, *,
                   solver: str = "cp-sat") -> InterOpTable:
    """The DP table for stages of ``tp`` GPUs within ``n_gpus`` GPUs, at batch 1.

    ``table.cost[s, K]`` is the slowest-stage latency with ``s`` stages (up to
    ``min(n_gpus // tp, K)``), ``table.best_stage_count()`` the best ``s`` and
    ``table.partition(s)`` its split, so callers can pick.
    """
    arch = _architecture(model)
    for name, v in (("n_gpus", n_gpus), ("tp", tp)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", name)
    if tp > n_gpus or n_gpus > cluster.n_gpus:
        raise InputError(f"need tp <= n_gpus <= {cluster.n_gpus} GPUs of the cluster, got tp={tp}, "
                         f"n_gpus={n_gpus}", "n_gpus")
    max_stages = min(n_gpus // tp, arch.layers + 2)
    chain = _Chain.build(arch, cluster, n_gpus, tp, calibration_for(cluster.gpu), solver, BATCH_SIZES)
    return stage_dp(chain.lat_fast, chain.mem_fast, chain.lat_lean, chain.mem_lean,
                    chain.send_at_batch_1(max_stages), cluster.gpu.usable_memory_bytes, max_stages)


def _tied_head_bytes(emb_plan: IntraOpPlan, head_plan: IntraOpPlan) -> float:
    """LM-head weights saved when the head shares the embedding table in the same stage.

    The table is shared only when both hold the same slice of it: both replicated, or both
    split by vocabulary rows (embedding ``vocab+all-reduce``, head ``column``).
    """
    emb, head = emb_plan.choice[0], head_plan.choice[-1]
    shared = (emb, head) in (("replicated", "replicated"), ("vocab+all-reduce", "column"))
    return head_plan.weight_bytes if shared else 0.0


@lru_cache(maxsize=4096)
def _unit_costs(unit: LayerGraph, seq_len: int, tp: int, gpu: GPUSpec, comm: CommModel, calib: Calibration, solver: str,
                batch_sizes: Tuple[int, ...]) -> UnitCosts:
    """Fast and lean ILP plans of ``unit`` at batch 1, evaluated at every batch size."""
    problem = build_problem(unit, tp, gpu, comm, calib, seq_len)
    fast = solve(problem, None, solver)
    assert fast is not None  # without a memory row every unit has a plan
    min_weight = sum(float(w.min()) for w in problem.node_weight)
    lean = fast if fast.weight_bytes <= min_weight * (1 + 1e-9) else solve(problem, min_weight * (1 + 1e-9), solver)
    if lean is None:  # the integer memory rounding excluded the exact minimum; take the least-memory plan
        lean = solve(problem, min_weight + 1024.0 * len(problem.node_weight), solver)
    assert lean is not None  # the budget above admits the least-memory plan
    fast_lat, lean_lat = [], []
    for bs in batch_sizes:
        p = problem if bs == 1 else build_problem(unit, tp, gpu, comm, calib, seq_len * bs)
        fast_lat.append(evaluate(p, fast.index) / 1e9)
        lean_lat.append(evaluate(p, lean.index) / 1e9)
    tokens = seq_len * max(batch_sizes)
    act = 0.0
    for i, op in enumerate(problem.graph.ops):
        st = problem.strategies[i][fast.index[i]]
        act = max(act, op.out_bytes * tokens / (1 if st.out_layout == 0 else tp))
    return UnitCosts(kind=unit.kind, fast=fast, lean=lean, fast_latency=np.array(fast_lat),
                     lean_latency=np.array(lean_lat), activation_bytes=2.0 * act)


def enumerate_parallel_configs(model: Union[ModelSpec, Architecture], n_gpus: int, cluster: Cluster, *,
                               max_tp: Optional[int] = None, solver: str = "cp-sat") -> List[Tuple[int, int]]:
    """Every ``(pp, tp)`` with pp x tp = n_gpus whose stages fit the GPUs' usable memory.

    ``tp`` runs over powers of two up to ``max_tp`` (default: GPUs per node, so tensor
    parallelism stays inside a node); ``pp`` is at most the unit count. Ordered by tp.
    ``parallelize(model, cluster, n_gpus, pp, tp)`` then gives each plan (memoised).
    """
    arch = _architecture(model)
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, (int, np.integer)) or n_gpus < 1:
        raise InputError(f"must be a positive integer, got {n_gpus!r}", "n_gpus")
    max_tp = cluster.gpus_per_node if max_tp is None else max_tp
    return [(pp, tp) for pp, tp in parallel_configs(n_gpus, max_tp)
            if pp <= arch.layers + 2 and parallelize(arch, cluster, n_gpus, pp, tp, solver=solver).fits_memory]


def architecture_profile(name: str, arch: Architecture, cluster: Cluster) -> Profile:
    """Profile of every power-of-two GPU count up to the cluster size (at most 64), tp in a node."""
    max_gpus = min(cluster.n_gpus, MAX_PROFILE_GPUS)
    configs = _profile_configs(arch, cluster.gpu, cluster.intra_node_link, cluster.inter_node_link,
                               cluster.gpus_per_node, max_gpus)
    return Profile(name=name, weight_bytes=float(arch.weight_bytes()), configs=dict(configs), layers=arch.layers + 2,
                   source="cost model (placement_opt.parallel): inter-op DP over ILP-sharded units")


@lru_cache(maxsize=1024)
def _profile_configs(arch: Architecture, gpu: GPUSpec, intra: Link, inter: Link, gpus_per_node: int,
                     max_gpus: int) -> Tuple[Tuple[Tuple[int, int], ConfigProfile], ...]:
    """Every profiled config of :func:`architecture_profile`, memoised on hashable parts."""
    configs: List[Tuple[Tuple[int, int], ConfigProfile]] = []
    n = 1
    while n <= max_gpus:
        for pp, tp in parallel_configs(n, gpus_per_node):
            if pp <= arch.layers + 2:
                pm = _parallelize_memo(arch, gpu, intra, inter, gpus_per_node, pp, tp, "cp-sat", BATCH_SIZES)
                configs.append(((pp, tp), pm.to_config_profile()))
        n *= 2
    return tuple(configs)


def parallelize_uniform(model: Union[ModelSpec, Architecture], cluster: Cluster, n_gpus: int, pp: int, tp: int, *,
                        solver: str = "cp-sat") -> ParallelizedModel:
    """The manual baseline of the paper's Fig. 16: equal transformer layers per stage.

    Same intra-op plans as :func:`parallelize`; only the stage split differs.
    """
    arch = _architecture(model)
    _check_config(arch, cluster, n_gpus, pp, tp)
    if pp > arch.layers:
        raise InputError(f"{pp} stages exceed the {arch.layers} transformer layers", "pp")
    return parallelize_with(arch, cluster, n_gpus, pp, tp, calibration_for(cluster.gpu), solver=solver,
                            bounds=uniform_partition(arch.layers, pp))
