"""Numba kernels of the flow-shop serving simulator (AlpaServe semantics).

A kernel takes its flat NumPy arrays (no Python objects) in three bundles:

* ``requests = (arrival, model, deadline)``: float64 (sorted), int32 or int64, float64;
* ``hosts``: the arrays of :class:`HostTables`, passed as a plain ``tuple(tables)``;
* ``out = (finish, group, batch, busy, clocks)``, written in place: per request its finish
  time (``-1`` when rejected), its group (``-1`` when rejected) and the size of the batch it
  ran in; per group its busy seconds summed over its stages; per stage the time it is next
  free (callers may pre-load ``clocks``).

The bundles cross into Numba as plain tuples because Numba types a plain tuple of arrays
as fast as bare arrays, a NamedTuple only in Python (microseconds a call, and searches
call the kernels hundreds of thousands of times); the kernels rebuild :class:`HostTables`
inside, where it costs nothing.

Speed rules (each one measured; breaking one costs the kernels 1.05x to 2x):

* helpers are inlined (``inline="always"``): a call between compiled functions is not;
* a helper reads the fields it needs into local arrays first: a NamedTuple field read
  inside a loop is not hoisted out of it;
* an inlined helper that takes arrays has one way out (its loops end on their condition,
  not on ``break``, and it does not branch to different writes): otherwise Numba's
  reference counting of those arrays is not pruned and runs (atomically) on every call.
  Writes that branch, such as enqueueing a request, stay in the kernel's loop.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

EARLIEST = 0
SHORTEST_QUEUE = 1


class HostTables(NamedTuple):
    """Kernel inputs for one set of groups, built by :func:`placement_opt.simulate.tables.build_tables`.

    Stage ``s`` of group ``g`` is clock ``stage_ptr[g] + s``. A *host* is a (model, group)
    pair: model ``m``'s hosts are ``host_ptr[m]:host_ptr[m+1]`` (ordered by group), host
    ``h`` serves model ``host_model[h]`` on group ``host_group[h]``, and its stage latency
    for the batch size ``batch_sizes[b]`` is ``lat[host_lat_ptr[h] + b * n_stages + s]``
    (``inf`` marks an unprofiled batch size). Group ``g``'s hosts are
    ``group_hosts[group_host_ptr[g]:group_host_ptr[g+1]]`` (only the batching kernel reads
    them and ``batch_sizes``). Defined here, beside the kernels that read it, so that a
    change of the layout invalidates their Numba cache.
    """

    host_ptr: np.ndarray
    host_group: np.ndarray
    host_model: np.ndarray
    host_lat_ptr: np.ndarray
    lat: np.ndarray
    stage_ptr: np.ndarray
    group_host_ptr: np.ndarray
    group_hosts: np.ndarray
    batch_sizes: np.ndarray

    @property
    def n_groups(self) -> int:
        return len(self.stage_ptr) - 1


# --- a batch on a group's stages (shared by both kernels) ---------------------------------------


@njit(cache=True, inline="always")
def _batch_end(hosts: HostTables, clocks: np.ndarray, g: int, off: int, start: float) -> float:
    """When a batch ready at ``start`` would leave group ``g``'s last stage, its stage
    latencies being ``lat[off:off + n_stages]`` (the clocks are left as they are)."""
    stage_ptr = hosts.stage_ptr
    lat = hosts.lat
    s0 = stage_ptr[g]
    t = start
    for s in range(stage_ptr[g + 1] - s0):
        c = clocks[s0 + s]
        if c > t:
            t = c
        t += lat[off + s]
    return t


@njit(cache=True, inline="always")
def _occupy(hosts: HostTables, clocks: np.ndarray, busy: np.ndarray, g: int, off: int, start: float) -> float:
    """Run that batch: every stage of group ``g`` is busy until the batch leaves it, and the
    group's busy seconds grow by the batch's stage latencies. Returns when it leaves the last stage."""
    stage_ptr = hosts.stage_ptr
    lat = hosts.lat
    s0 = stage_ptr[g]
    t = start
    for s in range(stage_ptr[g + 1] - s0):
        c = clocks[s0 + s]
        if c > t:
            t = c
        t += lat[off + s]
        clocks[s0 + s] = t
        busy[g] += lat[off + s]
    return t


# --- one request at a time ----------------------------------------------------------------------


class GroupQueues(NamedTuple):
    """Per group, its accepted requests that have not left its last stage, oldest first (a FIFO:
    they leave in the order they joined), as a linked list through ``successor``; only the
    shortest-queue policy keeps them."""

    successor: np.ndarray  # per request: the request after it in its group's queue
    head: np.ndarray  # per group: first queued request, -1 when none
    tail: np.ndarray  # per group: last request that joined, -1 before the first
    length: np.ndarray  # per group: requests queued
    done: np.ndarray  # per request: when it leaves its group's last stage


@njit(cache=True, inline="always")
def _group_queues(n_requests: int, n_groups: int) -> GroupQueues:
    """Empty queues for ``n_requests`` requests (0 under the earliest policy, which keeps none)."""
    return GroupQueues(np.full(n_requests, -1, dtype=np.int64), np.full(n_groups, -1, dtype=np.int64),
                       np.full(n_groups, -1, dtype=np.int64), np.zeros(n_groups, dtype=np.int64),
                       np.empty(n_requests, dtype=np.float64))


@njit(cache=True, inline="always")
def _queue_length(queues: GroupQueues, g: int, now: float) -> int:
    """Requests of group ``g`` that have not left it at ``now`` (those that have leave its queue)."""
    head = queues.head
    length = queues.length
    done = queues.done
    successor = queues.successor
    while head[g] >= 0 and done[head[g]] <= now:
        head[g] = successor[head[g]]
        length[g] -= 1
    return length[g]


@njit(cache=True, inline="always")
def _pick_host(hosts: HostTables, clocks: np.ndarray, queues: GroupQueues, m: int, now: float,
               policy: int) -> int:
    """The host among model ``m``'s that a request arriving at ``now`` is dispatched to (-1: none).

    ``EARLIEST``: the one whose group's last stage frees first; ``SHORTEST_QUEUE``: the one
    whose group has the fewest unfinished requests, then the earlier last-stage clock.
    Ties go to the lower host.
    """
    host_group = hosts.host_group
    stage_ptr = hosts.stage_ptr
    best = -1
    best_key = np.inf
    best_clock = np.inf
    for h in range(hosts.host_ptr[m], hosts.host_ptr[m + 1]):
        g = host_group[h]
        last_clock = clocks[stage_ptr[g + 1] - 1]
        if policy == EARLIEST:
            if last_clock < best_key:
                best_key = last_clock
                best = h
        else:
            key = float(_queue_length(queues, g, now))
            if key < best_key or (key == best_key and last_clock < best_clock):
                best_key = key
                best_clock = last_clock
                best = h
    return best


@njit(cache=True, inline="always")
def _host_stages(hosts: HostTables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per host: its group's first clock, its number of stages and its group's last clock (int32),
    so that dispatch and the stage pass read one array instead of two chained lookups."""
    host_group = hosts.host_group
    stage_ptr = hosts.stage_ptr
    n_hosts = host_group.shape[0]
    first = np.empty(n_hosts, dtype=np.int32)
    count = np.empty(n_hosts, dtype=np.int32)
    last = np.empty(n_hosts, dtype=np.int32)
    for h in range(n_hosts):
        g = host_group[h]
        first[h] = stage_ptr[g]
        count[h] = stage_ptr[g + 1] - stage_ptr[g]
        last[h] = stage_ptr[g + 1] - 1
    return first, count, last


@njit(cache=True, inline="always")
def _flow_shop_loop(requests: tuple, hosts: HostTables, out: tuple, accepted_of: np.ndarray, overhead: float,
                    policy: int, record: bool, max_rejected: int) -> int:
    """The one-request-at-a-time loop shared by :func:`run_flow_shop` (``record``: per-request
    finish and group written) and :func:`accept_flow_shop` (only per-model accepted counts).

    One pass per request: the stages are occupied optimistically while the finish is computed
    (their old clocks and the group's busy seconds kept aside) and put back when the request
    is rejected, which is rare. The sums and comparisons are those of the two-pass form, so
    the results are bit for bit the same. The loop gives up, returning -1, once more than
    ``max_rejected`` requests are rejected (a search's candidate that can no longer win).
    """
    arrival, model, deadline = requests
    finish, group_out, _, busy, clocks = out
    host_group = hosts.host_group
    host_lat_ptr = hosts.host_lat_ptr
    host_ptr = hosts.host_ptr
    lat = hosts.lat
    first, count, last = _host_stages(hosts)
    old = np.empty(max(int(count.max()), 1) if count.shape[0] else 1, dtype=np.float64)
    n = arrival.shape[0]
    queues = _group_queues(n if policy == SHORTEST_QUEUE else 0, hosts.stage_ptr.shape[0] - 1)
    successor, head, tail, length, done = queues
    accepted = 0
    rejected = 0
    i = -1
    while i + 1 < n and rejected <= max_rejected:
        i += 1
        m = model[i]
        a = arrival[i]
        if policy == EARLIEST:
            h = -1
            best_key = np.inf
            for k in range(host_ptr[m], host_ptr[m + 1]):
                c = clocks[last[k]]
                if c < best_key:
                    best_key = c
                    h = k
        else:
            h = _pick_host(hosts, clocks, queues, m, a, policy)
        if h < 0:
            rejected += 1
            if record:
                finish[i] = -1.0
                group_out[i] = -1
            continue
        g = host_group[h]
        s0 = first[h]
        off = host_lat_ptr[h]
        t = a
        spent = busy[g]
        for s in range(count[h]):
            c = clocks[s0 + s]
            old[s] = c
            if c > t:
                t = c
            t += lat[off + s]
            clocks[s0 + s] = t
            spent += lat[off + s]
        end = t + overhead
        if end <= deadline[i]:
            busy[g] = spent
            accepted += 1
            accepted_of[m] += 1
            if record:
                finish[i] = end
                group_out[i] = g
            if policy == SHORTEST_QUEUE:  # request i joins group g's queue
                done[i] = t
                if tail[g] >= 0 and head[g] >= 0:
                    successor[tail[g]] = i
                else:
                    head[g] = i
                tail[g] = i
                length[g] += 1
        else:
            rejected += 1
            for s in range(count[h]):
                clocks[s0 + s] = old[s]
            if record:
                finish[i] = -1.0
                group_out[i] = -1
    return accepted if rejected <= max_rejected else -1


@njit(cache=True)
def run_flow_shop(requests: tuple, hosts: tuple, out: tuple, overhead: float, policy: int) -> int:
    """One request at a time, in arrival order, with admission control.

    Dispatch picks among the model's hosts the group whose last stage frees first
    (``EARLIEST``) or that has the fewest accepted, unfinished requests
    (``SHORTEST_QUEUE``; ties go to the earlier last-stage clock, then the lower host).
    A request whose finish would pass its deadline is rejected and changes nothing.
    Returns the number of accepted requests.
    """
    accepted_of = np.zeros(hosts[0].shape[0], dtype=np.int64)
    n = requests[0].shape[0]
    return _flow_shop_loop(requests, HostTables(*hosts), out, accepted_of, overhead, policy, True, n)


@njit(cache=True)
def accept_flow_shop(requests: tuple, hosts: tuple, busy: np.ndarray, clocks: np.ndarray, accepted_of: np.ndarray,
                     overhead: float, policy: int, max_rejected: int = -1) -> int:
    """:func:`run_flow_shop` for searches: the same decisions, but only the accepted requests
    of every model (added to ``accepted_of``), the busy seconds and the clocks are kept;
    nothing per request is written. Returns the number of accepted requests, or -1 (the other
    outputs then partial) as soon as more than ``max_rejected`` are rejected (-1: no limit).

    Under ``EARLIEST`` dispatch it runs :func:`_accept_earliest` (see there why it is faster)."""
    if max_rejected < 0:
        max_rejected = requests[0].shape[0]
    tables = HostTables(*hosts)
    if policy == EARLIEST:
        return _accept_earliest(requests, tables, busy, clocks, accepted_of, overhead, max_rejected)
    empty_f = np.empty(0, dtype=np.float64)
    empty_i = np.empty(0, dtype=np.int64)
    out = (empty_f, empty_i, empty_i, busy, clocks)
    return _flow_shop_loop(requests, tables, out, accepted_of, overhead, policy, False, max_rejected)


# --- attainment only, earliest dispatch (what the searches run) ---------------------------------
#
# Measured on 64 x BERT-1.3B on 16 groups of 4 stages (benchmarks/kernel_vs_artifact.py), the
# cost of the one-request-at-a-time loop is the dispatch, not the arithmetic:
#
# * with the choice made by conditional moves, every request's clock loads wait for the
#   previous request's stage chain (stored, then loaded back): 2x slower than branches,
#   which the processor predicts and runs ahead of. A store inside each branch keeps LLVM
#   from turning them into conditional moves;
# * every other branch on the way dilutes the history the predictor reads: a model's hosts
#   are compared in blocks of four, straight-line, padded with hosts whose last clock is
#   ``inf`` (never chosen: the comparison is strict), and 4-stage groups keep their new
#   clocks in registers until the request is admitted (no loop, nothing to put back);
# * interleaved requests of independent components (groups that share no model) make the
#   choices half as predictable: within every chunk of requests, components run one after
#   another (the same results, as they share no clock), through an order array built in one
#   counting pass and one scatter.
#
# Indices are unsigned (``_u``): Numba adds a negative-index test to every signed one.

#: fields of a host's dispatch record (int32): its group's last clock, first clock, stages,
#: the group, and the offset of its batch-size-1 stage latencies in ``lat``
_LAST, _FIRST, _STAGES, _GROUP, _LAT = 0, 1, 2, 3, 4
_RECORD = 5
#: hosts compared straight-line per block (a model's hosts are padded to a multiple)
_BLOCK = 4
#: requests grouped by component at a time (their indices and arrays stay in cache)
_CHUNK = 8192


@njit(cache=True, inline="always")
def _u(x: int) -> int:
    """``x`` as an unsigned index: Numba indexes without the negative-index test."""
    return np.uint64(x)


@njit(cache=True)
def _dispatch_records(hosts: HostTables, never: int) -> tuple[np.ndarray, np.ndarray]:
    """Per model its hosts' :data:`_RECORD` int32 fields in blocks of :data:`_BLOCK` (at least
    one), padded with records whose last clock is ``never`` (a clock that stays ``inf``),
    and the first block of every model (``n_models + 1``). A latency offset fits in int32: ``lat`` would
    otherwise hold more than 16 GiB."""
    host_ptr = hosts.host_ptr
    host_group = hosts.host_group
    stage_ptr = hosts.stage_ptr
    n_models = host_ptr.shape[0] - 1
    block_ptr = np.zeros(n_models + 1, dtype=np.int64)
    for m in range(n_models):
        block_ptr[m + 1] = block_ptr[m] + max((host_ptr[m + 1] - host_ptr[m] + _BLOCK - 1) // _BLOCK, 1)
    rec = np.zeros(block_ptr[n_models] * _BLOCK * _RECORD, dtype=np.int32)
    rec[_LAST::_RECORD] = never
    for m in range(n_models):
        for j in range(host_ptr[m + 1] - host_ptr[m]):
            h = host_ptr[m] + j
            g = host_group[h]
            r = (block_ptr[m] * _BLOCK + j) * _RECORD
            rec[r + _LAST] = stage_ptr[g + 1] - 1
            rec[r + _FIRST] = stage_ptr[g]
            rec[r + _STAGES] = stage_ptr[g + 1] - stage_ptr[g]
            rec[r + _GROUP] = g
            rec[r + _LAT] = hosts.host_lat_ptr[h]
    return rec, block_ptr


@njit(cache=True, inline="always")
def _root(parent: np.ndarray, x: int) -> int:
    """The representative of group ``x``'s component (union-find with path halving)."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True)
def _component_of_model(hosts: HostTables) -> tuple[np.ndarray, int]:
    """Per model the component of the model-group graph its groups belong to, numbered in
    order of first model, and the number of components (models without hosts: 0; their
    requests are rejected whatever the order)."""
    host_ptr = hosts.host_ptr
    host_group = hosts.host_group
    n_models = host_ptr.shape[0] - 1
    parent = np.arange(hosts.stage_ptr.shape[0] - 1)
    for m in range(n_models):
        for k in range(host_ptr[m] + 1, host_ptr[m + 1]):
            a = _root(parent, host_group[host_ptr[m]])
            b = _root(parent, host_group[k])
            parent[max(a, b)] = min(a, b)
    number = np.full(parent.shape[0], -1, dtype=np.int64)
    comp = np.zeros(n_models, dtype=np.int64)
    n_comps = 0
    for m in range(n_models):
        if host_ptr[m + 1] > host_ptr[m]:
            root = _root(parent, host_group[host_ptr[m]])
            if number[root] < 0:
                number[root] = n_comps
                n_comps += 1
            comp[m] = number[root]
    return comp, n_comps


@njit(cache=True)
def _group_by_component(model: np.ndarray, comp: np.ndarray, lo: int, hi: int, order: np.ndarray,
                        partial: np.ndarray) -> bool:
    """Write into ``order[:hi - lo]`` the requests ``lo..hi-1`` grouped by component (in
    arrival order within one); False, with nothing written, when they all belong to one.
    Counted in four interleaved histograms (``partial``, 4 x components), so that consecutive
    requests of one component do not wait on one counter."""
    partial[:] = 0
    for i in range(lo, hi):
        partial[_u(i & 3), _u(comp[_u(model[_u(i)])])] += 1
    counts = partial.sum(axis=0)
    if np.count_nonzero(counts) <= 1:
        return False
    fill = np.zeros(counts.shape[0], dtype=np.int64)
    fill[1:] = np.cumsum(counts)[:-1]
    for i in range(lo, hi):
        r = _u(comp[_u(model[_u(i)])])
        f = fill[r]
        order[_u(f)] = i
        fill[r] = f + 1
    return True


@njit(cache=True, inline="always")
def _four_stages(clocks: np.ndarray, lat: np.ndarray, s0: int, off: int, start: float) -> tuple:
    """A request ready at ``start`` on a 4-stage group whose first clock is ``s0``: when it
    would leave each stage (nothing is written)."""
    t0 = max(start, clocks[s0]) + lat[off]
    t1 = max(t0, clocks[_u(s0 + 1)]) + lat[_u(off + 1)]
    t2 = max(t1, clocks[_u(s0 + 2)]) + lat[_u(off + 2)]
    t3 = max(t2, clocks[_u(s0 + 3)]) + lat[_u(off + 3)]
    return t0, t1, t2, t3


@njit(cache=True, inline="always")
def _last_clock(clocks: np.ndarray, rec: np.ndarray, slot: int) -> float:
    """The last-stage clock of the group of the host record in ``slot``."""
    return clocks[_u(rec[_u(slot * _RECORD + _LAST)])]


@njit(cache=True, inline="always")
def _earliest_slot(clocks: np.ndarray, rec: np.ndarray, taken: np.ndarray, b: int, end: int) -> tuple:
    """The record among ``b..end-1`` (whole blocks) whose group's last stage frees first, the
    lower one on a tie, and that clock. Each block is compared straight-line; the stores
    into ``taken`` keep the comparisons branches (see the notes above)."""
    best = _last_clock(clocks, rec, b)
    h = b
    while True:
        c = _last_clock(clocks, rec, b + 1)
        if c < best:
            best = c
            h = b + 1
            taken[1] = c
        c = _last_clock(clocks, rec, b + 2)
        if c < best:
            best = c
            h = b + 2
            taken[2] = c
        c = _last_clock(clocks, rec, b + 3)
        if c < best:
            best = c
            h = b + 3
            taken[3] = c
        b += _BLOCK
        if b >= end:
            return h, best
        c = _last_clock(clocks, rec, b)
        if c < best:
            best = c
            h = b
            taken[0] = c


@njit(cache=True)
def _accept_earliest(requests: tuple, hosts: HostTables, busy: np.ndarray, clocks: np.ndarray,
                     accepted_of: np.ndarray, overhead: float, max_rejected: int) -> int:
    """:func:`accept_flow_shop` under ``EARLIEST`` dispatch (see the notes above).

    Same sums and comparisons as :func:`_flow_shop_loop`, so bit for bit the same results.
    Runs on a copy of the clocks with one more that stays ``inf`` (the padding hosts' last
    clock); requests are taken :data:`_CHUNK` at a time, grouped by component."""
    arrival, model, deadline = requests
    lat = hosts.lat
    n_clocks = clocks.shape[0]
    work = np.full(n_clocks + 1, np.inf)
    work[:n_clocks] = clocks
    rec, block_ptr = _dispatch_records(hosts, n_clocks)
    comp, n_comps = _component_of_model(hosts)
    n = arrival.shape[0]
    order = np.empty(min(_CHUNK, n) if n_comps > 1 else 0, dtype=np.int64)
    partial = np.zeros((4, max(n_comps, 1)), dtype=np.int64)
    old = np.empty(max(int(rec[_STAGES::_RECORD].max()), 1), dtype=np.float64)
    taken = np.empty(_BLOCK, dtype=np.float64)
    accepted = 0
    rejected = 0
    j = lo = hi = 0
    indirect = False
    while j < n and rejected <= max_rejected:
        if j == hi:  # the next chunk
            lo = j
            hi = min(j + _CHUNK, n)
            indirect = n_comps > 1 and _group_by_component(model, comp, lo, hi, order, partial)
        i = _u(order[_u(j - lo)]) if indirect else _u(j)
        j += 1
        m = _u(model[i])
        h, best = _earliest_slot(work, rec, taken, block_ptr[m] * _BLOCK, block_ptr[_u(m + 1)] * _BLOCK)
        if not best < np.inf:  # no host, or none whose group ever frees
            rejected += 1
            continue
        r = _u(h * _RECORD)
        s0 = _u(rec[_u(r + _FIRST)])
        cnt = _u(rec[_u(r + _STAGES)])
        g = _u(rec[_u(r + _GROUP)])
        off = _u(rec[_u(r + _LAT)])
        spent = busy[g]
        if cnt == 4:
            t0, t1, t2, t3 = _four_stages(work, lat, s0, off, arrival[i])
            if t3 + overhead <= deadline[i]:
                work[s0] = t0
                work[_u(s0 + 1)] = t1
                work[_u(s0 + 2)] = t2
                work[_u(s0 + 3)] = t3
                busy[g] = spent + lat[off] + lat[_u(off + 1)] + lat[_u(off + 2)] + lat[_u(off + 3)]
                accepted += 1
                accepted_of[m] += 1
            else:
                rejected += 1
            continue
        t = arrival[i]
        for s in range(cnt):
            c = work[_u(s0 + s)]
            old[s] = c
            if c > t:
                t = c
            t += lat[_u(off + s)]
            work[_u(s0 + s)] = t
            spent += lat[_u(off + s)]
        if t + overhead <= deadline[i]:
            busy[g] = spent
            accepted += 1
            accepted_of[m] += 1
        else:
            rejected += 1
            for s in range(cnt):
                work[_u(s0 + s)] = old[s]
    clocks[:] = work[:n_clocks]
    return accepted if rejected <= max_rejected else -1


# --- one request at a time, the fitted stage clock (issue 13) ----------------------------------


class WarmTables(NamedTuple):
    """The fitted terms of :class:`HostTables`' stage times, in the same layout as ``lat`` (which
    is a stage's back-to-back occupancy: latency plus gap). ``cold`` is the occupancy after a long
    idle time, ``heat_rate`` and ``cool_rate`` how fast the stage's heat (0..1) grows per busy
    second and falls per idle second, and ``gap`` the part of the occupancy that is host work
    after the request has left the stage (it keeps the stage busy but does not delay the
    request), and ``tail`` the admission margin per busy second of the group's last stage (read
    at the last stage's entry; 0: none). Built by :func:`placement_opt.simulate.tables.warm_tables`."""

    cold: np.ndarray
    heat_rate: np.ndarray
    cool_rate: np.ndarray
    gap: np.ndarray
    tail: np.ndarray


@njit(cache=True)
def run_flow_shop_warm(requests: tuple, hosts: tuple, warm: tuple, out: tuple, heat: np.ndarray, since: np.ndarray,
                       overhead: float, policy: int) -> int:
    """:func:`run_flow_shop` with the fitted stage clock: warm-up, gaps as occupancy, tail margin.

    A stage's ``heat`` (per clock, written in place) falls by idle time x ``cool_rate`` before a
    request (never below 0); the stage is then occupied for ``cold + (lat - cold) x heat``, of
    which the request spends all but the ``gap`` there: it moves on to the next stage (or
    finishes) ``gap`` before the stage is free again. The heat grows by the request's time x
    ``heat_rate`` (never above 1). ``since`` (per clock, written in place) is when the stage's
    current busy period began (a request that finds the stage free starts one). A request is
    admitted when its finish plus ``tail`` x (its end at the last stage - that stage's ``since``)
    meets its deadline; a rejected one changes neither clocks, heat nor ``since``. Dispatch is
    :func:`run_flow_shop`'s (the shortest-queue policy counts a request until it leaves the last
    stage).
    """
    arrival, model, deadline = requests
    finish, group_out, _, busy, clocks = out
    tables = HostTables(*hosts)
    cold, heat_rate, cool_rate, gap, tail = warm
    host_group = tables.host_group
    host_lat_ptr = tables.host_lat_ptr
    host_ptr = tables.host_ptr
    lat = tables.lat
    first, count, last = _host_stages(tables)
    width = max(int(count.max()), 1) if count.shape[0] else 1
    old = np.empty(width, dtype=np.float64)
    old_heat = np.empty(width, dtype=np.float64)
    old_since = np.empty(width, dtype=np.float64)
    n = arrival.shape[0]
    queues = _group_queues(n if policy == SHORTEST_QUEUE else 0, tables.stage_ptr.shape[0] - 1)
    successor, head, queue_tail, length, done = queues
    accepted = 0
    for i in range(n):
        m = model[i]
        h = -1
        if policy == EARLIEST:
            best_key = np.inf
            for k in range(host_ptr[m], host_ptr[m + 1]):
                if clocks[last[k]] < best_key:
                    best_key = clocks[last[k]]
                    h = k
        else:
            h = _pick_host(tables, clocks, queues, m, arrival[i], policy)
        finish[i] = -1.0
        group_out[i] = -1
        if h < 0:
            continue
        g = host_group[h]
        s0 = first[h]
        off = host_lat_ptr[h]
        t = arrival[i]
        spent = busy[g]
        for s in range(count[h]):
            c = clocks[s0 + s]
            old[s] = c
            old_heat[s] = heat[s0 + s]
            old_since[s] = since[s0 + s]
            warmth = heat[s0 + s]
            if c < t:
                warmth = max(0.0, warmth - (t - c) * cool_rate[off + s])
                since[s0 + s] = t
            else:
                t = c
            d = cold[off + s] + (lat[off + s] - cold[off + s]) * warmth
            clocks[s0 + s] = t + d
            t += d - gap[off + s]
            heat[s0 + s] = min(1.0, warmth + (d - gap[off + s]) * heat_rate[off + s])
            spent += d
        final = s0 + count[h] - 1
        if t + overhead + tail[off + count[h] - 1] * (t - since[final]) <= deadline[i]:
            busy[g] = spent
            accepted += 1
            finish[i] = t + overhead
            group_out[i] = g
            if policy == SHORTEST_QUEUE:  # request i joins group g's queue
                done[i] = t
                if queue_tail[g] >= 0 and head[g] >= 0:
                    successor[queue_tail[g]] = i
                else:
                    head[g] = i
                queue_tail[g] = i
                length[g] += 1
        else:
            for s in range(count[h]):
                clocks[s0 + s] = old[s]
                heat[s0 + s] = old_heat[s]
                since[s0 + s] = old_since[s]
    return accepted


# --- batching -----------------------------------------------------------------------------------


class ModelQueues(NamedTuple):
    """Per-model FIFO queues: model ``m``'s queued requests are ``order[head[m]:tail[m]]``, in
    arrival order (``order`` lists the requests model by model; ``tail`` grows as they arrive)."""

    order: np.ndarray
    head: np.ndarray
    tail: np.ndarray


@njit(cache=True, inline="always")
def _model_queues(model: np.ndarray, n_models: int) -> ModelQueues:
    """Empty queues, each starting where its model's requests start in ``order``."""
    order = np.argsort(model, kind="mergesort")
    first = np.zeros(n_models + 1, dtype=np.int64)
    for i in range(model.shape[0]):
        first[model[i] + 1] += 1
    for m in range(n_models):
        first[m + 1] += first[m]
    return ModelQueues(order, first[:-1].copy(), first[:-1].copy())


@njit(cache=True)
def _earliest_start(hosts: HostTables, queues: ModelQueues, arrival: np.ndarray,
                    clocks: np.ndarray) -> tuple[int, float]:
    """(group, time) of the group that can start a batch first: its first stage is free and the
    oldest queued request of one of its models has arrived; (-1, inf) when nothing is queued.

    Not inlined: this scan is most of the batching kernel's time, and compiled on its own it
    runs about 5% faster than inlined into the kernel's loop (measured)."""
    stage_ptr = hosts.stage_ptr
    group_host_ptr = hosts.group_host_ptr
    group_hosts = hosts.group_hosts
    host_model = hosts.host_model
    order = queues.order
    head = queues.head
    tail = queues.tail
    best_g = -1
    best_start = np.inf
    for g in range(stage_ptr.shape[0] - 1):
        oldest = np.inf
        for k in range(group_host_ptr[g], group_host_ptr[g + 1]):
            m = host_model[group_hosts[k]]
            if head[m] < tail[m]:
                a = arrival[order[head[m]]]
                if a < oldest:
                    oldest = a
        if oldest == np.inf:
            continue
        start = clocks[stage_ptr[g]]
        if oldest > start:
            start = oldest
        if start < best_start:
            best_start = start
            best_g = g
    return best_g, best_start


@njit(cache=True, inline="always")
def _oldest_head_host(hosts: HostTables, queues: ModelQueues, arrival: np.ndarray, g: int, start: float) -> int:
    """Group ``g``'s host whose model's head request is oldest among those arrived by ``start``
    (the lower request on ties)."""
    group_hosts = hosts.group_hosts
    host_model = hosts.host_model
    order = queues.order
    head = queues.head
    tail = queues.tail
    pick = -1
    pick_arrival = np.inf
    pick_req = arrival.shape[0]
    for k in range(hosts.group_host_ptr[g], hosts.group_host_ptr[g + 1]):
        h = group_hosts[k]
        m = host_model[h]
        if head[m] < tail[m]:
            r = order[head[m]]
            a = arrival[r]
            if a <= start and (a < pick_arrival or (a == pick_arrival and r < pick_req)):
                pick = h
                pick_arrival = a
                pick_req = r
    return pick


@njit(cache=True, inline="always")
def _late_heads(requests: tuple, queues: ModelQueues, m: int, start: float, alone_end: float) -> int:
    """How many of model ``m``'s head requests, arrived by ``start``, would miss their deadline
    even alone in a batch finishing at ``alone_end``."""
    arrival, _, deadline = requests
    order = queues.order
    first = queues.head[m]
    tail = queues.tail[m]
    late = 0
    # ``not a > b`` rather than ``a <= b`` here and in _largest_batch: the tests the loops stop
    # on (``a > b``) decide NaN too
    while (first + late < tail and not arrival[order[first + late]] > start
           and not alone_end <= deadline[order[first + late]]):
        late += 1
    return late


@njit(cache=True, inline="always")
def _arrived_heads(arrival: np.ndarray, queues: ModelQueues, m: int, start: float) -> int:
    """How many of model ``m``'s queued requests have arrived by ``start``."""
    order = queues.order
    first = queues.head[m]
    tail = queues.tail[m]
    arrived = 0
    while first + arrived < tail and arrival[order[first + arrived]] <= start:
        arrived += 1
    return arrived


@njit(cache=True, inline="always")
def _largest_batch(hosts: HostTables, clocks: np.ndarray, h: int, start: float, overhead: float, available: int,
                   head_deadline: float) -> int:
    """Index into ``batch_sizes`` of the largest batch host ``h`` can start at ``start``: of at
    most ``available`` requests, profiled, and finishing by ``head_deadline`` (as are all the
    smaller batch sizes: the first that is not ends the search)."""
    batch_sizes = hosts.batch_sizes
    lat = hosts.lat
    g = hosts.host_group[h]
    n_stages = hosts.stage_ptr[g + 1] - hosts.stage_ptr[g]
    off = hosts.host_lat_ptr[h]
    b = 1
    while (b < batch_sizes.shape[0] and batch_sizes[b] <= available and lat[off + b * n_stages] != np.inf
           and not _batch_end(hosts, clocks, g, off + b * n_stages, start) + overhead > head_deadline):
        b += 1
    return b - 1


@njit(cache=True)
def _serve_batches(requests: tuple, hosts: HostTables, queues: ModelQueues, out: tuple, overhead: float) -> int:
    """The batching kernel's loop (see :func:`run_batched`); returns the number of accepted requests."""
    arrival, model, deadline = requests
    finish, group_out, batch_out, busy, clocks = out
    host_ptr = hosts.host_ptr
    order, head, tail = queues
    n = arrival.shape[0]
    arrived = 0
    accepted = 0
    while True:
        g, start = _earliest_start(hosts, queues, arrival, clocks)
        if arrived < n and (g < 0 or arrival[arrived] <= start):
            m = model[arrived]
            if host_ptr[m] == host_ptr[m + 1]:
                finish[arrived] = -1.0
                group_out[arrived] = -1
                head[m] += 1  # keep the queue contiguous: an unhosted model's requests are skipped
            tail[m] += 1
            arrived += 1
            continue
        if g < 0:
            return accepted
        h = _oldest_head_host(hosts, queues, arrival, g, start)
        m = hosts.host_model[h]
        late = _late_heads(requests, queues, m, start,
                           _batch_end(hosts, clocks, g, hosts.host_lat_ptr[h], start) + overhead)
        for j in range(late):
            finish[order[head[m] + j]] = -1.0
            group_out[order[head[m] + j]] = -1
        head[m] += late
        if head[m] >= tail[m] or arrival[order[head[m]]] > start:
            continue
        available = _arrived_heads(arrival, queues, m, start)
        b = _largest_batch(hosts, clocks, h, start, overhead, available, deadline[order[head[m]]])
        size = hosts.batch_sizes[b]
        n_stages = hosts.stage_ptr[g + 1] - hosts.stage_ptr[g]
        end = _occupy(hosts, clocks, busy, g, hosts.host_lat_ptr[h] + b * n_stages, start)
        for j in range(size):
            finish[order[head[m] + j]] = end + overhead
            group_out[order[head[m] + j]] = g
            batch_out[order[head[m] + j]] = size
        head[m] += size
        accepted += size


@njit(cache=True)
def run_batched(requests: tuple, hosts: tuple, out: tuple, overhead: float, n_models: int) -> int:
    """Batching variant: per-model FIFO queues served by whichever group can start first.

    Repeatedly, the group that can start earliest (its first stage free and a queued
    request of one of its models arrived) takes the model whose head request is oldest,
    drops heads that cannot meet their deadline even alone, and grows the batch through
    ``batch_sizes`` while the head's deadline still holds and enough requests have arrived.
    A request joins its model's queue before any batch that starts at or after its arrival;
    a request of a model no group hosts is rejected then. ``batch[i]`` records the size of
    the batch request ``i`` ran in. Returns the number of accepted requests.
    """
    queues = _model_queues(requests[1], n_models)
    return _serve_batches(requests, HostTables(*hosts), queues, out, overhead)
