"""Group partitions of a device bucket, and packing groups onto real devices.

A group either lies inside one node (its size divides the node's GPU count, so groups
tile a node exactly) or spans whole nodes. A bucket of ``n`` devices is split as the paper
prunes it: ``n // s`` groups of size ``s`` plus one remainder group of ``n % s`` devices
when that is itself a valid size.

:func:`allocate_devices` is the package's one device packer: every solver that turns group
(or mesh) sizes into device ids calls it.
"""

from __future__ import annotations

import heapq

from typing import Iterator, Sequence

from placement_opt.errors import InputError


def valid_group_size(size: int, gpus_per_node: int) -> bool:
    """Whether a group of ``size`` GPUs can sit on the cluster without straddling a node."""
    if size < 1:
        return False
    if size <= gpus_per_node:
        return gpus_per_node % size == 0
    return size % gpus_per_node == 0


def require_valid_group_size(size: int, gpus_per_node: int, field: str) -> None:
    """Raise an :class:`InputError` on ``field`` saying why ``size`` breaks the node-boundary
    rule of :func:`valid_group_size` (for sizes a user chose, e.g. a solver option)."""
    if valid_group_size(size, gpus_per_node):
        return
    if size < 1:
        reason = "group size must be >= 1"
    elif size < gpus_per_node:
        reason = f"group size {size} does not divide the {gpus_per_node} GPUs of a node"
    else:
        reason = f"group size {size} is not a multiple of the {gpus_per_node} GPUs of a node"
    raise InputError(reason, field)


class GroupPartitions:
    """Partitions of ``n_devices`` into equal-size groups plus a remainder group.

    Iterates tuples of group sizes (largest first). ``count_unpruned`` is every group size
    from 1 to ``n_devices``; the kept ones respect node boundaries (sizes, remainder).
    ``sizes`` restricts the group sizes (e.g. fixed 4-GPU groups for the ablation).
    """

    def __init__(self, n_devices: int, gpus_per_node: int, sizes: Sequence[int] | None = None):
        if n_devices < 1:
            raise InputError("a device bucket needs at least one device", "n_devices")
        self.n_devices = n_devices
        self.gpus_per_node = gpus_per_node
        self.sizes = None if sizes is None else tuple(sizes)

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        for s in range(1, self.n_devices + 1):
            if self.sizes is not None and s not in self.sizes:
                continue
            if not valid_group_size(s, self.gpus_per_node):
                continue
            q, r = divmod(self.n_devices, s)
            if r and not valid_group_size(r, self.gpus_per_node):
                continue
            yield (s,) * q + ((r,) if r else ())

    def count(self) -> int:
        return sum(1 for _ in self)

    def count_unpruned(self) -> int:
        return self.n_devices


def allocate_devices(sizes: Sequence[int], nodes: int, gpus_per_node: int) -> list[tuple[int, ...]] | None:
    """Assign device ids to groups of the given sizes (in the given order), or None if they do not fit.

    First fit, largest group first (ties in the given order): whole-node groups take
    consecutive whole nodes first; a group inside a node goes to the lowest node with room
    after the groups already packed there, opening the next unused node when none has room.
    A size above the node's GPU count must be a whole number of nodes; smaller sizes need
    not divide the node. Groups of one valid size fill the devices from 0 upwards in
    consecutive runs.
    """
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    out: list = [None] * len(sizes)
    node = 0
    # opened nodes with room left, by how many GPUs are free (a heap of node ids each): finding
    # the lowest node with room for a group looks at one heap top per room size, never at every
    # node (a cluster of 65536 single-GPU groups packs in well under a second)
    with_room: dict[int, list[int]] = {}
    for i in order:
        s = sizes[i]
        if s >= gpus_per_node:
            k = s // gpus_per_node
            if node + k > nodes:
                return None
            out[i] = tuple(range(node * gpus_per_node, (node + k) * gpus_per_node))
            node += k
            continue
        fitting = [room for room, heap in with_room.items() if room >= s and heap]
        if fitting:
            room = min(fitting, key=lambda r: with_room[r][0])
            nd = heapq.heappop(with_room[room])
        else:
            if node >= nodes:
                return None
            room, nd = gpus_per_node, node
            node += 1
        start = gpus_per_node - room
        out[i] = tuple(range(nd * gpus_per_node + start, nd * gpus_per_node + start + s))
        if room > s:
            heapq.heappush(with_room.setdefault(room - s, []), nd)
    return out


class AllPartitions:
    """Every multiset of valid group sizes summing to at most ``n_devices`` (the exhaustive
    search's partitions; devices left over stay unused). Iterates non-increasing size tuples.

    ``count_unpruned`` counts the integer partitions of every total up to ``n_devices``
    without the node-boundary rule.
    """

    def __init__(self, n_devices: int, gpus_per_node: int):
        self.n_devices = n_devices
        self.gpus_per_node = gpus_per_node

    def _rec(self, left: int, largest: int, valid: bool) -> Iterator[tuple[int, ...]]:
        """Non-increasing size tuples of total at most ``left``, parts at most ``largest``
        (only node-valid sizes when ``valid``), the empty one first."""
        yield ()
        for s in range(min(left, largest), 0, -1):
            if valid and not valid_group_size(s, self.gpus_per_node):
                continue
            for rest in self._rec(left - s, s, valid):
                yield (s,) + rest

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        for sizes in self._rec(self.n_devices, self.n_devices, True):
            if sizes and allocate_devices(sizes, self.n_devices // self.gpus_per_node or 1, self.gpus_per_node):
                yield sizes

    def count(self) -> int:
        return sum(1 for _ in self)

    def count_unpruned(self) -> int:
        return sum(1 for s in self._rec(self.n_devices, self.n_devices, False) if s)
