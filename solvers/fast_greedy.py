"""The fast greedy heuristic (``fast=True`` of :func:`solvers.greedy.greedy_selection`) compiled whole.

The heuristic places one replica per round: the model with the most unserved requests goes to
the least-utilised group that has room for it, and the changed group's component of the
model-group graph is re-simulated. In Python each round costs a few hundred microseconds of
object handling around one short kernel call; here the rounds, the component search, the
kernel tables and the kernel itself run in one compiled loop over flat arrays (models are
indices into the bucket, ``0..M-1``; groups ``0..G-1``).

It makes exactly the decisions of the Python rounds it replaces (same order of models, same
utilisation ties to the lower group, the same kernel on the same requests, so the same
accepted counts and busy seconds bit for bit). It runs in chunks of ``max_rounds`` rounds so
that its caller can check a deadline between chunks.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placement_opt.simulate.kernels import HostTables, _flow_shop_loop, _root


@njit(cache=True)
def _join(hosted: np.ndarray, parent: np.ndarray, g: int, m: int) -> None:
    """Merge group ``g``'s component with those of the other groups hosting model ``m``
    (components only merge: the heuristic never removes a replica)."""
    for h in range(hosted.shape[0]):
        if hosted[h, m]:
            a = _root(parent, g)
            b = _root(parent, h)
            if a != b:
                parent[max(a, b)] = min(a, b)


@njit(cache=True)
def _index_hosting(hosted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union-find parents of the groups and every group's models (padded rows and counts)."""
    n_groups, n_models = hosted.shape
    parent = np.arange(n_groups)
    group_models = np.empty((n_groups, n_models), dtype=np.int32)
    n_group_models = np.zeros(n_groups, dtype=np.int32)
    for g in range(n_groups):
        for m in range(n_models):
            if hosted[g, m]:
                group_models[g, n_group_models[g]] = m
                n_group_models[g] += 1
    for m in range(n_models):
        first = -1
        for g in range(n_groups):
            if hosted[g, m]:
                if first < 0:
                    first = g
                else:
                    a = _root(parent, first)
                    b = _root(parent, g)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    return parent, group_models, n_group_models


@njit(cache=True)
def _mark_component(parent: np.ndarray, group_models: np.ndarray, n_group_models: np.ndarray, g0: int,
                    in_groups: np.ndarray, in_models: np.ndarray) -> None:
    """Mark the groups and models connected to group ``g0`` through shared models."""
    root = _root(parent, g0)
    in_models[:] = False
    for g in range(parent.shape[0]):
        in_groups[g] = _root(parent, g) == root
        if in_groups[g]:
            for k in range(n_group_models[g]):
                in_models[group_models[g, k]] = True


@njit(cache=True)
def _component_tables(group_models: np.ndarray, n_group_models: np.ndarray, group_pp: np.ndarray,
                      group_cfg: np.ndarray, lat: np.ndarray, in_groups: np.ndarray) -> tuple:
    """Kernel tables (the :class:`HostTables` fields, in order) of the marked component: hosts
    by model, then group, as :meth:`PlacementEvaluator.shell_tables` lays them out."""
    n_models = lat.shape[1]
    groups = np.nonzero(in_groups)[0]
    k = groups.shape[0]
    stage_ptr = np.zeros(k + 1, dtype=np.int32)
    n_hosts = 0
    for j in range(k):
        stage_ptr[j + 1] = stage_ptr[j] + group_pp[groups[j]]
        n_hosts += n_group_models[groups[j]]
    keys = np.empty(n_hosts, dtype=np.int64)  # model * k + group: hosts sort by model, then group
    h = 0
    for j in range(k):
        g = groups[j]
        for x in range(n_group_models[g]):
            keys[h] = np.int64(group_models[g, x]) * k + j
            h += 1
    keys.sort()
    host_ptr = np.zeros(n_models + 1, dtype=np.int32)
    host_group = np.empty(n_hosts, dtype=np.int32)
    host_model = np.empty(n_hosts, dtype=np.int32)
    host_lat_ptr = np.empty(n_hosts, dtype=np.int64)
    flat = np.empty(n_hosts * lat.shape[2], dtype=np.float64)
    off = 0
    for h in range(n_hosts):
        m = keys[h] // k
        j = keys[h] % k
        g = groups[j]
        host_group[h] = j
        host_model[h] = m
        host_ptr[m + 1] += 1
        host_lat_ptr[h] = off
        for s in range(group_pp[g]):
            flat[off + s] = lat[group_cfg[g], m, s]
        off += group_pp[g]
    for m in range(n_models):
        host_ptr[m + 1] += host_ptr[m]
    group_host_ptr = np.zeros(k + 1, dtype=np.int32)
    for x in range(n_hosts):
        group_host_ptr[host_group[x] + 1] += 1
    for j in range(k):
        group_host_ptr[j + 1] += group_host_ptr[j]
    group_hosts = np.argsort(host_group, kind="mergesort").astype(np.int32)
    return (host_ptr, host_group, host_model, host_lat_ptr, flat[:off], stage_ptr, group_host_ptr, group_hosts,
            np.ones(1, dtype=np.int64)), groups


@njit(cache=True)
def _component_requests(requests: tuple, in_models: np.ndarray) -> tuple:
    """The requests of the marked models, in arrival order: gathered model by model and sorted
    when they are few, else by one scan of all requests."""
    arrival, model, deadline, by_model, model_ptr = requests
    count = 0
    for m in range(in_models.shape[0]):
        if in_models[m]:
            count += model_ptr[m + 1] - model_ptr[m]
    if 8 * count > arrival.shape[0]:
        keep = np.empty(arrival.shape[0], dtype=np.bool_)
        for i in range(arrival.shape[0]):
            keep[i] = in_models[model[i]]
        return arrival[keep], model[keep], deadline[keep]
    idx = np.empty(count, dtype=np.int64)
    n = 0
    for m in range(in_models.shape[0]):
        if in_models[m]:
            for x in range(model_ptr[m], model_ptr[m + 1]):
                idx[n] = by_model[x]
                n += 1
    idx.sort()
    return arrival[idx], model[idx], deadline[idx]


@njit(cache=True)
def _simulate_component(requests: tuple, index: tuple, group_pp: np.ndarray, group_cfg: np.ndarray,
                        lat: np.ndarray, in_groups: np.ndarray, in_models: np.ndarray, overhead: float, policy: int,
                        accepted: np.ndarray, busy: np.ndarray) -> None:
    """Re-simulate the marked component on its models' requests; write its models' accepted
    counts into ``accepted`` and its groups' busy seconds into ``busy``."""
    _, group_models, n_group_models = index
    sub = _component_requests(requests, in_models)
    tables, groups = _component_tables(group_models, n_group_models, group_pp, group_cfg, lat, in_groups)
    k = groups.shape[0]
    comp_busy = np.zeros(k)
    clocks = np.zeros(int(tables[5][k]))
    counts = np.zeros(in_models.shape[0], dtype=np.int64)
    out = (np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), comp_busy, clocks)
    _flow_shop_loop(sub, HostTables(*tables), out, counts, overhead, policy, False, sub[0].shape[0])
    for m in range(in_models.shape[0]):
        if in_models[m]:
            accepted[m] = counts[m]
    for j in range(k):
        busy[groups[j]] = comp_busy[j]


@njit(cache=True)
def _fits(used: np.ndarray, need: np.ndarray, budget: float, g: int, c: int, m: int, stages: int) -> bool:
    """Whether model ``m`` (in group ``g``'s config ``c``) fits the memory budget on every stage."""
    for s in range(stages):
        if used[g, s] + need[c, m, s] > budget:
            return False
    return True


@njit(cache=True)
def _least_utilised_group(hosted: np.ndarray, used: np.ndarray, need: np.ndarray, profiled: np.ndarray,
                          group_pp: np.ndarray, group_cfg: np.ndarray, busy: np.ndarray, budget: float,
                          duration: float, m: int) -> int:
    """The group with room for model ``m`` (not there yet, profiled, within the memory budget on
    every stage) whose busy fraction is lowest, the lower group on ties; -1 when none has room."""
    best_g = -1
    best_u = np.inf
    for g in range(hosted.shape[0]):
        c = group_cfg[g]
        if hosted[g, m] or not profiled[c, m]:
            continue
        if not _fits(used, need, budget, g, c, m, group_pp[g]):
            continue
        u = busy[g] / (float(group_pp[g]) * duration)
        if u < best_u:
            best_u = u
            best_g = g
    return best_g


@njit(cache=True)
def fast_rounds_chunk(requests: tuple, served: np.ndarray, problem: tuple, state: tuple, settings: tuple,
                      max_rounds: int) -> bool:
    """Up to ``max_rounds`` rounds of the fast heuristic; True when it has finished (no model with
    unserved requests has room anywhere).

    ``requests = (arrival, model, deadline, by_model, model_ptr)``: the requests in arrival order
    and their indices model by model (model ``m``'s are ``by_model[model_ptr[m]:model_ptr[m+1]]``);
    ``problem = (group_pp, group_cfg, lat[cfg, model, stage], need[cfg, model, stage] bytes,
    profiled[cfg, model])``; ``state = (hosted[group, model], used[group, stage], accepted[model],
    busy[group], best_hosted, best_total[1], counters[rounds, simulations])``, updated in place;
    ``settings = (budget bytes, duration s, overhead s, dispatch policy)``.
    """
    group_pp, group_cfg, lat, need, profiled = problem
    hosted, used, accepted, busy, best_hosted, best_total, counters = state
    budget, duration, overhead, policy = settings
    n_groups, n_models = hosted.shape
    in_groups = np.zeros(n_groups, dtype=np.bool_)
    in_models = np.zeros(n_models, dtype=np.bool_)
    index = _index_hosting(hosted)
    parent, group_models, n_group_models = index
    for _ in range(max_rounds):
        counters[0] += 1
        unserved = served - accepted
        order = np.argsort(-unserved, kind="mergesort")
        placed = False
        for idx in range(n_models):
            m = order[idx]
            if unserved[m] <= 0:
                break
            g = _least_utilised_group(hosted, used, need, profiled, group_pp, group_cfg, busy, budget, duration, m)
            if g < 0:
                continue
            hosted[g, m] = True
            group_models[g, n_group_models[g]] = m
            n_group_models[g] += 1
            _join(hosted, parent, g, m)
            for s in range(group_pp[g]):
                used[g, s] = used[g, s] + need[group_cfg[g], m, s]
            _mark_component(parent, group_models, n_group_models, g, in_groups, in_models)
            _simulate_component(requests, index, group_pp, group_cfg, lat, in_groups, in_models, overhead, policy,
                                accepted, busy)
            counters[1] += 1
            placed = True
            break
        if not placed:
            return True
        total = accepted.sum()
        if total > best_total[0]:
            best_total[0] = total
            best_hosted[:, :] = hosted
    return False


@njit(cache=True)
def _component_at_least(requests: tuple, index: tuple, group_pp: np.ndarray, group_cfg: np.ndarray, lat: np.ndarray,
                        in_groups: np.ndarray, in_models: np.ndarray, overhead: float, policy: int,
                        counts: np.ndarray, min_accepted: int) -> int:
    """Simulate the marked component on its models' requests, per-model accepted counts into
    ``counts`` (zeroed first); returns the accepted requests, or -1 as soon as fewer than
    ``min_accepted`` can be accepted (no limit when ``min_accepted <= 0``), exactly as
    :meth:`PlacementEvaluator.accepted_of_component_at_least` gives up."""
    _, group_models, n_group_models = index
    sub = _component_requests(requests, in_models)
    tables, groups = _component_tables(group_models, n_group_models, group_pp, group_cfg, lat, in_groups)
    k = groups.shape[0]
    n = sub[0].shape[0]
    max_rejected = n if min_accepted <= 0 else max(n - min_accepted, 0)
    counts[:] = 0
    out = (np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.zeros(k),
           np.zeros(int(tables[5][k])))
    return _flow_shop_loop(sub, HostTables(*tables), out, counts, overhead, policy, False, max_rejected)


@njit(cache=True)
def best_addition_chunk(requests: tuple, problem: tuple, current: tuple, candidates: tuple, settings: tuple,
                        scan: np.ndarray, best_accepted: np.ndarray, stop: int) -> bool:
    """One round of Algorithm 1 with a beam of 1, compiled: score candidates ``scan[0]`` up to
    ``stop`` in the given order (decreasing bound) and keep the best; True when the round is over
    (every candidate scored, or the rest pruned).

    ``current = (hosted[group, model], accepted[model], total)`` is the round's state;
    ``candidates = (model, group, bound, order)`` arrays; ``settings = (overhead s, dispatch
    policy, prune)``. ``scan = [next candidate, best candidate (-1: none), its total, scored,
    pruned]`` is updated in place and ``best_accepted`` receives the best candidate's per-model
    accepted requests. The decisions are those of :func:`solvers.greedy._evaluate` with a beam of
    1: a candidate's simulation is re-run on its changed component only, pruning stops the round
    once a bound falls below the best total, a simulation gives up once it cannot reach the best
    total, and ties go to the candidate found first (lowest ``order``).
    """
    group_pp, group_cfg, lat, _, _ = problem
    hosted, accepted, total = current
    cand_model, cand_group, cand_bound, cand_order = candidates
    overhead, policy, prune = settings
    n_groups, n_models = hosted.shape
    in_groups = np.zeros(n_groups, dtype=np.bool_)
    in_models = np.zeros(n_models, dtype=np.bool_)
    counts = np.zeros(n_models, dtype=np.int64)
    # the round's index, built once; a candidate adds its (group, model) to a copy of the
    # parents and one row entry, taken back after its simulation (candidates are never hosted)
    round_parent, group_models, n_group_models = _index_hosting(hosted)
    parent = np.empty_like(round_parent)
    index = (parent, group_models, n_group_models)
    i = scan[0]
    while i < stop:
        have_best = scan[1] >= 0
        if prune and have_best and cand_bound[i] < scan[2]:
            scan[4] = cand_model.shape[0] - i
            scan[0] = cand_model.shape[0]
            return True
        m, g = cand_model[i], cand_group[i]
        parent[:] = round_parent
        group_models[g, n_group_models[g]] = m
        n_group_models[g] += 1
        hosted[g, m] = True
        _join(hosted, parent, g, m)
        hosted[g, m] = False
        _mark_component(parent, group_models, n_group_models, g, in_groups, in_models)
        rest = total
        for x in range(n_models):
            if in_models[x]:
                rest -= accepted[x]
        floor = scan[2] - rest if prune and have_best else 0
        acc = _component_at_least(requests, index, group_pp, group_cfg, lat, in_groups, in_models, overhead, policy,
                                  counts, floor)
        n_group_models[g] -= 1
        scan[3] += 1
        if acc >= 0:
            new_total = rest + acc
            if (not have_best or new_total > scan[2]
                    or (new_total == scan[2] and cand_order[i] < cand_order[scan[1]])):
                scan[1] = i
                scan[2] = new_total
                best_accepted[:] = accepted
                for x in range(n_models):
                    if in_models[x]:
                        best_accepted[x] = counts[x]
        i += 1
    scan[0] = i
    return i >= cand_model.shape[0]


@njit(cache=True)
def round_candidates(hosted: np.ndarray, used: np.ndarray, accepted: np.ndarray, total: int, served: np.ndarray,
                     problem: tuple, budget: float) -> tuple:
    """Every feasible addition of a model to a group of the state ``(hosted, used[group, stage]
    bytes, accepted, total)``, with its bound, as :func:`solvers.greedy._candidates` lists them
    for one state: models in order, groups in order, of groups with the same config and models
    only the first; the bound is the total plus the unserved requests of the components the
    addition touches (and of the model itself when it is hosted nowhere yet). Returns
    ``(model, group, bound, order)`` arrays sorted by decreasing bound, then order found."""
    group_pp, group_cfg, _, need, profiled = problem
    n_groups, n_models = hosted.shape
    parent, _, _ = _index_hosting(hosted)
    root = np.empty(n_groups, dtype=np.int64)
    unserved = np.zeros(n_groups, dtype=np.int64)  # per component root
    model_root = np.full(n_models, -1, dtype=np.int64)
    for g in range(n_groups):
        root[g] = _root(parent, g)
    for m in range(n_models):
        for g in range(n_groups):
            if hosted[g, m]:
                model_root[m] = root[g]
                unserved[root[g]] += served[m] - accepted[m]
                break
    cap = n_models * n_groups
    out_m = np.empty(cap, dtype=np.int64)
    out_g = np.empty(cap, dtype=np.int64)
    out_b = np.empty(cap, dtype=np.int64)
    n = 0
    tried = np.empty(n_groups, dtype=np.int64)
    for m in range(n_models):
        cm = model_root[m]
        extra = served[m] - accepted[m] if cm < 0 else 0
        n_tried = 0
        for g in range(n_groups):
            c = group_cfg[g]
            if hosted[g, m] or not profiled[c, m]:
                continue
            if not _fits(used, need, budget, g, c, m, group_pp[g]):
                continue
            duplicate = False
            for t in range(n_tried):
                h = tried[t]
                if group_cfg[h] == c and group_pp[h] == group_pp[g] and np.array_equal(hosted[h], hosted[g]):
                    duplicate = True
                    break
            if duplicate:
                continue
            tried[n_tried] = g
            n_tried += 1
            bound = total + unserved[root[g]] + extra
            if cm >= 0 and cm != root[g]:
                bound += unserved[cm]
            out_m[n] = m
            out_g[n] = g
            out_b[n] = bound
            n += 1
    order = np.argsort(-out_b[:n], kind="mergesort")
    return out_m[:n][order], out_g[:n][order], out_b[:n][order], order.astype(np.int64)
