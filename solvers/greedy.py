"""Simulator-guided greedy model selection (AlpaServe Algorithm 1) with a beam.

Given group *shells* (devices and a parallel config each), repeatedly try every feasible
(model, group) addition under the memory budget, simulate, and keep the ``beam`` best
states; stop when nothing fits and return the best state seen.

Two things keep it fast without changing its answer in practice:

* candidates are evaluated incrementally (:meth:`PlacementEvaluator.accepted_after_change`):
  only the models connected to the changed group are re-simulated;
* groups with the same config and the same models are interchangeable, so only the
  first of them is tried for a given model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from placement_opt.evaluator import PlacementEvaluator
from placement_opt.memory import model_stage_bytes
from placement_opt.placement import Group


@dataclass
class _State:
    models: list  # per group: list of model indices
    used: list  # per group: per-stage bytes
    accepted: np.ndarray
    score: float

    def key(self):
        return tuple(tuple(sorted(ms)) for ms in self.models)


def to_groups(instance, shells, models_per_group) -> list[Group]:
    names = instance.model_names
    return [Group(devices=tuple(dev), pp=pp, tp=tp, models=tuple(names[m] for m in ms))
            for (dev, pp, tp), ms in zip(shells, models_per_group)]


def greedy_selection(instance, shells: Sequence[tuple], beam: int = 1, time_limit: Optional[float] = None,
                     evaluator: Optional[PlacementEvaluator] = None, deadline: Optional[float] = None):
    """Run the greedy on ``shells`` = [(devices, pp, tp), ...]. Returns (groups, stats)."""
    ev = evaluator or PlacementEvaluator(instance)
    start = time.perf_counter()
    if deadline is None and time_limit is not None:
        deadline = start + time_limit
    n_req = max(ev.n_requests, 1)
    budget = instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
    n_models = len(instance.models)
    need = {}
    for (_, pp, tp) in shells:
        for m in range(n_models):
            if (m, pp, tp) not in need:
                need[(m, pp, tp)] = model_stage_bytes(instance, m, pp, tp)
    empty = _State([[] for _ in shells], [np.zeros(pp) for (_, pp, _) in shells],
                   np.zeros(n_models, dtype=np.int64), 0.0)
    best = empty
    states = [empty]
    evaluated = 0
    rounds = 0
    timed_out = False
    served = ev.requests_per_model
    while states and not timed_out:
        rounds += 1
        candidates = []
        for st in states:
            for m in range(n_models):
                if st.accepted[m] >= served[m] and served[m] > 0 and any(m in ms for ms in st.models):
                    continue  # fully served: another replica cannot serve more of it
                tried = set()
                for g, (dev, pp, tp) in enumerate(shells):
                    if m in st.models[g]:
                        continue
                    req = need[(m, pp, tp)]
                    if req is None or np.any(st.used[g] + req > budget):
                        continue
                    sig = (pp, tp, tuple(sorted(st.models[g])))
                    if sig in tried:
                        continue
                    tried.add(sig)
                    new_models = [list(ms) for ms in st.models]
                    new_models[g].append(m)
                    groups = to_groups(instance, shells, new_models)
                    acc = ev.accepted_after_change(groups, g, st.accepted)
                    evaluated += 1
                    used = list(st.used)
                    used[g] = st.used[g] + req
                    candidates.append(_State(new_models, used, acc, acc.sum() / n_req))
                    if deadline is not None and time.perf_counter() > deadline:
                        timed_out = True
                        break
                if timed_out:
                    break
            if timed_out:
                break
        if not candidates:
            break
        candidates.sort(key=lambda s: -s.score)
        states, seen = [], set()
        for c in candidates:
            k = c.key()
            if k not in seen:
                seen.add(k)
                states.append(c)
            if len(states) >= beam:
                break
        if states[0].score > best.score:
            best = states[0]
    stats = {"rounds": rounds, "candidates_evaluated": evaluated, "best_attainment": float(best.score),
             "timed_out": timed_out, "seconds": round(time.perf_counter() - start, 4)}
    return to_groups(instance, shells, best.models), stats
