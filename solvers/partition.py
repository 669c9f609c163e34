"""Splitting a cluster's devices into groups that respect node boundaries."""

from __future__ import annotations

from placement_opt.errors import InputError


def equal_groups(n_gpus: int, gpus_per_node: int, size: int, start: int = 0) -> list[tuple[int, ...]]:
    """Consecutive groups of ``size`` devices from ``start``; a group never straddles a node
    unless it spans whole nodes. Leftover devices that cannot form a group are unused."""
    if size < 1:
        raise InputError("group size must be >= 1", "solver.options.group_size")
    if size < gpus_per_node and gpus_per_node % size:
        raise InputError(f"group size {size} does not divide the {gpus_per_node} GPUs of a node",
                         "solver.options.group_size")
    if size > gpus_per_node and size % gpus_per_node:
        raise InputError(f"group size {size} is not a multiple of the {gpus_per_node} GPUs of a node",
                         "solver.options.group_size")
    groups = []
    d = start
    while d + size <= n_gpus:
        groups.append(tuple(range(d, d + size)))
        d += size
    return groups
