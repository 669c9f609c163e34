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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional, Sequence

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.placement import Group
from placement_opt.settings import SimulatorConfig
from placement_opt.simulate.tables import build_tables, warm_tables


@dataclass(frozen=True)
class Decision:
    """Where a request goes (``group`` -1: rejected) and when it is predicted to leave each stage."""

    group: int
    stage_ends: tuple
    finish: float

    @property
    def admitted(self) -> bool:
        return self.group >= 0


class Dispatcher:
    """Per-group per-stage predicted clocks with the simulator's dispatch policy and admission."""

    def __init__(self, instance: Instance, groups: Sequence[Group], config: Optional[SimulatorConfig] = None):
        self.config = config or instance.simulator
        if self.config.batching:
            raise InputError("the executor dispatches one request at a time; set batching to false",
                             "simulator.batching")
        self.tables = build_tables(instance, groups, self.config)
        self.clocks = np.zeros(int(self.tables.stage_ptr[-1]))
        self.warm = warm_tables(instance, groups, self.tables, self.config)
        self.heat = np.zeros(len(self.clocks))  # per stage, 0..1 (stays 0 without warm-up terms)
        self.since = np.zeros(len(self.clocks))  # per stage, when its current busy period began
        # predicted finish of every admitted unfinished request, per group (shortest_queue)
        self._queues: List[Deque[float]] = [deque() for _ in range(self.tables.n_groups)]

    def _queue_length(self, g: int, now: float) -> int:
        q = self._queues[g]
        while q and q[0] <= now:
            q.popleft()
        return len(q)

    def decide(self, model: int, arrival: float, deadline: float) -> Decision:
        """Dispatch one request (requests must come in arrival order)."""
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
        return self._admit(best, arrival, deadline)

    def place(self, group: int, model: int, arrival: float) -> Decision:
        """Serve a request on ``group`` whatever its deadline (replaying what a run did, e.g. for
        calibration); the clocks move as for an admitted request."""
        t = self.tables
        hosts = [h for h in range(t.host_ptr[model], t.host_ptr[model + 1]) if t.host_group[h] == group]
        if not hosts:
            raise ValueError(f"group {group} does not host model {model}")
        return self._admit(hosts[0], arrival, np.inf)

    def _admit(self, host: int, arrival: float, deadline: float) -> Decision:
        """Admit a request on ``host`` when its predicted finish (plus the tail margin) meets the
        deadline, moving the clocks, heat and busy periods of its group's stages."""
        t = self.tables
        g = int(t.host_group[host])
        s0, ns, base = int(t.stage_ptr[g]), int(t.stage_ptr[g + 1] - t.stage_ptr[g]), int(t.host_lat_ptr[host])
        ends, clocks, heats = self._stage_ends(arrival, s0, ns, base)
        since = [ready if self.clocks[s0 + s] < ready else self.since[s0 + s]
                 for s, ready in enumerate([arrival] + ends[:-1])]
        now = ends[-1]
        finish = now + self.config.overhead_s
        margin = 0.0 if self.warm is None else self.warm.tail[base + ns - 1] * (now - since[-1])
        if finish + margin > deadline:
            return Decision(-1, (), -1.0)
        self.clocks[s0:s0 + ns] = clocks
        self.heat[s0:s0 + ns] = heats
        self.since[s0:s0 + ns] = since
        if self.config.dispatch == "shortest_queue":
            self._queues[g].append(now)
        return Decision(g, tuple(ends), finish)

    def _stage_ends(self, ready: float, s0: int, n_stages: int, base: int
                    ) -> tuple[list[float], list[float], list[float]]:
        """For a request ready at ``ready`` on the group whose first clock is ``s0`` (latencies
        from ``lat[base:]``): when it would leave each stage, when each stage would be free again
        (a gap later with the fitted terms) and every stage's heat after it."""
        t = self.tables
        ends: list[float] = []
        clocks: list[float] = []
        heats: list[float] = []
        now = ready
        for s in range(n_stages):
            clock = self.clocks[s0 + s]
            if self.warm is None:
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
            d = cold + (t.lat[base + s] - cold) * warmth
            clocks.append(now + d)
            now += d - gap
            ends.append(now)
            heats.append(min(1.0, warmth + (d - gap) * heat_rate))
        return ends, clocks, heats
