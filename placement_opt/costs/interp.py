"""Numba helpers: piecewise-linear lookup of a latency table over (batch, length).

Tables are 2-D float64 arrays ``table[i, j]`` measured at ``batch_grid[i]`` and
``len_grid[j]``. Inside the grid the lookup is bilinear; beyond the last grid point it
extrapolates along the last segment (slope clamped to >= 0, so latency never falls with
more work); below the first point it clamps to the first value.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np
from numba import njit


@njit(cache=True)
def _bracket(grid: np.ndarray, x: float) -> Tuple[int, float]:
    """Index ``i`` and weight ``w`` so that x ~ grid[i] * (1 - w) + grid[i + 1] * w."""
    n = grid.shape[0]
    if n == 1:
        return 0, 0.0
    if x <= grid[0]:
        return 0, 0.0
    if x >= grid[n - 1]:
        i = n - 2
    else:
        lo, hi = 0, n - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if grid[mid] <= x:
                lo = mid
            else:
                hi = mid
        i = lo
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


@njit(cache=True)
def _along(v0: float, v1: float, w: float) -> float:
    """The value at weight ``w`` along the segment from ``v0`` (w=0) to ``v1`` (w=1)."""
    if w > 1.0 and v1 < v0:  # extrapolating a falling segment: hold the last value
        return v1
    return v0 + (v1 - v0) * w


@njit(cache=True)
def lookup(table: np.ndarray, batch_grid: np.ndarray, len_grid: np.ndarray, batch: float, length: float) -> float:
    """Latency at ``batch`` requests of ``length`` tokens (see the module docstring)."""
    i, wi = _bracket(batch_grid, batch)
    j, wj = _bracket(len_grid, length)
    if batch_grid.shape[0] == 1:
        if len_grid.shape[0] == 1:
            return table[0, 0]
        return _along(table[0, j], table[0, j + 1], wj)
    if len_grid.shape[0] == 1:
        return _along(table[i, 0], table[i + 1, 0], wi)
    a = _along(table[i, j], table[i, j + 1], wj)
    b = _along(table[i + 1, j], table[i + 1, j + 1], wj)
    return _along(a, b, wi)


@njit(cache=True)
def lookup_lengths(table: np.ndarray, batch_grid: np.ndarray, len_grid: np.ndarray, batch: float,
                   lengths: np.ndarray) -> np.ndarray:
    """:func:`lookup` at one batch size for every length in ``lengths``."""
    out = np.empty(lengths.shape[0])
    for i in range(lengths.shape[0]):
        out[i] = lookup(table, batch_grid, len_grid, batch, lengths[i])
    return out


@njit(cache=True)
def lookup_batches(table: np.ndarray, batch_grid: np.ndarray, len_grid: np.ndarray, batches: np.ndarray,
                   length: float) -> np.ndarray:
    """:func:`lookup` at one length for every batch size in ``batches``."""
    out = np.empty(batches.shape[0])
    for i in range(batches.shape[0]):
        out[i] = lookup(table, batch_grid, len_grid, batches[i], length)
    return out
