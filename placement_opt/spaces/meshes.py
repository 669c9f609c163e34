"""Mesh groups: ways to split every node's GPUs into power-of-two meshes (MuxServe Alg. 1).

A node of 8 GPUs has the ten splits the MuxServe reference lists ([8], [4,4], [4,2,2],
[4,2,1,1], [4,1,1,1,1], [2,2,2,2], [2,2,2,1,1], [2,2,1,1,1,1], [2,1x6], [1x8]); other node
sizes get every partition into powers of two. A cluster's mesh group picks one split per
node (as a multiset: nodes are identical), and meshes never span nodes (intra-op
parallelism stays inside a node, as the paper prunes).
"""

from __future__ import annotations

from itertools import combinations_with_replacement
from typing import Iterator, List, Sequence, Tuple


def node_splits(gpus: int) -> List[Tuple[int, ...]]:
    """Partitions of ``gpus`` into powers of two, largest part first, in decreasing order."""
    out: List[Tuple[int, ...]] = []

    def rec(left: int, cap: int, parts: List[int]) -> None:
        if left == 0:
            out.append(tuple(parts))
            return
        p = cap
        while p >= 1:
            if p <= left:
                rec(left - p, p, parts + [p])
            p //= 2

    top = 1
    while top * 2 <= gpus:
        top *= 2
    rec(gpus, top, [])
    return out


def mesh_groups(nodes: int, gpus_per_node: int, max_meshes: int | None = None,
                min_largest: int = 1) -> List[Tuple[Tuple[int, ...], ...]]:
    """Every multiset of per-node splits (one per node), pruned (see :func:`iter_mesh_groups`)."""
    return list(iter_mesh_groups(nodes, gpus_per_node, max_meshes, min_largest))


def iter_mesh_groups(nodes: int, gpus_per_node: int, max_meshes: int | None = None,
                     min_largest: int = 1) -> Iterator[Tuple[Tuple[int, ...], ...]]:
    """Every multiset of per-node splits (one per node), pruned, lazily (a caller with a time
    limit stops when it must).

    Pruning: at most ``max_meshes`` meshes (more than one per LLM leaves meshes empty) and
    the largest mesh has at least ``min_largest`` GPUs (the largest LLM must fit somewhere).
    """
    if max_meshes is not None and nodes > max_meshes:
        return  # every node holds at least one mesh
    splits = node_splits(gpus_per_node)
    for combo in combinations_with_replacement(range(len(splits)), nodes):
        group = tuple(splits[i] for i in combo)
        count = sum(len(s) for s in group)
        if max_meshes is not None and count > max_meshes:
            continue
        if max(s[0] for s in group) < min_largest:
            continue
        yield group


def mesh_devices(group: Sequence[Tuple[int, ...]], gpus_per_node: int) -> List[Tuple[int, ...]]:
    """Device ids of every mesh: node ``k``'s split takes devices ``k*gpus_per_node ...`` in order."""
    out = []
    for node, split in enumerate(group):
        start = node * gpus_per_node
        for size in split:
            out.append(tuple(range(start, start + size)))
            start += size
    return out
