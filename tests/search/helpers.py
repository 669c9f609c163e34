"""Shared helpers of the search tests: instance paths."""

import os

from placement_opt import load_instance

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
TINY = ["tiny-3gpu-mixed", "tiny-4gpu-bert", "tiny-4gpu-mixed", "tiny-2gpu-tight", "tiny-4gpu-skewed"]


def data(name: str) -> str:
    return os.path.join(HERE, "data", f"{name}.json")


def tiny(name: str):
    return load_instance(data(name))


def repo_instance(rel: str):
    return load_instance(os.path.join(ROOT, "instances", rel))


def shortened(rel: str, duration_s: float, **workload):
    """A bundled instance with a shorter workload (and other workload fields replaced)."""
    import json

    from placement_opt import instance_from_dict
    path = os.path.join(ROOT, "instances", rel)
    with open(path) as f:
        d = json.load(f)
    d["workload"]["duration_s"] = duration_s
    d["workload"].update(workload)
    return instance_from_dict(d, base_dir=os.path.dirname(path))
