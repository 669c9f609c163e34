"""One LLM executor process: a mesh's leader (TP rank 0) or one of its followers.

The leader replays its mesh's requests in real time: it owns the mesh's
:class:`~.llm_sched.MeshScheduler` (the simulator's policy decisions) and loops: finish the
jobs whose end events fired (their requests get a token at that moment), re-balance ADBS
quotas when due, free the blocks of finished and preempted requests, ask the scheduler for
jobs to start now and launch them, drop what can never fit, integrate SM and KV use. Every
decision that touches the device (launch, finish, free) is also sent to the followers, which
apply them in the same order, so all TP ranks run the same jobs.

The operations travel over one OS pipe per follower (:class:`PipeChannel`, ``op_channel``
``pipe``, the default), not a collective: a gloo ``broadcast_object_list`` over the mesh's
gloo group (:class:`GlooChannel`, ``gloo``: engine generations up to v3f, kept as the
baseline ``benchmarks/fidelity/llm/op_channel_ab.py`` measures against) is two collectives
over TCP, ~0.4 ms per send on a CPU of this machine and ~1 ms per decode step on a TP-2
mesh, host time on every step's critical path; a pipe send is ~10 us and does not wait for
the follower. On GPUs a follower spins on its pipe for ``FOLLOW_SPIN_S`` after each
operation (the next one comes within a decode step), then blocks.

The leader reports each request's record when it finishes (or is dropped), a
heartbeat every second, and its mesh's totals at the end (with the prefill buckets the
replay met that start-up had not prepared: ``cold_buckets``, empty when the warm-up covered
the replay; with ``EngineSpec.job_trace`` every job's launch and device times, :mod:`.llm_trace`).
A process serves several trials (policies) in turn on the same weights, its pool emptied
between them.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import numpy as np

from placement_opt.simulate.meshsim import ADBS, MeshLLMs, MeshRequests, MeshSettings
from placement_opt.executor.llm_engine import CONNECTIONS_VAR, EngineSpec, widen_hardware_queues
from placement_opt.executor.llm_sched import MeshScheduler
from placement_opt.executor.worker import _die_with_parent, device_name

HEARTBEAT_S = 1.0
IDLE_SLEEP_S = 0.0002
FOLLOW_SPIN_S = 0.05  # a GPU follower polls its pipe this long after an operation before it blocks


@dataclass(frozen=True)
class MeshWork:
    """What a mesh leader replays: its requests (mesh-local LLM ids) and the scheduler's inputs."""

    requests: MeshRequests
    llms: MeshLLMs
    settings: MeshSettings


@dataclass(frozen=True)
class LLMWorkerSpec:
    """One process: its rank and device, its mesh, how it joins the others, what it builds."""

    rank: int
    device: int
    group: int  # the placement's group (mesh)
    mesh_ranks: Tuple[int, ...]  # global ranks of the mesh, TP order
    all_meshes: Tuple[Tuple[int, ...], ...]  # every mesh's ranks, in group order (subgroups are made in this order)
    n_llms_of: Tuple[int, ...]  # LLMs of every mesh, same order
    world_size: int
    backend: str
    init_method: str
    engine: EngineSpec
    cpu_threads: int
    timeout_s: float
    op_channel: str = "pipe"  # OP_CHANNELS


OP_CHANNELS = ("pipe", "gloo")  # how a mesh's leader sends its device operations (module docstring)


@dataclass
class PipeChannel:
    """Operations over OS pipes (module docstring): a leader holds one pipe end per follower
    (``out``, TP order), a follower the end it reads (``into``); a one-GPU mesh neither.
    ``spin_s``: how long a follower polls before it blocks (0 on CPUs, where a spinning
    follower would take a core from the jobs)."""

    out: Tuple[Connection, ...] = ()
    into: Optional[Connection] = None
    spin_s: float = 0.0
    name: ClassVar[str] = "pipe"

    def send(self, ops: List[tuple]) -> None:
        for conn in self.out:
            conn.send(ops)

    def receive(self) -> List[tuple]:
        assert self.into is not None
        if self.spin_s > 0:
            end = time.monotonic() + self.spin_s
            while not self.into.poll(0) and time.monotonic() < end:
                pass
        return self.into.recv()


@dataclass
class GlooChannel:
    """Operations broadcast over the mesh's gloo group from its leader ``src`` (the engine up
    to v3f; module docstring); ``group`` None on a one-GPU mesh."""

    group: Any
    src: int
    name: ClassVar[str] = "gloo"

    def send(self, ops: List[tuple]) -> None:
        if self.group is not None:
            import torch.distributed as dist
            dist.broadcast_object_list([ops], src=self.src, group=self.group)

    def receive(self) -> List[tuple]:
        import torch.distributed as dist
        box: List[Any] = [None]
        dist.broadcast_object_list(box, src=self.src, group=self.group)
        return box[0]


def _make_groups(spec: LLMWorkerSpec) -> Tuple[Any, List[Tuple[Any, Any]]]:
    """The mesh's gloo control group (with ``op_channel`` ``gloo``, else None) and its LLMs'
    (prefill, decode) TP groups; every rank creates every mesh's groups in the same order, as
    torch.distributed requires."""
    import torch.distributed as dist

    control, llm_groups = None, []
    for ranks, n_llms in zip(spec.all_meshes, spec.n_llms_of):
        if len(ranks) == 1:
            continue
        c = dist.new_group(list(ranks), backend="gloo") if spec.op_channel == "gloo" else None
        pairs = [(dist.new_group(list(ranks)), dist.new_group(list(ranks))) for _ in range(n_llms)]
        if spec.rank in ranks:
            control, llm_groups = c, pairs
    if not llm_groups:
        llm_groups = [(None, None)] * len(spec.engine.llms)
    return control, llm_groups


class _Leader:
    """The leader's replay loop (see the module docstring)."""

    def __init__(self, engine: Any, work: MeshWork, channel: Any, reports: Connection, group: int):
        self.engine, self.work, self.channel = engine, work, channel
        self.reports, self.group = reports, group
        self.sched = MeshScheduler(work.requests, work.llms, work.settings)
        self.token_times: Dict[int, List[float]] = {}
        self.holding: Dict[int, int] = {}  # request -> LLM, for requests with blocks on the device
        self.ops: List[tuple] = []
        self.sm_time = 0.0
        self.kv_time = 0.0
        self.kv_llm_time = [0.0] * len(self.sched.llms)
        self.peak_kv = 0

    def _send(self) -> None:
        """Send this iteration's device operations to the followers."""
        if self.ops:
            self.channel.send(self.ops)
        self.ops = []

    def _finish_due(self, t: float) -> int:
        """Finish the jobs whose end event fired, in the simulator's order; returns requests done."""
        done = 0
        for k in range(len(self.sched.llms)):
            for kind in ("decode", "prefill"):
                if (kind, k) in self.engine.running and self.engine.done(kind, k):
                    job = self.engine.finish(kind, k)
                    self.ops.append(("finish", kind, k))
                    for r in job.requests:
                        self.token_times.setdefault(r, []).append(t)
                    for r in self.sched.complete(kind, k, t):
                        self._release(r, True)
                        self._report(r)
                        done += 1
        return done

    def _release(self, r: int, forget: bool) -> None:
        k = self.holding.pop(r)
        self.engine.release(k, r, forget)
        self.ops.append(("release", k, r, forget))

    def _release_preempted(self) -> None:
        for r in [r for r in self.holding if self.sched.held[r] == 0]:
            self._release(r, False)

    def _report(self, r: int) -> None:
        s = self.sched
        self.reports.send(("req", self.group, r, s.first[r], s.finish[r], s.preemptions[r],
                           self.token_times.pop(r, [])))

    def _launch(self, t: float) -> None:
        for job in self.sched.schedule(t):
            self._release_preempted()
            self.ops.append(("launch", job))
            self._send()  # followers first: on CPUs a launch runs the job, its all-reduces need them
            self.engine.launch(job)
            for r in job.requests:
                self.holding[r] = job.llm
        self._release_preempted()

    def run(self, t0: float) -> dict:
        """Replay the mesh's requests from monotonic time ``t0``; returns the mesh's totals."""
        s, cfg = self.sched, self.work.settings
        n = len(self.work.requests.arrival)
        done, last, beat = 0, 0.0, 0.0
        next_rebalance = cfg.period if cfg.policy == ADBS else np.inf
        trace = self.engine.trace
        if self.engine.spec.job_trace:
            trace.begin()
        while True:
            t = time.monotonic() - t0
            self.sm_time += s.sm_used * (t - last)
            used = s.kv_in_use()
            self.kv_time += used * (t - last)
            for k, llm in enumerate(s.llms):
                self.kv_llm_time[k] += llm.used * (t - last)
            self.peak_kv = max(self.peak_kv, used)
            last = t
            done += self._finish_due(t)
            if done >= n or t >= cfg.horizon:
                break
            while t >= next_rebalance:
                next_rebalance += cfg.period
                s.rebalance()
            self._launch(t)
            if not s.busy():
                for r in s.drop_unfittable(t):
                    self._report(r)
                    done += 1
            self._send()
            if t - beat >= HEARTBEAT_S:
                beat = t
                self.reports.send(("beat", self.group, t))
            if not self.engine.running:
                time.sleep(IDLE_SLEEP_S)
        for kind, k in self.engine.in_flight():  # stopped at the horizon: let the jobs in flight end
            self.engine.finish(kind, k)
            self.ops.append(("finish", kind, k))
        self.ops.append(("stop",))
        self._send()
        return {"stop_s": last, "sm_time": self.sm_time, "kv_time": self.kv_time, "kv_llm_time": self.kv_llm_time,
                "peak_kv_kib": self.peak_kv, "preemptions": int(sum(s.preemptions)),
                "cold_buckets": [list(b) for b in self.engine.cold_buckets],
                "eager_prefills": self.engine.eager_prefills,
                "jobs": trace.rows(t0, [rt.build.name for rt in self.engine.llms]) if trace.active else []}


def _follow(engine: Any, channel: Any, leader: int) -> None:
    """Apply the leader's device operations until it says stop (a closed pipe: the leader,
    rank ``leader``, is gone, an error that names it)."""
    while True:
        try:
            ops = channel.receive()
        except EOFError:
            raise RuntimeError(f"the mesh's leader (rank {leader}) is gone: its operation pipe closed") from None
        for op in ops:
            if op[0] == "launch":
                engine.launch(op[1])
            elif op[0] == "finish":
                engine.finish(op[1], op[2])
            elif op[0] == "release":
                engine.release(op[1], op[2], op[3])
            elif op[0] == "stop":
                return


def _build(spec: LLMWorkerSpec) -> Tuple[Any, Any]:
    """Join the process group, build this rank's engine and warm it up."""
    import torch
    import torch.distributed as dist

    from placement_opt.executor.llm_engine import MeshEngine

    if spec.backend == "nccl":
        widen_hardware_queues()  # read when the CUDA context is made, just below
        torch.cuda.set_device(spec.device)
        device = torch.device("cuda", spec.device)
    else:
        torch.set_num_threads(spec.cpu_threads)
        device = torch.device("cpu")
    dist.init_process_group(spec.backend, init_method=spec.init_method, rank=spec.rank,
                            world_size=spec.world_size, timeout=timedelta(seconds=spec.timeout_s))
    control, groups = _make_groups(spec)
    engine = MeshEngine(spec.engine, device, groups)
    engine.warm_up()
    return engine, control


def _channel(spec: LLMWorkerSpec, control: Any, ops: Tuple[Connection, ...]) -> Any:
    """This rank's operation channel (module docstring)."""
    if spec.op_channel == "gloo":
        return GlooChannel(control, spec.mesh_ranks[0])
    if spec.rank == spec.mesh_ranks[0]:
        return PipeChannel(out=tuple(ops))
    return PipeChannel(into=ops[0], spin_s=FOLLOW_SPIN_S if spec.backend == "nccl" else 0.0)


def llm_worker_main(spec: LLMWorkerSpec, commands: Connection, reports: Connection,
                    ops: Tuple[Connection, ...] = ()) -> None:
    """Process entry point: build, report ready, then serve trials until told to stop: each
    command is ``(t0, work)`` (the leader's mesh work, None on followers), ``None`` ends.
    ``ops``: the mesh's operation pipes (:class:`PipeChannel`): a leader's ends to its
    followers, a follower's one end from its leader, none on a one-GPU mesh or with
    ``op_channel`` ``gloo``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller handles Ctrl-C and stops us
    try:
        engine, control = _build(spec)
        channel = _channel(spec, control, ops)
        reports.send(("ready", spec.rank, {"device": str(engine.device), "device_name": device_name(engine.device),
                                           "mechanism": engine.mechanism,
                                           "sm_counts": engine.sm, "sm_layout": engine.sm_layout,
                                           "weight_bytes": engine.weight_bytes(),
                                           "pool_pages": engine.pool.n_pages,
                                           "fallback": getattr(engine, "fallback_reason", None),
                                           "attention": engine.attention,
                                           "attention_fallback": engine.attention_fallback,
                                           "prefill_graphs": engine.prefill_graphs_on,
                                           "prefill_graph_fallback": engine.prefill_graph_fallback,
                                           "warmup": engine.warmup, "op_channel": channel.name,
                                           "cuda_connections": os.environ.get(CONNECTIONS_VAR)}))
        while True:
            cmd = commands.recv()
            if cmd is None:
                break
            t0, work = cmd  # one trial: the leader gets its mesh's work, followers None
            if work is not None:
                totals = _Leader(engine, work, channel, reports, spec.group).run(float(t0))
                reports.send(("mesh", spec.group, totals))
            else:
                _follow(engine, channel, spec.mesh_ranks[0])
            engine.reset()
            reports.send(("trial", spec.rank, None))
        reports.send(("done", spec.rank, None))
    except EOFError:
        os._exit(3)  # the controller went away
    except BaseException:
        try:
            reports.send(("error", spec.rank, traceback.format_exc()))
        finally:
            os._exit(1)
    os._exit(0)  # skip interpreter teardown (NCCL/gloo destructors can block on gone peers)
