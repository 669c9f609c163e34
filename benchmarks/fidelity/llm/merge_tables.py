"""Merge LLM cost tables measured at different SM shares into one table per model.

`placeopt profile --llm` writes one table per call; when shares are measured in separate
calls (to fit the device's 10-minute limit) this joins them: shares are taken from every
input in order, a share measured twice keeps the later measurement, and the batch and
sequence-length grids must be equal.

Usage: python benchmarks/fidelity/llm/merge_tables.py OUT_DIR IN_DIR [IN_DIR ...]
(every `*.json` table that is not a `.details.json` file, matched by file name).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def merge_rows(into: dict, extra: dict, name: str) -> None:
    """Add `extra`'s shares to `into` (one TP degree of one table), in share order."""
    for key in ("batch", "seq_len"):
        if into[key] != extra[key]:
            raise SystemExit(f"{name}: {key} grids differ ({into[key]} vs {extra[key]})")
    rows = {s: (p, d) for s, p, d in zip(into["sm_share"], into["prefill_ms"], into["decode_ms"])}
    rows.update({s: (p, d) for s, p, d in zip(extra["sm_share"], extra["prefill_ms"], extra["decode_ms"])})
    shares = sorted(rows)
    into["sm_share"] = shares
    into["prefill_ms"] = [rows[s][0] for s in shares]
    into["decode_ms"] = [rows[s][1] for s in shares]


def main(out_dir: str, *in_dirs: str) -> None:
    """Write the merged tables of every model found in `in_dirs` into `out_dir`."""
    names = sorted({p.name for d in in_dirs for p in Path(d).glob("*.json") if not p.name.endswith(".details.json")})
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    for name in names:
        tables = [json.loads((Path(d) / name).read_text()) for d in in_dirs if (Path(d) / name).exists()]
        merged = tables[0]
        for extra in tables[1:]:
            if extra.get("sm_partition") != merged.get("sm_partition"):
                raise SystemExit(f"{name}: the tables' sm_partition differ ({merged.get('sm_partition')} and "
                                 f"{extra.get('sm_partition')}): measured on SM partitions made otherwise")
            for tp, rows in extra["tp"].items():
                if tp in merged["tp"]:
                    merge_rows(merged["tp"][tp], rows, name)
                else:
                    merged["tp"][tp] = rows
            merged["source"] = f"{merged['source']}; merged with: {extra['source']}"
        (Path(out_dir) / name).write_text(json.dumps(merged, indent=1) + "\n")
        print(f"{name}: shares {[t['sm_share'] for t in merged['tp'].values()]}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], *sys.argv[2:])
