"""Numba kernels of the flow-shop serving simulator (AlpaServe semantics).

Data layout (all flat NumPy arrays, no Python objects):

* requests: ``arrival`` (float64, sorted), ``model`` (int32), ``deadline`` (float64);
* groups: stage ``s`` of group ``g`` is clock ``stage_ptr[g] + s``; ``clocks`` holds when
  every stage is next free and is updated in place (callers may pre-load it);
* hosts: a *host* is a (model, group) pair. Model ``m``'s hosts are
  ``host_ptr[m]:host_ptr[m+1]``; host ``h`` runs on group ``host_group[h]`` and its stage
  latencies for batch-size index ``b`` are ``lat[host_lat_ptr[h] + b * n_stages + s]``
  (``inf`` marks an unprofiled batch size).

Outputs are written into ``finish`` (``-1`` for rejected requests), ``group_out``
(``-1`` when rejected) and ``busy`` (busy seconds summed over a group's stages).
"""

from __future__ import annotations

import numpy as np
from numba import njit

EARLIEST = 0
SHORTEST_QUEUE = 1


@njit(cache=True)
def run_flow_shop(arrival, model, deadline, host_ptr, host_group, host_lat_ptr, lat, stage_ptr, clocks,
                  overhead, policy, finish, group_out, busy):
    """One request at a time, in arrival order, with admission control.

    Dispatch picks among the model's hosts the group whose last stage frees first
    (``EARLIEST``) or that has the fewest accepted, unfinished requests
    (``SHORTEST_QUEUE``; ties go to the earlier last-stage clock, then the lower host).
    A request whose finish would pass its deadline is rejected and changes nothing.
    Returns the number of accepted requests.
    """
    n = arrival.shape[0]
    n_groups = stage_ptr.shape[0] - 1
    # Per-group FIFO of accepted requests' completion times (monotone per group),
    # kept as a linked list through ``nxt`` for the shortest-queue policy (only it needs them).
    nq = n if policy == SHORTEST_QUEUE else 0
    nxt = np.full(nq, -1, dtype=np.int64)
    qhead = np.full(n_groups, -1, dtype=np.int64)
    qtail = np.full(n_groups, -1, dtype=np.int64)
    qlen = np.zeros(n_groups, dtype=np.int64)
    done = np.empty(nq, dtype=np.float64)
    accepted = 0
    for i in range(n):
        m = model[i]
        t0 = arrival[i]
        best = -1
        best_key = np.inf
        best_clock = np.inf
        for h in range(host_ptr[m], host_ptr[m + 1]):
            g = host_group[h]
            last_clock = clocks[stage_ptr[g + 1] - 1]
            if policy == EARLIEST:
                if last_clock < best_key:
                    best_key = last_clock
                    best = h
            else:
                while qhead[g] >= 0 and done[qhead[g]] <= t0:
                    qhead[g] = nxt[qhead[g]]
                    qlen[g] -= 1
                key = float(qlen[g])
                if key < best_key or (key == best_key and last_clock < best_clock):
                    best_key = key
                    best_clock = last_clock
                    best = h
        if best < 0:
            finish[i] = -1.0
            group_out[i] = -1
            continue
        g = host_group[best]
        s0 = stage_ptr[g]
        ns = stage_ptr[g + 1] - s0
        base = host_lat_ptr[best]
        t = t0
        for s in range(ns):
            c = clocks[s0 + s]
            if c > t:
                t = c
            t += lat[base + s]
        end = t + overhead
        if end <= deadline[i]:
            t = t0
            for s in range(ns):
                c = clocks[s0 + s]
                if c > t:
                    t = c
                t += lat[base + s]
                clocks[s0 + s] = t
                busy[g] += lat[base + s]
            finish[i] = end
            group_out[i] = g
            accepted += 1
            if policy == SHORTEST_QUEUE:
                done[i] = t
                if qtail[g] >= 0 and qhead[g] >= 0:
                    nxt[qtail[g]] = i
                else:
                    qhead[g] = i
                qtail[g] = i
                qlen[g] += 1
        else:
            finish[i] = -1.0
            group_out[i] = -1
    return accepted


@njit(cache=True)
def _batch_end(start, clocks, s0, ns, lat, base):
    t = start
    for s in range(ns):
        c = clocks[s0 + s]
        if c > t:
            t = c
        t += lat[base + s]
    return t


@njit(cache=True)
def run_batched(arrival, model, deadline, n_models, host_ptr, host_group, host_lat_ptr, lat, stage_ptr,
                group_host_ptr, group_hosts, host_model, batch_sizes, clocks, overhead, finish, group_out,
                busy, batch_out):
    """Batching variant: per-model FIFO queues served by whichever group can start first.

    Repeatedly, the group that can start earliest (its first stage free and a queued
    request of one of its models arrived) takes the model whose head request is oldest,
    drops heads that cannot meet their deadline even alone, and grows the batch through
    ``batch_sizes`` while the head's deadline still holds and enough requests have arrived.
    ``batch_out[i]`` records the size of the batch request ``i`` ran in.
    Returns the number of accepted requests.
    """
    n = arrival.shape[0]
    n_groups = stage_ptr.shape[0] - 1
    nb = batch_sizes.shape[0]
    # requests of each model in arrival order
    order = np.argsort(model, kind="mergesort")
    mptr = np.zeros(n_models + 1, dtype=np.int64)
    for i in range(n):
        mptr[model[i] + 1] += 1
    for m in range(n_models):
        mptr[m + 1] += mptr[m]
    qhead = mptr[:-1].copy()
    qtail = mptr[:-1].copy()
    nxt = 0
    accepted = 0
    while True:
        best_g = -1
        best_s = np.inf
        for g in range(n_groups):
            eh = np.inf
            for k in range(group_host_ptr[g], group_host_ptr[g + 1]):
                m = host_model[group_hosts[k]]
                if qhead[m] < qtail[m]:
                    a = arrival[order[qhead[m]]]
                    if a < eh:
                        eh = a
            if eh == np.inf:
                continue
            s = clocks[stage_ptr[g]]
            if eh > s:
                s = eh
            if s < best_s:
                best_s = s
                best_g = g
        if nxt < n and (best_g < 0 or arrival[nxt] <= best_s):
            m = model[nxt]
            if host_ptr[m] == host_ptr[m + 1]:
                finish[nxt] = -1.0
                group_out[nxt] = -1
                # keep the queue contiguous: an unhosted model's requests are skipped
                qhead[m] += 1
            qtail[m] += 1
            nxt += 1
            continue
        if best_g < 0:
            break
        g = best_g
        start = best_s
        # the model whose head request is oldest (and has arrived by ``start``)
        pick = -1
        pick_arrival = np.inf
        pick_req = n
        for k in range(group_host_ptr[g], group_host_ptr[g + 1]):
            h = group_hosts[k]
            m = host_model[h]
            if qhead[m] < qtail[m]:
                r = order[qhead[m]]
                a = arrival[r]
                if a <= start and (a < pick_arrival or (a == pick_arrival and r < pick_req)):
                    pick = h
                    pick_arrival = a
                    pick_req = r
        m = host_model[pick]
        s0 = stage_ptr[g]
        ns = stage_ptr[g + 1] - s0
        base = host_lat_ptr[pick]
        # drop heads that cannot finish in time even alone
        while qhead[m] < qtail[m]:
            r = order[qhead[m]]
            if arrival[r] > start:
                break
            if _batch_end(start, clocks, s0, ns, lat, base) + overhead <= deadline[r]:
                break
            finish[r] = -1.0
            group_out[r] = -1
            qhead[m] += 1
        if qhead[m] >= qtail[m] or arrival[order[qhead[m]]] > start:
            continue
        head = order[qhead[m]]
        avail = 0
        while qhead[m] + avail < qtail[m] and arrival[order[qhead[m] + avail]] <= start:
            avail += 1
        bi_best = 0
        for bi in range(1, nb):
            b = batch_sizes[bi]
            if b > avail:
                break
            off = base + bi * ns
            if lat[off] == np.inf:
                break
            if _batch_end(start, clocks, s0, ns, lat, off) + overhead > deadline[head]:
                break
            bi_best = bi
        b = batch_sizes[bi_best]
        off = base + bi_best * ns
        t = start
        for s in range(ns):
            c = clocks[s0 + s]
            if c > t:
                t = c
            t += lat[off + s]
            clocks[s0 + s] = t
            busy[g] += lat[off + s]
        for j in range(b):
            r = order[qhead[m] + j]
            finish[r] = t + overhead
            group_out[r] = g
            batch_out[r] = b
        qhead[m] += b
        accepted += b
    return accepted
