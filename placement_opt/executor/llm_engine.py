"""The LLM engine of one mesh on one GPU (or CPU): decoders, KV pool, streams, jobs.

Every rank of a mesh holds a :class:`MeshEngine` with its TP shard of each of the mesh's
LLMs, one :class:`~.llm_kvcache.KVPool` shared by them, and per LLM a prefill and a decode
stream. :meth:`MeshEngine.launch` starts a scheduler :class:`~.llm_sched.Job` without
waiting (on GPUs its kernels are queued on the LLM's stream and an event marks its end);
:meth:`MeshEngine.finish` waits for a job, appends the greedy tokens it produced to its
requests and returns them. Every rank of a mesh launches and finishes the same jobs in the
same order, so their TP collectives pair up (each LLM has its own prefill and decode
process groups, so jobs of different LLMs, or one LLM's prefill and decode, never share a
communicator).

SM partitioning (GPU, :mod:`.llm_greenctx`): each LLM whose share is below 1 gets its streams
from a green context on its own SMs (the share of the GPU's SMs rounded down to the
architecture's granularity); ``mechanism`` says what ran: ``green-contexts`` (disjoint),
``green-contexts-overlapping`` (torch's contexts, which may share SMs), ``streams`` (plain
streams: jobs overlap with no SM limit) or ``cpu-serial`` (CPU: jobs run one after another
inside ``launch``).

Decode steps on GPUs replay CUDA graphs captured at start-up per (batch bucket, block
bucket), powers of two, on static :class:`~.llm_kvcache.DecodeInputs`; each LLM's decode
graphs share one memory pool (its decode steps never overlap each other). Decode attention is
the Triton paged kernel where it serves (``attention``: ``paged``), else the gather path, whose
buckets with gathered K and V over ``GRAPH_GATHER_LIMIT`` per layer run eagerly; a paged
kernel that fails at warm-up switches every LLM to the gather path (``attention_fallback``).

Prefills on GPUs replay CUDA graphs per (batch bucket, length bucket) (:func:`prefill_bucket`:
powers of two for the batch, lengths of 16 x 2^k and 24 x 2^k, padded on the right) on static
:class:`~.llm_kvcache.PrefillInputs`, in a memory pool of the LLM's own (its prefills never
overlap each other, but may overlap its decodes). Why graphs: a prefill was ~750 eager
launches, 60-80 ms of host time on a green-context stream (12-21 ms on a plain one;
results-v2/engine.json), during which the one scheduling thread launched nothing else;
replaying a graph costs one launch. Buckets over ``PREFILL_GRAPH_TOKENS`` tokens run eagerly
at their exact size (the warm-up runs the LLM's longest such prefill once, so the allocator
holds its memory before the replay), with attention by FlashAttention (else the
memory-efficient kernel, else the math one: ``EAGER_SDPA_BACKENDS``), never cuDNN's: cuDNN
attention builds an execution plan the first time it meets a sequence length, 56-118 ms of
host time (``benchmarks/fidelity/llm/eager_probe.py`` on an H100), and eager prefills come
at exact lengths, most of them new, so each held the scheduling thread that long (the job
trace, docs/fidelity-llm.md). Graph prefills keep the default choice (their buckets are
captured at start-up).

Start-up captures every bucket the replay can use (:func:`prefill_buckets`, bounded by each
LLM's most requests in one job and its longest request, :class:`LLMBuild`), as vLLM does,
so no capture happens while the replay's clock runs: the first H100 runs of the third engine
captured lazily, the first time a bucket was met, and their workers' first trials measured a
mean TTFT 61-81% above the simulator's (results-v3b). A bucket met during a replay that
start-up did not prepare (a bound that was wrong) is still captured then, and counted in
``cold_buckets``; ``warmup`` holds what start-up captured and how long it took.

Request token ids are synthetic and deterministic (a hash of the mesh-local request id):
the weights are random, the point is the work, and every rank derives the same ids.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from placement_opt.model import Architecture
from placement_opt.simulate.meshsim import padded_prefill_length, prefill_runs_eagerly
from placement_opt.executor.llm_kvcache import DecodeInputs, KVPool, LLMCache, PrefillInputs
from placement_opt.llm_units import page_units
from placement_opt.executor.llm_model import DecoderShard
from placement_opt.executor.llm_sched import DECODE, PREFILL, Job
from placement_opt.executor.llm_trace import JobTrace, TracedJob

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
GRAPH_GATHER_LIMIT = 512 * 2 ** 20  # bytes of gathered K and V per layer above which a decode bucket runs eagerly
PREFILL_GRAPH_TOKENS = 1024  # padded prefills of more tokens run eagerly (every LLM's prefill graph pool holds its largest)
EAGER_SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")  # an eager prefill's attention (not cuDNN's)


#: The CUDA driver feeds a context's streams to the GPU through this many hardware work queues
#: (``CUDA_DEVICE_MAX_CONNECTIONS``; the driver's default is 8, its most 32). Streams beyond them
#: share a queue, and an operation that waits for its own stream's kernels then holds every
#: stream behind it. Each LLM has a prefill and a decode stream, and each job ends with a copy of
#: its tokens that waits for its kernels (:meth:`MeshEngine.launch`): five LLMs on one H200 (10
#: streams) under the default held 13-19% of their jobs until another LLM's job ended
#: (``benchmarks/fidelity/llm/start_delay.py``). A value the user set is kept.
CONNECTIONS_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
CUDA_CONNECTIONS = 32


def widen_hardware_queues() -> str:
    """Have this process's CUDA context made with :data:`CUDA_CONNECTIONS` hardware work queues
    unless the environment already names a number; returns the number. Call it before the
    process's first CUDA context is made (the executor's workers, ``engine_bench._engine``):
    later it changes nothing."""
    return os.environ.setdefault(CONNECTIONS_VAR, str(CUDA_CONNECTIONS))


def eager_attention(device: torch.device) -> Any:
    """The context an eager prefill runs in: on GPUs, scaled-dot-product attention limited to
    ``EAGER_SDPA_BACKENDS`` (module docstring); on CPUs, none."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, b) for b in EAGER_SDPA_BACKENDS])


@dataclass(frozen=True)
class LLMBuild:
    """One LLM of the mesh: its architecture, weights seed and SM share; ``max_batch`` and
    ``longest`` bound the jobs the replay can give it (most requests in one job, tokens of its
    longest request: prompt plus output), so start-up prepares exactly the buckets those jobs
    use (0: the mesh's bounds, :class:`EngineSpec`)."""

    name: str
    architecture: Architecture
    seed: int
    share: float
    max_batch: int = 0
    longest: int = 0


@dataclass(frozen=True)
class EngineSpec:
    """What a rank builds: the mesh's LLMs, its TP position, the pool and the decode buckets."""

    llms: Tuple[LLMBuild, ...]
    tp: int
    tp_rank: int
    pool_pages: int  # pages in this GPU's pool
    block: int  # tokens per KV block
    max_batch: int
    max_blocks: int  # most blocks one request holds (its longest context + 1 token)
    cuda_graphs: bool
    green_contexts: bool = True
    attention: str = "auto"  # decode attention: auto, paged (Triton) or gather (llm_model.resolve_attention)
    warm_prefills: Optional[bool] = None  # run every prefill bucket at start-up (None: where prefill graphs are on)
    job_trace: bool = False  # the leader traces every job's launch and device times (llm_trace)


def prompt_tokens(r: int, length: int, vocab: int) -> List[int]:
    """Synthetic prompt of request ``r`` (mesh-local id): ``length`` ids from a seeded generator."""
    rng = np.random.default_rng(1_000_003 + r)
    return [int(x) for x in rng.integers(0, vocab, size=length)]


def buckets(limit: int) -> List[int]:
    """Powers of two from 1 up to the first one >= ``limit``."""
    out = [1]
    while out[-1] < limit:
        out.append(out[-1] * 2)
    return out


def prefill_length_bucket(n: int) -> int:
    """The padded length of a prefill whose longest prompt has ``n`` tokens (the simulator's
    rule, :func:`placement_opt.simulate.meshsim.padded_prefill_length`, so the two cannot drift)."""
    return int(padded_prefill_length(n))


def prefill_bucket(batch: int, longest: int) -> Optional[Tuple[int, int]]:
    """(batch, length) bucket of a prefill of ``batch`` prompts, the longest ``longest`` tokens:
    the batch rounded up to a power of two (also past the engine's ``max_batch``: one bucket
    rule everywhere) and :func:`prefill_length_bucket`; None where it runs eagerly, by the
    simulator's rule (:func:`placement_opt.simulate.meshsim.prefill_runs_eagerly` with
    ``PREFILL_GRAPH_TOKENS``), so the simulator's eager prefills are exactly the engine's."""
    if prefill_runs_eagerly(batch, longest, PREFILL_GRAPH_TOKENS):
        return None
    return buckets(batch)[-1], prefill_length_bucket(longest)


def scratch_requests(n: int) -> List[int]:
    """``n`` request ids no replayed request has (warm-up jobs; they hold no blocks)."""
    return [-1_000_000 - i for i in range(n)]


def prefill_buckets(max_batch: int, longest: int) -> List[Tuple[int, int]]:
    """Every bucket :func:`prefill_bucket` gives a prefill of at most ``max_batch`` prompts
    whose longest has at most ``longest`` tokens, sorted: every TP rank captures them in this
    order, so their collectives pair up."""
    top = prefill_length_bucket(max(1, longest))
    lengths = [n for n in range(1, top + 1) if prefill_length_bucket(n) == n] or [top]
    out = {prefill_bucket(b, n) for b in range(1, max(1, max_batch) + 1) for n in lengths}
    return sorted(x for x in out if x is not None)


@dataclass
class _Running:
    """A launched job: its end event (GPU) and its greedy tokens (on GPUs a view of the LLM's
    pinned host buffer that an asynchronous copy before the event fills; on CPUs the result)."""

    job: Job
    tokens: torch.Tensor
    event: Optional[Any] = None
    start: Optional[Any] = None  # timing event before its work (GPU, while a job trace is active)
    launched: Tuple[float, float] = (0.0, 0.0)  # host monotonic seconds before and after launch


@dataclass
class _LLMRuntime:
    """One LLM on this rank: shard, cache, streams, process groups, captured decode graphs."""

    build: LLMBuild
    model: DecoderShard
    cache: LLMCache
    streams: Tuple[Any, Any]  # prefill, decode (None on CPU)
    groups: Tuple[Any, Any]  # TP process groups of its prefill and decode jobs
    graphs: Dict[Tuple[int, int], Tuple[Any, DecodeInputs, torch.Tensor]] = field(default_factory=dict)
    graph_pool: Any = None
    prefill_graphs: Dict[Tuple[int, int], Tuple[Any, PrefillInputs, torch.Tensor]] = field(default_factory=dict)
    prefill_pool: Any = None
    prepared: set = field(default_factory=set)  # prefill buckets start-up prepared (or the replay met since)
    host_tokens: Dict[str, torch.Tensor] = field(default_factory=dict)  # kind -> pinned buffer of its job's tokens


class MeshEngine:
    """See the module docstring."""

    def __init__(self, spec: EngineSpec, device: torch.device, groups: Sequence[Tuple[Any, Any]]):
        self.spec, self.device = spec, device
        archs = [b.architecture for b in spec.llms]
        head_dims = {a.hidden // a.heads for a in archs}
        assert len(head_dims) == 1, "a mesh's LLMs share one head size (checked before start)"
        self.dtype = torch.float32 if device.type == "cpu" else DTYPES.get(archs[0].dtype, torch.float16)
        self.pool = KVPool(spec.pool_pages, page_units(archs, spec.tp), spec.block, head_dims.pop(), device,
                           self.dtype)
        self.mechanism, self.sm, self.sm_layout = "cpu-serial", [0] * len(archs), ""
        streams = self._make_streams()
        self.llms: List[_LLMRuntime] = []
        for k, b in enumerate(spec.llms):
            model = DecoderShard(b.architecture, b.seed, spec.tp_rank, spec.tp, groups[k][0], device, self.dtype,
                                 spec.attention)
            self.llms.append(_LLMRuntime(build=b, model=model, cache=LLMCache(self.pool, b.architecture, spec.tp),
                                         streams=streams[k], groups=(groups[k][0], groups[k][1])))
        self.tokens: Dict[int, List[int]] = {}  # request -> prompt and generated ids
        self.running: Dict[Tuple[str, int], _Running] = {}
        self.prefill_graphs_on = device.type == "cuda" and spec.cuda_graphs
        self.attention_fallback: Optional[str] = None
        self.prefill_graph_fallback: Optional[str] = None
        self.warmup: Dict[str, float] = {}  # what start-up prepared and its seconds (warm_up)
        self.cold_buckets: List[Tuple[str, int, int]] = []  # (LLM, batch, length) first met after start-up
        self.eager_prefills = 0  # prefills over the graph limit since start-up or reset
        self.trace = JobTrace(device)  # records only once begun (the leader, with spec.job_trace)
        # the stream current when jobs are launched, looked up once (torch's per-call stream look-ups
        # cost the launch path tens of microseconds); start-up queues work there (the weights), which
        # jobs wait for until warm-up has synchronised the device (nothing is queued there after)
        self._default_stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
        self._wait_default = True

    @property
    def attention(self) -> str:
        """The decode attention that serves: ``paged`` (Triton) or ``gather``."""
        return self.llms[0].model.attention if self.llms else "gather"

    # ------------------------------------------------------------ start-up

    def _make_streams(self) -> List[Tuple[Any, Any]]:
        """Per LLM its prefill and decode streams: on GPUs from disjoint green contexts of its
        SM share when possible (:func:`~.llm_greenctx.partition_sms`; sets ``mechanism``,
        ``sm``, ``sm_layout`` and ``fallback_reason``)."""
        n = len(self.spec.llms)
        if self.device.type != "cuda":
            return [(None, None)] * n
        from placement_opt.executor.llm_greenctx import partition_sms

        plan = partition_sms(self.device, [b.share for b in self.spec.llms], torch, self.spec.green_contexts)
        self.mechanism, self.sm, self._sm_keep = plan.mechanism, plan.sm_counts, plan.keep
        self.sm_layout = plan.layout
        if plan.fallback:
            self.fallback_reason = plan.fallback
        return plan.streams

    def warm_up(self) -> None:
        """Run one prefill and one decode per LLM, then prepare every bucket the replay can use
        (:meth:`_prepare`), so no capture happens during it. A paged-attention kernel that fails
        here (a Triton the device cannot run) switches every LLM to the gather path, with the
        reason kept; CUDA graphs that fail on green-context streams switch to plain streams."""
        started = time.perf_counter()
        try:
            self._warm_jobs()
        except Exception as e:
            if self.attention != "paged":
                raise
            self.sync()
            self.attention_fallback = f"paged attention failed at warm-up: {type(e).__name__}: {e}"
            for rt in self.llms:
                rt.model.attention = "gather"
            self.running.clear()
            self._warm_jobs()
        try:
            self._prepare()
        except Exception as e:  # capture on green-context streams failed: plain streams
            graphs = self.device.type == "cuda" and self.spec.cuda_graphs
            if not (graphs and self.mechanism.startswith("green-contexts")):
                raise
            self.fallback_reason = f"CUDA graphs on green-context streams: {type(e).__name__}: {e}"
            self._plain_streams()
            self._prepare()
        self.sync()
        self._wait_default = False  # the device is idle: nothing on the default stream for jobs to wait for
        self.warmup["warm_up_s"] = round(time.perf_counter() - started, 3)
        self.cold_buckets, self.eager_prefills = [], 0

    def _prepare(self) -> None:
        """Capture every LLM's decode graphs, then run (GPU: and capture) its prefill buckets,
        each timed into ``warmup``."""
        t = time.perf_counter()
        if self.device.type == "cuda" and self.spec.cuda_graphs:
            for k in range(len(self.llms)):
                self._capture(k)
        self.sync()
        t2 = time.perf_counter()
        for k in range(len(self.llms)):
            self._prepare_prefills(k)
        self.sync()
        self.warmup.update(decode_graphs=sum(len(rt.graphs) for rt in self.llms),
                           decode_capture_s=round(t2 - t, 3),
                           prefill_graphs=sum(len(rt.prefill_graphs) for rt in self.llms),
                           prefill_buckets=sum(len(rt.prepared) for rt in self.llms),
                           prefill_capture_s=round(time.perf_counter() - t2, 3))

    def _warm_jobs(self) -> None:
        """One prefill and one decode per LLM on a scratch request (every rank does the same)."""
        for k, rt in enumerate(self.llms):
            r = -1 - k  # a request id no replayed request has
            self.tokens[r] = prompt_tokens(r, 4, rt.build.architecture.vocab)
            try:
                for job in (Job(PREFILL, k, [r], [4]), Job(DECODE, k, [r], [5])):
                    self.launch(job)
                    self.finish(job.kind, k)
            finally:
                rt.cache.release(r)
                del self.tokens[r]

    def _plain_streams(self) -> None:
        """Drop the green contexts: every LLM gets plain streams (no SM limit)."""
        self.sync()
        props = torch.cuda.get_device_properties(self.device)
        self.mechanism, self.sm = "streams", [props.multi_processor_count] * len(self.llms)
        self.sm_layout = ""
        for rt in self.llms:
            rt.streams = (torch.cuda.Stream(self.device), torch.cuda.Stream(self.device))
            rt.graphs.clear()
            rt.prefill_graphs.clear()

    def _bounds(self, rt: _LLMRuntime) -> Tuple[int, int]:
        """(most requests in one job, tokens of the longest request) of one LLM (:class:`LLMBuild`)."""
        spec = self.spec
        batch = min(rt.build.max_batch or spec.max_batch, spec.max_batch)
        capacity = spec.max_blocks * spec.block
        return max(1, batch), max(1, min(rt.build.longest or capacity, capacity))

    def _capture(self, k: int) -> None:
        """Capture LLM k's decode step for every (batch, blocks) bucket its jobs can use, on its
        decode stream."""
        rt = self.llms[k]
        rt.model.group = rt.groups[1]  # graphs capture the decode communicator's all-reduces
        rt.graph_pool = torch.cuda.graph_pool_handle()
        stream = rt.streams[1]
        arch = rt.build.architecture
        per_slot = 2 * rt.cache.kv_heads * self.spec.block * (arch.hidden // arch.heads) * self.pool.data.element_size()
        max_batch, longest = self._bounds(rt)
        for b in buckets(max_batch):
            for m in buckets(min(self.spec.max_blocks, (longest + self.spec.block) // self.spec.block)):
                if rt.model.attention == "gather" and b * m * per_slot > GRAPH_GATHER_LIMIT and (b, m) != (1, 1):
                    continue  # its gathered K and V would hold too much memory: this bucket runs eagerly
                inputs = DecodeInputs(rt.cache, b, m)
                with torch.cuda.stream(stream):
                    rt.model.decode(inputs.tokens, inputs.pos, inputs)  # warm-up off the capture
                stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=rt.graph_pool, stream=stream, capture_error_mode="thread_local"):
                    out = rt.model.decode(inputs.tokens, inputs.pos, inputs).argmax(-1)
                rt.graphs[(b, m)] = (graph, inputs, out)
        stream.synchronize()

    def _prepare_prefills(self, k: int) -> None:
        """LLM k's prefill buckets (:func:`prefill_buckets` of its bounds), in the same order on
        every TP rank: with prefill graphs, each runs eagerly once and is captured; with
        ``warm_prefills`` and no graphs (CPU tests), each runs eagerly. Then the longest
        prefill over the graph limit runs once eagerly (GPU), so the allocator already holds
        its memory when the replay meets one. Scratch requests hold no blocks: their K and V go
        to the scratch page."""
        rt = self.llms[k]
        max_batch, longest = self._bounds(rt)
        planned = prefill_buckets(max_batch, longest)
        rt.prepared = set(planned)
        run = self.spec.warm_prefills if self.spec.warm_prefills is not None else self.prefill_graphs_on
        if not run:
            return
        rt.model.group = rt.groups[0]
        stream = rt.streams[0]
        for b, n in planned:
            if (b, n) in rt.prefill_graphs:
                continue
            inputs = PrefillInputs(rt.cache, b, n)
            inputs.fill(scratch_requests(b), [n] * b, None)
            self._on(stream, lambda: rt.model.prefill(inputs.tokens, inputs.lengths, inputs))
            if self.prefill_graphs_on:
                try:
                    rt.prefill_graphs[(b, n)] = self._on(stream, lambda: self._capture_prefill(rt, inputs))
                except Exception as e:  # every rank fails alike: prefills stay eager from now on
                    self.prefill_graphs_on = False
                    self.prefill_graph_fallback = f"prefill capture failed: {type(e).__name__}: {e}"
        if self.device.type == "cuda" and prefill_bucket(1, longest) is None:
            inputs = PrefillInputs(rt.cache, 1, longest)
            inputs.fill(scratch_requests(1), [longest], None)
            with eager_attention(self.device):
                self._on(stream, lambda: rt.model.prefill(inputs.tokens, inputs.lengths, inputs))
        if stream is not None:
            stream.synchronize()

    def _on(self, stream: Any, work: Any) -> Any:
        """``work()`` on ``stream`` (after what the current stream queued), or here on CPUs."""
        if stream is None:
            return work()
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            return work()

    # ------------------------------------------------------------ jobs

    def _blocks(self, tokens: int) -> int:
        return (tokens + self.spec.block - 1) // self.spec.block

    def launch(self, job: Job) -> None:
        """Start ``job`` (its requests' blocks reserved first); returns without waiting on GPUs."""
        began = time.monotonic()
        rt = self.llms[job.llm]
        vocab = rt.build.architecture.vocab
        for r, ctx in zip(job.requests, job.contexts):
            if r not in self.tokens:
                self.tokens[r] = prompt_tokens(r, ctx, vocab)
            rt.cache.ensure(r, self._blocks(ctx + 1))
        stream = rt.streams[0 if job.kind == PREFILL else 1]
        if stream is None:
            tokens = self._prefill(rt, job) if job.kind == PREFILL else self._decode(rt, job)
            self.running[(job.kind, job.llm)] = _Running(job, tokens, launched=(began, time.monotonic()))
            return
        timed = self.trace.active
        if self._wait_default:
            stream.wait_stream(self._default_stream)  # start-up's work there (the weights)
        torch.cuda.set_stream(stream)  # its kernels and copies go there (torch's context would look devices up)
        try:
            start = torch.cuda.Event(enable_timing=True) if timed else None
            if start is not None:
                start.record(stream)
            tokens = self._prefill(rt, job) if job.kind == PREFILL else self._decode(rt, job)
            host = self._host_tokens(rt, job.kind, tokens.shape[0])
            host.copy_(tokens, non_blocking=True)  # read by finish once the event has passed
            event = torch.cuda.Event(enable_timing=timed)
            event.record(stream)
        finally:
            torch.cuda.set_stream(self._default_stream)
        self.running[(job.kind, job.llm)] = _Running(job, host, event, start, (began, time.monotonic()))

    def _host_tokens(self, rt: _LLMRuntime, kind: str, n: int) -> torch.Tensor:
        """The first ``n`` entries of LLM ``rt``'s pinned host buffer for its ``kind`` job's tokens
        (made at warm-up's first job for the most requests a job takes, grown to a power of two past
        that). One job of a kind runs per LLM at a time, and its tokens are read before the next is
        launched, so one buffer per kind serves: the asynchronous copy into it replaces a device
        clone and a blocking copy back in ``finish``."""
        buf = rt.host_tokens.get(kind)
        if buf is None or buf.shape[0] < n:
            size = 1 << (max(n, self.spec.max_batch) - 1).bit_length()
            buf = rt.host_tokens[kind] = torch.empty(size, dtype=torch.long, pin_memory=True)
        return buf[:n]

    def _prefill(self, rt: _LLMRuntime, job: Job) -> torch.Tensor:
        """Launch a prefill: a graph replay of its bucket on GPUs (module docstring), else eager."""
        rt.model.group = rt.groups[0]  # prefill all-reduces on the prefill communicator
        n, lengths = len(job.requests), list(job.contexts)
        ids = [self.tokens[r] for r in job.requests]
        bucket = prefill_bucket(n, max(lengths))
        if bucket is None:
            self.eager_prefills += 1
        elif bucket not in rt.prepared:  # start-up did not prepare it: met cold, during the replay
            rt.prepared.add(bucket)
            self.cold_buckets.append((rt.build.name, *bucket))
        if not self.prefill_graphs_on:
            bucket = None
        if bucket is None:
            inputs = PrefillInputs(rt.cache, n, max(lengths))
            inputs.fill(job.requests, lengths, ids)
            with eager_attention(self.device):
                return rt.model.prefill(inputs.tokens, inputs.lengths, inputs).argmax(-1)
        entry = rt.prefill_graphs.get(bucket)
        if entry is not None:
            graph, inputs, out = entry
            inputs.fill(job.requests, lengths, ids)
            graph.replay()
            return out[:n]  # copied to the host before the bucket's next replay (launch)
        inputs = PrefillInputs(rt.cache, *bucket)
        inputs.fill(job.requests, lengths, ids)
        first = rt.model.prefill(inputs.tokens, inputs.lengths, inputs).argmax(-1)[:n]  # this job, eagerly
        try:
            rt.prefill_graphs[bucket] = self._capture_prefill(rt, inputs)
        except Exception as e:  # every rank fails alike: prefills stay eager from now on
            self.prefill_graphs_on = False
            self.prefill_graph_fallback = f"prefill capture failed: {type(e).__name__}: {e}"
        return first

    def _capture_prefill(self, rt: _LLMRuntime, inputs: PrefillInputs) -> Tuple[Any, PrefillInputs, torch.Tensor]:
        """Record the prefill on ``inputs`` as a graph on the current (the LLM's prefill) stream,
        right after the same shapes ran eagerly (so every kernel is loaded and warm). Unlike
        ``torch.cuda.graph`` this does not synchronise the device: other LLMs' jobs keep running."""
        if rt.prefill_pool is None:
            rt.prefill_pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(rt.prefill_pool, capture_error_mode="thread_local")
        try:
            out = rt.model.prefill(inputs.tokens, inputs.lengths, inputs).argmax(-1)
        finally:
            graph.capture_end()
        return graph, inputs, out

    def _decode(self, rt: _LLMRuntime, job: Job) -> torch.Tensor:
        rt.model.group = rt.groups[1]  # its own communicator: a decode may overlap the LLM's prefill
        n = len(job.requests)
        last = [self.tokens[r][-1] for r in job.requests]
        pos = [c - 1 for c in job.contexts]  # the last token's position: its K and V are written now
        need = self._blocks(max(job.contexts))
        b = next(x for x in buckets(self.spec.max_batch) if x >= n)
        m = next(x for x in buckets(self.spec.max_blocks) if x >= need)
        if (b, m) in rt.graphs:
            graph, inputs, out = rt.graphs[(b, m)]
            inputs.fill(job.requests, last, pos)
            graph.replay()
            return out[:n]  # copied to the host before the bucket's next replay (launch)
        inputs = DecodeInputs(rt.cache, n, need)
        inputs.fill(job.requests, last, pos)
        return rt.model.decode(inputs.tokens, inputs.pos, inputs).argmax(-1)

    def done(self, kind: str, k: int) -> bool:
        """Whether LLM k's ``kind`` job has finished on the device (does not wait)."""
        run = self.running[(kind, k)]
        return run.event is None or bool(run.event.query())

    def in_flight(self) -> List[Tuple[str, int]]:
        return list(self.running)

    def finish(self, kind: str, k: int) -> Job:
        """Wait for LLM k's ``kind`` job, append its tokens to its requests and return it."""
        run = self.running.pop((kind, k))
        if run.event is not None:
            run.event.synchronize()
        if self.trace.active:
            timed = run.start is not None
            job = run.job
            self.trace.add(TracedJob(k, kind, len(job.requests), max(job.contexts), sum(job.contexts), *run.launched,
                                     run.start, run.event if timed else None, time.monotonic()))
        for r, t in zip(run.job.requests, run.tokens.tolist()):
            self.tokens[r].append(int(t))
        return run.job

    def release(self, k: int, r: int, forget: bool) -> None:
        """Free request r's blocks (finished: ``forget`` its tokens too; preempted: keep them)."""
        self.llms[k].cache.release(r)
        if forget:
            self.tokens.pop(r, None)

    def reset(self) -> None:
        """Forget every request (between trials): free all blocks, drop all token lists."""
        assert not self.running, "reset with jobs in flight"
        for rt in self.llms:
            for r in list(rt.cache.blocks):
                rt.cache.release(r)
        self.tokens.clear()
        self.cold_buckets, self.eager_prefills = [], 0
        self.sync()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def weight_bytes(self) -> List[int]:
        return [rt.model.weight_bytes() for rt in self.llms]
