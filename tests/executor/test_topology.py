"""Rank layout of a placement (pure Python)."""

import pytest

from placement_opt.errors import InputError
from placement_opt.executor.topology import even_layer_split, model_layer_range, rank_plans, tp_groups
from placement_opt.placement import Group


def test_pipeline_of_tensor_parallel_stages():
    groups = [Group(devices=(4,), models=()),  # serves nothing: no process
              Group(devices=(0, 1, 2, 3), pp=2, tp=2, models=("a",)), Group(devices=(5,), models=("b",))]
    plans = rank_plans(groups, {"a": 6, "b": 3})
    assert [p.device for p in plans] == [0, 1, 2, 3, 5]
    by_dev = {p.device: p for p in plans}
    assert by_dev[0].stage == 0 and by_dev[0].tp_rank == 0 and by_dev[0].next_rank == 2
    assert by_dev[1].tp_ranks == (0, 1) and by_dev[1].next_rank == 3 and by_dev[1].prev_rank is None
    assert by_dev[3].stage == 1 and by_dev[3].prev_rank == 1 and by_dev[3].is_last_stage
    assert by_dev[5].group == 2 and by_dev[5].is_first_stage and by_dev[5].is_last_stage
    assert tp_groups(plans) == [(0, 1), (2, 3)]
    assert model_layer_range(groups[1], 1, 6) == (3, 6)


def test_layer_ranges():
    assert even_layer_split(5, 2) == ((0, 2), (2, 5)) or even_layer_split(5, 2) == ((0, 3), (3, 5))
    g = Group(devices=(0, 1), pp=2, models=("a",), stage_layers=((0, 1), (1, 4)))
    assert model_layer_range(g, 0, 4) == (0, 1)
    with pytest.raises(InputError, match="cover 4 layers"):
        model_layer_range(g, 0, 6)
    with pytest.raises(InputError, match="stages but only"):
        even_layer_split(2, 3)
