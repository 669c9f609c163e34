"""Intra-op ILP: known optima (Megatron), memory-forced sharding, brute force, CP-SAT == HiGHS."""

import itertools

import pytest

from placement_opt import Architecture, Link
from placement_opt.costs.calibration import calibration_for
from placement_opt.costs.costmodel import CommModel
from placement_opt.parallel.graph import embedding_unit, head_unit, mlp_chain, transformer_layer
from placement_opt.parallel.intraop import build_problem, evaluate, solve

from parallel_fixtures import BERT_6_7B, V100, v100_cluster


def _problem(graph, n, tokens=2048, link=None):
    cluster = v100_cluster()
    calib = calibration_for(V100)
    comm = CommModel.for_group(cluster, n, calib)
    if link is not None:
        comm = CommModel(n=n, gpus_per_node=8, intra=link, inter=link, comm_eff=calib.comm_eff)
    return build_problem(graph, n, V100, comm, calib, tokens), comm


def _kinds(plan):
    out = {}
    for kind, _ in plan.collectives:
        out[kind] = out.get(kind, 0) + 1
    return out


@pytest.mark.parametrize("layers", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("n", [2, 4])
def test_mlp_chain_follows_megatron(layers, n):
    graph = mlp_chain(layers, hidden=4096, ffn=16384)
    problem, comm = _problem(graph, n)
    plan = solve(problem)
    kinds = _kinds(plan)
    if layers % 2 == 0:
        assert kinds == {"all-reduce": layers // 2}
    else:
        assert kinds == ({"all-reduce": (layers - 1) // 2, "all-gather": 1} if layers > 1 else {"all-gather": 1})
    assert plan.choice[0] == "column"
    assert all(c == ("column" if i % 2 == 0 else "row+all-reduce") for i, c in enumerate(plan.choice))
    # and the communication it pays is exactly that of the pattern
    out_bytes = [op.out_bytes * 2048 for op in problem.graph.ops]
    expected = sum(comm.collective("all-reduce", out_bytes[i]) for i in range(1, layers, 2))
    if layers % 2:
        expected += comm.collective("all-gather", out_bytes[-1])
    compute = sum(int(problem.node_cost[i][problem.strategies[i].index(
        next(s for s in problem.strategies[i] if s.name == c))]) for i, c in enumerate(plan.choice))
    assert compute <= plan.objective_ns
    assert plan.objective_ns - compute <= expected * 1e9 + len(plan.choice) + 1


@pytest.mark.parametrize("n", [2, 4, 8])
def test_transformer_layer_is_column_row_with_two_all_reduces(n):
    plan = solve(_problem(transformer_layer(BERT_6_7B), n)[0])
    choice = dict(zip(plan.ops, plan.choice))
    assert choice == {"ln1": "replicated", "qkv": "column", "attention": "heads", "out_proj": "row+all-reduce",
                      "ln2": "replicated", "mlp_up": "column", "mlp_down": "row+all-reduce"}
    assert _kinds(plan) == {"all-reduce": 2}
    full = transformer_layer(BERT_6_7B)
    matmul_weights = sum(op.weight_bytes for op in full.ops if op.kind == "matmul")
    assert plan.weight_bytes == pytest.approx(matmul_weights / n + 4 * 4096 * 2, rel=1e-3)


def test_memory_limit_forces_sharding():
    # tiny token count and a slow link: replication is fastest without a memory limit
    graph = mlp_chain(2, hidden=4096)
    problem, _ = _problem(graph, 4, tokens=1, link=Link(bandwidth=1e9, latency_s=1e-3))
    free = solve(problem)
    assert set(free.choice) == {"replicated"}
    replicated_bytes = free.weight_bytes
    budget = replicated_bytes / 2
    for solver in ("cp-sat", "highs"):
        tight = solve(problem, budget, solver)
        assert tight.weight_bytes <= budget
        assert "replicated" not in tight.choice
        assert tight.objective_ns > free.objective_ns
    assert solve(problem, replicated_bytes / 8) is None  # below the fully sharded size


def _brute_force(problem, budget=None):
    best = None
    for choice in itertools.product(*(range(len(s)) for s in problem.strategies)):
        if budget is not None:
            w = sum(problem.node_weight[i][c] for i, c in enumerate(choice))
            if w > budget:
                continue
        val = evaluate(problem, choice)
        best = val if best is None else min(best, val)
    return best


def _small_graphs():
    moe = Architecture(layers=4, hidden=1024, heads=16, moe_experts=8, seq_len=512)
    dense = Architecture(layers=4, hidden=1024, heads=16, seq_len=512)
    return [("mlp3", mlp_chain(3, 1024)), ("mlp4", mlp_chain(4, 2048, ffn=8192)),
            ("transformer", transformer_layer(dense)), ("moe", transformer_layer(moe, moe=True)),
            ("embedding", embedding_unit(dense)), ("head", head_unit(dense))]


@pytest.mark.parametrize("name,graph", _small_graphs())
@pytest.mark.parametrize("n", [2, 4])
def test_ilp_matches_brute_force_and_solvers_agree(name, graph, n):
    for tokens in (1, 512):
        problem, _ = _problem(graph, n, tokens=tokens, link=Link(bandwidth=50e9, latency_s=2e-5))
        budgets = [None, sum(float(w.max() + w.min()) / 2 for w in problem.node_weight)]
        for budget in budgets:
            expected = _brute_force(problem, budget)
            cp = solve(problem, budget, "cp-sat")
            hi = solve(problem, budget, "highs")
            if expected is None:
                assert cp is None and hi is None
                continue
            assert cp.objective_ns == hi.objective_ns
            # the solvers see memory in whole KiB (rounded up): never better than the exact optimum
            assert cp.objective_ns >= expected
            if budget is None:
                assert cp.objective_ns == expected


def test_moe_layer_uses_expert_or_tensor_split():
    moe = Architecture(layers=2, hidden=2048, heads=16, moe_experts=8, seq_len=1024)
    plan = solve(_problem(transformer_layer(moe, moe=True), 8)[0])
    choice = dict(zip(plan.ops, plan.choice))
    assert choice["experts_up"] in ("column", "experts")
    assert choice["experts_down"] in ("row+all-reduce", "experts+all-reduce")
    assert _kinds(plan).get("all-reduce") == 2


def test_unknown_solver_is_an_input_error():
    from placement_opt.errors import InputError
    problem, _ = _problem(mlp_chain(2, 1024), 2)
    with pytest.raises(InputError, match="solver"):
        solve(problem, solver="cbc")
