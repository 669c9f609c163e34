"""The searches' records: the greedy's public stats and interrupted result, the AlpaServe
search's per-pair choice (more accepted, then refined before screened, then the earlier task)."""

import pytest

from placement_opt.simulate.evaluator import PlacementEvaluator
from placement_opt.solvers.alpaserve import AlpaServe, Phase, PairBest, TaskResult, _Search
from placement_opt.solvers.alpaserve_greedy import fixed_partition
from placement_opt.solvers.greedy import greedy_selection

from .helpers import shortened, tiny

STATS_KEYS = ["rounds", "candidates_evaluated", "candidates_pruned", "simulations", "timed_out", "interrupted",
              "accepted", "best_attainment", "seconds"]


@pytest.mark.parametrize("fast", [False, True])
def test_greedy_stats_keys(fast):
    inst = tiny("tiny-4gpu-mixed")
    _, stats = greedy_selection(inst, fixed_partition(inst, 1, 1), beam=2, fast=fast)
    assert list(stats) == STATS_KEYS


class _InterruptingEvaluator(PlacementEvaluator):
    """Raises KeyboardInterrupt at the ``limit``-th component simulation."""

    def __init__(self, instance, limit: int):
        super().__init__(instance)
        self.calls = 0
        self.limit = limit

    def component_result(self, configs, model_lists, models, min_accepted=None):
        self.calls += 1
        if self.calls == self.limit:
            raise KeyboardInterrupt
        return super().component_result(configs, model_lists, models, min_accepted)


def test_interrupted_beam_search_returns_the_best_finished_round():
    inst = shortened("alpaserve/s1.json", 30)
    shells = fixed_partition(inst, 4, 1)
    _, full = greedy_selection(inst, shells, beam=2)
    assert full["rounds"] > 2
    ev = _InterruptingEvaluator(inst, limit=full["candidates_evaluated"] // 2)
    groups, stats = greedy_selection(inst, shells, beam=2, evaluator=ev)
    assert stats["interrupted"] and list(stats) == STATS_KEYS
    assert 0 < stats["accepted"] < full["accepted"]
    assert stats["accepted"] == int(PlacementEvaluator(inst).accepted_per_model(groups).sum())


def test_pair_best_ranking():
    assert PairBest(10, Phase.REFINE, 3).rank() > PairBest(10, Phase.SCREEN, 0).rank()
    assert PairBest(10, Phase.SCREEN, 1).rank() > PairBest(10, Phase.SCREEN, 2).rank()
    assert PairBest(11, Phase.SCREEN, 5).rank() > PairBest(10, Phase.REFINE, 0).rank()


def test_search_records_keep_each_pairs_best():
    inst = tiny("tiny-4gpu-mixed")
    search = _Search(inst, AlpaServe.Options(progress=False), None)
    search._record(Phase.SCREEN, 0, 2, TaskResult(5, ((0,),)))
    search._record(Phase.SCREEN, 0, 1, TaskResult(5, ((1,),)))
    assert search.pair_best[0] == PairBest(5, Phase.SCREEN, 1)
    search._record(Phase.REFINE, 0, 3, TaskResult(5, ((0, 1),)))
    assert search.pair_best[0] == PairBest(5, Phase.REFINE, 3)
    search._record(Phase.SCREEN, 0, 0, TaskResult(4, ((1,),)))
    assert search.pair_best[0] == PairBest(5, Phase.REFINE, 3)
    assert search.accepted_values[(0, Phase.SCREEN)] == [5, 5, 4]
    assert search._kth_best(Phase.SCREEN, 0) == 5  # refine_tasks = 2
