"""Convert MuxServe's profiling JSON into the package's cost-table format.

MuxServe's ``llama-a100-cost.json`` (public artifact, A100 80 GB) nests
``model -> GPUs (tp) -> SM % -> batch -> sequence length -> {"prefill", "decoding"}`` in ms,
with ``-1`` for points that were not measured (they become ``null``).

Run ``python -m placement_opt.offline.convert_muxserve SRC OUTDIR`` to write one table per model
(``OUTDIR/<model>-a100.json``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional

from placement_opt.errors import InputError
from placement_opt.io import atomic_write_json
from placement_opt.costs.costtable import FORMAT

SOURCE = ("MuxServe artifact profiling data llama-a100-cost.json (A100 80 GB; ms; -1 = not measured), "
          "converted by placement_opt.offline.convert_muxserve")


def convert_muxserve(data: dict, gpu: str = "A100-80GB") -> dict:
    """``{model: cost table dict}`` from MuxServe's nested profiling JSON."""
    if not isinstance(data, dict) or not data:
        raise InputError("expected an object {model: {tp: {sm%: {batch: {seq: {prefill, decoding}}}}}}", "")
    out = {}
    for model, by_tp in data.items():
        tps = {}
        for tp_key, by_sm in by_tp.items():
            where = f"{model}.{tp_key}"
            sms = sorted(by_sm, key=float)
            batches = sorted({int(b) for s in sms for b in by_sm[s]})
            seqs = sorted({int(q) for s in sms for b in by_sm[s] for q in by_sm[s][b]})
            planes: Dict[str, List[list]] = {"prefill": [], "decoding": []}
            for s in sms:
                for kind in planes:
                    plane = []
                    for b in batches:
                        row = []
                        for q in seqs:
                            v = by_sm[s].get(str(b), {}).get(str(q), {}).get(kind)
                            if v is not None and not isinstance(v, (int, float)):
                                raise InputError("expected a number", f"{where}.{s}.{b}.{q}.{kind}")
                            row.append(None if v is None or v < 0 else float(v))
                        plane.append(row)
                    planes[kind].append(plane)
            tps[str(int(tp_key))] = {"sm_share": [float(s) / 100.0 for s in sms], "batch": batches,
                                     "seq_len": seqs, "prefill_ms": planes["prefill"],
                                     "decode_ms": planes["decoding"]}
        out[model] = {"format": FORMAT, "version": 1, "model": model, "gpu": gpu, "units": "ms",
                      "source": SOURCE, "tp": dict(sorted(tps.items(), key=lambda kv: int(kv[0])))}
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Convert MuxServe's profiling JSON SRC into one package cost table per model in OUTDIR."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m placement_opt.offline.convert_muxserve SRC OUTDIR", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        tables = convert_muxserve(json.load(f))
    os.makedirs(argv[1], exist_ok=True)
    for model, table in tables.items():
        atomic_write_json(os.path.join(argv[1], f"{model}-a100.json"), table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
