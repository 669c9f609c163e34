"""Decode steps on SM partitions beside other LLMs' decode steps: measured stretch against the model.

The simulator stretches a running job under HBM contention by
:func:`~placement_opt.simulate.meshsim.contention_stretch` of the other running jobs' HBM demand
(bytes over their time alone): the same factor for a small partition as for a large one that
demands the same. Its rate and cap were fitted on engine micro-benchmark rounds, its decode step
alone on a partition on the steps that ran alone in the job traces. This reads the committed job
traces of the runs on SM partitions of one GPU and, for every decode step whose whole GPU time
ran beside other LLMs' decode steps only (no prefill of any LLM overlapping more than 5% of it),
compares

* **measured**: its GPU time over the model's time alone, as the simulator starts a decode step
  with the run's calibration: its table time at the effective context x
  ``decode_partition_stretch`` + ``decode_partition_request_s`` x its requests where the
  calibration has the partition step (v3g's H200 one), else its table time at the mean context
  plus its KV bytes over ``decode_kv_gbps``, and its split-combine spill where the calibration
  has ``decode_combine_spill_s`` (``simulate.llm.decode_stretch``, ``decode_request_seconds``,
  ``decode_wave``, ``kv_read_gbps``, ``combine_spill_seconds``), with
* **model**: the contention stretch at the time-weighted HBM demand of the other LLMs' decode
  steps beside it (each one's bytes, weights and the KV of its contexts, over its own time alone)
  and its own, at the run's ``contention_hbm_gbps`` and ``contention_hbm_cap_gbps``.

Steps are grouped by results family (the folder's name up to its seed), LLM, its SM share and
the summed shares of the other LLMs that ran beside it; each group gives the steps' count and
the medians of the measured stretch, the model's and their ratio. Steps alone on their partition
(no job of another LLM overlapping) are grouped as ``alone`` (their model is 1).

Usage: python benchmarks/fidelity/llm/beside_decode.py [FOLDER ...] [--min-steps 200] [-o beside.json]
(FOLDER: results folders under benchmarks/fidelity/llm; default: the one-GPU H200 runs on SM
partitions with job traces).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import sys
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: the fidelity report's readers
import llm_fidelity as lf  # noqa: E402

#: the default folders: every H200 family of one-GPU meshes on SM partitions (pairs, triples,
#: five LLMs, the 4-GPU set's one-GPU meshes, the spatial pairs)
DEFAULT_FAMILIES = ("h200us", "h200u3s", "h200x3s", "h200g1s", "h200s1", "h200s2")

#: the part of a step's GPU time a prefill may overlap and the step still count as beside decodes
PREFILL_SLACK = 0.05

#: the columns of :func:`beside_steps`
STEP_COLUMNS = ("gpu_s", "alone_s", "model", "others_decoding", "prefilling", "share", "others_share")


def default_folders() -> List[str]:
    """The results folders of :data:`DEFAULT_FAMILIES` (the repeats ``...r`` too)."""
    out = []
    for path in lf.results_folders():
        family = os.path.basename(path).split("-")[-1]
        if any(family.startswith(f) for f in DEFAULT_FAMILIES):
            out.append(path)
    return out


def traced_on_partitions(run: dict) -> bool:
    """Whether ``run`` is a whole trial with a job trace that records the contexts and a one-GPU
    mesh on SM partitions (the trace's header read, not its rows)."""
    return (lf.whole_trial(run) and os.path.exists(lf.run_file(run, "jobs.csv")) and lf.trace_has_contexts(run)
            and bool(lf.partition_groups(run)))


def beside_steps(run: dict, curve: Optional[Tuple[float, float]] = None) -> Tuple[List[str], np.ndarray]:
    """Per decode step on an SM partition of a one-GPU mesh in ``run``'s job trace: its LLM and
    a row of :data:`STEP_COLUMNS`: its GPU time, the model's time alone (module docstring), the
    contention stretch at its own HBM demand and the time-weighted demand of the other LLMs'
    decode steps beside it (1 with none), the part of its time other LLMs' decode steps and any
    prefill ran beside it (summed over those jobs), its SM share and the summed shares of the
    other LLMs beside it. With ``curve`` (scale GB/s, power) the model takes the loaded-latency
    curve's stretch too (beside the run's rate and cap: ``latency_curve.py``), each other LLM
    offering its time-weighted demand. ValueError for a run without a job trace that records
    the contexts."""
    from placement_opt.executor.llm_sched import len_interp
    from placement_opt.llm_units import llm_specs
    from placement_opt.simulate.llm import (combine_spill_seconds, contention_gbps, decode_request_seconds,
                                            decode_stretch, decode_wave, kv_read_gbps, sm_shares)
    from placement_opt.simulate.meshsim import contention_stretch, decode_context, offered_load, served_latency

    jobs = lf.traced_jobs(run)
    if jobs is None or not lf.trace_has_contexts(run):
        raise ValueError(f"{os.path.basename(run['folder'])}/{run['name']}: no job trace with the "
                         "context_tokens column")
    inst = lf.run_instance(run, None)  # with the run's calibration
    cfg = inst.llm_settings
    _, placement, policy = lf.run_setup(run)
    specs = {s.name: s for s in llm_specs(inst)}
    groups = lf.partition_groups(run)
    tables = lf._mesh_step_tables(run, at_shares=True)
    kv_gbps, rate, cap = kv_read_gbps(cfg, 1), contention_gbps(cfg, 1), cfg.contention_hbm_cap_gbps
    curve_gbps, curve_power = curve or (0.0, 2.0)
    share = {}
    for gi in groups:
        g = placement.groups[gi]
        share.update({(gi, m): sh for m, sh in zip(g.models, sm_shares(g, policy))})
    jobs = sorted((j for j in jobs if j["group"] in groups), key=lambda j: j["device_start_s"])
    prefill_alone = lf.traced_table_seconds(run, jobs, at_bucket=True)
    alone = np.empty(len(jobs))
    for i, j in enumerate(jobs):
        if j["kind"] != "decode":
            alone[i] = prefill_alone[i]
            continue
        sh, n = share[(j["group"], j["llm"])], j["requests"]
        table, k = tables[j["llm"]][:2]
        length = decode_context(float(j["context_tokens"]), float(j["longest_context"]), n,
                                decode_wave(cfg, specs[j["llm"]], sh, 1))
        seconds = len_interp(table.decode[k][min(n, table.decode.shape[1] - 1)], table.lgrid, length)
        stretch, spec = decode_stretch(cfg, sh, 1), specs[j["llm"]]
        if stretch > 0:
            seconds *= stretch
        elif kv_gbps > 0:
            seconds += j["context_tokens"] * spec.kv_bytes_per_token / (kv_gbps * 1e9)
        alone[i] = (seconds + decode_request_seconds(cfg, sh, 1) * n
                    + combine_spill_seconds(cfg, spec, 1, n, int(j["longest_context"])))
    demand = lf.traced_demand(jobs, specs, [1] * len(jobs), alone)
    start = np.array([j["device_start_s"] for j in jobs])
    end = np.array([j["device_end_s"] for j in jobs])
    group = np.array([j["group"] for j in jobs])
    llm = np.array([j["llm"] for j in jobs])
    decoding = np.array([j["kind"] == "decode" for j in jobs])
    shares = np.array([share[(j["group"], j["llm"])] for j in jobs])
    longest = float(np.max(end - start)) if jobs else 0.0
    names, rows = [], []
    for i, j in enumerate(jobs):
        took = end[i] - start[i]
        if j["kind"] != "decode" or took <= 0:
            continue
        near = slice(int(np.searchsorted(start, start[i] - longest)), int(np.searchsorted(start, end[i])))
        overlap = np.clip(np.minimum(end[near], end[i]) - np.maximum(start[near], start[i]), 0.0, None)
        overlap *= group[near] == group[i]
        overlap[i - near.start] = 0.0
        other = llm[near] != j["llm"]
        beside = overlap * (other & decoding[near])
        others = float(np.dot(beside, demand[near])) / took
        per_llm = collections.defaultdict(float)  # each other LLM's time-weighted demand (for the curve)
        for k in np.flatnonzero(beside) if curve_gbps > 0 else ():
            per_llm[llm[near][k]] += beside[k] * demand[near][k] / took
        loaded = served_latency(sum(offered_load(d, curve_gbps, curve_power) for d in [demand[i], *per_llm.values()]),
                                curve_gbps, curve_power)
        names.append(j["llm"])
        rows.append((took, alone[i],
                     contention_stretch(demand[i] + others, demand[i], loaded, rate, cap, curve_gbps, curve_power),
                     beside.sum() / took,
                     float(overlap[~decoding[near]].sum()) / took, shares[i],
                     float(sum({m: s for m, s in zip(llm[near][beside > 0], shares[near][beside > 0])}.values()))))
    return names, np.array(rows, dtype=np.float64).reshape(-1, len(STEP_COLUMNS))


def family(folder: str) -> str:
    """A results folder's family: its last name part up to the seed (``h200us31r`` -> ``h200us``)."""
    return re.sub(r"\d+r?$", "", os.path.basename(os.path.normpath(folder)).split("-")[-1])


def grouped(runs: Sequence[dict], curve: Optional[Tuple[float, float]] = None
            ) -> Iterator[Tuple[Tuple[str, str, float, float], np.ndarray]]:
    """Per (family, LLM, SM share, others' summed share; ``alone``: share -1 of others) the
    (measured, model) stretch of every step of ``runs`` beside other LLMs' decode steps only
    (:func:`beside_steps`, :data:`PREFILL_SLACK`), or alone on its partition."""
    out: Dict[Tuple[str, str, float, float], List[Tuple[float, float]]] = collections.defaultdict(list)
    c = {name: k for k, name in enumerate(STEP_COLUMNS)}
    for run in runs:
        for name, r in zip(*beside_steps(run, curve)):
            if r[c["prefilling"]] > PREFILL_SLACK:
                continue
            measured = r[c["gpu_s"]] / r[c["alone_s"]]
            if r[c["others_decoding"]] <= PREFILL_SLACK:
                out[(family(run["folder"]), name, round(r[c["share"]], 2), -1.0)].append((measured, 1.0))
            elif r[c["others_decoding"]] >= 1.0 - PREFILL_SLACK:
                out[(family(run["folder"]), name, round(r[c["share"]], 2), round(r[c["others_share"]], 2))].append(
                    (measured, r[c["model"]]))
    for key in sorted(out, key=lambda k: (k[0], k[2], k[1], k[3])):
        yield key, np.array(out[key])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="results folders (default: the H200 partition families)")
    ap.add_argument("--min-steps", type=int, default=200, help="leave out groups of fewer steps")
    ap.add_argument("-o", "--out", help="write the groups as JSON here too")
    ap.add_argument("--curve", default=None, metavar="GBPS,POWER",
                    help="the model with the loaded-latency curve of this scale and power too "
                         "(latency_curve.py's fit)")
    args = ap.parse_args()
    curve = None
    if args.curve:
        try:
            curve = tuple(float(x) for x in args.curve.split(","))
            if len(curve) != 2 or not all(math.isfinite(x) and x > 0 for x in curve):
                raise ValueError
        except ValueError:
            ap.error(f"--curve {args.curve!r}: expected two positive numbers GBPS,POWER")
    folders = [os.path.join(lf.LLM, f) if not os.path.isabs(f) else f for f in args.folders] or default_folders()
    runs = [r for f in folders for r in lf.load_runs(f) if traced_on_partitions(r)]
    print(f"{len(runs)} runs with job traces on SM partitions of one GPU")
    print(f"{'family':9s} {'LLM':9s} {'share':>5s} {'beside':>6s} {'steps':>7s} {'measured':>8s} {'model':>6s} "
          f"{'ratio':>6s}")
    groups = []
    for (fam, name, share, others), a in grouped(runs, curve):
        if len(a) < args.min_steps:
            continue
        row = {"family": fam, "llm": name, "share": share, "others_share": None if others < 0 else others,
               "steps": len(a), "measured": float(np.median(a[:, 0])), "model": float(np.median(a[:, 1])),
               "ratio": float(np.median(a[:, 0] / a[:, 1]))}
        groups.append(row)
        print(f"{fam:9s} {name:9s} {share:5.2f} {'alone' if others < 0 else f'{others:.2f}':>6s} {len(a):7d} "
              f"{row['measured']:8.3f} {row['model']:6.3f} {row['ratio']:6.3f}")
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"folders": [os.path.relpath(p, lf.LLM) for p in folders], "groups": groups,
                       **({"curve": list(curve)} if curve else {})}, f, indent=1)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
