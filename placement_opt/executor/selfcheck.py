"""Check that a sharded model computes what the unsharded one does.

:func:`sharded_forward` runs one request through a ``pp`` x ``tp`` group of worker
processes (the executor's own :class:`~.worker._Runner`, so the same sharding, process
groups and send/recv) and returns the last stage's output; :func:`reference_forward`
runs the whole model in this process. Tests compare them on CPU with gloo; on GPUs the
same call checks NCCL.
"""

from __future__ import annotations

import os
import traceback

import numpy as np

from placement_opt.model import Architecture
from placement_opt.placement import Group
from placement_opt.executor.topology import model_layer_range, rank_plans, tp_groups
from placement_opt.executor.worker import ModelBuild, WorkerSpec, _die_with_parent, _Runner


def _check_main(spec: WorkerSpec, out) -> None:
    _die_with_parent()
    try:
        runner = _Runner(spec)
        y, _, _ = runner.forward(0)
        if spec.plan.is_last_stage and spec.plan.tp_rank == 0:
            out.send(("ok", y.float().cpu().numpy()))
        runner.close()
    except BaseException:
        out.send(("error", traceback.format_exc()))
        os._exit(1)
    os._exit(0)


def sharded_forward(arch: Architecture, pp: int, tp: int, backend: str = "gloo", seed: int = 0,
                    timeout_s: float = 120.0) -> np.ndarray:
    """Output of one request through ``pp`` stages of ``tp`` processes (devices 0..pp*tp-1)."""
    import torch.multiprocessing as mp

    from placement_opt.executor.controller import ExecutorError, _free_port

    group = Group(devices=tuple(range(pp * tp)), pp=pp, tp=tp, models=("model",))
    plans = rank_plans([group], {"model": arch.layers})
    init = f"tcp://127.0.0.1:{_free_port()}"
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
    try:
        if not recv.poll(timeout_s):
            raise ExecutorError(f"no output within {timeout_s:g} s")
        status, data = recv.recv()
        if status != "ok":
            raise ExecutorError(f"a check process failed: {data.strip().splitlines()[-1]}")
        return data
    except EOFError:
        raise ExecutorError(f"check processes died (exit codes {[p.exitcode for p in procs]})") from None
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        recv.close()


def reference_forward(arch: Architecture, seed: int = 0, device: str = "cpu") -> np.ndarray:
    """Output of the unsharded model for the same request, computed in this process."""
    import torch

    from placement_opt.executor.layers import seeded_source
    from placement_opt.executor.network import TransformerStage, request_tokens

    dev = torch.device(device)
    stage = TransformerStage(arch, (0, arch.layers), seeded_source(seed, dev), device=dev)
    return stage(request_tokens(arch, 1, seed, dev)).float().cpu().numpy()
