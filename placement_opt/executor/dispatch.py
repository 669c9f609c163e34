"""The controller's admission and dispatch rule: the flow-shop simulator's, one request at a time.

:class:`Dispatcher` keeps the predicted free time of every stage of every group (the
simulator's ``clocks``), predicted with the same profile latencies (the tables of
:func:`placement_opt.simulate.build_tables`, overhead factor included). For each request,
in arrival order, it picks a hosting group by the instance's policy (``earliest`` last-stage
clock, or ``shortest_queue`` of admitted unfinished requests) and admits the request only
when its predicted finish meets the deadline, exactly as
:func:`placement_opt.simulate.kernels.run_flow_shop` does. So the executor admits the same
requests the simulator does, and the measured run shows whether they really met their SLO.
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
from placement_opt.simulate.tables import build_tables


@dataclass(frozen=True)
class Decision:
    """Where a request goes (``group`` -1: rejected) and the predicted stage end times."""

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
        g = int(t.host_group[best])
        s0, ns, base = int(t.stage_ptr[g]), int(t.stage_ptr[g + 1] - t.stage_ptr[g]), int(t.host_lat_ptr[best])
        ends = []
        now = arrival
        for s in range(ns):
            now = max(now, self.clocks[s0 + s]) + t.lat[base + s]
            ends.append(now)
        finish = now + self.config.overhead_s
        if finish > deadline:
            return Decision(-1, (), -1.0)
        self.clocks[s0:s0 + ns] = ends
        if self.config.dispatch == "shortest_queue":
            self._queues[g].append(now)
        return Decision(g, tuple(ends), finish)
