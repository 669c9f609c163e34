"""The solver interface and registry.

Every solver is a class with a registered ``name``, a typed ``Options`` dataclass (unknown
or ill-typed options are input errors), and ``solve(instance, time_limit, seed)`` returning
a :class:`~placement_opt.placement.Placement`. :func:`run_solver` wraps a solve with
timing, simulation of the result and provenance, so every entry point reports alike.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, ClassVar, Dict, Optional, Tuple, Type

from placement_opt.version import __version__
from placement_opt.errors import InputError
from placement_opt.placement import Placement
from placement_opt.simulate import simulate

_REGISTRY: Dict[str, Type["Solver"]] = {}


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A solver without options."""


class Solver:
    """Base class: subclasses set ``name``, ``summary``, ``Options`` and implement ``solve``."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    family: ClassVar[str] = "dnn"  # which instances it solves: dnn, llm or any
    Options: ClassVar[type] = NoOptions
    positive_options: ClassVar[Tuple[str, ...]] = ()  #: integer options that must be >= 1 (e.g. tp, beam)

    def __init__(self, **options: Any):
        self.options = parse_options(self.Options, options, "solver.options")
        for key in self.positive_options:
            if getattr(self.options, key) < 1:
                raise InputError(f"must be >= 1, got {getattr(self.options, key)}", f"solver.options.{key}")

    def solve(self, instance, time_limit: Optional[float] = None, seed: int = 0) -> Placement:
        raise NotImplementedError


def parse_options(cls: type, options: Dict[str, Any], field: str):
    """Build an options dataclass, checking names and types (bool/int/float/str/tuple)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, value in options.items():
        key_py = key.replace("-", "_")
        if key_py not in fields:
            allowed = ", ".join(sorted(fields)) or "none"
            raise InputError(f"unknown option (allowed: {allowed})", f"{field}.{key}")
        default = fields[key_py].default
        values[key_py] = _coerce(value, default, f"{field}.{key}")
    return cls(**values)


def _coerce(value, default, where):
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return value.lower() in ("true", "1")
        raise InputError("expected true or false", where)
    if isinstance(default, int) and not isinstance(default, bool):
        if isinstance(value, str):
            try:
                value = int(value)
            except ValueError:
                raise InputError("expected an integer", where) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError("expected an integer", where)
        return value
    if isinstance(default, float) or default is None:
        if isinstance(value, str) and default is not None:
            try:
                value = float(value)
            except ValueError:
                raise InputError("expected a number", where) from None
        if default is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError("expected a number", where)
        if default is not None and not math.isfinite(value):  # as in instance files: NaN and Infinity refused
            raise InputError(f"expected a finite number, got {value}", where)
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise InputError("expected a string", where)
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        elif isinstance(value, int) and not isinstance(value, bool):  # -O group_sizes=4 (parsed as JSON)
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise InputError("expected a list", where)
        return tuple(value)
    return value


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


def solver_for(instance, name: str, options: Optional[Dict[str, Any]] = None) -> Solver:
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


def run_solver(instance, name: Optional[str] = None, *, time_limit: Optional[float] = None,
               seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None) -> Placement:
    """Solve, simulate the result and attach metrics and provenance."""
    name = name or instance.solver
    solver = solver_for(instance, name, options)
    seed = instance.seed if seed is None else seed
    if seed != instance.seed:
        # the seed drives the workload: solve and score on the requests it draws
        instance = dataclasses.replace(instance, seed=seed)
    start = time.perf_counter()
    placement = solver.solve(instance, time_limit=time_limit, seed=seed)
    wall = time.perf_counter() - start
    metrics = simulate(instance, placement)
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
    )
