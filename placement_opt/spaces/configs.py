"""Parallel configurations (pp, tp) a group of a given size can run for a set of models."""

from __future__ import annotations

from functools import cached_property
from typing import Iterator, List, Optional, Sequence, Set, Tuple

from placement_opt.instance import Instance
from placement_opt.parallel import enumerate_parallel_configs


def _auto_parallel(instance: Instance, model: int, n_gpus: int) -> Optional[List[Tuple[int, int]]]:
    """(pp, tp) pairs the auto-parallelizer finds for a model with an architecture, else None
    (a model known only by its measured profile)."""
    spec = instance.models[model]
    if spec.architecture is None:
        return None
    return [(pp, tp) for pp, tp in enumerate_parallel_configs(spec, n_gpus, instance.cluster)]


def distinct_models(instance: Instance, models: Sequence[int]) -> list[int]:
    """The first model of every distinct (profile, architecture) pair among ``models``: models
    that share both share their configs, and large instances have thousands of models of a few
    kinds (callers that build many :class:`ParallelConfigs` of one bucket pass these instead)."""
    seen = set()
    out = []
    for m in models:
        key = (id(instance.model_profiles[m]), id(instance.models[m].architecture))
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out


class ParallelConfigs:
    """(pp, tp) with pp x tp = ``size`` that at least one of ``models`` can run in memory.

    Candidates come from :func:`placement_opt.parallel.enumerate_parallel_configs` for a
    model with an architecture, else from the model's profile; a kept config must be profiled (the
    simulator needs its latencies) and fit the usable memory for some model.
    ``count_unpruned`` is every factorisation of ``size`` into pp x tp.
    """

    def __init__(self, instance: Instance, size: int, models: Sequence[int] | None = None, tp: int | None = None):
        self.instance = instance
        self.size = size
        self.models = list(range(len(instance.models))) if models is None else list(models)
        self.tp = tp

    @cached_property
    def _kept(self) -> list[tuple[int, int]]:
        budget = self.instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
        kept: Set[Tuple[int, int]] = set()
        for m in distinct_models(self.instance, self.models):
            prof = self.instance.model_profiles[m]
            cands = _auto_parallel(self.instance, m, self.size)
            if cands is None:
                cands = [k for k in prof.configs if k[0] * k[1] == self.size]
            for pp, tp in cands:
                if pp * tp != self.size or (self.tp is not None and tp != self.tp):
                    continue
                cfg = prof.config(pp, tp)
                if cfg is not None and cfg.max_stage_weight_bytes <= budget:
                    kept.add((pp, tp))
        # more pipeline stages first: higher throughput, the usual winner at loose SLOs
        return sorted(kept, key=lambda c: (-c[0], c[1]))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._kept)

    def count(self) -> int:
        return sum(1 for _ in self)

    def count_unpruned(self) -> int:
        return sum(1 for pp in range(1, self.size + 1) if self.size % pp == 0)
