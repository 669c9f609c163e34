"""Inter-op pass: split a chain of K units into pipeline stages minimising the slowest stage.

Serving runs forward only, so (AlpaServe section 4.1)::

    F(s, k) = min_{i <= k} max(F(s-1, i-1), latency(i, k))

with ``latency(i, k)`` the sum of the per-unit latencies of units i..k on the stage's
mesh plus the send/recv of the stage's output when it is not the last unit. Every unit
has two intra-op plans: its fastest one and its leanest one (least weight memory). A
stage uses the fast plans if their weights fit the per-GPU budget, else the lean plans,
else it is infeasible (infinite cost). The DP is Numba-jitted; one run fills the table
for every stage count up to ``max_stages``, so callers can pick the best count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
from numba import njit

INF = np.inf


@dataclass(frozen=True, eq=False)
class StagePartition:
    """The DP's answer for one stage count."""

    stages: int
    bounds: Tuple[Tuple[int, int], ...]  # [start, end) unit ranges
    lean: Tuple[bool, ...]  # stage uses the lean plans
    max_latency: float  # inf when no feasible split exists


@dataclass(frozen=True, eq=False)
class InterOpTable:
    """``cost[s, k]``: best slowest-stage latency of units 0..k-1 in s stages (inf: infeasible)."""

    cost: np.ndarray
    choice: np.ndarray  # start unit of the last stage
    lean: np.ndarray  # whether that last stage uses lean plans

    @property
    def max_stages(self) -> int:
        return self.cost.shape[0] - 1

    @property
    def units(self) -> int:
        return self.cost.shape[1] - 1

    def best_stage_count(self) -> int:
        """Stage count with the lowest slowest-stage latency (ties: fewer stages); 0 if none."""
        finals = self.cost[1:, self.units]
        if not np.isfinite(finals).any():
            return 0
        return int(np.argmin(finals)) + 1

    def partition(self, stages: int) -> StagePartition:
        """Reconstruct the split into ``stages`` stages."""
        k = self.units
        best = float(self.cost[stages, k])
        if not np.isfinite(best):
            return StagePartition(stages, (), (), INF)
        bounds, lean = [], []
        for s in range(stages, 0, -1):
            i = int(self.choice[s, k])
            bounds.append((i, k))
            lean.append(bool(self.lean[s, k]))
            k = i
        return StagePartition(stages, tuple(reversed(bounds)), tuple(reversed(lean)), best)


def stage_dp(lat_fast: np.ndarray, mem_fast: np.ndarray, lat_lean: np.ndarray, mem_lean: np.ndarray,
             send: np.ndarray, budget: float, max_stages: int) -> InterOpTable:
    """Run the DP. ``send[s]`` is the send/recv time after stage s (0-based) when it is not last."""
    k = len(lat_fast)
    if not (len(mem_fast) == len(lat_lean) == len(mem_lean) == k):
        raise ValueError("per-unit arrays must have equal lengths")
    if len(send) < max_stages:
        raise ValueError("send needs one entry per stage")
    cost, choice, lean = _dp(np.ascontiguousarray(lat_fast, dtype=np.float64),
                             np.ascontiguousarray(mem_fast, dtype=np.float64),
                             np.ascontiguousarray(lat_lean, dtype=np.float64),
                             np.ascontiguousarray(mem_lean, dtype=np.float64),
                             np.ascontiguousarray(send, dtype=np.float64), float(budget), int(max_stages))
    return InterOpTable(cost=cost, choice=choice, lean=lean)


@njit(cache=True)
def _dp(lat_fast: np.ndarray, mem_fast: np.ndarray, lat_lean: np.ndarray, mem_lean: np.ndarray, send: np.ndarray,
        budget: float, max_stages: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The DP's cost, last-stage start and last-stage lean tables (see :class:`InterOpTable`)."""
    k = lat_fast.shape[0]
    plf = np.zeros(k + 1)
    pmf = np.zeros(k + 1)
    pll = np.zeros(k + 1)
    pml = np.zeros(k + 1)
    for j in range(k):
        plf[j + 1] = plf[j] + lat_fast[j]
        pmf[j + 1] = pmf[j] + mem_fast[j]
        pll[j + 1] = pll[j] + lat_lean[j]
        pml[j + 1] = pml[j] + mem_lean[j]
    slack = budget * (1.0 + 1e-12)
    cost = np.full((max_stages + 1, k + 1), np.inf)
    choice = np.full((max_stages + 1, k + 1), -1, dtype=np.int64)
    lean = np.zeros((max_stages + 1, k + 1), dtype=np.bool_)
    cost[0, 0] = 0.0
    for s in range(1, max_stages + 1):
        for end in range(s, k + 1):
            extra = send[s - 1] if end < k else 0.0
            best = np.inf
            best_i = -1
            best_lean = False
            # the last stage covers units start..end-1; earlier stages cover 0..start-1
            for start in range(end - 1, s - 2, -1):
                prev = cost[s - 1, start]
                if prev >= best:
                    continue
                if pmf[end] - pmf[start] <= slack:
                    stage = plf[end] - plf[start] + extra
                    is_lean = False
                elif pml[end] - pml[start] <= slack:
                    stage = pll[end] - pll[start] + extra
                    is_lean = True
                else:
                    break  # longer stages (smaller start) only hold more
                val = prev if prev > stage else stage
                if val < best:
                    best = val
                    best_i = start
                    best_lean = is_lean
            cost[s, end] = best
            choice[s, end] = best_i
            lean[s, end] = best_lean
    return cost, choice, lean


def uniform_partition(layers: int, stages: int) -> Tuple[Tuple[int, int], ...]:
    """The manual baseline of the paper's Fig. 16: equal transformer layers per stage.

    Units are [embedding, layer 1 .. layer ``layers``, LM head]; the embedding joins the
    first stage and the head the last, as in de-facto pipeline systems.
    """
    if not 1 <= stages <= layers:
        raise ValueError(f"cannot split {layers} layers into {stages} stages")
    cuts = np.linspace(0, layers, stages + 1).round().astype(int) + 1
    cuts[0], cuts[-1] = 0, layers + 2
    return tuple((int(cuts[i]), int(cuts[i + 1])) for i in range(stages))
