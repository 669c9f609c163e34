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
