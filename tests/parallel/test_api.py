"""parallelize / enumerate_parallel_configs / architecture_profile and the instance contract."""

import time

import numpy as np
import pytest

from placement_opt import Architecture, ModelSpec, instance_from_dict
from placement_opt.errors import InputError
from placement_opt.parallel import architecture_profile, enumerate_parallel_configs, parallelize

from parallel_fixtures import BERT_1_3B, BERT_6_7B, v100_cluster


def test_single_gpu_memory_equals_the_architecture_weights():
    pm = parallelize(BERT_6_7B, v100_cluster(), 1, 1, 1)
    assert pm.stage_weight_bytes[0] == pytest.approx(BERT_6_7B.weight_bytes(), rel=1e-3)
    assert pm.stage_layers == ((0, 34),)
    assert pm.fits_memory  # 13.3 GB under 13.96 GB


def test_stages_split_memory_and_latency():
    cluster = v100_cluster()
    one = parallelize(BERT_6_7B, cluster, 1, 1, 1)
    for pp, tp in [(2, 1), (4, 2), (2, 8)]:
        pm = parallelize(BERT_6_7B, cluster, pp * tp, pp, tp)
        assert pm.stage_latency.shape == (5, pp)
        assert np.all(np.diff(pm.stage_latency, axis=0) > 0)  # bigger batches take longer
        # every GPU holds about 1/(pp x tp) of the weights (plus the untied LM head copy)
        assert max(pm.stage_weight_bytes) < one.stage_weight_bytes[0] / (pp * tp) * 1.35
        assert pm.stage_latency[0].max() < one.latency(1)
        total = sum(b - a for a, b in pm.stage_layers)
        assert total == BERT_6_7B.layers + 2
        if pp > 1:
            assert all(c.get("send-recv") == 1 for c in pm.stage_collectives[:-1])
        if tp > 1:
            assert pm.stage_collectives[0]["all-reduce"] >= 2


def test_memoised_and_solvers_agree():
    cluster = v100_cluster()
    a = parallelize(BERT_1_3B, cluster, 8, 2, 4)
    assert parallelize(BERT_1_3B, cluster, 8, 2, 4) is a
    b = parallelize(BERT_1_3B, cluster, 8, 2, 4, solver="highs")
    assert b is not a
    np.testing.assert_allclose(a.stage_latency, b.stage_latency, rtol=1e-12)
    assert a.stage_weight_bytes == b.stage_weight_bytes


def test_model_spec_and_bad_configs():
    cluster = v100_cluster()
    spec = ModelSpec(name="m", architecture=BERT_1_3B)
    assert parallelize(spec, cluster, 2, 2, 1) is parallelize(BERT_1_3B, cluster, 2, 2, 1)
    with pytest.raises(InputError, match="n_gpus"):
        parallelize(BERT_1_3B, cluster, 8, 2, 2)
    with pytest.raises(InputError, match="n_gpus"):
        parallelize(BERT_1_3B, cluster, 32, 4, 8)  # the cluster has 16
    with pytest.raises(InputError, match="pp"):
        parallelize(Architecture(layers=2, hidden=64, heads=2), cluster, 8, 8, 1)
    with pytest.raises(InputError, match="architecture"):
        parallelize(ModelSpec(name="p", profile="x"), cluster, 1, 1, 1)


def test_enumerate_keeps_only_configs_that_fit():
    cluster = v100_cluster()
    big = Architecture(layers=40, hidden=5120, heads=40)  # about 26 GB of weights
    assert enumerate_parallel_configs(big, 1, cluster) == []
    assert enumerate_parallel_configs(big, 2, cluster) == [(2, 1), (1, 2)]
    four = enumerate_parallel_configs(ModelSpec(name="big", architecture=big), 4, cluster)
    assert four == [(4, 1), (2, 2), (1, 4)]
    assert all(parallelize(big, cluster, 4, pp, tp).fits_memory for pp, tp in four)
    # a config that does not fit keeps honest (over-budget) memory numbers
    over = parallelize(big, cluster, 1, 1, 1)
    assert not over.fits_memory and over.stage_weight_bytes[0] == pytest.approx(big.weight_bytes(), rel=1e-3)


def test_architecture_profile_contract():
    cluster = v100_cluster()
    prof = architecture_profile("bert", BERT_1_3B, cluster)
    assert set(prof.configs) == {(1, 1), (2, 1), (1, 2), (4, 1), (2, 2), (1, 4), (8, 1), (4, 2), (2, 4), (1, 8),
                                 (16, 1), (8, 2), (4, 4), (2, 8)}
    cfg = prof.config(4, 2)
    assert cfg.batch_sizes == (1, 2, 4, 8, 16) and cfg.stage_latency.shape == (5, 4)
    assert len(cfg.stage_weight_bytes) == 4 and cfg.stage_layers[-1][1] == prof.layers == 26
    assert prof.weight_bytes == BERT_1_3B.weight_bytes()
    assert architecture_profile("other", BERT_1_3B, cluster).configs[(4, 2)] is cfg


def test_instance_with_many_architecture_models_loads_fast():
    data = {
        "cluster": {"nodes": 4, "gpus_per_node": 8,
                    "gpu": {"name": "V100-16GB", "memory_gb": 16, "usable_memory_gb": 13.96}},
        "models": [{"name": "a", "count": 30, "architecture": {"layers": 24, "hidden": 2048, "heads": 32}},
                   {"name": "b", "count": 30, "architecture": {"layers": 32, "hidden": 2560, "heads": 40}}],
        "workload": {"duration_s": 10, "arrival": {"process": "poisson", "rate": 2.0},
                     "rate_split": {"kind": "equal"}, "slo": {"scale": 5}},
    }
    start = time.perf_counter()
    inst = instance_from_dict(data)
    profiles = inst.model_profiles
    elapsed = time.perf_counter() - start
    assert len(profiles) == 60 and profiles[0].configs[(2, 2)] is profiles[29].configs[(2, 2)]
    assert (16, 2) in profiles[0].configs and (4, 8) in profiles[0].configs
    assert (32, 1) not in profiles[0].configs  # more stages than the 26 units
    assert elapsed < 30  # generous: two distinct architectures, each profiled once
    assert inst.slo_seconds()[0] == pytest.approx(5 * profiles[0].config(1, 1).latency(1))


def test_lean_plans_when_the_fast_plan_does_not_fit():
    from placement_opt import Cluster, GPUSpec, Link
    tiny = Architecture(layers=4, hidden=512, heads=8, seq_len=8, vocab=1024)
    slow = Link(bandwidth=1e9, latency_s=1e-2)  # collectives so slow that replication is fastest
    roomy = GPUSpec(name="toy", memory_bytes=1e9, usable_memory_bytes=1e9, peak_fp16_flops=1e12,
                    memory_bandwidth=1e11)
    fast = parallelize(tiny, Cluster(1, 2, roomy, slow, slow), 2, 1, 2)
    assert fast.stage_lean == (False,) and fast.stage_collectives[0] == {}
    budget = fast.stage_weight_bytes[0] * 0.7
    tight_gpu = GPUSpec(name="toy", memory_bytes=1e9, usable_memory_bytes=budget, peak_fp16_flops=1e12,
                        memory_bandwidth=1e11)
    lean = parallelize(tiny, Cluster(1, 2, tight_gpu, slow, slow), 2, 1, 2)
    assert lean.stage_lean == (True,) and lean.fits_memory
    assert lean.stage_weight_bytes[0] <= budget
    assert lean.latency(1) > fast.latency(1)


def test_two_dimensional_mesh_and_grouped_query_attention():
    cluster = v100_cluster(nodes=2, gpus_per_node=8)
    llama = Architecture(layers=8, hidden=4096, heads=32, kv_heads=8, seq_len=1024, vocab=32000)
    in_node = parallelize(llama, cluster, 8, 1, 8)
    across = parallelize(llama, cluster, 16, 1, 16)  # a stage spanning both nodes
    ops = dict(zip(in_node.plans["transformer"][0].ops, in_node.plans["transformer"][0].choice))
    assert ops["attention"] == "heads"  # 8 kv heads split over 8 GPUs
    ops16 = dict(zip(across.plans["transformer"][0].ops, across.plans["transformer"][0].choice))
    assert ops16["attention"] == "replicated"  # 8 kv heads cannot split 16 ways
    assert across.stage_weight_bytes[0] < in_node.stage_weight_bytes[0]
    # the inter-node all-reduces make the 16-GPU stage slower than the 8-GPU one
    assert across.latency(1) > in_node.latency(1)
