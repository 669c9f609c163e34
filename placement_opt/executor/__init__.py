"""Run a placement on real devices with torch.distributed, and profile models on them.

* :func:`execute` (``placeopt execute``): one process per GPU (CPU processes with gloo
  when there is no GPU), real transformers sharded as the placement says, a controller
  that replays the workload in real time with the simulator's dispatch and admission
  rule, and the measured metrics beside the simulated ones.
* :func:`profile_architecture` (``placeopt profile``): per-stage and per-layer latency
  and memory, written as a profile instances can reference.

torch is an optional dependency (``pip install -e .[executor]``); importing this package
does not import it, the functions below do.
"""

from __future__ import annotations

from typing import Any


def execute(*args: Any, **kwargs: Any) -> Any:
    """See :func:`placement_opt.executor.controller.execute`."""
    from placement_opt.executor.controller import execute as run
    return run(*args, **kwargs)


def profile_architecture(*args: Any, **kwargs: Any) -> Any:
    """See :func:`placement_opt.executor.profiler.profile_architecture`."""
    from placement_opt.executor.profiler import profile_architecture as run
    return run(*args, **kwargs)


def require_torch() -> None:
    """Raise an InputError with the install hint when torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from placement_opt.errors import InputError
        raise InputError("the executor needs PyTorch: pip install -e .[executor]", "torch") from None


__all__ = ["execute", "profile_architecture", "require_torch"]
