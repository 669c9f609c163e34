"""``clockwork++``: selective replication re-solved for every time window of the workload.

Clockwork++ (AlpaServe's strongest replication baseline) re-places models every window
with zero swap cost: each window's placement is the selective-replication greedy run on
that window's requests only. The result is a time-varying :class:`Placement` whose
``windows`` the simulator replays one after another, carrying device clocks over.
Windows are independent, so they are solved in parallel on the chosen backend.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from placement_opt.instance import Instance
from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.placement import Group, Placement, Window
from placement_opt.validation import option

from placement_opt.limits import stop_requested
from placement_opt.solvers.backends import (BACKENDS, Backend, Progress, capped_workers, make_backend,
                                           worker_context)
from placement_opt.solvers.base import Solver, register
from placement_opt.solvers.greedy import greedy_selection


#: seconds past the deadline that windows' workers get to return their best so far before the
#: search gives up on them (their windows then count as unsolved)
WORKER_GRACE_S = 0.5


@dataclass(frozen=True)
class ClockworkOptions:
    window_s: float = option(60.0, exclusive_minimum=0,
                             help="re-placement period in seconds (60 s as for the MAF1 trace)")
    beam: int = option(1, minimum=1, help="beam width of the greedy selection in each window")
    backend: str = option("local", choices=BACKENDS, help="where windows run: this process, a local process pool or Ray")
    address: str = option("", help='Ray cluster address (backend=ray); empty or "local" starts a private one')
    workers: int = option(0, minimum=0, help="worker processes; 0 = all cores")
    progress: bool = option(True, help="progress lines on stderr")


def solve_window(start: float, end: float, beam: int, deadline_epoch: Optional[float]
                 ) -> Tuple[List[Group], Dict[str, Any]]:
    """Selective replication on the requests arriving in [start, end) (runs in a worker), until
    ``deadline_epoch`` (a ``time.time()`` value: a task may wait in the queue, and workers do not
    share ``perf_counter``'s origin)."""
    instance: Instance = worker_context()["instance"]
    req = instance.requests()
    sub = req.select((req.arrival >= start) & (req.arrival < end))
    shells = [((d,), 1, 1) for d in range(instance.cluster.n_gpus)]
    deadline = None if deadline_epoch is None else time.perf_counter() + max(deadline_epoch - time.time(), 0.0)
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
        deadline = None if time_limit is None else time.time() + time_limit
        progress = Progress(self.name, instance, enabled=o.progress, total=len(bounds), unit="windows")
        workers = min(capped_workers(o.workers) or os.cpu_count() or 1, len(bounds))  # no idle processes
        backend = make_backend(o.backend, {"instance": instance}, workers, o.address)
        results: List[Optional[Tuple[List[Group], Dict[str, Any]]]] = [None] * len(bounds)
        interrupted = gave_up = False
        try:
            handles = []
            for a, b in bounds:
                if stop_requested() is not None or (deadline is not None and time.time() >= deadline):
                    break  # (serial backend, which solves at submit) stopped: solve no more windows
                handles.append(backend.submit(solve_window, a, b, o.beam, deadline))
            gave_up = not _collect(backend, handles, results, progress,
                                   lambda: _placement_so_far(bounds, results), deadline)
        except KeyboardInterrupt:  # windows not solved yet take the nearest solved window's placement
            interrupted = True
        finally:
            backend.abort() if interrupted or gave_up or stop_requested() is not None else backend.close()
        windows = _fill_windows(bounds, results)
        evaluated = sum(r[1]["candidates_evaluated"] for r in results if r is not None)
        stats = {"windows": len(windows), "window_s": o.window_s, "candidates_evaluated": evaluated,
                 "timed_out": any(r is not None and r[1]["timed_out"] for r in results)
                 or (deadline is not None and time.time() >= deadline and None in results),
                 "interrupted": interrupted or any(r is not None and r[1]["interrupted"] for r in results),
                 "seconds": round(time.perf_counter() - start, 4)}
        placement = Placement(groups=windows[0].groups, windows=tuple(windows), provenance={"search": stats})
        progress.done(len(bounds), lambda: placement, f"candidates {evaluated}")
        return placement


def _collect(backend: Backend, handles: List[Any], results: List[Optional[Tuple[List[Group], Dict[str, Any]]]],
             progress: Progress, so_far: Callable[[], Placement], deadline_epoch: Optional[float]) -> bool:
    """Wait for the windows' tasks, storing each result at its window's index as it finishes;
    the progress bar scores ``so_far()``, the placement a stop now would save. Gives up on the
    tasks still running :data:`WORKER_GRACE_S` after ``deadline_epoch`` (a ``time.time()``
    value; a worker may be deep in a long round of its search) and returns False if it did."""
    pending = list(handles)
    while pending:
        if deadline_epoch is not None and time.time() > deadline_epoch + WORKER_GRACE_S:
            return False
        for h in backend.wait_any(pending, timeout=0.5):
            pending.remove(h)
            groups, stats = backend.result(h)
            if any(g.models for g in groups) or not (stats["timed_out"] or stats["interrupted"]):
                results[handles.index(h)] = (groups, stats)  # a window stopped before placing anything: unsolved
        solved = [r for r in results if r is not None]
        progress.update(len(solved), so_far, f"candidates {sum(r[1]['candidates_evaluated'] for r in solved)}")
    return True


def _fill_windows(bounds: List[Tuple[float, float]],
                  results: List[Optional[Tuple[List[Group], Dict[str, Any]]]]) -> List[Window]:
    """The placement's windows: solved ones keep their groups; a window not solved (the search
    was stopped) takes the groups of the nearest solved window before it, else after it. With no
    window solved every window is empty (the caller reports that nothing was found)."""
    solved = [k for k, r in enumerate(results) if r is not None]
    windows = []
    for k, (a, _) in enumerate(bounds):
        before = [j for j in solved if j <= k]
        source = before[-1] if before else solved[0] if solved else None
        groups = () if source is None else tuple(results[source][0])  # type: ignore[index]
        windows.append(Window(start_s=a, groups=groups))
    return windows


def _placement_so_far(bounds: List[Tuple[float, float]],
                      results: List[Optional[Tuple[List[Group], Dict[str, Any]]]]) -> Placement:
    """What a stop now would save, for the progress bar to score: the filled windows, or, with
    none solved yet, one empty group (attainment 0; not one per GPU, whose simulation alone
    takes seconds on a large cluster)."""
    windows = _fill_windows(bounds, results)
    if not windows[0].groups:
        idle = (Group(devices=(0,)),)
        windows = [Window(start_s=w.start_s, groups=idle) for w in windows]
    return Placement(groups=windows[0].groups, windows=tuple(windows))
