"""Plain-Python reference implementation of the flow-shop simulator (the test oracle).

It restates the semantics of :mod:`placement_opt.simulate.kernels` (AlpaServe, see
docs/concepts.md) with Python lists, dicts and deques instead of flat arrays, reading the
stage latencies straight from the instance's profiles rather than from the kernel tables,
so that ``build_tables`` is checked too. It performs the same floating-point operations in
the same order as the kernels, so results must agree bit for bit.

Outputs of both functions: ``finish`` (per request, -1.0 when rejected or dropped),
``group`` (per request, -1 when not served), ``batch`` (size of the batch a request ran
in, 1 when not served), ``busy`` (per group, busy seconds summed over its stages) and
``clocks`` (per group, the list of stage clocks at the end).
"""

from __future__ import annotations

from collections import deque


def host_latencies(instance, groups, config, batch_sizes):
    """``hosts[m]``: the groups serving model ``m`` in group order, each as
    ``(group index, {batch size: [stage latencies]})``; a batch size the profile lacks is absent."""
    index = {name: i for i, name in enumerate(instance.model_names)}
    hosts = [[] for _ in instance.models]
    for g, grp in enumerate(groups):
        for name in grp.models:
            m = index[name]
            cfg = instance.model_profiles[m].config(grp.pp, grp.tp)
            factor = 1.0 + config.stage_overhead_factor * grp.pp
            by_batch = {}
            for b in batch_sizes:
                if b in cfg.batch_sizes:
                    row = cfg.stage_latency[cfg.batch_sizes.index(b)]
                    by_batch[b] = [float(x) * factor for x in row]
            hosts[m].append((g, by_batch))
    return hosts


def _stage_times(start, clocks, lats):
    """Stage end times of a job that is ready at ``start`` on stages with ``clocks``."""
    t = start
    ends = []
    for c, lat in zip(clocks, lats):
        t = max(t, c) + lat
        ends.append(t)
    return ends


def _initial_clocks(n_stages, clocks):
    return [[0.0] * s for s in n_stages] if clocks is None else [list(map(float, c)) for c in clocks]


def oracle_flow_shop(arrival, model, deadline, hosts, n_stages, overhead, policy, clocks=None):
    """One request at a time with admission control; ``policy`` is "earliest" or "shortest_queue".
    ``clocks`` optionally gives every group's initial stage clocks (default: all 0)."""
    n = len(arrival)
    n_groups = len(n_stages)
    clocks = _initial_clocks(n_stages, clocks)
    completions = [[] for _ in range(n_groups)]  # last-stage end of every accepted request
    busy = [0.0] * n_groups
    finish, group, batch = [-1.0] * n, [-1] * n, [1] * n
    for i in range(n):
        t0 = float(arrival[i])
        candidates = hosts[int(model[i])]
        if not candidates:
            continue
        if policy == "earliest":
            key = lambda c: clocks[c[0]][-1]  # noqa: E731
        else:
            key = lambda c: (sum(1 for d in completions[c[0]] if d > t0), clocks[c[0]][-1])  # noqa: E731
        g, by_batch = min(candidates, key=key)  # min keeps the first of equal keys
        lats = by_batch.get(1, [float("inf")] * n_stages[g])
        ends = _stage_times(t0, clocks[g], lats)
        end = ends[-1] + overhead
        if not end <= deadline[i]:
            continue
        clocks[g] = ends
        for lat in lats:
            busy[g] += lat
        completions[g].append(ends[-1])
        finish[i], group[i] = end, g
    return finish, group, batch, busy, clocks


def oracle_batched(arrival, model, deadline, hosts, n_stages, overhead, batch_sizes, clocks=None):
    """Per-model FIFO queues; the group that can start first serves the oldest head's model.

    Requests join their model's queue once no group can start before they arrive. A head that
    cannot finish by its deadline even alone is dropped; the batch then grows through
    ``batch_sizes`` while enough requests have arrived, the size is profiled, and the head's
    deadline still holds.
    """
    n = len(arrival)
    n_groups = len(n_stages)
    clocks = _initial_clocks(n_stages, clocks)
    busy = [0.0] * n_groups
    finish, group, batch = [-1.0] * n, [-1] * n, [1] * n
    lat_of = {}  # (model, group) -> {batch size: stage latencies}
    models_of = [[] for _ in range(n_groups)]
    for m, hs in enumerate(hosts):
        for g, by_batch in hs:
            lat_of[(m, g)] = by_batch
            models_of[g].append(m)
    queues = [deque() for _ in hosts]
    pending = 0
    while True:
        best_g, best_start = -1, float("inf")
        for g in range(n_groups):
            heads = [arrival[queues[m][0]] for m in models_of[g] if queues[m]]
            if not heads:
                continue
            start = max(clocks[g][0], min(heads))
            if start < best_start:
                best_g, best_start = g, start
        if pending < n and (best_g < 0 or arrival[pending] <= best_start):
            m = int(model[pending])
            if hosts[m]:
                queues[m].append(pending)
            pending += 1
            continue
        if best_g < 0:
            break
        g, start = best_g, best_start
        arrived = [(arrival[queues[m][0]], queues[m][0], m) for m in models_of[g]
                   if queues[m] and arrival[queues[m][0]] <= start]
        _, _, m = min(arrived)
        q = queues[m]
        lats = lat_of[(m, g)]
        alone = lats.get(1, [float("inf")] * n_stages[g])
        alone_finish = _stage_times(start, clocks[g], alone)[-1] + overhead
        while q and arrival[q[0]] <= start and not alone_finish <= deadline[q[0]]:
            q.popleft()  # dropped: finish stays -1
        if not q or arrival[q[0]] > start:
            continue
        head = q[0]
        available = sum(1 for r in q if arrival[r] <= start)
        size = 1
        for b in batch_sizes[1:]:
            if b > available or b not in lats:
                break
            if _stage_times(start, clocks[g], lats[b])[-1] + overhead > deadline[head]:
                break
            size = b
        ends = _stage_times(start, clocks[g], lats.get(size, alone))
        clocks[g] = ends
        for lat in lats.get(size, alone):
            busy[g] += lat
        for _ in range(size):
            r = q.popleft()
            finish[r], group[r], batch[r] = ends[-1] + overhead, g, size
    return finish, group, batch, busy, clocks


def oracle_simulate(instance, groups, requests, config, clocks=None):
    """Run the oracle selected by ``config`` (the counterpart of ``flowshop.run_tables``);
    ``clocks`` optionally gives every group's initial stage clocks."""
    from placement_opt.simulate.tables import batch_size_grid
    if config.batching:
        sizes = [int(b) for b in batch_size_grid(instance.model_profiles, config.max_batch)]
    else:
        sizes = [1]
    hosts = host_latencies(instance, groups, config, sizes)
    n_stages = [grp.pp for grp in groups]
    arrival = [float(x) for x in requests.arrival]
    model = [int(x) for x in requests.model]
    deadline = [float(x) for x in requests.deadline]
    if config.batching:
        return oracle_batched(arrival, model, deadline, hosts, n_stages, config.overhead_s, sizes, clocks)
    return oracle_flow_shop(arrival, model, deadline, hosts, n_stages, config.overhead_s, config.dispatch, clocks)
