"""Simulate a DNN placement: build tables, run the kernel, handle time-varying placements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from placement_opt.instance import Instance
from placement_opt.placement import Group, Placement
from placement_opt.workload import Requests
from placement_opt.settings import SimulatorConfig
from placement_opt.simulate.kernels import EARLIEST, SHORTEST_QUEUE, WarmTables, run_batched, run_flow_shop, \
    run_flow_shop_warm
from placement_opt.simulate.metrics import serving_metrics
from placement_opt.simulate.tables import HostTables, build_tables, warm_tables


@dataclass(frozen=True, eq=False)
class FlowShopResult:
    """Per-request outcome: finish time (-1 rejected), group index (-1), batch size; group busy seconds."""

    finish: np.ndarray
    group: np.ndarray
    batch: np.ndarray
    busy: np.ndarray
    clocks: np.ndarray

    @property
    def accepted(self) -> int:
        """Requests accepted."""
        return int((self.finish >= 0).sum())


def run_tables(tables: HostTables, requests: Requests, n_models: int, config: SimulatorConfig,
               clocks: Optional[np.ndarray] = None, warm: Optional[WarmTables] = None) -> FlowShopResult:
    """Run the kernel selected by ``config`` on prebuilt tables (``clocks``: every stage's
    initial clock, all 0 by default; the result holds a copy, updated). With ``warm`` (the
    profile's fitted terms) the one-request kernel follows every stage's heat from cold, lets a
    request move on a gap before its stage is free and admits with the tail margin; the batching
    kernel always uses the back-to-back stage times."""
    n = len(requests)
    finish = np.empty(n, dtype=np.float64)
    group = np.empty(n, dtype=np.int64)
    batch = np.ones(n, dtype=np.int64)
    busy = np.zeros(tables.n_groups, dtype=np.float64)
    clocks = np.zeros(int(tables.stage_ptr[-1])) if clocks is None else clocks.astype(np.float64).copy()
    # the kernels take plain tuples (see placement_opt.simulate.kernels)
    request_arrays = (requests.arrival, requests.model, requests.deadline)
    out = (finish, group, batch, busy, clocks)
    if config.batching:
        run_batched(request_arrays, tuple(tables), out, config.overhead_s, n_models)
    else:
        policy = SHORTEST_QUEUE if config.dispatch == "shortest_queue" else EARLIEST
        if warm is None:
            run_flow_shop(request_arrays, tuple(tables), out, config.overhead_s, policy)
        else:
            heat, since = np.zeros(clocks.shape[0]), np.zeros(clocks.shape[0])
            run_flow_shop_warm(request_arrays, tuple(tables), tuple(warm), out, heat, since, config.overhead_s,
                               policy)
    return FlowShopResult(finish, group, batch, busy, clocks)


def run_groups(instance: Instance, groups: Sequence[Group], requests: Requests,
               config: Optional[SimulatorConfig] = None) -> FlowShopResult:
    """Simulate ``groups`` serving ``requests`` (with the instance's simulator settings by default)."""
    config = config or instance.simulator
    tables = build_tables(instance, groups, config)
    warm = warm_tables(instance, groups, tables, config)
    return run_tables(tables, requests, len(instance.models), config, warm=warm)


def _stage_devices(group: Group) -> list[tuple[int, ...]]:
    """The devices of each of the group's pipeline stages."""
    return [group.devices[s * group.tp:(s + 1) * group.tp] for s in range(group.pp)]


def run_windows(instance: Instance, placement: Placement, requests: Requests,
                config: Optional[SimulatorConfig] = None) -> tuple[np.ndarray, list]:
    """Replay a time-varying placement window by window.

    Requests arriving in a window use that window's groups. Device time carries over:
    a stage of a new window starts free no earlier than the latest clock of its devices
    in the previous window (swapping models is free, as Clockwork++ assumes).
    Returns per-request finish times and, per window, the busy seconds of its groups.
    """
    config = config or instance.simulator
    finish = np.full(len(requests), -1.0)
    device_free = np.zeros(instance.cluster.n_gpus)
    busy_rows = []
    starts = [w.start_s for w in placement.windows] + [np.inf]
    for k, window in enumerate(placement.windows):
        mask = (requests.arrival >= starts[k]) & (requests.arrival < starts[k + 1])
        if k == 0:
            mask |= requests.arrival < starts[0]
        sub = requests.select(mask)
        tables = build_tables(instance, window.groups, config)
        clocks = np.zeros(int(tables.stage_ptr[-1]))
        for g, grp in enumerate(window.groups):
            for s, devs in enumerate(_stage_devices(grp)):
                clocks[tables.stage_ptr[g] + s] = max(device_free[list(devs)].max(), 0.0)
        res = run_tables(tables, sub, len(instance.models), config, clocks,
                         warm_tables(instance, window.groups, tables, config))
        finish[mask] = res.finish
        for g, grp in enumerate(window.groups):
            for s, devs in enumerate(_stage_devices(grp)):
                device_free[list(devs)] = res.clocks[tables.stage_ptr[g] + s]
        busy_rows.append(res.busy)
    return finish, busy_rows


def _window_busy_fractions(placement: Placement, busy: list, duration_s: float) -> list:
    """Per window, every group's busy seconds / (stages x the window's length)."""
    starts = [w.start_s for w in placement.windows]
    ends = starts[1:] + [max(duration_s, starts[-1])]
    out = []
    for w, b, start, end in zip(placement.windows, busy, starts, ends):
        length = end - start
        out.append([float(x / (g.pp * length)) if length > 0 else 0.0 for x, g in zip(b, w.groups)])
    return out


def simulate_dnn(instance: Instance, placement: Placement, requests: Optional[Requests] = None) -> dict:
    """Metrics of a DNN placement on the instance's (or the given) requests."""
    requests = instance.requests() if requests is None else requests
    if placement.windows:
        finish, busy = run_windows(instance, placement, requests)
        metrics = serving_metrics(requests.arrival, requests.model, finish, instance.model_names,
                                  requests.duration_s)
        metrics["windows"] = len(placement.windows)
        metrics["window_group_busy_fraction"] = _window_busy_fractions(placement, busy, requests.duration_s)
        return metrics
    res = run_groups(instance, placement.groups, requests)
    return serving_metrics(requests.arrival, requests.model, res.finish, instance.model_names,
                           requests.duration_s, res.busy, [g.pp for g in placement.groups])
