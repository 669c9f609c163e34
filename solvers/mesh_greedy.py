"""Greedy placement of LLMs onto the meshes of one mesh group (MuxServe Algorithm 1's inner loop).

LLMs are taken in the given order (MuxServe: decreasing rate x size). Rule ``GAIN`` puts each
on the mesh whose Eq. 3 estimate rises most (meshes whose SM shares still fit first, then
any mesh with room; a tie in gain goes to the mesh with fewer LLMs, so an LLM that meets its
rate either way takes an empty mesh rather than leave its GPUs idle; under ``serial_decode``,
the temporal baseline's search, a tie keeps the first mesh as before: spreading there made
its ladder pick a group that simulates 5.5 % lower on ChatLMSYS 800); rule ``FREE_MEMORY`` (the paper's greedy ablation baseline) on the
mesh with the most free memory. A mesh has room when it keeps the rule set's memory plan
(weights plus a reserve per LLM per GPU within the weight cap, and a KV pool after weights
and reserves holding one request of each of its LLMs) and fewer than ``max_members`` LLMs
(each needs one SM step). ``serial_decode`` estimates with colocated LLMs' decode steps one
after another (temporal scheduling; see ``unit_throughput``). Returns the group's estimated
throughput, -1 if an LLM fits nowhere.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placement_opt.solvers.llm_estimator import mesh_contention_gbps, unit_throughput

GAIN = 0
FREE_MEMORY = 1


#: relative difference within which two meshes' gains tie (float noise of sums of capped rates)
GAIN_TIE = 1e-9


@njit(cache=True)
def _preferred(sm_fit: bool, val: float, members: int, best_fit: bool, best_val: float, best_members: int,
               spread_ties: bool) -> bool:
    """Whether a mesh beats the best so far: SM shares that fit first, then the larger value;
    with ``spread_ties`` (rule ``GAIN``) a gain that ties (within ``GAIN_TIE``) goes to the
    mesh with fewer LLMs. Estimates saturate at the rates, so an LLM that meets its rate on
    an empty mesh and beside others gains the same on both: colocating it would leave the
    empty mesh's GPUs idle for no estimated gain (issue: muxserve put two 7-8B LLMs on one of
    two GPUs), and spreading keeps every GPU in use and more headroom for load above the rates."""
    if sm_fit != best_fit:
        return sm_fit
    tol = GAIN_TIE * max(abs(best_val), 1.0) if spread_ties else 1e-12
    if val > best_val + tol:
        return True
    return spread_ties and val >= best_val - tol and members < best_members


@njit(cache=True)
def place_on_meshes(mesh_t, mesh_size, order, rule, feasible, share, P, D, out_len, rate, weights, kv, tokens,
                    max_batch, per_gpu, reserve, weight_cap, sm_limit, max_members, serial_decode, assign, unit_tpt,
                    hbm_gbps, hbm_cap_gbps, slow, beside, hbm_tp_power=0.0, hbm_curve_gbps=0.0, hbm_curve_power=2.0):
    """Fill ``assign[m]`` (mesh of LLM m) and ``unit_tpt[d]`` (estimate of mesh d); memory
    figures are bytes per GPU (``per_gpu`` shared, ``reserve`` per LLM, ``weight_cap``);
    ``hbm_gbps``, ``hbm_cap_gbps``: HBM GB/s per GPU of the estimator's contention stretch and
    its bandwidth cap (0: off), the former over ``size**hbm_tp_power`` on a mesh of ``size``
    GPUs (:func:`~placement_opt.solvers.llm_estimator.mesh_contention_gbps`);
    ``hbm_curve_gbps``, ``hbm_curve_power``: its loaded-latency curve per GPU (0: off); ``slow``:
    per latency row, the estimator's shared-partition slowdown (``EstimatorTables.slow``);
    ``beside``: the prefill-beside parameters per GPU (``llm_estimator.prefill_beside_params``
    for one GPU; zeros: off), their bandwidth scaled to each mesh here, for the rows whose
    candidate share (``share``) is below 1."""
    nd = mesh_t.shape[0]
    row_share = share.reshape(-1)
    beside_of = np.empty((nd, beside.shape[0]))
    hbm_of = np.empty(nd)  # each mesh's contention rate, whole-mesh units
    for d in range(nd):
        beside_of[d] = beside
        beside_of[d, 2] = beside[2] * mesh_size[d]
        hbm_of[d] = mesh_contention_gbps(hbm_gbps, hbm_tp_power, mesh_size[d])
    n = order.shape[0]
    spread_ties = rule == GAIN and not serial_decode
    nt = feasible.shape[1]
    members = np.full((nd, n), -1, dtype=np.int64)
    cnt = np.zeros(nd, dtype=np.int64)
    wused = np.zeros(nd)
    kvneed = np.zeros(nd)
    smsum = np.zeros(nd)
    rows = np.empty(n, dtype=np.int64)
    llms = np.empty(n, dtype=np.int64)
    tpt = np.empty(n)
    batch = np.empty(n, dtype=np.int64)
    for d in range(nd):
        unit_tpt[d] = 0.0
    for i in range(n):
        m = order[i]
        best = -1
        best_val = -np.inf
        best_fit = False
        best_new = 0.0
        for d in range(nd):
            t = mesh_t[d]
            size = mesh_size[d]
            k1 = cnt[d] + 1
            if not feasible[m, t] or k1 > max_members:
                continue
            if (wused[d] + weights[m]) / size + k1 * reserve > weight_cap * (1 + 1e-9):
                continue
            if wused[d] + weights[m] + k1 * reserve * size + kvneed[d] + kv[m] * tokens[m] > per_gpu * size:
                continue
            sm_fit = rule == FREE_MEMORY or smsum[d] + share[m, t] <= sm_limit + 1e-9
            new = 0.0
            if rule == GAIN:
                c = cnt[d]
                for q in range(c):
                    llms[q] = members[d, q]
                    rows[q] = members[d, q] * nt + t
                llms[c] = m
                rows[c] = m * nt + t
                new = unit_throughput(rows[:c + 1], llms[:c + 1], P, D, out_len, rate, weights, kv, tokens,
                                      per_gpu * size, reserve * size, max_batch, serial_decode, tpt, batch,
                                      hbm_of[d], hbm_cap_gbps * size, slow, beside_of[d], row_share,
                                      hbm_curve_gbps * size, hbm_curve_power)
                if new < 0:
                    continue
                val = new - unit_tpt[d]
            else:
                val = per_gpu * size - wused[d] - kvneed[d] - cnt[d] * reserve * size
            if best < 0 or _preferred(sm_fit, val, cnt[d], best_fit, best_val, cnt[best], spread_ties):
                best, best_val, best_fit, best_new = d, val, sm_fit, new
        if best < 0:
            return -1.0
        members[best, cnt[best]] = m
        cnt[best] += 1
        wused[best] += weights[m]
        kvneed[best] += kv[m] * tokens[m]
        smsum[best] += share[m, mesh_t[best]]
        assign[m] = best
        unit_tpt[best] = best_new
    total = 0.0
    for d in range(nd):
        if cnt[d] == 0:
            continue
        if rule == FREE_MEMORY:
            t = mesh_t[d]
            for q in range(cnt[d]):
                llms[q] = members[d, q]
                rows[q] = members[d, q] * nt + t
            unit_tpt[d] = unit_throughput(rows[:cnt[d]], llms[:cnt[d]], P, D, out_len, rate, weights, kv, tokens,
                                          per_gpu * mesh_size[d], reserve * mesh_size[d], max_batch, serial_decode,
                                          tpt, batch, hbm_of[d], hbm_cap_gbps * mesh_size[d], slow,
                                          beside_of[d], row_share, hbm_curve_gbps * mesh_size[d], hbm_curve_power)
        total += unit_tpt[d]
    return total
