"""An LLM engine process's CUDA context gets 32 hardware work queues unless the user chose a number.

Five LLMs on one GPU run ten job streams; on the driver's default eight queues v3h's five-LLM
runs held 13-19% of their jobs until another LLM's job ended (benchmarks/fidelity/llm/
start_delay.py, docs/fidelity-llm.md "Five LLMs on the v3h engine")."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from placement_opt.executor import llm_engine  # noqa: E402


def test_the_worker_asks_for_32_queues(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "")  # records the variable's state: undone after the test
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS")
    assert llm_engine.widen_hardware_queues() == "32"
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"


def test_a_number_the_user_set_is_kept(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    assert llm_engine.widen_hardware_queues() == "1"
