"""Intra-op pass: choose a sharding strategy for every operator of a unit by ILP.

For a unit (see :mod:`.graph`) on a tensor-parallel group of ``n`` devices every
operator gets candidate strategies (replicated, split on each tensor dimension, split on
the contraction dimension with an all-reduce of the output, split by expert); each has a compute, communication and per-GPU weight cost. Activations have a
layout: replicated (R), split on the feature dimension (S) or split by expert (E).
Edges carry the resharding cost of the producer's output layout into the consumer's
input layout: slicing R into S/E is free, S/E into R is an all-gather, S <-> E an
all-to-all. Batch (data-parallel) splits are excluded: replication is the placement's
job. The unit's input is replicated and, except for the LM head, so must its output be.

The ILP (Alpa's formulation) has a one-hot vector per operator and one-hot edge
variables whose marginals equal the endpoint choices; it minimises compute +
communication + resharding subject to the per-GPU weight memory limit. It is written
once, as plain data (:func:`formulate`), and two small back-ends hand it to OR-Tools CP-SAT
(default) or PuLP + HiGHS. Costs are integers (nanoseconds) so that both optimise the very
same objective and agree on the optimum.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.cluster import GPUSpec
from placement_opt.costs.costmodel import Calibration, CommModel, op_time
from placement_opt.parallel.graph import LayerGraph, Operator, merge_followers

R, S, E = 0, 1, 2  # activation layouts
LAYOUT_NAMES = ("R", "S", "E")
SOLVERS = ("cp-sat", "highs")
NS = 1e9  # integer cost unit: nanoseconds


@dataclass(frozen=True)
class Strategy:
    """One way to run an operator on the group."""

    name: str
    in_layout: int
    out_layout: int
    compute_div: int  # the operator's work is divided by this
    weight_div: int  # each GPU holds weight_bytes / weight_div
    comm: Tuple[str, ...] = ()  # collectives on the full output tensor (kinds)


def strategies(op: Operator, n: int) -> Tuple[Strategy, ...]:
    """Candidate strategies of ``op`` on ``n`` devices (replicated is always one)."""
    out = [Strategy("replicated", R, R, 1, 1)]
    if n <= 1:
        return tuple(out)
    k, m = op.split_in, op.split_out
    if op.kind == "matmul":
        if m % n == 0:
            out.append(Strategy("column", R, S, n, n))
        if k % n == 0:
            out.append(Strategy("row+all-reduce", S, R, n, n, ("all-reduce",)))
    elif op.kind == "attention":
        if m % n == 0:
            out.append(Strategy("heads", S, S, n, 1))
    elif op.kind == "embedding":
        if k % n == 0:
            out.append(Strategy("vocab+all-reduce", R, R, n, n, ("all-reduce",)))
        if m % n == 0:
            out.append(Strategy("hidden", R, S, n, n))
    elif op.kind == "experts_up":
        if m % n == 0:
            out.append(Strategy("column", R, S, n, n))
        if op.experts % n == 0:
            out.append(Strategy("experts", R, E, n, n))
    elif op.kind == "experts_down":
        if k % n == 0:
            out.append(Strategy("row+all-reduce", S, R, n, n, ("all-reduce",)))
        if op.experts % n == 0:
            out.append(Strategy("experts+all-reduce", E, R, n, n, ("all-reduce",)))
    return tuple(out)


def reshard_kind(src: int, dst: int) -> Optional[str]:
    """Collective that turns layout ``src`` into ``dst`` (None: nothing or a free slice)."""
    if src == dst or src == R:
        return None
    if dst == R:
        return "all-gather"
    return "all-to-all"


@dataclass(frozen=True)
class IntraOpProblem:
    """Integer cost tables of one unit on one group at one token count."""

    graph: LayerGraph  # followers merged
    strategies: Tuple[Tuple[Strategy, ...], ...]
    node_cost: Tuple[np.ndarray, ...]  # ns, per operator and strategy
    node_weight: Tuple[np.ndarray, ...]  # bytes per GPU, per operator and strategy
    edges: Tuple[Tuple[int, int, np.ndarray], ...]  # (u, v, ns cost[su, sv]) with a nonzero cost


@dataclass(frozen=True)
class IntraOpPlan:
    """The chosen strategy of every (merged) operator and its cost."""

    ops: Tuple[str, ...]
    choice: Tuple[str, ...]
    index: Tuple[int, ...]  # strategy index per operator (into ``strategies(op, n)``)
    objective_ns: int
    weight_bytes: float  # per GPU
    collectives: Tuple[Tuple[str, float], ...]  # (kind, bytes per token of the full tensor)


def build_problem(graph: LayerGraph, n: int, gpu: GPUSpec, comm: CommModel, calib: Calibration,
                  tokens: int) -> IntraOpProblem:
    """Cost tables of ``graph`` (followers merged here) for ``tokens`` tokens on ``n`` GPUs."""
    graph = merge_followers(graph)
    strats, costs, weights = [], [], []
    last = len(graph.ops) - 1
    for i, op in enumerate(graph.ops):
        cands = strategies(op, n)
        row_cost, row_w = [], []
        for st in cands:
            t = unit_op_time(op, st, gpu, comm, calib, tokens)
            if i == last and graph.output_replicated:
                kind = reshard_kind(st.out_layout, R)
                if kind:
                    t += comm.collective(kind, op.out_bytes * tokens)
            row_cost.append(int(round(t * NS)))
            row_w.append(op.weight_bytes / st.weight_div)
        strats.append(cands)
        costs.append(np.array(row_cost, dtype=np.int64))
        weights.append(np.array(row_w, dtype=np.float64))
    edges = []
    for v, op in enumerate(graph.ops):
        for u in op.inputs:
            mat = np.zeros((len(strats[u]), len(strats[v])), dtype=np.int64)
            for a, su in enumerate(strats[u]):
                for b, sv in enumerate(strats[v]):
                    kind = reshard_kind(su.out_layout, sv.in_layout)
                    if kind:
                        mat[a, b] = int(round(comm.collective(kind, graph.ops[u].out_bytes * tokens) * NS))
            if mat.any():
                edges.append((u, v, mat))
    return IntraOpProblem(graph=graph, strategies=tuple(strats), node_cost=tuple(costs), node_weight=tuple(weights),
                          edges=tuple(edges))


def unit_op_time(op: Operator, st: Strategy, gpu: GPUSpec, comm: CommModel, calib: Calibration,
                 tokens: int) -> float:
    """Compute (roofline) + merged followers + the strategy's own collectives, in seconds."""
    t = op_time(op.flops * tokens / st.compute_div,
                op.bytes_moved * tokens / st.compute_div + op.weight_bytes / st.weight_div,
                calib.family(op.family), gpu)
    if op.follower_bytes > 0:
        # Followers of a sharded operator run on 1/n of the data; after an all-reduce this
        # stands for reduce-scatter, the elementwise work on shards, then all-gather.
        t += op_time(op.follower_flops * tokens / st.compute_div, op.follower_bytes * tokens / st.compute_div,
                     calib.family("elementwise"), gpu)
    for kind in st.comm:
        t += comm.collective(kind, op.out_bytes * tokens)
    return t


def evaluate(problem: IntraOpProblem, choice: Tuple[int, ...]) -> int:
    """Objective (ns) of a strategy index per operator."""
    total = sum(int(problem.node_cost[i][c]) for i, c in enumerate(choice))
    for u, v, mat in problem.edges:
        total += int(mat[choice[u], choice[v]])
    return total


def solve(problem: IntraOpProblem, memory_budget: Optional[float] = None, solver: str = "cp-sat",
          ) -> Optional[IntraOpPlan]:
    """Optimal plan under ``memory_budget`` bytes per GPU (None: unlimited); None if infeasible."""
    if solver not in SOLVERS:
        raise InputError(f"unknown intra-op solver {solver!r} (choose from {', '.join(SOLVERS)})", "solver")
    min_weight = sum(float(w.min()) for w in problem.node_weight)
    if memory_budget is not None and min_weight > memory_budget:
        return None
    choice: Optional[Tuple[int, ...]]
    if all(len(s) == 1 for s in problem.strategies):
        choice = tuple(0 for _ in problem.strategies)
    else:
        choice = _BACKENDS[solver](formulate(problem, memory_budget))
    return None if choice is None else _plan(problem, choice)


def _plan(problem: IntraOpProblem, choice: Sequence[int]) -> IntraOpPlan:
    """The plan of a strategy index per operator: names, objective, weights and collectives."""
    colls = []
    ops = problem.graph.ops
    for i, c in enumerate(choice):
        st = problem.strategies[i][c]
        colls += [(kind, ops[i].out_bytes) for kind in st.comm]
        for u in ops[i].inputs:
            kind = reshard_kind(problem.strategies[u][choice[u]].out_layout, st.in_layout)
            if kind:
                colls.append((kind, ops[u].out_bytes))
    last = len(ops) - 1
    if problem.graph.output_replicated:
        kind = reshard_kind(problem.strategies[last][choice[last]].out_layout, R)
        if kind:
            colls.append((kind, ops[last].out_bytes))
    return IntraOpPlan(
        ops=tuple(op.name for op in ops),
        choice=tuple(problem.strategies[i][c].name for i, c in enumerate(choice)),
        index=tuple(int(c) for c in choice),
        objective_ns=evaluate(problem, tuple(choice)),
        weight_bytes=float(sum(problem.node_weight[i][c] for i, c in enumerate(choice))),
        collectives=tuple(colls),
    )


def _memory_rows(problem: IntraOpProblem, budget: float) -> Tuple[List[np.ndarray], int]:
    """Integer memory coefficients (KiB, rounded up) and budget (rounded down) for the solvers."""
    unit = 1024.0
    rows = [np.ceil(w / unit).astype(np.int64) for w in problem.node_weight]
    return rows, int(budget // unit)


class Marginal(NamedTuple):
    """``sum(variables) == endpoint``: an edge's marginal equals one endpoint's choice."""

    name: str
    variables: Tuple[int, ...]
    endpoint: int


@dataclass(frozen=True)
class IntraOpILP:
    """Alpa's ILP of one problem as plain data (variables by index), built once by
    :func:`formulate` and handed unchanged to either back-end so both optimise the same model.

    Choice variables are 0/1. Edge variables need only lie in [0, 1]: once the choices are
    0/1, an edge's marginal rows leave exactly one of its variables at 1 and the rest at 0,
    so a back-end may relax them.
    """

    names: Tuple[str, ...]  # per variable, in creation order
    integral: Tuple[bool, ...]  # per variable: must be 0/1 (else may be continuous in [0, 1])
    choices: Tuple[Tuple[int, ...], ...]  # per operator, its strategy variables: exactly one is 1
    marginals: Tuple[Marginal, ...]
    objective: Tuple[Tuple[int, int], ...]  # (ns coefficient, variable), minimised
    memory: Optional[Tuple[Tuple[Tuple[int, int], ...], int]]  # (KiB coefficient, variable) terms <= cap


def formulate(problem: IntraOpProblem, memory_budget: Optional[float]) -> IntraOpILP:
    """The ILP of ``problem`` under ``memory_budget`` bytes per GPU (None: no memory row):
    a one-hot choice per operator, per costly edge a one-hot matrix whose row and column
    sums equal the endpoints' choices, the node and nonzero edge costs as the objective.

    Variables are numbered as the back-ends create them: every choice, then edge by edge
    its matrix row-major. Cost tables go through ``.tolist()`` (Python ints, made at C speed).
    """
    names = [f"x{i}_{s}" for i, st in enumerate(problem.strategies) for s in range(len(st))]
    x, first = [], 0
    for st in problem.strategies:
        x.append(tuple(range(first, first + len(st))))
        first += len(st)
    objective = [(c, x[i][s]) for i, costs in enumerate(problem.node_cost) for s, c in enumerate(costs.tolist())]
    marginals = []
    for u, v, mat in problem.edges:
        rows, cols = mat.shape
        base = len(names)  # variable of cell (a, b): base + a * cols + b
        names += [f"e{u}_{v}_{a}_{b}" for a in range(rows) for b in range(cols)]
        marginals += [Marginal(f"mu{u}_{v}_{a}", tuple(range(base + a * cols, base + (a + 1) * cols)), x[u][a])
                      for a in range(rows)]
        marginals += [Marginal(f"mv{u}_{v}_{b}", tuple(range(base + b, base + rows * cols, cols)), x[v][b])
                      for b in range(cols)]
        objective += [(c, base + a * cols + b) for a, row in enumerate(mat.tolist()) for b, c in enumerate(row) if c]
    memory = None
    if memory_budget is not None:
        weights, cap = _memory_rows(problem, memory_budget)
        memory = (tuple((w, x[i][s]) for i, r in enumerate(weights) for s, w in enumerate(r.tolist())), cap)
    integral = (True,) * first + (False,) * (len(names) - first)
    return IntraOpILP(names=tuple(names), integral=integral, choices=tuple(x), marginals=tuple(marginals),
                      objective=tuple(objective), memory=memory)


def _solve_cpsat(ilp: IntraOpILP) -> Optional[Tuple[int, ...]]:
    """Hand ``ilp`` to OR-Tools CP-SAT (every variable Boolean); a choice index per operator."""
    from ortools.sat.python import cp_model
    m = cp_model.CpModel()
    var = [m.NewBoolVar(name) for name in ilp.names]
    for row in ilp.choices:
        m.AddExactlyOne([var[k] for k in row])
    for mg in ilp.marginals:
        m.Add(sum(var[k] for k in mg.variables) == var[mg.endpoint])
    if ilp.memory is not None:
        terms, cap = ilp.memory
        m.Add(sum(c * var[k] for c, k in terms) <= cap)
    m.Minimize(sum(c * var[k] for c, k in ilp.objective))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE:
        return None
    if status != cp_model.OPTIMAL:
        raise RuntimeError(f"CP-SAT did not prove optimality (status {solver.StatusName(status)})")
    return tuple(next(s for s, k in enumerate(row) if solver.Value(var[k])) for row in ilp.choices)


def _solve_highs(ilp: IntraOpILP) -> Optional[Tuple[int, ...]]:
    """Hand ``ilp`` to PuLP + HiGHS (edge variables relaxed); a choice index per operator."""
    import pulp
    m = pulp.LpProblem("intraop", pulp.LpMinimize)
    var = [m.add_variable(name, cat="Binary") if whole else m.add_variable(name, lowBound=0, upBound=1)
           for name, whole in zip(ilp.names, ilp.integral)]
    for i, row in enumerate(ilp.choices):
        m += pulp.lpSum(var[k] for k in row) == 1, f"one_{i}"
    for mg in ilp.marginals:
        m += pulp.lpSum(var[k] for k in mg.variables) == var[mg.endpoint], mg.name
    if ilp.memory is not None:
        terms, cap = ilp.memory
        m += pulp.lpSum(c * var[k] for c, k in terms) <= cap, "memory"
    m += pulp.lpSum(c * var[k] for c, k in ilp.objective)
    with _quiet_stdout():  # highspy prints a banner on stdout when it creates a solver
        status = m.solve(pulp.HiGHS(msg=False, gapRel=0.0, gapAbs=0.5, threads=1))
    if pulp.LpStatus[status] == "Infeasible":
        return None
    if pulp.LpStatus[status] != "Optimal" or m.sol_status != pulp.LpSolutionOptimal:
        raise RuntimeError(f"HiGHS did not prove optimality (status {pulp.LpStatus[status]})")
    return tuple(max(range(len(row)), key=lambda s: var[row[s]].value()) for row in ilp.choices)


_BACKENDS = {"cp-sat": _solve_cpsat, "highs": _solve_highs}


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null for the duration (C-level output included)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real stdout (e.g. captured): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
