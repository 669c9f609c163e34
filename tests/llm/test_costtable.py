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
    # halfway between the measured SM shares
    assert table.decode_s(1, 0.75, 1, 32) == pytest.approx((11.264 + 13.0) / 2 / 1e3)


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
