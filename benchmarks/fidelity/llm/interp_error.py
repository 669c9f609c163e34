"""Interpolation error of measured LLM cost tables, by leaving each measured point out.

The simulator looks latencies up between the grid points of a cost table (linear in batch
and length, as ``placement_opt.costs.costtable`` fills and interpolates). For every measured
point that has measured neighbours on both sides along batch or length, this hides it, loads
the table as the simulator does (the gap filled from the remaining points) and compares the
filled value with the measurement. Prints per table and phase (prefill, decode) the mean and
worst relative error and where the worst is, then one line over all tables.

Usage: python benchmarks/fidelity/llm/interp_error.py TABLE.json...
"""

from __future__ import annotations

import argparse
import copy
import json
from typing import Iterator, List, Tuple

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="+", help="cost-table JSON files (placeopt profile --llm)")
    args = ap.parse_args()
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
