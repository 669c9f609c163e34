"""SM partitioning of colocated LLMs: the SM counts asked, and the fallbacks when the driver
cannot make disjoint green contexts (this CPU machine has no CUDA driver)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from placement_opt.executor.llm_greenctx import (GreenContextError, deal, disjoint_partitions, group_sizes, layout_of,
                                                 partition_sms, sm_counts)


def test_sm_counts_round_down_to_granules_and_fit_side_by_side():
    assert sm_counts([0.2] * 5, 132, (9, 0)) == [24] * 5  # H100: granules of 8; 5 x 24 <= 132
    assert sm_counts([0.5, 0.5], 132, (9, 0)) == [64, 64]
    assert sm_counts([0.01], 132, (9, 0)) == [8]  # at least one granule
    assert sm_counts([1.0], 108, (8, 0)) == [108]
    for shares in ([0.3, 0.3, 0.4], [0.25] * 4, [0.1] * 10):
        assert sum(sm_counts(shares, 132, (9, 0))) <= 132


class _FakeCuda:
    """Enough of torch.cuda for partition_sms on a machine without GPUs."""

    def __init__(self):
        self.made = 0

    def get_device_properties(self, device):
        return SimpleNamespace(multi_processor_count=132, major=9, minor=0)

    def Stream(self, device):  # noqa: N802 - torch's name
        self.made += 1
        return ("stream", self.made)


def test_without_a_driver_partitioning_falls_back_to_plain_streams_and_says_why():
    torch = pytest.importorskip("torch")
    fake = SimpleNamespace(cuda=_FakeCuda())
    with pytest.raises(GreenContextError):
        disjoint_partitions(0, [64], fake)
    plan = partition_sms(torch.device("cpu"), [0.5, 0.5], fake)
    assert plan.mechanism == "streams" and plan.sm_counts == [132, 132]
    assert "disjoint green contexts" in plan.fallback and "torch green contexts" in plan.fallback
    assert len({s for pair in plan.streams for s in pair}) == 4  # every LLM its own two streams


def test_llms_with_every_sm_need_no_partition():
    torch = pytest.importorskip("torch")
    plan = partition_sms(torch.device("cpu"), [1.0, 1.0], SimpleNamespace(cuda=_FakeCuda()))
    assert plan.mechanism == "streams" and plan.fallback == ""


STRIDE = 144  # the module's RESOURCE_STRIDE, written again here as the driver's header fixes it


class _FakeDriver:
    """The green-context calls of libcuda: a split makes groups of the asked size rounded up to 8
    SMs (at most ``max_groups[size]`` of them, as a real device's GPCs allow fewer than SMs / size),
    written at the CUdevResource stride; a descriptor takes several outputs of one split only
    (none with ``several=False``, a driver that refuses them); and a split's outputs (the remainder
    included) cannot be split again before they become a green context (CUresult 915). Each
    descriptor's (split, group) pairs are kept in ``descs``. Its limits: it marks a resource's split
    in the bytes the real driver keeps opaque (so it cannot tell whether copied groups still name
    their split), and it makes no group, where the real driver refuses the call, when more SMs are
    asked than the input holds."""

    SPLIT_OUTPUT, DEVICE, CONTEXT = 1, 2, 3

    def __init__(self, total: int, max_groups=None, alignment: int = 8, several: bool = True):
        self.total, self.max_groups, self.alignment, self.several = total, dict(max_groups or {}), alignment, several
        self.handles, self.splits, self.descs = {}, 0, []

    def _write(self, buf, origin: int, sms: int, split: int = 0, index: int = 0, at: int = 0) -> None:
        buf[at + 4:at + 8] = origin.to_bytes(4, "little")
        buf[at + 8:at + 12] = split.to_bytes(4, "little")
        buf[at + 12:at + 16] = index.to_bytes(4, "little")
        buf[at + 96:at + 100] = sms.to_bytes(4, "little")
        buf[at + 104:at + 108] = self.alignment.to_bytes(4, "little")  # smCoscheduledAlignment (0: before CUDA 13)

    @staticmethod
    def _read(buf, at: int = 0):
        raw = buf.raw
        return tuple(int.from_bytes(raw[at + o:at + o + 4], "little") for o in (4, 8, 12, 96))

    def _new(self, ref, value) -> int:
        ref._obj.value = len(self.handles) + 1
        self.handles[ref._obj.value] = value
        return 0

    def cuDeviceGet(self, ref, index):  # noqa: N802 - the driver's names
        ref._obj.value = index.value
        return 0

    def cuDeviceGetDevResource(self, device, buf, kind):  # noqa: N802
        self._write(buf, self.DEVICE, self.total)
        return 0

    def cuDevSmResourceSplitByCount(self, groups, n_ref, inp, rest, flags, n):  # noqa: N802
        origin, _, _, sms = self._read(inp)
        if origin == self.SPLIT_OUTPUT:
            return 915
        size = -(-n.value // 8) * 8
        made = min(n_ref._obj.value, sms // size, self.max_groups.get(n.value, sms))
        self.splits += 1
        for j in range(made):
            self._write(groups, self.SPLIT_OUTPUT, size, self.splits, j, at=j * STRIDE)
        if rest is not None:
            self._write(rest, self.SPLIT_OUTPUT, sms - made * size, self.splits, made)
        n_ref._obj.value = made
        return 0

    def cuDevResourceGenerateDesc(self, ref, buf, n):  # noqa: N802
        parts = [self._read(buf, at=j * STRIDE) for j in range(n.value)]
        if len({split for _, split, _, _ in parts}) != 1 or (len(parts) > 1 and not self.several):
            return 915
        self.descs.append([(split, index) for _, split, index, _ in parts])
        return self._new(ref, sum(sms for *_, sms in parts))

    def cuGreenCtxCreate(self, ref, desc, device, flags):  # noqa: N802
        return self._new(ref, self.handles[desc.value])

    def cuGreenCtxGetDevResource(self, ctx, buf, kind):  # noqa: N802
        self._write(buf, self.CONTEXT, self.handles[ctx.value])
        return 0

    def cuGreenCtxStreamCreate(self, ref, ctx, flags, priority):  # noqa: N802
        return self._new(ref, ("stream", ctx.value))


def _fake_torch():
    torch = pytest.importorskip("torch")
    return SimpleNamespace(cuda=SimpleNamespace(ExternalStream=lambda handle, device: ("ext", handle)),
                           device=torch.device)


def test_group_sizes_are_the_common_multiples_of_the_alignment_coarsest_first():
    assert group_sizes([24] * 5, 8) == [24, 8]
    assert group_sizes([16, 32, 64], 8) == [16, 8]
    assert group_sizes([64, 64], 8) == [64, 32, 16, 8]
    assert group_sizes([12, 24], 8) == []  # 12 is no multiple of 8: no split serves it


def test_groups_are_dealt_round_the_llms_one_at_a_time():
    assert deal([1, 2, 4]) == [[0], [1, 3], [2, 4, 5, 6]]
    assert deal([1] * 5) == [[0], [1], [2], [3], [4]]


def test_equal_shares_take_one_group_each_of_one_split_of_the_whole_device():
    """Sequential splits made the fifth of five 24-SM groups of an H200 14-20% slower; one split
    of the device into five groups of 24 (the driver's symmetrical partitions) ran all five alike."""
    lib = _FakeDriver(132)
    parts = disjoint_partitions(0, [24] * 5, _fake_torch(), lib=lib)
    assert [p.sm_count for p in parts] == [24] * 5
    assert layout_of(parts) == "one-split of 24-SM groups"
    assert lib.splits == 1 and sorted(d[0][1] for d in lib.descs) == [0, 1, 2, 3, 4]
    assert len({s for p in parts for s in p.streams}) == 10


def test_unequal_shares_take_several_groups_of_the_same_split():
    lib = _FakeDriver(132)
    parts = disjoint_partitions(0, [16, 32, 64], _fake_torch(), lib=lib)
    assert [p.sm_count for p in parts] == [16, 32, 64] and layout_of(parts) == "one-split of 16-SM groups"
    assert [[i for _, i in d] for d in lib.descs] == deal([1, 2, 4])
    assert len({split for d in lib.descs for split, _ in d}) == 1


def test_a_split_with_too_few_groups_gives_way_to_finer_groups_then_to_sequential_splits():
    """The H200 makes 15 groups of 8 SMs from 132 (not 16): a size whose split falls short is
    passed over; when none serves, each group comes from what the previous splits left."""
    parts = disjoint_partitions(0, [64, 64], _fake_torch(), lib=_FakeDriver(132, {64: 1}))
    assert [p.sm_count for p in parts] == [64, 64] and layout_of(parts) == "one-split of 32-SM groups"
    lib = _FakeDriver(132, {64: 1, 32: 3, 16: 7, 8: 15})
    parts = disjoint_partitions(0, [64, 64], _fake_torch(), lib=lib)
    assert [p.sm_count for p in parts] == [64, 64] and layout_of(parts) == "sequential-splits"


def test_a_split_of_another_size_than_asked_is_not_taken():
    """Before CUDA 13 the resource carries no alignment; the module then tries sizes the driver
    rounds up (12 SMs -> 16 on Hopper) and does not take such a split, whose groups are larger than
    the counts: shares of 12 SMs fall to the sequential splits (which get 16 each, as before),
    while shares of 16 and 32 still take one split."""
    parts = disjoint_partitions(0, [12, 12], _fake_torch(), lib=_FakeDriver(132, alignment=0))
    assert [p.sm_count for p in parts] == [16, 16] and layout_of(parts) == "sequential-splits"
    parts = disjoint_partitions(0, [16, 32], _fake_torch(), lib=_FakeDriver(132, alignment=0))
    assert [p.sm_count for p in parts] == [16, 32] and layout_of(parts) == "one-split of 16-SM groups"


def test_a_driver_refusing_several_groups_in_one_context_gets_sequential_splits():
    """Every descriptor is made before any context: when the driver refuses one of several groups,
    nothing is left to undo, and the sequential splits serve; equal shares need one group each."""
    lib = _FakeDriver(132, several=False)
    parts = disjoint_partitions(0, [16, 32, 64], _fake_torch(), lib=lib)
    assert [p.sm_count for p in parts] == [16, 32, 64] and layout_of(parts) == "sequential-splits"
    parts = disjoint_partitions(0, [24] * 5, _fake_torch(), lib=_FakeDriver(132, several=False))
    assert layout_of(parts) == "one-split of 24-SM groups"


def test_sequential_splits_split_the_remainder_through_a_green_context():
    """The first H100 run failed its second split with CUresult 915: the remainder of a split
    was split again directly. Every sequential split takes the SMs of a green context made from
    the previous remainder, so five 0.2 shares of an H100 get 24 SMs each that way too."""
    parts = disjoint_partitions(0, [24] * 5, _fake_torch(), lib=_FakeDriver(132, {24: 4, 8: 14}))
    assert [p.sm_count for p in parts] == [24] * 5 and layout_of(parts) == "sequential-splits"
    assert len({s for p in parts for s in p.streams}) == 10
    with pytest.raises(GreenContextError, match="not enough SMs"):
        disjoint_partitions(0, [64, 64, 64], _fake_torch(), lib=_FakeDriver(132))


def test_partition_sms_reports_the_layout_and_gives_whole_gpu_llms_plain_streams(monkeypatch):
    torch = pytest.importorskip("torch")
    from placement_opt.executor import llm_greenctx

    monkeypatch.setattr(llm_greenctx, "_driver", lambda: _FakeDriver(132))
    cuda = _FakeCuda()
    cuda.ExternalStream = lambda handle, device: ("ext", handle)
    plan = partition_sms(torch.device("cuda", 0), [0.2, 0.2, 1.0], SimpleNamespace(cuda=cuda, device=torch.device))
    assert plan.mechanism == "green-contexts" and plan.layout == "one-split of 24-SM groups"
    assert plan.sm_counts == [24, 24, 132] and plan.streams[2] == (("stream", 5), ("stream", 6))
