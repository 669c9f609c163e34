"""The partition prefill stretch (``llm.prefill_partition_stretch``, ``MeshLLMs.prefill_stretch``;
docs/fidelity-llm.md, "What the partition prefill host time stands for"): a hand-timed mesh."""

from __future__ import annotations

import numpy as np
import pytest

from placement_opt.simulate.llm import _POLICY_CODE
from placement_opt.simulate.meshsim import LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs, simulate_mesh


def _first_tokens(stretch: float, graph_tokens: int = 1024) -> np.ndarray:
    """First-token times on a mesh of two LLMs at SM shares 0.5 (every prefill 0.1 s in the
    table, no host model) of LLM 0's request of 100 tokens (a CUDA-graph prefill) at t = 0 and
    LLM 1's of 2000 tokens (eager when ``graph_tokens`` is 1024) at t = 1."""
    requests = MeshRequests(arrival=np.array([0.0, 1.0]), llm=np.array([0, 1], dtype=np.int64),
                            prompt=np.array([100, 2000], dtype=np.int64), output=np.array([1, 1], dtype=np.int64))
    llms = MeshLLMs(share=np.full(2, 0.5), kv_kib=np.ones(2, dtype=np.int64), rate=np.ones(2),
                    prefill_stretch=np.full(2, stretch))
    tables = LatencyTables(prefill=np.full((2, 5, 2), 0.1), decode=np.full((2, 5, 2), 0.01),
                           lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=_POLICY_CODE["fcfs"], pool=10000, block=16, max_batch=4, token_budget=4096, period=5.0,
                       frac=0.5, horizon=100.0, graph_tokens=graph_tokens)
    out = mesh_outputs(2, 2, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return out.first


def test_a_graph_prefill_on_a_partition_lasts_its_table_time_times_the_stretch():
    """Stretch 1.4: the graph prefill ends at 0.14, the eager one at its table time (1.1);
    without the eager model every prefill is stretched (1.14); off (0) both take 0.1 s."""
    assert _first_tokens(1.4) == pytest.approx([0.14, 1.1])
    assert _first_tokens(1.4, graph_tokens=0) == pytest.approx([0.14, 1.14])
    assert _first_tokens(0.0) == pytest.approx([0.1, 1.1])
