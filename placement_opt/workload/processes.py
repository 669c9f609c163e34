"""Arrival processes: Poisson, Gamma renewal and a two-state MMPP.

Each generator returns sorted float64 arrival times in [start, start + duration).
They draw from the ``numpy.random.Generator`` they are given, so a seeded generator
gives the same arrivals on every run and platform.
"""

from __future__ import annotations

import numpy as np


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
