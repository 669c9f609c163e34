"""Interpolation error of measured LLM cost tables, by leaving each measured point out.

The simulator looks latencies up between the grid points of a cost table (linear in batch
and length, as ``placement_opt.costs.costtable`` fills and interpolates). For every measured
point that has measured neighbours on both sides along batch or length, this hides it, loads
the table as the simulator does (the gap filled from the remaining points) and compares the
filled value with the measurement. Prints per table and phase (prefill, decode) the mean and
worst relative error and where the worst is, then one line over all tables.

With ``--shares`` it checks the SM-share axis instead: every measured share between two others is
hidden and its planes looked up from the shares left (``--from-ends``: from the smallest and the
largest share alone, as a table measured at a few shares is used), at every point measured at
that share. It prints the table's rule (linear in one over the SMs a share gets,
``TPTable.at_share``) beside the baseline of linear in the share itself, both from the same
planes, and one line over all tables with their ratio.

Usage: python benchmarks/fidelity/llm/interp_error.py [--shares [--from-ends]] TABLE.json...
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Dict, Iterator, List, Tuple

import numpy as np

from placement_opt.costs.costtable import CostTable

PHASES = (("prefill_ms", "prefill_s"), ("decode_ms", "decode_s"))


def _interior(grid: list, k: int, i: int, j: int) -> bool:
    """Whether point (k, i, j) has measured neighbours on both sides along batch or length."""
    row = grid[k][i]
    col = [grid[k][b][j] for b in range(len(grid[k]))]

    def between(values: list, at: int) -> bool:
        return any(v is not None for v in values[:at]) and any(v is not None for v in values[at + 1:])

    return between(row, j) or between(col, i)


def points(raw: dict) -> Iterator[Tuple[str, str, str, int, int, int]]:
    """(tp, json key, table attribute, share, batch, length index) of every interior measured point."""
    for tp, t in raw["tp"].items():
        for key, attr in PHASES:
            grid = t[key]
            for k in range(len(grid)):
                for i in range(len(grid[k])):
                    for j in range(len(grid[k][i])):
                        if grid[k][i][j] is not None and _interior(grid, k, i, j):
                            yield tp, key, attr, k, i, j


def leave_one_out(raw: dict) -> List[Tuple[str, float, str]]:
    """(phase, relative error, where) for every interior measured point of the table ``raw``."""
    out = []
    for tp, key, attr, k, i, j in points(raw):
        hidden = copy.deepcopy(raw)
        measured = hidden["tp"][tp][key][k][i][j] / 1e3
        hidden["tp"][tp][key][k][i][j] = None
        table = CostTable.from_dict("loo", hidden, "table").tables[int(tp)]
        filled = float(getattr(table, attr)[k, i, j])
        t = raw["tp"][tp]
        where = f"tp {tp} share {t['sm_share'][k]} batch {t['batch'][i]} len {t['seq_len'][j]}"
        out.append((key.split("_")[0], abs(filled - measured) / measured, where))
    return out


def _with_shares(raw: dict, tp: str, keep: List[int]) -> dict:
    """``raw`` with degree ``tp``'s table cut to the shares at indices ``keep``."""
    out = copy.deepcopy(raw)
    t = out["tp"][tp]
    for key in ("sm_share", "prefill_ms", "decode_ms"):
        t[key] = [t[key][k] for k in keep]
    return out


def hidden_shares(raw: dict, from_ends: bool) -> List[Tuple[str, float, float, str]]:
    """(phase, error of the table's rule, error of linear in the share, where) at every point
    measured at a hidden share: each share between two others hidden in turn and looked up from
    its two neighbours (``from_ends``: from the smallest and the largest share)."""
    out = []
    full = CostTable.from_dict("full", raw, "table")
    for tp, t in raw["tp"].items():
        shares = t["sm_share"]
        for k in range(1, len(shares) - 1):
            keep = [0, len(shares) - 1] if from_ends else [k - 1, k + 1]
            part = CostTable.from_dict("part", _with_shares(raw, tp, keep), "table").tables[int(tp)]
            lo, hi = shares[keep[0]], shares[keep[1]]
            w = (shares[k] - lo) / (hi - lo)
            rule = dict(zip(("prefill_s", "decode_s"), part.at_share(shares[k])))
            for key, attr in PHASES:
                measured = getattr(full.tables[int(tp)], attr)[k]
                linear = (1 - w) * getattr(part, attr)[0] + w * getattr(part, attr)[1]
                for i, j in zip(*np.nonzero(np.array([[v is not None for v in row] for row in t[key][k]]))):
                    m = measured[i, j]
                    out.append((key.split("_")[0], abs(rule[attr][i, j] - m) / m, abs(linear[i, j] - m) / m,
                                f"tp {tp} share {shares[k]} batch {t['batch'][i]} len {t['seq_len'][j]}"))
    return out


def report_shares(paths: List[str], from_ends: bool) -> None:
    """Per table and phase the mean and worst error of both rules at the hidden shares, then one
    line over every table."""
    totals: Dict[str, List[float]] = {"rule": [], "linear": []}
    for path in paths:
        with open(path) as f:
            raw = json.load(f)
        rows = hidden_shares(raw, from_ends)
        for phase in ("prefill", "decode"):
            errs = [r for r in rows if r[0] == phase]
            if not errs:
                continue
            totals["rule"] += [r[1] for r in errs]
            totals["linear"] += [r[2] for r in errs]
            worst = max(errs, key=lambda r: r[1])
            print(f"{raw['model']:12} {phase:8} points {len(errs):4}  1/SMs mean {np.mean([r[1] for r in errs]):.3f} "
                  f"max {worst[1]:.3f} ({worst[3]})  linear in share mean {np.mean([r[2] for r in errs]):.3f} "
                  f"max {max(r[2] for r in errs):.3f}")
    if totals["rule"]:
        rule, linear = np.mean(totals["rule"]), np.mean(totals["linear"])
        print(f"share_interpolation_error_mean={rule:.4f} max={max(totals['rule']):.4f} "
              f"linear_in_share_mean={linear:.4f} max={max(totals['linear']):.4f} ratio={rule / linear:.3f} "
              f"points={len(totals['rule'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", help="cost-table JSON files (placeopt profile --llm)")
    ap.add_argument("--shares", action="store_true", help="hide whole SM shares instead of grid points")
    ap.add_argument("--from-ends", action="store_true", help="with --shares: look up from the end shares alone")
    args = ap.parse_args()
    if args.shares:
        report_shares(args.tables, args.from_ends)
        return
    everything: List[float] = []
    for path in args.tables:
        with open(path) as f:
            raw = json.load(f)
        rows = leave_one_out(raw)
        for phase in ("prefill", "decode"):
            errs = [(e, w) for p, e, w in rows if p == phase]
            if not errs:
                continue
            worst = max(errs)
            everything += [e for e, _ in errs]
            print(f"{raw['model']:12} {phase:8} points {len(errs):4}  mean {sum(e for e, _ in errs) / len(errs):.3f}  "
                  f"max {worst[0]:.3f} ({worst[1]})")
    if everything:
        print(f"interpolation_error_mean={sum(everything) / len(everything):.4f} max={max(everything):.4f} "
              f"points={len(everything)}")


if __name__ == "__main__":
    main()
