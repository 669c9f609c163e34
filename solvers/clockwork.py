"""``clockwork++``: selective replication re-solved for every time window of the workload.

Clockwork++ (AlpaServe's strongest replication baseline) re-places models every window
with zero swap cost: each window's placement is the selective-replication greedy run on
that window's requests only. The result is a time-varying :class:`Placement` whose
``windows`` the simulator replays one after another, carrying device clocks over.
Windows are independent, so they are solved in parallel on the chosen backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from placement_opt.instance import Instance
from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.placement import Group, Placement, Window
from placement_opt.validation import option

from placement_opt.solvers.backends import BACKENDS, Progress, make_backend, worker_context
from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.greedy import greedy_selection


@dataclass(frozen=True)
class ClockworkOptions:
    window_s: float = option(60.0, exclusive_minimum=0,
                             help="re-placement period in seconds (60 s as for the MAF1 trace)")
    beam: int = option(1, minimum=1, help="beam width of the greedy selection in each window")
    backend: str = option("local", choices=BACKENDS, help="where windows run: this process, a local process pool or Ray")
    address: str = option("", help='Ray cluster address (backend=ray); empty or "local" starts a private one')
    workers: int = option(0, minimum=0, help="worker processes; 0 = all cores")
    progress: bool = option(True, help="progress lines on stderr")


def solve_window(start: float, end: float, beam: int, seconds_left: Optional[float]
                 ) -> Tuple[List[Group], Dict[str, Any]]:
    """Selective replication on the requests arriving in [start, end) (runs in a worker)."""
    instance: Instance = worker_context()["instance"]
    req = instance.requests()
    sub = req.select((req.arrival >= start) & (req.arrival < end))
    shells = [((d,), 1, 1) for d in range(instance.cluster.n_gpus)]
    deadline = None if seconds_left is None else time.perf_counter() + max(seconds_left, 0.0)
    groups, stats = greedy_selection(instance, shells, beam=beam, evaluator=PlacementEvaluator(instance, sub),
                                     deadline=deadline)
    return groups, stats


@register
class ClockworkPlusPlus(Solver):
    """Per-window selective replication with free model swaps (a time-varying placement)."""

    name = "clockwork++"
    summary = "selective replication re-solved per time window, zero swap cost (baseline)"
    Options = ClockworkOptions

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        o = self.options
        duration = instance.requests().duration_s
        starts = list(np.arange(0.0, duration, o.window_s)) or [0.0]
        bounds = [(float(s), float(s + o.window_s) if k + 1 < len(starts) else np.inf) for k, s in enumerate(starts)]
        start = time.perf_counter()
        deadline = None if time_limit is None else start + time_limit
        progress = Progress(self.name, instance, enabled=o.progress, total=len(bounds), unit="windows")
        backend = make_backend(o.backend, {"instance": instance}, o.workers, o.address)
        results: List[Optional[Tuple[List[Group], Dict[str, Any]]]] = [None] * len(bounds)
        evaluated = 0
        interrupted = False
        try:
            handles = []
            for a, b in bounds:  # the serial backend solves at submit: recompute the time left each time
                handles.append(backend.submit(solve_window, a, b, o.beam,
                                              None if deadline is None else deadline - time.perf_counter()))
            pending = list(handles)
            while pending:
                for h in backend.wait_any(pending, timeout=0.5):
                    pending.remove(h)
                    window_groups, window_stats = backend.result(h)
                    results[handles.index(h)] = (window_groups, window_stats)
                    evaluated += window_stats["candidates_evaluated"]
                progress.update(sum(r is not None for r in results), lambda: _placement(instance, bounds, results),
                                f"candidates {evaluated}")
        except KeyboardInterrupt:  # windows not solved yet keep the previous window's placement
            interrupted = True
        finally:
            backend.close()
        placement = _placement(instance, bounds, results)
        stats = {"windows": len(placement.windows), "window_s": o.window_s, "candidates_evaluated": evaluated,
                 "timed_out": any(r is not None and r[1]["timed_out"] for r in results), "interrupted": interrupted,
                 "seconds": round(time.perf_counter() - start, 4)}
        placement = placement.with_provenance(search=stats)
        progress.done(len(bounds), lambda: placement, f"candidates {evaluated}")
        return placement


def _placement(instance: Instance, bounds: List[Tuple[float, float]],
               results: List[Optional[Tuple[List[Group], Dict[str, Any]]]]) -> Placement:
    """The windows solved so far as a placement: a window not solved (yet) keeps the previous
    window's groups; with none solved before it, every GPU is an empty group."""
    windows: List[Window] = []
    for (a, _), res in zip(bounds, results):
        groups = res[0] if res is not None else windows[-1].groups if windows else ()
        windows.append(Window(start_s=a, groups=tuple(groups)))
    if not windows[0].groups:
        windows[0] = Window(start_s=0.0, groups=tuple(Group(devices=(d,)) for d in range(instance.cluster.n_gpus)))
    return Placement(groups=windows[0].groups, windows=tuple(windows))
