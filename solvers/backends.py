"""Execution backends for independent search branches, and progress reporting.

A backend runs *tasks*: calls of a module-level function on picklable arguments, in a
context (the instance) that every worker receives once. ``serial`` runs them in this
process, ``local`` in a process pool over the machine's cores, ``ray`` on an existing Ray
cluster (``address``; ``"local"`` starts a private one). All three call the same function
on the same arguments, so they return the same answers; the search decides what to run
next from results in task order, never from completion order.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Callable, Dict, List, Optional

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.progress import ProgressBar
from placement_opt.solvers.base import reported_metrics

BACKENDS = ("serial", "local", "ray")

_CONTEXT: Dict[str, Any] = {}

#: builds the placement a solver would return if stopped now (None: it has none yet)
BestPlacement = Callable[[], Optional[Placement]]


def worker_context() -> Dict[str, Any]:
    """The context installed in this process (instance and per-worker caches)."""
    return _CONTEXT


def _install(context: Dict[str, Any]) -> None:
    _CONTEXT.clear()
    _CONTEXT.update(context)


def _pool_init(context: Dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited by fork
    _install(context)


class Progress:
    """A solver's progress bar on stderr: its work done (of the total, when known) and the SLO
    attainment of the placement it would return if stopped now.

    The solver passes that placement itself (``best``: a function building it, called only
    when a line is due), and it is scored here by :func:`~placement_opt.solvers.base.reported_metrics`,
    the function ``run_solver`` reports the final placement with: the best value shown is the
    value that would be saved. A solver's own estimates (bucket sums, windows simulated
    apart, candidates not yet kept) are never shown as the best.
    """

    def __init__(self, label: str, instance: Instance, enabled: bool = True, total: Optional[int] = None,
                 unit: str = "candidates") -> None:
        self.instance = instance
        self.bar = ProgressBar(label, total=total, unit=unit, enabled=enabled)
        self.best_key: Any = None
        self.best_score: Optional[float] = None

    def due(self) -> bool:
        """Whether the next :meth:`update` would print (lets callers skip computing its numbers)."""
        return self.bar.due()

    def update(self, done: int, best: Optional[BestPlacement] = None, extra: str = "",
               total: Optional[int] = None) -> None:
        """``done`` units of work (of ``total``); ``best`` builds the placement a stop now returns."""
        if not self.bar.due():
            self.bar.update(done, total)
            return
        self.bar.update(done, total, self._postfix(best, extra))

    def done(self, done: int, best: Optional[BestPlacement] = None, extra: str = "") -> None:
        """The final line: the work done and the score of the placement returned."""
        if self.bar.enabled:
            self.bar.close(self._postfix(best, f"{extra} done".strip()), done)

    def _postfix(self, best: Optional[BestPlacement], extra: str) -> str:
        score = self._score(best)
        head = "" if score is None else f"best {score:.4f}"
        return " ".join(x for x in (head, extra) if x)

    def _score(self, best: Optional[BestPlacement]) -> Optional[float]:
        """SLO attainment of ``best()`` as reported, re-simulated only when the placement changed."""
        placement = best() if best is not None else None
        if placement is None:
            return None
        key = (placement.groups, placement.windows, placement.scheduling)
        if key != self.best_key:
            self.best_key = key
            self.best_score = float(reported_metrics(self.instance, placement)["slo_attainment"])
        return self.best_score


class _Done:
    """A finished task of the serial backend."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Backend:
    """Submit tasks, wait for any to finish, cancel the rest."""

    workers = 1

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    def wait_any(self, handles: List[Any], timeout: Optional[float] = None) -> List[Any]:
        """Handles (of ``handles``) that have finished; waits up to ``timeout`` for at least one."""
        raise NotImplementedError

    def result(self, handle: Any) -> Any:
        raise NotImplementedError

    def cancel(self, handles: List[Any]) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        """Stop at once (after Ctrl-C): running tasks' results are given up."""
        self.close()


class SerialBackend(Backend):
    def __init__(self, context: Dict[str, Any]) -> None:
        _install(context)

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Done:
        return _Done(fn(*args))

    def wait_any(self, handles: List[Any], timeout: Optional[float] = None) -> List[Any]:
        return list(handles)

    def result(self, handle: _Done) -> Any:
        return handle.value


class LocalBackend(Backend):
    """A process pool; every worker gets the context once, at start."""

    def __init__(self, context: Dict[str, Any], workers: int = 0) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_pool_init, initargs=(context,))

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        return self.pool.submit(fn, *args)

    def wait_any(self, handles: List[Future[Any]], timeout: Optional[float] = None) -> List[Future[Any]]:
        done, _ = wait(handles, timeout=timeout, return_when=FIRST_COMPLETED)
        return [h for h in handles if h in done]

    def result(self, handle: Future[Any]) -> Any:
        return handle.result()

    def cancel(self, handles: List[Future[Any]]) -> None:
        for h in handles:
            h.cancel()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Stop now: cancel queued tasks and end the workers without waiting for running ones
        (ProcessPoolExecutor has no public way to end busy workers before Python 3.14)."""
        processes = list(getattr(self.pool, "_processes", {}).values())
        manager = getattr(self.pool, "_executor_manager_thread", None)
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        if manager is not None:
            # let the pool's manager thread see its dead workers and end now: left running, it
            # raced the interpreter's exit hook (a "Bad file descriptor" traceback at exit)
            manager.join(timeout=10)


def _ray_call(context: Dict[str, Any], fn: Callable[..., Any], *args: Any) -> Any:
    if _CONTEXT.get("instance") is not context["instance"]:
        _install(context)
    return fn(*args)


class RayBackend(Backend):
    """Tasks on a Ray cluster: ``address`` of an existing one, or ``local`` for a private one."""

    def __init__(self, context: Dict[str, Any], address: str = "", workers: int = 0) -> None:
        try:
            import ray
        except ImportError:
            raise InputError("ray is not installed (pip install 'placeopt[ray]')", "solver.options.backend") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            if address and address != "local":
                try:
                    ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
                except Exception as e:  # ray raises ConnectionError, TimeoutError or RuntimeError here
                    raise InputError(f"cannot connect to the Ray cluster at {address}: {e}",
                                     "solver.options.address") from None
            else:
                ray.init(num_cpus=workers or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         ignore_reinit_error=True)
            self.started = True
        self.workers = int(ray.cluster_resources().get("CPU", 1))
        self.context_ref = ray.put(context)
        self.remote = ray.remote(_ray_call)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.remote.remote(self.context_ref, fn, *args)

    def wait_any(self, handles: List[Any], timeout: Optional[float] = None) -> List[Any]:
        done, _ = self.ray.wait(list(handles), num_returns=1, timeout=timeout)
        return [h for h in handles if h in done]

    def result(self, handle: Any) -> Any:
        return self.ray.get(handle)

    def cancel(self, handles: List[Any]) -> None:
        for h in handles:
            self.ray.cancel(h, force=True)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def capped_workers(workers: int) -> int:
    """``workers`` for a local pool, at most the machine's cores (more processes than cores
    only add memory and start-up time); a capped request is said on stderr."""
    cores = os.cpu_count() or 1
    if workers > cores:
        print(f"placeopt: workers={workers} capped at the machine's {cores} cores", file=sys.stderr, flush=True)
        return cores
    return workers


def make_backend(name: str, context: Dict[str, Any], workers: int = 0, address: str = "") -> Backend:
    if name not in BACKENDS:
        raise InputError(f"must be one of {', '.join(BACKENDS)}, got {name!r}", "solver.options.backend")
    if workers < 0:
        raise InputError(f"must be >= 0 (0: all cores), got {workers}", "solver.options.workers")
    workers = capped_workers(workers) if name == "local" else workers
    if name == "serial" or (name == "local" and (workers or os.cpu_count() or 1) == 1):
        return SerialBackend(context)
    if name == "local":
        return LocalBackend(context, workers)
    return RayBackend(context, address, workers)
