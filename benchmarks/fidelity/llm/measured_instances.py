"""Instances of the LLM fidelity run that use the measured cost tables (run after profiling).

For every instance of ``instances/fidelity-llm/`` writes ``instances/fidelity-llm/measured/``
a copy whose models reference ``benchmarks/fidelity/llm/tables/<model>.json`` (written by
``placeopt profile --llm`` in ``run_gpu.sh``), and whose cluster GPU is the profiled one
(name from the tables). The simulator's predictions of the fidelity runs use these tables,
and the host and contention parameters of the newest engine generation's calibration file (the
last of ``benchmarks/llm_fidelity.py``'s ``GENERATIONS``, written by its ``--calibrate``; for tables
of a GPU the generation has a calibration of its own for, ``Generation.gpus``, that one) when it
exists, in their ``llm`` section: what the executor's own prediction and its host probe (which
measures the decode host time beyond the instance's model of the step) then use. A copy records
what its runs ran with: write a set's copies once, before its runs (running this again on a
committed set rewrites them with the calibration of the day).

Usage: python benchmarks/fidelity/llm/measured_instances.py [TABLES_DIR [INSTANCES_DIR]]
(default ``benchmarks/fidelity/llm/tables``; ``run_gpu.sh`` passes its ``$TABLES``;
INSTANCES_DIR defaults to ``instances/fidelity-llm``, the copies go to its ``measured/``:
``run_gpu.sh``'s ``measured2`` phase passes the 2-GPU set, ``instances/fidelity-llm/tp2``).
"""

from __future__ import annotations

import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SRC = os.path.join(ROOT, "instances", "fidelity-llm")
TABLES = os.path.join(HERE, "tables")
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # benchmarks/: llm_fidelity
import llm_fidelity as fid  # noqa: E402

NEWEST = fid.GENERATIONS[list(fid.GENERATIONS)[-1]]


def calibration_path(gpu: str = "") -> str:
    """The newest engine generation's calibration file for cost tables labelled ``gpu``
    (``llm_fidelity.calibration_for_gpu``: that GPU's where it has one, else its own)."""
    return os.path.join(HERE, fid.calibration_for_gpu(NEWEST, gpu))


def calibrated_llm_fields(gpu: str = "") -> dict:
    """The simulator's ``llm`` parameters fitted on the GPU runs of the newest engine generation:
    every field of its calibration file for ``gpu``'s tables (:func:`calibration_path`) but its
    ``fit`` record (none without a fit; a field it lacks stays the instance's). The calibration
    file is the one list of calibrated fields."""
    path = calibration_path(gpu)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        cal = json.load(f)
    return {k: v for k, v in cal.items() if k != "fit"}


SPECS = {"H100": {"peak_fp16_tflops": 989, "memory_bandwidth_gbps": 3350},
         "H200": {"peak_fp16_tflops": 989, "memory_bandwidth_gbps": 4800}}


def write_measured(tables_dir: str, src: str = SRC) -> list:
    """The measured copy of every instance of folder ``src`` into ``src/measured/`` (tables from
    ``tables_dir``, the newest calibration for their GPU); returns the copies' paths."""
    dst = os.path.join(src, "measured")
    os.makedirs(dst, exist_ok=True)
    written = []
    for path in sorted(glob.glob(os.path.join(src, "*.json"))):
        if path.endswith(".placement.json"):
            continue
        with open(path) as f:
            inst = json.load(f)
        tables = {}
        for m in inst["models"]:
            table = os.path.join(tables_dir, f"{m['name']}.json")
            if not os.path.exists(table):
                raise SystemExit(f"{table}: missing; run the profile phase first")
            tables[m["name"]] = os.path.relpath(table, dst)
            m["cost_table"] = m["name"]
            with open(table) as f:
                gpu = json.load(f)["gpu"]
        inst["cost_tables"] = tables
        inst.setdefault("llm", {}).update(calibrated_llm_fields(gpu))
        inst["cluster"]["gpu"]["name"] = gpu
        inst["cluster"]["gpu"].update(next((v for k, v in SPECS.items() if k in gpu), {}))
        if "trace" in inst["workload"]:
            inst["workload"]["trace"] = os.path.relpath(os.path.join(src, inst["workload"]["trace"]), dst)
        inst["description"] += " Latencies: the cost tables measured on " + gpu + "."
        out = os.path.join(dst, os.path.basename(path))
        with open(out + ".tmp", "w") as f:
            json.dump(inst, f, indent=1)
            f.write("\n")
        os.replace(out + ".tmp", out)
        print("wrote", os.path.relpath(out, ROOT))
        written.append(out)
    return written


def main() -> None:
    tables_dir = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else TABLES
    src = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else SRC
    write_measured(tables_dir, src)


if __name__ == "__main__":
    main()
