"""Numba kernel: iteration-level simulation of one mesh serving several LLMs (MuxServe).

Every LLM ``k`` on the mesh has two job slots: a **prefill** job (a batch of waiting
prompts, up to ``max_batch`` requests in the LLM's batch and ``token_budget`` prompt
tokens) and a **decode** job (one step of its running batch; requests whose prefill ends
join the next step). A job holds the LLM's SM share ``share[k]`` while it runs; jobs overlap
while their shares sum to at most 1 (spatial-temporal multiplexing). A job's time is looked up in the LLM's latency table at its share:
``P[k, b, :]``/``D[k, b, :]`` over the common length grid ``lgrid`` (prefill of ``b`` prompts
of the batch's mean length; decode step of ``b`` requests at their mean context).

KV cache: one pool of ``pool`` KiB shared by the mesh's LLMs (MuxServe's unified cache: a
token of LLM ``k`` takes ``kvu[k]`` KiB, its K and V of every layer), allocated
in blocks of ``block`` tokens. A prefill admits a request only if the blocks of its context
plus one token fit (and, under ADBS, the LLM's quota); a decode step that needs blocks the
pool lacks *preempts* the LLM's most recently admitted requests, whose blocks are freed and
whose context is recomputed by a later prefill (vLLM's recompute preemption).

Policies (``policy``), following the MuxServe artifact's schedulers: ADBS (0) and
ROUND_ROBIN (1) run at most one prefill at a time on the mesh, offered to the LLMs round
robin; while an admissible prefill waits for SMs no decode starts; the remaining SMs are
filled with decode jobs, offered round robin. ADBS adds KV quotas: they start in proportion
to ``rate x kvu`` and every ``period`` seconds ``frac`` of the least utilised LLM's unused
quota moves to the most utilised one; a prefill admits within its LLM's quota (an LLM with
nothing running may exceed it). FCFS (2) prefills only the LLM with the oldest waiting
request and starts decodes in the order of each LLM's oldest running request, stopping at
the first whose share does not fit (head-of-line blocking); no quotas. The temporal
baseline is FCFS with every share 1 (one job at a time).

A request that cannot be admitted even when nothing else runs (it needs more KV than the
whole pool) is dropped (``finish = -2``); requests unfinished at ``horizon`` keep -1.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ADBS = 0
ROUND_ROBIN = 1
FCFS = 2



@njit(cache=True)
def _len_interp(row, lgrid, x):
    n = lgrid.shape[0]
    if n == 1 or x <= lgrid[0]:
        return row[0]
    if x >= lgrid[n - 1]:
        i = n - 2
    else:
        i = 0
        while lgrid[i + 1] < x:
            i += 1
    w = (x - lgrid[i]) / (lgrid[i + 1] - lgrid[i])
    v = row[i] + (row[i + 1] - row[i]) * w
    return v if v > row[n - 1] or w <= 1.0 else row[n - 1]


@njit(cache=True)
def _blocks(tokens, block):
    return (tokens + block - 1) // block


@njit(cache=True)
def simulate_mesh(arrival, llm, prompt, output, n_llms, share, P, D, lgrid, kvu, rate, pool, block, max_batch,
                  token_budget, policy, period, frac, horizon, n_bins,
                  first, finish, preempt_count, sm_bins, kv_bins, kv_llm_time, peak):
    """Simulate the mesh's requests (sorted by arrival; ``llm`` are mesh-local ids).

    Writes ``first`` (first-token time), ``finish`` (-1 unfinished, -2 dropped),
    ``preempt_count`` per request, ``sm_bins``/``kv_bins`` (SM share and KiB of KV cache in
    use, integrated over time in ``n_bins`` equal bins of ``[0, horizon]``) and
    ``kv_llm_time`` (KiB x seconds per LLM); ``peak[0]`` is the most KiB ever in use and
    ``peak[1]`` the most SM share ever in use. Returns the time the simulation stopped.
    """
    n = arrival.shape[0]
    K = n_llms
    cnt = np.zeros(K + 1, dtype=np.int64)
    for r in range(n):
        cnt[llm[r] + 1] += 1
    lptr = np.cumsum(cnt)  # LLM k's requests own slots lptr[k]..lptr[k+1] of every buffer below
    lst = np.empty(n, dtype=np.int64)  # requests by LLM, arrival order
    fill = lptr[:K].copy()
    for r in range(n):
        lst[fill[llm[r]]] = r
        fill[llm[r]] += 1
    nxt = lptr[:K].copy()  # next request of each LLM not yet taken from its arrival list
    pre_top = np.zeros(K, dtype=np.int64)  # preempted requests (a stack; oldest on top)
    pre_buf = np.empty(n, dtype=np.int64)
    run_cnt = np.zeros(K, dtype=np.int64)  # running requests, admission order
    run_buf = np.empty(n, dtype=np.int64)
    pf_cnt = np.zeros(K, dtype=np.int64)  # requests of the prefill job in flight
    pf_buf = np.empty(n, dtype=np.int64)
    pf_end = np.full(K, np.inf)
    dc_cnt = np.zeros(K, dtype=np.int64)  # the first dc_cnt running requests are in the decode step
    dc_end = np.full(K, np.inf)
    gen = np.zeros(n, dtype=np.int64)
    held = np.zeros(n, dtype=np.int64)  # blocks held
    used = np.zeros(K, dtype=np.int64)  # KiB held by each LLM
    quota = np.full(K, pool, dtype=np.int64)
    if policy == ADBS:
        demand = 0.0
        for k in range(K):
            demand += rate[k] * kvu[k]
        for k in range(K):
            quota[k] = np.int64(pool * (rate[k] * kvu[k] / demand if demand > 0 else 1.0 / K))
    for r in range(n):
        first[r] = -1.0
        finish[r] = -1.0
        preempt_count[r] = 0
    sm_used = 0.0
    rr = 0  # next LLM offered a prefill (round robin)
    rr_dec = 0  # next LLM offered a decode
    na = 0  # requests with arrival <= t
    done = 0
    t = 0.0
    next_rebalance = period if policy == ADBS else np.inf
    bin_w = horizon / n_bins
    eps = 1e-9
    tried = np.zeros(K, dtype=np.bool_)
    while True:
        # ---- complete jobs ending now
        for k in range(K):
            base = lptr[k]
            unit = block * kvu[k]
            if dc_end[k] <= t:
                keep = 0
                for q in range(run_cnt[k]):
                    r = run_buf[base + q]
                    if q < dc_cnt[k]:
                        gen[r] += 1
                        if gen[r] >= output[r]:
                            finish[r] = t
                            done += 1
                            used[k] -= held[r] * unit
                            held[r] = 0
                            continue
                    run_buf[base + keep] = r
                    keep += 1
                run_cnt[k] = keep
                dc_cnt[k] = 0
                dc_end[k] = np.inf
                sm_used -= share[k]
            if pf_end[k] <= t:
                for q in range(pf_cnt[k]):
                    r = pf_buf[base + q]
                    if first[r] < 0:
                        first[r] = t
                    gen[r] += 1
                    if gen[r] >= output[r]:
                        finish[r] = t
                        done += 1
                        used[k] -= held[r] * unit
                        held[r] = 0
                    else:
                        run_buf[base + run_cnt[k]] = r
                        run_cnt[k] += 1
                pf_cnt[k] = 0
                pf_end[k] = np.inf
                sm_used -= share[k]
        if sm_used < eps:
            sm_used = 0.0
        while na < n and arrival[na] <= t:
            na += 1
        if done == n:
            return t
        # ---- ADBS quota re-balancing: part of the least utilised LLM's spare quota to the most utilised
        while t >= next_rebalance:
            next_rebalance += period
            _rebalance(used, quota, frac)
        # ---- schedule
        progress = True
        while progress:
            progress = False
            prefill_inflight = False
            for k in range(K):
                if pf_cnt[k] > 0:
                    prefill_inflight = True
            blocked = False
            if policy != FCFS:  # ADBS and ROUND_ROBIN: one prefill at a time, round robin, before decodes
                use_quota = policy == ADBS
                if not prefill_inflight:
                    for i in range(K):
                        k = (rr + i) % K
                        q = quota[k] if use_quota else pool
                        if not _head_fits(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, prompt, gen,
                                          used, kvu, block, pool, q, max_batch):
                            continue
                        if sm_used + share[k] > 1.0 + eps:
                            blocked = True  # keep the SMs for this prefill: start no decode
                            break
                        if _start_prefill(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, pf_buf, pf_cnt,
                                          pf_end, prompt, gen, held, used, kvu, block, max_batch, token_budget,
                                          pool, q, use_quota, P, lgrid):
                            sm_used += share[k]
                            rr = (k + 1) % K
                            progress = True
                            break
                if not blocked:
                    for i in range(K):
                        k = (rr_dec + i) % K
                        if dc_cnt[k] > 0 or run_cnt[k] == 0 or sm_used + share[k] > 1.0 + eps:
                            continue
                        if _start_decode(k, t, lptr, run_buf, run_cnt, dc_cnt, dc_end, pre_top, pre_buf, prompt,
                                         gen, held, used, kvu, block, pool, preempt_count, D, lgrid):
                            sm_used += share[k]
                            rr_dec = (k + 1) % K
                        progress = True  # started, or preempted requests back to waiting
            else:  # FCFS: the oldest waiting request's LLM prefills; decodes by oldest running request
                if not prefill_inflight:
                    best, best_key = -1, np.inf
                    for k in range(K):
                        r = _head(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf)
                        if r >= 0 and arrival[r] < best_key:
                            best_key, best = arrival[r], k
                    if best >= 0 and _head_fits(best, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, prompt,
                                                gen, used, kvu, block, pool, pool, max_batch):
                        if sm_used + share[best] > 1.0 + eps:
                            blocked = True
                        elif _start_prefill(best, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, pf_buf,
                                            pf_cnt, pf_end, prompt, gen, held, used, kvu, block, max_batch,
                                            token_budget, pool, pool, False, P, lgrid):
                            sm_used += share[best]
                            progress = True
                if not blocked:
                    tried[:] = False
                    while True:
                        best, best_key = -1, np.inf
                        for k in range(K):
                            if not tried[k] and dc_cnt[k] == 0 and run_cnt[k] > 0:
                                if arrival[run_buf[lptr[k]]] < best_key:
                                    best_key, best = arrival[run_buf[lptr[k]]], k
                        if best < 0 or sm_used + share[best] > 1.0 + eps:
                            break  # head-of-line: younger LLMs wait for the oldest one's SMs
                        tried[best] = True
                        if _start_decode(best, t, lptr, run_buf, run_cnt, dc_cnt, dc_end, pre_top, pre_buf, prompt,
                                         gen, held, used, kvu, block, pool, preempt_count, D, lgrid):
                            sm_used += share[best]
                        progress = True
        # ---- nothing runs although requests wait: a head request that can never fit (it needs
        # more than the whole, now empty, pool) is dropped; the others are admitted next round
        busy = False
        for k in range(K):
            if pf_cnt[k] > 0 or dc_cnt[k] > 0:
                busy = True
        if not busy:
            dropped = False
            for k in range(K):
                r = _head(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf)
                if r >= 0 and _blocks(prompt[r] + gen[r] + 1, block) * block * kvu[k] > pool:
                    if pre_top[k] > 0:
                        pre_top[k] -= 1
                    else:
                        nxt[k] += 1
                    finish[r] = -2.0
                    done += 1
                    dropped = True
            if dropped:
                continue
        # ---- advance time
        t_next = np.inf
        for k in range(K):
            t_next = min(t_next, pf_end[k], dc_end[k])
        if na < n and arrival[na] < t_next:
            t_next = arrival[na]
        if t_next == np.inf:
            return t
        if policy == ADBS and busy and next_rebalance < t_next:
            t_next = next_rebalance
        total = _sum(used)
        peak[0] = max(peak[0], total)
        peak[1] = max(peak[1], sm_used)
        if t_next >= horizon:
            _accumulate(t, horizon, sm_used, used, total, sm_bins, kv_bins, kv_llm_time, bin_w, n_bins)
            return horizon
        _accumulate(t, t_next, sm_used, used, total, sm_bins, kv_bins, kv_llm_time, bin_w, n_bins)
        t = t_next


@njit(cache=True)
def _rebalance(used, quota, frac):
    """Move ``frac`` of the least utilised LLM's unused quota to the most utilised one.

    Decode steps may take an LLM past its quota; an LLM with no unused quota donates nothing
    (else the move would run backwards, from the most utilised LLM to the least).
    """
    lo, hi = -1, -1
    ulo, uhi = np.inf, -1.0
    for k in range(used.shape[0]):
        u = used[k] / quota[k] if quota[k] > 0 else 1.0
        if quota[k] > 0 and u < ulo:
            ulo, lo = u, k
        if u > uhi:
            uhi, hi = u, k
    if lo >= 0 and hi >= 0 and lo != hi and uhi > ulo + 0.1:
        moved = np.int64(frac * (quota[lo] - used[lo]))
        if moved > 0:
            quota[lo] -= moved
            quota[hi] += moved


@njit(cache=True)
def _accumulate(t0, t1, sm_used, used, used_total, sm_bins, kv_bins, kv_llm_time, bin_w, n_bins):
    """Integrate the SM and KV usage of ``[t0, t1)`` into the time bins it spans."""
    if t1 <= t0:
        return
    for k in range(used.shape[0]):
        kv_llm_time[k] += used[k] * (t1 - t0)
    while t0 < t1:
        b = int(t0 / bin_w)
        if b >= n_bins - 1:
            b = n_bins - 1
            end = t1
        else:
            end = min(t1, (b + 1) * bin_w)
            if end <= t0:  # rounding at a bin edge
                end = min(t1, (b + 2) * bin_w)
                b += 1
        sm_bins[b] += sm_used * (end - t0)
        kv_bins[b] += used_total * (end - t0)
        t0 = end


@njit(cache=True)
def _sum(a):
    s = 0
    for i in range(a.shape[0]):
        s += a[i]
    return s


@njit(cache=True)
def _head(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf):
    """LLM k's next waiting request (a preempted one first), or -1."""
    if pre_top[k] > 0:
        return pre_buf[lptr[k] + pre_top[k] - 1]
    if nxt[k] < lptr[k + 1] and arrival[lst[nxt[k]]] <= t:
        return lst[nxt[k]]
    return -1


@njit(cache=True)
def _head_fits(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, prompt, gen, used, kvu, block, pool,
               quota_k, max_batch):
    """Whether LLM k could admit its next waiting request now (ADBS quota included)."""
    r = _head(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf)
    if r < 0 or run_cnt[k] >= max_batch:
        return False
    units = _blocks(prompt[r] + gen[r] + 1, block) * block * kvu[k]
    if _sum(used) + units > pool:
        return False
    return run_cnt[k] == 0 or used[k] + units <= quota_k


@njit(cache=True)
def _start_prefill(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf, run_cnt, pf_buf, pf_cnt, pf_end, prompt, gen,
                   held, used, kvu, block, max_batch, token_budget, pool, quota_k, use_quota, P, lgrid):
    """Admit waiting requests of LLM k (preempted first, then by arrival) while blocks, quota,
    batch size and token budget allow, and start their prefill. Returns whether it started."""
    base = lptr[k]
    unit = block * kvu[k]
    total = _sum(used)
    tokens = 0
    b = 0
    while run_cnt[k] + b < max_batch:
        r = _head(k, t, lptr, lst, arrival, nxt, pre_top, pre_buf)
        if r < 0:
            break
        ctx = prompt[r] + gen[r]
        if b > 0 and tokens + ctx > token_budget:
            break
        nb = _blocks(ctx + 1, block)
        if total + nb * unit > pool:
            break
        if use_quota and used[k] + nb * unit > quota_k and not (run_cnt[k] == 0 and b == 0):
            break
        if pre_top[k] > 0:
            pre_top[k] -= 1
        else:
            nxt[k] += 1
        held[r] = nb
        used[k] += nb * unit
        total += nb * unit
        pf_buf[base + b] = r
        b += 1
        tokens += ctx
    pf_cnt[k] = b
    if b == 0:
        return False
    pf_end[k] = t + _len_interp(P[k, b], lgrid, tokens / b)
    return True


@njit(cache=True)
def _start_decode(k, t, lptr, run_buf, run_cnt, dc_cnt, dc_end, pre_top, pre_buf, prompt, gen, held, used, kvu,
                  block, pool, preempt_count, D, lgrid):
    """Reserve the blocks of one more token for LLM k's running requests (preempting its newest
    ones while the pool lacks them) and start one decode step. Returns whether it started."""
    base = lptr[k]
    unit = block * kvu[k]
    total = _sum(used)
    while run_cnt[k] > 0:
        extra = 0
        for q in range(run_cnt[k]):
            r = run_buf[base + q]
            need = _blocks(prompt[r] + gen[r] + 1, block)
            if need > held[r]:
                extra += need - held[r]
        if total + extra * unit <= pool:
            break
        run_cnt[k] -= 1
        r = run_buf[base + run_cnt[k]]
        used[k] -= held[r] * unit
        total -= held[r] * unit
        held[r] = 0
        preempt_count[r] += 1
        pre_buf[base + pre_top[k]] = r
        pre_top[k] += 1
    if run_cnt[k] == 0:
        return False
    ctx = 0.0
    for q in range(run_cnt[k]):
        r = run_buf[base + q]
        need = _blocks(prompt[r] + gen[r] + 1, block)
        if need > held[r]:
            used[k] += (need - held[r]) * unit
            held[r] = need
        ctx += prompt[r] + gen[r]
    dc_cnt[k] = run_cnt[k]
    dc_end[k] = t + _len_interp(D[k, run_cnt[k]], lgrid, ctx / run_cnt[k])
    return True
