"""The MuxServe evaluation instances (``instances/muxserve/*.json``), built from facts.

Facts (REFERENCE.md section 3, MuxServe paper section 4): 4 nodes x 8 A100 80 GB; LLaMA
shapes 7B 32/32/4096, 13B 40/40/5120, 30B 60/52/6656, 65B 80/64/8192; the synthetic set
has 19 LLMs (12 x 7B, 4 x 13B, 2 x 30B, 1 x 65B) with power-law rates (exponent alpha, the
most popular LLM at 20 req/s) and ShareGPT lengths (161 prompt / 338 output tokens mean);
the ChatLMSYS set has 16 LLMs with the per-LLM rates of MuxServe's
``chatlmsys-rates-condense*.yaml`` (kept in ``placement_opt/data/muxserve/chatlmsys-rates.json``)
and 100 / 261 tokens mean. Poisson arrivals; lengths exponential around the means.

``python -m placement_opt.offline.llm_catalog OUTDIR`` writes every instance.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from placement_opt.instance import Instance
from placement_opt.io import atomic_write_json
from placement_opt.workload import Requests

LLAMA = {
    "llama-7b": {"layers": 32, "heads": 32, "hidden": 4096},
    "llama-13b": {"layers": 40, "heads": 40, "hidden": 5120},
    "llama-30b": {"layers": 60, "heads": 52, "hidden": 6656},
    "llama-65b": {"layers": 80, "heads": 64, "hidden": 8192},
}
A100 = {"name": "A100-80GB", "memory_gb": 80, "usable_memory_gb": 76, "peak_fp16_tflops": 312,
        "memory_bandwidth_gbps": 2039}
DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "muxserve")
SYNTHETIC_ALPHAS = (0.7, 0.9, 1.3, 1.7, 2.1)
CHATLMSYS_LOADS = (500, 800, 1200, 1600, 2000)


def architecture(size: str) -> dict:
    """The architecture section of LLaMA size ``size`` (e.g. ``llama-7b``)."""
    return dict(LLAMA[size], vocab=32000, seq_len=2048, ffn_ratio=4.0, dtype="fp16")


def build_instance(name: str, description: str, sizes: Sequence[str], rates: Iterable[float], prompt: float,
                   output: float, nodes: int, gpus_per_node: int, duration_s: float, table_dir: str,
                   slo_scale: float = 8.0, llm: dict | None = None, solver: str = "muxserve") -> dict:
    """An instance dict: LLM ``i`` has LLaMA size ``sizes[i]`` and Poisson rate ``rates[i]``."""
    used = sorted(set(sizes))
    models: List[dict] = []
    per_model: Dict[str, dict] = {}
    for i, (size, rate) in enumerate(zip(sizes, rates)):
        mname = f"llm-{i:02d}-{size[6:]}"
        models.append({"name": mname, "family": "llm", "architecture": architecture(size), "cost_table": size})
        per_model[mname] = {"process": "poisson", "rate": round(float(rate), 6)}
    inst = {
        "name": name, "description": description,
        "cluster": {"nodes": nodes, "gpus_per_node": gpus_per_node, "gpu": A100},
        "cost_tables": {s: f"{table_dir}/{s}-a100.json" for s in used},
        "models": models,
        "workload": {"duration_s": duration_s, "per_model": per_model,
                     "lengths": {"distribution": "exponential", "prompt_tokens": prompt, "output_tokens": output,
                                 "max_prompt_tokens": 2048, "max_output_tokens": 2048},
                     "slo": {"scale": slo_scale}},
        "objective": "throughput",
        "solver": {"name": solver},
        "seed": 0,
    }
    inst["llm"] = dict({"prompt_tokens": prompt, "output_tokens": output}, **(llm or {}))
    return inst


def synthetic_rates(alpha: float, n: int = 19, max_rate: float = 20.0) -> np.ndarray:
    """Power-law rates: LLM rank ``i`` gets ``max_rate x (i + 1) ** -alpha``."""
    return max_rate * (np.arange(n) + 1.0) ** (-alpha)


def synthetic(alpha: float, table_dir: str, duration_s: float = 300.0) -> dict:
    sizes = ["llama-7b"] * 12 + ["llama-13b"] * 4 + ["llama-30b"] * 2 + ["llama-65b"]
    # popularity rank independent of size: a fixed shuffle (seed 0) of the 19 LLMs
    order = np.random.default_rng(0).permutation(len(sizes))
    rates = np.empty(len(sizes))
    rates[order] = synthetic_rates(alpha, len(sizes))
    return build_instance(f"synthetic-a{alpha}", f"MuxServe synthetic workload: 19 LLaMA LLMs on 4 x 8 A100 80 GB, "
                          f"power-law rates alpha {alpha} (most popular 20 req/s), ShareGPT lengths.",
                          sizes, rates, 161.0, 338.0, 4, 8, duration_s, table_dir)


def chatlmsys(load: int, table_dir: str, duration_s: float = 300.0) -> dict:
    with open(os.path.join(DATA, "chatlmsys-rates.json")) as f:
        data = json.load(f)[str(load)]
    sizes = [m["model"] for m in data["models"]]
    rates = [m["rate"] for m in data["models"]]
    return build_instance(f"chatlmsys-{load}", f"MuxServe ChatLMSYS workload (condense {load}): 16 LLaMA LLMs on "
                          f"4 x 8 A100 80 GB, per-LLM rates from MuxServe's chatlmsys-rates-condense{load}.yaml, "
                          f"mean lengths {data['avg_prompt_len']:.0f} / {data['avg_output_len']:.0f} tokens.",
                          sizes, rates, round(data["avg_prompt_len"], 2), round(data["avg_output_len"], 2), 4, 8,
                          duration_s, table_dir)


def small(table_dir: str) -> dict:
    """4 LLMs on one node of 4 GPUs (tests): two popular and two rare LLMs."""
    sizes = ["llama-13b", "llama-7b", "llama-7b", "llama-13b"]
    rates = [6.0, 8.0, 0.5, 0.5]
    return build_instance("small-4llm-4gpu", "4 LLaMA LLMs (2 x 7B, 2 x 13B) on 4 A100 80 GB, two popular "
                          "(6 and 8 req/s) and two rare (0.5 req/s) LLMs, ShareGPT lengths.",
                          sizes, rates, 161.0, 338.0, 1, 4, 60.0, table_dir)


def ablation(table_dir: str) -> dict:
    """The paper's ADBS ablation pair: LLaMA-65B at 1 req/s and 30B at 8 req/s on one 4-GPU mesh."""
    return build_instance("adbs-ablation", "MuxServe ADBS ablation (Fig. 10b): LLaMA-65B at 1 req/s and LLaMA-30B "
                          "at 8 req/s colocated on 4 A100 80 GB.", ["llama-65b", "llama-30b"], [1.0, 8.0],
                          161.0, 338.0, 1, 4, 60.0, table_dir)


def ablation_requests(instance: Instance, seed: Optional[int] = None, length_ratio: float = 4.0) -> Requests:
    """The ablation instance's requests with the paper's 4 : 1 mean request length of the 65B
    and 30B LLMs: the 65B's prompt and output lengths are scaled by ``length_ratio``
    (capped at the workload's maximum lengths)."""
    req = instance.requests(seed=seed)
    lengths = instance.workload.lengths
    # ablation() gives the workload request lengths, so every request has token counts
    assert lengths is not None and req.prompt_tokens is not None and req.output_tokens is not None
    prompt = req.prompt_tokens.astype(np.float64)
    output = req.output_tokens.astype(np.float64)
    big = req.model == instance.model_index(instance.models[0].name)
    prompt[big] = np.minimum(np.round(prompt[big] * length_ratio), lengths.max_prompt_tokens)
    output[big] = np.minimum(np.round(output[big] * length_ratio), lengths.max_output_tokens)
    return replace(req, prompt_tokens=prompt.astype(np.int32), output_tokens=output.astype(np.int32))


def splitwise(table_dir: str) -> dict:
    """Two LLMs (7B, 13B) on 2 GPUs replaying 120 s of the Splitwise conversation trace
    (arrival times and token counts; requests alternate between the LLMs)."""
    inst = build_instance("splitwise-conv-2llm", "LLaMA-7B and 13B on 2 A100 80 GB replaying the first 120 s of "
                          "the Splitwise conversation trace (real arrivals and token counts, requests assigned "
                          "round robin).", ["llama-7b", "llama-13b"], [0.0, 0.0], 1155.0, 211.0, 1, 2, 120.0,
                          table_dir)
    inst["workload"] = {"duration_s": 120.0, "trace": f"{table_dir}/splitwise-conv-120s.csv",
                        "slo": {"scale": 8.0}}
    return inst


def parse_rates_yaml(text: str) -> dict:
    """The few fields of MuxServe's rate files (no YAML library needed): models, lengths."""
    models: List[dict] = []
    cur: Optional[Dict[str, Any]] = None
    out: Dict[str, Any] = {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("- name:"):
            cur = {"name": s.split(":", 1)[1].strip()}
            models.append(cur)
        elif s.startswith("model:") and cur is not None:
            cur["model"] = os.path.basename(s.split(":", 1)[1].strip())
        elif s.startswith("rate:") and cur is not None:
            cur["rate"] = float(s.split(":", 1)[1])
        elif s.startswith("avg_output_len:") or s.startswith("avg_prompt_len:"):
            key, value = s.split(":", 1)
            out[key] = float(value)
    out["models"] = models
    return out


def main(argv: Optional[List[str]] = None) -> int:
    """Write every instance into OUTDIR (and refresh the shipped rates from RATES_YAML_DIR if given)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python -m placement_opt.offline.llm_catalog OUTDIR [RATES_YAML_DIR]", file=sys.stderr)
        return 2
    out = argv[0]
    if len(argv) == 2:  # refresh the shipped rates from MuxServe's YAML files
        rates: Dict[str, Any] = {}
        for load in CHATLMSYS_LOADS:
            with open(os.path.join(argv[1], f"chatlmsys-rates-condense{load}.yaml")) as f:
                rates[str(load)] = parse_rates_yaml(f.read())
        rates["source"] = "MuxServe artifact chatlmsys-rates-condense{500,800,1200,1600,2000}.yaml"
        atomic_write_json(os.path.join(DATA, "chatlmsys-rates.json"), rates)
    table_dir = os.path.relpath(DATA, out)
    os.makedirs(out, exist_ok=True)
    for alpha in SYNTHETIC_ALPHAS:
        atomic_write_json(os.path.join(out, f"synthetic-a{alpha}.json"), synthetic(alpha, table_dir))
    for load in CHATLMSYS_LOADS:
        atomic_write_json(os.path.join(out, f"chatlmsys-{load}.json"), chatlmsys(load, table_dir))
    atomic_write_json(os.path.join(out, "small-4llm-4gpu.json"), small(table_dir))
    atomic_write_json(os.path.join(out, "adbs-ablation.json"), ablation(table_dir))
    atomic_write_json(os.path.join(out, "splitwise-conv-2llm.json"), splitwise(table_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
