"""The executor's controller: start one worker per device, replay the workload in real time.

For every trial (one per SLO scale, or one), the controller walks the requests in arrival
order, sleeps until each arrival, asks the :class:`~.dispatch.Dispatcher` (the simulator's
policy and admission rule on profile-predicted clocks) where it goes, and sends the command
to every rank of that group. Workers report every stage's start and end; the controller
compares the measured finish with the deadline (and, with ``admission="closed-loop"``, feeds
every measured stage end back to the dispatcher, which corrects its clocks to at least them).
It watches the workers throughout: a worker that exits, reports an error, or leaves a request unfinished ``hang_timeout_s`` past its
predicted finish stops the run; so does Ctrl-C. Then every worker is killed, what was
measured so far is written, and :class:`ExecutorError` (or ``KeyboardInterrupt``) is raised.
"""

from __future__ import annotations

import dataclasses
import os
import select
import time
import zlib
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.progress import ProgressBar
from placement_opt.io import atomic_write_json
from placement_opt.feasibility import check_placement
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.simulate.flowshop import simulate_dnn
from placement_opt.workload import Requests, SLOSpec
from placement_opt.executor.dispatch import ADMISSION_MODES, Dispatcher
from placement_opt.executor.records import TrialRecord, write_trial
from placement_opt.executor.rendezvous import rendezvous
from placement_opt.executor.topology import model_layer_range, rank_plans, tp_groups
from placement_opt.executor.worker import ModelBuild, WorkerSpec, worker_main

BACKENDS = ("nccl", "gloo")


class ExecutorError(RuntimeError):
    """The run stopped early (a worker died, hung or failed); partial results were saved."""


@dataclass(frozen=True)
class ExecutorConfig:
    """How to run: backend, time limits, warm-up passes, CPU threads per worker, replay length."""

    backend: str = "auto"  # nccl on GPUs, gloo on CPUs; auto picks nccl when CUDA is available
    hang_timeout_s: float = 30.0
    start_timeout_s: float = 600.0
    warmup: int = 3
    cpu_threads: int = 1
    duration_s: Optional[float] = None  # replay only the first this many seconds
    lead_s: float = 0.5  # pause between "all ready" and the first arrival
    pause_s: float = 1.0  # idle time between trials
    cuda_graphs: bool = True  # on GPUs, replay each stage as one CUDA graph (see executor.graphs)
    admission: str = "open-loop"  # or "closed-loop": correct the dispatcher's clocks with measured stage ends
    host_probe: bool = True  # LLM runs: measure each mesh's decode host time before the trials (executor.llm_probe)
    job_trace: bool = False  # LLM runs: write every job's launch and device times, jobs.csv (executor.llm_trace)
    op_channel: str = "pipe"  # LLM runs: how a TP mesh's leader sends its operations (executor.llm_worker.OP_CHANNELS)

    def resolved_backend(self) -> str:
        if self.backend == "auto":
            import torch
            return "nccl" if torch.cuda.is_available() else "gloo"
        if self.backend not in BACKENDS:
            raise InputError(f"unknown backend {self.backend!r} (known: nccl, gloo)", "--backend")
        return self.backend


def model_seed(instance_seed: int, name: str) -> int:
    """Weights seed of one model: the instance seed mixed with the model name."""
    return (instance_seed * 7919 + zlib.crc32(name.encode())) % (2**31)


def host_memory_bytes() -> int:
    """Physical memory of this host."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_executable(instance: Instance, placement: Placement, backend: str,
                     config: ExecutorConfig = ExecutorConfig()) -> None:
    """Everything the executor needs, reported as input errors before any process starts."""
    from placement_opt.executor.network import check_supported

    if instance.is_llm:
        raise InputError("the executor runs DNN (non-LLM) instances", "models.family")
    if placement.windows:
        raise InputError("the executor runs static placements; this one has time windows", "windows")
    check_placement(placement, instance)
    if config.admission not in ADMISSION_MODES:
        raise InputError(f"unknown admission {config.admission!r} (known: {', '.join(ADMISSION_MODES)})",
                         "--admission")
    Dispatcher(instance, placement.groups)  # the simulator settings and profile tables the controller needs
    fp32_weight_bytes = 0  # what CPU workers hold: every group's models in fp32
    for g, grp in enumerate(placement.groups):
        for name in grp.models:
            spec = instance.models[instance.model_index(name)]
            if spec.architecture is None:
                raise InputError("the executor builds models from their architecture; this model has none",
                                 f"models[{name}].architecture")
            check_supported(spec.architecture, grp.tp, f"models[{name}].architecture")
            if spec.weights is not None:
                try:
                    import safetensors  # noqa: F401
                except ImportError:
                    raise InputError("loading weights needs the safetensors package (pip install safetensors)",
                                     f"models[{name}].weights") from None
                if not os.path.exists(spec.weights):
                    raise InputError(f"file not found: {spec.weights}", f"models[{name}].weights")
            model_layer_range(grp, 0, spec.architecture.layers)  # checks stage_layers against the depth
            fp32_weight_bytes += spec.architecture.param_count() * 4
    if backend == "gloo":  # CPU workers build every group's models in fp32 in this host's memory
        have = host_memory_bytes()
        if fp32_weight_bytes > have:
            raise InputError(f"the CPU workers would hold {fp32_weight_bytes / 1e9:.1f} GB of fp32 weights but this "
                             f"host has {have / 1e9:.1f} GB of memory", "groups")
    if backend == "nccl":
        import torch
        have = torch.cuda.device_count()
        used = [d for grp in placement.groups if grp.models for d in grp.devices]
        if used and max(used) >= have:
            raise InputError(f"the placement uses device {max(used)} but this host has {have} GPUs", "groups")


def _worker_specs(instance: Instance, placement: Placement, backend: str, config: ExecutorConfig,
                  init: str) -> List[WorkerSpec]:
    """What every worker process builds and how it joins the others (through ``init``), in rank order."""
    groups = placement.groups
    layers_of = {m.name: m.architecture.layers for m in instance.models if m.architecture is not None}
    plans = rank_plans(groups, layers_of)
    subgroups = tuple(tp_groups(plans))
    specs: List[WorkerSpec] = []
    for p in plans:
        grp = groups[p.group]
        builds = []
        for name in grp.models:
            i = instance.model_index(name)
            spec = instance.models[i]
            assert spec.architecture is not None  # check_executable requires one
            weights = spec.weights
            if weights is not None and not os.path.isabs(weights) and instance.path:
                weights = os.path.join(os.path.dirname(os.path.abspath(instance.path)), weights)
            builds.append(ModelBuild(index=i, name=name, architecture=spec.architecture,
                                     layer_range=model_layer_range(grp, p.stage, spec.architecture.layers),
                                     seed=model_seed(instance.seed, name), weights=weights))
        specs.append(WorkerSpec(plan=p, world_size=len(plans), backend=backend, init_method=init,
                                tp_groups=subgroups, models=tuple(builds), warmup=config.warmup,
                                cpu_threads=config.cpu_threads, timeout_s=config.start_timeout_s,
                                cuda_graphs=config.cuda_graphs and backend == "nccl"))
    return specs


class _Workers:
    """The worker processes, their pipes, and their health."""

    def __init__(self, specs: Sequence[WorkerSpec]):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.specs = list(specs)
        self.procs: List[Any] = []  # torch.multiprocessing processes
        self.commands: List[connection.Connection] = []
        self.reports: List[connection.Connection] = []
        self.ready: Dict[int, Any] = {}  # rank -> what it reported when ready
        self.errors: Dict[int, str] = {}  # rank -> its traceback
        self.finished: Set[int] = set()
        for spec in self.specs:
            cmd_recv, cmd_send = ctx.Pipe(duplex=False)
            rep_recv, rep_send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=worker_main, args=(spec, cmd_recv, rep_send), daemon=True,
                               name=f"placeopt-worker-{spec.plan.rank}")
            proc.start()
            cmd_recv.close()
            rep_send.close()
            self.procs.append(proc)
            self.commands.append(cmd_send)
            self.reports.append(rep_recv)
        self._open = list(self.reports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def describe(self, rank: int) -> str:
        p = self.specs[rank].plan
        return f"worker rank {rank} (device {p.device}, group {p.group}, stage {p.stage})"

    def poll(self, timeout: float, on_stage: Callable[[Any, int, float, float], None]) -> None:
        """Handle every report that arrives within ``timeout`` seconds (0: only those waiting)."""
        deadline = time.monotonic() + timeout
        while self._open:
            left = max(0.0, deadline - time.monotonic())
            ready = connection.wait(self._open, timeout=left)
            if not ready:
                return
            for conn in ready:
                assert isinstance(conn, connection.Connection)  # wait() returns some of self._open
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._open.remove(conn)
                    continue
                kind, who, data = msg[0], msg[1], msg[2:]
                if kind == "stage":
                    on_stage(who, data[0], data[1], data[2])
                elif kind == "ready":
                    self.ready[who] = data[0]
                elif kind == "error":
                    self.errors[who] = data[0]
                elif kind == "done":
                    self.finished.add(who)

    def check(self) -> None:
        """Raise ExecutorError if a worker reported an error or exited before being told to stop."""
        for rank, text in sorted(self.errors.items()):
            last = text.strip().splitlines()[-1] if text.strip() else "unknown error"
            raise ExecutorError(f"{self.describe(rank)} failed: {last}")
        for rank, proc in enumerate(self.procs):
            if proc.exitcode is not None and rank not in self.finished:
                raise ExecutorError(f"{self.describe(rank)} died (exit code {proc.exitcode})")

    def send(self, ranks: Sequence[int], command: Any, wait: Callable[[], None]) -> None:
        """Send ``command`` to every rank; while a rank's pipe is full, call ``wait()`` (which
        handles reports and raises on failure or hang) instead of blocking."""
        for r in ranks:
            conn = self.commands[r]
            try:
                while not select.select([], [conn.fileno()], [], 0)[1]:
                    wait()
                conn.send(command)
            except (BrokenPipeError, OSError, ValueError):
                raise ExecutorError(f"{self.describe(r)} is gone (its command pipe is closed)") from None

    def stop(self, timeout: float) -> None:
        """Tell every worker to finish, wait up to ``timeout`` s, then kill what is left."""
        for c in self.commands:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        end = time.monotonic() + timeout
        for p in self.procs:
            p.join(max(0.0, end - time.monotonic()))
        self.kill()

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5.0)
        for c in self.commands + self.reports:
            c.close()


def _trial_instances(instance: Instance, slo_scales: Optional[Sequence[float]]) -> List[Tuple[str, Instance]]:
    """One (name, instance) per trial: the instance with each SLO scale, or itself alone."""
    if not slo_scales:
        return [("run", instance)]
    out = []
    for scale in slo_scales:
        wl = dataclasses.replace(instance.workload, slo=SLOSpec(scale=float(scale)))
        out.append((f"slo-{scale:g}", dataclasses.replace(instance, workload=wl)))
    return out


def _trial_requests(instance: Instance, duration_s: Optional[float]) -> Requests:
    req = instance.requests()
    if duration_s is None or duration_s >= req.duration_s:
        return req
    sub = req.select(req.arrival < duration_s)
    return dataclasses.replace(sub, duration_s=float(duration_s))


class _Trial:
    """Replay one request set on running workers."""

    def __init__(self, name: str, instance: Instance, placement: Placement, requests: Requests, workers: _Workers,
                 config: ExecutorConfig):
        self.instance, self.placement, self.requests = instance, placement, requests
        self.workers, self.config = workers, config
        self.rec = TrialRecord.empty(name, requests)
        self.n_stages = [g.pp for g in placement.groups]
        self.group_ranks: Dict[int, List[int]] = {}
        for spec in workers.specs:
            self.group_ranks.setdefault(spec.plan.group, []).append(spec.plan.rank)
        self.outstanding: Dict[int, float] = {}  # request -> predicted finish (relative)
        self.dispatcher = Dispatcher(instance, placement.groups, closed_loop=config.admission == "closed-loop")
        self.t0 = 0.0
        self.index = 0

    def _on_stage(self, key: Tuple[int, int], stage: int, start: float, end: float) -> None:
        """Record one stage report of request ``key`` = (trial, request)."""
        trial, i = key
        if trial != self.index:  # cannot happen: a trial ends only when all its reports are in
            raise ExecutorError(f"a report of trial {trial} arrived during trial {self.index}")
        times = self.rec.stage_times.setdefault(i, {})
        times[stage] = (start - self.t0, end - self.t0)
        self.dispatcher.observe(i, stage, end - self.t0)  # closed loop: correct the clocks (else a no-op)
        if len(times) == self.n_stages[self.rec.group[i]]:  # every stage reported (pipes may reorder)
            self.outstanding.pop(i, None)

    def _watch(self, timeout: float) -> None:
        self.workers.poll(timeout, self._on_stage)
        self.workers.check()
        if self.outstanding:
            now = time.monotonic() - self.t0
            i = min(self.outstanding, key=self.outstanding.__getitem__)
            late = now - self.outstanding[i]
            if late > self.config.hang_timeout_s:
                raise ExecutorError(f"no progress: request {i} (group {self.rec.group[i]}) is {late:.1f} s past "
                                    f"its predicted finish (hang timeout {self.config.hang_timeout_s:g} s); "
                                    "a worker hangs")

    def run(self, trial_index: int) -> None:
        self.index = trial_index
        dispatcher = self.dispatcher
        req = self.requests
        self.t0 = time.monotonic() + self.config.lead_s
        bar = ProgressBar(f"execute trial {trial_index + 1}", total=len(req), unit="requests")
        for i in range(len(req)):
            bar.update(i)
            due = self.t0 + req.arrival[i]
            while True:
                left = due - time.monotonic()
                if left <= 0:
                    break
                self._watch(max(0.0, min(left - 0.001, 0.05)) if left > 0.001 else 0.0)
            if dispatcher.closed_loop:  # read the stage ends reported so far, even when dispatch lags
                self._watch(0.0)
            d = dispatcher.decide(int(req.model[i]), float(req.arrival[i]), float(req.deadline[i]), request=i)
            if not d.admitted:
                continue
            self.rec.group[i] = d.group
            self.rec.predicted_finish[i] = d.finish
            self.rec.predicted_stage_end[i] = d.stage_ends
            self.outstanding[i] = d.finish
            self.rec.dispatch[i] = time.monotonic() - self.t0
            self.workers.send(self.group_ranks[d.group], ((trial_index, i), int(req.model[i])),
                              lambda: self._watch(0.01))
        while self.outstanding:
            self._watch(0.05)
        bar.close(count=len(req))


def execute(instance: Instance, placement: Placement, out_dir: str, config: ExecutorConfig = ExecutorConfig(),
            slo_scales: Optional[Sequence[float]] = None, log: Callable[[str], None] = lambda msg: None
            ) -> list[dict]:
    """Run ``placement`` on real devices, one trial per SLO scale (or one), and write the results.

    Returns the summary of every trial. Raises :class:`ExecutorError` after saving partial
    results if a worker fails or hangs, and re-raises ``KeyboardInterrupt`` likewise.
    """
    backend = config.resolved_backend()
    check_executable(instance, placement, backend, config)
    trials = _trial_instances(instance, slo_scales)
    with rendezvous() as init:
        specs = _worker_specs(instance, placement, backend, config, init)
        os.makedirs(out_dir, exist_ok=True)
        started = time.monotonic()
        workers = _Workers(specs)
        log(f"started {len(specs)} workers ({backend}), pids {' '.join(map(str, workers.pids))}")
        summaries = []
        current = None
        try:
            while len(workers.ready) < len(specs):
                workers.poll(0.1, lambda *a: None)
                workers.check()
                if time.monotonic() - started > config.start_timeout_s:
                    missing = sorted(set(range(len(specs))) - set(workers.ready))
                    raise ExecutorError(f"workers {missing} not ready after {config.start_timeout_s:g} s")
            startup = time.monotonic() - started
            log(f"workers ready after {startup:.1f} s")
            for k, (name, inst) in enumerate(trials):
                requests = _trial_requests(inst, config.duration_s)
                current = _Trial(name, inst, placement, requests, workers, config)
                log(f"trial {name}: replaying {len(requests)} requests over {requests.duration_s:g} s")
                current.run(k)
                summaries.append(_save(current, out_dir, len(trials) > 1, backend, "complete", startup))
                s = summaries[-1]
                log(f"trial {name}: attainment measured {s['measured']['slo_attainment']:.4f} simulated "
                    f"{s['simulated']['slo_attainment']:.4f}; {s['late']} admitted requests were late")
                current = None
                if k + 1 < len(trials):
                    time.sleep(config.pause_s)
            workers.stop(timeout=30.0)
        except (ExecutorError, KeyboardInterrupt) as e:
            workers.kill()
            if current is not None:
                reason = "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed: {e}"
                summaries.append(_save(current, out_dir, len(trials) > 1, backend, reason, None))
            _write_index(out_dir, summaries)
            if isinstance(e, ExecutorError):
                raise ExecutorError(f"{e}; partial results saved in {out_dir}") from None
            raise
        except BaseException:
            workers.kill()
            raise
        _write_index(out_dir, summaries)
        return summaries


def _save(trial: _Trial, out_dir: str, per_trial_dir: bool, backend: str, status: str,
          startup: Optional[float]) -> dict:
    """Write one trial's files (beside the simulator's view of the same requests); its summary."""
    inst = trial.instance
    simulated = simulate_dnn(inst, trial.placement, trial.requests)
    facts = {"status": status, "backend": backend, "workers": len(trial.workers.specs),
             "cuda_graphs": any(s.cuda_graphs for s in trial.workers.specs),
             "worker_info": {str(k): v for k, v in sorted(trial.workers.ready.items())},
             "admission": trial.config.admission, "clock_corrections": trial.dispatcher.corrections,
             "clock_correction_max_s": trial.dispatcher.correction_max_s,
             "startup_s": startup, "slo_scale": inst.workload.slo.scale,
             "dispatch_lag_max_s": float(np.nanmax(trial.rec.dispatch - trial.rec.arrival))
             if np.any(~np.isnan(trial.rec.dispatch)) else None,
             "simulator": inst.simulator.to_dict(), "instance_sha256": inst.sha256}
    where = os.path.join(out_dir, trial.rec.name) if per_trial_dir else out_dir
    return write_trial(where, trial.rec, inst.model_names, trial.n_stages, simulated, facts)


def _write_index(out_dir: str, summaries: list) -> None:
    rows = [{"trial": s["trial"], "status": s["status"], "slo_scale": s["slo_scale"],
             "measured_slo_attainment": s["measured"]["slo_attainment"],
             "simulated_slo_attainment": s["simulated"]["slo_attainment"],
             "measured_latency_mean_s": s["measured"]["latency_mean_s"],
             "simulated_latency_mean_s": s["simulated"]["latency_mean_s"],
             "late": s["late"], "unfinished": s["unfinished"]} for s in summaries]
    atomic_write_json(os.path.join(out_dir, "trials.json"), rows)
