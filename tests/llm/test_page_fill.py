"""The decode step's page-table fill (``llm.decode_page_entry_s``): the pool's page rule, the
mesh kernel's rule on a hand-timed mesh, the simulator's pages per LLM and mesh, and the
estimator's mean-value form.

The executor's engine builds a decode step's page table on the host before the launch, one
entry per page of every KV block the step's requests hold; a mesh's pool is cut into pages of
the gcd of its LLMs' block sizes, so an LLM beside LLMs of other block sizes holds each block
as several pages (docs/fidelity-llm.md, "The decode step's page table").
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.llm_units import llm_specs, pages_per_block
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig
from placement_opt.simulate.llm import page_fill_seconds, simulate_llm
from placement_opt.solvers.llm_estimator import latency_vectors

from .helpers import ROOT, lone_request

FIDELITY = os.path.join(ROOT, "instances", "fidelity-llm")


def _archs(path: str) -> dict:
    return {m.name: m.architecture for m in load_instance(path).models}


def test_pages_per_block_follow_the_mesh():
    """Alone an LLM's block is one page; on the fidelity runs' meshes the pool's page is the gcd
    of the LLMs' block sizes: on one GPU with four smaller LLMs a LLaMA-7B shape block is 32
    pages, its GQA sibling's 8; at TP 4 the same (every block shrinks alike)."""
    one_gpu = _archs(os.path.join(FIDELITY, "measured", "poisson.json"))
    mesh = list(one_gpu.values())
    assert {n: pages_per_block(a, mesh, 1) for n, a in one_gpu.items()} == {
        "llm-0.4b": 3, "llm-1b": 4, "llm-3b": 7, "llm-7b": 32, "llm-8b": 8}
    assert all(pages_per_block(a, [a], 1) == 1 for a in mesh)
    four = _archs(os.path.join(FIDELITY, "gpu4", "measured", "poisson.json"))
    assert {n: pages_per_block(a, list(four.values()), 4) for n, a in four.items()} == {
        "llm-1b": 4, "llm-3b": 7, "llm-7b": 32, "llm-8b": 8}


def test_a_decode_launch_fills_a_page_table_entry_per_block():
    """The two decode steps (contexts 1001 and 1002, the next token's 63 blocks each) launch
    63 x the per-block host seconds later; 0 (off): table times only."""
    assert lone_request(1000, 3)[1] == pytest.approx(0.12)
    assert lone_request(1000, 3, dict(decode_block_host_s=1e-4))[1] == pytest.approx(0.12 + 2 * 63 * 1e-4)


def test_simulator_charges_each_llm_the_pages_of_its_mesh():
    """``page_fill_seconds``: pages per block on the mesh x ``decode_page_entry_s``; the 1-GPU
    temporal placement of the conv trace (all five LLMs on one mesh, one job at a time) decodes
    slower with the fill, every LLM (each waits for the others' fills too)."""
    inst = load_instance(os.path.join(FIDELITY, "measured", "conv.json"))
    cfg = dataclasses.replace(inst.llm_settings, decode_page_entry_s=50e-9)
    specs = {s.name: s for s in llm_specs(inst)}
    mesh = list(specs.values())
    assert page_fill_seconds(cfg, specs["llm-7b"], mesh, 1) == pytest.approx(32 * 50e-9)
    assert page_fill_seconds(cfg, specs["llm-7b"], [specs["llm-7b"]], 1) == pytest.approx(50e-9)
    placement = load_placement(os.path.join(FIDELITY, "conv-temporal.placement.json"))
    off = simulate_llm(dataclasses.replace(inst, llm=dataclasses.replace(cfg, decode_page_entry_s=0.0)), placement)
    on = simulate_llm(dataclasses.replace(inst, llm=cfg), placement)
    assert on["tpot_mean_s"] > off["tpot_mean_s"]
    assert all(on["per_model"][n]["tpot_mean_s"] > off["per_model"][n]["tpot_mean_s"] for n in specs)


def test_estimator_adds_the_mean_fill_of_a_step():
    """A decode step of b requests lasts b x the blocks of the mean context plus one token x
    the pages per block (alone: 1; on the TP-2 set's mesh: llm-7b beside llm-8b) x
    ``decode_page_entry_s`` longer; prefills are unchanged."""
    inst = load_instance(os.path.join(FIDELITY, "tp2", "measured", "poisson.json"))
    spec = llm_specs(inst)[0]
    cfg = dataclasses.replace(inst.llm_settings, decode_page_entry_s=50e-9)
    off = dataclasses.replace(cfg, decode_page_entry_s=0.0)
    b = np.maximum(np.arange(33), 1)
    blocks = math.ceil((spec.prompt_tokens + spec.output_tokens / 2 + 1) / cfg.kv_block_tokens)
    specs = llm_specs(inst)
    for mesh in (None, specs):
        pages = pages_per_block(spec.architecture, [s.architecture for s in mesh or [spec]], 2)
        p0, d0 = latency_vectors(spec, 2, 1.0, 32, off, mesh)
        p1, d1 = latency_vectors(spec, 2, 1.0, 32, cfg, mesh)
        assert np.array_equal(p0, p1)
        assert np.allclose(d1 - d0, b * blocks * pages * 50e-9, rtol=1e-12, atol=0)
    assert pages_per_block(spec.architecture, [s.architecture for s in specs], 2) > 1  # llm-7b beside llm-8b
    assert np.array_equal(latency_vectors(spec, 2, 1.0, 32, LLMConfig())[1],
                          latency_vectors(spec, 2, 1.0, 32, LLMConfig(), specs)[1])
