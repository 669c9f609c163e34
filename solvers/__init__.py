"""Placement solvers behind one registry (``placeopt solvers`` lists them).

Importing this package registers every solver module listed in ``_SOLVER_MODULES``.
"""

import importlib

from placement_opt.solvers.base import Solver, get_solver_class, make_solver, parse_options, register, run_solver, solver_names

_SOLVER_MODULES = (
    "round_robin", "selective_replication",  # spine baselines
    "alpaserve_greedy", "alpaserve", "clockwork", "mp_baselines", "exhaustive",  # AlpaServe search
    "muxserve", "llm_baselines",  # LLM serving
)

for _name in _SOLVER_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["Solver", "get_solver_class", "make_solver", "parse_options", "register", "run_solver", "solver_names"]
