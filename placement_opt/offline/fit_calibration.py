"""The fit of the cost model's parameters to measured data (offline; writes ``params.json``).

Shipped data (``placement_opt/data/calibration``, subsets of ``shared/data``; see the
README there): per-operator times of Llama-2 7B/70B layers on H100 by token count and
tensor-parallel degree, NCCL all-reduce and send/recv times on an 8 x H100 DGX, and the
stage latencies of BERT-1.3B on V100 (AlpaServe's profiling database).

* H100: every operator family's (compute_eff, memory_eff, overhead) is fitted to the
  per-operator times (coarse-to-fine grid search on the squared log error). The
  attention core is not in the data; it reuses the matmul fit.
* V100: the matmul/attention compute efficiency and per-operator overhead are fitted to
  BERT-1.3B's single-GPU latencies through the whole cost model (the other families keep
  the H100 fit), then ``comm_eff`` (the achieved share of the cluster's 150 GB/s NVLink)
  to its tensor-parallel configurations.
* The DGX collectives give the alpha and bandwidth of the H100 links (reported, and
  usable as an H100 cluster's ``intra_node_link``/``inter_node_link``).

``python -m placement_opt.offline.fit_calibration`` refits and rewrites ``params.json``.
"""

from __future__ import annotations

import csv
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.cluster import Cluster, GPUSpec, Link
from placement_opt.costs.calibration import DATA_DIR, PARAMS_FILE, _params, calibration_for
from placement_opt.costs.costmodel import FAMILIES, Calibration, FamilyParams
from placement_opt.io import atomic_write_json
from placement_opt.model import Architecture
from placement_opt.parallel.api import parallelize_with

#: H100 SXM reference used for the op-level fit (dense fp16 tensor-core peak, HBM3 bandwidth).
H100 = GPUSpec(name="H100-SXM-80GB", memory_bytes=80e9, usable_memory_bytes=72e9, peak_fp16_flops=989e12,
               memory_bandwidth=3.35e12)
V100 = GPUSpec(name="V100-16GB", memory_bytes=16e9, usable_memory_bytes=13.96e9, peak_fp16_flops=125e12,
               memory_bandwidth=900e9)
#: Link the V100 ``comm_eff`` is relative to (the spine's default intra-node link).
V100_REFERENCE_LINK = Link(bandwidth=150e9, latency_s=5e-6)
#: BERT-1.3B as profiled (AlpaServe Table 1 shape; sequence length of the profile, see docs/parallel.md).
BERT_1_3B = Architecture(layers=24, hidden=2048, heads=32, seq_len=1024, vocab=51200)

OPS_FAMILY = {
    "emb": "embedding", "input_layernorm": "norm", "post_attention_layernorm": "norm",
    "attn_pre_proj": "matmul", "attn_post_proj": "matmul", "mlp_up_proj": "matmul", "mlp_down_proj": "matmul",
    "attn_rope": "elementwise", "mlp_act": "elementwise", "add": "elementwise",
}



# ---------------------------------------------------------------------------------------------
# measured data


def _read_csv(name: str) -> List[dict]:
    with open(os.path.join(DATA_DIR, name), newline="") as f:
        return list(csv.DictReader(f))


def op_samples() -> Dict[str, tuple]:
    """Per family: (flops, bytes, measured seconds) arrays of the Llama-2 H100 operator data."""
    out: Dict[str, list] = {f: [] for f in sorted(set(OPS_FAMILY.values()))}
    for model in ("llama2-7b", "llama2-70b"):
        for r in _read_csv(f"{model}-ops.csv"):
            nh, nkv, h, f = (int(r[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
            t, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
            gated = r["use_gated_mlp"].strip().lower() == "true"
            hd, d = h // nh, 2
            qkv = (nh + 2 * nkv) * hd / tp
            up = (2 if gated else 1) * f / tp
            shapes = {
                "emb": (0.0, 2.0 * t * h * d),
                "input_layernorm": (8.0 * t * h, 2.0 * t * h * d),
                "post_attention_layernorm": (8.0 * t * h, 2.0 * t * h * d),
                "attn_pre_proj": _mm(t, h, qkv, d),
                "attn_post_proj": _mm(t, h / tp, h, d),
                "mlp_up_proj": _mm(t, h, up, d),
                "mlp_down_proj": _mm(t, f / tp, h, d),
                "attn_rope": (6.0 * t * (nh + nkv) * hd / tp, 3.0 * t * (nh + nkv) * hd / tp * d),
                "mlp_act": (8.0 * t * f / tp, 3.0 * t * f / tp * d),
                "add": (1.0 * t * h, 3.0 * t * h * d),
            }
            for op, (flops, nbytes) in shapes.items():
                ms = float(r[f"{op}_ms"])
                if ms > 0:
                    out[OPS_FAMILY[op]].append((flops, nbytes, ms * 1e-3))
    return {fam: tuple(np.array(col) for col in zip(*rows)) for fam, rows in out.items()}


def _mm(t: float, k: float, n: float, d: float) -> Tuple[float, float]:
    """FLOPs and bytes moved of a ``[t, k] x [k, n]`` matmul of ``d``-byte elements."""
    return 2.0 * t * k * n, (t * k + t * n + k * n) * d


def collective_samples() -> Dict[str, tuple]:
    """Per (collective, workers, devices_per_node): (bytes, seconds) of the DGX measurements."""
    out: Dict[str, list] = {}
    for name, kind in (("dgx-all-reduce.csv", "all-reduce"), ("dgx-send-recv.csv", "send-recv")):
        for r in _read_csv(name):
            key = f"{kind}/n={r['num_workers']}/per-node={r['devices_per_node']}"
            out.setdefault(key, []).append((float(r["size_bytes"]), float(r["median_ms"]) * 1e-3))
    return {k: tuple(np.array(c) for c in zip(*v)) for k, v in out.items()}


def rel_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """|predicted - measured| / measured, elementwise."""
    return np.abs(pred - meas) / meas


# ---------------------------------------------------------------------------------------------
# fitting


def _roofline(flops: np.ndarray, nbytes: np.ndarray, ce: float, me: float, ov: float, gpu: GPUSpec) -> np.ndarray:
    """Roofline seconds at compute efficiency ``ce``, memory efficiency ``me`` and overhead ``ov``."""
    return np.maximum(flops / (gpu.peak_fp16_flops * ce), nbytes / (gpu.memory_bandwidth * me)) + ov


def _grid_fit(loss: Callable[..., float], bounds: Sequence[Tuple[float, float]], rounds: int = 4,
              points: int = 9) -> Tuple[float, ...]:
    """Minimise ``loss(*params)`` by a coarse-to-fine grid over the box ``bounds``."""
    box = [list(b) for b in bounds]
    best: Optional[Tuple[float, Tuple[float, ...]]] = None
    for _ in range(rounds):
        axes = [np.linspace(lo, hi, points) for lo, hi in box]
        for combo in np.array(np.meshgrid(*axes, indexing="ij")).reshape(len(box), -1).T:
            val = loss(*combo)
            if best is None or val < best[0]:
                best = (val, tuple(float(c) for c in combo))
        assert best is not None  # the grid has at least one point
        box = [[max(lo, c - (hi - lo) / points), min(hi, c + (hi - lo) / points)]
               for (lo, hi), c in zip(box, best[1])]
    assert best is not None
    return best[1]


#: Families treated as purely memory-bound (their compute efficiency is pinned at 1).
MEMORY_BOUND = ("norm", "elementwise", "embedding")


def fit_family(flops: np.ndarray, nbytes: np.ndarray, secs: np.ndarray, gpu: GPUSpec,
               memory_bound: bool = False) -> FamilyParams:
    """Fit (compute_eff, memory_eff, overhead) of one family to measured seconds."""
    if memory_bound:
        def loss_m(me: float, ov: float) -> float:
            return float(np.mean(np.log(_roofline(flops, nbytes, 1.0, me, ov, gpu) / secs) ** 2))
        me, ov = _grid_fit(loss_m, [(0.02, 1.0), (0.0, 30e-6)], rounds=5, points=15)
        return FamilyParams(compute_eff=1.0, memory_eff=me, overhead_s=ov)

    def loss(ce: float, me: float, ov: float) -> float:
        return float(np.mean(np.log(_roofline(flops, nbytes, ce, me, ov, gpu) / secs) ** 2))
    ce, me, ov = _grid_fit(loss, [(0.02, 1.0), (0.02, 1.0), (0.0, 30e-6)])
    return FamilyParams(compute_eff=ce, memory_eff=me, overhead_s=ov)


def fit_alpha_beta(nbytes: np.ndarray, secs: np.ndarray, factor: float) -> Tuple[float, float]:
    """Least squares of t = alpha + factor x B / bandwidth in relative terms (weights 1/t)."""
    a = np.stack([np.ones_like(nbytes), factor * nbytes], axis=1) / secs[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(secs), rcond=None)
    alpha, beta = max(coef[0], 0.0), max(coef[1], 1e-15)
    return alpha, 1.0 / beta


def _summary(err: np.ndarray) -> dict:
    return {"median_rel_error": round(float(np.median(err)), 4), "max_rel_error": round(float(np.max(err)), 4),
            "samples": int(err.size)}


def fit_all() -> dict:
    """Refit every parameter from the shipped data; returns the params.json content."""
    samples = op_samples()
    h100 = {fam: fit_family(fl, nb, secs, H100, memory_bound=fam in MEMORY_BOUND)
            for fam, (fl, nb, secs) in samples.items()}
    h100["attention"] = h100["matmul"]
    errors = {}
    for fam, (fl, nb, secs) in samples.items():
        p = h100[fam]
        errors[f"h100/{fam}"] = _summary(rel_errors(_roofline(fl, nb, p.compute_eff, p.memory_eff, p.overhead_s,
                                                              H100), secs))
    links, link_err = {}, {}
    for key, (nb, secs) in collective_samples().items():
        kind, n = key.split("/")[0], int(key.split("/")[1][2:])
        factor = 1.0 if kind == "send-recv" else 2.0 * (n - 1) / n
        alpha, bw = fit_alpha_beta(nb, secs, factor)
        link_err[f"h100/{key}"] = _summary(rel_errors(alpha + factor * nb / bw, secs))
        links[key] = {"latency_s": alpha, "bandwidth_gbps": bw / 1e9}
    errors.update(link_err)
    params: Dict[str, Any] = {
        "source": ("fitted by placement_opt.costs.calibration.fit_all from placement_opt/data/calibration "
                   "(subsets of shared/data/profiles/h100 and shared/data/alpaserve)"),
        "default": "H100",
        "gpus": {"H100": _entry(h100, 1.0)},
        "h100_links": {
            "intra": links["all-reduce/n=8/per-node=8"],
            "inter": links["send-recv/n=2/per-node=1"],
        },
        "collective_fits": links,
    }
    v100, comm_eff, v_err = _fit_v100(h100, params)
    params["gpus"]["V100"] = _entry(v100, comm_eff)
    errors.update(v_err)
    params["fit_errors"] = errors
    return params


def _entry(fams: dict, comm_eff: float) -> dict:
    return {"families": {k: {"compute_eff": round(v.compute_eff, 5), "memory_eff": round(v.memory_eff, 5),
                             "overhead_s": round(v.overhead_s, 9)} for k, v in sorted(fams.items())},
            "comm_eff": round(comm_eff, 5)}


def bert_profile() -> dict:
    """BERT-1.3B's entry of the shipped V100 profiling database."""
    with open(os.path.join(DATA_DIR, "bert-1.3b-v100-profile.json")) as f:
        return json.load(f)["models"]["bert-1.3b"]


def bert_predictions(calib: Calibration) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(measured, predicted) stage latencies of every BERT-1.3B V100 config and batch size."""
    arch = BERT_1_3B
    cluster = Cluster(nodes=4, gpus_per_node=8, gpu=V100, intra_node_link=V100_REFERENCE_LINK,
                      inter_node_link=Link(bandwidth=12.5e9, latency_s=2e-5))
    meas: List[float] = []
    pred: List[float] = []
    tps: List[int] = []
    for cfg in bert_profile()["configs"]:
        pp, tp = cfg["pp"], cfg["op"]
        pm = parallelize_with(arch, cluster, pp * tp, pp, tp, calib)
        for b, row in cfg["stage_latency"].items():
            i = pm.batch_sizes.index(int(b))
            meas += list(row)
            pred += list(pm.stage_latency[i])
            tps += [tp] * len(row)
    return np.array(meas), np.array(pred), np.array(tps)


def _fit_v100(h100: Dict[str, FamilyParams], params: dict
              ) -> Tuple[Dict[str, FamilyParams], float, Dict[str, dict]]:
    """Fit V100 matmul/attention efficiency + overhead (tp = 1), then comm_eff (tp > 1)."""
    cfgs = [c for c in bert_profile()["configs"] if c["op"] == 1 and c["pp"] == 1]
    meas = np.array([v for c in cfgs for b in sorted(c["stage_latency"], key=int) for v in c["stage_latency"][b]])

    def calib(ce: float, ov: float, comm_eff: float = 1.0) -> Tuple[Calibration, Dict[str, FamilyParams]]:
        fams = dict(h100)
        fams["matmul"] = FamilyParams(ce, h100["matmul"].memory_eff, ov)
        fams["attention"] = fams["matmul"]
        return Calibration("V100", tuple((k, fams[k]) for k in FAMILIES), comm_eff), fams

    arch = BERT_1_3B
    one = Cluster(nodes=1, gpus_per_node=1, gpu=V100, intra_node_link=V100_REFERENCE_LINK,
                  inter_node_link=V100_REFERENCE_LINK)

    def loss_compute(ce: float, ov: float) -> float:
        pm = parallelize_with(arch, one, 1, 1, 1, calib(ce, ov)[0])
        return float(np.mean(np.log(pm.stage_latency[:, 0] / meas) ** 2))
    ce, ov = _grid_fit(loss_compute, [(0.1, 1.0), (0.0, 200e-6)], rounds=3, points=7)

    def loss_comm(comm_eff: float) -> float:
        m, p, tps = bert_predictions(calib(ce, ov, comm_eff)[0])
        return float(np.mean(np.log(p[tps > 1] / m[tps > 1]) ** 2))
    (comm_eff,) = _grid_fit(loss_comm, [(0.05, 1.0)], rounds=3, points=9)
    final, fams = calib(ce, ov, comm_eff)
    m, p, tps = bert_predictions(final)
    err = rel_errors(p, m)
    errors = {"v100/bert-1.3b stage latency, tp=1": _summary(err[tps == 1]),
              "v100/bert-1.3b stage latency, tp>1": _summary(err[tps > 1])}
    return fams, comm_eff, errors


def main() -> None:
    """Refit, rewrite ``params.json`` and print every fit's error."""
    params = fit_all()
    atomic_write_json(PARAMS_FILE, params)
    for k, v in params["fit_errors"].items():
        print(f"{k:45s} median {v['median_rel_error']:.3f}  max {v['max_rel_error']:.3f}  n={v['samples']}")


if __name__ == "__main__":
    main()
