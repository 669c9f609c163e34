"""Cost tables: conversion of MuxServe's profiling JSON, filling, lookups and validation."""

import json
import os

import numpy as np
import pytest

from placement_opt.cluster import Cluster
from placement_opt.errors import InputError
from placement_opt.offline.convert_muxserve import convert_muxserve
from placement_opt.costs.costtable import CostTable, fill_missing
from placement_opt.costs.roofline import roofline_cost_table
from placement_opt.model import Architecture

from .helpers import TABLES

SHIPPED = os.path.join(os.path.dirname(__file__), "..", "..", "placement_opt", "data", "llm_tables")

# An excerpt of MuxServe's llama-a100-cost.json (llama-7b, 1 GPU, SM 100 % and 50 %), values in ms.
EXCERPT = {"llama-7b": {"1": {
    "100": {"1": {"32": {"prefill": 14.082, "decoding": 11.264}, "64": {"prefill": 14.129, "decoding": 11.224}},
            "2": {"32": {"prefill": 13.934, "decoding": 11.267}, "64": {"prefill": 16.092, "decoding": 11.21}},
            "4": {"32": {"prefill": 16.037, "decoding": 11.403}, "64": {"prefill": -1, "decoding": -1}}},
    "50": {"1": {"32": {"prefill": 20.0, "decoding": 13.0}, "64": {"prefill": 21.0, "decoding": 13.1}},
           "2": {"32": {"prefill": 22.0, "decoding": 13.2}, "64": {"prefill": 25.0, "decoding": 13.3}},
           "4": {"32": {"prefill": 26.0, "decoding": 13.4}, "64": {"prefill": 33.0, "decoding": 13.5}}}}}}


def test_conversion_keeps_values_and_marks_missing():
    out = convert_muxserve(EXCERPT)["llama-7b"]
    t = out["tp"]["1"]
    assert t["sm_share"] == [0.5, 1.0]
    assert t["batch"] == [1, 2, 4] and t["seq_len"] == [32, 64]
    assert t["prefill_ms"][1][0][0] == 14.082 and t["decode_ms"][1][1][1] == 11.21
    assert t["prefill_ms"][1][2][1] is None  # -1 = not measured
    table = CostTable.from_dict("x", out, "cost_tables.x")
    assert table.prefill_s(1, 1.0, 1, 32) == pytest.approx(0.014082)
    # the unmeasured point extends the last measured segment along the batch axis (batches 1 -> 2)
    assert table.prefill_s(1, 1.0, 4, 64) == pytest.approx((16.092 + 2 * (16.092 - 14.129)) / 1e3)
    # between the measured SM shares linear in 1 / share: 0.75 is two thirds of the way from 1 / 0.5 to 1 / 1
    assert table.decode_s(1, 0.75, 1, 32) == pytest.approx((13.0 / 3 + 2 * 11.264 / 3) / 1e3)


def test_between_shares_a_latency_a_plus_b_over_share_is_reproduced():
    """A latency of the form a + b / share (work the SMs share out, and a part they do not) is
    looked up exactly between two measured shares; linear in the share it was overstated (at
    0.4 from shares 0.2 and 1: 9 ms for 6)."""
    a, b = 1.0, 2.0  # ms
    shares = [0.2, 1.0]
    raw = {"format": "placeopt-llm-cost-table", "version": 1, "model": "m", "gpu": "g", "source": "s", "units": "ms",
           "tp": {"1": {"sm_share": shares, "batch": [1, 2], "seq_len": [32, 64],
                        "prefill_ms": [[[a + b / s] * 2] * 2 for s in shares],
                        "decode_ms": [[[a + b / s] * 2] * 2 for s in shares]}}}
    table = CostTable.from_dict("m", raw, "t")
    for share in (0.25, 0.4, 0.62, 0.9):
        assert table.decode_s(1, share, 1, 32) == pytest.approx((a + b / share) / 1e3)
        assert table.prefill_s(1, share, 2, 64) == pytest.approx((a + b / share) / 1e3)


def _a_plus_b_over(x_of_share, shares, partition=None):
    """A table of latency 1 + 2 / x ms at each share (``x_of_share``: the SM measure), with
    ``partition`` as its ``sm_partition``."""
    raw = {"format": "placeopt-llm-cost-table", "version": 1, "model": "m", "units": "ms",
           "tp": {"1": {"sm_share": shares, "batch": [1, 2], "seq_len": [32, 64],
                        "prefill_ms": [[[1 + 2 / x_of_share(s)] * 2] * 2 for s in shares],
                        "decode_ms": [[[1 + 2 / x_of_share(s)] * 2] * 2 for s in shares]}}}
    if partition is not None:
        raw["sm_partition"] = partition
    return raw


def test_a_table_measured_on_sm_partitions_is_looked_up_by_the_sms_a_share_gets():
    """On an H200 (132 SMs, groups of 8) a share of 0.3 runs on 32 SMs, not 39.6: a table measured
    on such partitions (``sm_partition``) places a share between its measured ones by those SMs,
    and below its smallest share scales by them too."""
    partition = {"sms": 132, "granule": 8}
    sms = {0.2: 24, 0.3: 32, 0.42: 48, 0.57: 72, 0.75: 96, 1.0: 132}
    table = CostTable.from_dict("m", _a_plus_b_over(lambda s: sms[s] / 132, [0.2, 1.0], partition), "t")
    assert table.sm_partition == (132, 8) and table.tables[1].sm_fraction(0.3) == pytest.approx(32 / 132)
    for share in (0.3, 0.42, 0.57, 0.75):
        assert table.decode_s(1, share, 1, 32) == pytest.approx((1 + 2 / (sms[share] / 132)) / 1e3)
    # below the smallest share: 0.1 gets one group of 8 SMs, a third of the 24 at 0.2
    assert table.prefill_s(1, 0.1, 1, 32) == pytest.approx(3 * (1 + 2 / (24 / 132)) / 1e3)
    again = CostTable.from_dict("m", table.to_dict(), "t")
    assert again.sm_partition == (132, 8) and again.to_dict()["sm_partition"] == partition
    # without it, by the share itself
    plain = CostTable.from_dict("m", _a_plus_b_over(lambda s: sms[s] / 132, [0.2, 1.0]), "t")
    assert plain.tables[1].sm_fraction(0.3) == 0.3 and "sm_partition" not in plain.to_dict()


@pytest.mark.parametrize("partition, field", [({"sms": 8, "granule": 16}, "sm_partition.granule"),
                                              ({"sms": 0, "granule": 8}, "sm_partition.sms"),
                                              ({"sms": 132}, "sm_partition"),
                                              ({"sms": 132, "granule": 8, "x": 1}, "sm_partition")])
def test_a_bad_sm_partition_is_refused_naming_its_field(partition, field):
    with pytest.raises(InputError) as e:
        CostTable.from_dict("m", _a_plus_b_over(lambda s: s, [0.5, 1.0], partition), "cost_tables.m")
    assert field in str(e.value)


def test_shipped_tables_match_the_source_excerpt():
    with open(os.path.join(TABLES, "llama-7b-a100.json")) as f:
        table = CostTable.from_dict("llama-7b", json.load(f), "t")
    assert table.tp_degrees == (1, 2, 4, 8)
    assert table.prefill_s(1, 1.0, 1, 32) == pytest.approx(0.014082)
    assert table.decode_s(1, 1.0, 2, 64) == pytest.approx(0.01121)
    assert 1.0 < table.reference_latency() < 10.0  # one ShareGPT-sized request alone, seconds


def test_fill_missing_extends_last_segment():
    arr = np.array([[[1.0], [2.0], [np.nan]]])
    out = fill_missing(arr, np.array([1.0, 2.0, 4.0]), np.array([32.0]))
    assert out[0, 2, 0] == pytest.approx(4.0)


def test_fill_missing_below_the_first_point_follows_the_first_segment():
    # a launch-bound decode step (measured 2.07 / 2.09 ms at batch 2 / 4) costs about as much at
    # batch 1, not half; a compute-bound prefill never falls below proportional to the batch
    batch, seq = np.array([1.0, 2.0, 4.0]), np.array([512.0])
    decode = fill_missing(np.array([[[np.nan], [2.07], [2.09]]]), batch, seq)
    assert decode[0, 0, 0] == pytest.approx(2.06)
    prefill = fill_missing(np.array([[[np.nan], [4.0], [12.0]]]), batch, seq)
    assert prefill[0, 0, 0] == pytest.approx(2.0)


def test_shipped_h100_tables_load_and_are_monotone_in_the_batch():
    for name in ("llama-3.2-1b", "llama-3.2-3b", "llama-2-7b", "llama-3-8b", "llama-2-13b"):
        with open(os.path.join(SHIPPED, f"{name}-h100.json")) as f:
            table = CostTable.from_dict(name, json.load(f), "table")
        assert set(table.tp_degrees) == ({1} if "3.2" in name else {1, 2})
        for tp in table.tp_degrees:
            t = table.tables[tp]
            # measured dips reach 6% (13B, share 0.5: batch 16 a little faster than 8 at 64 tokens)
            assert (np.diff(t.decode_s, axis=1) > -0.1 * t.decode_s[:, 1:]).all(), (name, tp)
            assert (np.diff(t.prefill_s, axis=2) > 0).all(), (name, tp)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(format="other"), "t.format"),
    (lambda d: d["tp"]["1"].update(batch=[2, 1, 4]), "t.tp.1.batch"),
    (lambda d: d["tp"]["1"]["prefill_ms"][0].pop(), "t.tp.1.prefill_ms[0]"),
    (lambda d: d["tp"].update({"x": {}}), "t.tp.x"),
    (lambda d: d.update(extra=1), "t.extra"),
])
def test_bad_tables_name_the_field(mutate, field):
    data = convert_muxserve(EXCERPT)["llama-7b"]
    mutate(data)
    with pytest.raises(InputError) as e:
        CostTable.from_dict("t", data, "t")
    assert e.value.field == field


def test_roofline_is_close_to_measured_decode():
    cl = Cluster.from_dict({"nodes": 1, "gpus_per_node": 8, "gpu": {
        "name": "A100", "memory_gb": 80, "peak_fp16_tflops": 312, "memory_bandwidth_gbps": 2039}})
    arch = Architecture(layers=32, hidden=4096, heads=32, vocab=32000)
    est = roofline_cost_table("llama-7b", arch, cl)
    with open(os.path.join(TABLES, "llama-7b-a100.json")) as f:
        meas = CostTable.from_dict("m", json.load(f), "m")
    for b in (1, 16, 64):
        ratio = est.decode_s(1, 1.0, b, 256) / meas.decode_s(1, 1.0, b, 256)
        assert 0.5 < ratio < 2.0
    assert est.prefill_s(1, 0.3, 8, 512) > est.prefill_s(1, 1.0, 8, 512)
