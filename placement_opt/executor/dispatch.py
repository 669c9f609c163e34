"""The controller's admission and dispatch rule: the flow-shop simulator's, one request at a time.

:class:`Dispatcher` keeps the predicted free time of every stage of every group (the
simulator's ``clocks``), predicted with the same profile latencies (the tables of
:func:`placement_opt.simulate.build_tables`, overhead factor included). For each request,
in arrival order, it picks a hosting group by the instance's policy (``earliest`` last-stage
clock, or ``shortest_queue`` of admitted unfinished requests) and admits the request only
when its predicted finish meets the deadline, exactly as
:func:`placement_opt.simulate.kernels.run_flow_shop` does. So the executor admits the same
requests the simulator does, and the measured run shows whether they really met their SLO.
When the profile has fitted terms (warm-up: a stage serves faster after idle time; stage gaps:
host work that keeps a stage busy after the request left it), the predicted stage times follow
every stage's heat, and a request moves on a gap before its stage is free, as
:func:`placement_opt.simulate.kernels.run_flow_shop_warm` does.

By default the clocks run open loop, like the simulator's. With ``closed_loop`` the controller
also reports every measured stage end (:meth:`Dispatcher.observe`) and the dispatcher corrects
the group's clocks to at least what they imply: it replays the requests still queued on the
group from the measured ends (each unmeasured request shifted by how late its stage can start,
keeping its predicted durations) and raises every stage clock (and the ``shortest_queue``
finishes) to the replayed one when that is later. It never lowers a clock, so when every
measured end equals its prediction the decisions are exactly the open-loop ones; when the
stages run late (host time drifting above the profile in a queue that never drains), later
requests see the real backlog and those that would finish late are rejected. The replay is
incremental: every queued request keeps the stage free times replayed after it, so a report
replays from the reported request on (earlier ones cannot depend on it) and stops where a
request's replayed free times come out as before (later ones then do too), continuing only
with the requests admitted since the last report.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Sequence

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.placement import Group
from placement_opt.settings import SimulatorConfig
from placement_opt.simulate.tables import build_tables, warm_tables


@dataclass(frozen=True)
class Decision:
    """Where a request goes (``group`` -1: rejected), when it is predicted to leave each stage and
    finish, and the tail margin its finish carries (the fitted tail share of the last stage's busy
    period so far; 0 without one)."""

    group: int
    stage_ends: tuple
    finish: float
    margin: float = 0.0

    @property
    def admitted(self) -> bool:
        return self.group >= 0

    def late(self, deadline: float) -> bool:
        """The admission rule: whether the predicted finish plus the tail margin misses ``deadline``."""
        return self.finish + self.margin > deadline


ADMISSION_MODES = ("open-loop", "closed-loop")


@dataclass
class _Queued:
    """An admitted request whose stage ends are not all measured yet (closed loop only)."""

    request: int
    group: int
    arrival: float
    starts: List[float]  # predicted start on every stage
    ends: List[float]  # predicted end (when the request leaves the stage)
    frees: List[float]  # predicted free time of the stage after it (end plus the stage's gap)
    measured: List[Optional[float]]  # measured stage ends as they are reported
    finish: List[float]  # its entry of the shortest_queue queue (one mutable float), corrected in place
    index: int  # its place in its group's backlog, counted from the group's first admitted request
    after: List[float]  # the stage free times replayed after it (valid below the group's _replayed mark)


class Dispatcher:
    """Per-group per-stage predicted clocks with the simulator's dispatch policy and admission."""

    def __init__(self, instance: Instance, groups: Sequence[Group], config: Optional[SimulatorConfig] = None,
                 closed_loop: bool = False):
        self.config = config or instance.simulator
        if self.config.batching:
            raise InputError("the executor dispatches one request at a time; set batching to false",
                             "simulator.batching")
        self.tables = build_tables(instance, groups, self.config)
        self.clocks = np.zeros(int(self.tables.stage_ptr[-1]))
        self.warm = warm_tables(instance, groups, self.tables, self.config)
        self.heat = np.zeros(len(self.clocks))  # per stage, 0..1 (stays 0 without warm-up terms)
        self.since = np.zeros(len(self.clocks))  # per stage, when its current busy period began
        # predicted finish of every admitted unfinished request, per group (shortest_queue); each
        # a one-element list so that the closed loop can correct it in place
        self._queues: List[Deque[List[float]]] = [deque() for _ in range(self.tables.n_groups)]
        self.closed_loop = closed_loop
        self._backlog: List[Deque[_Queued]] = [deque() for _ in range(self.tables.n_groups)]
        self._replayed = [0] * self.tables.n_groups  # per group: backlog indices below it hold a valid ``after``
        self._admitted = [0] * self.tables.n_groups  # per group: closed-loop requests admitted so far
        self._queued: Dict[int, _Queued] = {}  # request -> its backlog entry
        self._floor = self.clocks.copy()  # per stage: measured free time after the requests that left the backlog
        self.corrections = 0  # observations that raised a clock
        self.correction_max_s = 0.0  # the largest raise

    def _queue_length(self, g: int, now: float) -> int:
        q = self._queues[g]
        while q and q[0][0] <= now:
            q.popleft()
        return len(q)

    def decide(self, model: int, arrival: float, deadline: float, request: int = -1) -> Decision:
        """Dispatch one request (requests must come in arrival order); ``request`` names it for
        :meth:`observe` (closed loop)."""
        t = self.tables
        best, best_key, best_clock = -1, np.inf, np.inf
        for h in range(t.host_ptr[model], t.host_ptr[model + 1]):
            g = int(t.host_group[h])
            last_clock = self.clocks[t.stage_ptr[g + 1] - 1]
            if self.config.dispatch == "earliest":
                if last_clock < best_key:
                    best_key, best = last_clock, h
            else:
                key = float(self._queue_length(g, arrival))
                if key < best_key or (key == best_key and last_clock < best_clock):
                    best_key, best_clock, best = key, last_clock, h
        if best < 0:
            return Decision(-1, (), -1.0)
        return self._admit(best, arrival, deadline, request)

    def place(self, group: int, model: int, arrival: float) -> Decision:
        """Serve a request on ``group`` whatever its deadline (replaying what a run did, e.g. for
        calibration); the clocks move as for an admitted request."""
        t = self.tables
        hosts = [h for h in range(t.host_ptr[model], t.host_ptr[model + 1]) if t.host_group[h] == group]
        if not hosts:
            raise ValueError(f"group {group} does not host model {model}")
        return self._admit(hosts[0], arrival, np.inf)

    def _admit(self, host: int, arrival: float, deadline: float, request: int = -1) -> Decision:
        """Admit a request on ``host`` when its predicted finish (plus the tail margin) meets the
        deadline, moving the clocks, heat and busy periods of its group's stages."""
        t = self.tables
        g = int(t.host_group[host])
        s0, ns, base = int(t.stage_ptr[g]), int(t.stage_ptr[g + 1] - t.stage_ptr[g]), int(t.host_lat_ptr[host])
        starts, ends, clocks, heats = self._stage_ends(arrival, s0, ns, base)
        since = [ready if self.clocks[s0 + s] < ready else self.since[s0 + s]
                 for s, ready in enumerate([arrival] + ends[:-1])]
        now = ends[-1]
        margin = 0.0 if self.warm is None else float(self.warm.tail[base + ns - 1] * (now - since[-1]))
        decision = Decision(g, tuple(ends), now + self.config.overhead_s, margin)
        if decision.late(deadline):
            return Decision(-1, (), -1.0)
        self.clocks[s0:s0 + ns] = clocks
        self.heat[s0:s0 + ns] = heats
        self.since[s0:s0 + ns] = since
        entry = [now]
        if self.config.dispatch == "shortest_queue":
            self._queues[g].append(entry)
        if self.closed_loop and request >= 0:
            queued = _Queued(request, g, arrival, starts, ends, clocks, [None] * ns, entry, self._admitted[g], [])
            self._admitted[g] += 1
            self._backlog[g].append(queued)
            self._queued[request] = queued
        return decision

    def observe(self, request: int, stage: int, end: float) -> None:
        """Closed loop: request ``request`` left ``stage`` at the measured time ``end`` (on the
        dispatcher's clock); raise its group's clocks to what the measured ends imply."""
        queued = self._queued.get(request)
        if queued is None or queued.measured[stage] is not None:
            return
        queued.measured[stage] = end
        g = queued.group
        s0, ns = int(self.tables.stage_ptr[g]), len(queued.ends)
        frees = self._replay(g, queued.index)
        raise_s = max(0.0, float(np.max(np.asarray(frees) - self.clocks[s0:s0 + ns])))
        if raise_s > 0.0:
            self.corrections += 1
            self.correction_max_s = max(self.correction_max_s, raise_s)
            np.maximum(self.clocks[s0:s0 + ns], frees, out=self.clocks[s0:s0 + ns])

    def _replay(self, g: int, changed: int) -> List[float]:
        """Every stage's free time after group ``g``'s backlog, replayed from the measured ends:
        a measured stage moves its request by (measured - predicted end); an unmeasured one starts
        when both the request and the stage are ready and keeps its predicted durations. Replays
        from backlog index ``changed`` (or the first request not replayed yet) on, skipping the
        run of requests whose inputs come out as before. Requests with every stage measured
        leave the backlog into the floor. Corrects the shortest_queue finishes in place (never
        earlier)."""
        backlog = self._backlog[g]
        head, replayed = backlog[0].index, self._replayed[g]
        k = min(changed, replayed) - head
        frees = backlog[k - 1].after if k > 0 else self._floor_of(g)
        while k < len(backlog):
            q = backlog[k]
            frees = self._replay_one(q, frees)
            unchanged = changed <= q.index < replayed - 1 and frees == q.after
            q.after = frees
            if unchanged:  # the requests up to the first not replayed yet come out as before
                k = replayed - head
                frees = backlog[k - 1].after
            else:
                k += 1
        self._replayed[g] = head + len(backlog)
        self._retire(g)
        return frees

    @staticmethod
    def _replay_one(q: _Queued, frees: List[float]) -> List[float]:
        """Replay one queued request after stage free times ``frees``: the free times after it
        (its shortest_queue finish raised to its replayed last end)."""
        out = list(frees)
        ready = q.arrival
        for s, (start, end, free) in enumerate(zip(q.starts, q.ends, q.frees)):
            m = q.measured[s]
            shift = m - end if m is not None else max(ready, out[s]) - start
            ready, out[s] = end + shift, free + shift
        q.finish[0] = max(q.finish[0], ready)
        return out

    def _floor_of(self, g: int) -> List[float]:
        """Group ``g``'s floor: its stages' measured free times after the requests that left."""
        s0 = int(self.tables.stage_ptr[g])
        return [float(x) for x in self._floor[s0:int(self.tables.stage_ptr[g + 1])]]

    def _retire(self, g: int) -> None:
        """Move the fully measured requests at the front of group ``g``'s backlog into its
        floor; when the floor then differs from what the next request was replayed after, its
        replay (and every later one) is due again."""
        backlog = self._backlog[g]
        s0 = int(self.tables.stage_ptr[g])
        left = None
        while backlog and all(m is not None for m in backlog[0].measured):
            left = backlog.popleft()
            del self._queued[left.request]
            self._floor[s0:s0 + len(left.ends)] = np.maximum(self._floor[s0:s0 + len(left.ends)],
                                                            self._frees_of(left))
        if left is not None and backlog and self._floor_of(g) != left.after:
            self._replayed[g] = backlog[0].index

    @staticmethod
    def _frees_of(q: _Queued) -> List[float]:
        """The stage free times of a fully measured request: each measured end plus its stage's gap."""
        return [free + (m - end) for m, end, free in zip(q.measured, q.ends, q.frees) if m is not None]

    def _stage_ends(self, ready: float, s0: int, n_stages: int, base: int
                    ) -> tuple[list[float], list[float], list[float], list[float]]:
        """For a request ready at ``ready`` on the group whose first clock is ``s0`` (latencies
        from ``lat[base:]``): when it would start and leave each stage, when each stage would be
        free again (a gap later with the fitted terms) and every stage's heat after it."""
        t = self.tables
        starts: list[float] = []
        ends: list[float] = []
        clocks: list[float] = []
        heats: list[float] = []
        now = ready
        for s in range(n_stages):
            clock = self.clocks[s0 + s]
            if self.warm is None:
                starts.append(max(now, clock))
                now = max(now, clock) + t.lat[base + s]
                ends.append(now)
                clocks.append(now)
                heats.append(0.0)
                continue
            cold, heat_rate, cool_rate, gap, _ = (a[base + s] for a in self.warm)
            warmth = self.heat[s0 + s]
            if clock < now:
                warmth = max(0.0, warmth - (now - clock) * cool_rate)
            else:
                now = clock
            starts.append(now)
            d = cold + (t.lat[base + s] - cold) * warmth
            clocks.append(now + d)
            now += d - gap
            ends.append(now)
            heats.append(min(1.0, warmth + (d - gap) * heat_rate))
        return starts, ends, clocks, heats
