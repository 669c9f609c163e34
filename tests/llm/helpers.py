"""Shared fixtures of the LLM tests: instance and data paths, the benchmark scripts they test,
and a hand-timed one-request mesh for the kernel's duration terms."""

import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Tuple

import numpy as np

from placement_opt.simulate.meshsim import (FCFS, LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs,
                                            simulate_mesh)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MUX = os.path.join(ROOT, "instances", "muxserve")
SMALL = os.path.join(MUX, "small-4llm-4gpu.json")
ABLATION = os.path.join(MUX, "adbs-ablation.json")
TABLES = os.path.join(ROOT, "placement_opt", "data", "muxserve")


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module (registered in ``sys.modules``: its
    dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def fidelity_script(name: str) -> ModuleType:
    """The script ``benchmarks/fidelity/llm/<name>.py`` as a module, loaded after
    ``benchmarks/llm_fidelity.py`` (:func:`load_benchmark`), which it imports."""
    load_benchmark("llm_fidelity")
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", "fidelity", "llm", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def h200_calibration() -> dict:
    """The newest H200 calibration, ``benchmarks/fidelity/llm/calibration-v3i-h200.json``."""
    with open(os.path.join(ROOT, "benchmarks", "fidelity", "llm", "calibration-v3i-h200.json")) as f:
        return json.load(f)


def committed_predictions(name: str) -> dict:
    """The predictions committed before GPU runs, ``benchmarks/fidelity/llm/predictions/<name>``
    (one JSON line per run, ``llm_fidelity.py --predict``), by run."""
    with open(os.path.join(ROOT, "benchmarks", "fidelity", "llm", "predictions", name)) as f:
        return {d["run"]: d for d in map(json.loads, f)}


def beside_settings(**fields) -> MeshSettings:
    """Kernel settings with the stretch beside others on (1000 GB/s, 50 requests, a knee of 500
    tokens) and ``fields`` beside, for the prefill-stretch formulas' tests."""
    return MeshSettings(policy=0, pool=1, block=16, max_batch=1, token_budget=1, period=1.0, frac=0.5, horizon=1.0,
                        prefill_beside_gbps=1000.0, prefill_beside_requests=50.0, prefill_beside_knee=500.0, **fields)


def lone_request(prompt: int, output: int, llm=None, settings=None) -> Tuple[float, float]:
    """(first token, finish) of one request arriving at 0 on a one-LLM mesh (FCFS, blocks of 16
    tokens): prefill 0.1 s and decode steps 0.01 s in the table; ``llm`` sets ``MeshLLMs``'
    per-LLM arrays (values of the one LLM), ``settings`` more ``MeshSettings`` fields."""
    requests = MeshRequests(arrival=np.zeros(1), llm=np.zeros(1, dtype=np.int64),
                            prompt=np.array([prompt], dtype=np.int64), output=np.array([output], dtype=np.int64))
    llms = MeshLLMs(share=np.ones(1), kv_kib=np.ones(1, dtype=np.int64), rate=np.ones(1),
                    **{k: np.full(1, v, dtype=np.float64) for k, v in (llm or {}).items()})
    tables = LatencyTables(prefill=np.full((1, 5, 2), 0.1), decode=np.full((1, 5, 2), 0.01),
                           lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=FCFS, pool=100000, block=16, max_batch=4, token_budget=4096, period=5.0, frac=0.5,
                       horizon=100.0, **(settings or {}))
    out = mesh_outputs(1, 1, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return float(out.first[0]), float(out.finish[0])
