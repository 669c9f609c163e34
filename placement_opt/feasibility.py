"""Feasibility of placements: per-GPU weight memory of a group, whether another model fits
it, and the full check of a placement against an instance.

The check is a list of *rules*. A rule is a function ``rule(placement, instance)`` that
yields a :class:`Violation` (a field path into the placement file and a one-line reason) for
every way the placement breaks it; rules that need no instance (self-consistency) are given
``instance=None``. :func:`placement_violations` lists every violation of every rule (what
``placeopt validate PLACEMENT --instance INSTANCE`` prints); :func:`check_placement` raises
the first as an :class:`InputError` and stops there, so checking a valid placement costs one
pass. New rules (e.g. hardware rules of LLM meshes) are added with :func:`register_rule`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, List, Optional, Set, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.llm_rules import llm_rule_violations
from placement_opt.placement import Group, Placement


@dataclass(frozen=True)
class Violation:
    """One way a placement breaks a rule: where (a JSON path such as ``groups[2].devices``)
    and why, in one line."""

    field: str
    reason: str

    def error(self, file: Optional[str] = None) -> InputError:
        """This violation as the input error the CLI prints (``FILE: FIELD: REASON``)."""
        return InputError(self.reason, self.field, file)


#: a rule: yields the violations of ``placement`` (against ``instance``, None for rules of the
#: placement alone)
Rule = Callable[[Placement, Optional[Instance]], Iterable[Violation]]
_RULES: List[Tuple[Rule, bool]] = []  #: (rule, needs an instance), in the order they run


def register_rule(rule: Rule, *, needs_instance: bool = True) -> Rule:
    """Add ``rule`` to the checks of every placement (after the rules already registered).

    A rule with ``needs_instance=False`` also runs without an instance (``placeopt validate
    PLACEMENT``); otherwise it is given the instance and runs only when one is known."""
    _RULES.append((rule, needs_instance))
    return rule


def iter_violations(placement: Placement, instance: Optional[Instance] = None) -> Iterator[Violation]:
    """The violations of every registered rule, lazily, in rule order (those needing an
    instance only when ``instance`` is given)."""
    for rule, needs_instance in _RULES:
        if needs_instance and instance is None:
            continue
        yield from rule(placement, instance)


def placement_violations(placement: Placement, instance: Optional[Instance] = None) -> List[Violation]:
    """Every violation of ``placement`` (on its own, and against ``instance`` if given)."""
    return list(iter_violations(placement, instance))


def check_placement(placement: Placement, instance: Optional[Instance] = None) -> None:
    """Validate a placement (against an instance if given): raise the first violation as an
    :class:`InputError`."""
    for violation in iter_violations(placement, instance):
        raise violation.error()


def self_consistency(placement: Placement, _instance: Optional[Instance] = None) -> Iterator[Violation]:
    """No device listed twice in a group or in two groups of one window, no model twice in a
    group: rules of the placement alone (``Group`` itself refuses pp x tp other than its
    number of devices)."""
    for wi, groups in enumerate(placement.all_group_sets):
        prefix = f"windows[{wi}]." if placement.windows else ""
        owner: dict[int, int] = {}
        for gi, g in enumerate(groups):
            where = f"{prefix}groups[{gi}]"
            seen: Set[int] = set()
            for dev in g.devices:
                if dev in seen:
                    yield Violation(f"{where}.devices", f"device {dev} is listed twice")
                    continue
                seen.add(dev)
                if dev in owner:
                    yield Violation(f"{where}.devices", f"device {dev} is in two groups "
                                                        f"({prefix}groups[{owner[dev]}] and this one)")
                else:
                    owner[dev] = gi
            for name in sorted(m for m, n in Counter(g.models).items() if n > 1):
                yield Violation(f"{where}.models", f"model {name!r} is listed twice")


def instance_consistency(placement: Placement, instance: Optional[Instance]) -> Iterator[Violation]:
    """Every device exists in the instance's cluster and every model in its models."""
    assert instance is not None
    names = set(instance.model_names)
    n_gpus = instance.cluster.n_gpus
    for wi, groups in enumerate(placement.all_group_sets):
        prefix = f"windows[{wi}]." if placement.windows else ""
        for gi, g in enumerate(groups):
            where = f"{prefix}groups[{gi}]"
            for dev in sorted({d for d in g.devices if d >= n_gpus}):
                yield Violation(f"{where}.devices", f"device {dev} does not exist (cluster has {n_gpus})")
            for m in g.models:
                if m not in names:
                    yield Violation(f"{where}.models", f"no model named {m!r} in the instance")


def memory_fits(placement: Placement, instance: Optional[Instance]) -> Iterator[Violation]:
    """Every model of a DNN group has a profile for its (pp, tp), and the weights of each stage
    fit the GPU's usable memory. (LLM meshes are checked by the LLM rules.)"""
    assert instance is not None
    if instance.is_llm:
        return
    names = set(instance.model_names)
    budget = instance.cluster.gpu.usable_memory_bytes
    for wi, groups in enumerate(placement.all_group_sets):
        prefix = f"windows[{wi}]." if placement.windows else ""
        for gi, g in enumerate(groups):
            where = f"{prefix}groups[{gi}]"
            per_model = {m: model_stage_bytes(instance, instance.model_index(m), g.pp, g.tp)
                         for m in dict.fromkeys(g.models) if m in names}
            unprofiled = [m for m, need in per_model.items() if need is None]
            for m in unprofiled:
                yield Violation(f"{where}.models", f"model {m!r} has no profile for pp={g.pp} tp={g.tp}")
            if unprofiled:
                continue
            need = sum((b for b in per_model.values() if b is not None), np.zeros(g.pp)).max(initial=0.0)
            if need > budget * (1 + 1e-9):
                yield Violation(f"{where}.models", f"models need {need / 1e9:.2f} GB per GPU, over the budget of "
                                                   f"{budget / 1e9:.2f} GB")


def stage_bytes(instance: Instance, group: Group, where: str = "groups") -> np.ndarray:
    """Weight bytes each GPU of every stage of ``group`` holds for its models.

    A model without a profile for the group's (pp, tp) is an input error at ``where``.
    """
    out = np.zeros(group.pp)
    for name in group.models:
        cfg = instance.model_profiles[instance.model_index(name)].config(group.pp, group.tp)
        if cfg is None:
            raise InputError(f"model {name!r} has no profile for pp={group.pp} tp={group.tp}", f"{where}.models")
        out += np.asarray(cfg.stage_weight_bytes)
    return out


def model_stage_bytes(instance: Instance, model: int, pp: int, tp: int) -> Optional[np.ndarray]:
    """Per-stage per-GPU bytes of one model in config (pp, tp), or None when unprofiled."""
    cfg = instance.model_profiles[model].config(pp, tp)
    return None if cfg is None else np.asarray(cfg.stage_weight_bytes)


def fits(instance: Instance, used: np.ndarray, model: int, pp: int, tp: int) -> bool:
    """Whether ``model`` fits next to stage usage ``used`` under the usable memory."""
    need = model_stage_bytes(instance, model, pp, tp)
    if need is None:
        return False
    return bool(np.all(used + need <= instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)))


def llm_hardware_rules(placement: Placement, instance: Optional[Instance]) -> Iterator[Violation]:
    """The LLM hardware rules of ``llm_rules`` (TP and heads, memory reserves, SM shares...)
    for an LLM instance."""
    assert instance is not None
    if instance.is_llm:
        for v in llm_rule_violations(placement, instance):
            yield Violation(v.field, v.reason)


register_rule(self_consistency, needs_instance=False)
register_rule(instance_consistency)
register_rule(memory_fits)
register_rule(llm_hardware_rules)
