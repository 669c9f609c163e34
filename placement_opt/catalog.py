"""The GPUs and models placeopt ships, and the starter instance ``placeopt init`` builds from them.

``data/gpus.json`` holds datasheet figures of a few GPUs (and the links of the systems they
come in); ``data/models.json`` names model architectures: AlpaServe's BERT and MoE shapes and
public models whose HuggingFace ``config.json`` ships in ``data/hf_configs/``. Both cite their
sources. :func:`starter_instance` turns a choice of them into an instance document that loads
as it is and says in its ``description`` what each section holds, for the user to edit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Dict, List, Sequence, Tuple

from placement_opt.cluster import Cluster
from placement_opt.errors import InputError
from placement_opt.io import read_json
from placement_opt.model import Architecture

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
#: defaults of the starter instance's workload: length of the arrival window, SLO scales of
#: DNN and LLM models (the AlpaServe and MuxServe instances' 5 and 8), ShareGPT request lengths
DURATION_S = 60.0
SLO_SCALE = {"dnn": 5.0, "llm": 8.0}
SHAREGPT_LENGTHS = {"distribution": "exponential", "prompt_tokens": 161.0, "output_tokens": 338.0,
                    "max_prompt_tokens": 2048, "max_output_tokens": 2048}
SOLVER = {"dnn": "alpaserve", "llm": "muxserve"}
OBJECTIVE = {"dnn": "slo_attainment", "llm": "throughput"}


@dataclass(frozen=True)
class CatalogModel:
    """A model of the catalog: its architecture, the families it may be served as, its source."""

    name: str
    architecture: Architecture
    families: Tuple[str, ...]
    source: str


@lru_cache(maxsize=None)
def gpu_catalog() -> Dict[str, Dict[str, Any]]:
    """GPU key (``h100``, ...) -> its entry of ``data/gpus.json`` (cluster fields and source)."""
    return read_json(os.path.join(DATA_DIR, "gpus.json"))["gpus"]


@lru_cache(maxsize=None)
def model_catalog() -> Dict[str, CatalogModel]:
    """Model name -> :class:`CatalogModel`, from ``data/models.json`` (HF configs converted)."""
    entries = read_json(os.path.join(DATA_DIR, "models.json"))["models"]
    return {name: CatalogModel(name=name, families=tuple(e["families"]), source=e["source"],
                               architecture=Architecture.from_dict(e["architecture"], f"models.{name}", DATA_DIR))
            for name, e in entries.items()}


def parse_model_list(text: str, field: str = "--models") -> List[Tuple[str, int]]:
    """``"llama-7b:3,bert-1.3b"`` -> ``[("llama-7b", 3), ("bert-1.3b", 1)]``, names checked."""
    known = model_catalog()
    out: List[Tuple[str, int]] = []
    for item in text.split(","):
        name, _, count_text = item.strip().partition(":")
        if name not in known:
            raise InputError(f"unknown model {name!r} (known: {', '.join(known)})", field)
        if name in (n for n, _ in out):
            raise InputError(f"model {name!r} is listed twice (give it one count)", field)
        out.append((name, parse_count(count_text or "1", f"{field} {name}", maximum=100000)))
    return out


def parse_count(text: str, field: str, maximum: int) -> int:
    """A count typed on the command line: an integer from 1 to ``maximum``."""
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected a whole number, got {text!r}", field) from None
    if not 1 <= value <= maximum:
        raise InputError(f"must be between 1 and {maximum}, got {value}", field)
    return value


def starter_instance(name: str, gpu: str, gpus: int, models: Sequence[Tuple[str, int]], rate: float,
                     llm: bool) -> Dict[str, Any]:
    """An instance document: ``gpus`` GPUs of catalog entry ``gpu``, the catalog ``models``
    (name, count) served as LLMs (``llm``) or DNNs, Poisson arrivals of ``rate`` req/s in total
    split equally; the solver and objective of that family; ``description`` explains it."""
    family = "llm" if llm else "dnn"
    cluster = _starter_cluster(gpu, gpus)
    entries = [_model_entry(model, count, family) for model, count in models]
    workload: Dict[str, Any] = {"duration_s": DURATION_S, "arrival": {"process": "poisson", "rate": rate},
                                "rate_split": {"kind": "equal"}, "slo": {"scale": SLO_SCALE[family]}}
    if llm:
        workload["lengths"] = dict(SHAREGPT_LENGTHS)
    return {"name": name, "description": _description(cluster, models, family, rate),
            "cluster": cluster, "models": entries, "workload": workload, "objective": OBJECTIVE[family],
            "solver": {"name": SOLVER[family]}, "seed": 0}


def _starter_cluster(gpu: str, gpus: int) -> Dict[str, Any]:
    """The ``cluster`` section: full nodes of the catalog's node size (or one smaller node)."""
    catalog = gpu_catalog()
    if gpu.lower() not in catalog:
        raise InputError(f"unknown GPU {gpu!r} (known: {', '.join(catalog)})", "--gpu")
    entry = catalog[gpu.lower()]
    if gpus < 1:
        raise InputError(f"must be at least 1, got {gpus}", "--gpus")
    per_node = min(gpus, entry["gpus_per_node"])
    if gpus % per_node:
        raise InputError(f"{gpus} GPUs do not fill nodes of {per_node}: give at most {per_node} "
                         f"or a multiple of {per_node}", "--gpus")
    cluster = {"nodes": gpus // per_node, "gpus_per_node": per_node, "gpu": dict(entry["gpu"]),
               "intra_node_link": dict(entry["intra_node_link"]), "inter_node_link": dict(entry["inter_node_link"])}
    Cluster.from_dict(cluster)  # the shipped figures must make a valid cluster
    return cluster


def _model_entry(model: str, count: int, family: str) -> Dict[str, Any]:
    """A ``models[]`` entry of a catalog model; its architecture names the model and its source."""
    entry = model_catalog()[model]
    if family not in entry.families:
        raise InputError(f"{model} cannot be served as {family} (only as {' or '.join(entry.families)}: "
                         "it is not a decoder)", "--models")
    out: Dict[str, Any] = {"name": model, "count": count}
    if family == "llm":
        out["family"] = "llm"
    out["architecture"] = {"name": model, **entry.architecture.to_dict(), "source": entry.source}
    return out


def _description(cluster: Dict[str, Any], models: Sequence[Tuple[str, int]], family: str, rate: float) -> str:
    """What the starter instance holds and where to edit it (JSON has no comments)."""
    n_gpus = cluster["nodes"] * cluster["gpus_per_node"]
    nodes = "one node" if cluster["nodes"] == 1 else f"{cluster['nodes']} nodes"
    listed = ", ".join(f"{count} x {name}" for name, count in models)
    served = "LLMs (MuxServe-style meshes, roofline costs)" if family == "llm" else "DNNs (AlpaServe-style groups)"
    lengths = " with ShareGPT-like request lengths (lengths)" if family == "llm" else ""
    return (f"Starter instance written by placeopt init: {listed} served as {served} on {n_gpus} "
            f"{cluster['gpu']['name']} GPUs ({nodes} of {cluster['gpus_per_node']}). "
            "Edit it: cluster holds the GPU's datasheet figures (usable_memory_gb is what weights may use) "
            "and the links within and between nodes; each model's architecture names its source, and "
            f"count makes identical copies; workload sends Poisson arrivals of {rate:g} requests/s in total, "
            f"split equally over the models, for {DURATION_S:g} s{lengths}, with an SLO of "
            f"{SLO_SCALE[family]:g} x each model's reference latency (slo.scale); objective and solver are "
            f"{OBJECTIVE[family]} and {SOLVER[family]} (placeopt solvers lists the others). "
            "Field reference: docs/formats.md.")
