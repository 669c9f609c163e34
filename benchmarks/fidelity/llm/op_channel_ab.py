"""How much the pipe operation channel saves a TP mesh, against the gloo broadcast, in one run.

A TP mesh's leader sends every scheduling iteration's device operations to its other ranks
(``placement_opt.executor.llm_worker``): since v3s over OS pipes (``--op-channel pipe``), before
over a gloo ``broadcast_object_list`` (``--op-channel gloo``, kept as this baseline). This script
runs the same placements under both channels on one machine, one after the other, and compares
what each measured, so the ratio does not depend on which machine (or card) ran it::

    python benchmarks/fidelity/llm/op_channel_ab.py run OUT [--set instances/fidelity-llm/gpu4]
        [--placements temporal4 temporal] [--duration 20]
    python benchmarks/fidelity/llm/op_channel_ab.py report OUT

``run`` writes ``OUT/<channel>/<set>-poisson-<placement>`` (``placeopt execute`` of the set's
measured instance, no host probe, the first ``--duration`` seconds of arrivals); ``report``
prints per placement each channel's measured throughput and mean TPOT and the median time of
its TP meshes' back-to-back decode steps beyond the cost table (``llm_fidelity.plain_stream_steps``,
meshes of more than one GPU: the others send nothing; read as the host time of a step where a
mesh runs one job at a time, as temporal placements do; with LLMs colocated on SM partitions
it also holds their contention, alike under both channels; the table cancels out of the
difference where both channels' step mixes are alike), then a last line
``op_channel_ab <placement>: throughput_ratio=<pipe/gloo> step_saved_ms=<gloo - pipe> ...``.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from typing import List

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import llm_fidelity  # noqa: E402

CHANNELS = ("gloo", "pipe")  # baseline first


def run(out: str, set_dir: str, placements: List[str], duration: float) -> None:
    """Each placement under each channel, baseline first, into ``out/<channel>/...``."""
    name = os.path.basename(os.path.normpath(set_dir))
    for p in placements:
        for channel in CHANNELS:
            target = os.path.join(out, channel, f"{name}-poisson-{p}")
            cmd = ["placeopt", "execute", os.path.join(set_dir, "measured", "poisson.json"),
                   os.path.join(set_dir, f"poisson-{p}.placement.json"), "--op-channel", channel,
                   "--no-host-probe", "--duration", f"{duration:g}", "-o", target]
            print("+", " ".join(cmd), flush=True)
            code = subprocess.call(cmd)
            if code != 0:
                sys.exit(f"op_channel_ab: {p} under {channel} failed (exit {code})")


def step_beyond_table(run_: dict) -> float:
    """Median seconds a back-to-back decode step of a TP mesh (the channel's; a one-GPU mesh
    sends nothing) took beyond its table time (nan: none)."""
    steps = llm_fidelity.plain_stream_steps(run_)
    steps = steps[steps[:, 2] > 1]
    return float(np.median(steps[:, 0])) if len(steps) else math.nan


def report(out: str) -> None:
    found = {c: {r["name"]: r for r in llm_fidelity.load_runs(os.path.join(out, c))} for c in CHANNELS}
    names = sorted(set(found["gloo"]) & set(found["pipe"]))
    if not names:
        sys.exit(f"op_channel_ab: no run under both {os.path.join(out, 'gloo')} and {os.path.join(out, 'pipe')}")
    lines = []
    for n in names:
        figures = {}
        for c in CHANNELS:
            r = found[c][n]
            m = r["summary"]["measured"]
            figures[c] = (m["throughput_rps"], m["tpot_mean_s"], step_beyond_table(r), r["summary"]["status"])
            print(f"{n} {c}: {figures[c][3]}, throughput {m['throughput_rps']:.3f} req/s, mean TPOT "
                  f"{1e3 * m['tpot_mean_s']:.2f} ms, decode step beyond the table "
                  f"{1e3 * figures[c][2]:.3f} ms (median)")
        g, p = figures["gloo"], figures["pipe"]
        lines.append(f"op_channel_ab {n}: throughput_ratio={p[0] / g[0]:.3f} tpot_ratio={p[1] / g[1]:.3f} "
                     f"step_saved_ms={1e3 * (g[2] - p[2]):.3f}")
    for line in lines:
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the placements under both channels (on the GPU machine)")
    r.add_argument("out")
    r.add_argument("--set", default=os.path.join("instances", "fidelity-llm", "gpu4"))
    r.add_argument("--placements", nargs="+", default=["temporal4", "temporal"])
    r.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals replayed (> 0)")
    rep = sub.add_parser("report", help="compare the runs under OUT")
    rep.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "run":
        if not (math.isfinite(args.duration) and args.duration > 0):
            ap.error("--duration: expected a finite number > 0")
        if not os.path.isdir(args.set):
            ap.error(f"--set: {args.set} is not a folder")
        run(args.out, args.set, args.placements, args.duration)
    else:
        report(args.out)


if __name__ == "__main__":
    main()
