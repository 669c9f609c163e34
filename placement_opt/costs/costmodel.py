"""Analytic cost model: operator time on a GPU and collective time on a link.

Operator time is a roofline with a fitted efficiency per operator family plus a
launch overhead::

    t = max(flops / (peak x compute_eff), bytes / (bandwidth x memory_eff)) + overhead

Collectives follow the alpha-beta model of REFERENCE.md section 2 (n devices, B bytes)::

    all-reduce      alpha + beta x 2(n-1)/n x B
    all-gather      alpha + beta x (n-1)/n x B     (reduce-scatter the same)
    all-to-all      alpha + beta x (n-1)/n^2 x B
    send/recv       alpha + beta x B

with alpha the link latency and beta = 1 / (link bandwidth x comm_eff). A group wider
than one node (a 2D mesh) runs them hierarchically: reduce-scatter inside each node, the
collective across nodes on 1/g of the data, all-gather inside each node.

The per-family efficiencies and overheads come from :mod:`.calibration` (fitted to the
measured H100 and V100 data shipped in ``placement_opt/data/calibration``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from placement_opt.cluster import Cluster, GPUSpec, Link

#: Operator families that carry their own fitted efficiency and overhead.
FAMILIES = ("matmul", "attention", "norm", "elementwise", "embedding")


@dataclass(frozen=True)
class FamilyParams:
    """Fitted roofline terms of one operator family."""

    compute_eff: float  # achieved fraction of peak FLOP/s
    memory_eff: float  # achieved fraction of memory bandwidth
    overhead_s: float  # launch and fixed cost per operator call


@dataclass(frozen=True)
class Calibration:
    """Fitted cost-model parameters for one GPU class (matched by GPU name)."""

    gpu_key: str
    families: Tuple[Tuple[str, FamilyParams], ...]
    comm_eff: float = 1.0  # achieved fraction of the cluster's link bandwidth

    def family(self, name: str) -> FamilyParams:
        for key, params in self.families:
            if key == name:
                return params
        raise KeyError(name)


def op_time(flops: float, nbytes: float, params: FamilyParams, gpu: GPUSpec) -> float:
    """Roofline time of one operator call on one GPU (seconds)."""
    compute = flops / (gpu.peak_fp16_flops * params.compute_eff)
    memory = nbytes / (gpu.memory_bandwidth * params.memory_eff)
    return max(compute, memory) + params.overhead_s


def flat_collective_time(kind: str, nbytes: float, n: int, link: Link, comm_eff: float = 1.0) -> float:
    """Alpha-beta time of a collective over ``n`` devices joined by one link class."""
    if kind == "send-recv":
        return link.latency_s + nbytes / (link.bandwidth * comm_eff)
    if n <= 1 or nbytes <= 0:
        return 0.0
    beta = 1.0 / (link.bandwidth * comm_eff)
    if kind == "all-reduce":
        factor = 2.0 * (n - 1) / n
    elif kind in ("all-gather", "reduce-scatter"):
        factor = (n - 1) / n
    elif kind == "all-to-all":
        factor = (n - 1) / (n * n)
    else:
        raise ValueError(f"unknown collective {kind!r}")
    return link.latency_s + beta * factor * nbytes


@dataclass(frozen=True)
class CommModel:
    """Collective costs on a group of ``n`` devices of a cluster (1D in a node, 2D across nodes)."""

    n: int
    gpus_per_node: int
    intra: Link
    inter: Link
    comm_eff: float = 1.0

    @classmethod
    def for_group(cls, cluster: Cluster, n: int, calibration: Calibration) -> "CommModel":
        return cls(n=n, gpus_per_node=cluster.gpus_per_node, intra=cluster.intra_node_link,
                   inter=cluster.inter_node_link, comm_eff=calibration.comm_eff)

    def collective(self, kind: str, nbytes: float) -> float:
        """Time of ``kind`` over the whole group; ``nbytes`` is the full (unsharded) tensor size."""
        n, g = self.n, self.gpus_per_node
        if n <= 1:
            return 0.0
        if n <= g:
            return flat_collective_time(kind, nbytes, n, self.intra, self.comm_eff)
        nodes = -(-n // g)
        inner = min(g, n)
        if kind == "all-reduce":
            return (flat_collective_time("reduce-scatter", nbytes, inner, self.intra, self.comm_eff)
                    + flat_collective_time("all-reduce", nbytes / inner, nodes, self.inter, self.comm_eff)
                    + flat_collective_time("all-gather", nbytes, inner, self.intra, self.comm_eff))
        if kind in ("all-gather", "reduce-scatter"):
            return (flat_collective_time(kind, nbytes / nodes, inner, self.intra, self.comm_eff)
                    + flat_collective_time(kind, nbytes, nodes, self.inter, self.comm_eff))
        # all-to-all across nodes is bounded by the inter-node link
        return flat_collective_time(kind, nbytes, n, self.inter, self.comm_eff)

    def send_recv(self, nbytes: float, cross_node: bool) -> float:
        link = self.inter if cross_node else self.intra
        return flat_collective_time("send-recv", nbytes, 2, link, self.comm_eff)
