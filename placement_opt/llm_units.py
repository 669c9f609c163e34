"""The LLMs of an instance as the solvers and the simulator see them.

:func:`llm_specs` gathers, per model: its cost table (measured, or the roofline estimate),
weight and KV-cache sizes, arrival rate and mean request lengths. Rates come from the
workload's arrival processes (a trace: its request count over its duration); lengths from
the requests' token counts when the workload has them, else the ``llm`` section's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np

from placement_opt.costs.costtable import CostTable
from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.settings import LLMConfig
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
                           rate=float(rates[i]), prompt_tokens=float(prompt[i]), output_tokens=float(output[i])))
    return out


def mesh_kv_pool_bytes(instance: Instance, n_gpus: int, weight_bytes: float) -> float:
    """KV-cache bytes a mesh of ``n_gpus`` has left after weights and the activation reserve."""
    cfg = llm_config(instance)
    return instance.cluster.gpu.usable_memory_bytes * n_gpus * (1.0 - cfg.kv_reserve_fraction) - weight_bytes
