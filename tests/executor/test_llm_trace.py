"""The job trace's device clock placed on the host's (``executor.llm_trace.host_seconds``).

An H100 host's GPU timer ran 12 microseconds a second slow against its monotonic clock
(``results-v3p-trace8``: a job's recorded start crept 0.6 ms before its launch over a 50 s
trial with one anchor); two anchors scale the device clock onto the host's between them."""

from __future__ import annotations

import pytest

from placement_opt.executor.llm_trace import host_seconds


def test_a_drifting_device_clock_is_scaled_onto_the_hosts():
    anchors = (100.0, 50.0, 50.0006)  # first anchor at host 100 s; 50 s apart on the device, 50.0006 s on the host
    assert host_seconds(0.0, anchors) == 100.0
    assert host_seconds(50.0, anchors) == pytest.approx(150.0006, abs=1e-9)
    assert host_seconds(25.0, anchors) == pytest.approx(125.0003, abs=1e-9)  # halfway: half the drift


def test_without_a_device_span_the_clock_is_not_scaled():
    assert host_seconds(0.25, (7.0, 0.0, 0.001)) == 7.25
