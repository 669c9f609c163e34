"""Write the LLM fidelity instances and solve their placements (run on a CPU machine, by hand).

Five LLaMA-shaped LLMs of 0.4B to 8B parameters (head size 128, so they share one KV pool)
on one 80 GB GPU, three workloads:

* ``poisson``: Poisson arrivals per LLM, ShareGPT-like lengths (exponential, means 161
  prompt and 338 output tokens, MuxServe paper; capped at 1024 each);
* ``conv``: the first 60 s of the Splitwise conversation trace (191 requests);
* ``code``: 60 s of the Splitwise code trace from its 400th second (its first minutes are
  almost empty), arrival times re-based to 0.

Trace requests go to the LLMs round robin (the trace has no model column). The slices are
copied from ``../shared/data/traces/splitwise_{conv,code}.csv`` (Azure LLM inference trace
2023, published with the Splitwise paper, Patel et al., ISCA 2024) into ``traces/``.

The instances carry no cost table: placements are solved here with the roofline estimate
(``placement_opt.costs.roofline``) and committed; the GPU run (``run_gpu.sh``) profiles the
models and replays the placements with instances that reference the measured tables.

Usage: python benchmarks/fidelity/llm/make_instances.py [--traces DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
OUT = os.path.join(ROOT, "instances", "fidelity-llm")


def llama(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, name: str) -> dict:
    """A LLaMA-shaped architecture (SwiGLU, RMSNorm, rotary positions, untied LM head)."""
    return {"name": name, "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
            "ffn_ratio": ffn / hidden, "vocab": vocab, "seq_len": 4096, "gated_mlp": True,
            "tied_embeddings": False, "learned_positions": False, "dtype": "fp16"}


MODELS = [  # name, architecture, Poisson rate (req/s)
    ("llm-0.4b", llama(24, 1024, 8, 4, 2816, 32000, "LLaMA-shaped 0.4B"), 3.0),
    ("llm-1b", llama(16, 2048, 16, 8, 8192, 32000, "LLaMA-shaped 1.1B"), 2.0),
    ("llm-3b", llama(28, 3072, 24, 8, 8192, 32000, "LLaMA-shaped 3B"), 1.0),
    ("llm-7b", llama(32, 4096, 32, 32, 11008, 32000, "LLaMA-2-7B shape"), 0.6),
    ("llm-8b", llama(32, 4096, 32, 8, 14336, 128256, "LLaMA-3-8B shape"), 0.6),
]
CLUSTER = {"nodes": 1, "gpus_per_node": 1,
           "gpu": {"name": "H100-80GB", "memory_gb": 80, "usable_memory_gb": 76, "peak_fp16_tflops": 989,
                   "memory_bandwidth_gbps": 3350}}
LLM = {"policy": "adbs", "kv_block_tokens": 16, "max_batch": 32, "drain_s": 30, "kv_reserve_fraction": 0.1,
       "prefill_token_budget": 4096}
SOLVERS = ("muxserve", "spatial", "temporal")
SLICES = {"conv": ("splitwise_conv.csv", 0.0, 60.0), "code": ("splitwise_code.csv", 400.0, 60.0)}


def write_slice(src_dir: str, name: str) -> str:
    """Copy the trace window of ``name`` into traces/, re-based to 0; returns its file name."""
    src, start, length = SLICES[name]
    out = f"splitwise-{name}-{int(start)}s-{int(length)}s.csv"
    rows = []
    with open(os.path.join(src_dir, src)) as f:
        for r in csv.DictReader(f):
            t = float(r["arrived_at"])
            if start <= t < start + length:
                rows.append((round(t - start, 6), int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])))
    with open(os.path.join(OUT, "traces", out), "w") as f:
        f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        f.writelines(f"{t},{p},{d}\n" for t, p, d in rows)
    return out


def instance(name: str, workload: dict, description: str) -> dict:
    return {"name": f"fidelity-llm-{name}", "description": description, "cluster": CLUSTER,
            "models": [{"name": n, "family": "llm", "architecture": a} for n, a, _ in MODELS],
            "workload": workload, "llm": dict(LLM), "objective": "throughput", "solver": {"name": "muxserve"},
            "seed": 0}


def write_instances(traces: str) -> list:
    """The three instances; returns their paths."""
    os.makedirs(os.path.join(OUT, "traces"), exist_ok=True)
    base = "5 LLaMA-shaped LLMs (0.4B-8B, random weights) on one 80 GB GPU; "
    docs = {
        "poisson": instance("poisson", {"duration_s": 40, "per_model": {n: {"process": "poisson", "rate": r}
                                                                       for n, _, r in MODELS},
                                        "lengths": {"distribution": "exponential", "prompt_tokens": 161,
                                                    "output_tokens": 338, "max_prompt_tokens": 1024,
                                                    "max_output_tokens": 1024},
                                        "slo": {"scale": 10}},
                            base + "Poisson arrivals, ShareGPT-like lengths (exponential, means 161 / 338)."),
    }
    for name in SLICES:
        docs[name] = instance(name, {"duration_s": 60, "trace": f"traces/{write_slice(traces, name)}",
                                     "slo": {"scale": 10}},
                              base + f"60 s of the Splitwise {name} trace, requests to the LLMs round robin.")
    paths = []
    for name, doc in docs.items():
        path = os.path.join(OUT, f"{name}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        paths.append(path)
    return paths


def solve_placements(paths: list) -> None:
    """muxserve, spatial and temporal placements of every instance, written beside it."""
    from placement_opt import load_instance, simulate, solve
    from placement_opt.errors import InputError

    for path in paths:
        inst = load_instance(path)
        for solver in SOLVERS:
            try:
                p = solve(inst, solver, seed=0)
            except InputError as e:  # spatial: one GPU cannot give every LLM its own
                print(f"{os.path.basename(path)} {solver}: not solvable here ({e})")
                continue
            out = path.replace(".json", f"-{solver}.placement.json")
            with open(out, "w") as f:
                f.write(p.to_json() + "\n")
            m = simulate(inst, p)
            print(f"{os.path.basename(out)}: groups {[(g.devices, g.models, g.sm_share) for g in p.groups]} "
                  f"tput {m['throughput_rps']:.3f} attain {m['slo_attainment']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "data", "traces"),
                    help="folder with splitwise_conv.csv and splitwise_code.csv")
    args = ap.parse_args()
    solve_placements(write_instances(args.traces))


if __name__ == "__main__":
    main()
