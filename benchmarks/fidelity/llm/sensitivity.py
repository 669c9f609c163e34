"""How far a run's prediction moves when one calibration field moves a little.

A metric whose prediction jumps under a change smaller than the machine's own spread cannot be
predicted closer than that jump by any model made before the run. This re-predicts each
``RESULTS/RUN`` (a results folder under benchmarks/fidelity/llm and its run) with its
generation's calibration, ``FIELD`` moved by each of ``--deltas`` (in the field's unit, added),
and prints per value the total and per-LLM throughput and the errors the last line of
``llm_fidelity.py`` takes (measured against that prediction). On the TP-4 temporal runs
(``results-v3f-gpu4s6/gpu4s6-poisson-temporal4``, ``--field decode_host_mesh_s``), 0.05 ms more
or less per step moves the simulated split of the throughput between the four LLMs by up to 30
points, where that time moves by 0.35 ms between runs of one machine (docs/fidelity-llm.md).

Usage: python benchmarks/fidelity/llm/sensitivity.py RESULTS/RUN... --field FIELD
[--deltas -2e-4,-1e-4,-5e-5,0,5e-5,1e-4,2e-4]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity

import llm_fidelity as fid  # noqa: E402

DELTAS = "-2e-4,-1e-4,-5e-5,0,5e-5,1e-4,2e-4"


def find_run(spec: str) -> dict:
    """The complete run ``spec`` = ``RESULTS/RUN`` (:func:`llm_fidelity.find_run`) of an engine
    generation in use, its inputs in the repository; ValueError saying what is missing."""
    run = fid.find_run(spec)
    folder = os.path.basename(run["folder"])
    if fid.generation_of(run["folder"]) is None:
        raise ValueError(f"{spec}: {folder} is not a folder of an engine generation in use")
    if run["summary"]["status"] != "complete":
        raise ValueError(f"{spec}: {folder} has no complete run {run['name']!r}")
    missing = [p for p in fid.run_inputs(run) if not os.path.exists(p)]
    if missing:
        raise ValueError(f"{spec}: its input {missing[0]} is missing")
    return run


def moved(run: dict, field: str, deltas: List[float]) -> List[Tuple[float, dict, dict]]:
    """``(value, simulated metrics, errors)`` of ``run`` re-predicted with its generation's
    calibration, ``field`` + each delta (at least 0; the value is the one applied)."""
    model = fid.generation_model(fid.generation_of(run["folder"]), run["folder"])
    out = []
    for d in deltas:
        value = max(0.0, model.get(field, 0.0) + d)
        sim, attain = fid.predict(run, dict(model, **{field: value}))
        out.append((value, sim, fid.errors(run["summary"]["measured"], sim, attain)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RESULTS/RUN")
    ap.add_argument("--field", required=True, help="the calibration field to move (one of llm_fidelity's fields)")
    ap.add_argument("--deltas", default=DELTAS, help=f"comma-separated changes of the field (default {DELTAS})")
    args = ap.parse_args()
    if args.field not in fid.MODEL_FIELDS:
        ap.error(f"--field {args.field}: not a calibration field (one of {', '.join(fid.MODEL_FIELDS)})")
    try:
        deltas = [float(x) for x in args.deltas.split(",")]
    except ValueError:
        deltas = []
    if not deltas or not all(math.isfinite(d) for d in deltas):
        ap.error(f"--deltas {args.deltas}: not comma-separated finite numbers")
    try:
        runs = [(spec, find_run(spec)) for spec in args.runs]
    except ValueError as e:
        ap.error(str(e))
    for spec, run in runs:
        measured = run["summary"]["measured"]
        names = list(measured["per_model"])
        print(f"== {spec}: {args.field} moved (measured: {measured['throughput_rps']:.3f} req/s; per LLM "
              + ", ".join(f"{n} {measured['per_model'][n]['throughput_rps']:.3f}" for n in names) + ")")
        for value, sim, e in moved(run, args.field, deltas):
            per = ", ".join(f"{n} {sim['per_model'][n]['throughput_rps']:.3f}" for n in names)
            print(f"{args.field}={value:.4g}: {sim['throughput_rps']:.3f} req/s ({per}); errors: throughput "
                  f"{percent(e['throughput_err'], '+')}, worst LLM {percent(e['max_llm_err'], '')}, TTFT "
                  f"{percent(e['ttft_err'], '+')}, TPOT {percent(e['tpot_err'], '+')}, attainment "
                  f"{e['slo_attainment_pp']:+.2f} pp")


def percent(x: Optional[float], sign: str) -> str:
    """A fractional error as a percentage (``-`` where there is none)."""
    return "-" if x is None else f"{100 * x:{sign}.1f}%"


if __name__ == "__main__":
    main()
