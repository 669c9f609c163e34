"""placeopt: place many deep-learning models on a GPU cluster for SLO attainment or throughput.

Library entry points::

    from placement_opt import load_instance, solve, simulate, Placement
    inst = load_instance("instances/tiny/two-models.json")
    placement = solve(inst, solver="selective-replication", seed=0)
    metrics = simulate(inst, placement)
"""

from __future__ import annotations

import os as _os
import sys as _sys


def _started_as_the_cli() -> bool:
    """Whether this process is the ``placeopt`` command (console script or ``python -m``), not a
    program that uses the library: only the command's stop signals are taken over."""
    if _sys.argv and _os.path.basename(_sys.argv[0]) == "placeopt":
        return True
    argv = getattr(_sys, "orig_argv", [])
    return any(a == "-m" and b in ("placement_opt.cli", "placement_opt.cli.main") for a, b in zip(argv, argv[1:]))


if _started_as_the_cli():
    from placement_opt.startup import exit_on_stop_signal_during_startup

    exit_on_stop_signal_during_startup()

from typing import Any  # noqa: E402  (after the start-up handlers: importing typing takes time)

from .version import __version__

from placement_opt.cluster import Cluster, GPUSpec, Link
from placement_opt.errors import InputError
from placement_opt.instance import Instance, instance_from_dict, load_instance
from placement_opt.model import Architecture, ModelSpec
from placement_opt.feasibility import check_placement
from placement_opt.placement import Group, Placement, Window, load_placement
from placement_opt.profile import ConfigProfile, Profile, derive_profile
from placement_opt.simulate import SimulatorConfig, simulate
from placement_opt.workload import Workload


def solve(instance: Instance, solver: str | None = None, time_limit: float | None = None, seed: int | None = None,
          **options: Any) -> Placement:
    """Solve ``instance`` with a registered solver (default: the instance's own choice).

    Options given here override the instance's ``solver.options``. The returned placement
    carries its simulated metrics and provenance.
    """
    from placement_opt.solvers import run_solver
    return run_solver(instance, solver, time_limit=time_limit, seed=seed, options=options)


__all__ = [
    "Architecture", "Cluster", "ConfigProfile", "GPUSpec", "Group", "Instance", "InputError", "Link", "ModelSpec",
    "Placement", "Profile", "SimulatorConfig", "Window", "Workload", "__version__", "check_placement",
    "derive_profile", "instance_from_dict", "load_instance", "load_placement", "simulate", "solve",
]
