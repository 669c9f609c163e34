"""SM partitioning of colocated LLMs: the SM counts asked, and the fallbacks when the driver
cannot make disjoint green contexts (this CPU machine has no CUDA driver)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from placement_opt.executor.llm_greenctx import GreenContextError, disjoint_partitions, partition_sms, sm_counts


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


class _FakeDriver:
    """The green-context calls of libcuda with the driver's rule that a split's outputs (the
    remainder included) cannot be split again before they become a green context (CUresult 915)."""

    SPLIT_OUTPUT, DEVICE, CONTEXT = 1, 2, 3

    def __init__(self, total: int):
        self.total, self.handles = total, {}

    def _write(self, buf, origin: int, sms: int) -> None:
        buf[4:8] = origin.to_bytes(4, "little")
        buf[96:100] = sms.to_bytes(4, "little")

    @staticmethod
    def _read(buf):
        return int.from_bytes(buf.raw[4:8], "little"), int.from_bytes(buf.raw[96:100], "little")

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

    def cuDevSmResourceSplitByCount(self, group, n_ref, inp, rest, flags, n):  # noqa: N802
        origin, sms = self._read(inp)
        if origin == self.SPLIT_OUTPUT:
            return 915
        if n.value > sms:
            n_ref._obj.value = 0
            return 0
        self._write(group, self.SPLIT_OUTPUT, n.value)
        self._write(rest, self.SPLIT_OUTPUT, sms - n.value)
        return 0

    def cuDevResourceGenerateDesc(self, ref, buf, n):  # noqa: N802
        return self._new(ref, self._read(buf)[1])

    def cuGreenCtxCreate(self, ref, desc, device, flags):  # noqa: N802
        return self._new(ref, self.handles[desc.value])

    def cuGreenCtxGetDevResource(self, ctx, buf, kind):  # noqa: N802
        self._write(buf, self.CONTEXT, self.handles[ctx.value])
        return 0

    def cuGreenCtxStreamCreate(self, ref, ctx, flags, priority):  # noqa: N802
        return self._new(ref, ("stream", ctx.value))


def test_disjoint_partitions_split_the_remainder_through_a_green_context():
    """The first H100 run failed its second split with CUresult 915: the remainder of a split
    was split again directly. Every split now takes the SMs of a green context made from the
    previous remainder, so five 0.2 shares of an H100 get 24 SMs each."""
    torch = pytest.importorskip("torch")
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(ExternalStream=lambda handle, device: ("ext", handle)),
                                 device=torch.device)
    parts = disjoint_partitions(0, [24] * 5, fake_torch, lib=_FakeDriver(132))
    assert [p.sm_count for p in parts] == [24] * 5
    assert len({s for p in parts for s in p.streams}) == 10
    with pytest.raises(GreenContextError, match="not enough SMs"):
        disjoint_partitions(0, [64, 64, 64], fake_torch, lib=_FakeDriver(132))
