"""Hardware rules of LLM placements: what a serving engine (vLLM, SGLang, MuxServe) can run.

Every LLM placement, whatever made it, must keep these rules (``docs/llm.md``, "Hardware
rules"); :func:`llm_rule_violations` lists every one a placement breaks, and the solvers
use :func:`tp_violations` and the rule set's :class:`~placement_opt.llm_units.MeshMemory` to
consider only candidates that keep them.

* a mesh is one stage (``pp = 1``) of ``tp`` GPUs inside one node;
* its tensor-parallel degree divides every hosted LLM's attention heads and MLP width, and
  its KV heads (or, with fewer KV heads than ``tp``, is a multiple of them: engines then
  replicate KV heads, as vLLM does); the LLM's cost table has that degree;
* memory per GPU (rule set's basis): weights / tp + a runtime reserve per LLM + KV cache;
  weights plus reserves within the rule set's cap, and a KV pool (memory - weights -
  reserves) holding one request of each LLM;
* SM shares on the rule set's grid and, unless the mesh runs one job at a time (temporal
  scheduling), summing to at most its oversubscription limit.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence

from placement_opt.instance import Instance
from placement_opt.llm_units import LLMSpec, MeshMemory, llm_config, llm_specs, mesh_memory, placement_rules
from placement_opt.placement import Group, Placement
from placement_opt.settings import RuleSet

GB = 1e9


class Violation(NamedTuple):
    """One broken rule: where in the placement (a field path) and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def tp_violations(spec: LLMSpec, tp: int) -> List[str]:
    """Why tensor-parallel degree ``tp`` cannot serve ``spec`` (empty when it can)."""
    arch = spec.architecture
    out = []
    if arch.heads % tp:
        out.append(f"tp={tp} does not divide {arch.heads} heads")
    kv_heads = arch.kv_heads or arch.heads
    if kv_heads != arch.heads and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
        out.append(f"tp={tp} neither divides nor is a multiple of {kv_heads} KV heads")
    if arch.ffn_hidden % tp:
        out.append(f"tp={tp} does not divide the MLP width {arch.ffn_hidden}")
    if tp not in spec.table.tables:
        degrees = ", ".join(str(t) for t in spec.table.tp_degrees)
        out.append(f"its cost table {spec.table.name!r} has no tp={tp} (only {degrees})")
    return out


def share_violations(shares: Sequence[float], rules: RuleSet, one_job_at_a_time: bool) -> List[str]:
    """Why SM shares break the rule set's grid or oversubscription limit (empty when they don't)."""
    out = []
    for k, s in enumerate(shares):
        steps = s / rules.sm_step
        if abs(steps - round(steps)) > 1e-6 or round(steps) < 1:
            out.append(f"share {k} ({s:g}) is not a positive multiple of {rules.sm_step:g} ({rules.name} rules)")
    total = sum(shares)
    if not one_job_at_a_time and total > rules.sm_limit + 1e-9:
        out.append(f"shares sum to {total:g}, over the {rules.name} limit of {rules.sm_limit:g}")
    return out


def memory_violations(members: Sequence[LLMSpec], n_gpus: int, memory: MeshMemory, rules: RuleSet) -> List[str]:
    """Why ``members`` do not fit a mesh of ``n_gpus`` under the memory plan (empty when they do)."""
    k = len(members)
    if not k:
        return []
    weights = sum(s.weight_bytes for s in members)
    out = []
    if not memory.weights_fit(n_gpus, weights, k):
        out.append(f"weights {weights / n_gpus / GB:.1f} GB + {k} x {memory.reserve / GB:.1f} GB reserve per GPU "
                   f"exceed the {rules.name} cap of {memory.weight_cap / GB:.1f} GB")
    pool = memory.kv_pool(n_gpus, weights, k)
    need = sum(s.kv_bytes_per_token * s.tokens_per_request for s in members)
    if pool < need:
        out.append(f"KV pool of {max(pool, 0.0) / GB:.2f} GB (memory - weights - {k} x {memory.reserve / GB:.1f} GB "
                   f"reserve per GPU) is less than one request of each LLM needs ({need / GB:.2f} GB)")
    return out


def group_violations(instance: Instance, placement: Placement, gi: int, g: Group, specs: Sequence[LLMSpec],
                     memory: MeshMemory, rules: RuleSet) -> List[Violation]:
    """Every rule group ``gi`` breaks."""
    where = f"groups[{gi}]"
    out = []
    if g.pp != 1:
        out.append(Violation(f"{where}.pp", f"an LLM mesh has one stage (pp = 1), got pp={g.pp}"))
    gpn = instance.cluster.gpus_per_node
    nodes = sorted({d // gpn for d in g.devices})
    if len(nodes) > 1:
        out.append(Violation(f"{where}.devices", f"the mesh spans nodes {nodes}; tensor parallelism stays in a node"))
    index = {s.name: s for s in specs}
    members = [index[m] for m in g.models if m in index]
    for s in members:
        out.extend(Violation(where, f"{s.name}: {r}") for r in tp_violations(s, g.tp))
    out.extend(Violation(f"{where}.models", r) for r in memory_violations(members, g.n_gpus, memory, rules))
    temporal = (placement.scheduling or llm_config(instance).policy) == "temporal"
    shares = list(g.sm_share) if g.sm_share is not None else [1.0] * len(members)
    out.extend(Violation(f"{where}.sm_share", r) for r in share_violations(shares, rules, temporal))
    return out


def llm_rule_violations(placement: Placement, instance: Instance) -> List[Violation]:
    """Every hardware rule an LLM placement breaks under its rule set (see the module docstring).

    Model names the instance lacks are left to the structural check (they are skipped here).
    """
    rules = placement_rules(placement)
    if placement.windows:
        return [Violation("windows", "time-varying placements are not supported for LLM instances")]
    specs = llm_specs(instance)
    memory = mesh_memory(instance, rules)
    out: List[Violation] = []
    for gi, g in enumerate(placement.groups):
        out.extend(group_violations(instance, placement, gi, g, specs, memory, rules))
    return out
