"""Check that a sharded model computes what the unsharded one does.

:func:`sharded_forward` runs one request through a ``pp`` x ``tp`` group of worker
processes (the executor's own :class:`~.worker._Runner`, so the same sharding, process
groups and send/recv) and returns the last stage's output; :func:`reference_forward`
runs the whole model in this process. Tests compare them on CPU with gloo; on GPUs the
same call checks NCCL.
"""

from __future__ import annotations

import os
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, Optional, Sequence, Set

import numpy as np

from placement_opt.model import Architecture
from placement_opt.placement import Group
from placement_opt.executor.topology import model_layer_range, rank_plans, tp_groups
from placement_opt.executor.worker import ModelBuild, WorkerSpec, _die_with_parent, _Runner


def _check_main(spec: WorkerSpec, out: Connection) -> None:
    """One rank of the check: its stage's forward, then a barrier so that no rank leaves
    (rank 0 hosts the rendezvous store) before every rank is done; reports ``ok`` (the last
    stage's output), then ``done`` or ``error`` with this rank's whole traceback."""
    _die_with_parent()
    rank = spec.plan.rank
    try:
        runner = _Runner(spec)
        y, _, _ = runner.forward(0)
        if spec.plan.is_last_stage and spec.plan.tp_rank == 0:
            out.send(("ok", rank, y.float().cpu().numpy()))
        runner.close()
        runner.dist.barrier()
        out.send(("done", rank, None))
    except BaseException:
        out.send(("error", rank, traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def sharded_forward(arch: Architecture, pp: int, tp: int, backend: str = "gloo", seed: int = 0,
                    timeout_s: float = 120.0) -> np.ndarray:
    """Output of one request through ``pp`` stages of ``tp`` processes (devices 0..pp*tp-1)."""
    import torch.multiprocessing as mp

    from placement_opt.executor.rendezvous import rendezvous

    group = Group(devices=tuple(range(pp * tp)), pp=pp, tp=tp, models=("model",))
    plans = rank_plans([group], {"model": arch.layers})
    with rendezvous() as init:
        ctx = mp.get_context("spawn")
        recv, send = ctx.Pipe(duplex=False)
        procs = []
        for p in plans:
            build = ModelBuild(index=0, name="model", architecture=arch,
                               layer_range=model_layer_range(group, p.stage, arch.layers), seed=seed)
            spec = WorkerSpec(plan=p, world_size=len(plans), backend=backend, init_method=init,
                              tp_groups=tuple(tp_groups(plans)), models=(build,), warmup=0, cpu_threads=1,
                              timeout_s=timeout_s)
            procs.append(ctx.Process(target=_check_main, args=(spec, send), daemon=True))
        for proc in procs:
            proc.start()
        send.close()
        finished = False
        try:
            output = _collect(recv, procs, timeout_s)
            finished = True
            return output
        finally:
            for proc in procs:  # after a failure the other ranks wait on it: stop them at once
                proc.join(10 if finished else 0)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
            recv.close()


def _collect(recv: Connection, procs: Sequence[Any], timeout_s: float) -> np.ndarray:
    """The last stage's output once every rank reported ``done``; the first failing rank's
    whole traceback as an :class:`ExecutorError` otherwise."""
    from placement_opt.executor.controller import ExecutorError

    deadline = time.monotonic() + timeout_s
    output: Optional[np.ndarray] = None
    done: Set[int] = set()
    while len(done) < len(procs):
        left = deadline - time.monotonic()
        try:
            if left <= 0 or not recv.poll(left):
                waiting = sorted(set(range(len(procs))) - done)
                raise ExecutorError(f"no answer within {timeout_s:g} s from ranks {waiting}")
            status, rank, data = recv.recv()
        except EOFError:
            raise ExecutorError(f"check processes died (exit codes {[p.exitcode for p in procs]})") from None
        if status == "error":
            raise ExecutorError(f"check process rank {rank} failed:\n{data.rstrip()}")
        if status == "ok":
            output = data
        else:
            done.add(rank)
    if output is None:
        raise ExecutorError("no rank returned the last stage's output")
    return output


def reference_forward(arch: Architecture, seed: int = 0, device: str = "cpu") -> np.ndarray:
    """Output of the unsharded model for the same request, computed in this process."""
    import torch

    from placement_opt.executor.layers import seeded_source
    from placement_opt.executor.network import TransformerStage, request_tokens

    dev = torch.device(device)
    stage = TransformerStage(arch, (0, arch.layers), seeded_source(seed, dev), device=dev)
    return stage(request_tokens(arch, 1, seed, dev)).float().cpu().numpy()
