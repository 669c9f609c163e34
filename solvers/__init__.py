"""Placement solvers behind one registry (``placeopt solvers`` lists them)."""

from .base import Solver, get_solver_class, make_solver, parse_options, register, run_solver, solver_names
from . import round_robin, selective_replication  # noqa: F401  (registration)

__all__ = ["Solver", "get_solver_class", "make_solver", "parse_options", "register", "run_solver", "solver_names"]
