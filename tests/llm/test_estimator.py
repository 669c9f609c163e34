"""The Eq. 3 estimator and the parallel candidates (Algorithm 2)."""

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.solvers.llm_estimator import build_tables
from placement_opt.llm_units import llm_specs, mesh_memory
from placement_opt.settings import rule_set

from .helpers import SMALL


@pytest.fixture(scope="module")
def setup():
    inst = load_instance(SMALL)
    specs = llm_specs(inst)
    tables = build_tables(specs, inst.cluster, 256, mesh_memory(inst, rule_set("placeopt")))
    return inst, specs, tables, None


def test_single_llm_matches_equation_3(setup):
    inst, specs, tables, _ = setup
    i, t = 1, 0  # a 7B LLM on one GPU
    s, tpt, batch = tables.estimate([i], t)
    b = batch[0]
    row = tables.row(i, t)
    direct = b / (tables.P[row, b] + tables.D[row, b] * specs[i].output_tokens)
    assert tpt[0] == pytest.approx(min(direct, specs[i].rate))
    assert tpt[0] == pytest.approx(specs[i].rate)  # 8 req/s is within one GPU's reach
    if b > 1:  # the smallest batch that meets the rate: one less does not
        assert (b - 1) / (tables.P[row, b - 1] + tables.D[row, b - 1] * specs[i].output_tokens) < specs[i].rate


def test_colocation_costs_throughput_and_kv_caps_batches(setup):
    inst, specs, tables, _ = setup
    alone, _, _ = tables.estimate([0], 0)
    both, tpt, _ = tables.estimate([0, 1], 0)
    assert both <= alone + specs[1].rate + 1e-9
    assert tpt[0] <= alone + 1e-9
    # the weights of four LLMs leave no KV room on one GPU
    assert tables.estimate([0, 1, 2, 3], 0)[0] == -1.0


def test_candidates_take_more_sms_for_more_load(setup):
    inst, specs, tables, _ = setup
    assert tables.feasible[:, 0].all()  # 7B and 13B fit one 80 GB GPU
    rare, busy = 2, 1  # two 7B LLMs at 0.5 and 8 req/s
    assert tables.share[rare, 0] == pytest.approx(0.3)
    assert tables.share[busy, 0] >= tables.share[rare, 0]
    assert np.all((tables.share[tables.feasible] >= 0.3) & (tables.share[tables.feasible] <= 1.0))
