"""The whole Algorithm 2 space of an instance: bucketings, device buckets, partitions, configs.

:class:`SearchSettings` holds the knobs of the enumeration; :func:`bucket_tasks` lists the
(partition, configs) choices for one model bucket on ``n`` devices (one Algorithm 1 call
each); :func:`summarize` counts every level before and after pruning.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from placement_opt.instance import Instance
from placement_opt.spaces.buckets import DeviceBuckets, ModelBuckets, model_loads
from placement_opt.spaces.configs import ParallelConfigs, distinct_models
from placement_opt.spaces.partitions import GroupPartitions
from placement_opt.validation import option
from placement_opt.workload import Requests

#: A model bucket (model indices) and a bucketing (the buckets of one split of the models).
Bucket = Tuple[int, ...]
Bucketing = Tuple[Bucket, ...]
#: One Algorithm 1 call: group sizes of a device bucket and the (pp, tp) of every group.
BucketTask = Tuple[Tuple[int, ...], Tuple[Tuple[int, int], ...]]


@dataclass(frozen=True)
class SearchSettings:
    """Enumeration knobs of the AlpaServe search, declared once: the ``alpaserve`` solver's
    options extend this class, so they are its options too (``-O bucket_threshold=2``)."""

    bucket_threshold: float = option(3.0, minimum=1,
                                     help="latency ratio above which models go to different buckets")
    max_buckets: int = option(3, minimum=1, help="most model buckets in a bucketing")
    device_unit: int = option(0, minimum=0, help="device-bucket granularity in GPUs; 0 = auto (see auto_unit)")
    balance_tolerance: float = option(2.0, minimum=1, help="keep device buckets whose devices per load differ "
                                                           "from the cluster's by at most this factor")
    group_sizes: Tuple[int, ...] = option((), minimum=1,
                                          help="allowed group sizes; empty = all that respect node boundaries")
    max_group_size: int = option(0, minimum=0, help="largest group size; 0 = no limit")
    tp: int = option(0, minimum=0, help="force this tensor-parallel degree; 0 = any")


def auto_unit(n_gpus: int, gpus_per_node: int) -> int:
    """The smallest divisor of the node size that cuts the cluster into at most 16 units."""
    for u in range(1, gpus_per_node + 1):
        if gpus_per_node % u == 0 and n_gpus % u == 0 and n_gpus // u <= 16:
            return u
    return gpus_per_node if n_gpus % gpus_per_node == 0 else 1


def min_devices(instance: Instance, models: Bucket) -> int:
    """The fewest GPUs on which every model of the bucket fits in some profiled config."""
    budget = instance.cluster.gpu.usable_memory_bytes * (1 + 1e-9)
    need = 1
    for m in models:
        sizes = [c.n_gpus for c in instance.model_profiles[m].configs.values() if c.max_stage_weight_bytes <= budget]
        need = max(need, min(sizes) if sizes else instance.cluster.n_gpus)
    return need


def bucket_tasks(instance: Instance, models: Bucket, n_devices: int, settings: SearchSettings) -> List[BucketTask]:
    """Every (group sizes, configs) for ``models`` on ``n_devices``: equal groups share one config,
    the remainder group has its own."""
    cl = instance.cluster
    sizes = settings.group_sizes or None
    kinds = distinct_models(instance, models)  # the same configs, computed from a few models
    tasks: List[BucketTask] = []
    for part in GroupPartitions(n_devices, cl.gpus_per_node, sizes):
        s = part[0]
        if settings.max_group_size and s > settings.max_group_size:
            continue
        tp = settings.tp or None
        main = list(ParallelConfigs(instance, s, kinds, tp))
        rem = part[-1] if part[-1] != s else None
        if rem is None:
            tasks += [(part, (c,) * len(part)) for c in main]
            continue
        rest = list(ParallelConfigs(instance, rem, kinds, tp))
        tasks += [(part, (c,) * (len(part) - 1) + (r,)) for c, r in itertools.product(main, rest)]
    return tasks


def bucket_tasks_unpruned(instance: Instance, models: Bucket, n_devices: int) -> int:
    """Algorithm 1 calls without node-boundary and memory pruning: every group size x every
    pp x tp factorisation of the equal groups and of the remainder group."""
    total = 0
    for s in range(1, n_devices + 1):
        r = n_devices % s
        total += ParallelConfigs(instance, s, models).count_unpruned() * (
            ParallelConfigs(instance, r, models).count_unpruned() if r else 1)
    return total


@dataclass
class Plan:
    """The enumerated space: bucketings with their device compositions, and the distinct
    (bucket, devices) pairs that need an Algorithm 1 search."""

    bucketings: List[Bucketing]
    compositions: Dict[Bucketing, List[Tuple[int, ...]]]  # bucketing -> its device counts per bucket
    pairs: List[Tuple[Bucket, int]]  # distinct (bucket, n_devices)
    unit: int
    counts: Dict[str, Tuple[int, int]]  # level -> (unpruned, kept)


def plan(instance: Instance, settings: SearchSettings, requests: Optional[Requests] = None,
         checkpoint: Optional[Callable[[], None]] = None) -> Plan:
    """The space of ``instance`` under ``settings``; loads from ``requests`` (default: the instance's).

    ``checkpoint`` is called before each bucketing's device splits are enumerated (the costly
    step: thousands of splits per bucketing at a thousand GPUs) and may raise to stop the
    enumeration; the ``alpaserve`` search raises ``SearchStopped`` there once its deadline passed."""
    cl = instance.cluster
    unit = settings.device_unit or auto_unit(cl.n_gpus, cl.gpus_per_node)
    loads = model_loads(instance, requests)
    mb = ModelBuckets(instance, settings.bucket_threshold, max_buckets=settings.max_buckets)
    bucketings = list(mb)
    compositions: Dict[Bucketing, List[Tuple[int, ...]]] = {}
    pairs: Dict[Tuple[Bucket, int], None] = {}  # insertion-ordered set
    dev_unpruned = 0
    for bk in bucketings:
        if checkpoint is not None:
            checkpoint()
        db = DeviceBuckets(cl.n_gpus, [loads[list(b)].sum() for b in bk], unit, settings.balance_tolerance,
                           [min_devices(instance, b) for b in bk])
        comps = list(db)
        dev_unpruned += db.count_unpruned()
        compositions[bk] = comps
        for comp in comps:
            for b, n in zip(bk, comp):
                pairs.setdefault((b, n), None)
    counts = {"model_bucketings": (mb.count_unpruned(), len(bucketings)),
              "device_buckets": (dev_unpruned, sum(len(v) for v in compositions.values()))}
    return Plan(bucketings, compositions, list(pairs), unit, counts)


def summarize(instance: Instance, settings: Optional[SearchSettings] = None) -> dict:
    """Sizes of every level of the space, before and after pruning (``placeopt space``)."""
    settings = settings or SearchSettings()
    p = plan(instance, settings)
    tasks_kept = 0
    tasks_unpruned = 0
    part_kept = part_unpruned = cfg_kept = cfg_unpruned = 0
    per_pair: Dict[Tuple[Bucket, int], int] = {}
    for b, n in p.pairs:
        per_pair[(b, n)] = len(bucket_tasks(instance, b, n, settings))
        gp = GroupPartitions(n, instance.cluster.gpus_per_node, settings.group_sizes or None)
        part_unpruned += gp.count_unpruned()
        for part in gp:
            if settings.max_group_size and part[0] > settings.max_group_size:
                continue  # as bucket_tasks prunes it
            part_kept += 1
            pc = ParallelConfigs(instance, part[0], b, settings.tp or None)
            cfg_kept += pc.count()
            cfg_unpruned += pc.count_unpruned()
        tasks_kept += per_pair[(b, n)]
        tasks_unpruned += bucket_tasks_unpruned(instance, b, n)
    rows: Dict[str, Tuple[Optional[int], int]] = {
        "model_bucketings": p.counts["model_bucketings"],
        "device_buckets": p.counts["device_buckets"],
        "bucket_device_pairs": (None, len(p.pairs)),
        "group_partitions": (part_unpruned, part_kept),
        "parallel_configs": (cfg_unpruned, cfg_kept),
        "greedy_calls": (tasks_unpruned, tasks_kept),
        # the paper's nested loops call Algorithm 1 again for a bucket in every bucketing and
        # device split that contains it; a (bucket, devices) pair is searched once here
        "greedy_calls_reused": (sum(per_pair[(b, n)] for bk in p.bucketings for comp in p.compositions[bk]
                                    for b, n in zip(bk, comp)), tasks_kept),
    }
    return {"instance": instance.name, "models": len(instance.models), "gpus": instance.cluster.n_gpus,
            "device_unit": p.unit, "levels": rows}
