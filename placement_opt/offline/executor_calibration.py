"""Compare measured latencies with the cost model, and calibrate it to them.

The cost model (:mod:`placement_opt.parallel`) predicts, for a stage of ``tp`` GPUs, the
batch-1 latency of every unit of the model chain (embedding, transformer layers, LM
head); :func:`~placement_opt.parallel.inter_op_table` exposes their running sums. This
module predicts the executor's stages (embedding + their layers; the executor has no
LM head) and fits one factor per tensor-parallel degree on the one-stage configuration
(``pp = 1``) at batch 1; the pipeline stages (``pp > 1``) are held out and show whether
the calibrated model transfers. The per-piece measurements (one embedding, one layer,
timed alone) are compared with the model's units as well.

Run ``python -m placement_opt.offline.executor_calibration PROFILE DETAILS --gpu-name H200``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from placement_opt.cluster import Cluster, GPUSpec, Link
from placement_opt.model import Architecture
from placement_opt.profile import Profile


def unit_latencies(arch: Architecture, gpu: GPUSpec, link: Link, tp: int) -> tuple[float, float]:
    """Cost-model batch-1 latency of the embedding and of one transformer layer on ``tp`` GPUs."""
    from placement_opt.parallel import inter_op_table

    roomy = GPUSpec(gpu.name, gpu.memory_bytes * 1e3, gpu.usable_memory_bytes * 1e3, gpu.peak_fp16_flops,
                    gpu.memory_bandwidth)  # price the fast plans; memory is not in question here
    cluster = Cluster(nodes=1, gpus_per_node=max(tp, 1), gpu=roomy, intra_node_link=link, inter_node_link=link)
    table = inter_op_table(arch, cluster, tp, tp)
    emb = float(table.cost[1, 1])
    return emb, float(table.cost[1, 2]) - emb


def stage_prediction(emb: float, layer: float, layer_range: Tuple[int, int]) -> float:
    """Cost-model latency of a stage of layers ``layer_range`` (the embedding when it starts at 0)."""
    a, b = layer_range
    return (emb if a == 0 else 0.0) + (b - a) * layer


def calibration_report(profile: Profile, details: dict, gpu: GPUSpec, link: Link) -> dict:
    """Raw and calibrated cost-model error on every measured stage (batch 1)."""
    arch = Architecture.from_dict(details["architecture"], "architecture")
    units = {tp: unit_latencies(arch, gpu, link, tp) for tp in sorted({c.tp for c in profile.configs.values()})}
    factor: Dict[int, float] = {}
    for tp, (emb, layer) in units.items():
        one = profile.config(1, tp)
        if one is not None and 1 in one.batch_sizes:
            factor[tp] = float(one.stage_latency[one.batch_sizes.index(1), 0]) / stage_prediction(
                emb, layer, (0, arch.layers))
    pieces = [{"piece": p["piece"], "tp": p["tp"], "measured_s": p["latency_s"],
               "cost_model_s": units[p["tp"]][0 if p["piece"] == "embedding" else 1]}
              for p in details["pieces"] if p["batch"] == 1 and p["piece"] in ("embedding", "layer")
              and p["tp"] in units]
    rows: List[Dict[str, Any]] = []
    for (pp, tp), cfg in sorted(profile.configs.items()):
        if 1 not in cfg.batch_sizes:
            continue
        emb, layer = units[tp]
        assert cfg.stage_layers is not None  # the executor's profiler records every stage's layers
        for s, rng in enumerate(cfg.stage_layers):
            measured = float(cfg.stage_latency[cfg.batch_sizes.index(1), s])
            raw = stage_prediction(emb, layer, rng)
            calibrated = raw * factor.get(tp, 1.0)
            rows.append({"pp": pp, "tp": tp, "stage": s, "layers": list(rng), "fitted_on": pp == 1,
                         "measured_s": measured,
                         "cost_model_s": raw, "calibrated_s": calibrated,
                         "cost_model_error": raw / measured - 1, "calibrated_error": calibrated / measured - 1})
    held_out = [r for r in rows if not r["fitted_on"]]
    return {"gpu": gpu.name, "device_measured": details.get("device"),
            "factors": {str(tp): f for tp, f in factor.items()}, "stages": rows, "pieces": pieces,
            "mean_abs_error_cost_model": float(np.mean([abs(r["cost_model_error"]) for r in rows])),
            "held_out_mean_abs_error_cost_model": float(np.mean([abs(r["cost_model_error"]) for r in held_out]))
            if held_out else None,
            "held_out_mean_abs_error_calibrated": float(np.mean([abs(r["calibrated_error"]) for r in held_out]))
            if held_out else None}


def main(argv: Optional[List[str]] = None) -> None:
    """Print (and with ``-o`` write) the calibration report of a measured profile."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("details")
    ap.add_argument("--gpu-name", default="H100")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--bandwidth-gbps", type=float, default=3350.0)
    ap.add_argument("--link-gbps", type=float, default=450.0)
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    with open(args.profile) as f:
        profile = Profile.from_dict("measured", json.load(f), "profile")
    with open(args.details) as f:
        details = json.load(f)
    gpu = GPUSpec(args.gpu_name, 80e9, 72e9, args.peak_tflops * 1e12, args.bandwidth_gbps * 1e9)
    report = calibration_report(profile, details, gpu, Link(args.link_gbps * 1e9, 5e-6))
    if args.output:
        from placement_opt.io import atomic_write_json
        atomic_write_json(args.output, report)
    print("factors (fitted on pp=1): " + ", ".join(f"tp={tp} x{f:.3f}" for tp, f in report["factors"].items()))
    print("config  stage  layers   measured ms  cost model ms (err)  calibrated ms (err)")
    for r in report["stages"]:
        print(f"{r['pp']}x{r['tp']:<5} {r['stage']:<6} {str(r['layers']):8} {r['measured_s'] * 1e3:11.3f}  "
              f"{r['cost_model_s'] * 1e3:8.3f} ({r['cost_model_error']:+.1%})  "
              f"{r['calibrated_s'] * 1e3:8.3f} ({r['calibrated_error']:+.1%})" + ("  fitted" if r["fitted_on"] else ""))
    for p in report["pieces"]:
        print(f"piece {p['piece']:9s} tp={p['tp']}: measured {p['measured_s'] * 1e3:.3f} ms, "
              f"cost model {p['cost_model_s'] * 1e3:.3f} ms")
    if report["held_out_mean_abs_error_calibrated"] is not None:
        print(f"held-out stages, mean |error|: cost model {report['held_out_mean_abs_error_cost_model']:.1%}, "
              f"calibrated {report['held_out_mean_abs_error_calibrated']:.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
