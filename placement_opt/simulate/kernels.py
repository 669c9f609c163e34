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
    outputs then partial) as soon as more than ``max_rejected`` are rejected (-1: no limit)."""
    if max_rejected < 0:
        max_rejected = requests[0].shape[0]
    empty_f = np.empty(0, dtype=np.float64)
    empty_i = np.empty(0, dtype=np.int64)
    out = (empty_f, empty_i, empty_i, busy, clocks)
    return _flow_shop_loop(requests, HostTables(*hosts), out, accepted_of, overhead, policy, False, max_rejected)


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
