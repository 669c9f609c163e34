"""The intra-op ILP as plain data (``intraop.formulate``), checked without any solver: every
strategy assignment, written as the 0/1 vector it stands for, satisfies the rows and scores
exactly :func:`intraop.evaluate`; so both back-ends optimise the problem's own objective."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from placement_opt import Architecture, Link
from placement_opt.costs.calibration import calibration_for
from placement_opt.costs.costmodel import CommModel
from placement_opt.parallel.graph import LayerGraph, mlp_chain, transformer_layer
from placement_opt.parallel.intraop import IntraOpILP, IntraOpProblem, build_problem, evaluate, formulate

from parallel_fixtures import V100, v100_cluster


def _problem(graph: LayerGraph, n: int, tokens: int) -> IntraOpProblem:
    calib = calibration_for(V100)
    link = Link(bandwidth=50e9, latency_s=2e-5)
    comm = CommModel(n=n, gpus_per_node=8, intra=link, inter=link, comm_eff=calib.comm_eff)
    return build_problem(graph, n, V100, comm, calib, tokens)


def _assignment(ilp: IntraOpILP, problem: IntraOpProblem, choice: tuple[int, ...]) -> list[int]:
    """The 0/1 value of every ILP variable for one strategy per operator."""
    values = [0] * len(ilp.names)
    for row, c in zip(ilp.choices, choice):
        values[row[c]] = 1
    index = {name: k for k, name in enumerate(ilp.names)}
    for u, v, _ in problem.edges:
        values[index[f"e{u}_{v}_{choice[u]}_{choice[v]}"]] = 1
    return values


GRAPHS = [mlp_chain(3, 1024), transformer_layer(Architecture(layers=2, hidden=1024, heads=16, seq_len=512)),
          transformer_layer(Architecture(layers=2, hidden=1024, heads=16, moe_experts=8, seq_len=512), moe=True)]


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("n", [2, 4])
def test_every_assignment_is_feasible_and_scores_its_objective(graph, n):
    problem = _problem(graph, n, tokens=64)
    budget = sum(float(w.max()) for w in problem.node_weight)
    ilp = formulate(problem, budget)
    assert ilp.memory is not None
    terms, cap = ilp.memory
    assert cap == int(budget // 1024)
    assert len(ilp.choices) == len(problem.strategies)
    assert all(ilp.integral[k] for row in ilp.choices for k in row)
    assert sum(ilp.integral) == sum(len(s) for s in problem.strategies)  # edge variables may be relaxed
    for choice in itertools.product(*(range(len(s)) for s in problem.strategies)):
        values = _assignment(ilp, problem, choice)
        assert all(sum(values[k] for k in row) == 1 for row in ilp.choices)
        assert all(sum(values[k] for k in mg.variables) == values[mg.endpoint] for mg in ilp.marginals)
        assert sum(c * values[k] for c, k in ilp.objective) == evaluate(problem, choice)
        kib = sum(int(np.ceil(problem.node_weight[i][c] / 1024.0)) for i, c in enumerate(choice))
        assert sum(c * values[k] for c, k in terms) == kib


def test_no_memory_row_without_a_budget():
    assert formulate(_problem(GRAPHS[0], 2, tokens=64), None).memory is None
