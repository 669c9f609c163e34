"""The cluster: nodes of identical GPUs joined by intra- and inter-node links.

Units in JSON: memory in GB (1e9 bytes), bandwidth in GB/s, latency in seconds,
compute in TFLOP/s. Internally everything is bytes, bytes/s, seconds and FLOP/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from placement_opt.limits import MAX_GPUS
from placement_opt.validation import as_number, check_keys, get_int, get_list, get_number, get_str
from placement_opt.errors import InputError

GB = 1e9


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model: its memory, the part of it usable for weights, and its speed."""

    name: str
    memory_bytes: float
    usable_memory_bytes: float
    peak_fp16_flops: float
    memory_bandwidth: float  # bytes/s

    def __post_init__(self) -> None:
        if self.usable_memory_bytes > self.memory_bytes:
            raise InputError("usable_memory_gb exceeds memory_gb", "usable_memory_gb")

    @classmethod
    def from_dict(cls, d: dict, field: str = "cluster.gpu") -> "GPUSpec":
        check_keys(d, field, ["name", "memory_gb"],
                   ["usable_memory_gb", "peak_fp16_tflops", "memory_bandwidth_gbps"])
        memory = get_number(d, "memory_gb", field, exclusive_minimum=0) * GB
        usable = get_number(d, "usable_memory_gb", field, memory / GB, exclusive_minimum=0) * GB
        if usable > memory:
            raise InputError("exceeds memory_gb", f"{field}.usable_memory_gb")
        return cls(
            name=get_str(d, "name", field),
            memory_bytes=memory,
            usable_memory_bytes=usable,
            peak_fp16_flops=get_number(d, "peak_fp16_tflops", field, 125.0, exclusive_minimum=0) * 1e12,
            memory_bandwidth=get_number(d, "memory_bandwidth_gbps", field, 900.0, exclusive_minimum=0) * GB,
        )

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "memory_gb": self.memory_bytes / GB,
            "usable_memory_gb": self.usable_memory_bytes / GB,
            "peak_fp16_tflops": self.peak_fp16_flops / 1e12,
            "memory_bandwidth_gbps": self.memory_bandwidth / GB,
        }


@dataclass(frozen=True)
class Link:
    """A link class of the alpha-beta model: time(B bytes) = latency + B / bandwidth."""

    bandwidth: float  # bytes/s
    latency_s: float

    @classmethod
    def from_dict(cls, d: dict, field: str, default_gbps: float, default_latency: float) -> "Link":
        check_keys(d, field, [], ["bandwidth_gbps", "latency_s"])
        return cls(
            bandwidth=get_number(d, "bandwidth_gbps", field, default_gbps, exclusive_minimum=0) * GB,
            latency_s=get_number(d, "latency_s", field, default_latency, minimum=0),
        )

    def to_dict(self) -> dict:
        return {"bandwidth_gbps": self.bandwidth / GB, "latency_s": self.latency_s}


@dataclass(frozen=True)
class Cluster:
    """``nodes`` x ``gpus_per_node`` GPUs of one model; device ids run node-major from 0.

    ``latency_scale`` (optional, one entry per device) multiplies every profiled latency of a
    stage on that device: cards of one model can differ by 10% (clocks, cooling), and a profile
    measured on one of them under-predicts the slower ones. A stage runs at the pace of its
    slowest device. Empty means every device runs as profiled.
    """

    nodes: int
    gpus_per_node: int
    gpu: GPUSpec
    intra_node_link: Link
    inter_node_link: Link
    latency_scale: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise InputError("a cluster needs at least one node with one GPU", "cluster")
        if self.latency_scale and len(self.latency_scale) != self.n_gpus:
            raise InputError(f"expected {self.n_gpus} entries, one per device", "cluster.latency_scale")

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, device: int) -> int:
        return device // self.gpus_per_node

    def link_between(self, devices: Iterable[int]) -> Link:
        """The slowest link class that a group of devices communicates over."""
        nodes = {self.node_of(d) for d in devices}
        return self.intra_node_link if len(nodes) <= 1 else self.inter_node_link

    def stage_scale(self, devices: Iterable[int]) -> float:
        """Latency multiplier of a stage on ``devices``: its slowest device's scale (1 if none given)."""
        if not self.latency_scale:
            return 1.0
        return max((self.latency_scale[d] for d in devices), default=1.0)

    @classmethod
    def from_dict(cls, d: dict, field: str = "cluster") -> "Cluster":
        check_keys(d, field, ["nodes", "gpus_per_node", "gpu"],
                   ["intra_node_link", "inter_node_link", "latency_scale"])
        scales = get_list(d, "latency_scale", field) if "latency_scale" in d else []
        nodes = get_int(d, "nodes", field, minimum=1, maximum=100000)
        gpus_per_node = get_int(d, "gpus_per_node", field, minimum=1, maximum=1024)
        if nodes * gpus_per_node > MAX_GPUS:
            raise InputError(f"nodes x gpus_per_node = {nodes * gpus_per_node} GPUs, over the limit of {MAX_GPUS}",
                             field)
        return cls(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            gpu=GPUSpec.from_dict(d["gpu"], f"{field}.gpu"),
            intra_node_link=Link.from_dict(d.get("intra_node_link", {}), f"{field}.intra_node_link", 150.0, 5e-6),
            inter_node_link=Link.from_dict(d.get("inter_node_link", {}), f"{field}.inter_node_link", 12.5, 2e-5),
            latency_scale=tuple(as_number(x, f"{field}.latency_scale", minimum=0.1, maximum=10.0) for x in scales),
        )

    def to_dict(self) -> dict:
        return {
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "gpu": self.gpu.to_dict(),
            "intra_node_link": self.intra_node_link.to_dict(),
            "inter_node_link": self.inter_node_link.to_dict(),
            **({"latency_scale": list(self.latency_scale)} if self.latency_scale else {}),
        }
