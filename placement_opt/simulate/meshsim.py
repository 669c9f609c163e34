"""Numba kernel: iteration-level simulation of one mesh serving several LLMs (MuxServe).

Every LLM ``k`` on the mesh has two job slots: a **prefill** job (a batch of waiting
prompts, up to ``max_batch`` requests in the LLM's batch and ``token_budget`` prompt
tokens) and a **decode** job (one step of its running batch; requests whose prefill ends
join the next step). A job holds the LLM's SM share ``share[k]`` while it runs; jobs overlap
while their shares sum to at most 1 (spatial-temporal multiplexing). A job's time is looked
up in the LLM's latency table at its share: ``prefill[k, b, :]``/``decode[k, b, :]`` over the
common length grid ``lgrid`` (prefill of ``b`` prompts of the batch's mean length; decode
step of ``b`` requests at their mean context).

KV cache: one pool of ``pool`` KiB shared by the mesh's LLMs (MuxServe's unified cache: a
token of LLM ``k`` takes ``kv_kib[k]`` KiB, its K and V of every layer), allocated in blocks
of ``block`` tokens. A prefill admits a request only if the blocks of its context plus one
token fit (and, under ADBS, the LLM's quota); a decode step that needs blocks the pool lacks
*preempts* the LLM's most recently admitted requests, whose blocks are freed and whose
context is recomputed by a later prefill (vLLM's recompute preemption).

Policies (``policy``), following the MuxServe artifact's schedulers: ADBS (0) and
ROUND_ROBIN (1) run at most one prefill at a time on the mesh, offered to the LLMs round
robin; while an admissible prefill waits for SMs no decode starts; the remaining SMs are
filled with decode jobs, offered round robin. ADBS adds KV quotas: they start in proportion
to ``rate x kv_kib`` and every ``period`` seconds ``frac`` of the least utilised LLM's unused
quota moves to the most utilised one; a prefill admits within its LLM's quota (an LLM with
nothing running may exceed it). FCFS (2) prefills only the LLM with the oldest waiting
request and starts decodes in the order of each LLM's oldest running request, stopping at
the first whose share does not fit (head-of-line blocking); no quotas. The temporal
baseline is FCFS with every share 1 (one job at a time).

A request that cannot be admitted even when nothing else runs (it needs more KV than the
whole pool) is dropped (``finish = -2``); requests unfinished at ``horizon`` keep -1.

Optional duration models (off by default, then every job ends at its start plus its table
time): **host** (``MeshLLMs.decode_host_s``/``prefill_host_s``): the mesh has one scheduling
thread; the jobs started at one moment are launched on it one after another, a decode step's
GPU work starting when its launch ends, a prefill's running during its launch (it lasts at
least that long); while the thread is busy nothing is scheduled and ended jobs wait for it
(their tokens and SMs come when it is free). **Eager prefills** (``MeshSettings.graph_tokens``,
``MeshLLMs.prefill_eager_host_s``): a prefill whose padded size (the engine's CUDA-graph
buckets) exceeds ``graph_tokens`` runs without a graph; its launch holds the thread that many
host seconds more and its job lasts that much longer (``MeshLLMs.prefill_eager_hold_s``, where
set, is the thread's hold apart from the job's delay: the engine's hold is measured directly,
the part of it the job waits for, or by which its GPU work outlasts its table time, is fitted; the
job's end is noticed when the thread is free, so at the later of the two). **KV read** (``MeshSettings.decode_kv_gbps``):
a decode step lasts the KV bytes it reads (its requests' contexts x ``MeshLLMs.kv_bytes``) /
``decode_kv_gbps`` longer than its table time (the engine's steps over mixed context lengths
exceed the profiled ones, which hold every request at the mean context); an LLM with a
**decode stretch** (``MeshLLMs.decode_stretch``) instead has its steps last that factor times
their table time (the engine's steps on a whole GPU exceed the profiled ones by a share,
not by the KV bytes they read). **Seconds per request** (``MeshLLMs.decode_request_s``): a
decode step also lasts that much more per request it holds, after the stretch or the KV read
(the engine's steps on a whole GPU exceed their tables more the larger their batch).
**Split-combine spill** (``MeshLLMs.decode_combine_s``): a decode step whose attention the
engine splits into so many parts that the kernel combining them spills out of registers
(:func:`decode_combine_spills`: a long context at a small batch) lasts that much more, after
the terms above (the profiled steps, at contexts up to 2048 tokens, never split that far).
**Effective context** (``MeshLLMs.decode_wave``): a decode
step is read off its table at :func:`decode_context`, between its requests' mean and longest
context, not at the mean. **Page-table fill**
(``MeshLLMs.decode_block_host_s``): a decode step's launch holds the thread that many seconds
per KV block its requests hold (the engine builds the step's page table on the host, an entry
per page of every block; a block is several pages for an LLM beside others of other block
sizes). **Prefill collect**
(``MeshLLMs.prefill_collect_s``): a prefill lasts that much beyond its table time (on a
tensor-parallel mesh the engine's ranks collect its first tokens after the GPU work, serially).
**Contention** (``MeshSettings.hbm_gbps``): a
running job demands ``bytes / table time`` of HBM bandwidth (``MeshLLMs.weight_bytes`` plus
the KV bytes of its tokens); each running job's remaining work is stretched by ``1 + (the
other running jobs' demand) / hbm_gbps``, re-timed at every event where the set of running
jobs changes; with a bandwidth cap (``MeshSettings.hbm_cap_gbps``) at least by ``(all the
running jobs' demand) / max(hbm_cap_gbps, its own)``: the GPU's HBM serves no more than that
in all, so jobs that together demand more share it; with a loaded-latency curve
(``MeshSettings.hbm_curve_gbps``, ``hbm_curve_power``) a decode step at least by the HBM's
access time at the load it serves the running jobs over its access time at the step's own
demand (:func:`served_latency`, :func:`hbm_latency`: a small job beside a heavy one slows more
than the heavy one) (:func:`contention_stretch`; a job alone is never stretched). **Prefills
beside others** (``MeshSettings.prefill_beside``,
``prefill_beside_delay``): a graph prefill on an SM partition, while any other job runs,
stretches by :func:`prefill_beside_stretch` instead (``prefill_beside_gbps``,
``prefill_beside_requests``: also in proportion to the other running jobs' HBM demand and to the
requests in the running decode steps; ``prefill_beside_knee``, ``prefill_beside_knee_s``: those
terms shrink as the prefill's prompt or its time alone grows, and eager prefills stretch so
too; ``prefill_beside_eager_knee_s``: an eager prefill's time knee, where set). **Beside its own decode step** (``MeshSettings.own_prefill_decode``, ``own_decode_prefill``): an LLM's prefill and decode step
share its one SM partition, so while both run each keeps that part of its speed (the decode
step's leaves the prefill's stretch beside others: :func:`prefill_factor_beside`; with
``own_prefill_decode_knee`` the decode step's part shrinks as the prefill's prompt grows:
:func:`own_prefill_decode_speed`, and with ``own_decode_prefill_knee`` the prefill's grows
towards all of it: :func:`own_decode_prefill_speed`). Calibrated on
an H100 and an H200 in ``docs/fidelity-llm.md``.

Layout: :func:`simulate_mesh` takes five named tuples: :class:`MeshRequests` (per request),
:class:`MeshLLMs` (per LLM), :class:`LatencyTables`, :class:`MeshSettings` (scalars) and
:class:`MeshOutputs` (the arrays it fills). Its state lives in structured arrays, one record
per request (:data:`REQUEST_STATE`), per LLM (:data:`LLM_STATE`), per queue slot
(:data:`SLOTS`) and per time bin (:data:`USAGE_BIN`); the scalars that change (time, SMs in
use, round-robin pointers) are local to the event loop :func:`_run` and passed to and
returned by the helpers that change them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

ADBS = 0
ROUND_ROBIN = 1
FCFS = 2

EPS = 1e-9  # slack of the "shares sum to at most 1" test and of the idle-SM reset


class MeshRequests(NamedTuple):
    """The mesh's requests, sorted by arrival (arrays of length n)."""

    arrival: np.ndarray  # float64 seconds
    llm: np.ndarray      # int64 mesh-local LLM id, 0..K-1
    prompt: np.ndarray   # int64 prompt tokens
    output: np.ndarray   # int64 output tokens


class MeshLLMs(NamedTuple):
    """The mesh's LLMs (arrays over the K LLMs). The byte counts (contention model) and host
    seconds (host model) may be empty arrays: zeros."""

    share: np.ndarray   # float64 SM share a job of the LLM holds
    kv_kib: np.ndarray  # int64 KiB of KV cache per token
    rate: np.ndarray    # float64 request rate (ADBS's initial quotas)
    weight_bytes: np.ndarray = np.zeros(0)  # float64 weight bytes per GPU a job reads once
    kv_bytes: np.ndarray = np.zeros(0)      # float64 KV bytes per token per GPU a job reads (decode) or writes (prefill)
    decode_host_s: np.ndarray = np.zeros(0)   # float64 host seconds of the scheduling thread per decode step (launch, collect)
    prefill_host_s: np.ndarray = np.zeros(0)  # float64 host seconds per prefill launch (overlaps its GPU work)
    prefill_eager_host_s: np.ndarray = np.zeros(0)  # float64 seconds an eager prefill lasts longer (MeshSettings.graph_tokens)
    prefill_eager_hold_s: np.ndarray = np.zeros(0)  # float64 host seconds an eager launch holds the thread more (0 or empty: prefill_eager_host_s)
    # float64 seconds a prefill lasts beyond its table time (TP ranks' collect; a whole GPU's start into its launch)
    prefill_collect_s: np.ndarray = np.zeros(0)
    prefill_stretch: np.ndarray = np.zeros(0)  # float64 factor on a prefill's table time (0 or empty: 1; shared SM partition)
    decode_block_host_s: np.ndarray = np.zeros(0)  # float64 host seconds of a decode launch per KV block held (page fill)
    # float64 factor on a decode step's table time, in place of the KV read (0 or empty: off)
    decode_stretch: np.ndarray = np.zeros(0)
    # float64 seconds a decode step lasts more per request it holds, after the stretch or KV read (0 or empty: off)
    decode_request_s: np.ndarray = np.zeros(0)
    # float64 requests whose decode attention programs fit on the LLM's SMs at once
    # (:func:`decode_context`; 0 or empty: steps at their mean context)
    decode_wave: np.ndarray = np.zeros(0)
    # float64 seconds a decode step lasts more when the engine's split-combine of its attention
    # spills (:func:`decode_combine_spills`; 0 or empty: off), with the LLM's KV heads per GPU
    # (int64) and the fewest splits that spill (int64, :func:`combine_spill_splits`)
    decode_combine_s: np.ndarray = np.zeros(0)
    attention_kv_heads: np.ndarray = np.zeros(0, dtype=np.int64)
    combine_spill_splits: np.ndarray = np.zeros(0, dtype=np.int64)


class LatencyTables(NamedTuple):
    """The LLMs' job times (seconds) at their SM shares, over LLM, batch size and length."""

    prefill: np.ndarray  # float64 [k, b, j]: prefill of b prompts of mean length lgrid[j]
    decode: np.ndarray   # float64 [k, b, j]: one decode step of b requests at mean context lgrid[j]
    lgrid: np.ndarray    # float64 length grid of both tables, common to the LLMs


class MeshSettings(NamedTuple):
    """The mesh's scheduling settings."""

    policy: int        # ADBS, ROUND_ROBIN or FCFS
    pool: int          # KiB of KV cache shared by the LLMs
    block: int         # tokens per KV block
    max_batch: int     # most requests in an LLM's running batch
    token_budget: int  # most prompt tokens in one prefill (a lone request may exceed it)
    period: float      # ADBS: seconds between quota re-balancings
    frac: float        # ADBS: part of the donor's unused quota moved
    horizon: float     # seconds simulated at most
    hbm_gbps: float = 0.0  # contention: a job's time stretches by 1 + (others' HBM demand) / this (GB/s); 0 off
    graph_tokens: int = 0  # eager prefills: padded prefills of more tokens run without a CUDA graph; 0 none
    decode_kv_gbps: float = 0.0  # a decode step lasts (KV bytes it reads per GPU) / this (GB/s) beyond its table time; 0 off
    own_prefill_decode: float = 0.0  # shared partition: an LLM's decode step runs at this part of its speed while its own prefill runs; 0 off
    hbm_cap_gbps: float = 0.0  # contention: a job stretches at least by (all running jobs' HBM demand) / max(this, its own); 0 off
    prefill_beside: float = 0.0  # a prefill on a partition beside other running jobs (prefill_stretches_beside): 1 + this times slower; 0 off
    prefill_beside_delay: float = 0.0  # ... and this many seconds longer (prefill_beside_stretch); 0 off
    prefill_beside_gbps: float = 0.0  # ... its stretch also adds (the other running jobs' HBM demand) / this (GB/s); 0 off
    prefill_beside_requests: float = 0.0  # ... and (the requests in the running decode steps) / this; 0 off
    prefill_beside_knee: float = 0.0  # ... both terms over 1 + (its padded prompt tokens) / this, eager prefills too; 0 off
    prefill_beside_power: float = 0.0  # ... both terms times its SM share to this power; 0 off
    prefill_at_longest: bool = False  # a prefill's table time at its longest prompt (the engine pads to it), not the mean
    own_decode_prefill: float = 0.0  # shared partition: a prefill runs at this part of its speed while its LLM's decode step runs, which leaves its beside stretch; 0 off
    prefill_at_bucket: bool = False  # a graph prefill's table time at its CUDA-graph bucket (batch to a power of two, padded length: prefill_point); eager ones at their longest
    hbm_curve_gbps: float = 0.0  # contention: the loaded-latency curve's scale, GB/s (hbm_latency): a decode step stretches at least by it at the served load over it at its own demand; 0 off
    hbm_curve_power: float = 2.0  # ... the curve's power
    prefill_beside_knee_s: float = 0.0  # a prefill's beside stretch: both terms over 1 + (its time alone) / this (seconds), eager prefills too; 0 off
    prefill_beside_eager_knee_s: float = 0.0  # ... an eager prefill's knee instead (seconds), eager prefills stretch too; 0: prefill_beside_knee_s
    own_prefill_decode_knee: float = 0.0  # own_prefill_decode over 1 + (the own prefill's padded prompt tokens) / this; 0 off
    own_decode_prefill_knee: float = 0.0  # the speed own_decode_prefill takes from a prefill over 1 + (its padded prompt tokens) / this; 0 off


class MeshOutputs(NamedTuple):
    """What the kernel writes; the bins, ``kv_llm_time`` and ``peak`` accumulate (they start at 0)."""

    first: np.ndarray          # float64 [n] first-token time, -1 none
    finish: np.ndarray         # float64 [n] finish time, -1 unfinished, -2 dropped
    preempt_count: np.ndarray  # int64 [n] times each request was preempted
    sm_bins: np.ndarray        # float64 SM share x seconds in equal time bins of [0, horizon]
    kv_bins: np.ndarray        # float64 KiB x seconds in the same bins
    kv_llm_time: np.ndarray    # float64 [K] KiB x seconds per LLM
    peak: np.ndarray           # float64 [2]: most KiB ever in use, most SM share ever in use


def mesh_outputs(n_requests: int, n_llms: int, n_bins: int) -> MeshOutputs:
    """Zeroed output arrays for a mesh of ``n_llms`` LLMs serving ``n_requests`` requests."""
    return MeshOutputs(first=np.zeros(n_requests), finish=np.zeros(n_requests),
                       preempt_count=np.zeros(n_requests, dtype=np.int64), sm_bins=np.zeros(n_bins),
                       kv_bins=np.zeros(n_bins), kv_llm_time=np.zeros(n_llms), peak=np.zeros(2))


# The kernel's state: structured arrays (records), passed to the helpers as plain arrays.
# Numba reference-counts every array a function receives or takes out of a tuple (an atomic
# update each time): state in tuples of arrays made the kernel three times slower, fields of
# records cost nothing. For the same reason the helpers that take the state and run at every
# event are inlined into the event loop (``inline="always"``): as calls they cost a tenth of
# its speed.

#: One record per request (``reqs[r]``): its input and progress.
REQUEST_STATE = np.dtype([
    ("arrival", np.float64),
    ("llm", np.int64),
    ("prompt", np.int64),
    ("output", np.int64),
    ("generated", np.int64),    # tokens generated
    ("held", np.int64),         # KV blocks held
    ("first", np.float64),      # first-token time, -1 none
    ("finish", np.float64),     # finish time, -1 unfinished, -2 dropped
    ("preemptions", np.int64),
], align=True)

#: One record per LLM (``llms[k]``): its queues' sizes, jobs in flight and KV cache.
LLM_STATE = np.dtype([
    ("share", np.float64),        # SM share of each of its jobs
    ("block_kib", np.int64),      # KiB of one KV block
    ("first_slot", np.int64),     # its part of every slot list: first_slot..end_slot-1
    ("end_slot", np.int64),
    ("next_arrival", np.int64),   # slot of its next request not yet taken from `arrivals`
    ("n_preempted", np.int64),    # size of its stack of preempted requests
    ("n_running", np.int64),      # size of its running batch
    ("n_prefill", np.int64),      # requests of its prefill job in flight (0: none)
    ("n_decode", np.int64),       # the first n_decode running requests are in its decode step
    ("prefill_end", np.float64),  # end of the prefill job in flight, inf if none
    ("decode_end", np.float64),   # end of the decode step in flight, inf if none
    ("used", np.int64),           # KiB of KV cache held
    ("quota", np.int64),          # ADBS quota in KiB (the pool under other policies)
    ("tried", np.bool_),          # FCFS: already offered a decode in this pass
    ("kv_time", np.float64),      # KiB x seconds held (accumulates into MeshOutputs.kv_llm_time)
    ("weight_bytes", np.float64), # weight bytes per GPU (contention model)
    ("kv_bytes", np.float64),     # KV bytes per token per GPU (contention model)
    ("prefill_seq", np.int64),    # start order of its prefill in flight (host model: launch order)
    ("decode_seq", np.int64),     # start order of its decode step in flight
    ("prefill_dur", np.float64),  # its prefill's table time (alone, at its share)
    ("decode_dur", np.float64),   # its decode step's table time
    ("prefill_bytes", np.float64),  # HBM bytes per GPU its prefill moves (weights, KV written)
    ("decode_bytes", np.float64),   # HBM bytes per GPU its decode step moves (weights, KV read)
    ("decode_host", np.float64),    # host seconds of the scheduling thread per decode step
    ("prefill_host", np.float64),   # host seconds per prefill launch
    ("eager_host", np.float64),     # seconds an eager prefill lasts longer (its launch, or its GPU tail)
    ("eager_hold", np.float64),     # host seconds an eager prefill's launch holds the thread more
    ("prefill_eager", np.bool_),    # its prefill in flight runs eagerly (over the graph limit)
    ("prefill_tokens", np.int64),   # its prefill in flight's padded prompt tokens (requests x longest context)
    ("prefill_collect", np.float64),  # seconds its prefill lasts beyond its table time (serial collect)
    ("prefill_stretch", np.float64),  # factor on its prefill's table time (0: 1; a partition beside others)
    ("decode_block_host", np.float64),  # host seconds of a decode step's launch per KV block its requests hold
    ("decode_stretch", np.float64),     # factor on its decode step's table time in place of the KV read (0: off)
    ("decode_request", np.float64),     # seconds its decode step lasts more per request it holds (0: off)
    ("decode_wave", np.float64),        # requests whose attention programs fit on its SMs at once (0: the mean)
    ("decode_combine", np.float64),     # seconds its decode step lasts more when its split-combine spills (0: off)
    ("attention_kv_heads", np.int64),   # its KV heads per GPU (the engine's attention split rule)
    ("combine_splits", np.int64),       # the fewest attention splits whose combine spills
    ("decode_fill", np.float64),        # host seconds of its decode step in flight's page-table fill
], align=True)

#: One record per job slot (``jobs[2k]``: LLM k's prefill, ``jobs[2k + 1]``: its decode step),
#: used only by the host and contention models (:func:`_launch_started`, :func:`_retime`).
JOB_STATE = np.dtype([
    ("start", np.float64),   # when its GPU work starts (a decode after its host launch)
    ("work", np.float64),    # seconds of GPU work left at ``mark`` were it running alone
    ("mark", np.float64),    # when ``work`` was last brought up to date
    ("demand", np.float64),  # its HBM demand running alone, GB/s per GPU
    ("factor", np.float64),  # its current stretch (contention_stretch over the part of its speed it keeps)
    ("alone", np.float64),   # its GPU time alone (table time), seconds: a prefill's stretch beside other jobs
], align=True)

#: Request ids in queue order (``slots[i]``): LLM k owns slots first_slot..end_slot-1 of each
#: list (as many as it has requests), filled from its first slot.
SLOTS = np.dtype([
    ("arrivals", np.int64),   # its requests in arrival order
    ("preempted", np.int64),  # preempted requests waiting for recompute, a stack (last preempted on top)
    ("running", np.int64),    # running requests in admission order
    ("prefill", np.int64),    # requests of the prefill job in flight
], align=True)

#: SM share x seconds and KiB x seconds in use in one time bin (accumulate into the outputs' bins).
USAGE_BIN = np.dtype([("sm", np.float64), ("kv", np.float64)], align=True)


@njit(cache=True)
def simulate_mesh(requests, mesh_llms, tables, cfg, out):
    """Simulate the mesh's ``requests`` (:class:`MeshRequests`) served by its LLMs
    ``mesh_llms`` (:class:`MeshLLMs`) with job times ``tables`` (:class:`LatencyTables`)
    under ``cfg`` (:class:`MeshSettings`).

    Writes ``out`` (:class:`MeshOutputs`): ``first`` (first-token time), ``finish`` (-1
    unfinished, -2 dropped) and ``preempt_count`` per request, ``sm_bins``/``kv_bins`` (SM
    share and KiB of KV cache in use, integrated over time in equal bins of ``[0,
    cfg.horizon]``), ``kv_llm_time`` (KiB x seconds per LLM) and ``peak`` (the most KiB and
    the most SM share ever in use). Returns the time the simulation stopped.
    """
    reqs = _request_state(requests)
    llms = _llm_state(requests, mesh_llms, cfg, out)
    slots = _arrival_lists(reqs, llms)
    usage = _usage_bins(out)
    jobs = np.zeros(2 * llms.shape[0], dtype=JOB_STATE)
    stop = _run(reqs, llms, slots, jobs, usage, out.peak, tables, cfg)
    _write_outputs(reqs, llms, usage, out)
    return stop


@njit(cache=True)
def _write_outputs(reqs, llms, usage, out):
    """Copy the outcome of every request, the time bins and the KV time per LLM to ``out``."""
    for r in range(reqs.shape[0]):
        out.first[r] = reqs[r].first
        out.finish[r] = reqs[r].finish
        out.preempt_count[r] = reqs[r].preemptions
    for b in range(usage.shape[0]):
        out.sm_bins[b] = usage[b].sm
        out.kv_bins[b] = usage[b].kv
    for k in range(llms.shape[0]):
        out.kv_llm_time[k] = llms[k].kv_time


@njit(cache=True)
def _run(reqs, llms, slots, jobs, usage, peak, tables, cfg):
    """The event loop: when the scheduling thread is free, end the jobs due, re-balance
    quotas, start jobs (launching them on the thread), drop what can never fit; then re-time
    the running jobs (contention) and advance to the next event, integrating the usage of
    the time passed into ``usage`` and the peaks into ``peak``. Returns the time the
    simulation stopped. With the host and contention models off (``cfg``'s defaults) the
    thread is always free and every job ends at its start plus its table time."""
    n = reqs.shape[0]
    sm_used = 0.0
    rr_prefill = 0  # next LLM offered a prefill (round robin)
    rr_decode = 0  # next LLM offered a decode
    arrived = 0  # requests with arrival <= t
    done = 0
    t = 0.0
    host_free = 0.0  # when the scheduling thread has launched every job started so far
    launched = 0  # start order of the last job launched
    retimed = contention_on(cfg)
    timed = retimed or _host_costs(llms)
    next_rebalance = cfg.period if cfg.policy == ADBS else np.inf
    while True:
        while arrived < n and reqs[arrived].arrival <= t:
            arrived += 1
        if t >= host_free:
            sm_used, finished = _complete_jobs(t, sm_used, reqs, llms, slots)
            done += finished
            if done == n:
                return t
            while t >= next_rebalance:
                next_rebalance += cfg.period
                _rebalance(llms, cfg.frac)
            sm_used, rr_prefill, rr_decode = _schedule(t, sm_used, rr_prefill, rr_decode, reqs, llms, slots, tables,
                                                       cfg)
            if timed:
                host_free, launched = _launch_started(t, host_free, launched, llms, jobs, cfg)
            if not _busy(llms):
                dropped = _drop_unfittable(t, reqs, llms, slots, cfg)
                if dropped > 0:
                    done += dropped
                    continue  # schedule again at the same time
        if retimed:
            _retime(t, llms, jobs, cfg)
        t_next = _next_event(t, host_free, arrived, reqs, llms, jobs, cfg)
        if t_next == np.inf:
            return t
        if cfg.policy == ADBS and _busy(llms) and t < next_rebalance < t_next:  # (<= t: due when the thread is free)
            t_next = next_rebalance
        if _record_until(t, t_next, sm_used, llms, usage, peak, cfg):
            return cfg.horizon
        t = t_next


# ---------------------------------------------------------------- initial state


@njit(cache=True)
def _request_state(requests):
    """One record per request: its input, nothing generated or held, no outcome yet."""
    n = requests.arrival.shape[0]
    reqs = np.zeros(n, dtype=REQUEST_STATE)
    for r in range(n):
        reqs[r].arrival = requests.arrival[r]
        reqs[r].llm = requests.llm[r]
        reqs[r].prompt = requests.prompt[r]
        reqs[r].output = requests.output[r]
        reqs[r].first = -1.0
        reqs[r].finish = -1.0
    return reqs


@njit(cache=True)
def _llm_state(requests, mesh_llms, cfg, out):
    """One record per LLM: its slots (as many as its requests), empty queues, no job in flight,
    its initial quota, the KV time ``out`` holds."""
    K = mesh_llms.share.shape[0]
    count = np.zeros(K, dtype=np.int64)
    for r in range(requests.llm.shape[0]):
        count[requests.llm[r]] += 1
    llms = np.zeros(K, dtype=LLM_STATE)
    start = 0
    for k in range(K):
        llms[k].share = mesh_llms.share[k]
        llms[k].block_kib = cfg.block * mesh_llms.kv_kib[k]
        llms[k].first_slot = start
        start += count[k]
        llms[k].end_slot = start
        llms[k].next_arrival = llms[k].first_slot
        llms[k].prefill_end = np.inf
        llms[k].decode_end = np.inf
        llms[k].kv_time = out.kv_llm_time[k]
        if mesh_llms.weight_bytes.shape[0] == K:
            llms[k].weight_bytes = mesh_llms.weight_bytes[k]
        if mesh_llms.kv_bytes.shape[0] == K:
            llms[k].kv_bytes = mesh_llms.kv_bytes[k]
        if mesh_llms.decode_host_s.shape[0] == K:
            llms[k].decode_host = mesh_llms.decode_host_s[k]
        if mesh_llms.prefill_host_s.shape[0] == K:
            llms[k].prefill_host = mesh_llms.prefill_host_s[k]
        if mesh_llms.prefill_eager_host_s.shape[0] == K:
            llms[k].eager_host = mesh_llms.prefill_eager_host_s[k]
        if mesh_llms.prefill_collect_s.shape[0] == K:
            llms[k].prefill_collect = mesh_llms.prefill_collect_s[k]
        if mesh_llms.prefill_stretch.shape[0] == K:
            llms[k].prefill_stretch = mesh_llms.prefill_stretch[k]
        if mesh_llms.decode_block_host_s.shape[0] == K:
            llms[k].decode_block_host = mesh_llms.decode_block_host_s[k]
        if mesh_llms.decode_stretch.shape[0] == K:
            llms[k].decode_stretch = mesh_llms.decode_stretch[k]
        if mesh_llms.decode_request_s.shape[0] == K:
            llms[k].decode_request = mesh_llms.decode_request_s[k]
        if mesh_llms.decode_wave.shape[0] == K:
            llms[k].decode_wave = mesh_llms.decode_wave[k]
        if mesh_llms.decode_combine_s.shape[0] == K:
            llms[k].decode_combine = mesh_llms.decode_combine_s[k]
            llms[k].attention_kv_heads = mesh_llms.attention_kv_heads[k]
            llms[k].combine_splits = mesh_llms.combine_spill_splits[k]
        llms[k].eager_hold = llms[k].eager_host
        if mesh_llms.prefill_eager_hold_s.shape[0] == K and mesh_llms.prefill_eager_hold_s[k] > 0:
            llms[k].eager_hold = mesh_llms.prefill_eager_hold_s[k]
    _initial_quotas(llms, mesh_llms, cfg)
    return llms


@njit(cache=True)
def _initial_quotas(llms, mesh_llms, cfg):
    """ADBS: the pool split in proportion to rate x KiB per token (evenly if no LLM has a
    rate); other policies: the whole pool for every LLM."""
    K = llms.shape[0]
    for k in range(K):
        llms[k].quota = cfg.pool
    if cfg.policy == ADBS:
        rate, kv_kib = mesh_llms.rate, mesh_llms.kv_kib
        demand = 0.0
        for k in range(K):
            demand += rate[k] * kv_kib[k]
        for k in range(K):
            llms[k].quota = np.int64(cfg.pool * (rate[k] * kv_kib[k] / demand if demand > 0 else 1.0 / K))


@njit(cache=True)
def _usage_bins(out):
    """One record per time bin, holding what ``out``'s bins hold."""
    usage = np.empty(out.sm_bins.shape[0], dtype=USAGE_BIN)
    for b in range(usage.shape[0]):
        usage[b].sm = out.sm_bins[b]
        usage[b].kv = out.kv_bins[b]
    return usage


@njit(cache=True)
def _arrival_lists(reqs, llms):
    """Slot lists with every request in its LLM's arrival list, in arrival order."""
    slots = np.zeros(reqs.shape[0], dtype=SLOTS)
    fill = np.empty(llms.shape[0], dtype=np.int64)
    for k in range(llms.shape[0]):
        fill[k] = llms[k].first_slot
    for r in range(reqs.shape[0]):
        slots[fill[reqs[r].llm]].arrivals = r
        fill[reqs[r].llm] += 1
    return slots


# ---------------------------------------------------------------- small rules


@njit(cache=True)
def decode_context(total, longest, n, wave):
    """The context a decode step of ``n`` requests (contexts summing to ``total``, the longest
    ``longest`` tokens) is read off its cost table at: their mean, or with ``wave`` > 0 (the
    requests whose attention programs fit on the LLM's SMs at once, ``MeshLLMs.decode_wave``)
    ``mean + min(1, wave / n) x (longest - mean)``. Why: the engine's paged attention runs one
    program per (request, KV head); while they all fit on the SMs the step lasts as long as
    the longest request's programs, and as more queue up the SMs even the load out towards
    the mean; the table was profiled with every request at one context."""
    mean = total / n
    if wave <= 0.0:
        return mean
    return mean + min(1.0, wave / n) * (longest - mean)


@njit(cache=True)
def _len_interp(row, lgrid, x):
    """A latency-table row at length ``x``: linear between grid points, extrapolated from the
    last two beyond the grid (but never below the last point), the first below it."""
    n = lgrid.shape[0]
    if n == 1 or x <= lgrid[0]:
        return row[0]
    if x >= lgrid[n - 1]:
        i = n - 2
    else:
        i = 0
        while lgrid[i + 1] < x:
            i += 1
    w = (x - lgrid[i]) / (lgrid[i + 1] - lgrid[i])
    v = row[i] + (row[i + 1] - row[i]) * w
    return v if v > row[n - 1] or w <= 1.0 else row[n - 1]


@njit(cache=True, inline="always")
def _blocks(tokens, block):
    """KV blocks of ``block`` tokens that hold ``tokens`` tokens."""
    return (tokens + block - 1) // block


@njit(cache=True, inline="always")
def _blocks_for_next_token(r, reqs, cfg):
    """Blocks request r needs for its context (prompt and generated tokens) plus one token."""
    return _blocks(reqs[r].prompt + reqs[r].generated + 1, cfg.block)


@njit(cache=True)
def padded_prefill_length(n):
    """The padded prefill length of a longest prompt of ``n`` tokens: the smallest of 16, 24,
    32, 48, 64, 96, ... (16 x 2^k and 24 x 2^k) at least ``n`` (at most a third padding). The
    LLM engine pads its prefills (and buckets their CUDA graphs) by this same rule."""
    size = 16
    while True:
        if size >= n:
            return size
        if size * 3 // 2 >= n:
            return size * 3 // 2
        size *= 2


@njit(cache=True)
def prefill_point(batch, longest, tokens, eager, at_longest, at_bucket, max_row):
    """Where a prefill of ``batch`` prompts (``tokens`` in all, the longest ``longest``) reads its
    cost table: (row, length). By default its batch at the mean prompt; ``at_longest`` (an engine
    that pads a batch to its longest prompt) at the longest; ``at_bucket`` (the LLM engine's CUDA
    graphs, which compute their bucket's whole shape) a graph prefill (not ``eager``) at its
    batch rounded up to a power of two and :func:`padded_prefill_length` of its longest prompt,
    an eager one at its longest. The row is at most ``max_row``, the table's last: the mesh
    tables hold rows up to ``llm.max_batch`` (32 in every calibrated instance, a power of two;
    with another, a bucket past it reads that row, short of the engine's). The
    profiled table holds the engine's buckets at its grid points, so between them a graph
    prefill costs its padded shape (docs/fidelity-llm.md "A graph prefill costs its bucket")."""
    if at_bucket and not eager:
        row = 1
        while row < batch:
            row *= 2
        return min(row, max_row), float(padded_prefill_length(longest))
    if at_longest or at_bucket:
        return min(batch, max_row), float(longest)
    return min(batch, max_row), tokens / batch


@njit(cache=True)
def prefill_runs_eagerly(batch, longest, graph_tokens):
    """Whether the engine runs a prefill of ``batch`` prompts, the longest ``longest`` tokens,
    eagerly: its padded size (batch rounded up to a power of two x :func:`padded_prefill_length`)
    exceeds ``graph_tokens`` (0: every prefill replays a graph)."""
    if graph_tokens <= 0:
        return False
    b = 1
    while b < batch:
        b *= 2
    return b * padded_prefill_length(longest) > graph_tokens


#: The engine's paged decode attention (``executor.llm_triton``), whose rules the simulator
#: times: tokens per iteration, the programs a step's split contexts aim at, the fewest tokens
#: of one split, the warps of the kernel that combines the splits, and the fp32 values one
#: combine program holds before its tile spills out of registers (256 per thread).
ATTENTION_TILE = 64
SPLIT_PROGRAMS = 256
SPLIT_MIN_TOKENS = 256
COMBINE_WARPS = 4
COMBINE_SPILL_VALUES = 256 * 32 * COMBINE_WARPS


@njit(cache=True)
def power_of_two_at_least(n):
    """The smallest power of two at least ``n`` (1 for ``n`` <= 1)."""
    p = 1
    while p < n:
        p *= 2
    return p


@njit(cache=True)
def attention_splits(batch, kv_heads, n_tokens):
    """(splits, tokens per split) of the engine's paged attention over ``n_tokens`` positions for
    ``batch`` requests of ``kv_heads`` KV heads per GPU: long contexts at small batches are split
    over more programs (flash-decoding), towards ``SPLIT_PROGRAMS`` in all, each split at least
    ``SPLIT_MIN_TOKENS`` tokens and a whole number of ``ATTENTION_TILE`` tiles."""
    splits = max(1, min(SPLIT_PROGRAMS // max(1, batch * kv_heads), n_tokens // SPLIT_MIN_TOKENS))
    per = -(-n_tokens // (splits * ATTENTION_TILE)) * ATTENTION_TILE  # ceil(n / splits / TILE) x TILE
    return -(-n_tokens // per), per


@njit(cache=True)
def attention_pads(group, head_dim):
    """The tile sizes of the engine's attention programs: the query heads of one KV head and the
    head size, each a power of two of at least 16 (``tl.dot``'s smallest)."""
    return max(16, power_of_two_at_least(group)), max(16, power_of_two_at_least(head_dim))


def combine_spill_splits(group: int, head_dim: int) -> int:
    """The fewest splits (a power of two) at which the engine's combine kernel spills: its
    program loads every split's partial output at once, a tile of splits (rounded up to a
    power of two) x :func:`attention_pads`, and past ``COMBINE_SPILL_VALUES`` values that tile
    no longer fits its threads' registers."""
    gp, hdp = attention_pads(group, head_dim)
    splits = 1
    while splits * gp * hdp <= COMBINE_SPILL_VALUES:
        splits *= 2
    return splits


@njit(cache=True)
def decode_combine_spills(batch, longest, block, kv_heads, spill_splits):
    """Whether the engine's decode step of ``batch`` requests, the longest of ``longest`` tokens
    (KV blocks of ``block`` tokens), spills its split-combine: the step replays the CUDA graph of
    its bucket (batch and blocks of the longest context, each rounded up to a power of two),
    whose attention splits the bucket's whole length (:func:`attention_splits` at ``kv_heads``
    KV heads per GPU) into at least ``spill_splits`` (:func:`combine_spill_splits`)."""
    if spill_splits <= 0:
        return False
    blocks = power_of_two_at_least((longest + block - 1) // block)
    splits, _ = attention_splits(power_of_two_at_least(batch), kv_heads, blocks * block)
    return power_of_two_at_least(splits) >= spill_splits


@njit(cache=True, inline="always")
def _exceeds_sms(sm_used, share):
    """Whether a job of SM share ``share`` does not fit beside the ``sm_used`` in use."""
    return sm_used + share > 1.0 + EPS


@njit(cache=True, inline="always")
def _kv_in_use(llms):
    """KiB of KV cache held by all the LLMs."""
    s = 0
    for k in range(llms.shape[0]):
        s += llms[k].used
    return s


@njit(cache=True, inline="always")
def _busy(llms):
    """Whether any job runs on the mesh."""
    for k in range(llms.shape[0]):
        if llms[k].n_prefill > 0 or llms[k].n_decode > 0:
            return True
    return False


@njit(cache=True, inline="always")
def _prefill_in_flight(llms):
    """Whether some LLM's prefill job runs (every policy runs one at a time)."""
    for k in range(llms.shape[0]):
        if llms[k].n_prefill > 0:
            return True
    return False


@njit(cache=True, inline="always")
def _head(k, t, reqs, llms, slots):
    """LLM k's next waiting request (a preempted one first), or -1."""
    llm = llms[k]
    if llm.n_preempted > 0:
        return slots[llm.first_slot + llm.n_preempted - 1].preempted
    if llm.next_arrival < llm.end_slot:
        r = slots[llm.next_arrival].arrivals
        if reqs[r].arrival <= t:
            return r
    return -1


@njit(cache=True, inline="always")
def _take_head(k, llms):
    """Remove LLM k's head request (see :func:`_head`) from its waiting queues."""
    if llms[k].n_preempted > 0:
        llms[k].n_preempted -= 1
    else:
        llms[k].next_arrival += 1


# ---------------------------------------------------------------- jobs ending


@njit(cache=True, inline="always")
def _complete_jobs(t, sm_used, reqs, llms, slots):
    """End the jobs whose end time has come, freeing their SMs. Returns the SM share still
    in use and the number of requests that finished."""
    finished = 0
    for k in range(llms.shape[0]):
        if llms[k].decode_end <= t:
            finished += _complete_decode(k, t, reqs, llms, slots)
            sm_used -= llms[k].share
        if llms[k].prefill_end <= t:
            finished += _complete_prefill(k, t, reqs, llms, slots)
            sm_used -= llms[k].share
    if sm_used < EPS:
        sm_used = 0.0
    return sm_used, finished


@njit(cache=True, inline="always")
def _emit_token(r, k, t, reqs, llms):
    """Request r (of LLM k) gets a token at t; after its last one it finishes and frees its
    KV blocks. Returns whether it finished."""
    req = reqs[r]
    req.generated += 1
    if req.generated < req.output:
        return False
    req.finish = t
    llms[k].used -= req.held * llms[k].block_kib
    req.held = 0
    return True


@njit(cache=True, inline="always")
def _complete_decode(k, t, reqs, llms, slots):
    """End LLM k's decode step: its requests get a token; the finished leave the running
    batch, the others keep their order. Returns the number finished."""
    llm = llms[k]
    keep = 0
    finished = 0
    for q in range(llm.n_running):
        r = slots[llm.first_slot + q].running
        if q < llm.n_decode and _emit_token(r, k, t, reqs, llms):
            finished += 1
            continue
        slots[llm.first_slot + keep].running = r
        keep += 1
    llm.n_running = keep
    llm.n_decode = 0
    llm.decode_end = np.inf
    return finished


@njit(cache=True, inline="always")
def _complete_prefill(k, t, reqs, llms, slots):
    """End LLM k's prefill job: its requests get their first token (a recomputed one its
    next) and join the running batch unless that was their last. Returns the number finished."""
    llm = llms[k]
    finished = 0
    for q in range(llm.n_prefill):
        r = slots[llm.first_slot + q].prefill
        if reqs[r].first < 0:
            reqs[r].first = t
        if _emit_token(r, k, t, reqs, llms):
            finished += 1
        else:
            slots[llm.first_slot + llm.n_running].running = r
            llm.n_running += 1
    llm.n_prefill = 0
    llm.prefill_end = np.inf
    return finished


@njit(cache=True)
def _rebalance(llms, frac):
    """Move ``frac`` of the least utilised LLM's unused quota to the most utilised one.

    Decode steps may take an LLM past its quota; an LLM with no unused quota donates nothing
    (else the move would run backwards, from the most utilised LLM to the least).
    """
    lo, hi = -1, -1
    ulo, uhi = np.inf, -1.0
    for k in range(llms.shape[0]):
        u = llms[k].used / llms[k].quota if llms[k].quota > 0 else 1.0
        if llms[k].quota > 0 and u < ulo:
            ulo, lo = u, k
        if u > uhi:
            uhi, hi = u, k
    if lo >= 0 and hi >= 0 and lo != hi and uhi > ulo + 0.1:
        moved = np.int64(frac * (llms[lo].quota - llms[lo].used))
        if moved > 0:
            llms[lo].quota -= moved
            llms[hi].quota += moved


# ---------------------------------------------------------------- scheduling


@njit(cache=True, inline="always")
def _schedule(t, sm_used, rr_prefill, rr_decode, reqs, llms, slots, tables, cfg):
    """Start jobs, pass after pass, until a pass starts nothing (and preempts nothing).
    Returns the SM share in use and the round-robin pointers."""
    progress = True
    while progress:
        if cfg.policy == FCFS:
            sm_used, progress = _fcfs_pass(t, sm_used, reqs, llms, slots, tables, cfg)
        else:
            sm_used, rr_prefill, rr_decode, progress = _round_robin_pass(t, sm_used, rr_prefill, rr_decode, reqs, llms,
                                                                         slots, tables, cfg)
    return sm_used, rr_prefill, rr_decode


@njit(cache=True, inline="always")
def _round_robin_pass(t, sm_used, rr_prefill, rr_decode, reqs, llms, slots, tables, cfg):
    """ADBS and ROUND_ROBIN: one prefill at a time, offered round robin; then, unless an
    admissible prefill waits for SMs, decodes, offered round robin. Returns the SM share in
    use, the pointers and whether anything started or was preempted."""
    started = False
    if not _prefill_in_flight(llms):
        sm_used, rr_prefill, started, blocked = _offer_prefill_round_robin(t, sm_used, rr_prefill, reqs, llms, slots,
                                                                           tables, cfg)
        if blocked:
            return sm_used, rr_prefill, rr_decode, started  # keep the SMs for this prefill: start no decode
    sm_used, rr_decode, offered = _offer_decodes_round_robin(t, sm_used, rr_decode, reqs, llms, slots, tables, cfg)
    return sm_used, rr_prefill, rr_decode, started or offered


@njit(cache=True, inline="always")
def _offer_prefill_round_robin(t, sm_used, rr_prefill, reqs, llms, slots, tables, cfg):
    """Offer a prefill to the LLMs from ``rr_prefill`` on; the first that can admit its head
    request takes it, or blocks the decodes if its share does not fit. Returns the SM share
    in use, the pointer, whether a prefill started and whether it is blocked."""
    K = llms.shape[0]
    use_quota = cfg.policy == ADBS
    for i in range(K):
        k = (rr_prefill + i) % K
        quota_k = llms[k].quota if use_quota else cfg.pool
        if not _head_fits(k, t, quota_k, reqs, llms, slots, cfg):
            continue
        if _exceeds_sms(sm_used, llms[k].share):
            return sm_used, rr_prefill, False, True
        if _start_prefill(k, t, quota_k, use_quota, reqs, llms, slots, tables, cfg):
            return sm_used + llms[k].share, (k + 1) % K, True, False
    return sm_used, rr_prefill, False, False


@njit(cache=True, inline="always")
def _offer_decodes_round_robin(t, sm_used, rr_decode, reqs, llms, slots, tables, cfg):
    """Offer a decode step to every LLM with a running batch and none in flight whose share
    fits, once each in round-robin order from ``rr_decode``; the pointer then moves past the
    last LLM that started. Returns the SM share in use, the pointer and whether any was offered."""
    K = llms.shape[0]
    offered = False
    start = rr_decode
    for i in range(K):
        k = (start + i) % K
        if llms[k].n_decode > 0 or llms[k].n_running == 0 or _exceeds_sms(sm_used, llms[k].share):
            continue
        if _start_decode(k, t, reqs, llms, slots, tables, cfg):
            sm_used += llms[k].share
            rr_decode = (k + 1) % K
        offered = True  # started, or preempted requests back to waiting
    return sm_used, rr_decode, offered


@njit(cache=True, inline="always")
def _fcfs_pass(t, sm_used, reqs, llms, slots, tables, cfg):
    """FCFS: the LLM with the oldest waiting request prefills; then, unless it waits for
    SMs, decodes start in the order of each LLM's oldest running request until one does not
    fit (head-of-line blocking). Returns the SM share in use and whether anything started
    or was preempted."""
    progress = False
    if not _prefill_in_flight(llms):
        best = _oldest_waiting_llm(t, reqs, llms, slots)
        if best >= 0 and _head_fits(best, t, cfg.pool, reqs, llms, slots, cfg):
            if _exceeds_sms(sm_used, llms[best].share):
                return sm_used, progress
            if _start_prefill(best, t, cfg.pool, False, reqs, llms, slots, tables, cfg):
                sm_used += llms[best].share
                progress = True
    for k in range(llms.shape[0]):
        llms[k].tried = False
    while True:
        best = _oldest_running_llm(reqs, llms, slots)
        if best < 0 or _exceeds_sms(sm_used, llms[best].share):
            break  # head-of-line: younger LLMs wait for the oldest one's SMs
        llms[best].tried = True
        if _start_decode(best, t, reqs, llms, slots, tables, cfg):
            sm_used += llms[best].share
        progress = True
    return sm_used, progress


@njit(cache=True, inline="always")
def _oldest_waiting_llm(t, reqs, llms, slots):
    """The LLM whose head request arrived first (the lowest id on ties), or -1."""
    best, best_key = -1, np.inf
    for k in range(llms.shape[0]):
        r = _head(k, t, reqs, llms, slots)
        if r >= 0 and reqs[r].arrival < best_key:
            best_key, best = reqs[r].arrival, k
    return best


@njit(cache=True, inline="always")
def _oldest_running_llm(reqs, llms, slots):
    """Among the LLMs not yet tried in this pass with a running batch and no decode step in
    flight, the one whose first running request arrived first (the lowest id on ties), or -1."""
    best, best_key = -1, np.inf
    for k in range(llms.shape[0]):
        if not llms[k].tried and llms[k].n_decode == 0 and llms[k].n_running > 0:
            oldest = slots[llms[k].first_slot].running
            if reqs[oldest].arrival < best_key:
                best_key, best = reqs[oldest].arrival, k
    return best


@njit(cache=True, inline="always")
def _head_fits(k, t, quota_k, reqs, llms, slots, cfg):
    """Whether LLM k could admit its next waiting request now (its blocks fit the pool and,
    unless the LLM runs nothing, ``quota_k``)."""
    r = _head(k, t, reqs, llms, slots)
    if r < 0 or llms[k].n_running >= cfg.max_batch:
        return False
    kib = _blocks_for_next_token(r, reqs, cfg) * llms[k].block_kib
    if _kv_in_use(llms) + kib > cfg.pool:
        return False
    return llms[k].n_running == 0 or llms[k].used + kib <= quota_k


@njit(cache=True, inline="always")
def _start_prefill(k, t, quota_k, use_quota, reqs, llms, slots, tables, cfg):
    """Admit waiting requests of LLM k (preempted first, then by arrival) while blocks, quota,
    batch size and token budget allow, and start their prefill. Returns whether it started."""
    llm = llms[k]
    unit = llm.block_kib
    total = _kv_in_use(llms)
    tokens = 0
    longest = 0
    b = 0
    while llm.n_running + b < cfg.max_batch:
        r = _head(k, t, reqs, llms, slots)
        if r < 0:
            break
        ctx = reqs[r].prompt + reqs[r].generated
        if b > 0 and tokens + ctx > cfg.token_budget:
            break
        nb = _blocks(ctx + 1, cfg.block)
        if total + nb * unit > cfg.pool:
            break
        if use_quota and llm.used + nb * unit > quota_k and not (llm.n_running == 0 and b == 0):
            break
        _take_head(k, llms)
        reqs[r].held = nb
        llm.used += nb * unit
        total += nb * unit
        slots[llm.first_slot + b].prefill = r
        b += 1
        tokens += ctx
        longest = max(longest, ctx)
    llm.n_prefill = b
    if b == 0:
        return False
    llm.prefill_eager = prefill_runs_eagerly(b, longest, cfg.graph_tokens)
    llm.prefill_tokens = b * longest
    # the partition stretch of a graph prefill (an eager one keeps its table time here; beside other
    # jobs both may stretch later, _retime)
    stretch = llm.prefill_stretch if llm.prefill_stretch > 0 and not llm.prefill_eager else 1.0
    row, length = prefill_point(b, longest, tokens, llm.prefill_eager, cfg.prefill_at_longest, cfg.prefill_at_bucket,
                                tables.prefill.shape[1] - 1)
    llm.prefill_dur = stretch * _len_interp(tables.prefill[k, row], tables.lgrid, length) + llm.prefill_collect
    llm.prefill_end = t + llm.prefill_dur
    llm.prefill_bytes = llm.weight_bytes + tokens * llm.kv_bytes
    llm.prefill_seq = _next_seq(llms)
    return True


@njit(cache=True, inline="always")
def _start_decode(k, t, reqs, llms, slots, tables, cfg):
    """Reserve the blocks of one more token for LLM k's running requests (preempting its newest
    ones while the pool lacks them) and start one decode step. Returns whether it started."""
    _preempt_until_step_fits(k, reqs, llms, slots, cfg)
    llm = llms[k]
    if llm.n_running == 0:
        return False
    ctx = 0.0
    longest = 0.0
    blocks = 0
    for q in range(llm.n_running):
        r = slots[llm.first_slot + q].running
        need = _blocks_for_next_token(r, reqs, cfg)
        if need > reqs[r].held:
            llm.used += (need - reqs[r].held) * llm.block_kib
            reqs[r].held = need
        req_ctx = reqs[r].prompt + reqs[r].generated
        ctx += req_ctx
        longest = max(longest, float(req_ctx))
        blocks += reqs[r].held
    llm.n_decode = llm.n_running
    llm.decode_fill = blocks * llm.decode_block_host
    llm.decode_dur = _len_interp(tables.decode[k, llm.n_running], tables.lgrid,
                                 decode_context(ctx, longest, llm.n_running, llm.decode_wave))
    if llm.decode_stretch > 0:
        llm.decode_dur *= llm.decode_stretch
    elif cfg.decode_kv_gbps > 0:
        llm.decode_dur += ctx * llm.kv_bytes / (cfg.decode_kv_gbps * 1e9)
    llm.decode_dur += llm.decode_request * llm.n_running
    if llm.decode_combine > 0.0 and decode_combine_spills(llm.n_running, int(longest), cfg.block,
                                                          llm.attention_kv_heads, llm.combine_splits):
        llm.decode_dur += llm.decode_combine
    llm.decode_end = t + llm.decode_dur
    llm.decode_bytes = llm.weight_bytes + ctx * llm.kv_bytes
    llm.decode_seq = _next_seq(llms)
    return True


@njit(cache=True, inline="always")
def _preempt_until_step_fits(k, reqs, llms, slots, cfg):
    """While the pool lacks the blocks LLM k's running requests need for one more token,
    preempt its newest running request: its blocks are freed and it waits on the preempted
    stack for a prefill that recomputes its context (vLLM's recompute preemption)."""
    llm = llms[k]
    unit = llm.block_kib
    total = _kv_in_use(llms)
    while llm.n_running > 0:
        extra = 0
        for q in range(llm.n_running):
            r = slots[llm.first_slot + q].running
            need = _blocks_for_next_token(r, reqs, cfg)
            if need > reqs[r].held:
                extra += need - reqs[r].held
        if total + extra * unit <= cfg.pool:
            return
        llm.n_running -= 1
        r = slots[llm.first_slot + llm.n_running].running
        llm.used -= reqs[r].held * unit
        total -= reqs[r].held * unit
        reqs[r].held = 0
        reqs[r].preemptions += 1
        slots[llm.first_slot + llm.n_preempted].preempted = r
        llm.n_preempted += 1


@njit(cache=True, inline="always")
def _drop_unfittable(t, reqs, llms, slots, cfg):
    """Nothing runs although requests may wait: a head request that can never fit (it needs
    more than the whole, now empty, pool) is dropped; the others are admitted next round.
    Returns the number dropped."""
    dropped = 0
    for k in range(llms.shape[0]):
        r = _head(k, t, reqs, llms, slots)
        if r >= 0 and _blocks_for_next_token(r, reqs, cfg) * llms[k].block_kib > cfg.pool:
            _take_head(k, llms)
            reqs[r].finish = -2.0
            dropped += 1
    return dropped


# ---------------------------------------------------------------- host thread and contention


@njit(cache=True)
def _host_costs(llms):
    """Whether any LLM's jobs cost the scheduling thread time (the host model is on)."""
    for k in range(llms.shape[0]):
        if (llms[k].decode_host > 0 or llms[k].prefill_host > 0 or llms[k].eager_host > 0 or llms[k].eager_hold > 0
                or llms[k].decode_block_host > 0):
            return True
    return False


@njit(cache=True, inline="always")
def _next_seq(llms):
    """The start order of a job started now: one more than any job's in flight or past."""
    last = 0
    for k in range(llms.shape[0]):
        last = max(last, llms[k].prefill_seq, llms[k].decode_seq)
    return last + 1


@njit(cache=True)
def _launch_started(t, host_free, launched, llms, jobs, cfg):
    """Launch the jobs started at ``t`` (start order after ``launched``) one after another
    on the mesh's scheduling thread, free from ``host_free``: a decode step's GPU work starts
    when its launch (its LLM's ``decode_host``, and ``decode_block_host`` per KV block its
    requests hold: the page-table fill) ends; a prefill's runs while the thread launches
    it (``prefill_host``), so it takes at least that long; an eager prefill (over the graph
    limit) holds the thread ``eager_hold`` longer (its kernels come one by one from the thread)
    and its job lasts ``eager_host`` longer (the part of the launch its GPU work waits for, or by
    which that work outlasts its table time; the same unless ``MeshLLMs.prefill_eager_hold_s``
    sets the hold apart). Sets each job's record and end; returns when
    the thread is free again and the last start order launched."""
    while True:
        best, best_seq = -1, np.iinfo(np.int64).max
        for k in range(llms.shape[0]):
            if llms[k].n_prefill > 0 and launched < llms[k].prefill_seq < best_seq:
                best, best_seq = 2 * k, llms[k].prefill_seq
            if llms[k].n_decode > 0 and launched < llms[k].decode_seq < best_seq:
                best, best_seq = 2 * k + 1, llms[k].decode_seq
        if best < 0:
            return host_free, launched
        launched = best_seq
        llm, job = llms[best // 2], jobs[best]
        begin = max(t, host_free)
        if best % 2 == 0:
            eager = llm.eager_host if llm.prefill_eager else 0.0
            host_free = begin + llm.prefill_host + (llm.eager_hold if llm.prefill_eager else 0.0)
            job.start, job.work, moved = begin, eager + max(llm.prefill_dur, llm.prefill_host), llm.prefill_bytes
        else:
            host_free = begin + llm.decode_host + llm.decode_fill
            job.start, job.work, moved = host_free, llm.decode_dur, llm.decode_bytes
        job.mark, job.factor = job.start, 1.0
        job.alone = llm.prefill_dur if best % 2 == 0 else llm.decode_dur
        job.demand = moved / job.work / 1e9 if job.work > 0 else 0.0
        if best % 2 == 0:
            llm.prefill_end = job.start + job.work
        else:
            llm.decode_end = job.start + job.work


@njit(cache=True, inline="always")
def contention_stretch(total, own, loaded, hbm_gbps, hbm_cap_gbps, curve_gbps, curve_power):
    """The factor a running job's time stretches by under HBM contention: ``1 + (total - own)
    / hbm_gbps`` (the other running jobs' demand ``total - own``, GB/s, slows it in proportion;
    1 when ``hbm_gbps`` is 0); where ``hbm_cap_gbps`` is set, at least ``total /
    max(hbm_cap_gbps, own)`` (the jobs together demand more than the HBM serves, so they share
    it); where ``curve_gbps`` is set, at least ``loaded / hbm_latency(own)`` (``loaded``: the
    running jobs' :func:`served_latency`; a job's memory accesses take as long as the HBM's
    load makes them, and its time alone already holds its own load's latency, so a job of small
    demand beside a heavy one slows more than the heavy one; only beside others' demand, so
    that the bisection's rounding never stretches a job alone). A job alone is never stretched.
    The one formula of the kernel, the executor's virtual clock (``llm_sched.VirtualJobs``) and
    the estimator (whose Numba cache does not see an edit here: clear ``solvers/__pycache__``
    after one)."""
    factor = 1.0 + (total - own) / hbm_gbps if hbm_gbps > 0 else 1.0
    if hbm_cap_gbps > 0 and total / max(hbm_cap_gbps, own) > factor:
        factor = total / max(hbm_cap_gbps, own)
    if curve_gbps > 0 and total > own:
        factor = max(factor, loaded / hbm_latency(own, curve_gbps, curve_power))
    return factor


@njit(cache=True, inline="always")
def hbm_latency(load, curve_gbps, curve_power):
    """The HBM's access time at ``load`` GB/s served, over its idle one: ``1 + (load /
    curve_gbps) ** curve_power`` (it rises steeply as the load nears what the HBM serves).
    Fitted on engine rounds of two and five LLMs on SM partitions of one H200
    (docs/fidelity-llm.md)."""
    return 1.0 + (load / curve_gbps) ** curve_power


@njit(cache=True)
def served_latency(offered, curve_gbps, curve_power):
    """The access-time ratio :func:`hbm_latency` at the load ``A`` the HBM serves to running jobs
    whose ``offered`` is the sum over them of ``demand x hbm_latency(demand)`` (each job's
    accesses in flight at its demand alone, by Little's law): each job is served its demand
    times its latency alone over the loaded one, so ``A x hbm_latency(A) = offered`` (solved by
    bisection; ``A`` increases with ``offered``). 1 when ``curve_gbps`` is 0."""
    if curve_gbps <= 0 or offered <= 0:
        return 1.0
    lo, hi = 0.0, offered
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if mid * hbm_latency(mid, curve_gbps, curve_power) < offered:
            lo = mid
        else:
            hi = mid
    return hbm_latency(0.5 * (lo + hi), curve_gbps, curve_power)


@njit(cache=True, inline="always")
def offered_load(demand, curve_gbps, curve_power):
    """A running job's part of :func:`served_latency`'s ``offered``: ``demand x hbm_latency(demand)``
    (0 when the curve is off)."""
    return demand * hbm_latency(demand, curve_gbps, curve_power) if curve_gbps > 0 else 0.0


@njit(cache=True, inline="always")
def contention_on(cfg):
    """Whether running jobs are re-timed as the set of running jobs changes (HBM contention or
    a decode step beside its own LLM's prefill)."""
    return (cfg.hbm_gbps > 0 or cfg.hbm_cap_gbps > 0 or cfg.hbm_curve_gbps > 0 or cfg.own_prefill_decode > 0
            or cfg.own_decode_prefill > 0 or prefill_beside_on(cfg))


@njit(cache=True, inline="always")
def prefill_beside_stretch(alone, tokens, share, others_gbps, others_requests, eager, cfg):
    """The factor a prefill on an SM partition stretches by while other jobs run on the mesh
    (other LLMs', and its own LLM's decode step unless ``own_decode_prefill`` sets that apart:
    :func:`prefill_factor_beside`) that demand ``others_gbps`` of HBM bandwidth
    and whose decode steps hold ``others_requests`` requests: ``1 + beside + (others_gbps /
    gbps + others_requests / requests) / (1 + tokens / knee) / (1 + alone / knee_s) x share **
    power + delay / alone`` (``cfg``'s ``prefill_beside``, ``prefill_beside_gbps``,
    ``prefill_beside_requests``, ``prefill_beside_knee``, ``prefill_beside_knee_s`` or, for an
    ``eager`` prefill where set, ``prefill_beside_eager_knee_s``,
    ``prefill_beside_power``, ``prefill_beside_delay``; a term whose divisor is 0 is off, and a power of 0; ``alone``: its table time, seconds; ``tokens``: its
    padded prompt tokens; ``share``: its LLM's SM share), so that beside
    the same others throughout it lasts ``(1 + ...) x alone + delay``. Measured with
    ``engine_bench.py --prefill-beside`` (a fixed stretch and delay) and on the job trace of the
    runs on SM partitions: a prefill beside four decode steps on the five-LLM GPU slows 2.4-2.8 x,
    beside one 7B decode at half the GPU 1.8 x (the others' demand); beside the 3 x load's
    batches of 40 requests more than beside the 1 x load's of 10 at the same demand (the
    requests); a prefill of a few hundred tokens twice as much as one of a few thousand, which
    is compute-bound (the knee); on one H200 a prefill on 72 SMs beside one LLM's decode steps
    more per GB/s than one on 24 beside four (the power); on the five-LLM H200 a 7B's prefill
    less than a 0.4B's of the same prompt, so the knee there is in the prefill's time alone
    (its work), not in its tokens (the time knee) (docs/fidelity-llm.md)."""
    load = ((others_gbps / cfg.prefill_beside_gbps if cfg.prefill_beside_gbps > 0 else 0.0)
            + (others_requests / cfg.prefill_beside_requests if cfg.prefill_beside_requests > 0 else 0.0))
    if cfg.prefill_beside_knee > 0:
        load /= 1.0 + tokens / cfg.prefill_beside_knee
    knee_s = cfg.prefill_beside_eager_knee_s if eager and cfg.prefill_beside_eager_knee_s > 0 else cfg.prefill_beside_knee_s
    if knee_s > 0:
        load /= 1.0 + alone / knee_s
    if cfg.prefill_beside_power > 0:
        load *= share ** cfg.prefill_beside_power
    return 1.0 + cfg.prefill_beside + load + (cfg.prefill_beside_delay / alone if alone > 0 else 0.0)


@njit(cache=True, inline="always")
def prefill_beside_on(cfg):
    """Whether prefills on partitions stretch beside other running jobs (or keep a part of their
    speed beside their own LLM's decode step: ``own_decode_prefill``)."""
    return (cfg.prefill_beside > 0 or cfg.prefill_beside_delay > 0 or cfg.prefill_beside_gbps > 0
            or cfg.prefill_beside_requests > 0 or cfg.own_decode_prefill > 0)


@njit(cache=True, inline="always")
def prefill_stretches_beside(share, eager, cfg):
    """Whether a prefill of an LLM at SM ``share`` (``eager``: over the graph limit) stretches
    by :func:`prefill_beside_stretch` beside other jobs: on a partition (share below 1) with
    that model on; a graph prefill always, an eager one where the stretch follows the prompt's
    length or time (``prefill_beside_knee``, ``prefill_beside_knee_s`` or
    ``prefill_beside_eager_knee_s`` set: the whole formula
    then applies to it, the fixed stretch and delay included, which were measured on graph
    prefills only: the trace-fitted calibrations set the fixed stretch to 0 and the delay to at
    most 0.3 ms)."""
    return prefill_beside_on(cfg) and share < 1.0 - EPS and (not eager or cfg.prefill_beside_knee > 0
                                                             or cfg.prefill_beside_knee_s > 0
                                                             or cfg.prefill_beside_eager_knee_s > 0)


@njit(cache=True, inline="always")
def prefill_factor_beside(alone, tokens, share, total, demand, decoding, n_running, own_running, own_demand,
                          own_requests, eager, cfg):
    """The stretch of a prefill on an SM partition that stretches beside others
    (:func:`prefill_stretches_beside`; table seconds ``alone``, padded prompt ``tokens``, its
    LLM's SM ``share``, its own HBM ``demand``) among ``n_running`` running jobs of the mesh (itself included) of HBM demand
    ``total`` and ``decoding`` requests in their decode steps, its own LLM's decode step among
    them when ``own_running`` (that step's ``own_demand`` and ``own_requests``): with
    ``cfg.own_decode_prefill`` on, that step shares the partition's SMs with it, so the prefill
    keeps that part of its speed and the step leaves the others of
    :func:`prefill_beside_stretch`; else every other running job counts there. 1 alone. The one
    formula of the kernel and the executor's virtual clock."""
    others_gbps = total - demand
    others_requests = decoding
    others = n_running - 1
    speed = 1.0
    if cfg.own_decode_prefill > 0 and own_running:
        others_gbps -= own_demand
        others_requests -= own_requests
        others -= 1
        speed = own_decode_prefill_speed(tokens, cfg)
    stretch = prefill_beside_stretch(alone, tokens, share, others_gbps, others_requests, eager, cfg) if others > 0 else 1.0
    return stretch / speed


@njit(cache=True)
def _retime(t, llms, jobs, cfg):
    """Contention: bring every running job's work left up to ``t`` at its old stretch, then
    stretch it by :func:`contention_stretch` (when on), and a decode step, while its LLM's
    prefill runs too (the engine runs both on the LLM's one SM partition), by 1 /
    ``cfg.own_prefill_decode`` (when on), a decode step under the loaded-latency curve too (all
    running jobs load the HBM: :func:`served_latency`); a prefill on a partition, where
    :func:`prefill_stretches_beside`, by :func:`prefill_factor_beside` (the others' demand and
    decode requests while another job runs, its own LLM's decode step apart with
    ``cfg.own_decode_prefill``; else not at all) instead; then re-time its end
    where the stretch changed. Jobs launched but not started yet and jobs ended (waiting for
    the scheduling thread) take no part."""
    total = 0.0
    offered = 0.0
    decoding = 0
    n_running = 0
    for j in range(jobs.shape[0]):
        if _running(t, llms, jobs, j):
            jobs[j].work -= (t - jobs[j].mark) / jobs[j].factor
            jobs[j].mark = t
            total += jobs[j].demand
            offered += offered_load(jobs[j].demand, cfg.hbm_curve_gbps, cfg.hbm_curve_power)
            n_running += 1
            if j % 2 == 1:
                decoding += llms[j // 2].n_decode
    loaded = served_latency(offered, cfg.hbm_curve_gbps, cfg.hbm_curve_power)
    for k in range(llms.shape[0]):  # both of an LLM's flags before either end is re-timed
        prefill_running = _running(t, llms, jobs, 2 * k)
        decode_running = _running(t, llms, jobs, 2 * k + 1)
        if prefill_running and prefill_stretches_beside(llms[k].share, llms[k].prefill_eager, cfg):
            _refactor(t, llms, jobs, 2 * k,
                      prefill_factor_beside(jobs[2 * k].alone, llms[k].prefill_tokens, llms[k].share, total,
                                            jobs[2 * k].demand, decoding, n_running, decode_running,
                                            jobs[2 * k + 1].demand, llms[k].n_decode, llms[k].prefill_eager, cfg))
        elif prefill_running:
            _restretch(t, llms, jobs, 2 * k, total, 1.0, cfg, 1.0)
        if decode_running:
            slow = own_prefill_decode_speed(llms[k].prefill_tokens, cfg) if prefill_running else 1.0
            _restretch(t, llms, jobs, 2 * k + 1, total, loaded, cfg, slow)


@njit(cache=True, inline="always")
def own_decode_prefill_speed(tokens, cfg):
    """The part of its speed a prefill of ``tokens`` padded prompt tokens keeps beside its own
    LLM's decode step on their shared SM partition (``cfg.own_decode_prefill`` on): that share,
    the part it loses over ``1 + tokens / cfg.own_decode_prefill_knee`` where that is set (a
    long prefill takes most of the partition: its decode step slows the more,
    :func:`own_prefill_decode_speed`)."""
    if cfg.own_decode_prefill_knee > 0:
        return 1.0 - (1.0 - cfg.own_decode_prefill) / (1.0 + tokens / cfg.own_decode_prefill_knee)
    return cfg.own_decode_prefill


@njit(cache=True, inline="always")
def own_prefill_decode_speed(tokens, cfg):
    """The part of its speed a decode step keeps while its own LLM's prefill of ``tokens`` padded
    prompt tokens runs on their shared SM partition: ``cfg.own_prefill_decode``, over ``1 +
    tokens / cfg.own_prefill_decode_knee`` where that is set (the step's kernels wait behind the
    prefill's, which last longer the longer its prompt); 1 where ``own_prefill_decode`` is off."""
    if cfg.own_prefill_decode <= 0:
        return 1.0
    if cfg.own_prefill_decode_knee > 0:
        return cfg.own_prefill_decode / (1.0 + tokens / cfg.own_prefill_decode_knee)
    return cfg.own_prefill_decode


@njit(cache=True, inline="always")
def _restretch(t, llms, jobs, j, total, loaded, cfg, speed):
    """Running job ``j``'s stretch: :func:`contention_stretch` of the running jobs' HBM demand
    ``total``, their :func:`served_latency` ``loaded`` and its own demand, over ``speed`` (the
    part of its speed it keeps); where it changed, its end is re-timed from ``t``. The curve
    applies to decode steps only (``loaded`` 1: off): it was fitted on them, and a prefill,
    compute-bound, keeps few accesses in flight for its time."""
    curve = cfg.hbm_curve_gbps if loaded > 1.0 else 0.0
    _refactor(t, llms, jobs, j, contention_stretch(total, jobs[j].demand, loaded, cfg.hbm_gbps, cfg.hbm_cap_gbps,
                                                   curve, cfg.hbm_curve_power) / speed)


@njit(cache=True, inline="always")
def _refactor(t, llms, jobs, j, factor):
    """Running job ``j``'s stretch set to ``factor``; where it changed, its end is re-timed from ``t``."""
    if factor != jobs[j].factor:
        jobs[j].factor = factor
        if j % 2 == 0:
            llms[j // 2].prefill_end = t + jobs[j].work * factor
        else:
            llms[j // 2].decode_end = t + jobs[j].work * factor


@njit(cache=True, inline="always")
def _running(t, llms, jobs, j):
    """Whether job slot ``j`` (``2k``: LLM k's prefill, ``2k + 1``: its decode) runs at ``t``
    (launched, its GPU work started, not ended)."""
    end = llms[j // 2].prefill_end if j % 2 == 0 else llms[j // 2].decode_end
    return end < np.inf and jobs[j].start <= t < end


# ---------------------------------------------------------------- time


@njit(cache=True, inline="always")
def _next_event(t, host_free, arrived, reqs, llms, jobs, cfg):
    """The next job end, arrival (of the first request not yet arrived), end of the
    scheduling thread's launches, or (contention) GPU start of a launched job; inf if none.
    While the thread is busy, jobs that already ended wait for it (they are no event)."""
    t_next = np.inf
    free = t >= host_free
    for k in range(llms.shape[0]):
        for end in (llms[k].prefill_end, llms[k].decode_end):
            if free or end > t:
                t_next = min(t_next, end)
        if contention_on(cfg):
            for j in (2 * k, 2 * k + 1):
                end = llms[k].prefill_end if j == 2 * k else llms[k].decode_end
                if end < np.inf and jobs[j].start > t:
                    t_next = min(t_next, jobs[j].start)
    if not free:
        t_next = min(t_next, host_free)
    if arrived < reqs.shape[0] and reqs[arrived].arrival < t_next:
        t_next = reqs[arrived].arrival
    return t_next


@njit(cache=True, inline="always")
def _record_until(t, t_next, sm_used, llms, usage, peak, cfg):
    """Record the peaks and integrate the usage of ``[t, t_next)``, cut at the horizon.
    Returns whether the horizon was reached."""
    total = _kv_in_use(llms)
    peak[0] = max(peak[0], total)
    peak[1] = max(peak[1], sm_used)
    if t_next >= cfg.horizon:
        _accumulate(t, cfg.horizon, sm_used, total, llms, usage, cfg)
        return True
    _accumulate(t, t_next, sm_used, total, llms, usage, cfg)
    return False


@njit(cache=True, inline="always")
def _accumulate(t0, t1, sm_used, used_total, llms, usage, cfg):
    """Integrate the SM and KV usage of ``[t0, t1)`` into the time bins it spans."""
    if t1 <= t0:
        return
    for k in range(llms.shape[0]):
        llms[k].kv_time += llms[k].used * (t1 - t0)
    n_bins = usage.shape[0]
    bin_w = cfg.horizon / n_bins
    while t0 < t1:
        b = int(t0 / bin_w)
        if b >= n_bins - 1:
            b = n_bins - 1
            end = t1
        else:
            end = min(t1, (b + 1) * bin_w)
            if end <= t0:  # rounding at a bin edge
                end = min(t1, (b + 2) * bin_w)
                b += 1
        usage[b].sm += sm_used * (end - t0)
        usage[b].kv += used_total * (end - t0)
        t0 = end
