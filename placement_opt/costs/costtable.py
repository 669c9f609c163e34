"""Measured LLM latency tables: prefill and decode-step latency per TP degree and SM share.

Format (JSON, times in ms; ``null`` marks a point that was not measured)::

    {"format": "placeopt-llm-cost-table", "version": 1, "model": "llama-7b", "gpu": "A100-80GB",
     "source": "...",
     "tp": {"1": {"sm_share": [0.3, ..., 1.0], "batch": [1, 2, ...], "seq_len": [32, ...],
                  "prefill_ms": [[[...]]], "decode_ms": [[[...]]]}}}

``prefill_ms[k][i][j]`` is the time of one prefill of ``batch[i]`` prompts of ``seq_len[j]``
tokens with ``sm_share[k]`` of the SMs of each of the ``tp`` GPUs; ``decode_ms[k][i][j]`` is
one decoding step of ``batch[i]`` requests whose context is ``seq_len[j]`` tokens.

Unmeasured points are filled when loading (:func:`fill_missing`): linearly between
measured neighbours along the batch axis, extrapolated along the last measured segment
beyond them (below the first measured point along the first segment, but never below
proportional to batch or length: a decode step at batch 1 costs about what it costs at
batch 2, not half), then along the length axis, then from the nearest SM share. Lookups between
SM shares are linear in one over the SMs: the latency is taken as ``a + b / SMs`` between two
measured shares (``b / SMs`` the work the SMs share out, ``a`` what more SMs do not speed up:
launches, the HBM's own limit). The SMs are the share itself, or for a table measured on SM
partitions (``sm_partition``) the SMs the executor gives that share
(:mod:`~placement_opt.costs.sm_partition`). Linear in the share itself overstated the latency
between distant shares: the A100 tables' shares 40-90 % looked up from 30 % and 100 % alone come
within 3-4 % on average for prefills, 4-15 % for decode steps, where linear in the share gave
19-21 % and 8-20 % (``benchmarks/fidelity/llm/interp_error.py --shares --from-ends``). Below
the smallest measured share the latency grows as its SMs over the share's (the same form with
``a`` = 0: compute-bound scaling, an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from placement_opt.validation import as_int, as_number, check_keys, get_list, get_str
from placement_opt.errors import InputError
from placement_opt.costs.interp import lookup
from placement_opt.costs.sm_partition import share_sms

FORMAT = "placeopt-llm-cost-table"


@dataclass(frozen=True, eq=False)
class TPTable:
    """One tensor-parallel degree: grids and filled latency arrays in seconds, [sm, batch, len]."""

    tp: int
    sm_share: np.ndarray
    batch: np.ndarray
    seq_len: np.ndarray
    prefill_s: np.ndarray
    decode_s: np.ndarray
    measured: np.ndarray  # bool [sm, batch, len, 2]: which (prefill, decode) points were measured
    # (the GPU's SMs, the granule a share's SMs are rounded down to) when the table was measured on
    # SM partitions made so (:mod:`~placement_opt.costs.sm_partition`); None: shares as they are
    sm_partition: Optional[Tuple[int, int]] = None

    def sm_fraction(self, share: float) -> float:
        """The fraction of the GPU's SMs an LLM of ``share`` runs on: with ``sm_partition`` its
        SMs rounded as the executor rounds them, else the share itself."""
        if self.sm_partition is None:
            return share
        total, granule = self.sm_partition
        return share_sms(share, total, granule) / total

    def at_share(self, share: float) -> Tuple[np.ndarray, np.ndarray]:
        """Prefill and decode tables (2-D, seconds) at SM fraction ``share``: between measured
        shares linear in ``1 / SMs`` (:meth:`sm_fraction`; a latency ``a + b / SMs``: work the
        SMs share out and a part they do not), below the smallest its latency times its SMs over
        ``share``'s, above the largest that latency."""
        sm = self.sm_share
        x = self.sm_fraction(share)
        if share <= sm[0]:
            f = self.sm_fraction(sm[0]) / max(x, 1e-6)
            return self.prefill_s[0] * f, self.decode_s[0] * f
        if share >= sm[-1]:
            return self.prefill_s[-1].copy(), self.decode_s[-1].copy()
        k = int(np.searchsorted(sm, share) - 1)
        lo, hi = self.sm_fraction(sm[k]), self.sm_fraction(sm[k + 1])
        w = (1.0 / x - 1.0 / lo) / (1.0 / hi - 1.0 / lo) if hi > lo else 0.0  # two shares on the same SMs
        return ((1 - w) * self.prefill_s[k] + w * self.prefill_s[k + 1],
                (1 - w) * self.decode_s[k] + w * self.decode_s[k + 1])


@dataclass(frozen=True, eq=False)
class CostTable:
    """Latency tables of one LLM by tensor-parallel degree (see the module docstring)."""

    name: str
    model: str
    tables: Dict[int, TPTable]
    gpu: str = ""
    source: str = ""
    sm_partition: Optional[Tuple[int, int]] = None  # see TPTable.sm_partition (every degree's)

    @property
    def tp_degrees(self) -> Tuple[int, ...]:
        return tuple(sorted(self.tables))

    def table_for(self, tp: int) -> TPTable:
        """The table of degree ``tp``. A degree the table lacks is an error, never a stand-in:
        another degree's latencies would be wrong and could hide a placement no engine runs."""
        if tp not in self.tables:
            raise InputError(f"cost table {self.name!r} has no tp={tp} (it has "
                             f"{', '.join(str(t) for t in self.tp_degrees)})", f"cost_tables[{self.name}].tp")
        return self.tables[tp]

    def at_share(self, tp: int, share: float) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(batch_grid, len_grid, prefill_2d_s, decode_2d_s)`` for the simulator's kernels."""
        t = self.table_for(tp)
        p, d = t.at_share(share)
        return t.batch, t.seq_len, np.ascontiguousarray(p), np.ascontiguousarray(d)

    def prefill_s(self, tp: int, share: float, batch: float, prompt: float) -> float:
        b, s, p, _ = self.at_share(tp, share)
        return float(lookup(p, b, s, float(batch), float(prompt)))

    def decode_s(self, tp: int, share: float, batch: float, context: float) -> float:
        b, s, _, d = self.at_share(tp, share)
        return float(lookup(d, b, s, float(batch), float(context)))

    def request_latency(self, tp: int, prompt: float, output: float, share: float = 1.0) -> float:
        """Latency of one request alone: its prefill, then ``output - 1`` decode steps."""
        lat = self.prefill_s(tp, share, 1, prompt)
        if output > 1:
            lat += (output - 1) * self.decode_s(tp, share, 1, prompt + output / 2.0)
        return lat

    def reference_latency(self, prompt: float = 161.0, output: float = 338.0) -> float:
        """Base of the SLO scale: one request of ShareGPT's mean lengths (161 prompt and 338
        output tokens, MuxServe paper) alone at the smallest TP degree with all SMs."""
        return self.request_latency(self.tp_degrees[0], prompt, output)

    @classmethod
    def from_dict(cls, name: str, data: Any, field: str) -> "CostTable":
        """The cost table of JSON object ``data`` (times in ms), checked and with gaps filled."""
        check_keys(data, field, ["format", "model", "tp"], ["version", "gpu", "source", "units", "sm_partition"])
        if data["format"] != FORMAT:
            raise InputError(f"expected format {FORMAT!r}", f"{field}.format")
        if data.get("units", "ms") != "ms":
            raise InputError("only ms is supported", f"{field}.units")
        model = get_str(data, "model", field)
        partition = _sm_partition(data, field)
        tps = data["tp"]
        if not isinstance(tps, dict) or not tps:
            raise InputError("expected a non-empty object {tp degree: table}", f"{field}.tp")
        tables = {}
        for key, t in tps.items():
            where = f"{field}.tp.{key}"
            try:
                tp = int(key)
            except ValueError:
                raise InputError("tp degree must be an integer", where) from None
            if tp < 1:
                raise InputError("tp degree must be >= 1", where)
            tables[tp] = replace(_tp_table(tp, t, where), sm_partition=partition)
        return cls(name=name, model=model, tables=tables, gpu=str(data.get("gpu", "")),
                   source=str(data.get("source", "")), sm_partition=partition)

    def to_dict(self) -> dict:
        """The raw (unfilled) table in the package format."""
        tp_tables: Dict[str, dict] = {}
        out = {"format": FORMAT, "version": 1, "model": self.model, "gpu": self.gpu, "source": self.source,
               "units": "ms", "tp": tp_tables}
        if self.sm_partition is not None:
            out["sm_partition"] = {"sms": self.sm_partition[0], "granule": self.sm_partition[1]}
        for tp, t in sorted(self.tables.items()):
            def raw(a: np.ndarray, k: int) -> list:
                return [[[float(round(v * 1e3, 6)) if m else None for v, m in zip(row, mrow)]
                         for row, mrow in zip(a[s], t.measured[s, :, :, k])] for s in range(len(t.sm_share))]
            tp_tables[str(tp)] = {"sm_share": t.sm_share.tolist(), "batch": [int(b) for b in t.batch],
                                  "seq_len": [int(n) for n in t.seq_len], "prefill_ms": raw(t.prefill_s, 0),
                                  "decode_ms": raw(t.decode_s, 1)}
        return out


def _sm_partition(data: dict, field: str) -> Optional[Tuple[int, int]]:
    """The table's optional ``sm_partition`` ``{"sms": total SMs, "granule": SMs}`` as a pair."""
    raw = data.get("sm_partition")
    if raw is None:
        return None
    where = f"{field}.sm_partition"
    check_keys(raw, where, ["sms", "granule"])
    total = as_int(raw["sms"], f"{where}.sms", minimum=1)
    granule = as_int(raw["granule"], f"{where}.granule", minimum=1)
    if granule > total:
        raise InputError(f"granule {granule} exceeds the GPU's {total} SMs", f"{where}.granule")
    return total, granule


def _grid(t: dict, key: str, where: str, lo: float, hi: float | None = None, integer: bool = True) -> np.ndarray:
    values = get_list(t, key, where)
    conv = [as_int(v, f"{where}.{key}", minimum=int(lo)) if integer else
            as_number(v, f"{where}.{key}", exclusive_minimum=lo, maximum=hi) for v in values]
    arr = np.asarray(conv, dtype=np.float64)
    if np.any(np.diff(arr) <= 0):
        raise InputError("must be strictly increasing", f"{where}.{key}")
    return arr


def _tp_table(tp: int, t: Any, where: str) -> TPTable:
    """The table of one TP degree from its JSON object ``t`` (ms, filled, converted to seconds)."""
    check_keys(t, where, ["sm_share", "batch", "seq_len", "prefill_ms", "decode_ms"])
    sm = _grid(t, "sm_share", where, 0.0, 1.0, integer=False)
    batch = _grid(t, "batch", where, 1)
    seq = _grid(t, "seq_len", where, 1)
    shape = (len(sm), len(batch), len(seq))
    arrays, masks = [], []
    for key in ("prefill_ms", "decode_ms"):
        raw = t[key]
        arr = np.full(shape, np.nan)
        if not isinstance(raw, list) or len(raw) != shape[0]:
            raise InputError(f"expected {shape[0]} x {shape[1]} x {shape[2]} nested lists", f"{where}.{key}")
        for k, plane in enumerate(raw):
            if not isinstance(plane, list) or len(plane) != shape[1]:
                raise InputError(f"expected {shape[1]} rows", f"{where}.{key}[{k}]")
            for i, row in enumerate(plane):
                if not isinstance(row, list) or len(row) != shape[2]:
                    raise InputError(f"expected {shape[2]} values", f"{where}.{key}[{k}][{i}]")
                for j, v in enumerate(row):
                    if v is None:
                        continue
                    arr[k, i, j] = as_number(v, f"{where}.{key}[{k}][{i}][{j}]", exclusive_minimum=0)
        masks.append(~np.isnan(arr))
        filled = fill_missing(arr, batch, seq)
        if np.isnan(filled).any():
            raise InputError("too sparse: some points cannot be filled from measured neighbours", f"{where}.{key}")
        arrays.append(filled / 1e3)
    return TPTable(tp=tp, sm_share=sm, batch=batch, seq_len=seq, prefill_s=arrays[0], decode_s=arrays[1],
                   measured=np.stack(masks, axis=-1))


def _fill_1d(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Fill NaNs of y(x): interpolate inside, extend the last measured segment above and the
    first segment below (never below proportional to x there)."""
    known = ~np.isnan(y)
    if known.all() or not known.any():
        return y
    xs, ys = x[known], y[known]
    out = y.copy()
    for i in np.flatnonzero(~known):
        if x[i] < xs[0]:
            out[i] = ys[0] * x[i] / xs[0]
            if len(xs) > 1:  # the first measured segment, never below proportional to x
                slope = max((ys[1] - ys[0]) / (xs[1] - xs[0]), 0.0)
                out[i] = max(out[i], ys[0] - slope * (xs[0] - x[i]))
        elif x[i] > xs[-1]:
            if len(xs) == 1:
                out[i] = ys[-1] * x[i] / xs[-1]
            else:
                slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
                out[i] = ys[-1] + slope * (x[i] - xs[-1])
        else:
            out[i] = np.interp(x[i], xs, ys)
    return out


def fill_missing(arr: np.ndarray, batch: np.ndarray | None = None, seq: np.ndarray | None = None) -> np.ndarray:
    """Fill unmeasured points of a [sm, batch, len] array (see the module docstring)."""
    out = arr.copy()
    n_sm, n_b, n_s = out.shape
    bx = np.arange(1, n_b + 1, dtype=float) if batch is None else batch
    sx = np.arange(1, n_s + 1, dtype=float) if seq is None else seq
    for k in range(n_sm):
        for j in range(n_s):
            out[k, :, j] = _fill_1d(bx, out[k, :, j])
        for i in range(n_b):
            out[k, i, :] = _fill_1d(sx, out[k, i, :])
    for k in range(n_sm):  # points missing at every batch and length of a share: nearest share
        gaps = np.isnan(out[k])
        if gaps.any():
            for dk in range(1, n_sm):
                for k2 in (k - dk, k + dk):
                    if 0 <= k2 < n_sm:
                        take = gaps & ~np.isnan(out[k2])
                        out[k][take] = out[k2][take]
                        gaps &= ~take
                if not gaps.any():
                    break
    return out
