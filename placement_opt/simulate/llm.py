"""The LLM simulator (MuxServe): every mesh simulated iteration by iteration.

:func:`simulate_llm` checks a placement's meshes (one stage each, weights plus KV cache
within memory), splits the requests over the meshes that host their LLM, runs the Numba
kernel :func:`placement_opt.simulate.meshsim.simulate_mesh` per mesh and computes the metrics.

Semantics (details in the kernel's docstring and ``docs/llm.md``):

* a mesh is a group with ``pp = 1`` and ``tp`` = its size; its LLMs run prefill and decode
  jobs at their SM share (``Group.sm_share``, 1 when absent); the ``temporal`` policy gives
  every job the whole mesh and runs them one at a time in FCFS order;
* the KV pool is the mesh's usable memory, less ``llm.kv_reserve_fraction``, less the
  weights; an LLM hosted by several meshes gets its requests round robin;
* each request's SLO is the workload's scale x its own single-LLM latency (its prefill and
  decode steps alone at batch 1 on the LLM's smallest TP degree with all SMs), or the
  absolute ``slo.seconds``;
* arrivals stop at the workload's duration and the simulation runs ``llm.drain_s`` longer;
  an LLM's throughput is its finished requests over its span: the duration, or until its last
  request finished if later, or the whole simulated time if some of its requests never
  finished; the total is the sum over LLMs and ``throughput_weighted_rps`` their
  rate-weighted mean (the MuxServe paper's metric).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from placement_opt.errors import InputError
from placement_opt.settings import POLICIES
from placement_opt.costs.interp import lookup_batches, lookup_lengths
from placement_opt.simulate.meshsim import ADBS, FCFS, ROUND_ROBIN, simulate_mesh
from placement_opt.llm_units import llm_config, llm_specs, mesh_kv_pool_bytes

KIB = 1024
UTILISATION_BINS = 60
_POLICY_CODE = {"adbs": ADBS, "round-robin": ROUND_ROBIN, "fcfs": FCFS, "temporal": FCFS}


def resolve_policy(instance, placement, policy: Optional[str] = None) -> str:
    """An explicit policy, else the placement's ``scheduling`` (the temporal baseline sets
    it), else the instance's ``llm.policy``."""
    policy = policy or placement.scheduling or llm_config(instance).policy
    if policy not in POLICIES:
        raise InputError(f"must be one of {', '.join(POLICIES)}, got {policy!r}", "llm.policy")
    return policy


def check_llm_groups(instance, groups, specs=None) -> list:
    """KV pool bytes of every group; raises InputError for a multi-stage or overfull mesh."""
    specs = specs or llm_specs(instance)
    index = {s.name: s for s in specs}
    pools = []
    for gi, g in enumerate(groups):
        if g.pp != 1:
            raise InputError("an LLM mesh has one stage (pp = 1, tp = mesh size)", f"groups[{gi}].pp")
        weights = sum(index[m].weight_bytes for m in g.models)
        pool = mesh_kv_pool_bytes(instance, g.n_gpus, weights)
        need = sum(index[m].kv_bytes_per_token * index[m].tokens_per_request for m in g.models)
        if g.models and pool < need:
            raise InputError(f"weights of {weights / 1e9:.1f} GB leave {max(pool, 0) / 1e9:.2f} GB of KV cache on "
                             f"{g.n_gpus} GPU(s), less than one request of each LLM needs ({need / 1e9:.2f} GB)",
                             f"groups[{gi}].models")
        pools.append(pool)
    return pools


def request_slo_seconds(instance, specs, req, prompts, outputs) -> np.ndarray:
    """Per-request SLO: scale x single-LLM latency of that request, or the absolute seconds."""
    slo = np.empty(len(req))
    for s in specs:
        mask = req.model == s.index
        if not mask.any():
            continue
        spec = instance.slo_overrides.get(s.name, instance.workload.slo)
        if spec.seconds is not None:
            slo[mask] = spec.seconds
            continue
        tp = s.table.tp_degrees[0]
        bgrid, lgrid, p2, d2 = s.table.at_share(tp, 1.0)
        prompt = prompts[mask].astype(np.float64)
        output = outputs[mask].astype(np.float64)
        lat = lookup_lengths(p2, bgrid, lgrid, 1.0, prompt)
        lat += np.maximum(output - 1, 0) * lookup_lengths(d2, bgrid, lgrid, 1.0, prompt + output / 2.0)
        slo[mask] = spec.scale * lat
    return slo


def _with_lengths(instance, req):
    if req.prompt_tokens is not None:
        return req.prompt_tokens.astype(np.int64), req.output_tokens.astype(np.int64)
    cfg = llm_config(instance)
    n = len(req)
    return (np.full(n, int(round(cfg.prompt_tokens)), dtype=np.int64),
            np.full(n, int(round(cfg.output_tokens)), dtype=np.int64))


def _mesh_tables(mesh_specs, tp, shares, max_batch):
    """Latency tables of the mesh's LLMs resampled on one length grid: [k, batch 0..max, len]."""
    lgrid = np.unique(np.concatenate([s.table.table_for(tp).seq_len for s in mesh_specs]))
    K = len(mesh_specs)
    P = np.empty((K, max_batch + 1, len(lgrid)))
    D = np.empty_like(P)
    batches = np.arange(max_batch + 1, dtype=np.float64)
    batches[0] = 1.0
    for k, (s, sh) in enumerate(zip(mesh_specs, shares)):
        bgrid, sgrid, p2, d2 = s.table.at_share(tp, sh)
        for j, length in enumerate(lgrid):
            P[k, :, j] = lookup_batches(p2, bgrid, sgrid, batches, float(length))
            D[k, :, j] = lookup_batches(d2, bgrid, sgrid, batches, float(length))
    return P, D, lgrid


def simulate_llm(instance, placement, requests=None, policy: Optional[str] = None) -> dict:
    """Simulate an LLM placement; returns the metrics described in ``docs/llm.md``."""
    if placement.windows:
        raise InputError("time-varying placements (windows) are not supported for LLM instances", "windows")
    cfg = llm_config(instance)
    policy = resolve_policy(instance, placement, policy)
    specs = llm_specs(instance)
    req = instance.requests() if requests is None else requests
    groups = placement.groups
    pools = check_llm_groups(instance, groups, specs)
    prompt, output = _with_lengths(instance, req)
    n = len(req)
    duration = req.duration_s
    horizon = duration + cfg.drain_s
    index = {s.name: s.index for s in specs}

    hosts = {}
    for gi, g in enumerate(groups):
        for m in g.models:
            hosts.setdefault(index[m], []).append(gi)
    mesh_of = np.full(n, -1, dtype=np.int64)
    for m, gs in hosts.items():
        idx = np.flatnonzero(req.model == m)
        mesh_of[idx] = np.asarray(gs)[np.arange(len(idx)) % len(gs)]

    first = np.full(n, -1.0)
    finish = np.full(n, -1.0)
    preempt = np.zeros(n, dtype=np.int64)
    stop = duration
    group_metrics = []
    kv_share = np.zeros(len(specs))
    for gi, g in enumerate(groups):
        if not g.models:
            group_metrics.append({"models": [], "sm_utilisation": 0.0, "kv_utilisation": 0.0})
            continue
        mesh_specs = [specs[index[m]] for m in g.models]
        shares = [1.0] * len(g.models) if policy == "temporal" or g.sm_share is None else list(g.sm_share)
        P, D, lgrid = _mesh_tables(mesh_specs, g.tp, shares, cfg.max_batch)
        sel = np.flatnonzero(mesh_of == gi)
        local = {s.index: k for k, s in enumerate(mesh_specs)}
        llm_local = np.array([local[m] for m in req.model[sel]], dtype=np.int64)
        kvu = np.array([int(np.ceil(s.kv_bytes_per_token / KIB)) for s in mesh_specs], dtype=np.int64)
        pool_kib = int(pools[gi] // KIB)
        f1 = np.empty(len(sel))
        f2 = np.empty(len(sel))
        pc = np.zeros(len(sel), dtype=np.int64)
        sm_bins = np.zeros(UTILISATION_BINS)
        kv_bins = np.zeros(UTILISATION_BINS)
        kv_llm = np.zeros(len(mesh_specs))
        peak = np.zeros(2)
        t_stop = simulate_mesh(req.arrival[sel], llm_local, prompt[sel], output[sel], len(mesh_specs),
                               np.asarray(shares, dtype=np.float64), P, D, lgrid.astype(np.float64), kvu,
                               np.array([s.rate for s in mesh_specs]), pool_kib, cfg.kv_block_tokens,
                               cfg.max_batch, cfg.prefill_token_budget, _POLICY_CODE[policy],
                               cfg.rebalance_period_s, cfg.rebalance_fraction, horizon, UTILISATION_BINS,
                               f1, f2, pc, sm_bins, kv_bins, kv_llm, peak)
        first[sel], finish[sel], preempt[sel] = f1, f2, pc
        stop = max(stop, t_stop)
        span = max(t_stop, 1e-9)
        bin_w = horizon / UTILISATION_BINS
        for k, s in enumerate(mesh_specs):
            kv_share[s.index] += kv_llm[k] / (span * pool_kib)
        group_metrics.append({
            "models": list(g.models),
            "sm_share": shares,
            "kv_pool_gb": round(pools[gi] / 1e9, 3),
            "kv_peak_utilisation": float(peak[0] / pool_kib),
            "sm_peak": float(peak[1]),
            "sm_utilisation": float(sm_bins.sum() / span),
            "kv_utilisation": float(kv_bins.sum() / (span * pool_kib)),
            "sm_utilisation_series": [round(float(x / bin_w), 4) for x in sm_bins],
            "kv_utilisation_series": [round(float(x / (bin_w * pool_kib)), 4) for x in kv_bins],
            "preemptions": int(pc.sum()),
        })
    slo = request_slo_seconds(instance, specs, req, prompt, output)
    return llm_metrics(instance, specs, req, prompt, output, first, finish, preempt, slo, stop, groups,
                       group_metrics, kv_share, policy)


def _stats(prefix: str, values: np.ndarray) -> dict:
    if values.size == 0:
        return {f"{prefix}_mean_s": None, f"{prefix}_p50_s": None, f"{prefix}_p90_s": None, f"{prefix}_p99_s": None}
    return {f"{prefix}_mean_s": float(values.mean()), f"{prefix}_p50_s": float(np.percentile(values, 50)),
            f"{prefix}_p90_s": float(np.percentile(values, 90)), f"{prefix}_p99_s": float(np.percentile(values, 99))}


def llm_metrics(instance, specs, req, prompt, output, first, finish, preempt, slo, stop, groups, group_metrics,
                kv_share, policy) -> dict:
    """Overall and per-LLM metrics from per-request outcomes (``finish`` -1 unfinished, -2 dropped)."""
    n = len(req)
    span = max(stop, req.duration_s)
    done = finish >= 0
    # An LLM's serving span: the workload's duration, or until its last request finished, or the
    # whole simulated time when some of its requests never did (it was overloaded).
    model_span = np.full(len(specs), req.duration_s)
    if done.any():
        np.maximum.at(model_span, req.model[done], finish[done])
    model_span[np.unique(req.model[finish == -1])] = span
    lat = finish - req.arrival
    ok = done & (lat <= slo * (1 + 1e-12))
    ttft = (first - req.arrival)[done]
    multi = done & (output > 1)
    tpot = (finish[multi] - first[multi]) / (output[multi] - 1)
    counts = np.bincount(req.model, minlength=len(specs))
    fin = np.bincount(req.model[done], minlength=len(specs))
    good = np.bincount(req.model[ok], minlength=len(specs))
    tokens = np.bincount(req.model[done], weights=output[done], minlength=len(specs))
    per_model = {}
    for s in specs:
        m = s.index
        mask = done & (req.model == m)
        per_model[s.name] = {
            "requests": int(counts[m]), "accepted": int(good[m]), "finished": int(fin[m]),
            "slo_attainment": float(good[m] / counts[m]) if counts[m] else 1.0,
            "rate_rps": s.rate,
            "throughput_rps": float(fin[m] / model_span[m]), "tokens_per_s": float(tokens[m] / model_span[m]),
            "latency_mean_s": float(lat[mask].mean()) if mask.any() else None,
            "ttft_mean_s": float((first - req.arrival)[mask].mean()) if mask.any() else None,
            "tpot_mean_s": float(tpot[req.model[multi] == m].mean()) if (req.model[multi] == m).any() else None,
            "kv_share": float(kv_share[m]),
        }
    rates = np.array([s.rate for s in specs])
    tput = fin / model_span
    weighted = float((rates * tput).sum() / rates.sum()) if rates.sum() > 0 else 0.0
    n_gpu = np.array([g.n_gpus for g in groups], dtype=float)
    sm_u = np.array([gm["sm_utilisation"] for gm in group_metrics])
    kv_u = np.array([gm["kv_utilisation"] for gm in group_metrics])
    out = {
        "policy": policy,
        "requests": int(n), "accepted": int(ok.sum()), "finished": int(done.sum()),
        "dropped": int((finish == -2).sum()), "unfinished": int((finish == -1).sum()),
        "slo_attainment": float(ok.sum() / n) if n else 1.0,
        "goodput_rps": float((good / model_span).sum()),
        "throughput_rps": float(tput.sum()),
        "throughput_weighted_rps": weighted,
        "tokens_per_s": float((tokens / model_span).sum()),
        "preemptions": int(preempt.sum()),
        "simulated_s": float(span),
    }
    out.update(_stats("latency", lat[done]))
    out.update(_stats("ttft", ttft))
    out.update(_stats("tpot", tpot))
    out["sm_utilisation"] = float((sm_u * n_gpu).sum() / n_gpu.sum()) if n_gpu.sum() else 0.0
    out["kv_utilisation"] = float((kv_u * n_gpu).sum() / n_gpu.sum()) if n_gpu.sum() else 0.0
    out["per_model"] = per_model
    out["groups"] = group_metrics
    return out
