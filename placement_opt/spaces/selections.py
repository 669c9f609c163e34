"""Model selections: which models every group of a fixed partition and config holds.

For each group the feasible selections are the subsets of the models whose per-stage
weights fit the usable memory. Models with identical weight vectors are interchangeable for
counting, so counts are exact products of binomials even when enumerating would be hopeless.
"""

from __future__ import annotations

import itertools
import math
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.instance import Instance


def _weight_vector(instance: Instance, m: int, pp: int, tp: int) -> Optional[Tuple[float, ...]]:
    """Per-stage per-GPU weight bytes of model ``m`` in config (pp, tp), or None when unprofiled."""
    cfg = instance.model_profiles[m].config(pp, tp)
    return None if cfg is None else tuple(float(x) for x in cfg.stage_weight_bytes)


class ModelSelections:
    """Selections for groups given as ``configs`` = [(pp, tp), ...] over ``models``.

    Iterates tuples (one sorted tuple of model indices per group). ``count_unpruned`` is
    2^models per group (every subset); the kept subsets fit memory. ``symmetric=True`` keeps
    only one ordering of the selections of interchangeable groups (same config), which is
    what an exhaustive search needs.
    """

    def __init__(self, instance: Instance, configs: Sequence[tuple[int, int]], models: Sequence[int] | None = None,
                 symmetric: bool = False):
        self.instance = instance
        self.configs = [tuple(c) for c in configs]
        self.models = list(range(len(instance.models))) if models is None else sorted(models)
        self.symmetric = symmetric
        self.budget = instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)

    def group_subsets(self, pp: int, tp: int) -> Iterator[tuple[int, ...]]:
        """Memory-feasible subsets for one group, in lexicographic order (the empty one first)."""
        items = [(m, np.asarray(w)) for m in self.models
                 if (w := _weight_vector(self.instance, m, pp, tp)) is not None]

        def rec(i: int, used: np.ndarray, chosen: List[int]) -> Iterator[tuple[int, ...]]:
            if i == len(items):
                yield tuple(chosen)
                return
            yield from rec(i + 1, used, chosen)
            m, w = items[i]
            if np.all(used + w <= self.budget):
                chosen.append(m)
                yield from rec(i + 1, used + w, chosen)
                chosen.pop()

        yield from rec(0, np.zeros(pp), [])

    def count_group(self, pp: int, tp: int) -> int:
        """Feasible subsets of one group, counted over classes of identical weight vectors."""
        classes: Dict[Tuple[float, ...], int] = {}
        for m in self.models:
            w = _weight_vector(self.instance, m, pp, tp)
            if w is not None:
                classes[w] = classes.get(w, 0) + 1
        items = list(classes.items())

        def rec(i: int, used: np.ndarray) -> int:
            if i == len(items):
                return 1
            weights, n = items[i]
            w = np.asarray(weights)
            total = 0
            for k in range(n + 1):
                load = used + k * w
                if np.any(load > self.budget):
                    break
                total += math.comb(n, k) * rec(i + 1, load)
            return total

        return rec(0, np.zeros(pp))

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], ...]]:
        per_group = [list(self.group_subsets(*c)) for c in self.configs]
        if not self.symmetric:
            yield from itertools.product(*per_group)
            return
        for combo in itertools.product(*[range(len(p)) for p in per_group]):
            if any(self.configs[a] == self.configs[a + 1] and combo[a] > combo[a + 1]
                   for a in range(len(combo) - 1)):
                continue
            yield tuple(per_group[g][i] for g, i in enumerate(combo))

    def count(self) -> int:
        if not self.symmetric:
            return math.prod(self.count_group(*c) for c in self.configs)
        total = 1
        for c, run in itertools.groupby(self.configs):
            k = len(list(run))
            total *= math.comb(self.count_group(*c) + k - 1, k)  # multisets of size k
        return total

    def count_unpruned(self) -> int:
        return 2 ** (len(self.models) * len(self.configs))
