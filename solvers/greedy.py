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
from typing import Callable, Optional, Sequence

import numpy as np

from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.feasibility import model_stage_bytes
from placement_opt.placement import Group


@dataclass
class _State:
    models: list  # per group: sorted tuple of model indices
    used: list  # per group: per-stage bytes
    accepted: np.ndarray  # per model (whole instance)
    total: int  # accepted requests in all


class _Components:
    """Connected components of a state's model-group graph, with their unserved requests."""

    def __init__(self, st: _State, n_groups: int, served: np.ndarray):
        parent = list(range(n_groups))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        host = {}
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


def to_groups(instance, shells, models_per_group) -> list[Group]:
    names = instance.model_names
    return [Group(devices=tuple(dev), pp=pp, tp=tp, models=tuple(names[m] for m in sorted(ms)))
            for (dev, pp, tp), ms in zip(shells, models_per_group)]


def greedy_selection(instance, shells: Sequence[tuple], beam: int = 1, time_limit: Optional[float] = None,
                     evaluator: Optional[PlacementEvaluator] = None, deadline: Optional[float] = None,
                     models: Optional[Sequence[int]] = None, fast: bool = False, prune: bool = True,
                     progress: Optional[Callable[[int, float], None]] = None):
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
    candidates_models = list(range(n_models)) if models is None else sorted(models)
    budget = instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
    need = {}
    for (_, pp, tp) in shells:
        for m in candidates_models:
            if (m, pp, tp) not in need:
                need[(m, pp, tp)] = model_stage_bytes(instance, m, pp, tp)
    configs = [(pp, tp) for (_, pp, tp) in shells]
    empty = _State([() for _ in shells], [np.zeros(pp) for (_, pp, _) in shells],
                   np.zeros(n_models, dtype=np.int64), 0)
    stats = {"rounds": 0, "candidates_evaluated": 0, "candidates_pruned": 0, "simulations": 0,
             "timed_out": False, "interrupted": False}
    sims_before = ev.evaluations
    run = _fast_rounds if fast else _beam_rounds
    try:
        best = run(ev, instance, shells, configs, candidates_models, need, budget, empty, max(1, beam), deadline,
                   stats, progress, prune)
    except KeyboardInterrupt:
        best = stats.pop("_best", empty)
        stats["interrupted"] = True
    stats.pop("_best", None)
    n_req = max(ev.n_requests, 1)
    stats.update(accepted=int(best.total), best_attainment=float(best.total / n_req),
                 simulations=ev.evaluations - sims_before, seconds=round(time.perf_counter() - start, 4))
    return to_groups(instance, shells, best.models), stats


def _feasible(st: _State, m: int, g: int, shells, need, budget):
    if m in st.models[g]:
        return None
    req = need[(m, shells[g][1], shells[g][2])]
    if req is None or np.any(st.used[g] + req > budget):
        return None
    return req


def _apply(st: _State, m: int, g: int, req, comp_models: tuple, comp_acc: np.ndarray) -> _State:
    new_models = list(st.models)
    new_models[g] = tuple(sorted(st.models[g] + (m,)))
    used = list(st.used)
    used[g] = st.used[g] + req
    acc = st.accepted.copy()
    acc[list(comp_models)] = comp_acc
    return _State(new_models, used, acc, int(acc.sum()))


def _beam_rounds(ev, instance, shells, configs, cand_models, need, budget, empty, beam, deadline, stats,
                 progress, prune):
    served = ev.requests_per_model
    best = empty
    stats["_best"] = best
    states = [empty]
    n_groups = len(shells)
    last_report = time.perf_counter()
    while states:
        stats["rounds"] += 1
        # 1. every feasible candidate with its bound on the accepted requests it can reach
        pending = []
        order = 0
        comps = []
        for si, st in enumerate(states):
            comp = _Components(st, n_groups, served)
            comps.append(comp)
            for m in cand_models:
                cm = comp.of_model.get(m)
                extra_m = 0 if cm is not None else int(served[m] - st.accepted[m])
                tried = set()
                for g in range(n_groups):
                    req = _feasible(st, m, g, shells, need, budget)
                    if req is None:
                        continue
                    sig = (configs[g], st.models[g])
                    if sig in tried:
                        continue
                    tried.add(sig)
                    cg = comp.of_group[g]
                    ub = st.total + comp.unserved.get(cg, 0) + extra_m
                    if cm is not None and cm != cg:
                        ub += comp.unserved[cm]
                    pending.append((-ub, order, si, m, g, req))
                    order += 1
        if not pending:
            break
        pending.sort(key=lambda c: (c[0], c[1]))
        # 2. evaluate in decreasing bound order until the bound drops below the k-th best
        heap: list = []  # the k best totals among distinct selections
        seen = set()
        evaluated = []
        for i, (neg_ub, order, si, m, g, req) in enumerate(pending):
            if prune and len(heap) >= beam and -neg_ub < heap[0]:
                stats["candidates_pruned"] += len(pending) - i
                break
            st, comp = states[si], comps[si]
            groups_c = set(comp.groups[comp.of_group[g]])
            models_c = set(comp.models.get(comp.of_group[g], ()))
            cm = comp.of_model.get(m)
            if cm is not None:
                groups_c.update(comp.groups[cm])
                models_c.update(comp.models[cm])
            models_c.add(m)
            gl = sorted(groups_c)
            ml = tuple(sorted(models_c))
            lists = [st.models[x] + (m,) if x == g else st.models[x] for x in gl]
            acc = ev.accepted_of_component([configs[x] for x in gl], lists, ml)
            total = st.total - int(st.accepted[list(ml)].sum()) + int(acc.sum())
            stats["candidates_evaluated"] += 1
            if beam > 1:
                key = tuple(tuple(sorted(st.models[x] + (m,))) if x == g else st.models[x]
                            for x in range(n_groups))
                if key in seen:
                    continue
                seen.add(key)
            evaluated.append((total, order, si, m, g, req, ml, acc))
            if len(heap) < beam:
                heapq.heappush(heap, total)
            elif total > heap[0]:
                heapq.heapreplace(heap, total)
            if deadline is not None and time.perf_counter() > deadline:
                stats["timed_out"] = True
                break
            now = time.perf_counter()
            if progress is not None and now - last_report > 1.0:
                last_report = now
                progress(stats["candidates_evaluated"], max(best.total, max(heap)) / max(ev.n_requests, 1))
        if not evaluated:
            break
        evaluated.sort(key=lambda c: (-c[0], c[1]))
        states = [_apply(states[si], m, g, req, ml, acc) for (_, _, si, m, g, req, ml, acc) in evaluated[:beam]]
        if states[0].total > best.total:
            best = states[0]
            stats["_best"] = best
        if stats["timed_out"] or best.total >= ev.n_requests:
            break
    return best


def _fast_rounds(ev, instance, shells, configs, cand_models, need, budget, empty, beam, deadline, stats,
                 progress, prune):
    """One simulation per round; most-unserved model onto the least-utilised group with room
    (``beam`` and ``prune`` do not apply: there is one candidate per round). The simulation is
    incremental: only the component of the changed group is re-run."""
    served = ev.requests_per_model
    duration = max(ev.requests.duration_s, 1e-9)
    best = st = empty
    stats["_best"] = best
    n_groups = len(shells)
    pp = np.array([c[0] for c in configs], dtype=np.float64)
    busy = np.zeros(n_groups)
    while True:
        stats["rounds"] += 1
        unserved = served - st.accepted
        placed = False
        for m in sorted(cand_models, key=lambda x: (-unserved[x], x)):
            if unserved[m] <= 0:
                break
            options = [(busy[g] / (pp[g] * duration), g) for g in range(n_groups)
                       if _feasible(st, m, g, shells, need, budget) is not None]
            if not options:
                continue
            _, g = min(options)
            req = _feasible(st, m, g, shells, need, budget)
            new_models = list(st.models)
            new_models[g] = tuple(sorted(st.models[g] + (m,)))
            comp = _Components(_State(new_models, st.used, st.accepted, st.total), n_groups, served)
            c = comp.of_group[g]
            gl = comp.groups[c]
            ml = tuple(sorted(comp.models[c]))
            acc, comp_busy = ev.component_result([configs[x] for x in gl], [new_models[x] for x in gl], ml)
            stats["candidates_evaluated"] += 1
            st = _apply(st, m, g, req, ml, acc)
            busy = busy.copy()
            busy[gl] = comp_busy
            placed = True
            break
        if not placed:
            break
        if st.total > best.total:
            best = st
            stats["_best"] = best
        if progress is not None:
            progress(stats["candidates_evaluated"], best.total / max(ev.n_requests, 1))
        if deadline is not None and time.perf_counter() > deadline:
            stats["timed_out"] = True
            break
    return best
