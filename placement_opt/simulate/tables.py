"""Flatten (instance, groups) into the arrays the Numba kernels read."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from placement_opt.instance import Instance
from placement_opt.placement import Group
from placement_opt.profile import Profile
from placement_opt.settings import SimulatorConfig
from placement_opt.simulate.kernels import HostTables, WarmTables

__all__ = ["HostTables", "WarmTables", "batch_size_grid", "build_tables", "device_scales", "stage_latencies",
           "warm_tables"]


def batch_size_grid(profiles: Sequence[Profile], max_batch: int) -> np.ndarray:
    """Batch sizes (<= max_batch) that any of the profiles has, always including 1."""
    sizes = {1}
    for p in profiles:
        for c in p.configs.values():
            sizes.update(b for b in c.batch_sizes if b <= max_batch)
    return np.array(sorted(sizes), dtype=np.int64)


def stage_latencies(profile: Profile, pp: int, tp: int, batch_sizes: np.ndarray, config: SimulatorConfig,
                    scales: np.ndarray | None = None) -> np.ndarray:
    """[len(batch_sizes), pp] times each request occupies each stage (inf: unprofiled): the
    profiled latency x the per-stage overhead factor (x the stage's device ``scales``, if
    given), plus the profile's measured stage gaps (host work, so not scaled)."""
    cfg = profile.config(pp, tp)
    assert cfg is not None, f"{profile.name} has no pp={pp} tp={tp} config"
    out = np.full((len(batch_sizes), pp), np.inf)
    factor = 1.0 + config.stage_overhead_factor * pp
    for i, b in enumerate(batch_sizes):
        if b in cfg.batch_sizes:
            out[i] = cfg.stage_latency[cfg.batch_sizes.index(int(b))] * factor
            if scales is not None:
                out[i] *= scales
            if cfg.stage_gap_s:
                out[i] += cfg.stage_gap_s
    return out


def device_scales(instance: Instance, group: Group) -> np.ndarray | None:
    """Per-stage latency multipliers of ``group`` from the cluster's ``latency_scale`` (None: all 1)."""
    cluster = instance.cluster
    if not cluster.latency_scale:
        return None
    return np.array([cluster.stage_scale(group.devices[s * group.tp:(s + 1) * group.tp]) for s in range(group.pp)])


def build_tables(instance: Instance, groups: Sequence[Group], config: SimulatorConfig | None = None,
                 batch_sizes: np.ndarray | None = None, model_filter: Sequence[int] | None = None) -> HostTables:
    """Build the host arrays (int32 indices; latency offsets int64). ``model_filter`` restricts
    the hosts to those models."""
    config = config or instance.simulator
    if batch_sizes is None:
        batch_sizes = (batch_size_grid(instance.model_profiles, config.max_batch) if config.batching
                       else np.array([1], dtype=np.int64))
    n_models = len(instance.models)
    index = {m: i for i, m in enumerate(instance.model_names)}
    stage_ptr = np.zeros(len(groups) + 1, dtype=np.int32)
    for g, grp in enumerate(groups):
        stage_ptr[g + 1] = stage_ptr[g] + grp.pp
    hosts_of: list[list[int]] = [[] for _ in range(n_models)]
    for g, grp in enumerate(groups):
        for name in grp.models:
            m = index[name]
            if model_filter is None or m in model_filter:
                hosts_of[m].append(g)
    host_ptr = np.zeros(n_models + 1, dtype=np.int32)
    host_group, host_model, host_lat_ptr, lat_parts = [], [], [], []
    offset = 0
    cache = {}
    for m in range(n_models):
        for g in hosts_of[m]:
            grp = groups[g]
            scales = device_scales(instance, grp)
            key = (m, grp.pp, grp.tp, None if scales is None else tuple(scales))
            if key not in cache:
                cache[key] = stage_latencies(instance.model_profiles[m], grp.pp, grp.tp, batch_sizes, config,
                                             scales).ravel()
            host_group.append(g)
            host_model.append(m)
            host_lat_ptr.append(offset)
            lat_parts.append(cache[key])
            offset += cache[key].size
        host_ptr[m + 1] = len(host_group)
    group_hosts_of: list[list[int]] = [[] for _ in groups]
    for h, g in enumerate(host_group):
        group_hosts_of[g].append(h)
    group_host_ptr = np.zeros(len(groups) + 1, dtype=np.int32)
    for g in range(len(groups)):
        group_host_ptr[g + 1] = group_host_ptr[g] + len(group_hosts_of[g])
    return HostTables(
        host_ptr=host_ptr,
        host_group=np.array(host_group, dtype=np.int32),
        host_model=np.array(host_model, dtype=np.int32),
        host_lat_ptr=np.array(host_lat_ptr, dtype=np.int64),
        lat=np.concatenate(lat_parts) if lat_parts else np.zeros(0),
        stage_ptr=stage_ptr,
        group_host_ptr=group_host_ptr,
        group_hosts=np.array([h for hs in group_hosts_of for h in hs], dtype=np.int32),
        batch_sizes=np.asarray(batch_sizes, dtype=np.int64),
    )


def stage_warm_terms(profile: Profile, pp: int, tp: int, batch_sizes: np.ndarray, config: SimulatorConfig,
                     scales: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """[len(batch_sizes), pp] arrays of the fitted stage clock's terms (see :class:`WarmTables`):
    the occupancy after a long idle time (:func:`stage_latencies` with the latency part x the
    config's ``stage_idle_factor``, the gap unchanged), the heat and cool rates (1 / time), the
    gap and the tail margin. A config without warm-up terms gets its back-to-back time and rates 0
    (heat stays 0), without gaps a gap of 0, without a margin 0."""
    hot = stage_latencies(profile, pp, tp, batch_sizes, config, scales)
    cfg = profile.config(pp, tp)
    assert cfg is not None  # stage_latencies checked it
    gap = np.broadcast_to(np.asarray(cfg.stage_gap_s) if cfg.stage_gap_s else np.zeros(pp), hot.shape).copy()
    tail = np.full_like(hot, cfg.tail_margin)
    if not cfg.warms_up:
        return hot, np.zeros_like(hot), np.zeros_like(hot), gap, tail
    cold = gap + (hot - gap) * np.asarray(cfg.stage_idle_factor)
    return (cold, np.full_like(hot, 1.0 / cfg.heat_time_s), np.full_like(hot, 1.0 / cfg.cool_time_s), gap, tail)


def warm_tables(instance: Instance, groups: Sequence[Group], tables: HostTables,
                config: SimulatorConfig | None = None) -> WarmTables | None:
    """The fitted stage clock's terms of ``tables`` (built by :func:`build_tables` for ``groups``),
    host by host in ``lat``'s layout; None when no hosted model's config has warm-up terms, stage
    gaps or a tail margin (the stage clock is then the back-to-back one, and the kernels without
    them run)."""
    config = config or instance.simulator
    profiles = instance.model_profiles
    used = [profiles[int(m)].config(groups[int(g)].pp, groups[int(g)].tp)
            for m, g in zip(tables.host_model, tables.host_group)]
    if not any(c is not None and (c.warms_up or c.stage_gap_s or c.tail_margin) for c in used):
        return None
    parts: list[tuple[np.ndarray, ...]] = []
    for m, g in zip(tables.host_model, tables.host_group):
        grp = groups[int(g)]
        terms = stage_warm_terms(profiles[int(m)], grp.pp, grp.tp, tables.batch_sizes, config,
                                 device_scales(instance, grp))
        parts.append(tuple(a.ravel() for a in terms))
    return WarmTables(*(np.concatenate([p[k] for p in parts]) for k in range(5)))
