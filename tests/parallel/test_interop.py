"""Inter-op DP: exact agreement with brute force, never worse than uniform splitting."""

import itertools

import numpy as np
import pytest

from placement_opt.parallel import parallelize, parallelize_uniform
from placement_opt.parallel.interop import stage_dp, uniform_partition

from parallel_fixtures import BERT_1_3B, BERT_2_6B, v100_cluster


def _stage_cost(a, b, s, stages, lf, mf, ll, ml, send, budget):
    extra = send[s] if s < stages - 1 else 0.0
    if mf[a:b].sum() <= budget:
        return lf[a:b].sum() + extra
    if ml[a:b].sum() <= budget:
        return ll[a:b].sum() + extra
    return np.inf


def _brute(lf, mf, ll, ml, send, budget, stages):
    k = len(lf)
    best = np.inf
    for cuts in itertools.combinations(range(1, k), stages - 1):
        bounds = list(zip((0,) + cuts, cuts + (k,)))
        val = max(_stage_cost(a, b, s, stages, lf, mf, ll, ml, send, budget) for s, (a, b) in enumerate(bounds))
        best = min(best, val)
    return best


@pytest.mark.parametrize("seed", range(25))
def test_dp_equals_brute_force_on_random_chains(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 10))
    lf = rng.uniform(0.1, 2.0, k)
    ll = lf * rng.uniform(1.0, 1.5, k)
    mf = rng.uniform(1.0, 4.0, k)
    ml = mf * rng.uniform(0.3, 1.0, k)
    max_stages = int(rng.integers(1, k + 1))
    send = rng.uniform(0.0, 0.3, max_stages)
    budget = float(rng.choice([np.inf, rng.uniform(2.0, 8.0)]))
    table = stage_dp(lf, mf, ll, ml, send, budget, max_stages)
    for stages in range(1, max_stages + 1):
        expected = _brute(lf, mf, ll, ml, send, budget, stages)
        got = table.cost[stages, k]
        assert got == pytest.approx(expected, rel=1e-12) if np.isfinite(expected) else not np.isfinite(got)
        part = table.partition(stages)
        if np.isfinite(expected):
            # the reconstructed split achieves the optimum
            vals = [_stage_cost(a, b, s, stages, lf, mf, ll, ml, send, budget) for s, (a, b) in enumerate(part.bounds)]
            assert max(vals) == pytest.approx(expected, rel=1e-12)
            assert part.bounds[0][0] == 0 and part.bounds[-1][1] == k
    best = table.best_stage_count()
    finals = table.cost[1:, k]
    if np.isfinite(finals).any():
        assert table.cost[best, k] == finals.min()


def test_uniform_partition_puts_embedding_first_and_head_last():
    assert uniform_partition(24, 4) == ((0, 7), (7, 13), (13, 19), (19, 26))
    assert uniform_partition(3, 3) == ((0, 2), (2, 3), (3, 5))


@pytest.mark.parametrize("arch", [BERT_1_3B, BERT_2_6B])
@pytest.mark.parametrize("pp,tp", [(2, 1), (4, 1), (8, 1), (4, 2)])
def test_dp_never_worse_than_uniform(arch, pp, tp):
    cluster = v100_cluster()
    dp = parallelize(arch, cluster, pp * tp, pp, tp)
    uni = parallelize_uniform(arch, cluster, pp * tp, pp, tp)
    assert dp.stage_latency[0].max() <= uni.stage_latency[0].max() * (1 + 1e-12)


def test_dp_beats_uniform_with_heterogeneous_units():
    # embedding and LM head make the first/last uniform stages heavier (paper Fig. 16)
    cluster = v100_cluster()
    dp = parallelize(BERT_1_3B, cluster, 8, 8, 1)
    uni = parallelize_uniform(BERT_1_3B, cluster, 8, 8, 1)
    assert dp.stage_latency[0].max() < 0.95 * uni.stage_latency[0].max()


def test_inter_op_table_matches_parallelize_and_picks_the_best_stage_count():
    from placement_opt.parallel import inter_op_table
    cluster = v100_cluster()
    table = inter_op_table(BERT_1_3B, cluster, 16, 2)
    assert table.max_stages == 8 and table.units == 26
    for stages in (1, 2, 4, 8):
        pm = parallelize(BERT_1_3B, cluster, stages * 2, stages, 2)
        part = table.partition(stages)
        assert part.max_latency == pytest.approx(pm.stage_latency[0].max(), rel=1e-9)
    best = table.best_stage_count()
    assert table.cost[best, 26] == table.cost[1:, 26].min()
    assert best == 8  # more stages keep lowering the slowest stage of this model
