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

from placement_opt.simulate.kernels import HostTables, _flow_shop_loop


@njit(cache=True)
def _mark_component(hosted: np.ndarray, g0: int, in_groups: np.ndarray, in_models: np.ndarray) -> None:
    """Mark the groups and models connected to group ``g0`` through shared models."""
    n_groups, n_models = hosted.shape
    in_groups[:] = False
    in_models[:] = False
    in_groups[g0] = True
    changed = True
    while changed:
        changed = False
        for g in range(n_groups):
            if in_groups[g]:
                for m in range(n_models):
                    if hosted[g, m] and not in_models[m]:
                        in_models[m] = True
                        changed = True
        for m in range(n_models):
            if in_models[m]:
                for g in range(n_groups):
                    if hosted[g, m] and not in_groups[g]:
                        in_groups[g] = True
                        changed = True


@njit(cache=True)
def _component_tables(hosted: np.ndarray, group_pp: np.ndarray, group_cfg: np.ndarray, lat: np.ndarray,
                      in_groups: np.ndarray, in_models: np.ndarray) -> tuple:
    """Kernel tables (the :class:`HostTables` fields, in order) of the marked component: hosts
    by model, then group, as :meth:`PlacementEvaluator.shell_tables` lays them out."""
    n_groups, n_models = hosted.shape
    groups = np.nonzero(in_groups)[0]
    k = groups.shape[0]
    stage_ptr = np.zeros(k + 1, dtype=np.int32)
    for j in range(k):
        stage_ptr[j + 1] = stage_ptr[j] + group_pp[groups[j]]
    n_hosts = 0
    for m in range(n_models):
        if in_models[m]:
            for j in range(k):
                n_hosts += hosted[groups[j], m]
    host_ptr = np.zeros(n_models + 1, dtype=np.int32)
    host_group = np.empty(n_hosts, dtype=np.int32)
    host_model = np.empty(n_hosts, dtype=np.int32)
    host_lat_ptr = np.empty(n_hosts, dtype=np.int64)
    flat = np.empty(n_hosts * lat.shape[2], dtype=np.float64)
    h = 0
    off = 0
    for m in range(n_models):
        if in_models[m]:
            for j in range(k):
                g = groups[j]
                if hosted[g, m]:
                    host_group[h] = j
                    host_model[h] = m
                    host_lat_ptr[h] = off
                    for s in range(group_pp[g]):
                        flat[off + s] = lat[group_cfg[g], m, s]
                    off += group_pp[g]
                    h += 1
        host_ptr[m + 1] = h
    group_host_ptr = np.zeros(k + 1, dtype=np.int32)
    for x in range(n_hosts):
        group_host_ptr[host_group[x] + 1] += 1
    for j in range(k):
        group_host_ptr[j + 1] += group_host_ptr[j]
    group_hosts = np.argsort(host_group, kind="mergesort").astype(np.int32)
    return (host_ptr, host_group, host_model, host_lat_ptr, flat[:off], stage_ptr, group_host_ptr, group_hosts,
            np.ones(1, dtype=np.int64)), groups


@njit(cache=True)
def _simulate_component(requests: tuple, hosted: np.ndarray, group_pp: np.ndarray, group_cfg: np.ndarray,
                        lat: np.ndarray, in_groups: np.ndarray, in_models: np.ndarray, overhead: float, policy: int,
                        accepted: np.ndarray, busy: np.ndarray) -> None:
    """Re-simulate the marked component on its models' requests; write its models' accepted
    counts into ``accepted`` and its groups' busy seconds into ``busy``."""
    arrival, model, deadline = requests
    keep = np.empty(arrival.shape[0], dtype=np.bool_)
    for i in range(arrival.shape[0]):
        keep[i] = in_models[model[i]]
    sub = (arrival[keep], model[keep], deadline[keep])
    tables, groups = _component_tables(hosted, group_pp, group_cfg, lat, in_groups, in_models)
    k = groups.shape[0]
    comp_busy = np.zeros(k)
    clocks = np.zeros(int(tables[5][k]))
    counts = np.zeros(hosted.shape[1], dtype=np.int64)
    out = (np.empty(0, dtype=np.float64), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), comp_busy, clocks)
    _flow_shop_loop(sub, HostTables(*tables), out, counts, overhead, policy, False)
    for m in range(hosted.shape[1]):
        if in_models[m]:
            accepted[m] = counts[m]
    for j in range(k):
        busy[groups[j]] = comp_busy[j]


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
        fits = True
        for s in range(group_pp[g]):
            if used[g, s] + need[c, m, s] > budget:
                fits = False
        if not fits:
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
            for s in range(group_pp[g]):
                used[g, s] = used[g, s] + need[group_cfg[g], m, s]
            _mark_component(hosted, g, in_groups, in_models)
            _simulate_component(requests, hosted, group_pp, group_cfg, lat, in_groups, in_models, overhead, policy,
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
