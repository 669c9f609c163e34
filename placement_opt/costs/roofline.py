"""An analytic cost table for LLMs that have no measured one (roofline estimate).

The auto-parallelization cost model (:mod:`placement_opt.parallel`) is DNN-oriented; an LLM
without a measured table gets this small roofline instead. Each prefill or decode step
takes ``max(compute time, memory time) + tensor-parallel all-reduces + a per-layer launch
overhead``:

* compute: ``2 x params x tokens + 4 x layers x hidden x tokens x context`` FLOPs (the
  attention term), at ``COMPUTE_EFFICIENCY`` of the GPU's fp16 peak times the SM share;
* memory: weights once per step (plus the KV cache read while decoding) at
  ``BANDWIDTH_EFFICIENCY`` of the memory bandwidth times ``share ** BANDWIDTH_SHARE_EXPONENT``
  (a few SMs already draw most of the bandwidth: on MuxServe's A100 table 30% of the SMs
  decode LLaMA-7B at ~70% of the full-GPU speed, and 0.3 ** 0.3 = 0.70);
* two all-reduces of the activations per layer over the intra-node link (alpha-beta), each
  with a fixed ``ALLREDUCE_LATENCY_S`` (the measured tables show ~150 us per all-reduce at
  small batches: LLaMA-7B decodes no faster on 8 GPUs than on one).

The constants were fitted by hand to MuxServe's A100 measurements; ``docs/llm.md`` reports
the error of this estimate against the measured tables.
"""

from __future__ import annotations

import numpy as np

from placement_opt.cluster import Cluster
from placement_opt.model import Architecture
from placement_opt.costs.costtable import CostTable, TPTable

COMPUTE_EFFICIENCY = 0.55
BANDWIDTH_EFFICIENCY = 0.75
BANDWIDTH_SHARE_EXPONENT = 0.3
LAYER_OVERHEAD_S = 45e-6
ALLREDUCE_LATENCY_S = 150e-6
SM_GRID = np.round(np.arange(0.3, 1.0001, 0.1), 2)
BATCH_GRID = 2.0 ** np.arange(0, 11)
LEN_GRID = 2.0 ** np.arange(5, 12)


def step_time(arch: Architecture, cluster: Cluster, tp: int, share: float, batch: np.ndarray,
              tokens_per_request: np.ndarray, context: np.ndarray, decode: bool) -> np.ndarray:
    """Seconds of one prefill (``decode=False``) or decoding step, elementwise over arrays."""
    gpu = cluster.gpu
    params = arch.param_count()
    tokens = batch * tokens_per_request
    flops = 2.0 * params * tokens + 4.0 * arch.layers * arch.hidden * tokens * context
    t_compute = flops / (tp * gpu.peak_fp16_flops * COMPUTE_EFFICIENCY * share)
    bytes_moved = arch.weight_bytes() + (batch * context * arch.kv_bytes_per_token() if decode else 0.0)
    bandwidth = gpu.memory_bandwidth * BANDWIDTH_EFFICIENCY * share ** BANDWIDTH_SHARE_EXPONENT
    t_memory = bytes_moved / (tp * bandwidth)
    comm = 0.0
    if tp > 1:
        link = cluster.intra_node_link
        msg = tokens * arch.hidden * arch.dtype_bytes
        comm = 2 * arch.layers * (ALLREDUCE_LATENCY_S + link.latency_s + 2.0 * (tp - 1) / tp * msg / link.bandwidth)
    return np.maximum(t_compute, t_memory) + comm + arch.layers * LAYER_OVERHEAD_S


def roofline_cost_table(name: str, arch: Architecture, cluster: Cluster,
                        tps: tuple = (1, 2, 4, 8)) -> CostTable:
    """A :class:`CostTable` on a fixed grid from the roofline above (TP degrees within a node)."""
    b = BATCH_GRID[:, None]
    s = LEN_GRID[None, :]
    tables = {}
    for tp in tps:
        if tp > cluster.gpus_per_node:
            continue
        pre = np.stack([step_time(arch, cluster, tp, sh, b, s, s / 2.0, False) for sh in SM_GRID])
        dec = np.stack([step_time(arch, cluster, tp, sh, b, np.ones_like(s), s, True) for sh in SM_GRID])
        tables[tp] = TPTable(tp=tp, sm_share=SM_GRID.copy(), batch=BATCH_GRID.copy(), seq_len=LEN_GRID.copy(),
                             prefill_s=pre, decode_s=dec, measured=np.zeros(pre.shape + (2,), dtype=bool))
    if not tables:
        tables[1] = roofline_cost_table(name, arch, cluster, (1,)).tables[1]
    return CostTable(name=name, model=name, tables=tables, gpu=cluster.gpu.name,
                     source="roofline estimate (placement_opt.costs.roofline)")
