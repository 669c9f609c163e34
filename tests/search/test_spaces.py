"""Search spaces: enumeration length equals count, pruning is reported, and kept points are valid."""

import numpy as np
import pytest

from placement_opt.errors import InputError
from placement_opt.spaces import (DeviceBuckets, GroupPartitions, ModelBuckets, ModelSelections, ParallelConfigs,
                                  SearchSettings, allocate_devices, summarize, valid_group_size)
from placement_opt.spaces.partitions import AllPartitions
from placement_opt.spaces.summary import bucket_tasks

from .helpers import TINY, repo_instance, tiny


@pytest.mark.parametrize("n,gpn", [(12, 8), (16, 8), (48, 8), (4, 4), (3, 3), (6, 2)])
def test_group_partitions_count_and_validity(n, gpn):
    gp = GroupPartitions(n, gpn)
    parts = list(gp)
    assert len(parts) == gp.count() <= gp.count_unpruned() == n
    for part in parts:
        assert sum(part) == n
        assert len(set(part[:-1])) <= 1  # equal groups, then the remainder
        assert all(valid_group_size(s, gpn) for s in part)
        assert allocate_devices(part, -(-n // gpn), gpn) is not None
    assert GroupPartitions(12, 8).count() == 4  # sizes 1, 2, 4, 8 (+ remainder 4); 3, 6, 12 straddle


def test_allocate_devices_respects_nodes():
    sizes = (16, 4, 2, 2, 8, 1, 1, 2)
    devs = allocate_devices(sizes, 5, 8)
    flat = [d for g in devs for d in g]
    assert len(flat) == len(set(flat)) == sum(sizes)
    for g, s in zip(devs, sizes):
        assert len(g) == s
        if s <= 8:
            assert len({d // 8 for d in g}) == 1
    assert allocate_devices((8, 8, 8), 2, 8) is None


def test_parallel_configs_fit_memory():
    inst = repo_instance("alpaserve/s3.json")
    budget = inst.cluster.gpu.usable_memory_bytes
    for size in (1, 2, 4, 8, 16):
        pc = ParallelConfigs(inst, size)
        kept = list(pc)
        assert len(kept) == pc.count() <= pc.count_unpruned()
        for pp, tp in kept:
            assert pp * tp == size
            assert any(p.config(pp, tp) is not None and p.config(pp, tp).max_stage_weight_bytes <= budget
                       for p in inst.model_profiles)


def test_model_buckets_separate_far_latencies():
    inst = repo_instance("alpaserve/s3.json")
    lat = [p.reference_latency() for p in inst.model_profiles]
    mb = ModelBuckets(inst, threshold=2.0, max_buckets=6)
    bucketings = list(mb)
    assert len(bucketings) == mb.count() < mb.count_unpruned() == 2 ** 5
    for bk in bucketings:
        assert sorted(m for b in bk for m in b) == list(range(len(inst.models)))
        for b in bk:
            assert max(lat[m] for m in b) <= 2.0 * min(lat[m] for m in b) * (1 + 1e-9)
    # a threshold above every ratio also allows the single bucket
    assert any(len(bk) == 1 for bk in ModelBuckets(inst, threshold=3.0))
    with pytest.raises(InputError):
        ModelBuckets(inst, threshold=0.5)


def test_device_buckets_balance_pruning():
    db = DeviceBuckets(48, [1.0, 2.0, 1.0], unit=4, tolerance=1.5)
    kept = list(db)
    assert len(kept) == db.count() < db.count_unpruned()
    assert all(sum(c) == 48 and all(x % 4 == 0 and x > 0 for x in c) for c in kept)
    assert (12, 24, 12) in kept  # the perfectly balanced split survives
    assert (4, 40, 4) not in kept
    tight = DeviceBuckets(48, [1.0, 2.0, 1.0], unit=4, tolerance=1.0)
    assert list(tight) == [(12, 24, 12)]
    with pytest.raises(InputError):
        DeviceBuckets(10, [1.0, 1.0], unit=4)


@pytest.mark.parametrize("name", TINY)
def test_model_selections_count_matches_enumeration(name):
    inst = tiny(name)
    budget = inst.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
    for configs in ([(1, 1)], [(2, 1), (1, 1)], [(1, 1), (1, 1)], [(1, 2), (2, 1)]):
        if sum(p * t for p, t in configs) > inst.cluster.n_gpus:
            continue
        for symmetric in (False, True):
            ms = ModelSelections(inst, configs, symmetric=symmetric)
            sels = list(ms)
            assert len(sels) == ms.count() <= ms.count_unpruned()
            assert len(set(sels)) == len(sels)
        for sel in ModelSelections(inst, configs):
            for (pp, tp), models in zip(configs, sel):
                used = np.zeros(pp)
                for m in models:
                    used += inst.model_profiles[m].config(pp, tp).stage_weight_bytes
                assert np.all(used <= budget)


def test_all_partitions_count():
    ap = AllPartitions(4, 4)
    parts = list(ap)
    assert len(parts) == ap.count()
    # multisets of {1, 2, 4} with sum <= 4: 4, 2+2, 2+1+1, 2+1, 2, 1x4, 1x3, 1x2, 1
    assert sorted(parts) == sorted([(4,), (2, 2), (2, 1, 1), (2, 1), (2,), (1, 1, 1, 1), (1, 1, 1), (1, 1), (1,)])
    assert ap.count_unpruned() == 11  # 3 (size 3) is not a valid group on a 4-GPU node


def test_summary_reports_pruning():
    inst = repo_instance("alpaserve/s3.json")
    info = summarize(inst, SearchSettings())
    for key, (before, after) in info["levels"].items():
        assert after >= 1
        if before is not None:
            assert after <= before
    assert info["levels"]["greedy_calls"][1] < info["levels"]["greedy_calls"][0]
    # the greedy-call count is the sum of the tasks of the distinct (bucket, devices) pairs
    tasks = bucket_tasks(inst, tuple(range(len(inst.models))), 48, SearchSettings())
    assert all(sum(s) == 48 and len(c) == len(s) for s, c in tasks)
    assert len(tasks) >= 3


def test_summary_counts_follow_max_group_size_and_tp():
    """Partitions and configs kept are those the search enumerates (they ignored both options)."""
    inst = tiny("tiny-4gpu-mixed")
    every = summarize(inst, SearchSettings())["levels"]
    small = summarize(inst, SearchSettings(max_group_size=1))["levels"]
    assert small["group_partitions"][1] < every["group_partitions"][1]
    assert small["parallel_configs"][1] == small["greedy_calls"][1]  # one (1, 1) config per 1-GPU partition
    tp2 = summarize(inst, SearchSettings(tp=2))["levels"]
    assert tp2["parallel_configs"][1] < every["parallel_configs"][1]


def test_buckets_use_the_slo_reference_latency_of_models_that_do_not_fit_one_gpu():
    """A model whose one-GPU config exceeds the memory budget is bucketed (and loaded) by its
    latency on the fewest GPUs that hold it -- the SLO's reference latency -- not by the
    infeasible one-GPU number."""
    from placement_opt import instance_from_dict
    from placement_opt.spaces.buckets import model_loads

    def cfg(pp, lat, gb):
        return {"pp": pp, "tp": 1, "stage_latency_s": {"1": [lat / pp] * pp}, "stage_weight_gb": [gb / pp] * pp}

    inst = instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu": {"name": "g", "memory_gb": 16, "usable_memory_gb": 10}},
        "profiles": {"small": {"weight_gb": 2, "configs": [cfg(1, 0.1, 2)]},
                     "big": {"weight_gb": 16, "configs": [cfg(1, 0.12, 16), cfg(2, 0.5, 16)]}},
        "models": [{"name": "s", "profile": "small"}, {"name": "b", "profile": "big"}],
        "workload": {"duration_s": 10, "arrival": {"process": "poisson", "rate": 2}, "slo": {"scale": 5}},
    })
    budget = inst.cluster.gpu.usable_memory_bytes
    assert inst.model_profiles[1].reference_latency(budget) == pytest.approx(0.5)
    assert list(ModelBuckets(inst, threshold=3.0)) == [((0,), (1,))]  # 0.5 / 0.1 > 3: never together
    req = inst.requests()
    rate_b = (req.model == 1).sum() / req.duration_s
    assert model_loads(inst)[1] == pytest.approx(rate_b * 0.5)
