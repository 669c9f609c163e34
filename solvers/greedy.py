"""Simulator-guided greedy model selection (AlpaServe Algorithm 1) with a beam.

Given group *shells* (devices and a parallel config each), repeatedly try every feasible
(model, group) addition under the memory budget, simulate, and keep the ``beam`` best
states; stop when nothing fits and return the best state seen.

What makes it much cheaper than the paper's O(M G R S B) simulations, without changing
its answer:

* **incremental evaluation**: requests interact only through groups that share models, so
  a candidate re-simulates only the connected component of the changed group (plus the
  component the added model already lives in); everything else keeps its accepted counts;
* **memoised components** (:meth:`PlacementEvaluator.accepted_of_component`): a component
  with the same groups and models is simulated once, whichever beam entry, round or
  candidate meets it again (most candidates of round r+1 were already seen in round r);
* **exact bound pruning**: a candidate can gain at most the unserved requests of the models
  in that component, so candidates are evaluated in decreasing order of this bound and the
  rest of a round is skipped once the bound falls below the beam's k-th best score;
* groups with the same config and the same models are interchangeable, so only the first
  of them is tried for a given model.

``fast=True`` is the paper's faster heuristic: one simulation per round, then the model
with the most unserved requests goes to the least-utilised group that has room for it.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from placement_opt.feasibility import model_stage_bytes
from placement_opt.instance import Instance
from placement_opt.limits import stop_requested
from placement_opt.placement import Group
from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.simulate.kernels import EARLIEST, SHORTEST_QUEUE

from placement_opt.solvers.fast_greedy import best_addition_chunk, fast_rounds_chunk, round_candidates


#: A group shell: (devices, pp, tp).
Shell = Tuple[Sequence[int], int, int]


@dataclass
class _State:
    """One selection: the models of every group, with their memory use and accepted requests."""

    models: list  # per group: sorted tuple of model indices
    used: list  # per group: per-stage bytes
    accepted: np.ndarray  # per model (whole instance)
    total: int  # accepted requests in all


@dataclass(frozen=True)
class _GreedySearch:
    """What every round of one greedy run reads: the evaluator, the shells, the candidate models,
    the memory each needs in each config, and the run's settings."""

    ev: PlacementEvaluator
    shells: Sequence[Shell]
    configs: list  # per group: (pp, tp)
    models: list  # candidate model indices, ascending
    need: dict  # (model, pp, tp) -> per-stage bytes, None when unprofiled
    budget: float  # usable bytes per GPU
    beam: int
    deadline: Optional[float]  # a time.perf_counter() value
    prune: bool
    progress: Optional[Callable[[int, tuple], None]]  # (candidates evaluated, the best state's models)

    @property
    def n_groups(self) -> int:
        return len(self.shells)

    def feasible(self, st: _State, m: int, g: int) -> Optional[np.ndarray]:
        """The per-stage bytes model ``m`` adds to group ``g`` of ``st``, or None when it is there
        already, unprofiled in the group's config, or over the memory budget."""
        if m in st.models[g]:
            return None
        req = self.need[(m, self.shells[g][1], self.shells[g][2])]
        if req is None or np.any(st.used[g] + req > self.budget):
            return None
        return req

    def timed_out(self) -> bool:
        """Whether the deadline has passed or a stop was requested: a signal the CLI's handler could
        only record (one that landed in a finalizer while Numba compiled, or in a Numba callback)
        stops the search here, at its next check, with the best state so far."""
        return stop_requested() is not None or (self.deadline is not None and time.perf_counter() > self.deadline)


@dataclass
class _Run:
    """A run's outcome so far: its best state (what an interrupted run returns) and its counters
    (the public ``stats``)."""

    best: _State
    stats: dict
    last_report: float = 0.0  # time.perf_counter() of the last progress report

    def improve(self, st: _State) -> None:
        """Keep ``st`` as the best state if it accepts more requests."""
        if st.total > self.best.total:
            self.best = st


class _Components:
    """Connected components of a state's model-group graph, with their unserved requests."""

    def __init__(self, st: _State, n_groups: int, served: np.ndarray):
        parent = list(range(n_groups))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        host: dict[int, int] = {}
        for g, ms in enumerate(st.models):
            for m in ms:
                if m in host:
                    a, b = find(host[m]), find(g)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
                else:
                    host[m] = g
        self.of_group = [find(g) for g in range(n_groups)]
        self.groups: dict = {}
        self.models: dict = {}
        for g in range(n_groups):
            self.groups.setdefault(self.of_group[g], []).append(g)
        for m, g in host.items():
            self.models.setdefault(self.of_group[g], []).append(m)
        self.of_model = {m: self.of_group[g] for m, g in host.items()}
        self.unserved = {c: int(sum(served[m] - st.accepted[m] for m in ms)) for c, ms in self.models.items()}

    def affected(self, m: int, g: int) -> tuple[list[int], tuple[int, ...]]:
        """(groups, models), both sorted, whose simulation changes when model ``m`` joins group
        ``g``: ``g``'s component, the component ``m`` already lives in, and ``m``."""
        groups = set(self.groups[self.of_group[g]])
        models = set(self.models.get(self.of_group[g], ()))
        cm = self.of_model.get(m)
        if cm is not None:
            groups.update(self.groups[cm])
            models.update(self.models[cm])
        models.add(m)
        return sorted(groups), tuple(sorted(models))


def to_groups(instance: Instance, shells: Sequence[Shell], models_per_group: Sequence[Sequence[int]]) -> list[Group]:
    """Groups of the shells, each serving its models (indices into the instance's models)."""
    names = instance.model_names
    return [Group(devices=tuple(dev), pp=pp, tp=tp, models=tuple(names[m] for m in sorted(ms)))
            for (dev, pp, tp), ms in zip(shells, models_per_group)]


def _new_search(instance: Instance, shells: Sequence[Shell], ev: PlacementEvaluator, models: Optional[Sequence[int]],
                beam: int, deadline: Optional[float], prune: bool,
                progress: Optional[Callable[[int, tuple], None]]) -> _GreedySearch:
    """The settings of one greedy run: candidate models (default: all), their bytes per stage in
    every shell's config, the memory budget."""
    candidate_models = list(range(len(instance.models))) if models is None else sorted(models)
    need = {}
    for (_, pp, tp) in shells:
        for m in candidate_models:
            if (m, pp, tp) not in need:
                need[(m, pp, tp)] = model_stage_bytes(instance, m, pp, tp)
    return _GreedySearch(ev, shells, [(pp, tp) for (_, pp, tp) in shells], candidate_models, need,
                         instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9), max(1, beam), deadline, prune,
                         progress)


def greedy_selection(instance: Instance, shells: Sequence[Shell], beam: int = 1, time_limit: Optional[float] = None,
                     evaluator: Optional[PlacementEvaluator] = None, deadline: Optional[float] = None,
                     models: Optional[Sequence[int]] = None, fast: bool = False, prune: bool = True,
                     progress: Optional[Callable[[int, tuple], None]] = None) -> tuple[list[Group], dict]:
    """Run the greedy on ``shells`` = [(devices, pp, tp), ...] for ``models`` (default: all).

    Returns (groups, stats); ``stats["accepted"]`` counts the evaluator's accepted requests of
    the best state. Stops early, returning the best so far, at ``deadline`` (a
    ``time.perf_counter()`` value) or on Ctrl-C (``stats["interrupted"]``).
    """
    ev = evaluator or PlacementEvaluator(instance)
    start = time.perf_counter()
    if deadline is None and time_limit is not None:
        deadline = start + time_limit
    n_models = len(instance.models)
    search = _new_search(instance, shells, ev, models, beam, deadline, prune, progress)
    empty = _State([() for _ in shells], [np.zeros(pp) for (_, pp, _) in shells],
                   np.zeros(n_models, dtype=np.int64), 0)
    run = _Run(empty, {"rounds": 0, "candidates_evaluated": 0, "candidates_pruned": 0, "simulations": 0,
                       "timed_out": False, "interrupted": False})
    sims_before = ev.evaluations
    try:
        (_fast_rounds if fast else _beam_rounds)(search, run)
    except KeyboardInterrupt:
        run.stats["interrupted"] = True
    best, stats = run.best, run.stats
    n_req = max(ev.n_requests, 1)
    stats.update(accepted=int(best.total), best_attainment=float(best.total / n_req),
                 simulations=ev.evaluations - sims_before, seconds=round(time.perf_counter() - start, 4))
    return to_groups(instance, shells, best.models), stats


def _apply(st: _State, m: int, g: int, req: np.ndarray, comp_models: tuple, comp_acc: np.ndarray) -> _State:
    """``st`` with model ``m`` added to group ``g`` (using ``req`` more bytes per stage), the
    models ``comp_models`` then accepting ``comp_acc`` requests."""
    new_models = list(st.models)
    new_models[g] = tuple(sorted(st.models[g] + (m,)))
    used = list(st.used)
    used[g] = st.used[g] + req
    acc = st.accepted.copy()
    acc[list(comp_models)] = comp_acc
    return _State(new_models, used, acc, int(acc.sum()))


class _Candidate(NamedTuple):
    """Adding model ``model`` to group ``group`` of beam entry ``state``; ``order`` numbers the
    candidates of a round in the order they were found (the tie-breaker)."""

    bound: int  # most requests the new state can accept
    order: int
    state: int
    model: int
    group: int
    req: np.ndarray  # the bytes per stage it adds to the group


class _Scored(NamedTuple):
    """A simulated candidate: the new state's accepted requests in all, and those of the
    models whose component was simulated."""

    total: int
    candidate: _Candidate
    models: tuple  # the simulated component's models, sorted
    accepted: np.ndarray  # their accepted requests


def _candidates(search: _GreedySearch, states: list, comps: list) -> list[_Candidate]:
    """Every feasible addition to every beam entry, with its bound, in decreasing bound order
    (then in the order found). Of groups with the same config and models only the first is tried."""
    served = search.ev.requests_per_model
    pending: list[_Candidate] = []
    for si, st in enumerate(states):
        comp = comps[si]
        for m in search.models:
            cm = comp.of_model.get(m)
            extra_m = 0 if cm is not None else int(served[m] - st.accepted[m])
            tried = set()
            for g in range(search.n_groups):
                req = search.feasible(st, m, g)
                if req is None:
                    continue
                sig = (search.configs[g], st.models[g])
                if sig in tried:
                    continue
                tried.add(sig)
                cg = comp.of_group[g]
                ub = st.total + comp.unserved.get(cg, 0) + extra_m
                if cm is not None and cm != cg:
                    ub += comp.unserved[cm]
                pending.append(_Candidate(ub, len(pending), si, m, g, req))
    pending.sort(key=lambda c: (-c.bound, c.order))
    return pending


def _score(search: _GreedySearch, st: _State, comp: _Components, c: _Candidate,
           floor: Optional[int] = None) -> Optional[_Scored]:
    """Simulate the component candidate ``c`` changes (memoised by the evaluator); None when
    its total is certainly below ``floor`` (the simulation gave up part way: such a candidate
    cannot enter the beam, so giving up does not change the answer)."""
    groups, models = comp.affected(c.model, c.group)
    lists = [st.models[x] + (c.model,) if x == c.group else st.models[x] for x in groups]
    rest = st.total - int(st.accepted[list(models)].sum())
    acc = search.ev.accepted_of_component_at_least([search.configs[x] for x in groups], lists, models,
                                                   None if floor is None else floor - rest)
    if acc is None:
        return None
    return _Scored(rest + int(acc.sum()), c, models, acc)


def _stop_or_report(search: _GreedySearch, run: _Run, evaluated: int) -> bool:
    """Between candidates: True (and ``timed_out`` noted) once the search's time is up; else
    report progress at most once a second."""
    if search.timed_out():
        run.stats["timed_out"] = True
        return True
    now = time.perf_counter()
    if search.progress is not None and now - run.last_report > 1.0:
        run.last_report = now
        search.progress(evaluated, tuple(run.best.models))
    return False


def _evaluate(search: _GreedySearch, run: _Run, states: list, comps: list, pending: list[_Candidate]) -> list[_Scored]:
    """Score the candidates in decreasing bound order until the bound falls below the beam's
    k-th best total (``prune``) or time is up; with a beam, of candidates reaching the same
    selection only the first counts."""
    stats = run.stats
    heap: list = []  # the k best totals among distinct selections
    seen = set()
    evaluated = []
    for i, c in enumerate(pending):
        if search.prune and len(heap) >= search.beam and c.bound < heap[0]:
            stats["candidates_pruned"] += len(pending) - i
            break
        st = states[c.state]
        floor = heap[0] if search.prune and len(heap) >= search.beam else None
        scored = _score(search, st, comps[c.state], c, floor)
        stats["candidates_evaluated"] += 1
        if search.beam > 1:
            key = tuple(tuple(sorted(st.models[x] + (c.model,))) if x == c.group else st.models[x]
                        for x in range(search.n_groups))
            if key in seen:
                continue
            seen.add(key)
        if scored is not None:
            evaluated.append(scored)
            if len(heap) < search.beam:
                heapq.heappush(heap, scored.total)
            elif scored.total > heap[0]:
                heapq.heapreplace(heap, scored.total)
        if _stop_or_report(search, run, stats["candidates_evaluated"]):
            break
    return evaluated


def _beam_rounds(search: _GreedySearch, run: _Run) -> None:
    """Algorithm 1 with a beam: each round keeps the ``beam`` best distinct additions to the
    current entries; stops when nothing fits, time is up or every request is accepted. With a
    beam of 1 and one request served at a time, a round's candidates are scored compiled
    (:func:`_evaluate_compiled`, the same decisions)."""
    run.last_report = time.perf_counter()
    if _compiles_rounds(search):
        _compiled_beam_rounds(search, run, _compiled_problem(search))
        return
    states = [run.best]
    while states:
        run.stats["rounds"] += 1
        comps = [_Components(st, search.n_groups, search.ev.requests_per_model) for st in states]
        pending = _candidates(search, states, comps)
        if not pending:
            break
        evaluated = _evaluate(search, run, states, comps, pending)
        if not evaluated:
            break
        evaluated.sort(key=lambda e: (-e.total, e.candidate.order))
        states = [_apply(states[e.candidate.state], e.candidate.model, e.candidate.group, e.candidate.req,
                         e.models, e.accepted) for e in evaluated[:search.beam]]
        run.improve(states[0])
        if run.stats["timed_out"] or run.best.total >= search.ev.n_requests:
            break


#: Rounds of the compiled fast heuristic between two deadline checks.
FAST_CHUNK_ROUNDS = 16
#: Candidates of a compiled full-greedy round between two deadline checks.
CANDIDATE_CHUNK = 32


def _compiles_rounds(search: _GreedySearch) -> bool:
    """Whether the full greedy's rounds run compiled: a beam of 1, requests served one at a time."""
    return search.beam == 1 and not search.ev.config.batching and bool(search.models)


def _compiled_beam_rounds(search: _GreedySearch, run: _Run, problem: tuple) -> None:
    """:func:`_beam_rounds` for a beam of 1 with each round's candidates listed and scored
    compiled (:func:`solvers.fast_greedy.round_candidates`, :func:`_evaluate_compiled`): the
    same candidates, bounds, order and decisions as the Python rounds."""
    _, served, tables, max_pp = problem
    position = {m: j for j, m in enumerate(search.models)}
    st = run.best
    while True:
        run.stats["rounds"] += 1
        hosted = np.zeros((search.n_groups, len(search.models)), dtype=np.bool_)
        used = np.zeros((search.n_groups, max_pp))
        for g, ms in enumerate(st.models):
            hosted[g, [position[m] for m in ms]] = True
            used[g, :len(st.used[g])] = st.used[g]
        accepted = st.accepted[search.models].astype(np.int64)
        candidates = round_candidates(hosted, used, accepted, st.total, served, tables, float(search.budget))
        if not len(candidates[0]):
            break
        best = _evaluate_compiled(search, run, (hosted, accepted, st.total), candidates, problem)
        if best is None:
            break
        total, j, accepted_after = best
        m, g = search.models[int(candidates[0][j])], int(candidates[1][j])
        req = search.need[(m, search.configs[g][0], search.configs[g][1])]
        st = _apply(st, m, g, req, tuple(search.models), accepted_after)
        run.improve(st)
        if run.stats["timed_out"] or run.best.total >= search.ev.n_requests:
            break


def _evaluate_compiled(search: _GreedySearch, run: _Run, current: tuple, candidates: tuple,
                       problem: tuple) -> Optional[tuple[int, int, np.ndarray]]:
    """:func:`_evaluate` for a beam of 1, compiled (:func:`solvers.fast_greedy.best_addition_chunk`):
    the same candidates scored in the same order with the same pruning and give-up rule, in
    chunks of ``CANDIDATE_CHUNK`` with a deadline check between them. Returns the best
    candidate's (total, position in ``candidates``, accepted requests of every candidate model),
    or None when every simulation gave up."""
    requests, _, tables, _ = problem
    ev, stats = search.ev, run.stats
    n_candidates = len(candidates[0])
    policy = SHORTEST_QUEUE if ev.config.dispatch == "shortest_queue" else EARLIEST
    settings = (float(ev.config.overhead_s), policy, search.prune)
    scan = np.array([0, -1, 0, 0, 0], dtype=np.int64)
    best_accepted = np.zeros(len(search.models), dtype=np.int64)
    try:
        while not best_addition_chunk(requests, tables, current, candidates, settings, scan, best_accepted,
                                      min(int(scan[0]) + CANDIDATE_CHUNK, n_candidates)):
            if _stop_or_report(search, run, stats["candidates_evaluated"] + int(scan[3])):
                break
        else:
            if search.timed_out():
                stats["timed_out"] = True
    finally:
        stats["candidates_evaluated"] += int(scan[3])
        stats["candidates_pruned"] += int(scan[4])
        ev.evaluations += int(scan[3])
    if scan[1] < 0:
        return None
    return int(scan[2]), int(scan[1]), best_accepted


def _compiled_problem(search: _GreedySearch) -> tuple:
    """The flat arrays :func:`solvers.fast_greedy.fast_rounds_chunk` reads: the evaluator's requests
    of the candidate models (model ids as positions in ``search.models``), their request counts,
    and per distinct group config the stage latencies and bytes of every candidate model."""
    ev = search.ev
    models = np.asarray(search.models, dtype=np.int64)
    local = np.full(ev.n_models, -1, dtype=np.int32)
    local[models] = np.arange(len(models), dtype=np.int32)
    req = ev.requests
    keep = local[req.model] >= 0
    model = local[req.model[keep]]
    by_model = np.argsort(model, kind="stable").astype(np.int64)
    model_ptr = np.zeros(len(models) + 1, dtype=np.int64)
    model_ptr[1:] = np.cumsum(np.bincount(model, minlength=len(models)))
    requests = (req.arrival[keep], model, req.deadline[keep], by_model, model_ptr)
    configs = sorted(set(search.configs))
    cfg_index = {c: i for i, c in enumerate(configs)}
    max_pp = max(pp for pp, _ in configs)
    lat = np.full((len(configs), len(models), max_pp), np.inf)
    need = np.zeros((len(configs), len(models), max_pp))
    profiled = np.zeros((len(configs), len(models)), dtype=np.bool_)
    for c, (pp, tp) in enumerate(configs):
        for j, m in enumerate(search.models):
            bytes_ = search.need[(m, pp, tp)]
            if bytes_ is not None:
                profiled[c, j] = True
                need[c, j, :pp] = bytes_
                lat[c, j, :pp] = ev.latencies(m, pp, tp)[:pp]
    group_pp = np.array([c[0] for c in search.configs], dtype=np.int32)
    group_cfg = np.array([cfg_index[c] for c in search.configs], dtype=np.int32)
    served = ev.requests_per_model[models].astype(np.int64)
    return requests, served, (group_pp, group_cfg, lat, need, profiled), max_pp


def _fast_rounds(search: _GreedySearch, run: _Run) -> None:
    """One simulation per round; most-unserved model onto the least-utilised group with room
    (``beam`` and ``prune`` do not apply: there is one candidate per round). The simulation is
    incremental: only the component of the changed group is re-run. Served one request at a
    time, the rounds run compiled (:mod:`solvers.fast_greedy`, the same decisions) in chunks
    with a deadline check between them; batching keeps the Python rounds."""
    if search.ev.config.batching or not search.models:
        _fast_rounds_python(search, run)
        return
    n_groups, n_models = search.n_groups, len(search.models)
    start = _CompiledState(np.zeros((n_groups, n_models), dtype=np.bool_), np.zeros(n_models, dtype=np.int64),
                           np.zeros(n_groups), 0)
    best_hosted, best_total = _compiled_rounds(search, run.stats, start)
    run.improve(_hosted_state(search, best_hosted, best_total))


class _CompiledState(NamedTuple):
    """Where compiled rounds start: the models each group hosts (``hosted[group, position in
    search.models]``), their accepted requests, the groups' busy seconds, and the accepted total."""

    hosted: np.ndarray
    accepted: np.ndarray
    busy: np.ndarray
    total: int


def _compiled_rounds(search: _GreedySearch, stats: dict, start: _CompiledState) -> tuple[np.ndarray, int]:
    """Run the compiled fast heuristic from ``start`` to its end (or the deadline or Ctrl-C, both
    seen every ``FAST_CHUNK_ROUNDS`` rounds); returns the best hosting seen and its accepted total."""
    ev = search.ev
    requests, served, problem, max_pp = _compiled_problem(search)
    group_pp, group_cfg, _, need, _ = problem
    hosted = start.hosted.copy()
    used = np.zeros((search.n_groups, max_pp))
    for g, j in zip(*np.nonzero(hosted)):
        used[g, :group_pp[g]] += need[group_cfg[g], j, :group_pp[g]]
    best_total = np.array([start.total], dtype=np.int64)
    counters = np.zeros(2, dtype=np.int64)
    state = (hosted, used, start.accepted.astype(np.int64), start.busy.astype(np.float64), hosted.copy(),
             best_total, counters)
    policy = SHORTEST_QUEUE if ev.config.dispatch == "shortest_queue" else EARLIEST
    settings = (float(search.budget), max(ev.requests.duration_s, 1e-9), float(ev.config.overhead_s), policy)
    finished = False
    try:
        while not finished:
            finished = fast_rounds_chunk(requests, served, problem, state, settings, FAST_CHUNK_ROUNDS)
            if search.progress is not None:
                search.progress(int(counters[1]), tuple(tuple(search.models[j] for j in np.nonzero(row)[0])
                                                        for row in state[4]))
            if not finished and search.timed_out():
                stats["timed_out"] = True
                break
    except KeyboardInterrupt:  # Ctrl-C between chunks: the best hosting so far stands
        stats["interrupted"] = True
    stats["rounds"] += int(counters[0])
    stats["candidates_evaluated"] += int(counters[1])
    ev.evaluations += int(counters[1])
    return state[4], int(best_total[0])


def extend_selection(instance: Instance, configs: Sequence[tuple[int, int]], model_lists: Sequence[Sequence[int]],
                     models: Sequence[int], evaluator: PlacementEvaluator,
                     deadline: Optional[float] = None) -> list[tuple[int, ...]]:
    """Groups of ``configs`` already hosting ``model_lists`` (indices of ``models``'s models) get
    more replicas from the fast heuristic, scored on the evaluator's requests, until no model
    with unserved requests has room (the memory left unused) or ``deadline``. Returns the
    models of every group, the given ones included. Needs a simulator that serves requests one
    at a time."""
    shells = [((), pp, tp) for pp, tp in configs]
    search = _new_search(instance, shells, evaluator, models, 1, deadline, True, None)
    position = {m: j for j, m in enumerate(search.models)}
    hosted = np.zeros((len(shells), len(search.models)), dtype=np.bool_)
    for g, ms in enumerate(model_lists):
        hosted[g, [position[m] for m in ms]] = True
    hosted_models = tuple(sorted({m for ms in model_lists for m in ms}))
    result = evaluator.component_result(list(configs), [tuple(sorted(ms)) for ms in model_lists], hosted_models)
    assert result is not None  # no min_accepted: the simulation runs to the end
    acc_of, busy = result
    accepted = np.zeros(len(search.models), dtype=np.int64)
    accepted[[position[m] for m in hosted_models]] = acc_of
    stats = {"rounds": 0, "candidates_evaluated": 0, "timed_out": False, "interrupted": False}
    best_hosted, _ = _compiled_rounds(search, stats, _CompiledState(hosted, accepted, busy, int(acc_of.sum())))
    return [tuple(search.models[j] for j in np.nonzero(row)[0]) for row in best_hosted]


def _hosted_state(search: _GreedySearch, hosted: np.ndarray, total: int) -> _State:
    """The state whose groups host ``hosted[group, position in search.models]`` (its per-model
    accepted counts are not kept: only the total is read from the best state)."""
    models = [tuple(search.models[j] for j in np.nonzero(row)[0]) for row in hosted]
    used = []
    for g, ms in enumerate(models):
        pp, tp = search.configs[g]
        u = np.zeros(pp)
        for m in ms:
            u = u + search.need[(m, pp, tp)]
        used.append(u)
    return _State(models, used, np.zeros(search.ev.n_models, dtype=np.int64), total)


def _fast_rounds_python(search: _GreedySearch, run: _Run) -> None:
    """The fast heuristic's rounds in Python (the batching simulator): see :func:`_fast_rounds`."""
    ev, stats = search.ev, run.stats
    served = ev.requests_per_model
    duration = max(ev.requests.duration_s, 1e-9)
    st = run.best
    pp = np.array([c[0] for c in search.configs], dtype=np.float64)
    busy = np.zeros(search.n_groups)
    while True:
        stats["rounds"] += 1
        unserved = served - st.accepted
        placed = False
        for m in sorted(search.models, key=lambda x: (-unserved[x], x)):
            if unserved[m] <= 0:
                break
            options = [(busy[g] / (pp[g] * duration), g) for g in range(search.n_groups)
                       if search.feasible(st, m, g) is not None]
            if not options:
                continue
            _, g = min(options)
            req = search.feasible(st, m, g)
            assert req is not None  # g is one of the options
            new_models = list(st.models)
            new_models[g] = tuple(sorted(st.models[g] + (m,)))
            comp = _Components(_State(new_models, st.used, st.accepted, st.total), search.n_groups, served)
            c = comp.of_group[g]
            gl = comp.groups[c]
            ml = tuple(sorted(comp.models[c]))
            result = ev.component_result([search.configs[x] for x in gl], [new_models[x] for x in gl], ml)
            assert result is not None  # no min_accepted: the simulation runs to the end
            acc, comp_busy = result
            stats["candidates_evaluated"] += 1
            st = _apply(st, m, g, req, ml, acc)
            busy = busy.copy()
            busy[gl] = comp_busy
            placed = True
            break
        if not placed:
            break
        run.improve(st)
        if search.progress is not None:
            search.progress(stats["candidates_evaluated"], tuple(run.best.models))
        if search.timed_out():
            stats["timed_out"] = True
            break
