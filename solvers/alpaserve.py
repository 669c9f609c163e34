"""``alpaserve``: AlpaServe Algorithm 2 -- enumerate buckets, partitions and configs around Algorithm 1.

The space (:mod:`placement_opt.spaces`): model bucketings (latency-separated), device
buckets per bucketing (pruned to load-balanced ones), equal-size group partitions plus a
remainder group per device bucket, and a shared parallel config per partition. Buckets hold
disjoint models, so a bucket's best placement on ``n`` devices does not depend on the other
buckets: it is searched once per distinct (bucket, n) pair and reused by every bucketing
and device split that contains it -- the paper's nested loops re-run it every time.

The search is faster than the paper's in four more ways:

1. **exact bounds before simulating**: a task's (partition + config) accepted requests are
   bounded by the requests of models that fit the group's memory and can meet their SLO
   in that config, and by the groups' pipeline capacity; a task whose bound is below the
   k-th best of its pair is skipped (k = ``refine_tasks``, so pruning never changes the answer);
2. **screen, then refine**: every task is first scored with the fast heuristic (one
   incremental simulation per round); the full greedy (Algorithm 1 with ``beam``) then runs
   only on the best ``refine_tasks`` tasks of each bucket of the ``refine`` best combinations.
   ``screen=full`` runs the full greedy everywhere (the paper's search);
3. Algorithm 1 itself is incremental, memoised and bound-pruned (:mod:`solvers.greedy`);
4. independent tasks run in parallel (``backend=local`` process pool, ``backend=ray``).

Results are merged in task order, so every backend returns the same placement. The search
is anytime: at ``time_limit`` or Ctrl-C it returns the best complete placement found.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.limits import stop_requested
from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.placement import Group, Placement
from placement_opt.progress import slow_step
from placement_opt.simulate.tables import stage_latencies
from placement_opt.spaces import allocate_devices
from placement_opt.spaces.summary import SearchSettings, bucket_tasks, plan
from placement_opt.validation import option
from placement_opt.workload import Requests, Workload

from placement_opt.solvers.backends import BACKENDS, Backend, Progress, make_backend, worker_context
from placement_opt.solvers.base import SearchStopped, Solver, register
from placement_opt.solvers.greedy import extend_selection, greedy_selection


@dataclass(frozen=True)
class AlpaServeOptions(SearchSettings):
    """The enumeration settings (declared in :class:`SearchSettings`), then the search's own options."""

    beam: int = option(1, minimum=1, help="beam width of Algorithm 1")
    screen: str = option("fast", choices=("fast", "full"),
                         help="fast: heuristic screening, then refine; full: Algorithm 1 everywhere")
    prescreen: float = option(0.25, minimum=0, maximum=1,
                              help="screen every task first on this leading fraction of the workload and "
                                   "screen only the best prescreen_keep tasks of each pair on all of it; "
                                   "0 or 1 = screen every task on the whole workload")
    prescreen_keep: int = option(3, minimum=1, help="tasks per (bucket, devices) pair kept by the prescreen")
    refine: int = option(2, minimum=0, help="refine this many best combinations (plus the best of every "
                                            "bucket count) with the full greedy")
    refine_tasks: int = option(2, minimum=1, help="per bucket of a refined combination, refine this many best configs")
    refine_within: float = option(0.03, minimum=0, maximum=1,
                                  help="refine a bucket's second and later configs only when their screen result is "
                                       "within this fraction of its best one (1 = always)")
    headroom: float = option(1.5, minimum=0,
                             help="after the search, keep adding replicas into unused memory by the attainment "
                                  "at this multiple of the request rate (kept only where training attainment "
                                  "does not drop); 0 = off")
    backend: str = option("local", choices=BACKENDS, help="where tasks run: this process, a local process pool or Ray")
    address: str = option("", help='Ray cluster address (backend=ray); empty or "local" starts a private one')
    workers: int = option(0, minimum=0, help="worker processes; 0 = all cores")
    progress: bool = option(True, help="progress lines on stderr")


def scaled_workload(workload: Workload, factor: float) -> Workload:
    """The workload at ``factor`` times its request rate (every process, or the trace's rate scale)."""
    return dataclasses.replace(
        workload, process=None if workload.process is None else workload.process.scaled(factor),
        per_model={k: v.scaled(factor) for k, v in workload.per_model.items()},
        trace=None if workload.trace is None else dataclasses.replace(workload.trace,
                                                                      rate_scale=workload.trace.rate_scale * factor))


def settings_of(o: AlpaServeOptions) -> SearchSettings:
    """The enumeration settings of ``alpaserve`` options: the options themselves (they extend them)."""
    return o


def leading_requests(requests: Requests, fraction: float) -> Requests:
    """The requests arriving in the first ``fraction`` of the workload, as a workload that long."""
    if fraction >= 1:
        return requests
    end = requests.duration_s * fraction
    sub = requests.select(requests.arrival < end)
    return Requests(sub.arrival, sub.model, sub.deadline, end)


def run_bucket_task(bucket: tuple, sizes: tuple, configs: tuple, fast: bool, beam: int,
                    wall_deadline: float | None, fraction: float = 1.0):
    """Algorithm 1 for one bucket on one partition and config (runs in a worker), on the
    leading ``fraction`` of the workload, stopping at ``wall_deadline`` (a ``time.time()``
    value: the search's deadline, comparable across processes, so that a task that waited in a
    queue gets only the time that is left when it starts).

    Returns (accepted requests of the bucket, models per group as index tuples, stats).
    The worker keeps one evaluator per bucket and fraction, so its memo is shared by all tasks
    of the bucket.
    """
    ctx = worker_context()
    instance = ctx["instance"]
    evaluators = ctx.setdefault("evaluators", {})
    ev = evaluators.get((bucket, fraction))
    if ev is None:
        req = instance.requests()
        ev = PlacementEvaluator(instance, leading_requests(req.select(np.isin(req.model, bucket)), fraction))
        evaluators[(bucket, fraction)] = ev
    shells = [(tuple(range(s)), pp, tp) for s, (pp, tp) in zip(sizes, configs)]
    deadline = None if wall_deadline is None else time.perf_counter() + max(wall_deadline - time.time(), 0.0)
    groups, stats = greedy_selection(instance, shells, beam=beam, evaluator=ev, models=bucket, fast=fast,
                                     deadline=deadline)
    index = {n: i for i, n in enumerate(instance.model_names)}
    return stats["accepted"], tuple(tuple(index[n] for n in g.models) for g in groups), stats


def config_reach(instance: Instance, slo: np.ndarray, bucket: tuple, pp: int, tp: int) -> tuple[np.ndarray, float]:
    """Which of the bucket's models a (pp, tp) group can serve (profiled, within memory, meeting
    their SLO alone), as a mask over all models, and the slowest stage of the fastest of them
    (inf when none)."""
    budget = instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
    sim = instance.simulator
    one = np.array([1], dtype=np.int64)
    mask = np.zeros(len(instance.models), dtype=np.bool_)
    fastest = math.inf
    for m in bucket:
        prof = instance.model_profiles[m]
        cfg = prof.config(pp, tp)
        if cfg is None or cfg.max_stage_weight_bytes > budget:
            continue
        lat = stage_latencies(prof, pp, tp, one, sim)[0]
        if lat.sum() + sim.overhead_s <= slo[m] * (1 + 1e-12):
            mask[m] = True
            fastest = min(fastest, float(lat.max()))
    return mask, fastest


def task_upper_bound(instance, counts, slo, bucket, sizes, configs, duration, cache=None) -> int:
    """Requests a task can accept at most: those of models that fit some group and meet
    their SLO there, capped by the groups' pipeline capacity (no batching). ``cache`` keeps
    :func:`config_reach` per (bucket, config) (a task has at most two configs) and the bucket's
    longest SLO per bucket."""
    cache = {} if cache is None else cache
    for pp_tp in set(configs):
        if (bucket,) + pp_tp not in cache:
            cache[(bucket,) + pp_tp] = config_reach(instance, slo, bucket, pp_tp[0], pp_tp[1])
    if bucket not in cache:
        cache[bucket] = max(slo[m] for m in bucket)
    longest_slo = cache[bucket]
    servable = np.zeros(len(instance.models), dtype=np.bool_)
    for pp_tp in set(configs):
        servable |= cache[(bucket,) + pp_tp][0]
    capacity = 0.0
    for pp_tp in configs:
        fastest = cache[(bucket,) + pp_tp][1]
        if fastest < math.inf:
            capacity += (duration + longest_slo) / fastest + 1
    bound = int(counts[servable].sum())
    return bound if instance.simulator.batching else min(bound, int(capacity))


@register
class AlpaServe(Solver):
    """Algorithm 2: buckets, device buckets, group partitions and configs, Algorithm 1 inside."""

    name = "alpaserve"
    summary = "AlpaServe Algorithm 2: enumerate buckets/partitions/configs, greedy selection inside"
    Options = AlpaServeOptions

    def solve(self, instance, time_limit=None, seed=0) -> Placement:
        search = _Search(instance, self.options, time_limit)
        return search.run()


class Phase(Enum):
    """The passes of the search; a phase's value is its counter in the provenance stats."""

    PRESCREEN = "prescreened"  # every task, fast heuristic, leading part of the workload (ranks tasks only)
    SCREEN = "screened"  # every task, with the fast heuristic (or the full greedy with screen=full)
    REFINE = "refined"  # the best tasks of the best combinations, with the full greedy


class Task(NamedTuple):
    """One Algorithm 1 call of a (bucket, devices) pair: a group partition with its configs."""

    number: int  # its position among the pair's tasks
    sizes: tuple  # devices per group
    configs: tuple  # (pp, tp) per group
    bound: int  # most requests it can accept (task_upper_bound)


class Job(NamedTuple):
    """One task of one pair, to run in one phase."""

    phase: Phase
    pair: int
    task: int


class TaskResult(NamedTuple):
    """What Algorithm 1 found for a task: the bucket's accepted requests and each group's models."""

    accepted: int
    model_lists: tuple  # per group: model indices


@dataclass(frozen=True)
class PairBest:
    """The result a (bucket, devices) pair uses: the task result accepting most requests, a
    refined one before a screened one that accepts as many, then the earlier task."""

    accepted: int
    phase: Phase
    task: int

    def rank(self) -> tuple[int, bool, int]:
        """Greater is better (see the class docstring)."""
        return self.accepted, self.phase is Phase.REFINE, -self.task


class Combo(NamedTuple):
    """A bucketing with one device split: the pair of each bucket."""

    bucketing: tuple  # model buckets
    devices: tuple  # devices per bucket
    pairs: tuple  # index into plan.pairs per bucket


class _Search:
    """One AlpaServe search: screen every task of every pair, refine the best, assemble the
    best combination whose groups fit the nodes."""

    def __init__(self, instance: Instance, o: AlpaServeOptions, time_limit: Optional[float]):
        self.instance = instance
        self.o = o
        self.start = time.perf_counter()
        self.deadline = None if time_limit is None else self.start + time_limit
        self.wall_deadline = None if time_limit is None else time.time() + time_limit
        self.progress = Progress("alpaserve", instance, enabled=o.progress, unit="tasks")
        req = instance.requests()
        self.n_requests = max(len(req), 1)
        self.counts = np.bincount(req.model, minlength=len(instance.models))
        self.slo = instance.slo_seconds()
        with slow_step("alpaserve: enumerating bucketings and device splits", enabled=o.progress):
            self.plan = plan(instance, settings_of(o), req, checkpoint=self._stop_if_time_up)
        self.stats: dict[str, Any] = {
            "bucketings": len(self.plan.bucketings), "bucket_device_pairs": len(self.plan.pairs),
            "tasks": 0, "tasks_pruned_by_bound": 0, Phase.PRESCREEN.value: 0, Phase.SCREEN.value: 0,
            Phase.REFINE.value: 0,
            "simulations": 0, "timed_out": False, "interrupted": False}
        self.results: dict[Phase, dict[tuple[int, int], TaskResult]] = {phase: {} for phase in Phase}
        self.accepted_values: dict[tuple[int, Phase], list[int]] = {}  # (pair, phase) -> accepted of its tasks
        self.pair_best: dict[int, PairBest] = {}
        self.tasks: dict[int, list[Task]] = {}
        # pair -> (task, fast result, its stats) under a time limit
        self.fallback: dict[int, tuple[int, TaskResult, dict]] = {}
        self._lat_cache: dict = {}
        self.evaluated = 0

    # -- bookkeeping -------------------------------------------------------------------------
    def _combos(self) -> list[Combo]:
        """Every bucketing with every device split; device splits best-balanced first."""
        index = {p: i for i, p in enumerate(self.plan.pairs)}
        out = []
        for bk in self.plan.bucketings:
            for comp in self.plan.compositions[bk]:
                out.append(Combo(bk, comp, tuple(index[(b, n)] for b, n in zip(bk, comp))))
        return out

    def _record(self, phase: Phase, p: int, t: int, result: TaskResult) -> None:
        """Keep task ``t`` of pair ``p``'s result of ``phase`` (and the pair's best)."""
        self.results[phase][(p, t)] = result
        self.accepted_values.setdefault((p, phase), []).append(result.accepted)
        if phase is Phase.PRESCREEN:
            return  # counts of part of the workload: they rank the pair's tasks, nothing else
        cand = PairBest(result.accepted, phase, t)
        if p not in self.pair_best or cand.rank() > self.pair_best[p].rank():
            self.pair_best[p] = cand

    def _time_up(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _stop_if_time_up(self) -> None:
        """Raise :class:`SearchStopped` once the deadline has passed; for steps before any
        placement can exist (the enumeration of bucketings and device splits)."""
        if self._time_up():
            raise SearchStopped("time limit")

    # -- phases --------------------------------------------------------------------------------
    def run(self) -> Placement:
        """Screen, refine (screen=fast), assemble; anytime (see the module docstring)."""
        o = self.o
        combos = self.combos = self._combos()
        ordered = sorted(combos, key=lambda c: len(c.bucketing))  # fewest buckets first, then best-balanced
        self.first_combo = ordered[0] if ordered else None
        # pairs in the order the combinations need them, so an early stop finds one complete
        pair_order: list[int] = []
        for combo in ordered:
            for p in combo.pairs:
                if p not in pair_order:
                    pair_order.append(p)
        n_first = len(self.first_combo.pairs) if self.first_combo else 0  # pair_order starts with them
        if self.deadline is not None:
            self._list_tasks(pair_order[:n_first])
            if not self._time_up():
                with slow_step("alpaserve: a first placement for the time limit", enabled=o.progress):
                    self._fallback_combo()
        with slow_step("alpaserve: listing tasks and their bounds", enabled=o.progress):
            self._list_tasks([p for p in pair_order if p not in self.tasks])
        backend = make_backend(o.backend, {"instance": self.instance}, o.workers, o.address)
        try:
            first = Phase.PRESCREEN if o.screen == "fast" and 0 < o.prescreen < 1 else Phase.SCREEN
            self._run_jobs(backend, [Job(first, p, t) for p in pair_order for t in range(len(self.tasks.get(p, ())))])
            if o.screen == "fast" and not self._stopped():
                self._run_jobs(backend, [Job(Phase.REFINE, p, t) for p, t in self._refine_jobs(combos)])
        except KeyboardInterrupt:
            self.stats["interrupted"] = True
        finally:
            backend.close()
        return self._assemble(combos)

    def _list_tasks(self, pairs: list[int]) -> None:
        """Every task of the pairs, with its bound, pair by pair until the deadline (the pairs come
        in the order the combinations need them, so the first combination's are listed first)."""
        inst = self.instance
        duration = inst.requests().duration_s
        for p in pairs:
            if self._time_up():
                self.stats["timed_out"] = True
                return
            bucket, n = self.plan.pairs[p]
            tasks = bucket_tasks(inst, bucket, n, settings_of(self.o))
            bounds = [task_upper_bound(inst, self.counts, self.slo, bucket, s, c, duration, self._lat_cache)
                      for s, c in tasks]
            self.tasks[p] = [Task(t, s, c, ub) for t, ((s, c), ub) in enumerate(zip(tasks, bounds))]
            self.stats["tasks"] += len(tasks)

    def _survivors(self, p: int) -> list[int]:
        """Pair ``p``'s ``prescreen_keep`` tasks that accepted most in the prescreen (the earlier
        task on ties), in task order."""
        done = self.results[Phase.PRESCREEN]
        scored = sorted(((done[(p, t)].accepted, -t) for t in range(len(self.tasks[p]))), reverse=True)
        return sorted(-neg_t for _, neg_t in scored[:self.o.prescreen_keep])

    def _stopped(self) -> bool:
        """Whether the search stops submitting work: timed out, interrupted, or a stop requested
        that no ``KeyboardInterrupt`` delivered (a signal the CLI's handler could only record)."""
        return bool(self.stats["timed_out"] or self.stats["interrupted"]) or stop_requested() is not None

    def _kth_best(self, phase: Phase, p: int) -> Optional[int]:
        """The ``refine_tasks``-th best accepted count among pair ``p``'s results of ``phase``."""
        vals = sorted(self.accepted_values.get((p, phase), ()), reverse=True)
        k = self.o.refine_tasks
        return vals[k - 1] if len(vals) >= k else None

    def _pruned(self, job: Job) -> bool:
        """Whether ``job`` is skipped, its bound being below its pair's k-th best screen result."""
        kth = self._kth_best(job.phase, job.pair)
        if job.phase is Phase.SCREEN and kth is not None and self.tasks[job.pair][job.task].bound < kth:
            self.stats["tasks_pruned_by_bound"] += 1
            return True
        return False

    def _job_args(self, job: Job) -> tuple[bool, int, float]:
        """(fast heuristic, beam, workload fraction) of a job's Algorithm 1 run."""
        fast = job.phase is Phase.PRESCREEN or (job.phase is Phase.SCREEN and self.o.screen == "fast")
        beam = 1 if job.phase is Phase.PRESCREEN else self.o.beam
        fraction = self.o.prescreen if job.phase is Phase.PRESCREEN else 1.0
        return fast, beam, fraction

    def _already_run(self, job: Job) -> Optional[tuple[int, tuple, dict]]:
        """The result of ``job`` when :meth:`_fallback_combo` already ran the same task with the
        same arguments (the fast greedy, beam 1, the whole workload) to the end (not stopped by
        its share of the time limit): the job would compute it again."""
        kept = self.fallback.get(job.pair)
        if kept is None or kept[0] != job.task or kept[2]["timed_out"] or self._job_args(job) != (True, 1, 1.0):
            return None
        return kept[1].accepted, kept[1].model_lists, kept[2]

    def _submit(self, backend: Backend, job: Job) -> Any:
        """Submit one job to the backend."""
        task = self.tasks[job.pair][job.task]
        fast, beam, fraction = self._job_args(job)
        return backend.submit(run_bucket_task, self.plan.pairs[job.pair][0], task.sizes, task.configs, fast, beam,
                              self.wall_deadline, fraction)

    def _run_jobs(self, backend: Backend, jobs: list[Job]) -> None:
        """Run the jobs, a few per worker at a time, recording their results as they come. When
        the last prescreen job of a pair is in, the screen jobs of its survivors go to the front
        of the queue, so that pairs, and with them whole combinations, complete early (a time
        limit then finds a complete placement); every result lands where it would in any order."""
        pending: dict[Any, Job] = {}  # backend handle -> job
        queue = list(jobs)
        prescreens_left = {j.pair: 0 for j in jobs}
        for j in jobs:
            prescreens_left[j.pair] += j.phase is Phase.PRESCREEN
        limit = max(1, backend.workers) * 2
        try:
            while queue or pending:
                reused: list[tuple[Job, tuple]] = []  # jobs _fallback_combo already ran, with their results
                while queue and len(pending) + len(reused) < limit and not self._stopped():
                    job = queue.pop(0)
                    if self._pruned(job):
                        continue
                    kept = self._already_run(job)
                    if kept is not None:
                        reused.append((job, kept))
                    else:
                        pending[self._submit(backend, job)] = job
                if not pending and not reused:
                    break
                ready = backend.wait_any(list(pending), timeout=0.5) if pending else []
                for job, (acc, lists, st) in reused + [(pending.pop(h), backend.result(h)) for h in ready]:
                    self._record(job.phase, job.pair, job.task, TaskResult(acc, lists))
                    self.stats[job.phase.value] += 1
                    self.stats["simulations"] += st["simulations"]
                    self.evaluated += st["candidates_evaluated"]
                    if job.phase is Phase.PRESCREEN:
                        prescreens_left[job.pair] -= 1
                        if prescreens_left[job.pair] == 0:
                            queue[0:0] = [Job(Phase.SCREEN, job.pair, t) for t in self._survivors(job.pair)]
                self.progress.update(self._tasks_done(), self._placement_now, f"candidates {self.evaluated}",
                                     total=self._tasks_done() + len(queue) + len(pending))
                if self._time_up() and not self.stats["timed_out"]:
                    self.stats["timed_out"] = True
                    queue.clear()
        except KeyboardInterrupt:
            self.stats["interrupted"] = True
            backend.cancel(list(pending))

    def _combo_value(self, combo: Combo) -> Optional[int]:
        """Accepted requests of a combination, or None while one of its pairs has no result."""
        best = [self.pair_best.get(p) for p in combo.pairs]
        if any(b is None for b in best):
            return None
        return sum(b.accepted for b in best if b is not None)

    def _tasks_done(self) -> int:
        return int(self.stats[Phase.PRESCREEN.value] + self.stats[Phase.SCREEN.value] + self.stats[Phase.REFINE.value]
                   + self.stats["tasks_pruned_by_bound"])

    def _placement_now(self) -> Optional[Placement]:
        """The placement an interrupted search would return now (None before one is complete)."""
        found = self._best_fitting(self.combos, headroom=False)
        return None if found is None else Placement(groups=found[2])

    def _ranked(self, combos: list[Combo]) -> list[tuple[int, int]]:
        """(value, index) of the combinations that have one, most accepted first, then in order."""
        values = [(self._combo_value(c), i) for i, c in enumerate(combos)]
        return sorted(((v, i) for v, i in values if v is not None), key=lambda x: (-x[0], x[1]))

    def _refine_jobs(self, combos: list[Combo]) -> list[tuple[int, int]]:
        """The best ``refine_tasks`` screened tasks of every pair of the ``refine`` best combinations
        and of the best combination of every bucket count, those after the first only when their
        screen result is within ``refine_within`` of the pair's best (a heuristic: a config the
        screen puts well behind rarely overtakes after the full greedy, and its full greedy is
        the search's most expensive step)."""
        ranked = self._ranked(combos)
        chosen = [i for _, i in ranked[:self.o.refine]]
        # also the best combination of every bucket count: the fast screen's errors differ between
        # one and several buckets, so a near-miss of the other kind still gets the full greedy
        for k in sorted({len(c.bucketing) for c in combos}):
            best_k = next((i for _, i in ranked if len(combos[i].bucketing) == k), None)
            if best_k is not None and best_k not in chosen:
                chosen.append(best_k)
        jobs = []
        screened = self.results[Phase.SCREEN]
        for i in chosen:
            for p in combos[i].pairs:
                # most accepted first, then the earlier task
                scored = sorted(((r.accepted, -t) for (pi, t), r in screened.items() if pi == p), reverse=True)
                for accepted, neg_t in scored[:self.o.refine_tasks]:
                    close = accepted >= (1 - self.o.refine_within) * scored[0][0]
                    if close and (p, -neg_t) not in jobs:
                        jobs.append((p, -neg_t))
        return jobs

    def _pair_choice(self, p: int) -> tuple[Task, TaskResult]:
        """The task pair ``p`` uses and its result."""
        best = self.pair_best[p]
        return self.tasks[p][best.task], self.results[best.phase][(p, best.task)]

    def _fallback_combo(self) -> None:
        """Under a time limit, before the search: the first combination's pairs solved with the fast
        greedy on their first task, within a quarter of the time left (each stops there with its
        best so far), kept aside for :meth:`_ensure_one_combo` (the search's own results are not
        touched, so a limit that does not bind gives the placement of no limit)."""
        assert self.deadline is not None and self.wall_deadline is not None
        share = (self.deadline - time.perf_counter()) / 4
        wall_deadline = time.time() + share
        backend = make_backend("serial", {"instance": self.instance})
        try:
            for p in self.first_combo.pairs if self.first_combo else ():
                if self.tasks.get(p):
                    task = self.tasks[p][0]
                    acc, lists, st = run_bucket_task(self.plan.pairs[p][0], task.sizes, task.configs, True, 1,
                                                     wall_deadline)
                    self.fallback[p] = (task.number, TaskResult(acc, lists), st)
        finally:
            backend.close()

    def _ensure_one_combo(self, combos: list[Combo]) -> None:
        """When no combination is complete, finish the first one: its missing pairs take the result
        :meth:`_fallback_combo` kept, else the fast greedy within the time left; raises
        :class:`SearchStopped` when the deadline passes before every pair has a result (no
        complete placement exists within the limit)."""
        if any(self._combo_value(c) is not None for c in combos):
            return
        backend = make_backend("serial", {"instance": self.instance})
        assert self.first_combo is not None  # combos is not empty
        try:
            for p in self.first_combo.pairs:
                if p in self.pair_best:
                    continue
                if p in self.fallback:
                    self._record(Phase.SCREEN, p, *self.fallback[p][:2])
                    continue
                if self._time_up() or p not in self.tasks:
                    raise SearchStopped("time limit")
                if self.tasks[p]:
                    task = self.tasks[p][0]
                    acc, lists, _ = run_bucket_task(self.plan.pairs[p][0], task.sizes, task.configs, True, 1,
                                                    self.wall_deadline)
                    self._record(Phase.SCREEN, p, task.number, TaskResult(acc, lists))
        finally:
            backend.close()

    def _with_headroom(self, combo: Combo, configs: list, lists: list) -> list:
        """``lists`` (models per group) with replicas added into unused memory, bucket by bucket,
        by the fast heuristic scored at ``headroom`` times the request rate (issue 14: once
        training attainment saturates the search stops adding replicas and leaves memory that
        would absorb fresh bursts); kept only when training attainment does not drop."""
        inst, factor = self.instance, self.o.headroom
        if factor <= 0 or inst.simulator.batching or self._stopped() or self._time_up():
            return lists
        requests = inst.requests(workload=scaled_workload(inst.workload, factor))
        out: list = []
        first = 0
        for p in combo.pairs:
            bucket = self.plan.pairs[p][0]
            n = len(self.tasks[p][self.pair_best[p].task].sizes)
            ev = PlacementEvaluator(inst, requests.select(np.isin(requests.model, bucket)))
            out += extend_selection(inst, configs[first:first + n], lists[first:first + n], bucket, ev, self.deadline)
            first += n
        training = PlacementEvaluator(inst)
        before = training.accepted_per_model(self._shell_groups(configs, lists)).sum()
        after = training.accepted_per_model(self._shell_groups(configs, out)).sum()
        if after < before:
            return lists
        self.stats["headroom_replicas"] = sum(map(len, out)) - sum(map(len, lists))
        return out

    def _shell_groups(self, configs: list, lists: list) -> list[Group]:
        """Groups of the given configs and model lists (devices do not matter to the simulator)."""
        names = self.instance.model_names
        return [Group(devices=tuple(range(pp * tp)), pp=pp, tp=tp, models=tuple(names[m] for m in sorted(ms)))
                for (pp, tp), ms in zip(configs, lists)]

    def _best_fitting(self, combos: list[Combo], headroom: bool = True
                      ) -> Optional[tuple[int, Combo, tuple[Group, ...]]]:
        """(accepted, combination, groups) of the best combination whose groups fit the
        cluster's nodes, or None when none does (yet); with ``headroom``, replicas added into
        unused memory (a stopped search adds none, so the progress bar scores it without)."""
        inst = self.instance
        names = inst.model_names
        for value, i in self._ranked(combos):
            combo = combos[i]
            sizes, configs, lists = [], [], []
            for p in combo.pairs:
                task, result = self._pair_choice(p)
                sizes += list(task.sizes)
                configs += list(task.configs)
                lists += list(result.model_lists)
            devices = allocate_devices(sizes, inst.cluster.nodes, inst.cluster.gpus_per_node)
            if devices is None:
                continue
            if headroom:
                lists = self._with_headroom(combo, configs, lists)
            groups = tuple(Group(devices=d, pp=pp, tp=tp, models=tuple(names[m] for m in sorted(ms)))
                           for d, (pp, tp), ms in zip(devices, configs, lists))
            return value, combo, groups
        return None

    def _assemble(self, combos: list[Combo]) -> Placement:
        """The best combination whose groups fit the cluster's nodes, as a placement."""
        if not combos:
            raise InputError("the search space is empty (no bucketing/device split fits)", "solver.options")
        self._ensure_one_combo(combos)
        found = self._best_fitting(combos)
        if found is None:
            raise InputError("no combination's groups fit the cluster's nodes", "solver.options")
        value, combo, groups = found
        self.stats.update(best_attainment=value / self.n_requests, candidates_evaluated=self.evaluated,
                          models_per_bucket=[len(b) for b in combo.bucketing],
                          devices_per_bucket=list(combo.devices),
                          seconds=round(time.perf_counter() - self.start, 3))
        placement = Placement(groups=groups, provenance={"search": self.stats})
        self.progress.done(self._tasks_done(), lambda: placement, f"candidates {self.evaluated}")
        return placement
