"""Measure a transformer's forward latency and memory on the devices present.

For every tensor-parallel degree asked, ``tp`` processes (one per GPU, or CPU processes
with gloo) build the model piece by piece and time, with warm-up and repeats (median):

* every stage of every pipeline configuration ``(pp, tp)`` (an even layer split, the
  executor's own), by batch size: this becomes the :class:`~placement_opt.profile.Profile`
  that instances reference and the simulator predicts with;
* one embedding, one transformer layer and the final norm on their own, by batch size:
  the per-layer table (with weight and peak memory) that calibrates the cost model.

Timing brackets each forward with a device synchronisation, as the executor's workers do.
"""

from __future__ import annotations

import os
import statistics
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from placement_opt.model import Architecture
from placement_opt.errors import InputError
from placement_opt.progress import ProgressBar
from placement_opt.profile import ConfigProfile, Profile, parallel_configs
from placement_opt.executor.topology import even_layer_split
from placement_opt.executor.worker import _die_with_parent, device_name


@dataclass(frozen=True)
class ProfileSettings:
    """What to measure and how carefully."""

    configs: Tuple[Tuple[int, int], ...]  # (pp, tp)
    batch_sizes: Tuple[int, ...] = (1,)
    warmup: int = 5
    repeats: int = 20
    gap_s: float = 0.0  # idle time before every timed repeat (a server with idle time, not back to back)
    backend: str = "gloo"
    seed: int = 0
    cpu_threads: int = 1
    timeout_s: float = 600.0
    cuda_graphs: bool = False  # time each stage as one CUDA graph replay, as the executor serves it (GPU only)


def _time(fn: Callable[[], Any], sync: Callable[[], Any], warmup: int, repeats: int, gap_s: float = 0.0) -> float:
    """Median seconds of ``repeats`` synchronised calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        if gap_s > 0:
            time.sleep(gap_s)
        t = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def _peak_meter(device: Any) -> Tuple[Callable[[], int], Callable[[int], Optional[float]]]:
    """``(reset, peak)``: ``reset()`` empties the cache, zeroes the peak and returns the bytes
    allocated; ``peak(base)`` is the peak since, above ``base`` (None on CPU)."""
    import torch

    def reset() -> int:
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            return int(torch.cuda.memory_allocated(device))
        return 0

    def peak(base: int) -> Optional[float]:
        return float(torch.cuda.max_memory_allocated(device) - base) if device.type == "cuda" else None

    return reset, peak


def _measure(tp_rank: int, tp: int, arch: Architecture, settings: ProfileSettings, init: str,
             out: Connection) -> None:
    """Body of one profiling process; TP rank 0 sends its measurements through ``out``."""
    _die_with_parent()
    try:
        import torch
        import torch.distributed as dist

        from placement_opt.executor.layers import seeded_source
        from placement_opt.executor.network import Block, Embedding, TransformerStage, compute_dtype, request_tokens

        if settings.backend == "nccl":
            torch.cuda.set_device(tp_rank)
            device = torch.device("cuda", tp_rank)
            sync = (lambda: torch.cuda.synchronize(device))
        else:
            torch.set_num_threads(settings.cpu_threads)
            device = torch.device("cpu")
            sync = (lambda: None)
        group = None
        if tp > 1:
            dist.init_process_group(settings.backend, init_method=init, rank=tp_rank, world_size=tp,
                                    timeout=timedelta(seconds=settings.timeout_s))
            group = dist.group.WORLD
        source = seeded_source(settings.seed, device)
        dtype = compute_dtype(arch, device)
        graphs = settings.cuda_graphs and device.type == "cuda"
        if graphs:
            from placement_opt.executor.graphs import GraphedStage

        peak_reset, peak = _peak_meter(device)

        def hidden(b: int) -> Any:
            return torch.randn((b, arch.seq_len, arch.hidden), device=device).to(dtype)

        stages = []
        for pp in sorted({pp for pp, t in settings.configs if t == tp}):
            for s, rng in enumerate(even_layer_split(arch.layers, pp)):
                base = peak_reset()
                stage = TransformerStage(arch, rng, source, tp_rank, tp, group, device)
                lat: Dict[int, float] = {}
                for b in settings.batch_sizes:
                    x = request_tokens(arch, b, settings.seed, device) if rng[0] == 0 else hidden(b)
                    run = GraphedStage(stage, x) if graphs else (lambda: stage(x))
                    lat[b] = _time(run, sync, settings.warmup, settings.repeats, settings.gap_s)
                    del run
                stages.append({"pp": pp, "stage": s, "layers": list(rng), "latency_s": lat,
                               "weight_bytes": stage.weight_bytes(), "peak_bytes": peak(base)})
                del stage
        layer_rows = []
        pieces = {"embedding": lambda: Embedding(source, arch, dtype, device),
                  "layer": lambda: Block(source, 0, arch, tp_rank, tp, group, dtype, device),
                  "final_norm": lambda: torch.nn.LayerNorm(arch.hidden, device=device, dtype=dtype)}
        for kind, build in pieces.items():
            base = peak_reset()
            module = build()
            weight = sum(p.numel() * p.element_size() for p in module.parameters())
            for b in settings.batch_sizes:
                x = request_tokens(arch, b, settings.seed, device) if kind == "embedding" else hidden(b)
                with torch.inference_mode():
                    latency = _time(lambda: module(x), sync, settings.warmup, settings.repeats, settings.gap_s)
                layer_rows.append({"piece": kind, "tp": tp, "batch": b, "latency_s": latency, "weight_bytes": weight,
                                   "peak_bytes": peak(base)})
            del module
        if tp_rank == 0:
            out.send(("ok", {"tp": tp, "stages": stages, "pieces": layer_rows, "device_name": device_name(device),
                             "torch": torch.__version__}))
        if tp > 1:
            dist.barrier()
    except BaseException:
        out.send(("error", traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def run_tp_processes(measure: Callable[..., Any], arch: Architecture, tp: int, settings: Any) -> dict:
    """Run ``tp`` processes of ``measure(tp_rank, tp, arch, settings, init, out)`` (one TP group;
    the DNN and the LLM profiler share this) and return what rank 0 sends through ``out``;
    ExecutorError when it fails, dies or says nothing within ``settings.timeout_s``."""
    import torch.multiprocessing as mp

    from placement_opt.executor.controller import ExecutorError
    from placement_opt.executor.rendezvous import rendezvous

    ctx = mp.get_context("spawn")
    with rendezvous() as init:
        recv, send = ctx.Pipe(duplex=False)
        procs = [ctx.Process(target=measure, args=(r, tp, arch, settings, init, send), daemon=True) for r in range(tp)]
        for p in procs:
            p.start()
        send.close()
        try:
            if not recv.poll(settings.timeout_s):
                raise ExecutorError(f"profiling tp={tp} gave no result within {settings.timeout_s:g} s")
            status, data = recv.recv()
            if status != "ok":
                raise ExecutorError(f"profiling tp={tp} failed: {data.strip().splitlines()[-1]}")
            for p in procs:
                p.join(60)
            return data
        except EOFError:
            raise ExecutorError(f"profiling tp={tp}: a process died (exit codes "
                                f"{[p.exitcode for p in procs]})") from None
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5)
            recv.close()


def profile_architecture(name: str, arch: Architecture, settings: ProfileSettings) -> tuple[Profile, dict]:
    """Measure every configuration of ``settings``; return the Profile and the detailed measurements."""
    degrees = sorted({tp for _, tp in settings.configs})
    bar = ProgressBar(f"profile {name}", total=len(degrees), unit="TP degrees")
    by_tp = {}
    for k, tp in enumerate(degrees):
        bar.update(k, postfix=f"tp={tp}", force=True)
        by_tp[tp] = run_tp_processes(_measure, arch, tp, settings)
    bar.close(count=len(degrees))
    configs = {}
    for pp, tp in settings.configs:
        rows = sorted((r for r in by_tp[tp]["stages"] if r["pp"] == pp), key=lambda r: r["stage"])
        lat = np.array([[r["latency_s"][b] for r in rows] for b in settings.batch_sizes], dtype=np.float64)
        configs[(pp, tp)] = ConfigProfile(
            pp=pp, tp=tp, batch_sizes=tuple(settings.batch_sizes), stage_latency=lat,
            stage_weight_bytes=tuple(float(r["weight_bytes"]) for r in rows),
            stage_layers=tuple(tuple(r["layers"]) for r in rows))
    any_tp = next(iter(by_tp.values()))
    smallest = min(configs.values(), key=lambda c: c.n_gpus)
    total = sum(smallest.stage_weight_bytes) * smallest.tp
    source = (f"measured by placeopt profile on {any_tp['device_name']} ({settings.backend}, torch "
              f"{any_tp['torch']}, warmup {settings.warmup}, median of {settings.repeats}"
              + (f", {settings.gap_s:g} s idle before each repeat" if settings.gap_s else "")
              + (", stages as CUDA graphs" if settings.cuda_graphs and settings.backend == "nccl" else "") + ")")
    profile = Profile(name=name, weight_bytes=total, configs=configs, layers=arch.layers, source=source)
    details = {"name": name, "architecture": arch.to_dict(), "device": any_tp["device_name"],
               "backend": settings.backend, "torch": any_tp["torch"], "warmup": settings.warmup,
               "repeats": settings.repeats, "gap_s": settings.gap_s, "batch_sizes": list(settings.batch_sizes),
               "cuda_graphs": settings.cuda_graphs and settings.backend == "nccl",
               "pieces": [r for tp in sorted(by_tp) for r in by_tp[tp]["pieces"]],
               "stages": [dict(r, tp=tp, latency_s={str(b): v for b, v in r["latency_s"].items()})
                          for tp in sorted(by_tp) for r in by_tp[tp]["stages"]]}
    return profile, details


def default_configs(n_devices: int, layers: int, max_tp: int = 8) -> Tuple[Tuple[int, int], ...]:
    """Every (pp, tp) on a power-of-two number of devices up to ``n_devices``."""

    out = []
    n = 1
    while n <= n_devices:
        out += [(pp, tp) for pp, tp in parallel_configs(n, max_tp) if pp <= layers]
        n *= 2
    return tuple(out)


def parse_configs(text: str, field: str = "--configs") -> Tuple[Tuple[int, int], ...]:
    """"1x1,2x1,1x2" (pp x tp) into pairs."""

    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        parts = item.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise InputError(f"expected PPxTP items such as 2x1, got {item!r}", field)
        out.append((int(parts[0]), int(parts[1])))
    if not out:
        raise InputError("no configurations given", field)
    return tuple(dict.fromkeys(out))
