"""Plain-Python reference implementation of the LLM (MuxServe) mesh simulator: the test oracle.

It restates the rules of the Numba kernel ``simulate_mesh`` (its module docstring and
``docs/llm.md``) with per-LLM objects holding deques and lists, one per queue the rules
name (requests not yet admitted, a stack of preempted requests, the running batch in
admission order, the prefill job in flight), instead of the kernel's flat buffers and
counters. :func:`oracle_llm` does the same for ``simulate_llm``'s set-up: it splits the
requests over the meshes, sizes every mesh's KV pool and resamples the LLMs' cost tables
itself (latency-table interpolation restated from the cost-table rules), so that the
kernel's inputs are checked too.

The oracle performs the same floating-point operations in the same order as the kernel
(SM shares added and subtracted job by job, the same interpolation formulas and bracket
choices, integer KiB for the KV cache), so results must agree bit for bit.

``decode_pointer`` selects the decode round-robin order. The documented rule (the default,
``"intended"``, which the kernel follows) is that one pass offers every LLM once, starting
after the last LLM that started a decode. ``"kernel"`` reproduces the order of the kernel
before it was fixed, which advanced its pointer *inside* the pass and kept indexing from the
moved pointer, so after a decode started the pass skipped LLMs (with 3 LLMs and the pointer
at 0: LLM 0 started, then LLM 2 was offered before LLM 1); see
``test_decode_offers_follow_round_robin``.

Where the documentation leaves a choice open the oracle takes the kernel's reading: FCFS's
"LLM's oldest running request" is the first of its running batch (the one admitted
earliest; after a preemption and recompute this need not be its earliest arrival), and a
preempted request is readmitted before new arrivals, the last preempted first (preemption
takes the newest admitted first, so this restores admission order).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import List

INF = float("inf")
EPS = 1e-9  # slack of the "shares sum to at most 1" test and of the idle-SM reset
KIB = 1024
POLICIES = ("adbs", "round-robin", "fcfs", "temporal")


@dataclass
class MeshResult:
    """What one mesh's simulation produces (plain Python values)."""

    first: List[float]           # first-token time per request, -1.0 if none
    finish: List[float]          # finish time, -1.0 unfinished at the horizon, -2.0 dropped
    preempts: List[int]          # times each request was preempted
    sm_bins: List[float]         # SM share x seconds per time bin
    kv_bins: List[float]         # KiB x seconds per time bin
    kv_llm_time: List[float]     # KiB x seconds per LLM
    peak_kv: float               # most KiB ever in use
    peak_sm: float               # most SM share ever in use
    stop: float                  # time the simulation stopped
    # Event counts, to show what a case exercised: prefills, decodes, preemptions, drops,
    # rebalances (ticks), quota_moves, held_sms (an admissible prefill waited for SMs and held
    # decodes back), quota_limited / budget_limited / batch_limited / pool_limited (a prefill
    # batch stopped by that limit), over_quota_alone (an idle LLM admitted past its quota),
    # unfinished (requests left at the horizon).
    stats: dict = field(default_factory=dict)


# ---------------------------------------------------------------- interpolation rules

def interp_length(row, lgrid, x):
    """A latency along the mesh's common length grid: linear between grid points, the first
    value below the grid, the last segment extended beyond it unless that would lower the
    latency (then the last value). ``x`` on an interior grid point uses the segment that ends
    there (weight 1), as the kernel does; ``a + (b - a) * 1.0`` need not be exactly ``b``."""
    n = len(lgrid)
    if n == 1 or x <= lgrid[0]:
        return row[0]
    i = n - 2 if x >= lgrid[-1] else bisect_left(lgrid, x) - 1
    w = (x - lgrid[i]) / (lgrid[i + 1] - lgrid[i])
    v = row[i] + (row[i + 1] - row[i]) * w
    if w > 1.0 and not v > row[-1]:
        return row[-1]
    return v


def _bracket(grid, x):
    """Segment ``i`` and weight of ``x`` on a cost-table grid; a point on the grid gets its own
    index and weight 0 (the cost-table lookup's convention)."""
    n = len(grid)
    if n == 1 or x <= grid[0]:
        return 0, 0.0
    if x >= grid[-1]:
        i = n - 2
    else:
        i = max(j for j in range(n) if grid[j] <= x)
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def _along(v0, v1, w):
    """Linear along a segment; beyond its end a falling segment holds its last value."""
    if w > 1.0 and v1 < v0:
        return v1
    return v0 + (v1 - v0) * w


def table_lookup(table, bgrid, sgrid, batch, length):
    """A cost-table latency at (batch, length): bilinear, length first (``table[i][j]``)."""
    i, wi = _bracket(bgrid, batch)
    j, wj = _bracket(sgrid, length)
    if len(bgrid) == 1:
        if len(sgrid) == 1:
            return table[0][0]
        return _along(table[0][j], table[0][j + 1], wj)
    if len(sgrid) == 1:
        return _along(table[i][0], table[i + 1][0], wi)
    lo = _along(table[i][j], table[i][j + 1], wj)
    hi = _along(table[i + 1][j], table[i + 1][j + 1], wj)
    return _along(lo, hi, wi)


def tables_at_share(tp_table, share):
    """Prefill and decode tables ``[batch][len]`` (seconds) at SM fraction ``share``: linear in
    one over the SMs between measured shares (a table measured on SM partitions counts a share's
    SMs rounded down to its granule, at least one; else the share itself), the highest share's
    table above it, and below the lowest share that table scaled by its SMs over ``share``'s."""
    sm = tp_table.sm_share.tolist()
    planes = (tp_table.prefill_s.tolist(), tp_table.decode_s.tolist())

    def sms(s):
        if tp_table.sm_partition is None or s >= 1.0:  # a whole GPU is not partitioned
            return s
        total, granule = tp_table.sm_partition
        return min(total, max(granule, granule * int(s * total / granule + 1e-9))) / total

    if share <= sm[0]:
        f = sms(sm[0]) / max(sms(share), 1e-6)
        return tuple([[v * f for v in row] for row in p[0]] for p in planes)
    if share >= sm[-1]:
        return tuple(p[-1] for p in planes)
    k = bisect_left(sm, share) - 1
    lo, hi = sms(sm[k]), sms(sm[k + 1])
    w = (1 / sms(share) - 1 / lo) / (1 / hi - 1 / lo) if hi > lo else 0.0
    return tuple([[(1 - w) * a + w * b for a, b in zip(ra, rb)] for ra, rb in zip(p[k], p[k + 1])]
                 for p in planes)


def table_for_tp(cost_table, tp):
    """The TP degree's table (a table without the degree is an error, never a stand-in)."""
    return cost_table.tables[tp]


def mesh_latency_tables(cost_tables, tp, shares, max_batch):
    """Every LLM's prefill and decode latency ``[k][batch 0..max_batch][j]`` on the union of
    the LLMs' length grids (batch 0, never used, is looked up as batch 1)."""
    tp_tables = [table_for_tp(ct, tp) for ct in cost_tables]
    lgrid = sorted({float(x) for t in tp_tables for x in t.seq_len.tolist()})
    P, D = [], []
    for t, share in zip(tp_tables, shares):
        p2, d2 = tables_at_share(t, share)
        bgrid, sgrid = t.batch.tolist(), t.seq_len.tolist()
        batches = [1.0] + [float(b) for b in range(1, max_batch + 1)]
        P.append([[table_lookup(p2, bgrid, sgrid, b, x) for x in lgrid] for b in batches])
        D.append([[table_lookup(d2, bgrid, sgrid, b, x) for x in lgrid] for b in batches])
    return P, D, lgrid


# ---------------------------------------------------------------- one mesh

def _blocks(tokens, block):
    return -(-tokens // block)


class _Llm:
    """One LLM's queues on the mesh."""

    def __init__(self, share, kvu, block, quota):
        self.share = share
        self.unit = block * kvu     # KiB of one block
        self.quota = quota          # KiB (ADBS)
        self.arrivals = deque()     # requests not yet admitted, arrival order
        self.preempted = []         # stack: the last element is readmitted first
        self.running = []           # admitted requests past their prefill, admission order
        self.prefill = []           # requests of the prefill job in flight
        self.prefill_end = INF
        self.stepping = 0           # the first `stepping` running requests are in the decode step
        self.decode_end = INF
        self.used = 0               # KiB held

    def busy(self):
        return bool(self.prefill) or self.stepping > 0


def oracle_mesh(arrival, llm, prompt, output, shares, P, D, lgrid, kvu, rate, pool, block, max_batch,
                token_budget, policy, period, frac, horizon, n_bins, decode_pointer="intended"):
    """Simulate one mesh (the counterpart of the kernel ``simulate_mesh``).

    Requests are given by arrival (sorted), mesh-local LLM id, prompt and output tokens.
    ``P[k][b]``/``D[k][b]`` are LLM ``k``'s prefill/decode latencies of batch ``b`` over
    ``lgrid``; ``kvu[k]`` its KiB per token; ``pool`` KiB; ``policy`` one of
    :data:`POLICIES` (``temporal``: fcfs with every share 1).
    """
    assert policy in POLICIES and decode_pointer in ("intended", "kernel")
    n = len(arrival)
    K = len(shares)
    if policy == "temporal":
        shares = [1.0] * K
    adbs = policy == "adbs"
    fcfs = policy in ("fcfs", "temporal")

    # ADBS: quotas in proportion to rate x KiB per token
    quotas = [pool] * K
    if adbs:
        demand = 0.0
        for k in range(K):
            demand += rate[k] * kvu[k]
        quotas = [int(pool * (rate[k] * kvu[k] / demand if demand > 0 else 1.0 / K)) for k in range(K)]
    llms = [_Llm(float(shares[k]), int(kvu[k]), block, quotas[k]) for k in range(K)]
    for r in range(n):
        llms[llm[r]].arrivals.append(r)

    first = [-1.0] * n
    finish = [-1.0] * n
    preempts = [0] * n
    gen = [0] * n       # tokens generated
    held = [0] * n      # KV blocks held
    sm_bins = [0.0] * n_bins
    kv_bins = [0.0] * n_bins
    kv_llm_time = [0.0] * K
    peak_kv, peak_sm = 0.0, 0.0
    stats = {"prefills": 0, "decodes": 0, "preemptions": 0, "drops": 0, "rebalances": 0, "quota_moves": 0,
             "held_sms": 0, "quota_limited": 0, "over_quota_alone": 0, "budget_limited": 0,
             "batch_limited": 0, "pool_limited": 0, "unfinished": 0}
    state = {"t": 0.0, "sm": 0.0, "done": 0}

    def kv_total():
        return sum(L.used for L in llms)

    def ctx(r):
        return prompt[r] + gen[r]

    def head(L):
        """The next request the LLM would admit: a preempted one first, then the oldest arrival."""
        if L.preempted:
            return L.preempted[-1]
        if L.arrivals and arrival[L.arrivals[0]] <= state["t"]:
            return L.arrivals[0]
        return None

    def take_head(L):
        return L.preempted.pop() if L.preempted else L.arrivals.popleft()

    def can_admit(L, quota):
        """Whether the LLM's head request could be admitted now (its blocks fit the pool and,
        unless the LLM runs nothing, its quota)."""
        r = head(L)
        if r is None or len(L.running) >= max_batch:
            return False
        need = _blocks(ctx(r) + 1, block) * L.unit
        if kv_total() + need > pool:
            return False
        return not L.running or L.used + need <= quota

    def start_prefill(k, quota, use_quota):
        """Admit the LLM's waiting requests while batch, token budget, pool and quota allow."""
        L = llms[k]
        total = kv_total()
        tokens = 0
        batch = []
        while len(L.running) + len(batch) < max_batch:
            r = head(L)
            if r is None:
                break
            c = ctx(r)
            if batch and tokens + c > token_budget:
                stats["budget_limited"] += 1
                break
            need = _blocks(c + 1, block)
            if total + need * L.unit > pool:
                stats["pool_limited"] += 1
                break
            if use_quota and L.used + need * L.unit > quota:
                if L.running or batch:
                    stats["quota_limited"] += 1
                    break
                stats["over_quota_alone"] += 1  # an idle LLM may exceed its quota
            take_head(L)
            held[r] = need
            L.used += need * L.unit
            total += need * L.unit
            batch.append(r)
            tokens += c
        else:
            if head(L) is not None:
                stats["batch_limited"] += 1
        if not batch:
            return False
        L.prefill = batch
        L.prefill_end = state["t"] + interp_length(P[k][len(batch)], lgrid, tokens / len(batch))
        stats["prefills"] += 1
        return True

    def start_decode(k):
        """Reserve one more token's blocks for the running batch, preempting its newest requests
        while the pool lacks them, and start one decode step."""
        L = llms[k]
        total = kv_total()
        while L.running:
            extra = 0
            for r in L.running:
                extra += max(0, _blocks(ctx(r) + 1, block) - held[r])
            if total + extra * L.unit <= pool:
                break
            r = L.running.pop()
            L.used -= held[r] * L.unit
            total -= held[r] * L.unit
            held[r] = 0
            preempts[r] += 1
            L.preempted.append(r)
            stats["preemptions"] += 1
        if not L.running:
            return False
        context = 0.0
        for r in L.running:
            need = _blocks(ctx(r) + 1, block)
            if need > held[r]:
                L.used += (need - held[r]) * L.unit
                held[r] = need
            context += ctx(r)
        b = len(L.running)
        L.stepping = b
        L.decode_end = state["t"] + interp_length(D[k][b], lgrid, context / b)
        stats["decodes"] += 1
        return True

    def complete(r, L):
        finish[r] = state["t"]
        state["done"] += 1
        L.used -= held[r] * L.unit
        held[r] = 0

    def rebalance():
        """Move ``frac`` of the least utilised LLM's unused quota to the most utilised LLM."""
        stats["rebalances"] += 1
        util = [L.used / L.quota if L.quota > 0 else 1.0 for L in llms]
        donors = [k for k in range(K) if llms[k].quota > 0]
        if not donors:
            return
        lo = min(donors, key=lambda k: util[k])   # min/max keep the first of equal keys
        hi = max(range(K), key=lambda k: util[k])
        if lo != hi and util[hi] > util[lo] + 0.1:
            moved = int(frac * (llms[lo].quota - llms[lo].used))
            if moved > 0:
                llms[lo].quota -= moved
                llms[hi].quota += moved
                stats["quota_moves"] += 1

    def accumulate(t0, t1):
        """Integrate SM share and KiB in use over [t0, t1) into the time bins it spans."""
        if t1 <= t0:
            return
        sm = state["sm"]
        total = kv_total()
        for k, L in enumerate(llms):
            kv_llm_time[k] += L.used * (t1 - t0)
        width = horizon / n_bins
        while t0 < t1:
            b = int(t0 / width)
            if b >= n_bins - 1:
                b, end = n_bins - 1, t1
            else:
                end = min(t1, (b + 1) * width)
                if end <= t0:  # t0 rounded onto the bin's upper edge: it belongs to the next bin
                    b += 1
                    end = min(t1, (b + 1) * width)
            sm_bins[b] += sm * (end - t0)
            kv_bins[b] += total * (end - t0)
            t0 = end

    def fits(k):
        return state["sm"] + llms[k].share <= 1.0 + EPS

    def schedule():
        nonlocal rr_prefill, rr_decode
        progress = True
        while progress:
            progress = False
            prefilling = any(L.prefill for L in llms)
            hold = False  # an admissible prefill waits for SMs: no decode may take them
            if not fcfs:
                if not prefilling:
                    for i in range(K):
                        k = (rr_prefill + i) % K
                        quota = llms[k].quota if adbs else pool
                        if not can_admit(llms[k], quota):
                            continue
                        if not fits(k):
                            hold = True
                            stats["held_sms"] += 1
                            break
                        started = start_prefill(k, quota, adbs)
                        assert started, "an admissible head request was not admitted"
                        state["sm"] += llms[k].share
                        rr_prefill = (k + 1) % K
                        progress = True
                        break
                if not hold:
                    start = rr_decode
                    for i in range(K):
                        k = ((rr_decode if decode_pointer == "kernel" else start) + i) % K
                        L = llms[k]
                        if L.stepping or not L.running or not fits(k):
                            continue
                        if start_decode(k):
                            state["sm"] += L.share
                            rr_decode = (k + 1) % K
                        progress = True  # started, or its whole batch went back to waiting
            else:
                if not prefilling:
                    waiting = [(arrival[head(L)], k) for k, L in enumerate(llms) if head(L) is not None]
                    if waiting:
                        k = min(waiting)[1]  # the LLM with the oldest waiting request (lowest id on ties)
                        if can_admit(llms[k], pool):
                            if not fits(k):
                                hold = True
                                stats["held_sms"] += 1
                            else:
                                started = start_prefill(k, pool, False)
                                assert started, "an admissible head request was not admitted"
                                state["sm"] += llms[k].share
                                progress = True
                if not hold:
                    tried = set()
                    while True:
                        ready = [(arrival[L.running[0]], k) for k, L in enumerate(llms)
                                 if k not in tried and not L.stepping and L.running]
                        if not ready:
                            break
                        # the LLM whose oldest running request (the first of its running batch:
                        # admitted earliest, which after a preemption need not be the earliest
                        # arrival) arrived first; lowest id on ties
                        k = min(ready)[1]
                        if not fits(k):
                            break  # head-of-line blocking
                        tried.add(k)
                        if start_decode(k):
                            state["sm"] += llms[k].share
                        progress = True

    rr_prefill = 0
    rr_decode = 0
    pending = 0  # first request that has not arrived yet
    next_rebalance = period if adbs else INF
    while True:
        t = state["t"]
        # ---- jobs ending now
        for L in llms:
            if L.decode_end <= t:
                stepped, rest = L.running[:L.stepping], L.running[L.stepping:]
                kept = []
                for r in stepped:
                    gen[r] += 1
                    if gen[r] >= output[r]:
                        complete(r, L)
                    else:
                        kept.append(r)
                L.running = kept + rest
                L.stepping = 0
                L.decode_end = INF
                state["sm"] -= L.share
            if L.prefill_end <= t:
                for r in L.prefill:
                    if first[r] < 0:
                        first[r] = t
                    gen[r] += 1
                    if gen[r] >= output[r]:
                        complete(r, L)
                    else:
                        L.running.append(r)
                L.prefill = []
                L.prefill_end = INF
                state["sm"] -= L.share
        if state["sm"] < EPS:
            state["sm"] = 0.0
        while pending < n and arrival[pending] <= t:
            pending += 1
        if state["done"] == n:
            break
        while t >= next_rebalance:
            next_rebalance += period
            rebalance()
        schedule()
        # ---- an idle mesh with a waiting request that needs more than the whole pool drops it
        busy = any(L.busy() for L in llms)
        if not busy:
            dropped = False
            for L in llms:
                r = head(L)
                if r is not None and _blocks(ctx(r) + 1, block) * L.unit > pool:
                    take_head(L)
                    finish[r] = -2.0
                    state["done"] += 1
                    stats["drops"] += 1
                    dropped = True
            if dropped:
                continue
        # ---- advance to the next event
        t_next = min([INF] + [L.prefill_end for L in llms] + [L.decode_end for L in llms])
        if pending < n and arrival[pending] < t_next:
            t_next = arrival[pending]
        if t_next == INF:
            break
        if adbs and busy and next_rebalance < t_next:
            t_next = next_rebalance
        peak_kv = max(peak_kv, float(kv_total()))
        peak_sm = max(peak_sm, state["sm"])
        if t_next >= horizon:
            accumulate(t, horizon)
            state["t"] = horizon
            break
        accumulate(t, t_next)
        state["t"] = t_next
    stats["unfinished"] = sum(1 for f in finish if f == -1.0)
    return MeshResult(first, finish, preempts, sm_bins, kv_bins, kv_llm_time, peak_kv, peak_sm, state["t"], stats)


# ---------------------------------------------------------------- a placement (simulate_llm's set-up)

@dataclass
class LlmResult:
    """Per-request outcomes over all meshes, and what the oracle derived for every mesh
    (lists per group; None or empty for a group without models)."""

    policy: str
    first: List[float]
    finish: List[float]
    preempts: List[int]
    stop: float
    hosts: dict                  # model index -> the groups hosting it, in group order
    mesh_requests: List[list]    # request indices of every group
    pools_bytes: List[float]
    pools_kib: List[int]
    shares: List[list]
    mesh_args: List[tuple]       # the arguments of every mesh's oracle_mesh call
    meshes: List[object]         # MeshResult


def oracle_llm(instance, placement, requests, policy, specs, config, decode_pointer="intended", n_bins=60):
    """Simulate an LLM placement mesh by mesh with :func:`oracle_mesh`.

    ``specs`` are the instance's LLM descriptions (``llm_specs``: cost table, weight and KV
    bytes, rate per model, in instance order) and ``config`` its ``llm`` settings; they are
    passed in so that this module imports nothing of the package. An LLM hosted by several
    meshes gets its requests round robin in request order; a mesh's KV pool is its GPUs'
    usable memory less the reserve fraction less its LLMs' weights, in whole KiB; an LLM's KV
    per token is rounded up to whole KiB; the ``temporal`` policy gives every LLM the whole
    mesh; the horizon is the workload's duration plus ``drain_s``.
    """
    cfg = config
    policy = policy or placement.scheduling or cfg.policy
    names = list(instance.model_names)
    spec_of = {s.name: s for s in specs}
    req = instance.requests() if requests is None else requests
    n = len(req)
    arrival = [float(x) for x in req.arrival]
    model = [int(x) for x in req.model]
    if req.prompt_tokens is not None:
        prompt = [int(x) for x in req.prompt_tokens]
        output = [int(x) for x in req.output_tokens]
    else:
        prompt = [int(round(cfg.prompt_tokens))] * n
        output = [int(round(cfg.output_tokens))] * n
    horizon = req.duration_s + cfg.drain_s

    hosts = {}
    for gi, g in enumerate(placement.groups):
        for m in g.models:
            hosts.setdefault(names.index(m), []).append(gi)
    mesh_requests = [[] for _ in placement.groups]
    taken = {}  # requests of each model handed out so far
    for i, m in enumerate(model):
        if m in hosts:  # a model hosted nowhere: its requests are never served
            j = taken.get(m, 0)
            taken[m] = j + 1
            mesh_requests[hosts[m][j % len(hosts[m])]].append(i)

    out = LlmResult(policy, [-1.0] * n, [-1.0] * n, [0] * n, req.duration_s, hosts, mesh_requests,
                    [], [], [], [], [])
    for gi, g in enumerate(placement.groups):
        mesh_specs = [spec_of[m] for m in g.models]
        weights = sum(s.weight_bytes for s in mesh_specs)
        pool_bytes = (instance.cluster.gpu.usable_memory_bytes * g.n_gpus * (1.0 - cfg.kv_reserve_fraction) - weights
                      - len(g.models) * g.n_gpus * cfg.runtime_reserve_gb * 1e9)
        pool = int(pool_bytes // KIB)
        out.pools_bytes.append(pool_bytes)
        out.pools_kib.append(pool)
        if not g.models:
            for lst in (out.shares, out.mesh_args, out.meshes):
                lst.append(None)
            continue
        shares = [1.0] * len(g.models) if policy == "temporal" or g.sm_share is None else [float(x) for x in g.sm_share]
        kvu = [int(math.ceil(s.kv_bytes_per_token / KIB)) for s in mesh_specs]
        P, D, lgrid = mesh_latency_tables([s.table for s in mesh_specs], g.tp, shares, cfg.max_batch)
        local = {names.index(m): k for k, m in enumerate(g.models)}
        sel = mesh_requests[gi]
        args = ([arrival[i] for i in sel], [local[model[i]] for i in sel], [prompt[i] for i in sel],
                [output[i] for i in sel], shares, P, D, lgrid, kvu, [s.rate for s in mesh_specs], pool,
                cfg.kv_block_tokens, cfg.max_batch, cfg.prefill_token_budget, policy,
                cfg.rebalance_period_s, cfg.rebalance_fraction, horizon, n_bins)
        res = oracle_mesh(*args, decode_pointer=decode_pointer)
        for j, i in enumerate(sel):
            out.first[i], out.finish[i], out.preempts[i] = res.first[j], res.finish[j], res.preempts[j]
        out.stop = max(out.stop, res.stop)
        out.shares.append(shares)
        out.mesh_args.append(args)
        out.meshes.append(res)
    return out
