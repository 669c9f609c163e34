"""``placeopt profile`` for LLM architectures: a measured prefill/decode cost table.

For every TP degree, ``tp`` processes (one per GPU, or CPU processes with gloo) build the
executor's own decoder (:mod:`.llm_model`) and paged KV pool, and time, at every SM share
(GPU: on a stream of a green context with that share's SM count, as the executor serves;
CPU: only share 1), with warm-up and repeats (median):

* prefill of ``batch`` prompts of ``seq_len`` tokens, as the engine serves it: on GPUs a
  CUDA graph replay of its (batch, length) bucket, padded as the engine pads
  (:func:`~.llm_engine.prefill_bucket`; eager at the exact size where the engine runs it
  eagerly), skipped (left unmeasured, ``null``) where ``batch x seq_len`` exceeds the token
  budget and ``batch > 1``: the simulator never batches such a prefill;
* one decode step of ``batch`` requests with ``seq_len`` tokens of context each (a CUDA
  graph replay on GPUs, with the decode attention the engine picks, as the engine decodes).

The result is a cost table in the format of the converted MuxServe tables
(:mod:`placement_opt.costs.costtable`, times in ms) and details: the SM counts of each share,
the weight bytes and peak runtime memory (activations and graph workspace above weights and
KV pool) per GPU per TP degree.
"""

from __future__ import annotations

import os
import statistics
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, List, Optional, Tuple

from placement_opt.costs.costtable import FORMAT
from placement_opt.costs.sm_partition import sm_granularity
from placement_opt.model import Architecture
from placement_opt.progress import ProgressBar
from placement_opt.executor.profiler import run_tp_processes
from placement_opt.executor.worker import _die_with_parent, device_name


@dataclass(frozen=True)
class LLMProfileSettings:
    """The grid and how carefully to time it."""

    tp_degrees: Tuple[int, ...]
    sm_shares: Tuple[float, ...]
    batch_sizes: Tuple[int, ...]
    seq_lens: Tuple[int, ...]
    token_budget: int = 4096
    block: int = 16
    warmup: int = 2
    repeats: int = 5
    backend: str = "gloo"
    seed: int = 0
    cpu_threads: int = 1
    cuda_graphs: bool = True
    timeout_s: float = 3600.0


def median_seconds(fn: Callable[[], Any], stream: Any, device: Any, warmup: int, repeats: int) -> float:
    """Median seconds of ``repeats`` runs of ``fn`` (on ``stream`` on GPUs, CUDA events)."""
    import time

    import torch

    if device.type != "cuda":
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t)
        return statistics.median(samples)
    samples = []
    with torch.cuda.stream(stream):
        for i in range(warmup + repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            if i >= warmup:
                samples.append(start.elapsed_time(end) / 1e3)
    return statistics.median(samples)


class LLMBench:
    """One rank's decoder, a pool holding ``max(batch_sizes)`` requests of the longest
    length, and the jobs to time (also used by the decode roofline benchmark)."""

    def __init__(self, arch: Architecture, settings: LLMProfileSettings, rank: int, tp: int, device: Any,
                 attention: str = "auto"):
        import torch

        from placement_opt.executor.llm_engine import DTYPES
        from placement_opt.executor.llm_kvcache import KVPool, LLMCache
        from placement_opt.llm_units import page_units, units_per_block
        from placement_opt.executor.llm_model import DecoderShard

        self.arch, self.settings, self.device = arch, settings, device
        self.dtype = torch.float32 if device.type == "cpu" else DTYPES.get(arch.dtype, torch.float16)
        self.model = DecoderShard(arch, settings.seed, rank, tp, None if tp == 1 else _world(), device, self.dtype,
                                  attention)
        self.weight_bytes = self.model.weight_bytes()
        block = settings.block
        self.max_batch, self.max_blocks = max(settings.batch_sizes), (max(settings.seq_lens) + block) // block
        page = page_units([arch], tp)
        pages = self.max_batch * self.max_blocks * units_per_block(arch, tp) // page
        self.pool = KVPool(pages, page, block, arch.hidden // arch.heads, device, self.dtype)
        self.cache = LLMCache(self.pool, arch, tp)
        for r in range(self.max_batch):
            self.cache.ensure(r, self.max_blocks)
        self.attention_fallback = self._try_attention()
        self.graph_pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
        self.prefill_pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None

    def _try_attention(self) -> Optional[str]:
        """Run one decode step with the decoder's attention; if the paged kernels fail on this
        device, fall back to the gather path as the engine does. Returns the reason or None."""
        from placement_opt.executor.llm_kvcache import DecodeInputs

        if self.model.attention != "paged":
            return None
        inputs = DecodeInputs(self.cache, 1, 1)
        inputs.fill([0], [1], [0])
        try:
            self.model.decode(inputs.tokens, inputs.pos, inputs)
            return None
        except Exception as e:
            self.model.attention = "gather"
            return f"paged attention failed: {type(e).__name__}: {e}"

    def prefill(self, batch: int, length: int, stream: Any) -> Callable[[], Any]:
        """A prefill of ``batch`` prompts of ``length`` tokens as the engine serves it: a CUDA
        graph of its padded bucket on GPUs, else eager at the exact size (with the engine's
        eager attention, :func:`~.llm_engine.eager_attention`)."""
        import numpy as np

        from placement_opt.executor.llm_engine import eager_attention, prefill_bucket
        from placement_opt.executor.llm_kvcache import PrefillInputs

        ids = np.random.default_rng(batch * 100_003 + length).integers(0, self.arch.vocab, size=(batch, length))
        graphs = self.device.type == "cuda" and self.settings.cuda_graphs
        bucket = prefill_bucket(batch, length) if graphs else None
        inputs = PrefillInputs(self.cache, *(bucket or (batch, length)))
        inputs.fill(list(range(batch)), [length] * batch, ids.tolist())
        step = lambda: self.model.prefill(inputs.tokens, inputs.lengths, inputs).argmax(-1)  # noqa: E731
        if bucket is None:
            def eager() -> Any:
                with eager_attention(self.device):
                    return step()
            return eager
        return self._captured(step, stream, self.prefill_pool)

    def _captured(self, step: Callable[[], Any], stream: Any, pool: Any) -> Callable[[], Any]:
        """``step`` run once on ``stream`` (warm-up), then captured as a CUDA graph; its replay."""
        import torch

        torch.cuda.synchronize(self.device)  # the inputs' asynchronous copy has landed
        with torch.cuda.stream(stream):
            step()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            step()
        return graph.replay

    def decode(self, batch: int, context: int, stream: Any) -> Callable[[], Any]:
        """One decode step at ``context`` tokens each, captured as a CUDA graph on GPUs."""
        from placement_opt.executor.llm_kvcache import DecodeInputs

        block = self.settings.block
        inputs = DecodeInputs(self.cache, batch, (context + block - 1) // block)
        inputs.fill(list(range(batch)), [1] * batch, [context - 1] * batch)
        step = lambda: self.model.decode(inputs.tokens, inputs.pos, inputs).argmax(-1)  # noqa: E731
        if self.device.type != "cuda" or not self.settings.cuda_graphs:
            return step
        return self._captured(step, stream, self.graph_pool)


def _world() -> Any:
    import torch.distributed as dist
    return dist.group.WORLD


def _share_stream(device: Any, share: float) -> Tuple[Any, int, str]:
    """A stream with ``share`` of the GPU's SMs, as the executor gives an LLM of that share:
    (stream, SM count, mechanism)."""
    import torch

    from placement_opt.executor.llm_greenctx import partition_sms

    if device.type != "cuda":
        return None, 0, "cpu"
    plan = partition_sms(device, [share], torch)
    _KEEP.append(plan.keep)
    return plan.streams[0][0], plan.sm_counts[0], plan.mechanism


_KEEP: List[Any] = []  # green contexts of the streams handed out (they must outlive their streams)


def _grid(bench: LLMBench, settings: LLMProfileSettings, stream: Any) -> Tuple[List[list], List[list]]:
    """Prefill and decode seconds over batch x length (None: not measured) at one share."""
    pre: List[list] = []
    dec: List[list] = []
    for b in settings.batch_sizes:
        prow: List[Optional[float]] = []
        drow: List[Optional[float]] = []
        for n in settings.seq_lens:
            fits = b == 1 or b * n <= settings.token_budget
            prow.append(median_seconds(bench.prefill(b, n, stream), stream, bench.device, settings.warmup,
                                       settings.repeats)
                        if fits else None)
            drow.append(median_seconds(bench.decode(b, n, stream), stream, bench.device, settings.warmup,
                                  settings.repeats))
        pre.append(prow)
        dec.append(drow)
    return pre, dec


def _measure(rank: int, tp: int, arch: Architecture, settings: LLMProfileSettings, init: str,
             out: Connection) -> None:
    """One profiling process: every share's grid; rank 0 sends the results."""
    _die_with_parent()
    try:
        import torch
        import torch.distributed as dist

        if settings.backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        else:
            torch.set_num_threads(settings.cpu_threads)
            device = torch.device("cpu")
        if tp > 1:
            dist.init_process_group(settings.backend, init_method=init, rank=rank, world_size=tp,
                                    timeout=timedelta(seconds=settings.timeout_s))
        base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        bench = LLMBench(arch, settings, rank, tp, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        held = torch.cuda.memory_allocated(device) - base if device.type == "cuda" else 0
        shares: Dict[str, Any] = {}
        for share in settings.sm_shares:
            stream, n_sm, how = _share_stream(device, share)
            pre, dec = _grid(bench, settings, stream)
            shares[repr(share)] = {"prefill_s": pre, "decode_s": dec, "sm_count": n_sm, "mechanism": how}
        peak = (torch.cuda.max_memory_allocated(device) - base - held) if device.type == "cuda" else None
        if rank == 0:
            props = torch.cuda.get_device_properties(device) if device.type == "cuda" else None
            sms = (props.multi_processor_count, sm_granularity((props.major, props.minor))) if props else None
            out.send(("ok", {"tp": tp, "shares": shares, "sm_partition": sms, "device_name": device_name(device),
                             "torch": torch.__version__,
                             "attention": bench.model.attention, "attention_fallback": bench.attention_fallback,
                             "weight_bytes_per_gpu": bench.weight_bytes, "runtime_peak_bytes_per_gpu": peak}))
        if tp > 1:
            dist.barrier()
    except BaseException:
        out.send(("error", traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def _ms(grid: List[list]) -> List[list]:
    return [[None if v is None else round(v * 1e3, 6) for v in row] for row in grid]


def profile_llm(model: str, arch: Architecture, settings: LLMProfileSettings, gpu: Optional[str] = None
                ) -> Tuple[dict, dict]:
    """Measure the grid of ``settings`` for every TP degree: (cost table JSON, details)."""
    bar = ProgressBar(f"profile {model}", total=len(settings.tp_degrees), unit="TP degrees")
    by_tp = {}
    for k, tp in enumerate(settings.tp_degrees):
        bar.update(k, postfix=f"tp={tp}", force=True)
        by_tp[tp] = run_tp_processes(_measure, arch, tp, settings)
    bar.close(count=len(settings.tp_degrees))
    first = next(iter(by_tp.values()))
    tables = {}
    for tp, data in sorted(by_tp.items()):
        keys = [repr(s) for s in settings.sm_shares]
        tables[str(tp)] = {"sm_share": list(settings.sm_shares), "batch": list(settings.batch_sizes),
                           "seq_len": list(settings.seq_lens),
                           "prefill_ms": [_ms(data["shares"][k]["prefill_s"]) for k in keys],
                           "decode_ms": [_ms(data["shares"][k]["decode_s"]) for k in keys]}
    graphs = settings.cuda_graphs and settings.backend == "nccl"
    source = (f"measured by placeopt profile on {first['device_name']} ({settings.backend}, torch {first['torch']}, "
              f"warmup {settings.warmup}, median of {settings.repeats}; SM shares as "
              f"{sorted({v['mechanism'] for d in by_tp.values() for v in d['shares'].values()})}; decode steps "
              f"{'and prefills (padded to their bucket) as CUDA graphs' if graphs else 'and prefills eager'}, "
              f"decode attention {first['attention']}; prefill batches over {settings.token_budget} tokens not measured)")
    table = {"format": FORMAT, "version": 1, "model": model, "gpu": gpu or first["device_name"], "source": source,
             "units": "ms", "tp": tables}
    # every share below 1 on SMs of its own, as the executor partitions them: lookups go by those SMs
    if first["sm_partition"] is not None and all(d["shares"][repr(sh)]["mechanism"] == "green-contexts"
                                                 for d in by_tp.values() for sh in settings.sm_shares if sh < 1.0):
        table["sm_partition"] = {"sms": first["sm_partition"][0], "granule": first["sm_partition"][1]}
    details = {"model": model, "architecture": arch.to_dict(), "device": first["device_name"],
               "sm_counts": {str(tp): {k: v["sm_count"] for k, v in d["shares"].items()} for tp, d in by_tp.items()},
               "memory": {str(tp): {"weight_bytes_per_gpu": d["weight_bytes_per_gpu"],
                                    "runtime_peak_bytes_per_gpu": d["runtime_peak_bytes_per_gpu"]}
                          for tp, d in by_tp.items()},
               "attention": {str(tp): {"used": d["attention"], "fallback": d["attention_fallback"]}
                             for tp, d in by_tp.items()},
               "settings": {"warmup": settings.warmup, "repeats": settings.repeats, "block": settings.block,
                            "token_budget": settings.token_budget, "backend": settings.backend}}
    return table, details
