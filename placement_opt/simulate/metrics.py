"""Metrics of a simulated (or executed) run, computed from per-request outcomes."""

from __future__ import annotations

from typing import Any, Dict, Sequence

import numpy as np


def serving_metrics(arrival: np.ndarray, model: np.ndarray, finish: np.ndarray, model_names: Sequence[str],
                    duration_s: float, group_busy: np.ndarray | None = None,
                    group_stages: Sequence[int] | None = None) -> dict:
    """SLO attainment (overall, per model), goodput, latency stats and group busy fractions.

    ``finish < 0`` marks a request that was rejected or dropped. Attainment of a model
    with no requests is reported as 1.0 (nothing was missed) and flagged by its count.
    """
    ok = finish >= 0
    n = len(arrival)
    lat = (finish - arrival)[ok]
    counts = np.bincount(model, minlength=len(model_names))
    good = np.bincount(model[ok], minlength=len(model_names))
    per_model = {}
    for i, name in enumerate(model_names):
        per_model[name] = {
            "requests": int(counts[i]),
            "accepted": int(good[i]),
            "slo_attainment": float(good[i] / counts[i]) if counts[i] else 1.0,
        }
    out: Dict[str, Any] = {
        "requests": int(n),
        "accepted": int(ok.sum()),
        "slo_attainment": float(ok.sum() / n) if n else 1.0,
        "goodput_rps": float(ok.sum() / duration_s) if duration_s > 0 else 0.0,
        "latency_mean_s": float(lat.mean()) if lat.size else None,
        "latency_p50_s": float(np.percentile(lat, 50)) if lat.size else None,
        "latency_p90_s": float(np.percentile(lat, 90)) if lat.size else None,
        "latency_p99_s": float(np.percentile(lat, 99)) if lat.size else None,
        "per_model": per_model,
    }
    if group_busy is not None and group_stages is not None:
        out["group_busy_fraction"] = [float(b / (s * duration_s)) if duration_s > 0 else 0.0
                                      for b, s in zip(group_busy, group_stages)]
    return out
