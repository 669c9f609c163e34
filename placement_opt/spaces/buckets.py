"""Model buckets (models of similar latency) and device buckets (devices per model bucket).

Putting small and large models in one group causes convoy effects, so AlpaServe's
Algorithm 2 first splits the models into buckets: models are sorted by reference latency
and every bucketing is a contiguous split of that order that separates any two models whose
latencies differ by more than ``threshold`` (a ratio). Device buckets give each model bucket
a number of devices (in multiples of ``unit``); those whose device share is far from the
bucket's share of the load are pruned.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.workload import Requests


def model_loads(instance: Instance, requests: Optional[Requests] = None) -> np.ndarray:
    """GPU-seconds per second each model asks for: its request rate x its reference latency."""
    req = instance.requests() if requests is None else requests
    n = len(instance.models)
    counts = np.bincount(req.model, minlength=n).astype(np.float64)
    duration = max(req.duration_s, 1e-9)
    budget = instance.cluster.gpu.usable_memory_bytes
    lat = np.array([p.reference_latency(budget) for p in instance.model_profiles])
    return counts / duration * lat


def latency_classes(instance: Instance, models: Sequence[int]) -> list[tuple[float, tuple[int, ...]]]:
    """Models grouped by equal reference latency (the SLO's: on the fewest GPUs that hold the
    model), in increasing latency."""
    budget = instance.cluster.gpu.usable_memory_bytes
    by_lat: Dict[float, List[int]] = {}
    for m in models:
        lat = round(instance.model_profiles[m].reference_latency(budget), 12)
        by_lat.setdefault(lat, []).append(m)
    return [(lat, tuple(ms)) for lat, ms in sorted(by_lat.items())]


class ModelBuckets:
    """Contiguous splits of the latency-sorted models; each bucket's max/min latency <= threshold.

    Iterates tuples of buckets (each a tuple of model indices). ``max_buckets`` caps the
    number of buckets. ``count_unpruned`` is every contiguous split of the latency classes.
    """

    def __init__(self, instance: Instance, threshold: float = 2.0, models: Sequence[int] | None = None,
                 max_buckets: int = 4):
        if threshold < 1:
            raise InputError("must be >= 1 (a latency ratio)", "solver.options.bucket_threshold")
        self.classes = latency_classes(instance, range(len(instance.models)) if models is None else models)
        self.threshold = threshold
        self.max_buckets = max_buckets

    def _splits(self, start: int, left: int) -> Iterator[List[Tuple[int, int]]]:
        """Every split of classes ``start..`` into at most ``left`` buckets, as [start, end) class ranges."""
        c = self.classes
        if start == len(c):
            yield []
            return
        if left == 0:
            return
        for end in range(start + 1, len(c) + 1):
            if c[end - 1][0] > c[start][0] * self.threshold * (1 + 1e-12):
                break
            for rest in self._splits(end, left - 1):
                yield [(start, end)] + rest

    def __iter__(self) -> Iterator[tuple[tuple[int, ...], ...]]:
        for split in self._splits(0, self.max_buckets):
            yield tuple(tuple(m for k in range(a, b) for m in self.classes[k][1]) for a, b in split)

    def count(self) -> int:
        return sum(1 for _ in self._splits(0, self.max_buckets))

    def count_unpruned(self) -> int:
        return 2 ** max(len(self.classes) - 1, 0)


class DeviceBuckets:
    """Device counts (multiples of ``unit``, at least ``minimum[b]``) for every bucket.

    A composition is kept when every bucket's devices per unit of load is within a factor
    ``tolerance`` of the cluster's average (the paper's "similar requests per second per
    bucket"); the best-balanced composition is always kept. Iterates tuples of counts,
    best-balanced first.
    """

    def __init__(self, n_devices: int, loads: Sequence[float], unit: int = 1, tolerance: float = 2.0,
                 minimum: Sequence[int] | None = None):
        if unit < 1 or n_devices % unit:
            raise InputError(f"unit {unit} does not divide the {n_devices} devices", "solver.options.device_unit")
        self.n_units = n_devices // unit
        self.unit = unit
        self.loads = np.maximum(np.asarray(loads, dtype=np.float64), 1e-12)
        self.tolerance = tolerance
        k = len(self.loads)
        self.min_units = [max(1, math.ceil((minimum[b] if minimum else 1) / unit)) for b in range(k)]

    def _compositions(self, b: int, left: int) -> Iterator[Tuple[int, ...]]:
        """Every split of ``left`` units over buckets ``b..``, each at least its minimum."""
        k = len(self.loads)
        if b == k - 1:
            if left >= self.min_units[b]:
                yield (left,)
            return
        rest_min = sum(self.min_units[b + 1:])
        for u in range(self.min_units[b], left - rest_min + 1):
            for tail in self._compositions(b + 1, left - u):
                yield (u,) + tail

    def _imbalance(self, comp: Sequence[int]) -> float:
        """Largest over smallest ratio of a bucket's device share to its load share."""
        share = np.asarray(comp, dtype=np.float64) / self.n_units
        ratio = share / (self.loads / self.loads.sum())
        return float(ratio.max() / ratio.min())

    @cached_property
    def _kept(self) -> List[Tuple[int, ...]]:
        scored = [(self._imbalance(c), c) for c in self._compositions(0, self.n_units)]
        if not scored:
            return []
        best = min(scored)[1]
        kept = [(s, c) for s, c in scored if s <= self.tolerance or c == best]
        kept.sort(key=lambda sc: sc[0])  # best-balanced first (stable: ties keep enumeration order)
        return [tuple(u * self.unit for u in c) for _, c in kept]

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self._kept)

    def count(self) -> int:
        return sum(1 for _ in self)

    def count_unpruned(self) -> int:
        k = len(self.loads)
        return math.comb(self.n_units - 1, k - 1) if self.n_units >= k else 0
