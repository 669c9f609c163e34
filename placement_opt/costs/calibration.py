"""The cost model's fitted parameters per GPU, read from the shipped ``params.json``.

The fit that writes ``params.json`` is offline (:mod:`placement_opt.offline.fit_calibration`,
``python -m placement_opt.offline.fit_calibration``); docs/parallel.md describes it.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Dict

from placement_opt.cluster import GPUSpec, Link
from placement_opt.costs.costmodel import FAMILIES, Calibration, FamilyParams
from placement_opt.io import read_json

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "calibration")
PARAMS_FILE = os.path.join(DATA_DIR, "params.json")


@lru_cache(maxsize=None)
def _params() -> dict:
    return read_json(PARAMS_FILE)


def calibration_for(gpu: GPUSpec) -> Calibration:
    """The fitted parameters whose GPU key occurs in ``gpu.name`` (else the default key)."""
    params = _params()
    key = next((k for k in params["gpus"] if k.lower() in gpu.name.lower()), params["default"])
    return _calibration(key)


@lru_cache(maxsize=None)
def _calibration(key: str) -> Calibration:
    entry = _params()["gpus"][key]
    fams = tuple((name, FamilyParams(**entry["families"][name])) for name in FAMILIES)
    return Calibration(gpu_key=key, families=fams, comm_eff=float(entry.get("comm_eff", 1.0)))


def measured_links() -> Dict[str, Link]:
    """Alpha-beta links fitted to the DGX H100 collectives (intra: NVLink, inter: one NIC)."""
    links = _params()["h100_links"]
    return {k: Link(bandwidth=v["bandwidth_gbps"] * 1e9, latency_s=v["latency_s"]) for k, v in links.items()}
