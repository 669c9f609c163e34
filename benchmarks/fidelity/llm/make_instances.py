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

The 2-GPU set (``--tp2``, ``instances/fidelity-llm/tp2/``): ``llm-7b`` and ``llm-8b`` on two
80 GB GPUs, 30 s of Poisson arrivals at 4 and 3 req/s with the same lengths (20 s drain), and four
placements: ``spatial`` (each LLM on a GPU of its own, TP 1; solved), ``muxserve`` (what the
MuxServe solver chooses: with the roofline costs both LLMs on GPU 0 at SM shares 0.5, GPU 1
idle: its estimator's headroom at 1.5x the rates prefers that to one TP-2 mesh),
``temporal`` (one TP-2 mesh of both GPUs serving both LLMs one job at a time; written here:
the temporal solver's own choice on two GPUs is the spatial placement) and ``colocated``
(the same TP-2 mesh with both LLMs colocated at SM shares 0.5 under ADBS; written here: the
multi-GPU colocation MuxServe's search did not choose).

The 4-GPU set (``--gpu4``, ``instances/fidelity-llm/gpu4/``): ``llm-1b``, ``llm-3b``, ``llm-7b``
and ``llm-8b`` on four 80 GB GPUs, 30 s of Poisson arrivals at 2, 1.5, 10 and 8 req/s (the two
large LLMs popular, as in MuxServe's skewed sets; 20 s drain), and three placements: ``spatial``
(each LLM on a GPU of its own; solved), ``muxserve`` (solved: with the roofline costs the two small
LLMs colocated on one TP-2 mesh of GPUs 0-1 at SM shares 0.5, the large ones on a GPU each) and
``temporal`` (muxserve's meshes, one job at a time: the temporal solver's own choice on four GPUs
is the spatial placement); ``temporal4`` (one TP-4 mesh of the four GPUs serving all four LLMs
one job at a time, as the 2-GPU set's temporal placement; added after the first 4-GPU runs).

The unequal-share sets (``--h200u NAME...``, ``instances/fidelity-llm/<NAME>/``, ``H200U_SETS``):
LLMs of the fidelity five on one H200 (the H100 sets' 76 GB budget), 30 s of Poisson arrivals, 20 s
drain, and SM splits of the one GPU between them: ``muxserve`` (solved on the measured instance:
the cost tables measured at seven SM shares on an H200, ``tables-h200-shares``, and the newest
H200 calibration) and hand-made ones beside it (a split that is MuxServe's own is written once, as
``muxserve``). ``h200us31`` and ``h200us32``: ``llm-1b`` and ``llm-8b`` at 2 + 10 req/s (seed 31,
near saturation) and 2 + 8 (seed 32), splits ``equal`` (0.5 each), ``skewed`` (0.25 / 0.75: more
SMs for the busy LLM than MuxServe gives it) and ``reverse`` (0.62 / 0.37: fewer); ``h200us33``:
seed 31's rates drawn anew (seed 33; ``skewed`` and ``reverse``), held out from the refit on seed
32; ``h200u3s35``: ``llm-1b``,
``llm-3b`` and ``llm-8b`` at 1 + 1 + 8 req/s (seed 35), where MuxServe gives every LLM a third and
the simulator prefers more SMs for the busy one (``half``: 0.25 / 0.25 / 0.5, ``skewed``: 0.2 / 0.2 /
0.57). The SM-shared sets before ran equal shares only. ``h200p36``, ``h200p37``, ``h200p38``: one
LLM alone on an SM partition of the GPU (``llm-1b`` at 16 req/s, ``llm-3b`` at 9, ``llm-8b`` at 5;
splits ``p20`` and ``p42``, or ``p30`` for ``llm-8b``: shares 0.2, 0.42, 0.3), so that every decode
step of the trace runs alone on its partition: the partition step's check on the LLMs and SM
counts it was not fitted on (no ``muxserve``: it gives a lone LLM the whole GPU). Held out from the
fit on them (written after it): ``h200p40`` (``llm-3b`` alone at 12 req/s, shares 0.3 and 0.5),
``h200p41`` (``llm-8b`` alone at 7, 0.42 and 0.5), ``h200us42`` (``llm-1b`` and ``llm-3b`` at
12 + 8, muxserve and ``skewed`` 0.3 / 0.7) and ``h200us43`` (``llm-3b`` and ``llm-8b`` at 4 + 8,
muxserve and ``skewed`` 0.25 / 0.75). Held out from the fit of the stretch's power of the SM
share (written after it): ``h200us44`` (``llm-1b`` and ``llm-8b`` at 3 + 7, muxserve and ``skewed``
0.25 / 0.75), ``h200us45`` (``llm-3b`` and ``llm-8b`` at 6 + 6, muxserve and ``skewed`` 0.3 / 0.7)
and ``h200u3s46`` (``llm-1b``, ``llm-3b`` and ``llm-8b`` at 4 + 3 + 5, muxserve and ``half``).
Held out for the engine with the pinned token copy (v3h; written before its runs): ``h200us50``
(seed 31's rates drawn anew: ``llm-1b`` and ``llm-8b`` at 2 + 10, muxserve and ``equal``) and
``h200us51`` (``llm-3b`` and ``llm-8b`` at 4 + 8.5, as seed 48: muxserve and ``skewed`` 0.25 / 0.75)
and ``h200us52`` (``llm-1b`` and ``llm-8b`` at 2 + 11, nearer saturation: muxserve and ``equal``).
Held out for the loaded-latency curve (``latency_curve.py``; written before their runs, both
models' predictions committed first): ``h200us53`` (``llm-1b`` and ``llm-8b`` at 3 + 8) and
``h200us54`` (``llm-3b`` and ``llm-8b`` at 5 + 7), muxserve and ``skewed`` 0.25 / 0.75: a small
LLM on a small partition beside ``llm-8b``, where the curve and the linear model part most.
Held out for v3i's prefill stretch with its knee in the prefill's time (written after that refit,
both calibrations' predictions committed first): ``h200us64`` (``llm-1b`` and ``llm-8b`` at 2 + 10,
muxserve and ``equal``) and ``h200us65`` (``llm-3b`` and ``llm-8b`` at 4 + 8, muxserve and
``skewed`` 0.25 / 0.75).
The trace sets (``--h200t NAME...``, ``instances/fidelity-llm/<NAME>/``, ``H200T_SETS``): the five
LLMs on one H200 serving windows of the Splitwise conversation and code traces, ``muxserve`` and
``temporal`` placements; ``h200t73`` held out for v3i's adopted H200 file, ``h200t74`` (fresh
windows) for an eager prefill's own time knee, ``h200t75`` (fresh again) for the eager launch
on the whole GPU, ``h200t76`` (fresh again) for the split-combine spill.
Write a set once, before its runs: its
placements and measured instance record the calibration of that day.

Usage: python benchmarks/fidelity/llm/make_instances.py [--traces DIR] [--tp2 | --gpu4 | --h200u NAME... | --h200t NAME...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from typing import Any, Optional

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
POISSON_LENGTHS = {"distribution": "exponential", "prompt_tokens": 161, "output_tokens": 338, "max_prompt_tokens": 1024,
                   "max_output_tokens": 1024}  # ShareGPT-like (MuxServe paper), capped
SLICES = {"conv": ("splitwise_conv.csv", 0.0, 60.0), "code": ("splitwise_code.csv", 300.0, 60.0, 1.0)}


def write_slice(src_dir: str, name: str, slices: dict = SLICES, speed: float = 1.0) -> str:
    """Copy the trace window of ``name`` (of ``slices``) into traces/, re-based to 0 and its
    arrival times divided by ``speed`` (3: three times the requests a second); returns its file
    name."""
    src, start, length = slices[name]
    pace = "" if speed == 1.0 else f"-x{speed:g}"
    out = f"splitwise-{name}-{int(start)}s-{int(length)}s{pace}.csv"
    rows = []
    with open(os.path.join(src_dir, src)) as f:
        for r in csv.DictReader(f):
            t = float(r["arrived_at"])
            if start <= t < start + length:
                rows.append((round((t - start) / speed, 6), int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])))
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
                                        "lengths": dict(POISSON_LENGTHS),
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


TP2_OUT = os.path.join(OUT, "tp2")
TP2_RATES = {"llm-7b": 4.0, "llm-8b": 3.0}  # req/s
TP2_DURATION_S = 30
TP2_DRAIN_S = 20  # the replay's horizon is 50 s: four placements and the profiles fit one 9-minute call
GPU4_OUT = os.path.join(OUT, "gpu4")
GPU4_RATES = {"llm-1b": 2.0, "llm-3b": 1.5, "llm-7b": 10.0, "llm-8b": 8.0}  # req/s


def write_set_instance(folder: str, name: str, rates: dict, gpus: int, description: str,
                       gpu: Optional[dict] = None, seed: int = 0) -> str:
    """A multi-GPU Poisson instance of the LLMs in ``rates`` (30 s of arrivals, 20 s drain; on the
    GPU ``gpu``, default ``CLUSTER``'s; arrivals of ``seed``) as ``folder/poisson.json``; returns
    its path."""
    doc = instance(name, {"duration_s": TP2_DURATION_S,
                          "per_model": {n: {"process": "poisson", "rate": r} for n, r in rates.items()},
                          "lengths": dict(POISSON_LENGTHS), "slo": {"scale": 10}}, description)
    doc["cluster"] = dict(CLUSTER, gpus_per_node=gpus)
    if gpu is not None:
        doc["cluster"]["gpu"] = gpu
    doc["seed"] = seed
    doc["llm"]["drain_s"] = TP2_DRAIN_S
    doc["models"] = [m for m in doc["models"] if m["name"] in rates]
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "poisson.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return path


def write_tp2_instance() -> str:
    """The 2-GPU Poisson instance (module docstring); returns its path."""
    return write_set_instance(TP2_OUT, "tp2-poisson", TP2_RATES, 2,
                              "LLaMA-2-7B and LLaMA-3-8B shapes (random weights) on two 80 GB GPUs; Poisson "
                              "arrivals at 4 and 3 req/s, ShareGPT-like lengths (exponential, means 161 / 338).")


def write_gpu4_instance() -> str:
    """The 4-GPU Poisson instance (module docstring); returns its path."""
    return write_set_instance(GPU4_OUT, "gpu4-poisson", GPU4_RATES, 4,
                              "LLaMA-shaped 1.1B, 3B, LLaMA-2-7B and LLaMA-3-8B shapes (random weights) on four "
                              "80 GB GPUs; Poisson arrivals at 2, 1.5, 10 and 8 req/s, ShareGPT-like lengths "
                              "(exponential, means 161 / 338).")


def tp2_mesh(path: str, share: float, scheduling: Optional[str], why: str) -> Any:
    """Both LLMs of the 2-GPU instance on one TP-2 mesh of GPUs 0 and 1 at SM ``share`` each."""
    from placement_opt import load_instance
    from placement_opt.placement import Group, Placement

    names = tuple(load_instance(path).model_names)
    return Placement(groups=(Group(devices=(0, 1), tp=2, models=names, sm_share=(share,) * len(names)),),
                     scheduling=scheduling, provenance={"made_by": "benchmarks/fidelity/llm/make_instances.py",
                                                        "why": why})


def write_placements(path: str, placements: dict, hand_made: tuple, scored_on: Optional[str] = None) -> None:
    """Write ``placements`` beside ``path`` as ``poisson-<name>.placement.json`` (the hand-made
    ones with their simulated metrics, as the solvers' carry theirs) and print each one's score
    (on the instance ``scored_on``, default ``path``'s)."""
    from placement_opt import load_instance, simulate

    inst = load_instance(scored_on or path)
    for name, p in placements.items():
        m = simulate(inst, p)
        p = p.with_metrics(m) if name in hand_made else p
        out = path.replace(".json", f"-{name}.placement.json")
        with open(out, "w") as f:
            f.write(p.to_json() + "\n")
        print(f"{os.path.relpath(out, ROOT)}: groups {[(g.devices, g.tp, g.models, g.sm_share) for g in p.groups]} "
              f"scheduling {p.scheduling} tput {m['throughput_rps']:.3f} attain {m['slo_attainment']:.3f}")


def tp2_placements(path: str) -> None:
    """spatial and muxserve (solved) and temporal and colocated (one TP-2 mesh) beside ``path``."""
    from placement_opt import load_instance, solve

    inst = load_instance(path)
    placements = {s: solve(inst, s, seed=0) for s in ("spatial", "muxserve")}
    placements["temporal"] = tp2_mesh(path, 1.0, "temporal", "temporal multiplexing on one TP-2 mesh (the "
                                      "temporal solver chooses the spatial placement on two GPUs)")
    placements["colocated"] = tp2_mesh(path, 0.5, None, "both LLMs colocated on one TP-2 mesh at SM shares 0.5 "
                                       "(MuxServe's search prefers GPU 0 alone)")
    write_placements(path, placements, ("temporal", "colocated"))


def gpu4_placements(path: str) -> None:
    """spatial and muxserve (solved), temporal (muxserve's meshes, one job at a time) and temporal4
    (one TP-4 mesh of the four GPUs serving every LLM, one job at a time) beside ``path``."""
    from placement_opt import load_instance, solve
    from placement_opt.placement import Group, Placement

    inst = load_instance(path)
    placements = {s: solve(inst, s, seed=0) for s in ("spatial", "muxserve")}
    mux = placements["muxserve"]
    placements["temporal"] = Placement(
        groups=tuple(Group(devices=g.devices, tp=g.tp, models=g.models, sm_share=(1.0,) * len(g.models))
                     for g in mux.groups),
        scheduling="temporal", provenance={"made_by": "benchmarks/fidelity/llm/make_instances.py",
                                           "why": "the muxserve placement's meshes with temporal multiplexing "
                                                  "(the temporal solver chooses the spatial placement on four GPUs)"})
    names = tuple(inst.model_names)
    placements["temporal4"] = Placement(
        groups=(Group(devices=(0, 1, 2, 3), tp=4, models=names, sm_share=(1.0,) * len(names)),),
        scheduling="temporal", provenance={"made_by": "benchmarks/fidelity/llm/make_instances.py",
                                           "why": "temporal multiplexing of every LLM on one TP-4 mesh of the "
                                                  "four GPUs (the 2-GPU set's temporal placement, on four)"})
    write_placements(path, placements, ("temporal", "temporal4"))


H200U_PAIR_SPLITS = {"equal": (0.5, 0.5), "skewed": (0.25, 0.75), "reverse": (0.62, 0.37)}  # (llm-1b, llm-8b)
#: name: (rates, seed, hand-made SM splits in the rates' order)
H200U_SETS = {"h200us31": ({"llm-1b": 2.0, "llm-8b": 10.0}, 31, H200U_PAIR_SPLITS),
              "h200us32": ({"llm-1b": 2.0, "llm-8b": 8.0}, 32, H200U_PAIR_SPLITS),
              "h200us33": ({"llm-1b": 2.0, "llm-8b": 10.0}, 33,
                           {k: v for k, v in H200U_PAIR_SPLITS.items() if k != "equal"}),
              "h200u3s35": ({"llm-1b": 1.0, "llm-3b": 1.0, "llm-8b": 8.0}, 35,
                            {"half": (0.25, 0.25, 0.5), "skewed": (0.2, 0.2, 0.57)}),
              "h200p36": ({"llm-1b": 16.0}, 36, {"p20": (0.2,), "p42": (0.42,)}),
              "h200p37": ({"llm-3b": 9.0}, 37, {"p20": (0.2,), "p42": (0.42,)}),
              "h200p38": ({"llm-8b": 5.0}, 38, {"p20": (0.2,), "p30": (0.3,)}),
              "h200p40": ({"llm-3b": 12.0}, 40, {"p30": (0.3,), "p50": (0.5,)}),
              "h200p41": ({"llm-8b": 7.0}, 41, {"p42": (0.42,), "p50": (0.5,)}),
              "h200us42": ({"llm-1b": 12.0, "llm-3b": 8.0}, 42, {"skewed": (0.3, 0.7)}),
              "h200us43": ({"llm-3b": 4.0, "llm-8b": 8.0}, 43, {"skewed": (0.25, 0.75)}),
              "h200us44": ({"llm-1b": 3.0, "llm-8b": 7.0}, 44, {"skewed": (0.25, 0.75)}),
              "h200us45": ({"llm-3b": 6.0, "llm-8b": 6.0}, 45, {"skewed": (0.3, 0.7)}),
              "h200u3s46": ({"llm-1b": 4.0, "llm-3b": 3.0, "llm-8b": 5.0}, 46, {"half": (0.25, 0.25, 0.5)}),
              "h200us47": ({"llm-1b": 2.0, "llm-8b": 10.0}, 47, {"skewed": (0.25, 0.75)}),
              "h200us48": ({"llm-3b": 4.0, "llm-8b": 8.5}, 48, {"skewed": (0.25, 0.75)}),
              "h200f49": ({"llm-8b": 11.0}, 49, {"full": (1.0,)}),
              "h200us50": ({"llm-1b": 2.0, "llm-8b": 10.0}, 50, {"equal": (0.5, 0.5)}),
              "h200us51": ({"llm-3b": 4.0, "llm-8b": 8.5}, 51, {"skewed": (0.25, 0.75)}),
              "h200us52": ({"llm-1b": 2.0, "llm-8b": 11.0}, 52, {"equal": (0.5, 0.5)}),
              "h200us53": ({"llm-1b": 3.0, "llm-8b": 8.0}, 53, {"skewed": (0.25, 0.75)}),
              "h200us54": ({"llm-3b": 5.0, "llm-8b": 7.0}, 54, {"skewed": (0.25, 0.75)}),
              "h200us64": ({"llm-1b": 2.0, "llm-8b": 10.0}, 64, {"equal": (0.5, 0.5)}),
              "h200us65": ({"llm-3b": 4.0, "llm-8b": 8.0}, 65, {"skewed": (0.25, 0.75)})}
H200U_TABLES = os.path.join(HERE, "tables-h200-shares")
#: one H200 with the H100 sets' memory budget, so the KV pools are theirs
H200_GPU = {"name": "H200", "memory_gb": 141, "usable_memory_gb": 76, "peak_fp16_tflops": 989,
            "memory_bandwidth_gbps": 4800}


def write_h200u_sets(names: list) -> None:
    """The unequal-share sets ``names`` of ``H200U_SETS`` on one H200 (module docstring): each
    set's instance, its measured copy, and its placements beside it."""
    import measured_instances
    from placement_opt import load_instance, solve
    from placement_opt.placement import Group, Placement

    for name in names:
        rates, seed, splits = H200U_SETS[name]
        folder = os.path.join(OUT, name)
        rate_text = " + ".join(f"{r:g}" for r in rates.values())
        path = write_set_instance(folder, f"{name}-poisson", rates, 1,
                                  f"{' and '.join(rates)} (LLaMA shapes, random weights) on one H200 GPU, with the "
                                  f"H100 sets' memory budget (76 GB usable); Poisson arrivals at {rate_text} req/s, "
                                  f"ShareGPT-like lengths (exponential, means 161 / 338); seed {seed}. SM splits of "
                                  f"the GPU between them: MuxServe's and {len(splits)} others.", gpu=H200_GPU, seed=seed)
        measured = measured_instances.write_measured(H200U_TABLES, folder)[0]
        inst = load_instance(measured)
        models = tuple(inst.model_names)
        # a lone LLM gets the whole GPU from MuxServe: its set runs only its SM partitions
        placements = {"muxserve": solve(inst, "muxserve", seed=0)} if len(models) > 1 else {}
        for split, shares in splits.items():
            if "muxserve" in placements and shares == placements["muxserve"].groups[0].sm_share:
                continue  # MuxServe's own split: run once, as muxserve
            placements[split] = Placement(
                groups=(Group(devices=(0,), tp=1, models=models, sm_share=shares),),
                provenance={"made_by": "benchmarks/fidelity/llm/make_instances.py",
                            "why": f"the {len(models)} LLMs on one GPU at SM shares {shares} (an SM split beside MuxServe's)"})
        write_placements(path, placements, tuple(splits), scored_on=measured)
        print(f"{name}: placements {' '.join(placements)}")


#: the trace sets on one H200 (``--h200t``): name: (KV reserve, seed, workloads: name: (Splitwise
#: trace, window start and length in s, pace: the window is replayed that many times as fast, so
#: that it lasts length / pace)); ``h200t74``: fresh windows of about ``h200t73``'s load
H200T_SETS = {"h200t73": (0.1, 73, {"conv": ("splitwise_conv.csv", 0.0, 90.0, 1.5),
                                    "code": ("splitwise_code.csv", 300.0, 60.0, 1.0)}),
              "h200t74": (0.1, 74, {"conv": ("splitwise_conv.csv", 330.0, 90.0, 1.25),
                                    "code": ("splitwise_code.csv", 1200.0, 60.0, 1.0)}),
              "h200t75": (0.1, 75, {"conv": ("splitwise_conv.csv", 540.0, 90.0, 1.0),
                                    "code": ("splitwise_code.csv", 1800.0, 60.0, 1.0)}),
              "h200t76": (0.1, 76, {"conv": ("splitwise_conv.csv", 900.0, 90.0, 1.0),
                                    "code": ("splitwise_code.csv", 1560.0, 60.0, 1.0)})}


def write_h200t_sets(names: list, traces: str) -> None:
    """The trace sets ``names`` of ``H200T_SETS``: the five LLMs on one H200 (the H100 sets'
    memory budget) serving their Splitwise conversation and code windows,
    requests to the LLMs round robin; each workload's instance, its
    measured copy (``tables-h200-g1``, the 1-GPU H200 tables) and its ``muxserve`` and
    ``temporal`` placements solved on that copy."""
    import measured_instances
    from placement_opt import load_instance, solve

    os.makedirs(os.path.join(OUT, "traces"), exist_ok=True)
    for name in names:
        reserve, seed, workloads = H200T_SETS[name]
        folder = os.path.join(OUT, name)
        os.makedirs(folder, exist_ok=True)
        for trace, (src, start, length, pace) in workloads.items():
            csv_name = write_slice(traces, trace, {trace: (src, start, length)}, pace)
            doc = instance(f"{name}-{trace}", {"duration_s": length / pace, "trace": f"../traces/{csv_name}",
                                               "slo": {"scale": 10}},
                           f"5 LLaMA-shaped LLMs (0.4B-8B, random weights) on one H200 GPU, with the H100 sets' "
                           f"memory budget (76 GB usable); the Splitwise {trace} trace from {start:g} s for "
                           f"{length:g} s replayed {pace:g} x as fast, requests to the LLMs round robin; "
                           f"a {reserve:g} KV reserve; seed {seed}.")
            doc["cluster"] = dict(CLUSTER, gpu=H200_GPU)
            doc["llm"]["kv_reserve_fraction"] = reserve
            doc["seed"] = seed
            with open(os.path.join(folder, f"{trace}.json"), "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
        for measured in measured_instances.write_measured(os.path.join(HERE, "tables-h200-g1"), folder):
            inst = load_instance(measured)
            path = os.path.join(folder, os.path.basename(measured))
            write_placements(path, {s: solve(inst, s, seed=0) for s in ("muxserve", "temporal")}, (),
                             scored_on=measured)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "data", "traces"),
                    help="folder with splitwise_conv.csv and splitwise_code.csv")
    ap.add_argument("--tp2", action="store_true", help="write only the 2-GPU set (instances/fidelity-llm/tp2/)")
    ap.add_argument("--gpu4", action="store_true", help="write only the 4-GPU set (instances/fidelity-llm/gpu4/)")
    ap.add_argument("--h200u", nargs="+", choices=sorted(H200U_SETS), metavar="NAME",
                    help="write only these unequal-share sets (instances/fidelity-llm/NAME/; H200U_SETS)")
    ap.add_argument("--h200t", nargs="+", choices=sorted(H200T_SETS), metavar="NAME",
                    help="write only these trace sets on one H200 (instances/fidelity-llm/NAME/; H200T_SETS)")
    args = ap.parse_args()
    if args.h200t:
        write_h200t_sets(args.h200t, args.traces)
    elif args.h200u:
        write_h200u_sets(args.h200u)
    elif args.tp2:
        tp2_placements(write_tp2_instance())
    elif args.gpu4:
        gpu4_placements(write_gpu4_instance())
    else:
        solve_placements(write_instances(args.traces))


if __name__ == "__main__":
    main()
