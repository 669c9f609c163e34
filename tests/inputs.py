"""Valid documents and a hypothesis strategy that mutates them, shared by the input tests
(tests/test_bad_input.py, tests/test_schema.py)."""

from __future__ import annotations

import copy
import math

from hypothesis import strategies as st

#: The AlpaServe section 3.1 instance (two 6.7B models on two 16 GB GPUs), 60 s of Poisson arrivals;
#: max_tp 1 leaves tensor-parallel configurations unprofiled (one of the bad placements uses tp 2).
GOOD = {
    "name": "two-models",
    "cluster": {"nodes": 1, "gpus_per_node": 2,
                "gpu": {"name": "V100-16GB", "memory_gb": 16, "usable_memory_gb": 13.96}},
    "profiles": {"bert-6.7b": {"derive": {"latency_s": 0.4, "weight_gb": 13.4, "max_gpus": 2, "max_tp": 1,
                                        "layers": 32}}},
    "models": [{"name": "model-a", "profile": "bert-6.7b"}, {"name": "model-b", "profile": "bert-6.7b"}],
    "workload": {"duration_s": 60, "arrival": {"process": "poisson", "rate": 3.0}, "slo": {"scale": 5}},
    "solver": {"name": "round-robin"},
    "seed": 0,
}
GOOD_PLACEMENT = {"groups": [{"devices": [0], "pp": 1, "tp": 1, "models": ["model-a"]},
                             {"devices": [1], "pp": 1, "tp": 1, "models": ["model-b"]}]}


json_values = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([0, 10**6, -(10**9), 2**64]),
    st.sampled_from([0.0, -1.5, 0.5, 1e-300, 1e9, 1e308, math.nan, math.inf, -math.inf]),
    st.sampled_from(["", "x", "model-a", "bert-6.7b", "poisson", "gamma", "mmpp", "NaN", "../missing.json"]),
    st.just([]), st.just({}), st.lists(st.integers(0, 3), max_size=3),
)


def _paths(value, prefix=()):
    """Every (path, container) position in a JSON tree."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_documents(draw, good):
    data = copy.deepcopy(good)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif action == "add" and isinstance(parent, dict):
            key = draw(st.sampled_from(["extra", "count", "cv", "rates", "trace", "batching", "windows", "sm_share"]))
            parent[key] = draw(json_values)
        else:
            parent[path[-1]] = draw(json_values)
    return data
