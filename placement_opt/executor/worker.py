"""One executor process: builds its stages of the group's models and serves commands in order.

A worker receives ``(key, model)`` commands from the controller over its own pipe, runs
its stage of that model (receiving activations from the previous stage's rank with the
same TP position, sending its output to the next one) and, on TP rank 0 of the stage,
reports the stage's start and end on the host's monotonic clock, which every process of
the host shares. Commands come in the same order to every rank of a group, so sends and
receives pair up and the pipeline overlaps requests as the simulator's flow shop does.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional, Tuple

from placement_opt.model import Architecture
from placement_opt.executor.topology import RankPlan


@dataclass(frozen=True)
class ModelBuild:
    """What a worker needs to build its stage of one model."""

    index: int  # position in the instance's model list
    name: str
    architecture: Architecture
    layer_range: Tuple[int, int]
    seed: int
    weights: Optional[str] = None


@dataclass(frozen=True)
class WorkerSpec:
    plan: RankPlan
    world_size: int
    backend: str
    init_method: str
    tp_groups: Tuple[Tuple[int, ...], ...]
    models: Tuple[ModelBuild, ...]
    warmup: int
    cpu_threads: int
    timeout_s: float
    cuda_graphs: bool = False  # replay each stage as one CUDA graph (GPU only; see executor.graphs)


def device_name(device: Any) -> str:
    """The name of a worker's device as the profiles and runs record it: the GPU's
    (``NVIDIA H100 80GB HBM3``), ``cpu`` on CPUs."""
    if device.type != "cuda":
        return "cpu"
    import torch
    return str(torch.cuda.get_device_name(device))


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the controller dies, so no worker is orphaned;
    exit at once if it already died while this process was starting (before the request)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(3)


class _Runner:
    """The torch side of a worker: process groups, stages, and one request at a time."""

    def __init__(self, spec: WorkerSpec):
        import torch
        import torch.distributed as dist

        from placement_opt.executor.layers import safetensors_source, seeded_source
        from placement_opt.executor.network import TransformerStage, request_tokens

        self.torch, self.dist, self.spec = torch, dist, spec
        plan = spec.plan
        if spec.backend == "nccl":
            torch.cuda.set_device(plan.device)
            self.device = torch.device("cuda", plan.device)
        else:
            torch.set_num_threads(spec.cpu_threads)
            self.device = torch.device("cpu")
        dist.init_process_group(spec.backend, init_method=spec.init_method, rank=plan.rank,
                                world_size=spec.world_size, timeout=timedelta(seconds=spec.timeout_s))
        tp_group = None
        for ranks in spec.tp_groups:  # every rank creates every subgroup, in the same order
            handle = dist.new_group(list(ranks))
            if plan.rank in ranks:
                tp_group = handle
        self.stages: Dict[int, Any] = {}  # model index -> its TransformerStage
        self.tokens: Dict[int, Any] = {}  # model index -> its request's token ids (first stage)
        for m in spec.models:
            source = (safetensors_source(m.weights, self.device) if m.weights
                      else seeded_source(m.seed, self.device))
            self.stages[m.index] = TransformerStage(m.architecture, m.layer_range, source, plan.tp_rank,
                                                    len(plan.tp_ranks), tp_group, self.device)
            if plan.is_first_stage:
                self.tokens[m.index] = request_tokens(m.architecture, 1, m.seed, self.device)
        self.pending: List[Tuple[Any, Any]] = []  # (isend work handle, the tensor it sends)
        self.graphs: Dict[int, Any] = {}  # model index -> its GraphedStage

    def capture_graphs(self) -> None:
        """Capture every model's stage as a CUDA graph (GPU ranks; in model order, as every
        rank of a TP group does the same)."""
        from placement_opt.executor.graphs import GraphedStage

        for m in self.spec.models:
            stage = self.stages[m.index]
            if self.spec.plan.is_first_stage:
                static = self.tokens[m.index]
            else:
                arch = stage.arch
                static = self.torch.zeros((1, arch.seq_len, arch.hidden), dtype=stage.dtype, device=self.device)
            self.graphs[m.index] = GraphedStage(stage, static)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def forward(self, model: int) -> Tuple[Any, float, float]:
        """Run this rank's stage of ``model`` for one request; return (output, start, end).

        ``start`` and ``end`` are monotonic seconds after the input arrived and after the
        stage's output is ready; the output goes on to the next stage asynchronously.
        """
        plan, stage = self.spec.plan, self.stages[model]
        graphed = self.graphs.get(model)
        if plan.is_first_stage:
            x = self.tokens[model]
        elif graphed is not None:
            x = graphed.input  # the graph's static buffer (the previous replay has finished)
            self.dist.recv(x, src=plan.prev_rank)
        else:
            arch = stage.arch
            x = self.torch.empty((1, arch.seq_len, arch.hidden), dtype=stage.dtype, device=self.device)
            self.dist.recv(x, src=plan.prev_rank)
        self._sync()
        start = time.monotonic()
        y = stage(x) if graphed is None else graphed()
        self._sync()
        end = time.monotonic()
        if not plan.is_last_stage:
            if graphed is not None:
                y = y.clone()  # the next replay overwrites the graph's output before the send ends
            self.pending = [(w, t) for w, t in self.pending if not w.is_completed()]
            self.pending.append((self.dist.isend(y, dst=plan.next_rank), y))
        return y, start, end

    def weight_bytes(self) -> Dict[int, int]:
        """Weight bytes this rank holds for every model's stage."""
        return {i: s.weight_bytes() for i, s in self.stages.items()}

    def close(self) -> None:
        for w, _ in self.pending:
            w.wait()
        self._sync()


def worker_main(spec: WorkerSpec, commands: Connection, reports: Connection) -> None:
    """Process entry point: build, warm up, report ready, serve commands until ``None``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller handles Ctrl-C and stops us
    rank = spec.plan.rank
    try:
        runner = _Runner(spec)
        if spec.cuda_graphs and runner.device.type == "cuda":
            runner.capture_graphs()
        for m in spec.models:  # warm-up: same order on every rank of the group
            for _ in range(spec.warmup):
                runner.forward(m.index)
        reports.send(("ready", rank, {"weight_bytes": runner.weight_bytes(), "device": str(runner.device)}))
        while True:
            cmd = commands.recv()
            if cmd is None:
                break
            key, model = cmd
            _, start, end = runner.forward(model)
            if spec.plan.reports:
                reports.send(("stage", key, spec.plan.stage, start, end))
        runner.close()
        reports.send(("done", rank, None))
    except EOFError:
        os._exit(3)  # the controller went away
    except BaseException:
        try:
            reports.send(("error", rank, traceback.format_exc()))
        finally:
            os._exit(1)
    os._exit(0)  # skip interpreter teardown (NCCL/gloo destructors can block on gone peers)
