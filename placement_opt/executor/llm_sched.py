"""The mesh scheduler of the LLM executor: the simulator's policy decisions, step by step.

:class:`MeshScheduler` holds one mesh's queues, KV accounting and quotas exactly as the
Numba kernel :mod:`placement_opt.simulate.meshsim` does (same rules, same order of
decisions, same integer KiB accounting), but as a Python object the engine drives with real
clocks: :meth:`MeshScheduler.complete` ends a job when the GPU says it ended,
:meth:`MeshScheduler.schedule` returns the jobs to launch now. The kernel cannot be called
step by step (it owns its event loop and its clock), so equality is proved instead:
:func:`run_virtual` drives this scheduler with the kernel's latency tables on a virtual
clock, and ``tests/test_llm_sched.py`` checks that every request's first token, finish and
preemptions equal the kernel's on random workloads for every policy, with each of the
kernel's duration terms off and on (host thread, eager prefills, prefill collect and stretch,
decode KV read, HBM and own-prefill contention; :class:`VirtualJobs` applies them: they decide
*when* the scheduler is asked, so the proof covers the decisions they lead to; on the GPU the
engine's real clock replaces them).

Rules (see ``meshsim``'s docstring for the full text): ADBS and ROUND_ROBIN run one prefill
at a time offered round robin, a waiting admissible prefill blocks new decodes, decodes
fill the remaining SMs round robin; ADBS adds KV quotas re-balanced every period. FCFS
prefills the LLM with the oldest waiting request and starts decodes oldest-first with
head-of-line blocking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, NamedTuple, Optional, Tuple

import numpy as np

from placement_opt.simulate.meshsim import (ADBS, EPS, FCFS, LatencyTables, MeshLLMs, MeshRequests, MeshSettings,
                                            contention_on, contention_stretch, decode_combine_spills, decode_context,
                                            offered_load, own_prefill_decode_speed, prefill_factor_beside,
                                            prefill_point, prefill_runs_eagerly, prefill_stretches_beside,
                                            served_latency)

PREFILL = "prefill"
DECODE = "decode"


class Job(NamedTuple):
    """One job to launch: a prefill of ``requests`` (their contexts recomputed) or one decode
    step of them; ``contexts`` are the tokens each has in its KV cache before the job."""

    kind: str
    llm: int
    requests: List[int]
    contexts: List[int]


@dataclass
class _LLM:
    """One LLM's queues and KV accounting (the kernel's ``LLM_STATE`` and slot lists)."""

    share: float
    block_kib: int
    arrivals: List[int] = field(default_factory=list)  # its requests in arrival order
    next_arrival: int = 0
    preempted: List[int] = field(default_factory=list)  # a stack: last preempted on top
    running: List[int] = field(default_factory=list)  # admission order
    prefill: List[int] = field(default_factory=list)  # the prefill job in flight
    n_decode: int = 0  # the first n_decode running requests are in the decode step in flight
    used: int = 0
    quota: int = 0
    tried: bool = False
    kv_time: float = 0.0


def _blocks(tokens: int, block: int) -> int:
    """KV blocks of ``block`` tokens that hold ``tokens`` tokens."""
    return (tokens + block - 1) // block


def len_interp(row: np.ndarray, lgrid: np.ndarray, x: float) -> float:
    """The kernel's latency-table row lookup at length ``x`` (same arithmetic, same result)."""
    n = lgrid.shape[0]
    if n == 1 or x <= lgrid[0]:
        return float(row[0])
    if x >= lgrid[n - 1]:
        i = n - 2
    else:
        i = 0
        while lgrid[i + 1] < x:
            i += 1
    w = (x - lgrid[i]) / (lgrid[i + 1] - lgrid[i])
    v = row[i] + (row[i + 1] - row[i]) * w
    return float(v if v > row[n - 1] or w <= 1.0 else row[n - 1])


class MeshScheduler:
    """One mesh's requests, LLM queues, KV accounting and policy (see the module docstring)."""

    def __init__(self, requests: MeshRequests, llms: MeshLLMs, cfg: MeshSettings):
        self.cfg = cfg
        n = len(requests.arrival)
        self.arrival = np.asarray(requests.arrival, dtype=np.float64)
        self.llm_of = [int(x) for x in requests.llm]
        self.prompt = [int(x) for x in requests.prompt]
        self.output = [int(x) for x in requests.output]
        self.generated = [0] * n
        self.held = [0] * n
        self.first = [-1.0] * n
        self.finish = [-1.0] * n
        self.preemptions = [0] * n
        self.llms = [_LLM(share=float(s), block_kib=int(cfg.block * kv)) for s, kv in zip(llms.share, llms.kv_kib)]
        for r in range(n):
            self.llms[self.llm_of[r]].arrivals.append(r)
        self.sm_used = 0.0
        self.rr_prefill = 0
        self.rr_decode = 0
        self._initial_quotas(llms)

    def _initial_quotas(self, mesh_llms: MeshLLMs) -> None:
        """ADBS: the pool split in proportion to rate x KiB per token; else the whole pool."""
        K, pool = len(self.llms), self.cfg.pool
        for llm in self.llms:
            llm.quota = pool
        if self.cfg.policy == ADBS:
            demand = 0.0
            for k in range(K):
                demand += mesh_llms.rate[k] * mesh_llms.kv_kib[k]
            for k in range(K):
                frac = mesh_llms.rate[k] * mesh_llms.kv_kib[k] / demand if demand > 0 else 1.0 / K
                self.llms[k].quota = int(np.int64(pool * frac))

    # ------------------------------------------------------------ small rules

    def kv_in_use(self) -> int:
        """KiB of KV cache held by all the LLMs."""
        return sum(llm.used for llm in self.llms)

    def busy(self) -> bool:
        """Whether any job runs on the mesh."""
        return any(llm.prefill or llm.n_decode for llm in self.llms)

    def _prefill_in_flight(self) -> bool:
        return any(llm.prefill for llm in self.llms)

    def _exceeds_sms(self, share: float) -> bool:
        return self.sm_used + share > 1.0 + EPS

    def _next_token_blocks(self, r: int) -> int:
        """Blocks request r needs for its context plus one token."""
        return _blocks(self.prompt[r] + self.generated[r] + 1, self.cfg.block)

    def _head(self, k: int, t: float) -> int:
        """LLM k's next waiting request (a preempted one first), or -1."""
        llm = self.llms[k]
        if llm.preempted:
            return llm.preempted[-1]
        if llm.next_arrival < len(llm.arrivals):
            r = llm.arrivals[llm.next_arrival]
            if self.arrival[r] <= t:
                return r
        return -1

    def _take_head(self, k: int) -> None:
        llm = self.llms[k]
        if llm.preempted:
            llm.preempted.pop()
        else:
            llm.next_arrival += 1

    def _head_fits(self, k: int, t: float, quota_k: int) -> bool:
        """Whether LLM k could admit its next waiting request now."""
        r = self._head(k, t)
        llm = self.llms[k]
        if r < 0 or len(llm.running) >= self.cfg.max_batch:
            return False
        kib = self._next_token_blocks(r) * llm.block_kib
        if self.kv_in_use() + kib > self.cfg.pool:
            return False
        return not llm.running or llm.used + kib <= quota_k

    def waiting(self, k: int, t: float) -> bool:
        """Whether LLM k has a request waiting for a prefill at time t."""
        return self._head(k, t) >= 0

    # ------------------------------------------------------------ completions

    def _emit_token(self, r: int, k: int, t: float) -> bool:
        """Request r gets a token at t; after its last one it finishes and frees its blocks."""
        self.generated[r] += 1
        if self.generated[r] < self.output[r]:
            return False
        self.finish[r] = t
        self.llms[k].used -= self.held[r] * self.llms[k].block_kib
        self.held[r] = 0
        return True

    def complete(self, kind: str, k: int, t: float) -> List[int]:
        """End LLM k's ``kind`` job at time t; returns the requests that finished."""
        llm = self.llms[k]
        done: List[int] = []
        if kind == DECODE:
            stepped, rest = llm.running[:llm.n_decode], llm.running[llm.n_decode:]
            keep: List[int] = []
            for r in stepped:
                (done if self._emit_token(r, k, t) else keep).append(r)
            llm.running = keep + rest
            llm.n_decode = 0
        else:
            for r in llm.prefill:
                if self.first[r] < 0:
                    self.first[r] = t
                if self._emit_token(r, k, t):
                    done.append(r)
                else:
                    llm.running.append(r)
            llm.prefill = []
        self.sm_used -= llm.share
        if self.sm_used < EPS:
            self.sm_used = 0.0
        return done

    def rebalance(self) -> None:
        """ADBS: move part of the least utilised LLM's unused quota to the most utilised one."""
        lo, hi, ulo, uhi = -1, -1, np.inf, -1.0
        for k, llm in enumerate(self.llms):
            u = llm.used / llm.quota if llm.quota > 0 else 1.0
            if llm.quota > 0 and u < ulo:
                ulo, lo = u, k
            if u > uhi:
                uhi, hi = u, k
        if lo >= 0 and hi >= 0 and lo != hi and uhi > ulo + 0.1:
            moved = int(np.int64(self.cfg.frac * (self.llms[lo].quota - self.llms[lo].used)))
            if moved > 0:
                self.llms[lo].quota -= moved
                self.llms[hi].quota += moved

    def drop_unfittable(self, t: float) -> List[int]:
        """Nothing runs: drop every head request that needs more than the whole pool."""
        dropped = []
        for k, llm in enumerate(self.llms):
            r = self._head(k, t)
            if r >= 0 and self._next_token_blocks(r) * llm.block_kib > self.cfg.pool:
                self._take_head(k)
                self.finish[r] = -2.0
                dropped.append(r)
        return dropped

    # ------------------------------------------------------------ job starts

    def _start_prefill(self, k: int, t: float, quota_k: int, use_quota: bool) -> Optional[Job]:
        """Admit LLM k's waiting requests while blocks, quota, batch and budget allow."""
        llm, cfg = self.llms[k], self.cfg
        unit, total, tokens = llm.block_kib, self.kv_in_use(), 0
        batch: List[int] = []
        while len(llm.running) + len(batch) < cfg.max_batch:
            r = self._head(k, t)
            if r < 0:
                break
            ctx = self.prompt[r] + self.generated[r]
            if batch and tokens + ctx > cfg.token_budget:
                break
            nb = _blocks(ctx + 1, cfg.block)
            if total + nb * unit > cfg.pool:
                break
            if use_quota and llm.used + nb * unit > quota_k and not (not llm.running and not batch):
                break
            self._take_head(k)
            self.held[r] = nb
            llm.used += nb * unit
            total += nb * unit
            batch.append(r)
            tokens += ctx
        if not batch:
            return None
        llm.prefill = batch
        self.sm_used += llm.share
        return Job(PREFILL, k, list(batch), [self.prompt[r] + self.generated[r] for r in batch])

    def _preempt_until_step_fits(self, k: int) -> None:
        """Preempt LLM k's newest running requests while the pool lacks one more token's blocks."""
        llm = self.llms[k]
        total = self.kv_in_use()
        while llm.running:
            extra = sum(max(0, self._next_token_blocks(r) - self.held[r]) for r in llm.running)
            if total + extra * llm.block_kib <= self.cfg.pool:
                return
            r = llm.running.pop()
            llm.used -= self.held[r] * llm.block_kib
            total -= self.held[r] * llm.block_kib
            self.held[r] = 0
            self.preemptions[r] += 1
            llm.preempted.append(r)

    def _start_decode(self, k: int) -> Optional[Job]:
        """Reserve one more token's blocks (preempting if needed) and start a decode step."""
        self._preempt_until_step_fits(k)
        llm = self.llms[k]
        if not llm.running:
            return None
        for r in llm.running:
            need = self._next_token_blocks(r)
            if need > self.held[r]:
                llm.used += (need - self.held[r]) * llm.block_kib
                self.held[r] = need
        llm.n_decode = len(llm.running)
        self.sm_used += llm.share
        return Job(DECODE, k, list(llm.running), [self.prompt[r] + self.generated[r] for r in llm.running])

    def schedule(self, t: float) -> List[Job]:
        """Start jobs, pass after pass, until a pass starts nothing and preempts nothing."""
        jobs: List[Job] = []
        progress = True
        while progress:
            progress = self._fcfs_pass(t, jobs) if self.cfg.policy == FCFS else self._round_robin_pass(t, jobs)
        return jobs

    def _round_robin_pass(self, t: float, jobs: List[Job]) -> bool:
        """ADBS / ROUND_ROBIN: one prefill offered round robin, then decodes round robin."""
        started = False
        if not self._prefill_in_flight():
            started, blocked = self._offer_prefill_round_robin(t, jobs)
            if blocked:
                return started
        return self._offer_decodes_round_robin(jobs) or started

    def _offer_prefill_round_robin(self, t: float, jobs: List[Job]) -> tuple[bool, bool]:
        """The first LLM from the pointer on that can admit takes the prefill (or blocks)."""
        K = len(self.llms)
        use_quota = self.cfg.policy == ADBS
        for i in range(K):
            k = (self.rr_prefill + i) % K
            quota_k = self.llms[k].quota if use_quota else self.cfg.pool
            if not self._head_fits(k, t, quota_k):
                continue
            if self._exceeds_sms(self.llms[k].share):
                return False, True
            job = self._start_prefill(k, t, quota_k, use_quota)
            if job is not None:
                jobs.append(job)
                self.rr_prefill = (k + 1) % K
                return True, False
        return False, False

    def _offer_decodes_round_robin(self, jobs: List[Job]) -> bool:
        """Offer a decode to every idle LLM with a running batch whose share fits, round robin."""
        K = len(self.llms)
        offered = False
        start = self.rr_decode
        for i in range(K):
            k = (start + i) % K
            llm = self.llms[k]
            if llm.n_decode > 0 or not llm.running or self._exceeds_sms(llm.share):
                continue
            job = self._start_decode(k)
            if job is not None:
                jobs.append(job)
                self.rr_decode = (k + 1) % K
            offered = True
        return offered

    def _fcfs_pass(self, t: float, jobs: List[Job]) -> bool:
        """FCFS: the oldest waiting LLM prefills; decodes oldest-first with head-of-line blocking."""
        progress = False
        if not self._prefill_in_flight():
            best = self._oldest_waiting_llm(t)
            if best >= 0 and self._head_fits(best, t, self.cfg.pool):
                if self._exceeds_sms(self.llms[best].share):
                    return progress
                job = self._start_prefill(best, t, self.cfg.pool, False)
                if job is not None:
                    jobs.append(job)
                    progress = True
        for llm in self.llms:
            llm.tried = False
        while True:
            best = self._oldest_running_llm()
            if best < 0 or self._exceeds_sms(self.llms[best].share):
                break
            self.llms[best].tried = True
            job = self._start_decode(best)
            if job is not None:
                jobs.append(job)
            progress = True
        return progress

    def _oldest_waiting_llm(self, t: float) -> int:
        best, key = -1, np.inf
        for k in range(len(self.llms)):
            r = self._head(k, t)
            if r >= 0 and self.arrival[r] < key:
                key, best = self.arrival[r], k
        return best

    def _oldest_running_llm(self) -> int:
        best, key = -1, np.inf
        for k, llm in enumerate(self.llms):
            if not llm.tried and llm.n_decode == 0 and llm.running:
                oldest = llm.running[0]
                if self.arrival[oldest] < key:
                    key, best = self.arrival[oldest], k
        return best


def job_seconds(job: Job, tables: LatencyTables, prefill_at_longest: bool = False, decode_wave: float = 0.0,
                prefill_at_bucket: bool = False, eager: bool = False) -> float:
    """The kernel's table time of ``job``: its table row at the batch size, a prefill where
    :func:`~placement_opt.simulate.meshsim.prefill_point` reads it (its mean prompt; its longest
    where ``prefill_at_longest``; its CUDA-graph bucket where ``prefill_at_bucket`` and not
    ``eager``: ``MeshSettings``' flags), a decode step at
    :func:`~placement_opt.simulate.meshsim.decode_context` of its contexts with its LLM's
    ``decode_wave`` (``MeshLLMs.decode_wave``; 0: the mean)."""
    b = len(job.requests)
    if job.kind == PREFILL:
        row, length = prefill_point(b, max(job.contexts), float(sum(job.contexts)), eager, prefill_at_longest,
                                    prefill_at_bucket, tables.prefill.shape[1] - 1)
        return len_interp(tables.prefill[job.llm, row], tables.lgrid, float(length))
    length = decode_context(float(sum(job.contexts)), float(max(job.contexts)), b, decode_wave)
    return len_interp(tables.decode[job.llm, b], tables.lgrid, float(length))


def _per_llm(values: np.ndarray, K: int) -> List[float]:
    """The kernel's reading of an optional per-LLM array: its values if it has K, else zeros."""
    return [float(values[k]) for k in range(K)] if len(values) == K else [0.0] * K


class VirtualJobs:
    """The kernel's job timing on a virtual clock: the jobs in flight (slot ``2k``: LLM k's
    prefill, ``2k + 1``: its decode step) with their durations (table time, a prefill's at its
    longest prompt with ``MeshSettings.prefill_at_longest`` or, a graph prefill's, at its bucket
    with ``prefill_at_bucket`` (:func:`job_seconds`), a graph prefill's
    ``MeshLLMs.prefill_stretch``, ``prefill_collect_s``, a decode step's KV read at
    ``MeshSettings.decode_kv_gbps`` or, where set, its ``MeshLLMs.decode_stretch``, and its
    ``decode_request_s`` per request and its ``decode_combine_s`` where its split-combine spills;
    at its effective context with ``MeshLLMs.decode_wave``), their
    launch on the one scheduling thread under the host model (``MeshLLMs.decode_host_s``,
    ``decode_block_host_s`` per KV block a decode step's requests hold, ``prefill_host_s``; an
    eager prefill over
    ``MeshSettings.graph_tokens``: ``prefill_eager_host_s``, ``prefill_eager_hold_s``) and their
    re-timing as the set of running jobs changes (``MeshSettings.hbm_gbps``, ``hbm_cap_gbps``,
    ``hbm_curve_gbps``, ``hbm_curve_power``: :func:`~placement_opt.simulate.meshsim.contention_stretch`;
    ``own_prefill_decode``; a prefill
    on a partition beside others: ``prefill_beside``, ``_delay``, ``_gbps``, ``_requests``,
    ``_knee``, ``_power``, and beside its own LLM's decode step ``own_decode_prefill``:
    :func:`~placement_opt.simulate.meshsim.prefill_factor_beside`). The
    same arithmetic in the same order as ``meshsim._llm_state``, ``_start_prefill``,
    ``_start_decode``, ``_launch_started``, ``_retime`` and ``_next_event``."""

    def __init__(self, llms: MeshLLMs, tables: LatencyTables, cfg: MeshSettings):
        K = len(llms.share)
        self.tables, self.cfg = tables, cfg
        self.weight_bytes = _per_llm(llms.weight_bytes, K)
        self.kv_bytes = _per_llm(llms.kv_bytes, K)
        self.decode_host = _per_llm(llms.decode_host_s, K)
        self.prefill_host = _per_llm(llms.prefill_host_s, K)
        self.eager_host = _per_llm(llms.prefill_eager_host_s, K)
        hold = _per_llm(llms.prefill_eager_hold_s, K)
        self.eager_hold = [hold[k] if hold[k] > 0 else self.eager_host[k] for k in range(K)]
        self.collect = _per_llm(llms.prefill_collect_s, K)
        self.stretch = _per_llm(llms.prefill_stretch, K)
        self.block_host = _per_llm(llms.decode_block_host_s, K)
        self.decode_stretch = _per_llm(llms.decode_stretch, K)
        self.decode_request = _per_llm(llms.decode_request_s, K)
        self.decode_wave = _per_llm(llms.decode_wave, K)
        self.combine = _per_llm(llms.decode_combine_s, K)
        self.kv_heads = [int(h) for h in _per_llm(llms.attention_kv_heads, K)]
        self.spill_splits = [int(n) for n in _per_llm(llms.combine_spill_splits, K)]
        self.retimed = bool(contention_on(cfg))
        host_costs = self.decode_host + self.prefill_host + self.eager_host + self.eager_hold + self.block_host
        self.timed = self.retimed or any(h > 0 for h in host_costs)
        self.end = [np.inf] * (2 * K)
        self.start = [0.0] * (2 * K)
        self.work = [0.0] * (2 * K)
        self.mark = [0.0] * (2 * K)
        self.demand = [0.0] * (2 * K)
        self.factor = [1.0] * (2 * K)
        self.alone = [0.0] * (2 * K)
        self.beside = [False] * (2 * K)  # a prefill that stretches beside others (prefill_stretches_beside)
        self.eagerly = [False] * (2 * K)  # a prefill that runs eagerly (over the graph limit)
        self.fixed = [False] * (2 * K)  # a job whose end a subclass set and :meth:`retime` keeps (a replay)
        self.share = [float(x) for x in llms.share]
        # per slot: its job, when its launch began and when it left the thread free (run_virtual's trace)
        self.launched: List[Optional[Tuple[Job, float, float]]] = [None] * (2 * K)

    @staticmethod
    def slot(kind: str, k: int) -> int:
        return 2 * k + (1 if kind == DECODE else 0)

    def eager(self, job: Job) -> bool:
        """Whether a prefill runs without a CUDA graph (the kernel's ``prefill_runs_eagerly``)."""
        return job.kind == PREFILL and bool(prefill_runs_eagerly(len(job.requests), max(job.contexts),
                                                                 self.cfg.graph_tokens))

    def duration(self, job: Job) -> float:
        """The job's time alone (``_start_prefill``'s ``prefill_dur``, ``_start_decode``'s
        ``decode_dur``): a graph prefill's table time stretched, plus the collect; a decode
        step's table time (at :func:`~placement_opt.simulate.meshsim.decode_context`) times its
        decode stretch where set, else plus its KV read, plus its seconds per request, plus its
        split-combine spill where it spills (:func:`~placement_opt.simulate.meshsim.decode_combine_spills`)."""
        k, ctx = job.llm, sum(job.contexts)
        if job.kind == PREFILL:
            stretch = self.stretch[k] if self.stretch[k] > 0 and not self.eager(job) else 1.0
            seconds = job_seconds(job, self.tables, self.cfg.prefill_at_longest,
                                  prefill_at_bucket=self.cfg.prefill_at_bucket, eager=self.eager(job))
            return stretch * seconds + self.collect[k]
        dur = job_seconds(job, self.tables, decode_wave=self.decode_wave[k])
        if self.decode_stretch[k] > 0:
            dur *= self.decode_stretch[k]
        elif self.cfg.decode_kv_gbps > 0:
            dur += float(ctx) * self.kv_bytes[k] / (self.cfg.decode_kv_gbps * 1e9)
        dur += self.decode_request[k] * len(job.requests)
        if self.combine[k] > 0 and decode_combine_spills(len(job.requests), max(job.contexts), self.cfg.block,
                                                         self.kv_heads[k], self.spill_splits[k]):
            dur += self.combine[k]
        return dur

    def moved(self, job: Job) -> float:
        """The bytes per GPU a job moves (its LLM's weights and its requests' KV: the contention
        model's demand over its time)."""
        return self.weight_bytes[job.llm] + float(sum(job.contexts)) * self.kv_bytes[job.llm]

    def launch(self, jobs: List[Job], t: float, host_free: float) -> float:
        """Time the jobs started at t (in start order); returns when the thread is free again."""
        for job in jobs:
            j, dur, k = self.slot(job.kind, job.llm), self.duration(job), job.llm
            self.fixed[j] = False
            if not self.timed:
                self.start[j], self.end[j], self.launched[j] = t, t + dur, (job, t, t)
                continue
            moved = self.moved(job)
            begin = max(t, host_free)
            if job.kind == PREFILL:
                eager = self.eager(job)
                delay = self.eager_host[k] if eager else 0.0
                host_free = begin + self.prefill_host[k] + (self.eager_hold[k] if eager else 0.0)
                self.start[j], self.work[j] = begin, delay + max(dur, self.prefill_host[k])
                self.beside[j] = bool(prefill_stretches_beside(self.share[k], eager, self.cfg))
                self.eagerly[j] = bool(eager)
            else:
                blocks = sum(_blocks(c + 1, self.cfg.block) for c in job.contexts)
                host_free = begin + self.decode_host[k] + blocks * self.block_host[k]
                self.start[j], self.work[j] = host_free, dur
            self.mark[j], self.factor[j], self.alone[j] = self.start[j], 1.0, dur
            self.demand[j] = moved / self.work[j] / 1e9 if self.work[j] > 0 else 0.0
            self.end[j] = self.start[j] + self.work[j]
            self.launched[j] = (job, begin, host_free)
        return host_free

    def running_job(self, j: int) -> Job:
        """The job last launched in slot ``j`` (one is: the slot's job runs)."""
        launched = self.launched[j]
        assert launched is not None, f"slot {j} never launched"
        return launched[0]

    def retime(self, t: float) -> None:
        """Work left brought up to t, then each running job re-stretched: HBM contention (when
        on) and a decode step beside its own LLM's running prefill (``own_prefill_decode``); a
        prefill on a partition beside any other running job by
        :func:`~placement_opt.simulate.meshsim.prefill_factor_beside` (the others' demand and
        decode requests, and its own LLM's decode step apart with ``own_decode_prefill``) instead
        (where ``prefill_stretches_beside``). A
        ``fixed`` job keeps its end (its demand still counts for the others)."""
        cfg = self.cfg
        total, offered, decoding = 0.0, 0.0, 0
        running = [self.end[j] < np.inf and self.start[j] <= t < self.end[j] for j in range(len(self.end))]
        for j in range(len(self.end)):
            if running[j]:
                self.work[j] -= (t - self.mark[j]) / self.factor[j]
                self.mark[j] = t
                total += self.demand[j]
                offered += offered_load(self.demand[j], cfg.hbm_curve_gbps, cfg.hbm_curve_power)
                if j % 2 == 1:
                    decoding += len(self.running_job(j).requests)
        loaded = served_latency(offered, cfg.hbm_curve_gbps, cfg.hbm_curve_power)
        n_running = sum(running)
        for j in range(len(self.end)):
            if running[j] and not self.fixed[j]:
                if j % 2 == 0 and self.beside[j]:
                    job = self.running_job(j)
                    own = running[j + 1]
                    factor = prefill_factor_beside(self.alone[j], len(job.requests) * max(job.contexts),
                                                   self.share[j // 2], total, self.demand[j], decoding, n_running,
                                                   own, self.demand[j + 1],
                                                   len(self.running_job(j + 1).requests) if own else 0,
                                                   self.eagerly[j], cfg)
                else:
                    decode = j % 2 == 1  # the curve: decode steps only (meshsim._restretch)
                    factor = contention_stretch(total, self.demand[j], loaded if decode else 1.0, cfg.hbm_gbps,
                                                cfg.hbm_cap_gbps, cfg.hbm_curve_gbps if decode and loaded > 1.0
                                                else 0.0, cfg.hbm_curve_power)
                if j % 2 == 1 and running[j - 1]:
                    prefill = self.running_job(j - 1)
                    factor /= own_prefill_decode_speed(len(prefill.requests) * max(prefill.contexts), cfg)
                if factor != self.factor[j]:
                    self.factor[j] = factor
                    self.end[j] = t + self.work[j] * factor

    def next_event(self, t: float, host_free: float) -> float:
        """The next job end (ended jobs wait while the thread is busy), GPU start, or thread free."""
        t_next = np.inf
        free = t >= host_free
        for j in range(len(self.end)):
            if free or self.end[j] > t:
                t_next = min(t_next, self.end[j])
        if self.retimed:
            for j in range(len(self.end)):
                if self.end[j] < np.inf and self.start[j] > t:
                    t_next = min(t_next, self.start[j])
        return t_next if free else min(t_next, host_free)


def run_virtual(requests: MeshRequests, llms: MeshLLMs, tables: LatencyTables, cfg: MeshSettings,
                trace: Optional[List[tuple]] = None, clock: Optional[VirtualJobs] = None) -> MeshScheduler:
    """Drive a :class:`MeshScheduler` on a virtual clock with the kernel's job times (all its
    duration terms, :class:`VirtualJobs`) and its event loop (end due
    jobs, re-balance, schedule, drop, advance while the scheduling thread is free); returns
    it finished. ``trace``, when given, gets the simulator's job timeline: per finished job
    (LLM, kind, requests, longest context, contexts summed, its launch's begin and end on the thread, its GPU
    work's start and end, the time it was collected), the executor's ``jobs.csv`` columns
    (:mod:`.llm_trace`) but the LLM's index for its name. ``clock``: a fresh job timing for
    these inputs to use instead of :class:`VirtualJobs` (it keeps the jobs' state; a subclass
    that replays measured job times: ``benchmarks/fidelity/llm/job_replay.py``)."""
    s = MeshScheduler(requests, llms, cfg)
    clock = clock if clock is not None else VirtualJobs(llms, tables, cfg)
    n = len(requests.arrival)
    t, done, arrived, host_free = 0.0, 0, 0, 0.0
    next_rebalance = cfg.period if cfg.policy == ADBS else np.inf
    while True:
        while arrived < n and s.arrival[arrived] <= t:
            arrived += 1
        if t >= host_free:
            for k in range(len(s.llms)):
                for kind in (DECODE, PREFILL):
                    j = clock.slot(kind, k)
                    if clock.end[j] <= t:
                        launched = clock.launched[j]
                        if trace is not None and launched is not None:  # every ending job was launched
                            job, begin, free = launched
                            trace.append((k, kind, len(job.requests), max(job.contexts), sum(job.contexts), begin, free,
                                          clock.start[j], clock.end[j], t))
                        clock.end[j] = np.inf
                        done += len(s.complete(kind, k, t))
            if done == n:
                return s
            while t >= next_rebalance:
                next_rebalance += cfg.period
                s.rebalance()
            host_free = clock.launch(s.schedule(t), t, host_free)
            if not s.busy():
                dropped = s.drop_unfittable(t)
                if dropped:
                    done += len(dropped)
                    continue
        if clock.retimed:
            clock.retime(t)
        t_next = clock.next_event(t, host_free)
        if arrived < n and s.arrival[arrived] < t_next:
            t_next = float(s.arrival[arrived])
        if t_next == np.inf:
            return s
        if cfg.policy == ADBS and s.busy() and t < next_rebalance < t_next:
            t_next = next_rebalance
        if t_next >= cfg.horizon:
            return s
        t = t_next
