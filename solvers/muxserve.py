"""MuxServe placement (ICML'24, Algorithms 1 and 2): colocate LLMs on meshes for throughput.

1. Parallel candidates (Algorithm 2, :func:`placement_opt.solvers.llm_estimator.build_tables`): per
   LLM and TP degree, the smallest SM share (30-100 %) whose Eq. 3 estimate meets its rate.
2. Mesh groups (:mod:`placement_opt.spaces.meshes`): one power-of-two split per node, pruned to
   at most one mesh per LLM and a largest mesh that holds the largest LLM (267 groups for 16
   to 19 LLMs on 4 x 8 GPUs, as the reference implementation evaluates).
3. Per group, LLMs in decreasing rate x size (a group where that order leaves an LLM
   without room is retried with the LLMs that need the largest meshes first, the
   reference's greedy-memory order) go greedily to the mesh with the largest
   estimated throughput gain under the rule set's memory plan and SM limit
   (:mod:`placement_opt.solvers.mesh_greedy`, Numba); the group with the highest estimated
   throughput wins. Estimates saturate at the rates, so near-ties are common: the groups
   within ``tie_tolerance`` of the best are ordered by a declared secondary objective
   (default: most headroom, i.e. the estimated throughput at each of ``headroom_scales``
   x the rates compared in turn, SM shares that oversubscribe a mesh scaled to fit it;
   then fewest GPUs in use, then enumeration order); provenance records how many tied and
   which criterion (and headroom scale) decided. The ``temporal`` baseline searches with
   the estimate of its own scheduling (colocated LLMs' decode steps one after another).
4. ``refine=K`` re-ranks the K best groups by simulating them (objective ``throughput``:
   requests/s; ``slo_attainment``: SLO attainment).

Every candidate keeps the hardware rules of :mod:`placement_opt.llm_rules` under the rule
set ``rules`` (``placeopt`` or ``muxserve``), recorded as the placement's provenance
``rules``. SM shares written into the placement: the candidates' shares normalised to sum
to 1 on each mesh, so every colocated LLM's decode job can run at once (a lone LLM gets the
whole mesh), floored to the rule set's step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.solvers.llm_estimator import EstimatorTables, Headroom, build_tables
from placement_opt.solvers.mesh_greedy import GAIN, place_on_meshes
from placement_opt.spaces.meshes import iter_mesh_groups, mesh_devices
from placement_opt.llm_units import LLMSpec, MeshMemory, llm_config, llm_specs, mesh_memory
from placement_opt.placement import Group, Placement
from placement_opt.settings import RULES, RuleSet, rule_set
from placement_opt.simulate.llm import simulate_llm
from placement_opt.validation import option

from placement_opt.solvers.base import Solver, register


TIE_BREAKS = ("headroom", "gpus")
#: relative difference below which two headroom estimates count as equal (float noise: the
#: same units summed in another order), so noise at one scale never outweighs the next scale
HEADROOM_NOISE = 1e-9


@dataclass(frozen=True)
class RulesOptions:
    rules: str = option("placeopt", choices=RULES,
                        help="hardware rule set: placeopt, or muxserve (the MuxServe reference's constants)")


@dataclass(frozen=True)
class MeshSearchOptions(RulesOptions):
    tie_tolerance: float = option(1e-3, minimum=0, maximum=1,
                                  help="mesh groups within this relative distance of the best estimate tie")
    tie_break: str = option("headroom", choices=TIE_BREAKS,
                            help="first criterion among tied groups (headroom: most estimated throughput at "
                                 "headroom_scales x the rates; gpus: fewest GPUs in use); the other one next")
    headroom_scales: tuple[float, ...] = option((1.5, 2.0, 3.0, 4.0), exclusive_minimum=1,
                                                help="rate multipliers of the headroom criterion, compared in "
                                                     "this order: the first scale whose estimates differ decides")


@dataclass(frozen=True)
class MuxServeOptions(MeshSearchOptions):
    refine: int = option(0, minimum=0, help="re-rank this many best mesh groups with the simulator; 0 = estimator only")


@dataclass(frozen=True)
class GroupResult:
    estimate: float
    group: Tuple[Tuple[int, ...], ...]  # per-node splits
    assign: np.ndarray  # mesh index of every LLM
    unit_tpt: np.ndarray
    order: int  # enumeration index (last tie-break)
    headroom: Tuple[float, ...] = ()  # estimates of the same units at each headroom scale x the rates
    gpus: int = 0  # GPUs of the meshes in use
    units: Tuple[Tuple[Tuple[int, ...], int], ...] = ()  # (LLMs, mesh size) of every used mesh, sorted
    headroom_rank: Tuple[int, ...] = ()  # per scale, the rank of the headroom's noise class among the tied (0: most)


@dataclass(frozen=True)
class SearchResult:
    """Every feasible mesh group's greedy placement, best first, and how the best was chosen."""

    specs: List[LLMSpec]
    tables: EstimatorTables
    ranked: List[GroupResult]
    mesh_groups: int
    ties: dict  # tied_groups, tie_tolerance, tie_break, headroom_scales and _decision's fields


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


def search_mesh_groups(instance: Instance, rule: int = GAIN, full_share: bool = False,
                       options: MeshSearchOptions = MeshSearchOptions(), deadline: Optional[float] = None,
                       stopped: Optional[Dict[str, bool]] = None, serial_decode: bool = False) -> SearchResult:
    """Estimator tables and every feasible mesh group's greedy placement under the rule set, best first.

    At ``deadline`` (a ``time.perf_counter()`` value) or on Ctrl-C (when the caller passes
    ``stopped``) the enumeration stops with the groups placed so far, setting
    ``stopped["timed_out"]`` or ``stopped["interrupted"]``; with none placed yet, ``ranked`` is
    empty (the caller reports it). ``serial_decode``: estimate with colocated LLMs' decode steps
    one after another (temporal scheduling)."""
    cfg = llm_config(instance)
    rules = rule_set(options.rules)
    memory = mesh_memory(instance, rules)
    specs = llm_specs(instance)
    cl = instance.cluster
    tables = build_tables(specs, cl, cfg.max_batch, memory, full_share=full_share, serial_decode=serial_decode,
                          llm=cfg)
    need = smallest_meshes(specs, tables)
    groups = iter_mesh_groups(cl.nodes, cl.gpus_per_node, max_meshes=len(specs), min_largest=max(need))
    tp_index = {int(t): i for i, t in enumerate(tables.tps)}
    if rule == GAIN:
        key = {i: -specs[i].rate * specs[i].weight_bytes for i in range(len(specs))}
    else:
        key = {i: -specs[i].rate for i in range(len(specs))}
    orders = [np.asarray(sorted(key, key=lambda i: (key[i], i)), dtype=np.int64),
              # fallback, the reference's greedy-memory order: LLMs needing larger meshes first
              np.asarray(sorted(key, key=lambda i: (-need[i], key[i], i)), dtype=np.int64)]
    results: List[GroupResult] = []
    enumerated = 0
    headroom = Headroom(tables, specs, options.headroom_scales, fit_shares=not full_share)
    ranking = _RankingCost()
    try:
        for group in groups:
            if deadline is not None and time.perf_counter() + ranking.seconds(len(results)) > deadline:
                if stopped is not None:
                    stopped["timed_out"] = True
                break
            enumerated += 1
            result = _place_group(group, enumerated - 1, specs, tables, tp_index, orders, rule, memory, rules,
                                  full_share)
            if result is not None:
                results.append(result)
                if deadline is not None:
                    ranking.sample(len(results), result, headroom)
    except KeyboardInterrupt:
        if stopped is None:  # the caller has no use for a partial enumeration
            raise
        stopped["interrupted"] = True
    if not results and stopped:
        return SearchResult(specs, tables, [], enumerated, {})
    if not results:
        raise InputError(f"no mesh group holds every LLM under the {rules.name} rules (memory, reserves, "
                         "tensor-parallel degrees)", "models")
    ordered, ties = rank(results, headroom, options)
    return SearchResult(specs, tables, ordered, enumerated, ties)


class _RankingCost:
    """The time :func:`rank` will take for the groups placed so far, so that a search with a
    deadline stops enumerating early enough to rank them by it: the measured cost of scoring
    one group (sampled every ``EVERY`` groups) times the number of groups."""

    EVERY = 256

    def __init__(self) -> None:
        self.total_s = 0.0
        self.samples = 0

    def sample(self, n_results: int, result: GroupResult, headroom: Headroom) -> None:
        """Time the scoring of ``result`` when ``n_results`` is 1 or a multiple of ``EVERY``."""
        if n_results != 1 and n_results % self.EVERY:
            return
        start = time.perf_counter()
        _scored(result, headroom)
        self.total_s += time.perf_counter() - start
        self.samples += 1

    def seconds(self, n_results: int) -> float:
        """Estimated seconds to rank ``n_results`` groups (every one scored, as if all tied)."""
        return 0.0 if not self.samples else n_results * self.total_s / self.samples


def _place_group(group: Tuple[Tuple[int, ...], ...], gi: int, specs: Sequence[LLMSpec], tables: EstimatorTables,
                 tp_index: Dict[int, int], orders: List[np.ndarray], rule: int, memory: MeshMemory, rules: RuleSet,
                 full_share: bool) -> Optional[GroupResult]:
    """The greedy placement of the LLMs on mesh group ``group`` (number ``gi`` of the
    enumeration): the first LLM order that fits, or None when none does."""
    sizes = np.array([s for split in group for s in split], dtype=np.float64)
    mesh_t = np.array([tp_index[int(s)] for s in sizes], dtype=np.int64)
    for order in orders:
        assign = np.full(len(specs), -1, dtype=np.int64)
        unit_tpt = np.zeros(len(sizes))
        est = place_on_meshes(mesh_t, sizes, order, rule, tables.feasible, tables.share, tables.P, tables.D,
                              tables.out_len, tables.rate, tables.weights, tables.kv, tables.tokens,
                              tables.max_batch, memory.per_gpu, memory.reserve, memory.weight_cap,
                              1.0 if full_share else rules.sm_limit, rules.max_llms_per_mesh, tables.serial_decode,
                              assign, unit_tpt, tables.hbm_gbps, tables.hbm_cap_gbps, tables.slow, tables.beside(1.0),
                              tables.hbm_tp_power, *tables.curve(1.0))
        if est >= 0:
            return GroupResult(est, group, assign, unit_tpt, gi)
    return None


def _scored(r: GroupResult, headroom: Headroom) -> GroupResult:
    """``r`` with its units (the placement up to device positions), headroom (estimates at every
    headroom scale) and GPUs in use filled in."""
    sizes = [s for split in r.group for s in split]
    members: dict = {}
    for m, d in enumerate(r.assign.tolist()):
        members.setdefault(d, []).append(m)
    units = tuple(sorted((tuple(ms), sizes[d]) for d, ms in members.items()))
    t_of = {int(t): i for i, t in enumerate(headroom.tables.tps)}
    head = np.zeros(len(headroom.scales))
    for llms, size in units:
        head += headroom.of_unit(llms, t_of[size])
    return replace(r, headroom=tuple(float(x) for x in head), gpus=sum(size for _, size in units), units=units)


def _noise_classes(values: np.ndarray) -> np.ndarray:
    """For each value, the rank (0: highest) of its class: sorted in decreasing order, values
    whose neighbour is within ``HEADROOM_NOISE`` (relative) share a class."""
    order = np.argsort(-values, kind="stable")
    v = values[order]
    step = (v[:-1] - v[1:] > HEADROOM_NOISE * np.maximum(np.abs(v[:-1]), 1.0)).astype(np.int64)
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[order] = np.cumsum(np.concatenate(([0], step)))
    return ranks


def _with_headroom_ranks(tied: List[GroupResult]) -> List[GroupResult]:
    """The tied groups with their headroom ranks at every scale (see ``_noise_classes``)."""
    n_scales = len(tied[0].headroom)
    heads = np.array([r.headroom for r in tied], dtype=np.float64).reshape(len(tied), n_scales)
    ranks = np.zeros((len(tied), n_scales), dtype=np.int64)
    for j in range(n_scales):
        ranks[:, j] = _noise_classes(heads[:, j])
    return [replace(r, headroom_rank=tuple(int(x) for x in ranks[i])) for i, r in enumerate(tied)]


def rank(results: List[GroupResult], headroom: Headroom, options: MeshSearchOptions
         ) -> Tuple[List[GroupResult], dict]:
    """Best first: the groups whose estimate is within ``tie_tolerance`` of the best, ordered by
    the declared secondary objective (``tie_break`` first, the other criterion next, then
    enumeration order), then the rest by estimate. Also returns the tie report for provenance."""
    top = max(r.estimate for r in results)
    floor = top * (1 - options.tie_tolerance)
    tied = _with_headroom_ranks([_scored(r, headroom) for r in results if r.estimate >= floor])
    criteria = {"headroom": lambda r: r.headroom_rank, "gpus": lambda r: (r.gpus,)}
    names = [options.tie_break] + [c for c in TIE_BREAKS if c != options.tie_break]
    tied.sort(key=lambda r: tuple(k for c in names for k in criteria[c](r)) + (r.order,))
    rest = sorted((r for r in results if r.estimate < floor), key=lambda r: (-r.estimate, r.order))
    scales = ", ".join(f"{x:g}" for x in headroom.scales)
    ladder = f"estimated req/s at {scales} x the rates, in that order" if scales else "no scales, never decides"
    ties = {"tied_groups": len(tied), "tie_tolerance": options.tie_tolerance,
            "tie_break": f"{names[0]}, then {names[1]}, then enumeration order (headroom: {ladder})",
            "headroom_scales": list(headroom.scales), **_decision(tied, names, criteria, headroom.scales)}
    return tied + rest, ties


def _decision(tied: List[GroupResult], names: List[str], criteria: dict, scales: Sequence[float]) -> dict:
    """How the first tied group was chosen: ``distinct_tied`` placements among the tied groups
    (groups that differ only in unused meshes or device positions count once), the criterion
    that separated it from the best tied group placing the LLMs differently (``estimate`` when
    there is none) and, when headroom did, at which scale; plus the chosen group's headroom."""
    first = tied[0]
    out: dict = {"distinct_tied": len({r.units for r in tied}), "decided_by": "estimate", "decided_at_scale": None,
                 "headroom_rps": [round(x, 6) for x in first.headroom]}
    runner_up = next((r for r in tied[1:] if r.units != first.units), None)
    if runner_up is None:
        return out
    out["decided_by"] = next((c for c in names if criteria[c](first) != criteria[c](runner_up)), "enumeration order")
    if out["decided_by"] == "headroom":
        at = next(i for i, (a, b) in enumerate(zip(first.headroom_rank, runner_up.headroom_rank)) if a != b)
        out["decided_at_scale"] = scales[at]
    return out


def quantised_shares(shares: np.ndarray, rules: RuleSet) -> Tuple[float, ...]:
    """Shares floored to the rule set's step, at least one step each."""
    steps = np.maximum(np.floor(shares / rules.sm_step + 1e-9), 1.0)
    return tuple(float(round(x * rules.sm_step, 6)) for x in steps)


def to_placement(instance: Instance, search: SearchResult, result: GroupResult, rules: RuleSet,
                 full_share: bool = False, scheduling: Optional[str] = None) -> Placement:
    """Groups of the non-empty meshes with their LLMs and SM shares; provenance records the
    rule set and the search (mesh groups, estimate, ties)."""
    specs, tables = search.specs, search.tables
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
        out.append(Group(devices=devs, pp=1, tp=len(devs), models=tuple(specs[i].name for i in members),
                         sm_share=quantised_shares(np.minimum(shares, 1.0), rules)))
    info = {"mesh_groups": search.mesh_groups, "estimated_throughput_rps": result.estimate,
            "mesh_group": [list(s) for s in result.group], **search.ties}
    return Placement(groups=tuple(out), provenance={"search": info, "rules": rules.name}, scheduling=scheduling)


def refine_by_simulation(instance: Instance, search: SearchResult, k: int, rules: RuleSet, full_share: bool = False,
                         scheduling: Optional[str] = None, deadline: Optional[float] = None) -> Placement:
    """The best of the ``k`` top groups by simulated objective (ties: the better rank).

    The ``throughput`` objective is rate-weighted (``throughput_weighted_rps``, the MuxServe
    paper's metric); ``slo_attainment`` is the share of requests within their SLO. At
    ``deadline`` (a ``time.perf_counter()`` value) the best of those simulated so far (none:
    the estimator's best), marked timed out.
    """
    key = "slo_attainment" if instance.objective == "slo_attainment" else "throughput_weighted_rps"
    best: Optional[Placement] = None
    best_val = -np.inf
    refined = 0
    for r in search.ranked[:k]:
        if deadline is not None and time.perf_counter() > deadline:
            break
        pl = to_placement(instance, search, r, rules, full_share, scheduling)
        val = simulate_llm(instance, pl)[key]
        refined += 1
        if val > best_val + 1e-12:
            best, best_val = pl, val
    if best is None:  # the deadline passed before the first simulation
        best = to_placement(instance, search, search.ranked[0], rules, full_share, scheduling)
    timed_out = {"timed_out": True} if refined < min(k, len(search.ranked)) else {}
    return best.with_provenance(search={**best.provenance["search"], "refined": refined, **timed_out})


@register
class MuxServe(Solver):
    """Enumeration-based greedy LLM placement with the Eq. 3 estimator (MuxServe)."""

    name = "muxserve"
    summary = "MuxServe: mesh groups x greedy colocation by estimated throughput (LLM)"
    family = "llm"
    Options = MuxServeOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        return best_mesh_group_placement(instance, self.options, deadline=deadline_of(time_limit))


def deadline_of(time_limit: Optional[float]) -> Optional[float]:
    """The ``time.perf_counter()`` value ``time_limit`` seconds from now (None: no limit)."""
    return None if time_limit is None else time.perf_counter() + time_limit


def best_mesh_group_placement(instance: Instance, options: MuxServeOptions, full_share: bool = False,
                              scheduling: Optional[str] = None, deadline: Optional[float] = None) -> Placement:
    """The estimator's best mesh group, or with ``refine`` > 0 the simulator's best of the top
    ``refine``; at ``deadline`` or Ctrl-C, the best of the mesh groups enumerated so far (an
    empty placement marked stopped if there was none; refinement is then skipped)."""
    stopped: Dict[str, bool] = {}
    search = search_mesh_groups(instance, GAIN, full_share=full_share, options=options, deadline=deadline,
                                stopped=stopped, serial_decode=scheduling == "temporal")
    rules = rule_set(options.rules)
    if not search.ranked:
        return Placement(groups=(), provenance={"search": {"mesh_groups": search.mesh_groups, **stopped}},
                         scheduling=scheduling)
    if options.refine > 0 and not stopped:
        return refine_by_simulation(instance, search, options.refine, rules, full_share=full_share,
                                    scheduling=scheduling, deadline=deadline)
    placement = to_placement(instance, search, search.ranked[0], rules, full_share=full_share, scheduling=scheduling)
    return mark_stopped(placement, stopped)


def mark_stopped(placement: Placement, stopped: Dict[str, bool]) -> Placement:
    """``placement`` with ``stopped``'s flags (timed_out, interrupted) in its search provenance."""
    if not stopped:
        return placement
    return placement.with_provenance(search={**placement.provenance.get("search", {}), **stopped})
