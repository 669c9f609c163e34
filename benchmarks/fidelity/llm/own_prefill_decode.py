"""How much a decode step slows beside its own LLM's prefill, by the prefill's prompt, on the GPU and in the simulator.

The engine runs an LLM's prefill and its decode steps on the LLM's one SM partition, so a step
that runs beside its own prefill is slower than its neighbours (``llm.own_prefill_decode_share``).
This script takes the job traces of ``RESULTS/RUN...`` (``placeopt execute --job-trace``) and the
simulator's timelines of the same runs (their generation's calibration, ``--set FIELD=VALUE``
changing a field, as ``llm_fidelity.py --predict`` does), finds every decode step at least 80%
beside a prefill of its own LLM (``llm_fidelity.own_prefill_steps``: its GPU time over its
nearest clear neighbours'), and prints per LLM the mean slowdown measured / simulated in bins of
that prefill's padded prompt tokens (requests x longest context). Then it fits the measured
steps with ``c x (1 + tokens / knee)`` (least squares in log, the knee on a grid 2% apart) and
prints ``c``, the knee and the RMS log error against one constant: the form of
``llm.own_prefill_decode_knee_tokens`` (docs/fidelity-llm.md "A decode step beside its own
prefill, by the prompt").

Usage: python benchmarks/fidelity/llm/own_prefill_decode.py RESULTS/RUN... [--set FIELD=VALUE ...]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict
from typing import Dict, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity

import llm_fidelity as fid  # noqa: E402

#: the bins of the own prefill's padded prompt tokens (lower edges; the last is open)
TOKEN_BINS = (0, 64, 128, 256, 512, 1024, 2048)
#: the knees the fit tries, 2% apart
KNEES = tuple(10.0 * 1.02 ** i for i in range(int(math.log(1e5) / math.log(1.02))))

Step = Tuple[str, float, int]


def token_bin(tokens: int) -> int:
    """The index of the :data:`TOKEN_BINS` bin ``tokens`` falls in."""
    return int(np.searchsorted(TOKEN_BINS, tokens, side="right")) - 1


def bin_means(steps: List[Step]) -> Dict[Tuple[str, int], Tuple[float, int]]:
    """Per (LLM, token bin): the steps' mean slowdown and how many there are."""
    groups: Dict[Tuple[str, int], List[float]] = defaultdict(list)
    for llm, slowdown, tokens in steps:
        groups[(llm, token_bin(tokens))].append(slowdown)
    return {k: (float(np.mean(v)), len(v)) for k, v in groups.items()}


def fit_knee(steps: List[Step]) -> Tuple[float, float, float, float]:
    """``(c, knee, rms, rms_constant)``: the least-squares fit in log of ``c x (1 + tokens /
    knee)`` to the steps' slowdowns over :data:`KNEES`, its RMS log error and that of the best
    constant (the geometric mean); ValueError without steps."""
    if not steps:
        raise ValueError("no decode step beside its own LLM's prefill")
    y = np.log([s for _, s, _ in steps])
    tokens = np.array([t for _, _, t in steps], dtype=np.float64)
    best = None
    for knee in KNEES:
        x = np.log1p(tokens / knee)
        a = float(np.mean(y - x))
        rms = float(np.sqrt(np.mean((y - x - a) ** 2)))
        if best is None or rms < best[2]:
            best = (math.exp(a), knee, rms)
    return best[0], best[1], best[2], float(np.std(y))


def run_steps(specs: Sequence[str], overrides: Dict[str, float]) -> Tuple[List[Step], List[Step]]:
    """The measured and the simulated steps beside their own prefill over the runs ``specs``."""
    measured: List[Step] = []
    simulated: List[Step] = []
    for spec in specs:
        run = fid.traced_run(spec)
        measured += fid.own_prefill_steps(fid.traced_jobs(run))
        simulated += fid.own_prefill_steps(fid.simulated_run_rows(run, fid.traced_instance(run, overrides))[0])
    return measured, simulated


def report(specs: Sequence[str], overrides: Dict[str, float]) -> List[str]:
    """The script's lines."""
    measured, simulated = run_steps(specs, overrides)
    meas, sim = bin_means(measured), bin_means(simulated)
    edges = [f"{lo}-{hi}" for lo, hi in zip(TOKEN_BINS, TOKEN_BINS[1:])] + [f"{TOKEN_BINS[-1]}+"]
    lines = [f"{len(specs)} runs{' with ' + str(overrides) if overrides else ''}: decode steps beside their own "
             f"prefill, mean slowdown measured / simulated (steps measured) by the prefill's padded prompt tokens",
             f"{'llm':9} " + " ".join(f"{e:>17}" for e in edges)]
    for llm in sorted({s[0] for s in measured}):
        cells = []
        for i in range(len(TOKEN_BINS)):
            m, s = meas.get((llm, i)), sim.get((llm, i))
            cells.append("-" if m is None else f"{m[0]:.2f}/{'-' if s is None else f'{s[0]:.2f}'} ({m[1]})")
        lines.append(f"{llm:9} " + " ".join(f"{c:>17}" for c in cells))
    for label, steps in (("measured", measured), ("simulated", simulated)):
        c, knee, rms, flat = fit_knee(steps)
        lines.append(f"{label}: {len(steps)} steps, fit c x (1 + tokens / knee): c {c:.3f}, knee {knee:.0f} tokens, "
                     f"RMS log error {rms:.4f} (one constant: {flat:.4f})")
    return lines


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("runs", nargs="+", metavar="RESULTS/RUN")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    args = ap.parse_args(argv)
    try:
        overrides = fid.parse_overrides(args.overrides)
        lines = report(args.runs, overrides)
    except ValueError as e:
        ap.exit(2, f"own_prefill_decode.py: {e}\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
