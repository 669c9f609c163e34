"""``placeopt execute`` for LLM instances: run a MuxServe-style placement on real devices.

One process per GPU of every mesh that hosts LLMs (CPU processes with gloo when there is
no GPU). Requests are split over the meshes as the simulator splits them, each mesh's
leader replays its requests in real time with the simulator's scheduling decisions
(:mod:`.llm_worker`), and the controller gathers every request's record. It watches the
workers throughout: a worker that exits or reports an error, a mesh whose heartbeat stops
for ``hang_timeout_s``, or Ctrl-C stops the run; every worker is then killed, what was
measured so far is written, and :class:`ExecutorError` (or ``KeyboardInterrupt``) is raised.

Output (atomically written into the output folder): ``metrics.json`` (the measured metrics,
the JSON ``placeopt simulate`` prints for LLM instances, computed by the simulator's own
:func:`~placement_opt.simulate.llm.llm_metrics` from the measured times), ``simulated.json``
(the simulator on the same requests), ``requests.csv`` (per request: arrival, lengths, mesh,
measured and simulated first token and finish, preemptions, every token's time) and
``summary.json`` (both side by side, their relative errors, and the run's facts: SM
partitioning mechanism and SM counts, backend, CUDA graphs, pool sizes, what each worker's
start-up prepared (``worker_info.*.warmup``: graphs captured, prefill buckets run, seconds)
and per mesh the prefill buckets first met during the trial (``cold_buckets``: none when
the warm-up covered the replay) and the prefills run eagerly over the graph limit). Unless
``ExecutorConfig.host_probe`` is off, a short probe before the trials measures every mesh's
decode host time per LLM on this machine (:mod:`.llm_probe`): ``summary.json`` then also holds
``host_probe`` (per group: the measured and the calibrated seconds) and the prediction made
with them, ``simulated_with_probe`` and ``errors_with_probe``. After a complete trial the same
reading of its own token times, on the meshes that run one job at a time, gives ``host_in_run``
and the prediction made again with it, ``simulated_with_in_run_host`` and
``errors_with_in_run_host``: not a forecast (it reads the trial) but what is left of the error
once the run's own host pace is known. With ``ExecutorConfig.job_trace``
also ``jobs.csv``: every job of every mesh, its host launch and its device start and end
(:mod:`.llm_trace`), on the requests' clock, and beside it ``simulated-jobs.csv``, the
simulator's own job timeline of the same requests (:func:`simulated_jobs`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import re
import time
from dataclasses import dataclass
from multiprocessing import connection
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from placement_opt.progress import ProgressBar
from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.io import atomic_write_json, atomic_write_text
from placement_opt.llm_units import LLMSpec, effective_llm_config, llm_specs, placement_rules
from placement_opt.placement import Placement
from placement_opt.settings import POLICIES
from placement_opt.simulate import llm as simllm
from placement_opt.simulate.meshsim import LatencyTables, MeshLLMs, MeshRequests, MeshSettings
from placement_opt.workload import Requests
from placement_opt.executor.controller import ExecutorConfig, ExecutorError, host_memory_bytes, model_seed
from placement_opt.executor.llm_engine import EngineSpec, LLMBuild
from placement_opt.executor.llm_probe import decode_host_seconds, probe_requests, trial_decode_host
from placement_opt.executor.llm_sched import VirtualJobs, run_virtual
from placement_opt.executor.llm_trace import JOB_COLUMNS
from placement_opt.llm_units import page_units, pages_per_block
from placement_opt.executor.llm_worker import OP_CHANNELS, LLMWorkerSpec, MeshWork, llm_worker_main
from placement_opt.executor.rendezvous import rendezvous

KIB = 1024


@dataclass(frozen=True)
class MeshPlan:
    """One mesh of the placement as the executor runs it."""

    group: int
    specs: Tuple[LLMSpec, ...]
    devices: Tuple[int, ...]
    requests: np.ndarray  # indices into the replayed requests
    work: MeshWork
    pool_pages: int
    max_blocks: int


def _arch(instance: Instance, spec: LLMSpec) -> Any:
    arch = instance.models[spec.index].architecture
    assert arch is not None  # parsing requires an architecture for LLMs
    return arch


def check_llm_executable(instance: Instance, placement: Placement, backend: str) -> List[float]:
    """Everything the LLM executor needs, as input errors before any process starts; returns
    the KV pool bytes of every group (the simulator's rule)."""
    from placement_opt.executor.llm_model import check_llm_supported

    if placement.windows:
        raise InputError("the executor runs static placements; this one has time windows", "windows")
    specs = llm_specs(instance)
    pools = simllm.check_llm_groups(instance, placement.groups, specs, placement_rules(placement))
    index = {s.name: s for s in specs}
    host_bytes = 0
    for gi, g in enumerate(placement.groups):
        archs = [_arch(instance, index[m]) for m in g.models]
        for m, a in zip(g.models, archs):
            check_llm_supported(a, g.tp, f"models[{m}].architecture")
            host_bytes += a.param_count() * 4
        if len({a.hidden // a.heads for a in archs}) > 1:
            raise InputError("the LLMs of one mesh must share one head size (their KV blocks share a pool)",
                             f"groups[{gi}].models")
    if backend == "gloo" and host_bytes > host_memory_bytes():
        raise InputError(f"the CPU workers would hold {host_bytes / 1e9:.1f} GB of fp32 weights, more than this "
                         "host's memory", "groups")
    if backend == "nccl":
        import torch
        used = [d for g in placement.groups if g.models for d in g.devices]
        if used and max(used) >= torch.cuda.device_count():
            raise InputError(f"the placement uses device {max(used)} but this host has "
                             f"{torch.cuda.device_count()} GPUs", "groups")
    return pools


def replay_requests(instance: Instance, duration_s: Optional[float]) -> Requests:
    """The instance's requests, only those arriving in the first ``duration_s`` seconds if given."""
    req = instance.requests()
    if duration_s is None or duration_s >= req.duration_s:
        return req
    return dataclasses.replace(req.select(req.arrival < duration_s), duration_s=float(duration_s))


def _pool_pages(instance: Instance, specs: Sequence[LLMSpec], tp: int, pool_bytes: float, block: int,
                req: MeshRequests) -> int:
    """Pages of one GPU's pool: the simulator's pool at the architectures' dtype, per GPU,
    capped at what all the mesh's requests could hold at once."""
    archs = [_arch(instance, s) for s in specs]
    P = page_units(archs, tp)
    a0 = archs[0]
    page_bytes = P * block * (a0.hidden // a0.heads) * a0.dtype_bytes
    by_rule = int(pool_bytes / tp // page_bytes)
    blocks = (req.prompt + req.output + block) // block
    ppb = np.array([pages_per_block(a, archs, tp) for a in archs])
    return max(1, min(by_rule, int((blocks * ppb[req.llm]).sum())))


class _Mesh(NamedTuple):
    """One group that hosts LLMs with its share of the requests, as the simulator splits them."""

    group: int
    specs: List[LLMSpec]
    requests: np.ndarray  # indices into the replayed requests
    local: MeshRequests  # those requests, their LLMs numbered as on the mesh
    shares: List[float]


def _meshes(instance: Instance, placement: Placement, req: Requests, policy: str) -> List[_Mesh]:
    """Every group of ``placement`` that hosts LLMs, with the requests of ``req`` it serves."""
    prompt, output = simllm._with_lengths(instance, req)
    all_req = MeshRequests(arrival=req.arrival, llm=req.model, prompt=prompt, output=output)
    split = simllm.split_requests(placement.groups, llm_specs(instance), all_req)
    return [_Mesh(gi, mesh_specs, sel, local, simllm.sm_shares(placement.groups[gi], policy))
            for gi, (mesh_specs, sel, local) in sorted(split.items())]


def plan_meshes(instance: Instance, placement: Placement, req: Requests, pools: List[float], policy: str
                ) -> List[MeshPlan]:
    """Every mesh that hosts LLMs: its requests (split as the simulator splits them), its
    scheduler's inputs (as the simulator builds them), its pool pages and longest request."""
    cfg = effective_llm_config(instance, placement_rules(placement))
    plans = []
    for gi, mesh_specs, sel, local, shares in _meshes(instance, placement, req, policy):
        g = placement.groups[gi]
        llms = MeshLLMs(share=np.asarray(shares, dtype=np.float64),
                        kv_kib=np.array([int(np.ceil(s.kv_bytes_per_token / KIB)) for s in mesh_specs],
                                        dtype=np.int64),
                        rate=np.array([s.rate for s in mesh_specs]))
        settings = MeshSettings(policy=simllm._POLICY_CODE[policy], pool=simllm._pool_kib(pools[gi]),
                                block=cfg.kv_block_tokens, max_batch=cfg.max_batch,
                                token_budget=cfg.prefill_token_budget, period=cfg.rebalance_period_s,
                                frac=cfg.rebalance_fraction, horizon=req.duration_s + cfg.drain_s)
        longest = int((local.prompt + local.output).max()) if len(sel) else 1
        plans.append(MeshPlan(group=gi, specs=tuple(mesh_specs), devices=tuple(g.devices), requests=sel,
                              work=MeshWork(local, llms, settings),
                              pool_pages=_pool_pages(instance, mesh_specs, g.tp, pools[gi], cfg.kv_block_tokens,
                                                     local),
                              max_blocks=(longest + cfg.kv_block_tokens) // cfg.kv_block_tokens))
    return plans


def _job_bounds(req: MeshRequests, k: int, max_batch: int) -> Dict[str, int]:
    """Bounds of the jobs mesh-local LLM k can get (:class:`LLMBuild`): at most its requests
    (and ``max_batch``) in one job, at most its longest request's prompt plus output tokens
    in a context (a preempted request's recompute included)."""
    mine = req.llm == k
    if not mine.any():
        return {"max_batch": 1, "longest": 1}
    return {"max_batch": int(min(max_batch, mine.sum())), "longest": int((req.prompt + req.output)[mine].max())}


def worker_specs(instance: Instance, plans: List[MeshPlan], backend: str, config: ExecutorConfig,
                 max_batch: int, init: str) -> List[LLMWorkerSpec]:
    """One spec per process, meshes in group order, TP rank order within a mesh; all join one
    process group through ``init`` (:func:`placement_opt.executor.rendezvous.rendezvous`)."""
    if config.op_channel not in OP_CHANNELS:
        raise InputError(f"unknown operation channel {config.op_channel!r} (known: {', '.join(OP_CHANNELS)})",
                         "op_channel")
    meshes, rank = [], 0
    for p in plans:
        meshes.append(tuple(range(rank, rank + len(p.devices))))
        rank += len(p.devices)
    out = []
    for p, ranks in zip(plans, meshes):
        builds = tuple(LLMBuild(name=s.name, architecture=_arch(instance, s), seed=model_seed(instance.seed, s.name),
                                share=float(p.work.llms.share[k]), **_job_bounds(p.work.requests, k, max_batch))
                       for k, s in enumerate(p.specs))
        for tp_rank, r in enumerate(ranks):
            engine = EngineSpec(llms=builds, tp=len(ranks), tp_rank=tp_rank, pool_pages=p.pool_pages,
                                block=int(p.work.settings.block), max_batch=max_batch, max_blocks=p.max_blocks,
                                cuda_graphs=config.cuda_graphs and backend == "nccl", job_trace=config.job_trace)
            out.append(LLMWorkerSpec(rank=r, device=p.devices[tp_rank] if backend == "nccl" else 0, group=p.group,
                                     mesh_ranks=ranks, all_meshes=tuple(meshes),
                                     n_llms_of=tuple(len(q.specs) for q in plans), world_size=rank,
                                     backend=backend, init_method=init, engine=engine, cpu_threads=config.cpu_threads,
                                     timeout_s=config.start_timeout_s, op_channel=config.op_channel))
    return out


def _op_pipes(specs: List[LLMWorkerSpec], ctx: Any) -> Dict[int, Tuple[Any, ...]]:
    """Per rank its ends of its mesh's operation pipes (``llm_worker.PipeChannel``): a leader
    the sending end of one pipe per follower (TP order), a follower the receiving end of its
    own, a one-GPU mesh none."""
    out: Dict[int, Tuple[Any, ...]] = {s.rank: () for s in specs}
    for spec in specs:
        leader = spec.mesh_ranks[0]
        if spec.rank != leader and spec.op_channel == "pipe":
            recv, send = ctx.Pipe(duplex=False)
            out[leader] += (send,)
            out[spec.rank] = (recv,)
    return out


class _Run:
    """The worker processes, their reports, and what the current trial measured so far."""

    def __init__(self, specs: List[LLMWorkerSpec], config: ExecutorConfig):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.specs, self.config = specs, config
        self.ready: Dict[int, Any] = {}
        self.errors: Dict[int, str] = {}
        self.done: set = set()
        self.begin([], 0)
        self.procs, self.commands, self.reports = [], [], []
        ops = _op_pipes(specs, ctx)
        for spec in specs:
            cmd_recv, cmd_send = ctx.Pipe(duplex=False)
            rep_recv, rep_send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=llm_worker_main, args=(spec, cmd_recv, rep_send, ops[spec.rank]), daemon=True,
                               name=f"placeopt-llm-worker-{spec.rank}")
            proc.start()
            cmd_recv.close()
            rep_send.close()
            for end in ops[spec.rank]:  # the worker holds it now: its peers see EOF when it dies
                end.close()
            self.procs.append(proc)
            self.commands.append(cmd_send)
            self.reports.append(rep_recv)
        self._open = list(self.reports)

    def begin(self, plans: List[MeshPlan], n_requests: int) -> None:
        """Empty records for a trial of ``n_requests`` requests on the meshes ``plans``."""
        self.plans = plans
        self.first = np.full(n_requests, -1.0)
        self.finish = np.full(n_requests, -1.0)
        self.preempt = np.zeros(n_requests, dtype=np.int64)
        self.token_times: Dict[int, List[float]] = {}
        self.mesh_totals: Dict[int, dict] = {}
        self.totals_at: Dict[int, float] = {}  # when each mesh's leader reported its totals (monotonic s)
        self.beat: Dict[int, float] = {}
        self.trial_done: set = set()
        self.index = {p.group: p.requests for p in plans}

    def poll(self, timeout: float) -> None:
        """Handle every report arriving within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self._open:
            ready = connection.wait(self._open, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                return
            for conn in ready:
                assert isinstance(conn, connection.Connection)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self._open.remove(conn)
                    continue
                self._handle(msg)

    def _handle(self, msg: tuple) -> None:
        kind, who = msg[0], msg[1]
        if kind == "req":
            i = int(self.index[who][msg[2]])
            self.first[i], self.finish[i], self.preempt[i] = msg[3], msg[4], msg[5]
            self.token_times[i] = list(msg[6])
        elif kind == "beat":
            self.beat[who] = time.monotonic()
        elif kind == "mesh":
            self.mesh_totals[who] = msg[2]
            self.totals_at[who] = time.monotonic()
        elif kind == "trial":
            self.trial_done.add(who)
        elif kind == "ready":
            self.ready[who] = msg[2]
        elif kind == "error":
            self.errors[who] = msg[2]
        elif kind == "done":
            self.done.add(who)

    def check(self, serving: bool) -> None:
        """Raise ExecutorError for a failed, dead or (while serving) silent worker."""
        for rank, proc in enumerate(self.procs):  # a killed worker first: its peers' errors follow from it
            if proc.exitcode is not None and proc.exitcode < 0 and rank not in self.done:
                raise ExecutorError(f"LLM worker rank {rank} (group {self.specs[rank].group}) died "
                                    f"(signal {-proc.exitcode})")
        for rank, text in sorted(self.errors.items()):
            last = text.strip().splitlines()[-1] if text.strip() else "unknown error"
            raise ExecutorError(f"LLM worker rank {rank} (group {self.specs[rank].group}) failed: {last}")
        for rank, proc in enumerate(self.procs):
            if proc.exitcode is not None and rank not in self.done:
                raise ExecutorError(f"LLM worker rank {rank} (group {self.specs[rank].group}) died "
                                    f"(exit code {proc.exitcode})")
        if serving:
            now, limit = time.monotonic(), self.config.hang_timeout_s
            for p in self.plans:
                if p.group not in self.mesh_totals and now - self.beat[p.group] > limit:
                    raise ExecutorError(f"no heartbeat from mesh {p.group} for {limit:g} s; a worker hangs")
                # a follower applies the leader's operations from a pipe: it may still lag when the leader ends
                lagging = [s.rank for s in self.specs if s.group == p.group and s.rank not in self.trial_done]
                if p.group in self.totals_at and lagging and now - self.totals_at[p.group] > limit:
                    raise ExecutorError(f"rank(s) {lagging} of mesh {p.group} have not ended the trial {limit:g} s "
                                        "after its leader; a worker hangs")

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(5.0)
        for c in self.commands + self.reports:
            c.close()

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

    def wait_ready(self) -> float:
        started = time.monotonic()
        while len(self.ready) < len(self.specs):
            self.poll(0.1)
            self.check(False)
            if time.monotonic() - started > self.config.start_timeout_s:
                missing = sorted(set(range(len(self.specs))) - set(self.ready))
                raise ExecutorError(f"workers {missing} not ready after {self.config.start_timeout_s:g} s")
        return time.monotonic() - started

    def serve(self, label: str, span_s: float) -> None:
        """Run the current trial: start every mesh at one common time (each leader gets its
        mesh's work), and wait until every rank has finished it; a progress bar (``label``)
        counts the seconds of the ``span_s``-second replay gone by (the drain after it runs on)."""
        t0 = time.monotonic() + self.config.lead_s
        for p in self.plans:
            self.beat[p.group] = t0
        leaders = {p.group: p.work for p in self.plans}
        for spec, conn in zip(self.specs, self.commands):
            work = leaders[spec.group] if spec.rank == spec.mesh_ranks[0] else None
            try:
                conn.send((t0, work))
            except (BrokenPipeError, OSError):
                raise ExecutorError(f"LLM worker rank {spec.rank} is gone (its command pipe is closed)") from None
        bar = ProgressBar(label, total=max(int(math.ceil(span_s)), 1), unit="s")
        while len(self.trial_done) < len(self.specs):
            self.poll(0.05)
            self.check(True)
            bar.update(max(0, int(time.monotonic() - t0)), postfix=f"meshes done {len(self.trial_done)}/{len(self.specs)}")
        bar.close(postfix=f"meshes done {len(self.trial_done)}/{len(self.specs)}")


PROBE_DRAIN_S = 5.0  # the probe's horizon beyond its last slot


def host_probe_plans(plans: List[MeshPlan], cfg: Any, max_batch: int) -> Tuple[List[MeshPlan], int, float]:
    """The host probe's meshes (:mod:`.llm_probe`): each trial mesh's scheduler, shares and
    pool with its probe requests (numbered after the previous meshes'), the number of probe
    requests and the longest mesh's span."""
    out, n, span = [], 0, 0.0
    for p in plans:
        tp = len(p.devices)
        bounds = [_job_bounds(p.work.requests, k, max_batch) for k in range(len(p.specs))]
        archs = [s.architecture for s in p.specs]
        ppb = [pages_per_block(a, archs, tp) for a in archs]
        req, mesh_span = probe_requests(p.specs, bounds, tp, p.work.llms.share.tolist(), cfg, max_batch, ppb,
                                        p.pool_pages)
        settings = p.work.settings._replace(horizon=mesh_span + PROBE_DRAIN_S)
        out.append(dataclasses.replace(p, requests=np.arange(n, n + len(req.arrival)),
                                       work=MeshWork(req, p.work.llms, settings)))
        n += len(req.arrival)
        span = max(span, mesh_span)
    return out, n, span


def engine_max_batch(cfg: Any, mesh_requests: Sequence[int]) -> int:
    """The most requests the engine batches in one job: the instance's ``max_batch``, at most the
    most requests of one mesh (``mesh_requests``: each mesh's count)."""
    return max(1, min(cfg.max_batch, max(mesh_requests, default=1)))


def _host_entry(specs: Sequence[LLMSpec], shares: Sequence[float], tp: int, cfg: Any,
                measured: List[Optional[float]]) -> dict:
    """One mesh's decode host seconds as ``summary.json`` holds them: per LLM, read and calibrated."""
    return {"models": [s.name for s in specs], "decode_host_s": measured,
            "calibrated_s": [simllm.host_seconds(cfg, sh, tp)[0] for sh in shares]}


def measure_host(run: "_Run", probe: List[MeshPlan], cfg: Any, max_batch: int) -> Dict[int, dict]:
    """Each probe mesh's decode host seconds per LLM (:func:`.llm_probe.decode_host_seconds`)
    from the probe trial's token times, beside the calibrated value (:func:`host_seconds`)."""
    out = {}
    for p in probe:
        tp, shares = len(p.devices), p.work.llms.share.tolist()
        times = [run.token_times.get(int(i), []) for i in p.requests]
        out[p.group] = _host_entry(p.specs, shares, tp, cfg,
                                   decode_host_seconds(p.specs, tp, shares, cfg, max_batch, p.work.requests, times))
    return out


def read_trial_host(instance: Instance, placement: Placement, req: Requests, policy: str,
                    token_times: Sequence[Sequence[float]], preempted: Sequence[bool]) -> Dict[int, dict]:
    """Per mesh of ``placement`` that runs one job at a time, the decode host seconds per LLM its
    trial's own steps took (:func:`.llm_probe.trial_decode_host` over ``token_times[i]``, request
    i's token times; the requests split over the meshes as the simulator splits them; pairs of
    steps with a request that was ever ``preempted`` left out: its recompute is a prefill), beside
    the calibrated value; the other meshes are left out."""
    cfg = effective_llm_config(instance, placement_rules(placement))
    meshes = _meshes(instance, placement, req, policy)
    max_batch = engine_max_batch(cfg, [len(m.requests) for m in meshes])
    out = {}
    for m in meshes:
        tp = placement.groups[m.group].tp
        measured = trial_decode_host(m.specs, tp, m.shares, cfg, max_batch, m.local,
                                     [token_times[i] for i in m.requests],
                                     skip={k for k, i in enumerate(m.requests) if preempted[i]})
        if measured is not None:
            out[m.group] = _host_entry(m.specs, m.shares, tp, cfg, measured)
    return out


def _measured_run(run: _Run, plans: List[MeshPlan], n_specs: int, n_groups: int, duration: float
                  ) -> simllm.LLMRun:
    """The measured outcome in the simulator's form (per request; per group its utilisation)."""
    stop = duration
    kv_share = np.zeros(n_specs)
    groups: List[dict] = [{"models": [], "sm_utilisation": 0.0, "kv_utilisation": 0.0} for _ in range(n_groups)]
    for p in plans:
        tot = run.mesh_totals.get(p.group)
        pool_kib = int(p.work.settings.pool)
        names = [s.name for s in p.specs]
        if tot is None:  # the run stopped before this mesh finished
            groups[p.group] = {"models": names, "sm_utilisation": 0.0, "kv_utilisation": 0.0, "incomplete": True}
            continue
        span = max(tot["stop_s"], 1e-9)
        stop = max(stop, tot["stop_s"])
        for k, s in enumerate(p.specs):
            kv_share[s.index] += tot["kv_llm_time"][k] / (span * pool_kib)
        groups[p.group] = {"models": names, "sm_share": p.work.llms.share.tolist(),
                           "kv_pool_gb": round(pool_kib * KIB / 1e9, 3),
                           "kv_peak_utilisation": tot["peak_kv_kib"] / pool_kib,
                           "sm_utilisation": tot["sm_time"] / span,
                           "kv_utilisation": tot["kv_time"] / (span * pool_kib),
                           "preemptions": tot["preemptions"]}
    return simllm.LLMRun(first=run.first, finish=run.finish, preempt=run.preempt, stop=stop, group_metrics=groups,
                         kv_share=kv_share)


def _rel(measured: Optional[float], simulated: Optional[float]) -> Optional[float]:
    """|measured - simulated| / simulated, None when either is missing or the prediction is 0."""
    if measured is None or simulated is None or simulated == 0:
        return None
    return abs(measured - simulated) / abs(simulated)


def compare(measured: dict, simulated: dict) -> dict:
    """The fidelity figures of one run: relative errors (fractions) and attainment points."""
    per = {name: _rel(m["throughput_rps"], simulated["per_model"][name]["throughput_rps"])
           for name, m in measured["per_model"].items()}
    known = [v for v in per.values() if v is not None]
    return {"throughput_err": _rel(measured["throughput_rps"], simulated["throughput_rps"]),
            "tokens_per_s_err": _rel(measured["tokens_per_s"], simulated["tokens_per_s"]),
            "per_llm_throughput_err": per, "max_llm_err": max(known) if known else None,
            "ttft_err": _rel(measured["ttft_mean_s"], simulated["ttft_mean_s"]),
            "tpot_err": _rel(measured["tpot_mean_s"], simulated["tpot_mean_s"]),
            "slo_attainment_pp": 100.0 * (measured["slo_attainment"] - simulated["slo_attainment"])}


def requests_csv(req: Requests, names: Sequence[str], prompt: np.ndarray, output: np.ndarray, mesh_of: np.ndarray,
                 run: _Run, predicted: simllm.LLMRun) -> str:
    """One row per request: lengths, mesh, measured and simulated times, every token's time."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["request", "model", "group", "arrival_s", "prompt_tokens", "output_tokens", "first_token_s",
                "finish_s", "simulated_first_token_s", "simulated_finish_s", "preemptions",
                "simulated_preemptions", "token_times_s"])

    def fmt(x: float) -> str:
        return f"{x:.6f}" if x >= 0 else ("dropped" if x == -2 else "")

    for i in range(len(req)):
        w.writerow([i, names[int(req.model[i])], int(mesh_of[i]), f"{req.arrival[i]:.6f}", int(prompt[i]),
                    int(output[i]), fmt(run.first[i]), fmt(run.finish[i]), fmt(predicted.first[i]),
                    fmt(predicted.finish[i]), int(run.preempt[i]), int(predicted.preempt[i]),
                    " ".join(f"{t:.5f}" for t in run.token_times.get(i, []))])
    return buf.getvalue()


def measured_jobs(run: _Run) -> List[tuple]:
    """Every job the mesh leaders traced: its group, then :data:`~.llm_trace.JOB_COLUMNS`."""
    return [(g, *row) for g, tot in sorted(run.mesh_totals.items()) for row in tot.get("jobs", [])]


def simulated_jobs(instance: Instance, placement: Placement, req: Requests, policy: str,
                   clock: Optional[Callable[[int, MeshLLMs, LatencyTables, MeshSettings], VirtualJobs]] = None
                   ) -> Tuple[List[tuple], np.ndarray]:
    """The simulator's job timeline of every mesh on ``req`` under ``policy``: the kernel's
    decisions and job times on the executor's virtual clock (:func:`~.llm_sched.run_virtual`,
    equality-tested against the kernel), one row per job as :func:`measured_jobs` (the GPU
    start and end are the kernel's; launch and launched its scheduling thread's; jobs still
    running at the horizon are not listed, where the executor's leader lets them end), and every
    request's first-token time in it (-1: none). ``clock(group, llms, tables, settings)``, when
    given, times each mesh's jobs instead of the kernel's model (a replay of measured times)."""
    rules = placement_rules(placement)
    cfg = effective_llm_config(instance, rules)
    pools = simllm.check_llm_groups(instance, placement.groups, llm_specs(instance), rules)
    rows: List[tuple] = []
    first = np.full(len(req), -1.0)
    for p in plan_meshes(instance, placement, req, pools, policy):
        g = placement.groups[p.group]
        trace: List[tuple] = []
        inputs = simllm.mesh_inputs(g, list(p.specs), pools[p.group], cfg, policy, p.work.settings.horizon)
        done = run_virtual(p.work.requests, *inputs, trace=trace,
                           clock=clock(p.group, *inputs) if clock is not None else None)
        first[p.requests] = done.first
        rows += [(p.group, g.models[k], *rest) for k, *rest in trace]
    return rows, first


def jobs_csv(rows: List[tuple]) -> str:
    """``jobs.csv`` (or ``simulated-jobs.csv``): one row per job (its group, then
    :data:`~.llm_trace.JOB_COLUMNS`), by group and launch time."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["group", *JOB_COLUMNS])
    first_time = 1 + JOB_COLUMNS.index("launch_s")  # the group, then the columns: counts, then times
    for row in sorted(rows, key=lambda r: (r[0], r[first_time])):
        w.writerow([*row[:first_time], *(f"{x:.6f}" for x in row[first_time:])])
    return buf.getvalue()


def execute_llm(instance: Instance, placement: Placement, out_dir: str, config: ExecutorConfig = ExecutorConfig(),
                policies: Optional[Sequence[str]] = None, log: Callable[[str], None] = lambda msg: None) -> List[dict]:
    """Run an LLM ``placement`` on real devices, one trial per policy (or one, with the
    placement's or instance's policy) on the same workers; write the files of the module
    docstring (into ``out_dir``, or ``out_dir/<policy>`` for several trials) and return the
    summaries. Raises ExecutorError after saving partial results when a worker fails or
    hangs; re-raises KeyboardInterrupt likewise."""
    backend = config.resolved_backend()
    pools = check_llm_executable(instance, placement, backend)
    for p in policies or []:
        if p not in POLICIES:
            raise InputError(f"must be one of {', '.join(POLICIES)}, got {p!r}", "--policy")
    asked: List[Optional[str]] = list(policies) if policies else [None]
    chosen = [simllm.resolve_policy(instance, placement, p) for p in asked]
    if len(chosen) > 1 and "temporal" in chosen:
        raise InputError("temporal gives every job all SMs: run it alone, not beside other policies", "--policy")
    req = replay_requests(instance, config.duration_s)
    trials = [(policy, plan_meshes(instance, placement, req, pools, policy)) for policy in chosen]
    cfg = effective_llm_config(instance, placement_rules(placement))
    max_batch = engine_max_batch(cfg, [len(p.requests) for p in trials[0][1]])
    with rendezvous() as init:
        specs = worker_specs(instance, trials[0][1], backend, config, max_batch, init)
        os.makedirs(out_dir, exist_ok=True)
        run = _Run(specs, config)
        log(f"started {len(specs)} LLM workers ({backend}), pids {' '.join(str(p.pid) for p in run.procs)}")
        summaries: List[dict] = []
        startup: Optional[float] = None
        probe: Optional[Dict[int, dict]] = None
        in_flight: Optional[int] = None  # the trial replaying (not the probe, not between trials or after the last)
        where = out_dir
        began = 0.0  # the trial in flight's replay start (Unix seconds)
        try:
            startup = run.wait_ready()
            log(f"workers ready after {startup:.1f} s ({_warmup_line(run.ready)})")
            hardware = tables_device(instance, run.ready)
            if hardware["tables_match_device"] is False:
                log(f"warning: the cost tables were measured on {', '.join(hardware['tables_gpu'])}, the workers run on "
                    f"{', '.join(hardware['device_names'])}: the simulated figures predict another GPU")
            if config.host_probe:
                probe_plans, n_probe, span = host_probe_plans(trials[0][1], cfg, max_batch)
                run.begin(probe_plans, n_probe)
                run.serve("host probe", span)
                probe = measure_host(run, probe_plans, cfg, max_batch)
                log(_host_line("host probe", probe))
                run.plans = []
            for i, (policy, plans) in enumerate(trials):
                where = os.path.join(out_dir, policy) if len(trials) > 1 else out_dir
                began = time.time()
                in_flight = i
                run.begin(plans, len(req))
                log(f"policy {policy}: replaying {len(req)} requests over {req.duration_s:g} s")
                run.serve(f"execute {policy}", req.duration_s)
                summaries.append(_save(_Trial(instance, placement, req, plans, pools, policy, probe,
                                              (began, time.time())), run, backend, "complete", startup, where))
                in_flight = None
                log(f"policy {policy}: throughput measured {summaries[-1]['measured']['throughput_rps']:.3f} req/s, "
                    f"simulated {summaries[-1]['simulated']['throughput_rps']:.3f}")
                if "host_in_run" in summaries[-1]:
                    log(_host_line(f"policy {policy}: the trial's own", {int(g): v for g, v in
                                                                         summaries[-1]["host_in_run"].items()}))
            run.stop(30.0)
        except (ExecutorError, KeyboardInterrupt) as e:
            run.kill()
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else f"failed: {e}"
            if in_flight is not None:  # the trial cut short (a failed probe measured nothing of the trials; a
                # stop after the last trial keeps every trial as saved)
                summaries.append(_save(_Trial(instance, placement, req, run.plans, pools, trials[in_flight][0], probe,
                                              (began, time.time())), run, backend, status, startup, where))
            _write_index(out_dir, summaries)
            if isinstance(e, ExecutorError):
                raise ExecutorError(f"{e}; partial results saved in {out_dir}") from None
            raise
        except BaseException:
            run.kill()
            raise
        _write_index(out_dir, summaries)
        return summaries


#: a GPU model in a name or label: a capital and two or three digits standing alone (H100, A100, L40)
GPU_MODEL = re.compile(r"(?<![A-Z0-9])([A-Z]\d{2,3})(?!\d)")


def gpu_models(text: str) -> set:
    """The GPU models ``text`` names (``NVIDIA H100 80GB HBM3`` and ``H100-80GB``: {H100})."""
    return set(GPU_MODEL.findall(text.upper()))


def tables_device(instance: Instance, ready: Dict[int, Any]) -> dict:
    """The GPU the instance's LLM cost tables were measured on (their ``gpu`` labels) against
    the GPUs the workers run on (``device_name`` of their ready reports): ``tables_match_device``
    False where a worker's GPU is not a table's (the simulated figures then predict another GPU:
    an H200 ran the H100 tables' steps 5-9% faster), None where either side names no GPU model
    (CPUs, tables without a label, the roofline estimate)."""
    labels = sorted({t.gpu for t in instance.llm_cost_tables if t is not None and t.gpu})
    names = sorted({str(v.get("device_name", "")) for v in ready.values()})
    known = labels and names and all(gpu_models(x) for x in labels + names)
    match = all(gpu_models(lb) <= gpu_models(n) for lb in labels for n in names) if known else None
    return {"tables_gpu": labels, "device_names": names, "tables_match_device": match}


def _host_line(label: str, host: Dict[int, dict]) -> str:
    """One log line of decode host seconds measured per group and LLM (:func:`measure_host`)."""
    return f"{label}: decode host ms per step " + "; ".join(
        f"group {g}: " + ", ".join(f"{m} {'-' if h is None else f'{1e3 * h:.2f}'} (calibrated {1e3 * c:.2f})"
                                   for m, h, c in zip(v["models"], v["decode_host_s"], v["calibrated_s"]))
        for g, v in sorted(host.items()))


def _warmup_line(ready: Dict[int, Any]) -> str:
    """What the slowest worker's start-up prepared, for the log."""
    w = max((v.get("warmup") or {} for v in ready.values()), key=lambda x: x.get("warm_up_s", 0.0), default={})
    return (f"warm-up {w.get('warm_up_s', 0):.1f} s: {w.get('decode_graphs', 0)} decode graphs in "
            f"{w.get('decode_capture_s', 0):.1f} s, {w.get('prefill_graphs', 0)} prefill graphs of "
            f"{w.get('prefill_buckets', 0)} buckets in {w.get('prefill_capture_s', 0):.1f} s")


class _Trial(NamedTuple):
    """One trial's inputs: what ran and how the simulator sees it."""

    instance: Instance
    placement: Placement
    requests: Requests
    plans: List[MeshPlan]
    pools: List[float]
    policy: str
    probe: Optional[Dict[int, dict]] = None  # the host probe's measurements (:func:`measure_host`), if it ran
    wall: Optional[Tuple[float, float]] = None  # the trial's replay start and end, Unix seconds


def _write_index(out_dir: str, summaries: List[dict]) -> None:
    """``trials.json``: one row per trial with its status and headline errors."""
    rows = [{"policy": s["policy"], "status": s["status"], "throughput_measured_rps": s["measured"]["throughput_rps"],
             "throughput_simulated_rps": s["simulated"]["throughput_rps"], **{k: v for k, v in s["errors"].items()
                                                                             if k != "per_llm_throughput_err"}}
            for s in summaries]
    atomic_write_json(os.path.join(out_dir, "trials.json"), rows)


def _save(trial: _Trial, run: _Run, backend: str, status: str, startup: Optional[float], out_dir: str) -> dict:
    """Write metrics.json, simulated.json, requests.csv and summary.json; returns the summary."""
    instance, placement, req, plans, pools, policy, probe, wall = trial
    os.makedirs(out_dir, exist_ok=True)
    cfg = effective_llm_config(instance, placement_rules(placement))
    specs = llm_specs(instance)
    prompt, output = simllm._with_lengths(instance, req)
    all_req = MeshRequests(arrival=req.arrival, llm=req.model, prompt=prompt, output=output)
    predicted = simllm._simulate_meshes(placement.groups, pools, specs, all_req, req.duration_s, cfg, policy)
    slo = simllm.request_slo_seconds(instance, specs, req, prompt, output)
    simulated = simllm.llm_metrics(specs, req, output, slo, placement.groups, predicted, policy)
    measured_run = _measured_run(run, plans, len(specs), len(placement.groups), req.duration_s)
    measured = simllm.llm_metrics(specs, req, output, slo, placement.groups, measured_run, policy)
    index = {s.name: s.index for s in specs}
    mesh_of = simllm._mesh_of_requests(placement.groups, index, req.model)
    facts = {"status": status, "backend": backend, "policy": policy, "workers": len(run.specs),
             "startup_s": startup, "cuda_graphs": any(s.engine.cuda_graphs for s in run.specs),
             "sm_partitioning": sorted({str(v.get("mechanism")) for v in run.ready.values()}),
             "op_channel": run.config.op_channel, **tables_device(trial.instance, run.ready),
             "worker_info": {str(k): v for k, v in sorted(run.ready.items())},
             "pool_pages": {str(p.group): p.pool_pages for p in plans},
             "cold_buckets": {str(g): t.get("cold_buckets") for g, t in sorted(run.mesh_totals.items())},
             "eager_prefills": {str(g): t.get("eager_prefills") for g, t in sorted(run.mesh_totals.items())},
             "instance_sha256": instance.sha256, "duration_s": req.duration_s,
             "trial_wall_s": list(wall) if wall else None}
    summary = {"measured": measured, "simulated": simulated, "errors": compare(measured, simulated), **facts}
    atomic_write_json(os.path.join(out_dir, "metrics.json"), measured)
    atomic_write_json(os.path.join(out_dir, "simulated.json"), simulated)
    atomic_write_text(os.path.join(out_dir, "requests.csv"),
                      requests_csv(req, instance.model_names, prompt, output, mesh_of, run, predicted))

    def with_host(key: str, suffix: str, host: Dict[int, dict]) -> None:
        """The prediction made again with the decode host seconds ``host`` measured on this machine."""
        again = simllm._simulate_meshes(placement.groups, pools, specs, all_req, req.duration_s, cfg, policy,
                                        {g: v["decode_host_s"] for g, v in host.items()})
        metrics = simllm.llm_metrics(specs, req, output, slo, placement.groups, again, policy)
        summary[key] = {str(g): v for g, v in sorted(host.items())}
        summary[f"simulated_with_{suffix}"] = metrics
        summary[f"errors_with_{suffix}"] = compare(measured, metrics)

    try:  # secondary predictions: a fault in them must not cost the trial's measurements
        if probe is not None:
            with_host("host_probe", "probe", probe)
        if status == "complete":
            in_run = read_trial_host(instance, placement, req, policy,
                                     [run.token_times.get(i, []) for i in range(len(req))], (run.preempt > 0).tolist())
            if in_run:
                with_host("host_in_run", "in_run_host", in_run)
    except Exception as e:  # noqa: BLE001 - recorded in the summary, the measured files stand
        summary["host_reading_error"] = f"{type(e).__name__}: {e}"
    atomic_write_json(os.path.join(out_dir, "summary.json"), summary)
    measured_rows = measured_jobs(run)
    if measured_rows:  # after the summary: the simulated timeline takes seconds of Python
        atomic_write_text(os.path.join(out_dir, "jobs.csv"), jobs_csv(measured_rows))
        atomic_write_text(os.path.join(out_dir, "simulated-jobs.csv"),
                          jobs_csv(simulated_jobs(instance, placement, req, policy)[0]))
    return summary
