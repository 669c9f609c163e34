"""A placement problem: cluster, models, their profiles, workload, objective and solver settings.

:func:`load_instance` reads and validates an instance JSON file; every problem is reported
as an :class:`~placement_opt.errors.InputError` naming the file, the field and the reason.

Loading has two steps. Parsing turns the JSON sections into the problem's descriptions
(cluster, models, measured profiles and cost tables, workload, settings). Resolution gives
every model its costs: a DNN model's :attr:`Instance.model_profiles` entry is its measured
profile or the auto-parallelizer's profile of its architecture, an LLM's
:attr:`Instance.llm_cost_tables` entry is its measured cost table or the roofline estimate.
Both are computed once per instance, by the instance itself, from the layers below it
(:mod:`placement_opt.costs`, :mod:`placement_opt.parallel`), as cached properties: an
instance derived with ``dataclasses.replace`` resolves afresh, never from stale caches.
:func:`instance_from_dict` resolves the profiles at load time, so that a model that fits
nowhere is an input error there.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from placement_opt.cluster import Cluster
from placement_opt.costs.costtable import CostTable
from placement_opt.costs.roofline import roofline_cost_table
from placement_opt.errors import InputError
from placement_opt.io import read_json, read_json_bytes
from placement_opt.model import FAMILIES, Architecture, ModelSpec
from placement_opt.parallel import architecture_profile
from placement_opt.profile import Profile
from placement_opt.settings import LLMConfig, SimulatorConfig
from placement_opt.limits import MAX_GPUS, MAX_MODELS, MAX_REBALANCES, MAX_TOKENS, check_request_memory
from placement_opt.validation import check_keys, get_int, get_list, get_number, get_str, reject_non_finite
from placement_opt.workload import Requests, SLOSpec, Workload, generate_requests

OBJECTIVES = ("slo_attainment", "throughput")
TOP_LEVEL_KEYS = ("name", "description", "cluster", "models", "profiles", "workload", "objective", "solver",
                  "seed", "simulator", "cost_tables", "llm")


@dataclass(frozen=True, eq=False)
class Instance:
    """Everything a solver needs. Models are expanded (``count`` copies become separate models)."""

    name: str
    cluster: Cluster
    models: Tuple[ModelSpec, ...]
    profiles: Dict[str, Profile]
    workload: Workload
    objective: str = "slo_attainment"
    solver: str = "selective-replication"
    solver_options: Dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    simulator: SimulatorConfig = SimulatorConfig()
    slo_overrides: Dict[str, SLOSpec] = field(default_factory=dict)
    cost_tables: Dict[str, CostTable] = field(default_factory=dict)
    llm: Optional[LLMConfig] = None
    description: str = ""
    sha256: str = ""
    path: Optional[str] = None

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    @property
    def is_llm(self) -> bool:
        return any(m.family == "llm" for m in self.models)

    def model_index(self, name: str) -> int:
        return self.model_names.index(name)

    def profile_of(self, model: ModelSpec) -> Profile:
        """The model's measured profile, or one built from its architecture by the cost model."""
        if model.profile is not None:
            return self.profiles[model.profile]
        assert model.architecture is not None  # parsing requires an architecture or a profile
        return architecture_profile(model.name, model.architecture, self.cluster)

    @cached_property
    def model_profiles(self) -> Tuple[Profile, ...]:
        """Every model's profile, in model order (resolved once per instance)."""
        return tuple(self.profile_of(m) for m in self.models)

    def cost_table_of(self, model: ModelSpec) -> CostTable:
        """An LLM's measured cost table, or the roofline estimate from its architecture."""
        if model.cost_table is not None:
            return self.cost_tables[model.cost_table]
        assert model.architecture is not None  # parsing requires an architecture for LLMs
        return roofline_cost_table(model.name, model.architecture, self.cluster)

    @cached_property
    def llm_cost_tables(self) -> Tuple[Optional[CostTable], ...]:
        """Every model's LLM cost table in model order (None for non-LLM models)."""
        return tuple(self.cost_table_of(m) if m.family == "llm" else None for m in self.models)

    @property
    def llm_settings(self) -> LLMConfig:
        """The ``llm`` section, or its defaults when the instance has none."""
        return self.llm if self.llm is not None else LLMConfig()

    def slo_seconds(self) -> np.ndarray:
        """The SLO of every model in seconds."""
        out = np.empty(len(self.models))
        for i, m in enumerate(self.models):
            spec = self.slo_overrides.get(m.name, self.workload.slo)
            out[i] = spec.resolve(self._reference_latency(i))
        return out

    def _reference_latency(self, i: int) -> float:
        m = self.models[i]
        if m.family == "llm":  # measured cost table, else the LLM roofline (never the DNN profile)
            table = self.llm_cost_tables[i]
            assert table is not None
            return table.reference_latency()
        return self.model_profiles[i].reference_latency(self.cluster.gpu.usable_memory_bytes)

    def requests(self, workload: Optional[Workload] = None, seed: Optional[int] = None) -> Requests:
        """The instance's requests (memoised for its own workload and seed)."""
        if workload is None and seed is None:
            return self._requests
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise InputError(f"must be a non-negative integer, got {seed!r}", "seed")
        if workload is not None:
            check_workload(self, workload)
        return generate_requests(workload or self.workload, self.model_names, self.slo_seconds(),
                                 self.seed if seed is None else seed, self.contexts)

    @cached_property
    def _requests(self) -> Requests:
        return generate_requests(self.workload, self.model_names, self.slo_seconds(), self.seed, self.contexts)

    @property
    def contexts(self) -> Optional[list[int]]:
        """LLM instances: every model's context in tokens (its architecture's ``seq_len``),
        which bounds a request's prompt plus output; None for DNN instances."""
        if not self.is_llm:
            return None
        return [m.architecture.seq_len if m.architecture is not None else MAX_TOKENS for m in self.models]


def load_instance(path: str) -> Instance:
    """Read, validate and expand an instance JSON file (the reader already refused one over the
    size limits, :func:`check_instance_size`, and non-finite numbers)."""
    data, raw = read_json_bytes(path, precheck=check_instance_size)
    try:
        check_keys(data, "", ["cluster", "models", "workload"], TOP_LEVEL_KEYS)
        return _build_instance(data, os.path.dirname(os.path.abspath(path)), hashlib.sha256(raw).hexdigest(), path)
    except InputError as e:
        raise e.with_file(path) from None


def instance_from_dict(data: Any, base_dir: str = ".", sha256: str = "", path: Optional[str] = None) -> Instance:
    """Build an :class:`Instance` from parsed JSON (paths resolve against ``base_dir``)."""
    check_keys(data, "", ["cluster", "models", "workload"], TOP_LEVEL_KEYS)
    check_instance_size(data)
    reject_non_finite(data)
    return _build_instance(data, base_dir, sha256, path)


def _build_instance(data: dict, base_dir: str, sha256: str, path: Optional[str]) -> Instance:
    """The :class:`Instance` of a parsed instance whose top-level keys, size limits and numbers
    were checked (by :func:`load_instance` or :func:`instance_from_dict`, each once)."""
    if not sha256:
        sha256 = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    cluster = Cluster.from_dict(data["cluster"])
    profiles = _load_profiles(data.get("profiles", {}), base_dir)
    cost_tables = _load_cost_tables(data.get("cost_tables", {}), base_dir)
    models, slo_overrides = _load_models(data["models"], profiles, cost_tables, base_dir)
    workload = Workload.from_dict(data["workload"], "workload", base_dir)
    objective = get_str(data, "objective", "", "slo_attainment", choices=OBJECTIVES)
    solver, options = _load_solver(data.get("solver", {}))
    simulator = SimulatorConfig.from_dict(data.get("simulator", {}))
    llm = None
    if any(m.family == "llm" for m in models) or "llm" in data:
        llm = LLMConfig.from_dict(data.get("llm", {}), "llm")
    inst = Instance(
        name=get_str(data, "name", "", os.path.splitext(os.path.basename(path))[0] if path else "instance"),
        description=_get_description(data),
        cluster=cluster, models=tuple(models), profiles=profiles, workload=workload, objective=objective,
        solver=solver, solver_options=options, seed=get_int(data, "seed", "", 0, minimum=0, maximum=2**63 - 1),
        simulator=simulator, slo_overrides=slo_overrides, cost_tables=cost_tables, llm=llm,
        sha256=sha256, path=path,
    )
    _check_models_fit(inst)
    check_workload(inst, workload)
    return inst


def check_instance_size(data: Any) -> None:
    """Refuse an instance over the model or GPU limits from the parsed JSON alone, before
    anything walks or builds its objects (a file of a million models is refused in seconds).
    Fields of the wrong type are left to the full checks that follow."""
    if not isinstance(data, dict):
        return
    models = data.get("models")
    if isinstance(models, list):
        _check_model_count(models)
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        nodes, per_node = cluster.get("nodes"), cluster.get("gpus_per_node")
        if type(nodes) is int and type(per_node) is int and nodes * per_node > MAX_GPUS:
            raise InputError(f"nodes x gpus_per_node = {nodes * per_node} GPUs, over the limit of {MAX_GPUS}",
                             "cluster")


def _check_model_count(items: list) -> None:
    """At most :data:`MAX_MODELS` models, before and after ``count`` expansion."""
    if len(items) > MAX_MODELS:
        raise InputError(f"{len(items)} models, over the limit of {MAX_MODELS}", "models")
    expanded = sum(d.get("count", 1) for d in items if isinstance(d, dict) and type(d.get("count", 1)) is int)
    if expanded > MAX_MODELS:
        raise InputError(f"{expanded} models after count expansion, over the limit of {MAX_MODELS}", "models")


def _load_json_ref(value: Any, where: str, base_dir: str) -> Any:
    """Inline JSON, or a path (relative to the instance file) to a JSON file."""
    if not isinstance(value, str):
        return value
    path = value if os.path.isabs(value) else os.path.join(base_dir, value)
    return read_json(path, where, referenced=True)


def _get_description(data: dict) -> str:
    value = data.get("description", "")
    if not isinstance(value, str):
        raise InputError(f"expected a string, got {type(value).__name__}", "description")
    return value


def _load_profiles(d: Any, base_dir: str) -> Dict[str, Profile]:
    if not isinstance(d, dict):
        raise InputError("expected an object {profile name: profile or path}", "profiles")
    out = {}
    for name, value in d.items():
        where = f"profiles.{name}"
        out[name] = Profile.from_dict(name, _load_json_ref(value, where, base_dir), where)
    return out


def _load_cost_tables(d: Any, base_dir: str) -> Dict[str, CostTable]:
    if not isinstance(d, dict):
        raise InputError("expected an object {table name: cost table or path}", "cost_tables")
    return {name: CostTable.from_dict(name, _load_json_ref(v, f"cost_tables.{name}", base_dir), f"cost_tables.{name}")
            for name, v in d.items()}


def _load_models(items: Any, profiles: Dict[str, Profile], cost_tables: Dict[str, CostTable], base_dir: str
                 ) -> Tuple[List[ModelSpec], Dict[str, SLOSpec]]:
    """The ``models`` list expanded by ``count``, and the SLO overrides by expanded model name
    (architecture paths such as ``hf_config`` resolve against ``base_dir``)."""
    if not isinstance(items, list) or not items:
        raise InputError("expected a non-empty list of models", "models")
    models: List[ModelSpec] = []
    overrides: Dict[str, SLOSpec] = {}
    names: Set[str] = set()
    for i, d in enumerate(items):
        where = f"models[{i}]"
        check_keys(d, where, ["name"], ["count", "family", "architecture", "profile", "cost_table", "slo_s",
                                        "slo_scale", "weights"])
        name = get_str(d, "name", where)
        count = get_int(d, "count", where, 1, minimum=1, maximum=100000)
        family = get_str(d, "family", where, "dnn", choices=FAMILIES)
        arch = (Architecture.from_dict(d["architecture"], f"{where}.architecture", base_dir)
                if "architecture" in d else None)
        profile = get_str(d, "profile", where) if "profile" in d else None
        if profile is not None and profile not in profiles:
            raise InputError(f"no profile named {profile!r} in profiles", f"{where}.profile")
        cost_table = get_str(d, "cost_table", where) if "cost_table" in d else None
        if cost_table is not None and cost_table not in cost_tables:
            raise InputError(f"no cost table named {cost_table!r} in cost_tables", f"{where}.cost_table")
        if arch is None and profile is None:
            raise InputError("a model needs an architecture or a profile", where)
        if family == "llm" and arch is None:
            raise InputError("an llm model needs an architecture (for weights and KV-cache size)", where)
        if "slo_s" in d and "slo_scale" in d:
            raise InputError("give at most one of slo_s and slo_scale", where)
        slo = None
        if "slo_s" in d:
            slo = SLOSpec(scale=None, seconds=get_number(d, "slo_s", where, exclusive_minimum=0))
        elif "slo_scale" in d:
            slo = SLOSpec(scale=get_number(d, "slo_scale", where, exclusive_minimum=0))
        weights = get_str(d, "weights", where) if "weights" in d else None
        expanded = [name] if count == 1 else [f"{name}-{k}" for k in range(count)]
        for n in expanded:
            if n in names:
                raise InputError(f"duplicate model name {n!r}", f"{where}.name")
            names.add(n)
            models.append(ModelSpec(name=n, family=family, architecture=arch, profile=profile,
                                    cost_table=cost_table, weights=weights))
            if slo is not None:
                overrides[n] = slo
    return models, overrides


def _load_solver(d: Any) -> Tuple[str, Dict[str, Any]]:
    """The solver's name and its (not yet checked) options from the ``solver`` section."""
    if isinstance(d, str):
        d = {"name": d}
    check_keys(d, "solver", [], ["name", "options"])
    name = get_str(d, "name", "solver", "selective-replication")
    options = d.get("options", {})
    if not isinstance(options, dict):
        raise InputError("expected an object", "solver.options")
    return name, options


def _check_models_fit(inst: Instance) -> None:
    """Every model must fit the cluster in some configuration, or it can never be served."""
    budget = inst.cluster.gpu.usable_memory_bytes
    for i, m in enumerate(inst.models):
        if m.family == "llm":
            assert m.architecture is not None  # parsing requires an architecture for LLMs
            need = m.architecture.weight_bytes()
            if need > budget * inst.cluster.n_gpus:
                raise InputError(f"weights of {need / 1e9:.1f} GB exceed the whole cluster's usable memory",
                                 f"models[{m.name}]")
            continue
        prof = inst.model_profiles[i]
        fits = [c for c in prof.configs.values()
                if c.n_gpus <= inst.cluster.n_gpus and c.max_stage_weight_bytes <= budget]
        if not fits:
            raise InputError("fits nowhere: no parallel configuration within the cluster keeps every stage "
                             f"under the usable memory of {budget / 1e9:.2f} GB per GPU", f"models[{m.name}]")


#: More synthetic requests than this (about 10 GB of request arrays) is taken for a typo.
MAX_EXPECTED_REQUESTS = 5e8
#: An MMPP switching state more often than this over the workload is taken for a typo.
MAX_MMPP_SWITCHES = 1e7


def check_workload(inst: Instance, w: Workload) -> None:
    """``w`` must fit ``inst``: per-model entries name its models, and the rates are sane
    (also for a workload other than the instance's own, e.g. ``placeopt evaluate --workload``)."""
    for name in w.per_model:
        if name not in inst.model_names:
            raise InputError(f"no model named {name!r} (after count expansion)", f"workload.per_model.{name}")
    if w.process is not None and w.process.rate <= 0:
        raise InputError("total rate must be > 0", "workload.arrival.rate")
    processes = [("workload.arrival", w.process)] + [(f"workload.per_model.{k}", v) for k, v in w.per_model.items()]
    for where, p in processes:
        if p is not None and p.kind == "mmpp":
            q0, q1 = p.mmpp_switch_rates
            switches = 2.0 * w.duration_s * q0 * q1 / (q0 + q1)
            if switches > MAX_MMPP_SWITCHES:
                raise InputError(f"about {switches:.3g} state switches over duration_s, over the limit of "
                                 f"{MAX_MMPP_SWITCHES:.0e}", f"{where}.switch_rates")
    total_rate = (w.process.rate if w.process is not None else 0.0) + sum(p.rate for p in w.per_model.values())
    if total_rate * w.duration_s > MAX_EXPECTED_REQUESTS:
        raise InputError(f"rate x duration_s = {total_rate * w.duration_s:.3g} expected requests, over the limit "
                         f"of {MAX_EXPECTED_REQUESTS:.0e}", "workload")
    check_request_memory(total_rate * w.duration_s, inst.is_llm, "workload")
    if inst.is_llm:
        cfg = inst.llm_settings
        check_fixed_lengths(inst, w)
        rounds = (w.duration_s + cfg.drain_s) / cfg.rebalance_period_s
        if rounds > MAX_REBALANCES:
            raise InputError(f"(workload.duration_s + llm.drain_s) / rebalance_period_s = {rounds:.3g} re-balancing "
                             f"rounds, over the limit of {MAX_REBALANCES:.0e}", "llm.rebalance_period_s")


def check_fixed_lengths(inst: Instance, w: Workload) -> None:
    """Lengths given as numbers (fixed workload lengths; else ``llm.prompt_tokens`` and
    ``llm.output_tokens``) must fit every LLM's context, as a serving engine refuses a request
    whose prompt plus output exceeds it; drawn lengths are capped instead (generate_requests)."""
    if w.lengths is not None and w.lengths.distribution != "fixed":
        return
    if w.lengths is not None:
        prompt = min(int(round(w.lengths.prompt_tokens)), w.lengths.max_prompt_tokens)
        output = min(int(round(w.lengths.output_tokens)), w.lengths.max_output_tokens)
        where = "workload.lengths"
    else:
        prompt, output = int(round(inst.llm_settings.prompt_tokens)), int(round(inst.llm_settings.output_tokens))
        where = "llm"
    contexts = inst.contexts or []
    for name, context in zip(inst.model_names, contexts):
        if prompt + output > context:
            raise InputError(f"prompt_tokens + output_tokens = {prompt + output} tokens, over the context of model "
                             f"{name!r} ({context} tokens: its architecture's seq_len)", where)
