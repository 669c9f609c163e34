"""Shared helpers of the auto-parallelization tests: a V100 cluster (imported by the test modules)."""

from placement_opt import Architecture, Cluster, GPUSpec, Link

V100 = GPUSpec(name="V100-16GB", memory_bytes=16e9, usable_memory_bytes=13.96e9, peak_fp16_flops=125e12,
               memory_bandwidth=900e9)


def v100_cluster(nodes: int = 2, gpus_per_node: int = 8) -> Cluster:
    return Cluster(nodes=nodes, gpus_per_node=gpus_per_node, gpu=V100, intra_node_link=Link(150e9, 5e-6),
                   inter_node_link=Link(12.5e9, 2e-5))


BERT_1_3B = Architecture(layers=24, hidden=2048, heads=32)
BERT_2_6B = Architecture(layers=32, hidden=2560, heads=40)
BERT_6_7B = Architecture(layers=32, hidden=4096, heads=32)
