"""Engine rounds on unequal SM partitions against the contention model, and the model refitted.

``beside_decode.py`` found on the job traces that a small LLM on a small partition beside a large
one runs up to 28% past the contention model, while the even splits the H200 rate and cap were
fitted on (``engine-h200/one-split-*.json``: five LLMs at 0.2) stay close. A trace cannot tell
apart whether the small partition, the small LLM or the bytes beside it matter, so
``engine_bench.py --models ... --shares ...`` measured rounds of chosen pairs on one H200
(``engine-h200-unequal/``): the same LLM on 0.25 / 0.75 and 0.5 / 0.5 and ``llm-1b`` or
``llm-3b`` beside ``llm-8b`` at several splits, every LLM's decode step alone and then all launched
together.

This replays every round with the contention model (``llm_fidelity.replay_round``: the steps
launched a launch apart, each stretched by
:func:`~placement_opt.simulate.meshsim.contention_stretch` while it runs beside the others) at
the calibration's rate and cap, prints per LLM its measured slowdown together, the replayed
one and the log error, then refits rate and cap on a grid over the unequal rounds and the
even-split ones together, and prints the RMS log error of both before and after.

Usage: python benchmarks/fidelity/llm/unequal_rounds.py [--calibration calibration-v3h-h200.json]
[--rounds engine-h200-unequal/*.json ...] [--even engine-h200/one-split-b8.json ...]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity

import llm_fidelity as fid  # noqa: E402

#: the even-split H200 rounds the calibration's rate and cap were fitted on (calibration-v3h-h200.json "gpu")
EVEN_ROUNDS = tuple(f"engine-h200/one-split-{n}.json" for n in ("b8", "b16-c512", "b32-c512", "b16-c1024"))
#: the refit's grid (GB/s): the rate, and the cap (0: none)
RATE_GRID = np.arange(2000.0, 16001.0, 200.0)
CAP_GRID = np.concatenate(([0.0], np.arange(2000.0, 6001.0, 100.0)))


def unequal_paths() -> List[str]:
    """The committed unequal-partition rounds, relative to ``benchmarks/fidelity/llm``."""
    return sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "engine-h200-unequal", "*.json")))


def log_errors(rounds: List[List[dict]], rate: float, cap: float, curve_gbps: float = 0.0,
               curve_power: float = 2.0) -> List[List[float]]:
    """Per round, per LLM: log(replayed time together / measured) at ``rate``, ``cap`` and the
    loaded-latency curve (0: off; ``latency_curve.py``)."""
    return [[math.log(r / p["together_gpu_ms"])
             for r, p in zip(fid.replay_round(rate, per, cap, curve_gbps, curve_power), per)]
            for per in rounds]


def refit(rounds: List[List[dict]]) -> Tuple[float, float, float]:
    """(rate, cap, RMS log error) of the grid point whose replay fits ``rounds`` best."""
    best = (0.0, 0.0, math.inf)
    for cap in CAP_GRID:
        for rate in RATE_GRID:
            err = fid.replay_rms(float(rate), rounds, float(cap))
            if err < best[2]:
                best = (float(rate), float(cap), err)
    return best


def lines(paths: Sequence[str], even: Sequence[str], calibration: Dict[str, float]) -> List[str]:
    """The report: per unequal round and LLM, measured and replayed slowdown; then the fits."""
    rate, cap = calibration["contention_hbm_gbps"], calibration["contention_hbm_cap_gbps"]
    unequal, even_rounds = fid.engine_rounds(tuple(paths)), fid.engine_rounds(tuple(even))
    out = [f"contention model at rate {rate:g} GB/s, cap {cap:g} GB/s (the calibration's)",
           f"{'round':<28} {'LLM@share':<14} alone GB/s   together: measured  replayed  log error"]
    before = log_errors(unequal, rate, cap)
    for path, per, errs in zip(paths, unequal, before):
        for p, e in zip(per, errs):
            out.append(f"{os.path.basename(path)[:-5]:<28} {p['model'] + '@' + format(p['share'], 'g'):<14} "
                       f"{p['alone_gbps']:>10.0f}   {p['slowdown_together']:>17.3f}  "
                       f"{p['slowdown_together'] * math.exp(e):>8.3f}  {e:>+9.3f}")
    new_rate, new_cap, _ = refit(unequal + even_rounds)
    after = log_errors(unequal, new_rate, new_cap)
    for label, r, c, errs in (("calibration", rate, cap, before), ("refit on both", new_rate, new_cap, after)):
        out.append(f"{label}: rate {r:g} cap {c:g} GB/s: RMS log error unequal {fid.replay_rms(r, unequal, c):.4f} "
                   f"({len(unequal)} rounds), even {fid.replay_rms(r, even_rounds, c):.4f} ({len(even_rounds)}), "
                   f"worst {min(e for per in errs for e in per):+.3f}")
    return out


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibration", default="calibration-v3h-h200.json",
                    help="calibration file under benchmarks/fidelity/llm whose rate and cap are replayed")
    ap.add_argument("--rounds", nargs="+", default=None, help="unequal rounds (default: engine-h200-unequal/*.json)")
    ap.add_argument("--even", nargs="+", default=list(EVEN_ROUNDS), help="even-split rounds refitted beside them")
    args = ap.parse_args(argv)
    with open(os.path.join(HERE, args.calibration)) as f:
        calibration = json.load(f)
    print("\n".join(lines(args.rounds or unequal_paths(), args.even, calibration)))


if __name__ == "__main__":
    main()
