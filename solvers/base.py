"""The solver interface and registry.

Every solver is a class with a registered ``name``, an ``Options`` dataclass with declared
fields (unknown, ill-typed or out-of-range options are input errors), and ``solve(instance,
time_limit, seed)`` returning a :class:`~placement_opt.placement.Placement`. :func:`run_solver`
wraps a solve with timing, simulation of the result and provenance, so every entry point
reports alike.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar, Dict, Optional, Type

from placement_opt.version import __version__
from placement_opt.errors import InputError
from placement_opt.limits import clear_stop_request, final_simulation_seconds, search_seconds, stop_requested
from placement_opt.instance import Instance
from placement_opt.placement import Placement
from placement_opt.simulate import simulate
from placement_opt.validation import check_fields

_REGISTRY: Dict[str, Type["Solver"]] = {}


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A solver without options."""


class Solver:
    """Base class: subclasses set ``name``, ``summary``, ``Options`` and implement ``solve``.

    ``Options`` is a frozen dataclass whose fields are declared with ``validation.option``
    (type, default, bounds or choices, help): they are checked when the solver is made and
    listed by ``placeopt solvers NAME``.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    family: ClassVar[str] = "dnn"  # which instances it solves: dnn, llm or any
    Options: ClassVar[type] = NoOptions

    def __init__(self, **options: Any) -> None:
        self.options = parse_options(self.Options, options)

    def solve(self, instance: Instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        raise NotImplementedError


def check_options(options_class: type, options: Dict[str, Any], field: str = "solver.options", *,
                  from_text: bool = False) -> Dict[str, Any]:
    """The given options checked against ``options_class``'s declarations, by field name
    (``from_text``: command-line strings, converted to the fields' types)."""
    return check_fields(options_class, options, field, from_text=from_text, kind="option")


def parse_options(options_class: type, options: Dict[str, Any], field: str = "solver.options", *,
                  from_text: bool = False) -> Any:
    """An ``options_class`` instance of the checked ``options`` (the others keep their defaults)."""
    return options_class(**check_options(options_class, options, field, from_text=from_text))


def register(cls: Type[Solver]) -> Type[Solver]:
    """Class decorator adding a solver to the registry under ``cls.name``."""
    if not cls.name:
        raise ValueError("solver class needs a name")
    _REGISTRY[cls.name] = cls
    return cls


def solver_names() -> list[str]:
    return sorted(_REGISTRY)


def get_solver_class(name: str) -> Type[Solver]:
    if name not in _REGISTRY:
        raise InputError(f"unknown solver {name!r} (known: {', '.join(solver_names())})", "solver")
    return _REGISTRY[name]


def make_solver(name: str, options: Optional[Dict[str, Any]] = None) -> Solver:
    return get_solver_class(name)(**(options or {}))


def solver_for(instance: Instance, name: str, options: Optional[Dict[str, Any]] = None) -> Solver:
    """The configured solver ``name`` for ``instance`` (the instance's own options apply when
    it names this solver; ``options`` override them). Refuses a solver of the other family."""
    merged = dict(instance.solver_options) if name == instance.solver else {}
    merged.update(options or {})
    solver = make_solver(name, merged)
    cls = type(solver)
    if cls.family != "any" and (cls.family == "llm") != instance.is_llm:
        kind = "LLM" if instance.is_llm else "non-LLM"
        raise InputError(f"solver {name!r} does not solve {kind} instances", "solver")
    return solver


class SearchStopped(Exception):
    """The search was stopped (``reason``: "time limit" or "interrupted") before it had any
    placement that serves a model: there is nothing to report or write."""

    def __init__(self, reason: str, signum: Optional[int] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.signum = signum


def reported_metrics(instance: Instance, placement: Placement) -> dict:
    """The metrics a solve reports (and saves) for ``placement``; progress bars score a
    solver's best-so-far placement with this same function."""
    return simulate(instance, placement)


def run_solver(instance: Instance, name: Optional[str] = None, *, time_limit: Optional[float] = None,
               seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None,
               counted_from: Optional[float] = None) -> Placement:
    """Solve, simulate the result and attach metrics and provenance.

    ``time_limit`` counts from ``counted_from`` (a ``time.perf_counter()`` value; default: now;
    the CLI passes the process's start) and covers the final simulation too: the solver
    searches for :func:`~placement_opt.limits.search_seconds` of it.
    A search stopped by ``time_limit`` or a signal returns its best placement so far, marked
    ``provenance["stopped"]``; if that serves no model, :class:`SearchStopped` is raised instead
    (an empty placement is never a result). Models the placement leaves unserved are listed in
    ``provenance["unserved_models"]``. A solver that cannot return a best-so-far lets
    ``KeyboardInterrupt`` through."""
    name = name or instance.solver
    solver = solver_for(instance, name, options)
    seed = instance.seed if seed is None else seed
    if seed != instance.seed:
        # the seed drives the workload: solve and score on the requests it draws
        instance = dataclasses.replace(instance, seed=seed)
    clear_stop_request()
    start = time.perf_counter()
    search_limit = None if time_limit is None else search_seconds(
        time_limit, start if counted_from is None else counted_from,
        final_simulation_seconds(len(instance.requests()), instance.cluster.n_gpus, instance.is_llm))
    placement = solver.solve(instance, time_limit=search_limit, seed=seed)
    wall = time.perf_counter() - start
    stopped = stop_reason(placement)
    unserved = unserved_models(instance, placement)
    if stopped is not None and len(unserved) == len(instance.models):
        raise SearchStopped(stopped, stop_requested())
    metrics = reported_metrics(instance, placement)
    return placement.with_metrics(metrics).with_provenance(
        instance=instance.name,
        instance_sha256=instance.sha256,
        placeopt_version=__version__,
        solver=name,
        solver_options=dataclasses.asdict(solver.options),
        seed=seed,
        time_limit_s=time_limit,
        wall_time_s=round(wall, 6),
        **({"search": placement.provenance["search"]} if "search" in placement.provenance else {}),
        **({"stopped": stopped} if stopped is not None else {}),
        **({"unserved_models": unserved} if unserved else {}),
    )


def stop_reason(placement: Placement) -> Optional[str]:
    """Why the search behind ``placement`` stopped early: "interrupted" (a signal, or the
    search saw Ctrl-C), "time limit", or None when it finished."""
    search = placement.provenance.get("search", {})
    if stop_requested() is not None or search.get("interrupted"):
        return "interrupted"
    if search.get("timed_out"):
        return "time limit"
    return None


def unserved_models(instance: Instance, placement: Placement) -> list[str]:
    """The instance's models that no group of the placement (in any window) serves."""
    served = {m for groups in placement.all_group_sets for g in groups for m in g.models}
    return [m for m in instance.model_names if m not in served]
