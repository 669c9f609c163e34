"""Arrival processes: Poisson, Gamma renewal and a two-state MMPP.

Each generator returns sorted float64 arrival times in [start, start + duration).
They draw from the ``numpy.random.Generator`` they are given, so a seeded generator
gives the same arrivals on every run and platform.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def gamma_arrivals(rng: np.random.Generator, rate: float, cv: float, duration: float, start: float = 0.0) -> np.ndarray:
    """Renewal process with gaps ~ Gamma(shape=1/cv^2, scale=cv^2/rate); cv=1 is Poisson.

    The first arrival is one gap after ``start`` (the process starts fresh at ``start``).
    """
    if rate <= 0 or duration <= 0:
        return np.empty(0, dtype=np.float64)
    shape = 1.0 / (cv * cv)
    scale = cv * cv / rate
    expected = rate * duration
    chunks = []
    t = start
    end = start + duration
    n = int(expected + 6.0 * np.sqrt(expected + 1.0) * max(cv, 1.0) + 16)
    while t < end:
        gaps = rng.gamma(shape, scale, size=n)
        times = t + np.cumsum(gaps)
        chunks.append(times)
        t = times[-1]
        n = max(16, n // 4)
    times = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return times[: np.searchsorted(times, end, side="left")]


def poisson_arrivals(rng: np.random.Generator, rate: float, duration: float, start: float = 0.0) -> np.ndarray:
    return gamma_arrivals(rng, rate, 1.0, duration, start)


def mmpp_arrivals(rng: np.random.Generator, rates: tuple[float, float], switch_rates: tuple[float, float],
                  duration: float, start: float = 0.0) -> np.ndarray:
    """Two-state Markov-modulated Poisson process.

    In state i arrivals are Poisson with ``rates[i]``; the process leaves state i after an
    exponential time with rate ``switch_rates[i]``. It starts in state 0.
    """
    end = start + duration
    t = start
    state = 0
    out = []
    while t < end:
        stay = rng.exponential(1.0 / switch_rates[state]) if switch_rates[state] > 0 else end - t
        stop = min(end, t + stay)
        if rates[state] > 0:
            k = rng.poisson(rates[state] * (stop - t))
            out.append(np.sort(rng.uniform(t, stop, size=k)))
        t = stop
        state = 1 - state
    if not out:
        return np.empty(0, dtype=np.float64)
    return np.concatenate(out)


def mmpp_mean_rate(rates: tuple[float, float], switch_rates: tuple[float, float]) -> float:
    """Long-run rate: state i is occupied a fraction switch_rates[1-i] / sum(switch_rates)."""
    q0, q1 = switch_rates
    return (rates[0] * q1 + rates[1] * q0) / (q0 + q1)


def power_law_split(total_rate: float, n: int, exponent: float) -> np.ndarray:
    """Rates proportional to (i + 1) ** -exponent, summing to ``total_rate``."""
    w = (np.arange(n, dtype=np.float64) + 1.0) ** (-exponent)
    return total_rate * w / w.sum()


#: Values per bucket, on average, of :func:`merge_sorted_runs`; larger buckets are sorted apart.
MERGE_BUCKET_FILL = 4
#: Buckets sorted apart (a stable merge sort) above this many values; insertion sort below.
SMALL_BUCKET = 32
#: Buckets filled per pass over the runs (about 64 k values: the part of the output written stays in cache).
SCATTER_WINDOW = 16384


@njit(cache=True)
def merge_sorted_runs(values: np.ndarray, starts: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge the sorted runs ``values[starts[r]:starts[r + 1]]`` into one sorted array, with the
    label of each value's run (``labels[r]``, int32) beside it.

    The order is exactly that of a stable sort of ``values`` (equal values keep run order, then
    their order within the run), in O(n) expected time: a stable counting sort into buckets of
    equal width (the bucket is a monotone function of the value, so equal values share one and
    buckets come in value order; the runs are read in order, so each bucket starts in run
    order; filled a window of buckets at a time, so that the writes stay in cache), then a
    stable sort inside every bucket (insertion sort for the few values of most
    buckets, a merge sort for the crowded ones of a burst).
    """
    n = values.shape[0]
    out = np.empty(n, dtype=np.float64)
    out_labels = np.empty(n, dtype=np.int32)
    if n == 0:
        return out, out_labels
    low, high = np.inf, -np.inf
    for r in range(starts.shape[0] - 1):
        if starts[r + 1] > starts[r]:
            low = min(low, values[starts[r]])
            high = max(high, values[starts[r + 1] - 1])
    n_buckets = max(1, n // MERGE_BUCKET_FILL)
    scale = (n_buckets - 1) / (high - low) if high > low else 0.0
    first = np.zeros(n_buckets + 1, dtype=np.int64)
    for i in range(n):
        first[int((values[i] - low) * scale) + 1] += 1
    for b in range(n_buckets):
        first[b + 1] += first[b]
    fill = first[:-1].copy()
    pos = starts[:-1].copy()
    for window_end in range(SCATTER_WINDOW, n_buckets + SCATTER_WINDOW, SCATTER_WINDOW):
        # bucket by bucket window, so that the writes stay within a cache-sized part of ``out``
        for r in range(starts.shape[0] - 1):
            i = pos[r]
            while i < starts[r + 1]:
                b = int((values[i] - low) * scale)
                if b >= window_end:
                    break
                out[fill[b]] = values[i]
                out_labels[fill[b]] = labels[r]
                fill[b] += 1
                i += 1
            pos[r] = i
    for b in range(n_buckets):
        _sort_bucket(out, out_labels, first[b], first[b + 1])
    return out, out_labels


@njit(cache=True)
def _sort_bucket(out: np.ndarray, out_labels: np.ndarray, lo: int, hi: int) -> None:
    """Stable sort of ``out[lo:hi]`` (labels alongside)."""
    if hi - lo > SMALL_BUCKET:
        order = np.argsort(out[lo:hi], kind="mergesort")
        out[lo:hi] = out[lo:hi][order]
        out_labels[lo:hi] = out_labels[lo:hi][order]
        return
    for i in range(lo + 1, hi):
        v = out[i]
        lab = out_labels[i]
        j = i - 1
        while j >= lo and out[j] > v:
            out[j + 1] = out[j]
            out_labels[j + 1] = out_labels[j]
            j -= 1
        out[j + 1] = v
        out_labels[j + 1] = lab
