"""The one device packer (``spaces.partitions.allocate_devices``) against the plain rules its
callers relied on when each had its own packer: consecutive equal groups (round-robin) and
first-fit-decreasing of in-node meshes (the spatial LLM baseline)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_opt.errors import InputError
from placement_opt.spaces.partitions import allocate_devices, require_valid_group_size, valid_group_size


def consecutive_groups(n_gpus: int, size: int) -> list[tuple[int, ...]]:
    """As many groups of ``size`` devices as fit, in consecutive runs from device 0."""
    return [tuple(range(k * size, (k + 1) * size)) for k in range(n_gpus // size)]


def first_fit_decreasing(sizes: list[int], nodes: int, gpus_per_node: int) -> list[tuple[int, ...]] | None:
    """Largest mesh first (ties by position), each on the lowest node with room after the
    meshes already there; None when one finds no node."""
    used = [0] * nodes
    out: list = [None] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        node = next((k for k in range(nodes) if gpus_per_node - used[k] >= sizes[i]), None)
        if node is None:
            return None
        base = node * gpus_per_node + used[node]
        out[i] = tuple(range(base, base + sizes[i]))
        used[node] += sizes[i]
    return out


@pytest.mark.parametrize("nodes,gpn", [(1, 1), (1, 8), (2, 4), (3, 2), (4, 8), (6, 6)])
def test_equal_valid_groups_are_consecutive_runs(nodes, gpn):
    n_gpus = nodes * gpn
    for size in range(1, n_gpus + 1):
        if valid_group_size(size, gpn):
            assert allocate_devices((size,) * (n_gpus // size), nodes, gpn) == consecutive_groups(n_gpus, size)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 4), st.sampled_from([1, 2, 4, 6, 8]), st.data())
def test_in_node_meshes_are_packed_first_fit_decreasing(nodes, gpn, data):
    sizes = data.draw(st.lists(st.integers(1, gpn), max_size=3 * nodes))
    assert allocate_devices(sizes, nodes, gpn) == first_fit_decreasing(sizes, nodes, gpn)


@pytest.mark.parametrize("size,gpn,reason", [
    (0, 8, "group size must be >= 1"),
    (-2, 8, "group size must be >= 1"),
    (3, 8, "group size 3 does not divide the 8 GPUs of a node"),
    (12, 8, "group size 12 is not a multiple of the 8 GPUs of a node"),
])
def test_invalid_group_sizes_are_named(size, gpn, reason):
    with pytest.raises(InputError) as err:
        require_valid_group_size(size, gpn, "solver.options.group_size")
    assert reason in str(err.value) and "solver.options.group_size" in str(err.value)


@pytest.mark.parametrize("size,gpn", [(1, 8), (2, 8), (8, 8), (16, 8), (6, 6)])
def test_valid_group_sizes_pass(size, gpn):
    require_valid_group_size(size, gpn, "solver.options.group_size")
