"""Decode step of a 7B-class LLaMA on one GPU against the memory-bandwidth roofline.

A decode step must read every weight and every request's K and V once, so its time is at
least ``(weight bytes + batch x context x KV bytes per token) / HBM bandwidth``. This times
the executor's own decode step (``placement_opt.executor.llm_model`` over the paged KV pool,
a CUDA graph replay, as ``placeopt execute`` runs it) for batch 1..32 at a few contexts and
reports the achieved fraction of that bound, against the GPU's specified bandwidth and
against the bandwidth a large device-to-device copy reaches.

Both decode attentions are timed in the same run on the same weights and pool: ``paged``
(the Triton kernels reading the pool in place, what the engine serves with) and ``gather``
(the previous path: each request's blocks gathered into a contiguous copy, then batched
GEMMs), so the gain is a ratio of two measurements of one machine (``gather_over_paged``).
If the paged kernels fail on the device, the error is recorded and the gather path is still
timed.

Usage (GPU): python benchmarks/fidelity/llm/roofline.py -o roofline.json [--contexts 128,512,2048]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SPEC_BANDWIDTH_GBPS = {"H100": 3350.0, "H200": 4800.0, "A100": 2039.0}  # SXM parts, GB/s
LLAMA2_7B = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_ratio": 11008 / 4096, "vocab": 32000,
             "gated_mlp": True, "tied_embeddings": False, "learned_positions": False, "dtype": "fp16"}


def spec_bandwidth(name: str) -> float:
    """GB/s of the GPU named ``name`` (0 when unknown)."""
    for key, bw in SPEC_BANDWIDTH_GBPS.items():
        if key in name:
            return bw
    return 0.0


def copy_bandwidth(torch) -> float:  # type: ignore[no-untyped-def]
    """GB/s a 4 GiB device-to-device copy reaches (bytes read + written)."""
    a = torch.empty(2 ** 31, dtype=torch.float16, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / 10
    del a, b
    torch.cuda.empty_cache()
    return 2 * 2 ** 32 / seconds / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--batches", default="1,2,4,8,16,32", help="comma-separated batch sizes")
    ap.add_argument("--contexts", default="128,512,2048", help="comma-separated context lengths")
    ap.add_argument("--repeats", type=int, default=30, help="timed replays per point and path (median)")
    args = ap.parse_args()
    import torch

    from placement_opt.executor.llm_profiler import LLMBench, LLMProfileSettings, median_seconds
    from placement_opt.model import Architecture

    if not torch.cuda.is_available():
        sys.exit("roofline.py needs a CUDA GPU")
    arch = Architecture(**LLAMA2_7B)
    batches = [int(x) for x in args.batches.split(",")]
    contexts = [int(x) for x in args.contexts.split(",")]
    settings = LLMProfileSettings(tp_degrees=(1,), sm_shares=(1.0,), batch_sizes=tuple(batches),
                                  seq_lens=tuple(contexts), backend="nccl", repeats=args.repeats, warmup=5)
    name = torch.cuda.get_device_name(0)
    measured_bw = copy_bandwidth(torch)
    device = torch.device("cuda", 0)
    bench = LLMBench(arch, settings, 0, 1, device, attention="auto")
    stream = torch.cuda.Stream(device)
    kv_token = arch.kv_bytes_per_token()
    paths = ["paged", "gather"] if bench.model.attention == "paged" else ["gather"]
    errors = {} if "paged" in paths else {"paged": bench.attention_fallback or "Triton unavailable on this machine"}
    primary = paths[0]  # its times are the unprefixed keys; if it fails mid-run those keys stay absent

    def fractions(moved: int, seconds: float) -> dict:
        gbps = moved / seconds / 1e9
        return {"step_ms": seconds * 1e3, "achieved_gbps": gbps,
                "roofline_fraction_spec": gbps / spec_bandwidth(name) if spec_bandwidth(name) else None,
                "roofline_fraction_copy": gbps / measured_bw}

    rows = []
    for c in contexts:
        for b in batches:
            moved = bench.weight_bytes + b * c * kv_token
            row: dict = {"batch": b, "context": c, "bytes": moved}
            for path in list(paths):
                bench.model.attention = path
                try:
                    seconds = median_seconds(bench.decode(b, c, stream), stream, device, 5, args.repeats)
                except Exception as e:  # a kernel the device cannot run: keep timing the other path
                    errors[path] = f"{type(e).__name__}: {e}"
                    paths.remove(path)
                    torch.cuda.synchronize()
                    continue
                row.update(fractions(moved, seconds) if path == primary else
                           {f"{path}_{k}": v for k, v in fractions(moved, seconds).items()})
                row.setdefault("attention", path)
            if "step_ms" in row and "gather_step_ms" in row:
                row["gather_over_paged"] = row["gather_step_ms"] / row["step_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            worst = min((r["roofline_fraction_spec"] for r in rows if r.get("roofline_fraction_spec") is not None),
                        default=None)
            _write(args.output, {
                "device": name, "torch": torch.__version__, "model": "LLaMA-2-7B shape, fp16, random weights",
                "weight_bytes": bench.weight_bytes, "kv_bytes_per_token": kv_token,
                "spec_bandwidth_gbps": spec_bandwidth(name), "copy_bandwidth_gbps": measured_bw,
                "attention": paths[0] if paths else None, "errors": errors, "worst_fraction_spec": worst,
                "method": "executor decode step as one CUDA graph, median of "
                          f"{args.repeats} replays timed with CUDA events; step_ms/roofline_fraction_*: the engine's "
                          "attention (paged: Triton kernels reading the KV pool in place); gather_*: the previous path "
                          "(blocks gathered, then batched GEMMs), same weights and pool, same run", "points": rows})


def _write(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (after every point: a run cut short keeps its points)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
