"""The LLMs of an instance as the solvers and the simulator see them.

:func:`llm_specs` gathers, per model: its cost table (measured, or the roofline estimate),
weight and KV-cache sizes, arrival rate and mean request lengths. Rates come from the
workload's arrival processes (a trace: its request count over its duration); lengths from
the requests' token counts when the workload has them, else the ``llm`` section's defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence

import numpy as np

from placement_opt.costs.costtable import CostTable
from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.model import Architecture
from placement_opt.placement import Placement
from placement_opt.settings import LLMConfig, RuleSet, rule_set
from placement_opt.workload.generate import model_processes


@dataclass(frozen=True, eq=False)
class LLMSpec:
    """One LLM: sizes in bytes, rate in req/s, mean lengths in tokens."""

    name: str
    index: int
    table: CostTable
    weight_bytes: float
    kv_bytes_per_token: float
    rate: float
    prompt_tokens: float
    output_tokens: float
    architecture: Architecture

    @property
    def params_billion(self) -> float:
        """Parameters in billions (weights at the architecture's dtype)."""
        return self.weight_bytes / self.architecture.dtype_bytes / 1e9

    @property
    def tokens_per_request(self) -> float:
        return self.prompt_tokens + self.output_tokens


def llm_config(instance: Instance) -> LLMConfig:
    """The instance's ``llm`` section (its defaults when it has none)."""
    return instance.llm_settings


def model_rates(instance: Instance) -> np.ndarray:
    """Long-run arrival rate of every model (req/s)."""
    w = instance.workload
    if w.trace is None:
        return np.array([0.0 if p is None else p.rate for p in model_processes(w, instance.model_names)])
    req = instance.requests()
    return np.bincount(req.model, minlength=len(instance.models)) / w.duration_s


def llm_specs(instance: Instance) -> List[LLMSpec]:
    """One :class:`LLMSpec` per model of an LLM instance, in instance order."""
    if not instance.is_llm:
        raise InputError("not an LLM instance (no model has family llm)", "models")
    cfg = llm_config(instance)
    rates = model_rates(instance)
    req = instance.requests()
    n = len(instance.models)
    prompt = np.full(n, cfg.prompt_tokens)
    output = np.full(n, cfg.output_tokens)
    if req.prompt_tokens is not None and len(req):
        assert req.output_tokens is not None, "requests with prompt lengths need output lengths"
        counts = np.bincount(req.model, minlength=n)
        sp = np.bincount(req.model, weights=req.prompt_tokens, minlength=n)
        so = np.bincount(req.model, weights=req.output_tokens, minlength=n)
        has = counts > 0
        prompt[has] = sp[has] / counts[has]
        output[has] = so[has] / counts[has]
        prompt[~has] = req.prompt_tokens.mean()
        output[~has] = req.output_tokens.mean()
    elif instance.workload.lengths is not None:
        prompt[:] = instance.workload.lengths.prompt_tokens
        output[:] = instance.workload.lengths.output_tokens
    out: List[LLMSpec] = []
    for i, m in enumerate(instance.models):
        if m.family != "llm":
            raise InputError("an LLM instance cannot mix in non-LLM models", f"models[{m.name}].family")
        arch, table = m.architecture, instance.llm_cost_tables[i]
        assert arch is not None and table is not None  # parsing requires an architecture for LLMs
        out.append(LLMSpec(name=m.name, index=i, table=table,
                           weight_bytes=float(arch.weight_bytes()),
                           kv_bytes_per_token=float(arch.kv_bytes_per_token()),
                           rate=float(rates[i]), prompt_tokens=float(prompt[i]), output_tokens=float(output[i]),
                           architecture=arch))
    return out


@dataclass(frozen=True)
class MeshMemory:
    """Bytes per GPU under a rule set: the memory a mesh's LLMs share (``per_gpu``), what
    every LLM reserves on each GPU besides weights and KV (``reserve``), and the cap on
    weights plus reserves (``weight_cap``; ``per_gpu`` when the rule set has none)."""

    per_gpu: float
    reserve: float
    weight_cap: float

    def kv_pool(self, n_gpus: int, weight_bytes: float, n_llms: int) -> float:
        """KV-cache bytes of a mesh: memory - weights - reserves."""
        return n_gpus * (self.per_gpu - n_llms * self.reserve) - weight_bytes

    def weights_fit(self, n_gpus: int, weight_bytes: float, n_llms: int) -> bool:
        """Whether weights plus reserves stay within the cap on every GPU."""
        return weight_bytes / n_gpus + n_llms * self.reserve <= self.weight_cap * (1 + 1e-9)


def placement_rules(placement: Optional[Placement] = None) -> RuleSet:
    """The rule set a placement was made under (its provenance's ``rules``), else ``placeopt``."""
    name = "placeopt" if placement is None else placement.provenance.get("rules", "placeopt")
    return rule_set(str(name), "provenance.rules")


def mesh_memory(instance: Instance, rules: RuleSet) -> MeshMemory:
    """The memory plan of the instance's GPUs under ``rules`` (see :class:`RuleSet`)."""
    gpu = instance.cluster.gpu
    cfg = llm_config(instance)
    per_gpu = (gpu.usable_memory_bytes * (1.0 - cfg.kv_reserve_fraction) if rules.memory_basis == "usable"
               else gpu.memory_bytes)
    reserve = (cfg.runtime_reserve_gb if rules.reserve_gb is None else rules.reserve_gb) * 1e9
    cap = per_gpu if rules.weight_cap_fraction is None else rules.weight_cap_fraction * gpu.memory_bytes
    return MeshMemory(per_gpu=per_gpu, reserve=reserve, weight_cap=min(cap, per_gpu))


def effective_llm_config(instance: Instance, rules: RuleSet) -> LLMConfig:
    """The ``llm`` section with the rule set's KV block size and prefill budget where it fixes them."""
    cfg = llm_config(instance)
    return replace(cfg, kv_block_tokens=rules.kv_block_tokens or cfg.kv_block_tokens,
                   prefill_token_budget=rules.prefill_token_budget or cfg.prefill_token_budget)


def mesh_kv_pool_bytes(instance: Instance, n_gpus: int, weight_bytes: float, n_llms: int,
                       rules: RuleSet) -> float:
    """KV-cache bytes a mesh of ``n_gpus`` holding ``n_llms`` LLMs has left after weights and reserves."""
    return mesh_memory(instance, rules).kv_pool(n_gpus, weight_bytes, n_llms)


def units_per_block(arch: Architecture, tp: int) -> int:
    """Units of one KV block of ``arch`` on one of ``tp`` GPUs (K and V of every layer and
    local KV head): the executor's paged-cache layout (:mod:`placement_opt.executor.llm_kvcache`)."""
    return 2 * arch.layers * (arch.kv_heads or arch.heads) // tp


def page_units(archs: Sequence[Architecture], tp: int) -> int:
    """Units per page of a mesh's KV pool: the gcd of its LLMs' block unit counts (every
    block a whole number of pages)."""
    return math.gcd(*[units_per_block(a, tp) for a in archs])


def pages_per_block(arch: Architecture, mesh: Sequence[Architecture], tp: int) -> int:
    """Pages one KV block of ``arch`` takes in the pool of a mesh of TP degree ``tp`` serving
    the LLMs ``mesh``: 1 alone; more beside LLMs of other block sizes (the engine's page table
    of a decode step has an entry per page of every block it reads)."""
    return units_per_block(arch, tp) // page_units(mesh, tp)
