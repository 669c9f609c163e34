"""A prefill's stretch beside other LLMs' jobs: its knee in prompt tokens against its knee in its time.

The simulator stretches a graph prefill on an SM partition beside other jobs by
``1 + (others' HBM demand / gbps + their decode requests / requests) / knee term`` (and the own
decode step apart: ``meshsim.prefill_factor_beside``). v3g's H200 calibration divides the load by
``1 + prompt tokens / 594``; v3i's by ``1 + T / 11.9 ms``, T the prefill's time alone (its table
time), refitted on v3i's five-LLM seeds 55-58 (``llm_fidelity.fit_prefill_time_knee``). On those
traces a 7B's prefill slowed less beside the same others than a 0.4B's of the same prompt, which a
knee in tokens cannot tell apart.

This reads the committed job traces of the one-GPU H200 runs on SM partitions, family by family
(the fit runs, the held-out v3i seeds, and the v3g and v3h families of other engines), and prints
for both calibrations, over every graph prefill on a partition (``traced_own_decode_prefills``,
at its CUDA-graph bucket), the RMS log error of the modelled GPU time and, per LLM, the measured
GPU time over the modelled one, summed: below 1 where the model stretches that LLM's prefills too
much.

``--fit`` prints instead the fit of both sides of the shared partition on v3i's fit traces
(``llm_fidelity.fit_own_decode_prefill_knee``: the prefill's own-decode share with its knee in
prompt tokens, with the stretch beside others and its time knee; docs/fidelity-llm.md "Both
sides of the shared partition").

Usage: python benchmarks/fidelity/llm/prefill_knee.py [-o report.txt] [--fit]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: the fidelity report's readers
import llm_fidelity as lf  # noqa: E402

#: the families: a name and the glob patterns of their results folders (under benchmarks/fidelity/llm)
FAMILIES = (("v3i five LLMs, seeds 55-58 (the fit)", ("results-v3i-h200x3s5[5-8]",)),
            ("v3i five LLMs, later seeds (held out)", ("results-v3i-h200x3s59", "results-v3i-h200x3s6?", "results-v3i-h200x3s7?")),
            ("v3i pairs (held out)", ("results-v3i-h200us*",)),
            ("v3h pairs", ("results-v3h-h200us*",)),
            ("v3g five LLMs", ("results-v3g-h200x3s*",)),
            ("v3g pairs", ("results-v3g-h200us*",)),
            ("v3g triples", ("results-v3g-h200u3s*",)),
            ("v3s five LLMs, seed 16", ("results-v3s-h200x3s16",)))
#: the two calibrations compared: the knee in prompt tokens (v3g's) and in the prefill's time (v3i's)
CALIBRATIONS = (("knee in tokens (v3g)", "calibration-v3g-h200.json"),
                ("time and own knees (v3i)", "calibration-v3i-h200.json"))


def traced_runs(patterns: Sequence[str]) -> List[Tuple[str, str]]:
    """The job-traced runs (folder, run name) of the results folders matching ``patterns``."""
    runs = []
    for folder in sorted({f for p in patterns for f in glob.glob(os.path.join(HERE, p))}):
        for path in sorted(glob.glob(os.path.join(folder, "**", "jobs.csv*"), recursive=True)):
            runs.append((os.path.basename(folder), os.path.relpath(os.path.dirname(path), folder)))
    return runs


def graph_prefills(runs: Sequence[Tuple[str, str]]) -> Tuple[np.ndarray, np.ndarray]:
    """The graph prefills on SM partitions of ``runs`` (``traced_own_decode_prefills``' rows, at
    their buckets) and each one's LLM."""
    points, names = [], []
    for spec in runs:
        rows, llms = lf.traced_own_decode_prefills_by_llm(lf._find_run(spec), True)
        points.append(rows)
        names += llms
    if not points:
        return np.zeros((0, len(lf.OWN_PREFILL_COLUMNS))), np.zeros(0, dtype=str)
    table, llm = np.vstack(points), np.array(names)
    graph = table[:, lf.OWN_PREFILL_COLUMNS.index("eager")] == 0
    return table[graph], llm[graph]


def knee_scores(points: np.ndarray, llms: np.ndarray, fields: Dict[str, float]) -> Tuple[float, Dict[str, float]]:
    """The RMS log error of the modelled GPU time of ``points`` under ``fields``
    (``own_decode_prefill_model``) and, per LLM, the measured GPU time over the modelled one, summed."""
    model, measured = lf.own_decode_prefill_model(points, fields), points[:, 1]
    rms = float(np.sqrt(np.mean(np.log(model / measured) ** 2)))
    return rms, {n: float(measured[llms == n].sum() / model[llms == n].sum()) for n in sorted(set(llms))}


def report() -> List[str]:
    """The lines: per family its prefills, then per calibration its RMS log error and per-LLM sums."""
    calibrations = []
    for label, name in CALIBRATIONS:
        with open(os.path.join(HERE, name)) as f:
            calibrations.append((label, json.load(f)))
    lines = []
    for family, patterns in FAMILIES:
        runs = traced_runs(patterns)
        points, llms = graph_prefills(runs)
        if not len(points):
            continue
        lines.append(f"{family}: {len(runs)} runs, {len(points)} graph prefills on SM partitions")
        for label, fields in calibrations:
            rms, sums = knee_scores(points, llms, fields)
            per = ", ".join(f"{n} {s:.3f}" for n, s in sums.items())
            lines.append(f"  {label:<22} RMS log error {rms:.4f}; measured / modelled GPU time: {per}")
    return lines


def fit_own_knee(runs: Sequence[Tuple[str, str]] = lf.V3I_TIME_KNEE_TRACES, calibration: str = CALIBRATIONS[-1][1]
                 ) -> Tuple[Dict[str, float], float, float, int]:
    """``llm_fidelity.fit_own_decode_prefill_knee`` on ``runs`` from ``calibration`` (a file of
    this folder; v3i's H200 calibration, whose fields are that fit's)."""
    with open(os.path.join(HERE, calibration)) as f:
        return lf.fit_own_decode_prefill_knee(tuple(runs), json.load(f))


def fit_lines(runs: Sequence[Tuple[str, str]] = lf.V3I_TIME_KNEE_TRACES) -> List[str]:
    """:func:`fit_own_knee`'s fields on ``runs`` and the RMS log error with them and with the calibration's."""
    fields, rms, before, count = fit_own_knee(runs)
    return [f"{len(runs)} runs, {count} graph prefills: " + ", ".join(f"{k} {v:g}" for k, v in fields.items()),
            f"RMS log error {rms:.4f} ({CALIBRATIONS[-1][1]}: {before:.4f})"]


def main(argv: Sequence[str] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", default=None, help="also write the lines to this file")
    ap.add_argument("--fit", action="store_true", help="fit the own-decode share's knee on v3i's fit traces instead")
    args = ap.parse_args(argv)
    lines = fit_lines() if args.fit else report()
    print("\n".join(lines))
    if args.output:
        with open(args.output + ".tmp", "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(args.output + ".tmp", args.output)


if __name__ == "__main__":
    main()
