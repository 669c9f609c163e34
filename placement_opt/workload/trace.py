"""Trace files: reading ``arrival_s,model[,prompt_tokens,output_tokens]`` CSVs and refitting them.

Refitting follows the AlpaServe evaluation: split a trace into fixed windows, fit a Gamma
process (rate and CV of the inter-arrival gaps) per model and window, then regenerate
arrivals from the fitted processes after scaling their rate and CV. This keeps a trace's
slow variations while letting experiments sweep load and burstiness.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.limits import MAX_TOKENS, read_capped
from placement_opt.workload.processes import gamma_arrivals


@dataclass(frozen=True, eq=False)
class Trace:
    """Arrival times (s), model names per request, and optional token counts."""

    arrival_s: np.ndarray
    model: list
    prompt_tokens: Optional[np.ndarray] = None
    output_tokens: Optional[np.ndarray] = None


_ALIASES = {
    "arrival_s": ("arrival_s", "arrived_at", "timestamp"),
    "model": ("model",),
    "prompt_tokens": ("prompt_tokens", "num_prefill_tokens"),
    "output_tokens": ("output_tokens", "num_decode_tokens"),
}


def read_trace(path: str) -> Trace:
    """Read a trace CSV. Also accepts the Splitwise column names (``arrived_at``,
    ``num_prefill_tokens``, ``num_decode_tokens``); a trace without a ``model`` column
    leaves model names empty (the workload then assigns requests round-robin)."""
    try:
        with open(path, "rb") as f:
            raw = read_capped(f, "")
        # -sig: a leading BOM is not header text
        reader = csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline=""))
        header = next(reader, None)
        rows = list(reader)
    except OSError as e:
        raise InputError(f"cannot read trace: {e.strerror}", "workload.trace.path", path) from None
    except InputError as e:
        raise e.with_file(path) from None
    except (UnicodeDecodeError, csv.Error) as e:
        reason = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else f"malformed CSV: {e}"
        raise InputError(reason, "", path) from None
    if not header:
        raise InputError("empty trace file", "header", path)
    header = [h.strip() for h in header]
    cols = {}
    for name, aliases in _ALIASES.items():
        for a in aliases:
            if a in header:
                cols[name] = header.index(a)
                break
    if "arrival_s" not in cols:
        raise InputError("no arrival_s column", "header", path)
    if ("prompt_tokens" in cols) != ("output_tokens" in cols):
        have, missing = ("prompt_tokens", "output_tokens") if "prompt_tokens" in cols else ("output_tokens",
                                                                                            "prompt_tokens")
        raise InputError(f"has a {have} column but no {missing} column (give both token counts or neither)",
                         "header", path)
    n = len(rows)
    arrival = np.empty(n, dtype=np.float64)
    models = []
    tokens = {k: np.empty(n, dtype=np.int32) for k in ("prompt_tokens", "output_tokens") if k in cols}
    for i, row in enumerate(rows):
        try:
            arrival[i] = float(row[cols["arrival_s"]])
            if "model" in cols:
                models.append(row[cols["model"]].strip())
            for k, arr in tokens.items():
                arr[i] = _token_count(row[cols[k]], k, i, path)
        except InputError:
            raise
        except (ValueError, IndexError, OverflowError):
            raise InputError("malformed row", f"line {i + 2}", path) from None
    if not np.all(np.isfinite(arrival)):
        raise InputError("arrival times must be finite", "arrival_s", path)
    if n and np.any(arrival < 0):
        raise InputError("arrival times must be >= 0", "arrival_s", path)
    for k, arr in tokens.items():
        if n and np.any(arr < (1 if k == "prompt_tokens" else 0)):
            raise InputError("token counts must be positive", k, path)
    order = np.argsort(arrival, kind="stable")
    return Trace(
        arrival_s=arrival[order],
        model=[models[i] for i in order] if models else [],
        prompt_tokens=tokens["prompt_tokens"][order] if "prompt_tokens" in tokens else None,
        output_tokens=tokens["output_tokens"][order] if "output_tokens" in tokens else None,
    )


def _token_count(text: str, column: str, row: int, path: str) -> int:
    """A token count of a trace row; over :data:`MAX_TOKENS` (int32) is an input error."""
    value = float(text)
    if value > MAX_TOKENS:
        raise InputError(f"{column} {value:.3g} is over the limit of {MAX_TOKENS} tokens", f"line {row + 2}", path)
    return int(value)


def fit_gamma(times: np.ndarray, window_start: float, window: float) -> tuple[float, float]:
    """Rate and CV of a window's arrivals (CV 1 when there are too few gaps to tell)."""
    rate = len(times) / window
    if len(times) < 3:
        return rate, 1.0
    gaps = np.diff(times)
    mean = gaps.mean()
    cv = float(gaps.std() / mean) if mean > 0 else 1.0
    return rate, max(cv, 1e-3)


def refit_arrivals(rng: np.random.Generator, times: np.ndarray, duration: float, window: float,
                   rate_scale: float = 1.0, cv_scale: float = 1.0) -> np.ndarray:
    """Regenerate one model's arrivals window by window from fitted Gamma processes."""
    out = []
    start = 0.0
    while start < duration:
        w = min(window, duration - start)
        lo, hi = np.searchsorted(times, [start, start + w])
        rate, cv = fit_gamma(times[lo:hi], start, w)
        if rate > 0:
            out.append(gamma_arrivals(rng, rate * rate_scale, cv * cv_scale, w, start))
        start += window
    return np.concatenate(out) if out else np.empty(0, dtype=np.float64)
