"""The LLM simulator (MuxServe): every mesh simulated iteration by iteration.

:func:`simulate_llm` checks a placement's meshes (one stage each, weights plus KV cache
within memory), splits the requests over the meshes that host their LLM, runs the Numba
kernel :func:`placement_opt.simulate.meshsim.simulate_mesh` per mesh and computes the metrics.

Semantics (details in the kernel's docstring and ``docs/llm.md``):

* a mesh is a group with ``pp = 1`` and ``tp`` = its size; its LLMs run prefill and decode
  jobs at their SM share (``Group.sm_share``, 1 when absent); the ``temporal`` policy gives
  every job the whole mesh and runs them one at a time in FCFS order;
* the KV pool is the mesh's memory under the placement's rule set (``placeopt``: usable memory
  less ``llm.kv_reserve_fraction``), less a runtime reserve per LLM per GPU, less the
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

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.placement import Group, Placement
from placement_opt.settings import POLICIES, LLMConfig
from placement_opt.costs.interp import lookup_batches, lookup_lengths
from placement_opt.simulate.meshsim import (ADBS, FCFS, ROUND_ROBIN, LatencyTables, MeshLLMs, MeshOutputs, MeshRequests,
                                            MeshSettings, combine_spill_splits, decode_combine_spills, mesh_outputs,
                                            simulate_mesh)
from placement_opt.llm_units import (LLMSpec, effective_llm_config, llm_config, llm_specs, mesh_kv_pool_bytes, pages_per_block,
                                     placement_rules)
from placement_opt.settings import RuleSet
from placement_opt.workload import Requests

KIB = 1024
UTILISATION_BINS = 60
#: decode host seconds measured on a machine: per group index, one value per LLM of the group
#: (None: the calibrated value); :func:`simulate_llm`'s ``decode_host``
DecodeHost = Dict[int, Sequence[Optional[float]]]
_POLICY_CODE = {"adbs": ADBS, "round-robin": ROUND_ROBIN, "fcfs": FCFS, "temporal": FCFS}


class LLMRun(NamedTuple):
    """What simulating every mesh of a placement produced (per-request arrays over the
    instance's requests, as :func:`llm_metrics` takes them)."""

    first: np.ndarray               # first-token time, -1 none
    finish: np.ndarray              # finish time, -1 unfinished, -2 dropped
    preempt: np.ndarray             # times each request was preempted
    stop: float                     # when the last mesh stopped (at least the workload's duration)
    group_metrics: List[dict]       # per group of the placement: its metrics
    kv_share: np.ndarray            # per LLM: KiB x seconds held over pool x simulated time, summed over meshes


def resolve_policy(instance: Instance, placement: Placement, policy: Optional[str] = None) -> str:
    """An explicit policy, else the placement's ``scheduling`` (the temporal baseline sets
    it), else the instance's ``llm.policy``."""
    policy = policy or placement.scheduling or llm_config(instance).policy
    if policy not in POLICIES:
        raise InputError(f"must be one of {', '.join(POLICIES)}, got {policy!r}", "llm.policy")
    return policy


def check_llm_groups(instance: Instance, groups: Sequence[Group], specs: Optional[List[LLMSpec]] = None,
                     rules: Optional[RuleSet] = None) -> list:
    """KV pool bytes of every group under ``rules`` (default ``placeopt``); raises InputError
    for a multi-stage or overfull mesh."""
    specs = specs or llm_specs(instance)
    rules = rules or placement_rules()
    index = {s.name: s for s in specs}
    pools = []
    for gi, g in enumerate(groups):
        if g.pp != 1:
            raise InputError("an LLM mesh has one stage (pp = 1, tp = mesh size)", f"groups[{gi}].pp")
        weights = sum(index[m].weight_bytes for m in g.models)
        pool = mesh_kv_pool_bytes(instance, g.n_gpus, weights, len(g.models), rules)
        need = sum(index[m].kv_bytes_per_token * index[m].tokens_per_request for m in g.models)
        if g.models and pool < need:
            raise InputError(f"weights of {weights / 1e9:.1f} GB leave {max(pool, 0) / 1e9:.2f} GB of KV cache on "
                             f"{g.n_gpus} GPU(s), less than one request of each LLM needs ({need / 1e9:.2f} GB)",
                             f"groups[{gi}].models")
        pools.append(pool)
    return pools


def request_slo_seconds(instance: Instance, specs: List[LLMSpec], req: Requests, prompts: np.ndarray,
                        outputs: np.ndarray) -> np.ndarray:
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


def _with_lengths(instance: Instance, req: Requests) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output tokens of every request: the workload's, else the ``llm`` section's means."""
    prompts, outputs = req.prompt_tokens, req.output_tokens
    if prompts is not None and outputs is not None:
        return prompts.astype(np.int64), outputs.astype(np.int64)
    cfg = llm_config(instance)
    n = len(req)
    return (np.full(n, int(round(cfg.prompt_tokens)), dtype=np.int64),
            np.full(n, int(round(cfg.output_tokens)), dtype=np.int64))


def _mesh_tables(mesh_specs: List[LLMSpec], tp: int, shares: Sequence[float],
                 max_batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def simulate_llm(instance: Instance, placement: Placement, requests: Optional[Requests] = None,
                 policy: Optional[str] = None, decode_host: Optional[DecodeHost] = None) -> dict:
    """Simulate an LLM placement; returns the metrics described in ``docs/llm.md``.
    ``decode_host``: decode host seconds measured on a machine (the executor's host probe),
    per group index a value per LLM of the group (None: the calibrated one), in place of
    :func:`host_seconds`' decode value."""
    if placement.windows:
        raise InputError("time-varying placements (windows) are not supported for LLM instances", "windows")
    rules = placement_rules(placement)
    cfg = effective_llm_config(instance, rules)
    policy = resolve_policy(instance, placement, policy)
    specs = llm_specs(instance)
    req = instance.requests() if requests is None else requests
    pools = check_llm_groups(instance, placement.groups, specs, rules)
    prompt, output = _with_lengths(instance, req)
    # every request as the kernel takes them, but with the instance's model index in ``llm``
    all_requests = MeshRequests(arrival=req.arrival, llm=req.model, prompt=prompt, output=output)
    run = _simulate_meshes(placement.groups, pools, specs, all_requests, req.duration_s, cfg, policy, decode_host)
    slo = request_slo_seconds(instance, specs, req, prompt, output)
    return llm_metrics(specs, req, output, slo, placement.groups, run, policy)


def _simulate_meshes(groups: Sequence[Group], pools: List[float], specs: List[LLMSpec], all_requests: MeshRequests,
                     duration: float, cfg: LLMConfig, policy: str,
                     decode_host: Optional[DecodeHost] = None) -> LLMRun:
    """Run the mesh kernel on every group that hosts LLMs, with the requests it gets (see
    :func:`_mesh_of_requests`), and gather the outcomes per request and per group
    (``decode_host``: :func:`simulate_llm`'s)."""
    n = len(all_requests.arrival)
    horizon = duration + cfg.drain_s
    split = split_requests(groups, specs, all_requests)
    first = np.full(n, -1.0)
    finish = np.full(n, -1.0)
    preempt = np.zeros(n, dtype=np.int64)
    stop = duration
    group_metrics: List[dict] = []
    kv_share = np.zeros(len(specs))
    for gi, g in enumerate(groups):
        if gi not in split:
            group_metrics.append({"models": [], "sm_utilisation": 0.0, "kv_utilisation": 0.0})
            continue
        mesh_specs, sel, local = split[gi]
        out, t_stop = _run_mesh(g, mesh_specs, pools[gi], local, cfg, policy, horizon, (decode_host or {}).get(gi))
        first[sel], finish[sel], preempt[sel] = out.first, out.finish, out.preempt_count
        stop = max(stop, t_stop)
        span = max(t_stop, 1e-9)
        for k, s in enumerate(mesh_specs):
            kv_share[s.index] += out.kv_llm_time[k] / (span * _pool_kib(pools[gi]))
        group_metrics.append(_group_metrics(g, sm_shares(g, policy), pools[gi], out, t_stop, horizon))
    return LLMRun(first=first, finish=finish, preempt=preempt, stop=stop, group_metrics=group_metrics,
                  kv_share=kv_share)


def split_requests(groups: Sequence[Group], specs: List[LLMSpec], all_requests: MeshRequests
                   ) -> Dict[int, Tuple[List[LLMSpec], np.ndarray, MeshRequests]]:
    """Per group that hosts LLMs: its LLMs' specs, the indices of the requests it serves
    (:func:`_mesh_of_requests`) and those requests, its LLMs numbered as on the mesh
    (:func:`_mesh_requests`); the one split the simulator and the executor share."""
    index = {s.name: s.index for s in specs}
    mesh_of = _mesh_of_requests(groups, index, all_requests.llm)
    out = {}
    for gi, g in enumerate(groups):
        if g.models:
            sel = np.flatnonzero(mesh_of == gi)
            mesh_specs = [specs[index[m]] for m in g.models]
            out[gi] = (mesh_specs, sel, _mesh_requests(all_requests, sel, mesh_specs))
    return out


def _mesh_of_requests(groups: Sequence[Group], index: Dict[str, int], models: np.ndarray) -> np.ndarray:
    """The group serving each request (-1: its LLM is hosted nowhere); an LLM hosted by
    several groups gets its requests round robin, in arrival order."""
    hosts: Dict[int, List[int]] = {}
    for gi, g in enumerate(groups):
        for m in g.models:
            hosts.setdefault(index[m], []).append(gi)
    mesh_of = np.full(len(models), -1, dtype=np.int64)
    for model, gs in hosts.items():
        idx = np.flatnonzero(models == model)
        mesh_of[idx] = np.asarray(gs)[np.arange(len(idx)) % len(gs)]
    return mesh_of


def _mesh_requests(all_requests: MeshRequests, sel: np.ndarray, mesh_specs: List[LLMSpec]) -> MeshRequests:
    """The requests ``sel`` of one mesh, their LLMs numbered as on the mesh."""
    local = {s.index: k for k, s in enumerate(mesh_specs)}
    llm_local = np.array([local[m] for m in all_requests.llm[sel]], dtype=np.int64)
    return MeshRequests(arrival=all_requests.arrival[sel], llm=llm_local, prompt=all_requests.prompt[sel],
                        output=all_requests.output[sel])


def sm_shares(g: Group, policy: str) -> list:
    """SM share of each LLM of the group under ``policy`` (:func:`resolve_policy`'s): all SMs
    under ``temporal`` (one job at a time) or when the group sets none. The one rule the
    simulator, the executor, the Eq. 3 estimator's placement estimates and the fidelity fits
    read a placement's shares by."""
    return [1.0] * len(g.models) if policy == "temporal" or g.sm_share is None else list(g.sm_share)


def _pool_kib(pool_bytes: float) -> int:
    """A mesh's KV pool in whole KiB, the kernel's unit."""
    return int(pool_bytes // KIB)


def _run_mesh(g: Group, mesh_specs: List[LLMSpec], pool_bytes: float, requests: MeshRequests, cfg: LLMConfig,
              policy: str, horizon: float, measured_host: Optional[Sequence[Optional[float]]] = None
              ) -> tuple[MeshOutputs, float]:
    """Run the mesh kernel on one group (:func:`mesh_inputs`). Returns the kernel's outputs and
    the time it stopped."""
    llms, tables, settings = mesh_inputs(g, mesh_specs, pool_bytes, cfg, policy, horizon, measured_host)
    out = mesh_outputs(len(requests.arrival), len(mesh_specs), UTILISATION_BINS)
    return out, simulate_mesh(requests, llms, tables, settings, out)


def mesh_inputs(g: Group, mesh_specs: List[LLMSpec], pool_bytes: float, cfg: LLMConfig, policy: str, horizon: float,
                measured_host: Optional[Sequence[Optional[float]]] = None
                ) -> tuple[MeshLLMs, LatencyTables, MeshSettings]:
    """The mesh kernel's inputs for one group but its requests: its LLMs' latency tables at
    their SM shares and host and contention terms, its pool and the scheduling settings
    (``measured_host``: per LLM a decode host time measured on a machine, None: the calibrated
    one). The executor's virtual clock (``executor.llm_sched.run_virtual``) takes the same."""
    shares = sm_shares(g, policy)
    P, D, lgrid = _mesh_tables(mesh_specs, g.tp, shares, cfg.max_batch)
    decode_host, prefill_host, eager_host = (np.array(c, dtype=np.float64)
                                             for c in zip(*[host_seconds(cfg, sh, g.tp) for sh in shares]))
    for k, h in enumerate(measured_host or ()):
        if h is not None:
            decode_host[k] = max(0.0, float(h))
    llms = MeshLLMs(share=np.asarray(shares, dtype=np.float64),
                    kv_kib=np.array([int(np.ceil(s.kv_bytes_per_token / KIB)) for s in mesh_specs], dtype=np.int64),
                    rate=np.array([s.rate for s in mesh_specs]),
                    weight_bytes=np.array([s.weight_bytes / g.tp for s in mesh_specs], dtype=np.float64),
                    kv_bytes=np.array([s.kv_bytes_per_token / g.tp for s in mesh_specs], dtype=np.float64),
                    decode_host_s=decode_host, prefill_host_s=prefill_host, prefill_eager_host_s=eager_host,
                    prefill_collect_s=np.array([prefill_extra_seconds(cfg, sh, g.tp) for sh in shares],
                                               dtype=np.float64),
                    prefill_eager_hold_s=np.array([eager_hold_seconds(cfg, sh, g.tp) for sh in shares]),
                    prefill_stretch=np.array([cfg.prefill_partition_stretch if on_partition(sh) else 0.0 for sh in shares]),
                    decode_block_host_s=np.array([page_fill_seconds(cfg, s, mesh_specs, g.tp) for s in mesh_specs]),
                    decode_stretch=np.array([decode_stretch(cfg, sh, g.tp) for sh in shares], dtype=np.float64),
                    decode_request_s=np.array([decode_request_seconds(cfg, sh, g.tp) for sh in shares],
                                              dtype=np.float64),
                    decode_wave=np.array([decode_wave(cfg, s, sh, g.tp) for s, sh in zip(mesh_specs, shares)],
                                         dtype=np.float64),
                    **combine_arrays(cfg, mesh_specs, g.tp))
    tables = LatencyTables(prefill=P, decode=D, lgrid=lgrid.astype(np.float64))
    return llms, tables, mesh_settings(cfg, _POLICY_CODE[policy], _pool_kib(pool_bytes), horizon, g.tp)


def mesh_settings(cfg: LLMConfig, policy_code: int, pool_kib: int, horizon: float, tp: int = 1) -> MeshSettings:
    """The kernel's settings of a mesh of TP degree ``tp`` under ``cfg``: scheduling, KV pool,
    the contention model (:func:`contention_gbps` at that degree, ``contention_hbm_cap_gbps``,
    ``contention_curve_gbps``, ``contention_curve_power``), the prefill
    stretch beside other jobs (``prefill_beside_stretch``, ``prefill_beside_delay_s``,
    ``prefill_beside_gbps``, ``prefill_beside_requests``, ``prefill_beside_knee_tokens``,
    ``prefill_beside_knee_s``, ``prefill_beside_eager_knee_s``,
    ``prefill_beside_share_power``), a job's
    speed beside its own LLM's other job on one partition (``own_prefill_decode_share``,
    ``own_prefill_decode_knee_tokens``, ``own_decode_prefill_share``, ``own_decode_prefill_knee_tokens``), the prefill's length (``prefill_at_longest``) or bucket
    (``prefill_at_bucket``), the eager-prefill limit (when its cost or the bucket is on) and the
    KV-read rate at that degree (:func:`kv_read_gbps`)."""
    return MeshSettings(policy=policy_code, pool=pool_kib, block=cfg.kv_block_tokens, max_batch=cfg.max_batch,
                        token_budget=cfg.prefill_token_budget, period=cfg.rebalance_period_s,
                        frac=cfg.rebalance_fraction, horizon=horizon, hbm_gbps=contention_gbps(cfg, tp),
                        graph_tokens=cfg.prefill_graph_tokens if cfg.prefill_at_bucket or max(
                            cfg.prefill_eager_host_s, cfg.prefill_eager_host_full_s, cfg.prefill_eager_hold_s,
                            cfg.prefill_eager_hold_full_s,
                            cfg.prefill_eager_host_tp_s) > 0 else 0,
                        decode_kv_gbps=kv_read_gbps(cfg, tp), own_prefill_decode=cfg.own_prefill_decode_share,
                        own_prefill_decode_knee=cfg.own_prefill_decode_knee_tokens,
                        own_decode_prefill=cfg.own_decode_prefill_share,
                        own_decode_prefill_knee=cfg.own_decode_prefill_knee_tokens,
                        hbm_cap_gbps=cfg.contention_hbm_cap_gbps, prefill_beside=cfg.prefill_beside_stretch,
                        prefill_beside_delay=cfg.prefill_beside_delay_s, prefill_beside_gbps=cfg.prefill_beside_gbps,
                        prefill_beside_requests=cfg.prefill_beside_requests,
                        prefill_beside_power=cfg.prefill_beside_share_power,
                        prefill_beside_knee=cfg.prefill_beside_knee_tokens,
                        prefill_beside_knee_s=cfg.prefill_beside_knee_s,
                        prefill_beside_eager_knee_s=cfg.prefill_beside_eager_knee_s,
                        prefill_at_longest=bool(cfg.prefill_at_longest),
                        prefill_at_bucket=bool(cfg.prefill_at_bucket), hbm_curve_gbps=cfg.contention_curve_gbps,
                        hbm_curve_power=cfg.contention_curve_power)


def contention_gbps(cfg: LLMConfig, tp: int) -> float:
    """The contention stretch's rate (GB/s per GPU) on a mesh of TP degree ``tp``: a running
    job slows by 1 + (the other running jobs' HBM demand) / this; ``llm.contention_hbm_gbps /
    tp**llm.contention_tp_power`` (0: the stretch is off)."""
    return cfg.contention_hbm_gbps / float(tp) ** cfg.contention_tp_power


def decode_stretch(cfg: LLMConfig, share: float, tp: int) -> float:
    """The factor on the table time of a decode step of an LLM at SM ``share`` on a mesh of TP
    degree ``tp``, in place of the KV read (:func:`kv_read_gbps`): ``llm.decode_full_stretch``
    on a whole GPU (no partition) of a one-GPU mesh, where it was measured (one LLM per GPU, or
    several taking the GPU in turns or side by side on plain streams), and
    ``llm.decode_partition_stretch`` on an SM partition of one (several LLMs side by side on
    green contexts); 0 (off) on a mesh of several GPUs or when that field is 0."""
    if tp != 1:
        return 0.0
    return cfg.decode_full_stretch if on_whole_gpu(share, tp) else cfg.decode_partition_stretch


def decode_request_seconds(cfg: LLMConfig, share: float, tp: int) -> float:
    """The seconds a decode step of an LLM at SM ``share`` on a mesh of TP degree ``tp`` lasts
    more per request it holds, after its table time and :func:`decode_stretch` (or the KV read):
    ``llm.decode_full_request_s`` on a whole GPU of a one-GPU mesh and
    ``llm.decode_partition_request_s`` on an SM partition of one (with a partition stretch),
    where they were measured with the stretch (the steps' excess grows with the batch); 0
    elsewhere."""
    if tp != 1:
        return 0.0
    if on_whole_gpu(share, tp):
        return cfg.decode_full_request_s
    return cfg.decode_partition_request_s if cfg.decode_partition_stretch > 0 else 0.0


def decode_wave(cfg: LLMConfig, spec: LLMSpec, share: float, tp: int) -> float:
    """The requests of ``spec`` whose decode attention programs (one per request and KV head)
    fit on its SMs at once, the simulator's ``MeshLLMs.decode_wave``
    (:func:`~placement_opt.simulate.meshsim.decode_context`): ``llm.decode_attention_sms`` over
    the LLM's KV heads on a whole GPU of a one-GPU mesh, where the job traces measured it
    beside the decode stretch (:func:`decode_stretch`), and on an SM partition of one with a
    partition stretch, there that SM count x the SMs the partition holds (its cost table's
    :meth:`~placement_opt.costs.costtable.TPTable.sm_fraction` of ``share``); 0 (steps at
    their mean context) elsewhere or when that field is 0."""
    if cfg.decode_attention_sms <= 0 or tp != 1:
        return 0.0
    if on_whole_gpu(share, tp):
        sms = float(cfg.decode_attention_sms)
    elif cfg.decode_partition_stretch > 0:
        sms = cfg.decode_attention_sms * spec.table.table_for(tp).sm_fraction(share)
    else:
        return 0.0
    arch = spec.architecture
    return sms / float(arch.kv_heads or arch.heads)


def attention_kv_heads(spec: LLMSpec, tp: int) -> int:
    """The KV heads of ``spec`` each GPU of a mesh of TP degree ``tp`` holds (at least one)."""
    arch = spec.architecture
    return max(1, (arch.kv_heads or arch.heads) // tp)


def spill_splits(spec: LLMSpec) -> int:
    """The fewest attention splits at which the engine's combine kernel spills for ``spec``
    (:func:`~placement_opt.simulate.meshsim.combine_spill_splits` of its query heads per KV head
    and head size: the same at every TP degree, as a rank holds whole KV heads with their query
    heads; the TP degree moves only the KV heads per GPU, :func:`attention_kv_heads`)."""
    arch = spec.architecture
    kv_heads = arch.kv_heads or arch.heads
    return combine_spill_splits(max(1, arch.heads // kv_heads), arch.hidden // arch.heads)


def combine_spill_seconds(cfg: LLMConfig, spec: LLMSpec, tp: int, batch: int, longest: int) -> float:
    """The seconds a decode step of ``spec`` on a mesh of TP degree ``tp``, ``batch`` requests
    the longest of ``longest`` tokens, lasts more for its split-combine spill: the kernel's
    ``MeshLLMs.decode_combine_s`` where
    :func:`~placement_opt.simulate.meshsim.decode_combine_spills`, else 0."""
    if cfg.decode_combine_spill_s <= 0 or not decode_combine_spills(
            batch, longest, cfg.kv_block_tokens, attention_kv_heads(spec, tp), spill_splits(spec)):
        return 0.0
    return cfg.decode_combine_spill_s * spec.architecture.layers


def combine_arrays(cfg: LLMConfig, mesh_specs: Sequence[LLMSpec], tp: int) -> Dict[str, np.ndarray]:
    """The kernel's split-combine spill inputs of a mesh's LLMs (``MeshLLMs.decode_combine_s``,
    ``attention_kv_heads``, ``combine_spill_splits``): ``llm.decode_combine_spill_s`` x each
    LLM's layers, its KV heads per GPU and the splits that spill; empty while the field is 0."""
    if cfg.decode_combine_spill_s <= 0:
        return {}
    return dict(decode_combine_s=np.array([cfg.decode_combine_spill_s * s.architecture.layers for s in mesh_specs],
                                          dtype=np.float64),
                attention_kv_heads=np.array([attention_kv_heads(s, tp) for s in mesh_specs], dtype=np.int64),
                combine_spill_splits=np.array([spill_splits(s) for s in mesh_specs], dtype=np.int64))


def on_whole_gpu(share: float, tp: int) -> bool:
    """Whether an LLM at SM ``share`` on a mesh of TP degree ``tp`` holds a whole GPU of a
    one-GPU mesh: where the engine's job timing beyond its tables was measured
    (:func:`decode_stretch`, :func:`prefill_extra_seconds`)."""
    return tp == 1 and not on_partition(share)


def kv_read_gbps(cfg: LLMConfig, tp: int) -> float:
    """The rate (GB/s per GPU) at which a decode step's KV-cache bytes add to its time on a mesh
    of TP degree ``tp``: ``llm.decode_kv_gbps / tp**llm.decode_kv_tp_power`` (0: the term is off)."""
    return cfg.decode_kv_gbps / float(tp) ** cfg.decode_kv_tp_power


def page_fill_seconds(cfg: LLMConfig, spec: LLMSpec, mesh_specs: Sequence[LLMSpec], tp: int) -> float:
    """Host seconds a decode step of ``spec`` on a mesh of TP degree ``tp`` serving
    ``mesh_specs`` spends per KV block its requests hold building its page table: the pages
    one block takes in the mesh's pool (:func:`~placement_opt.llm_units.pages_per_block`) x
    ``llm.decode_page_entry_s``."""
    return pages_per_block(spec.architecture, [s.architecture for s in mesh_specs], tp) * cfg.decode_page_entry_s


def on_partition(share: float) -> bool:
    """Whether an LLM at SM ``share`` runs on a partition of the GPU (green context), not on
    the whole GPU (plain streams): the rule that picks the partition or whole-GPU host values."""
    return share < 1.0 - 1e-9


def host_seconds(cfg: LLMConfig, share: float, tp: int = 1) -> tuple[float, float, float]:
    """(decode, prefill, eager prefill) host seconds of the scheduling thread per job of an LLM
    at SM ``share`` on a mesh of TP degree ``tp``: the partition values below the whole GPU, the
    plain-stream ones at it; decode adds ``decode_host_tp_s`` per rank beyond the first and,
    on a mesh of more than one GPU, ``decode_host_mesh_s``; an eager prefill adds
    ``prefill_eager_host_tp_s`` per rank beyond the first."""
    extra = _tp_seconds(cfg.decode_host_tp_s, cfg.decode_host_mesh_s, tp)
    eager_tp = _tp_seconds(cfg.prefill_eager_host_tp_s, 0.0, tp)
    if not on_partition(share):
        return cfg.decode_host_full_s + extra, cfg.prefill_host_full_s, cfg.prefill_eager_host_full_s + eager_tp
    return cfg.decode_host_s + extra, cfg.prefill_host_s, cfg.prefill_eager_host_s + eager_tp


def eager_hold_seconds(cfg: LLMConfig, share: float, tp: int = 1) -> float:
    """Host seconds an eager prefill's launch holds the scheduling thread apart from its eager
    host time, for an LLM at SM ``share`` on a mesh of TP degree ``tp``: ``prefill_eager_hold_s``
    on a partition, ``prefill_eager_hold_full_s`` on the whole GPU at TP 1, where it was measured
    (0: the eager host time holds it; so at TP > 1 on whole GPUs, where the eager host time carries
    ``prefill_eager_host_tp_s`` per rank)."""
    if on_partition(share):
        return cfg.prefill_eager_hold_s
    return cfg.prefill_eager_hold_full_s if tp == 1 else 0.0


def prefill_collect_seconds(cfg: LLMConfig, tp: int) -> float:
    """Seconds a prefill lasts beyond its table time on a mesh of TP degree ``tp``: the ranks'
    collect of its first tokens, ``prefill_host_tp_s`` per rank beyond the first and, on a mesh of
    more than one GPU, ``prefill_host_mesh_s``."""
    return _tp_seconds(cfg.prefill_host_tp_s, cfg.prefill_host_mesh_s, tp)


def prefill_extra_seconds(cfg: LLMConfig, share: float, tp: int) -> float:
    """Seconds a prefill of an LLM at SM ``share`` on a mesh of TP degree ``tp`` lasts beyond its
    table time (``MeshLLMs.prefill_collect_s``): the ranks' collect (:func:`prefill_collect_seconds`)
    and, on a whole GPU of a one-GPU mesh, ``llm.prefill_start_full_s`` (the engine's GPU work
    starts that far into its launch; measured there only)."""
    start = cfg.prefill_start_full_s if on_whole_gpu(share, tp) else 0.0
    return prefill_collect_seconds(cfg, tp) + start


def _tp_seconds(per_rank: float, per_mesh: float, tp: int) -> float:
    """Seconds a job takes more on a mesh of TP degree ``tp``: ``per_rank`` for each rank beyond
    the first and ``per_mesh`` once on a mesh of more than one GPU."""
    return per_rank * (tp - 1) + (per_mesh if tp > 1 else 0.0)


def _group_metrics(g: Group, shares: list, pool_bytes: float, out: MeshOutputs, t_stop: float,
                   horizon: float) -> dict:
    """One mesh's figures: SM and KV utilisation (means over its simulated time, peaks, and
    series over the time bins), pool size and preemptions."""
    pool_kib = _pool_kib(pool_bytes)
    span = max(t_stop, 1e-9)
    bin_w = horizon / UTILISATION_BINS
    return {
        "models": list(g.models),
        "sm_share": shares,
        "kv_pool_gb": round(pool_bytes / 1e9, 3),
        "kv_peak_utilisation": float(out.peak[0] / pool_kib),
        "sm_peak": float(out.peak[1]),
        "sm_utilisation": float(out.sm_bins.sum() / span),
        "kv_utilisation": float(out.kv_bins.sum() / (span * pool_kib)),
        "sm_utilisation_series": [round(float(x / bin_w), 4) for x in out.sm_bins],
        "kv_utilisation_series": [round(float(x / (bin_w * pool_kib)), 4) for x in out.kv_bins],
        "preemptions": int(out.preempt_count.sum()),
    }


def _stats(prefix: str, values: np.ndarray) -> dict:
    """Mean and percentiles (50, 90, 99) of ``values``, None for all when there are none."""
    if values.size == 0:
        return {f"{prefix}_mean_s": None, f"{prefix}_p50_s": None, f"{prefix}_p90_s": None, f"{prefix}_p99_s": None}
    return {f"{prefix}_mean_s": float(values.mean()), f"{prefix}_p50_s": float(np.percentile(values, 50)),
            f"{prefix}_p90_s": float(np.percentile(values, 90)), f"{prefix}_p99_s": float(np.percentile(values, 99))}



class _RequestFigures(NamedTuple):
    """Per-request figures of a run (arrays over the requests)."""

    done: np.ndarray     # finished
    ok: np.ndarray       # finished within its SLO
    latency: np.ndarray  # finish - arrival (meaningful where done)
    multi: np.ndarray    # finished with more than one output token (it has a time per output token)
    tpot: np.ndarray     # time per output token after the first, of the ``multi`` requests


class _ModelFigures(NamedTuple):
    """Per-LLM totals of a run (arrays over the instance's models)."""

    requests: np.ndarray
    finished: np.ndarray
    accepted: np.ndarray  # finished within their SLO
    tokens: np.ndarray    # output tokens of the finished requests
    span: np.ndarray      # serving span (see :func:`_model_figures`)


def _request_figures(req: Requests, output: np.ndarray, slo: np.ndarray, run: LLMRun) -> _RequestFigures:
    """Which requests finished, within their SLO, their latency and time per output token."""
    done = run.finish >= 0
    lat = run.finish - req.arrival
    ok = done & (lat <= slo * (1 + 1e-12))
    multi = done & (output > 1)
    tpot = (run.finish[multi] - run.first[multi]) / (output[multi] - 1)
    return _RequestFigures(done=done, ok=ok, latency=lat, multi=multi, tpot=tpot)


def _model_figures(n_models: int, req: Requests, output: np.ndarray, run: LLMRun, figs: _RequestFigures,
                   span: float) -> _ModelFigures:
    """Per-LLM counts. An LLM's serving span: the workload's duration, or until its last
    request finished, or the whole simulated time ``span`` when some of its requests never
    did (it was overloaded)."""
    model_span = np.full(n_models, req.duration_s)
    if figs.done.any():
        np.maximum.at(model_span, req.model[figs.done], run.finish[figs.done])
    model_span[np.unique(req.model[run.finish == -1])] = span
    return _ModelFigures(requests=np.bincount(req.model, minlength=n_models),
                         finished=np.bincount(req.model[figs.done], minlength=n_models),
                         accepted=np.bincount(req.model[figs.ok], minlength=n_models),
                         tokens=np.bincount(req.model[figs.done], weights=output[figs.done], minlength=n_models),
                         span=model_span)


def _per_model_metrics(specs: List[LLMSpec], req: Requests, run: LLMRun, figs: _RequestFigures,
                       totals: _ModelFigures) -> dict:
    """Each LLM's requests, SLO attainment, throughput, mean latencies and KV share."""
    per_model = {}
    multi_model = req.model[figs.multi]
    for s in specs:
        m = s.index
        mask = figs.done & (req.model == m)
        count, good, fin = totals.requests[m], totals.accepted[m], totals.finished[m]
        per_model[s.name] = {
            "requests": int(count), "accepted": int(good), "finished": int(fin),
            "slo_attainment": float(good / count) if count else 1.0,
            "rate_rps": s.rate,
            "throughput_rps": float(fin / totals.span[m]), "tokens_per_s": float(totals.tokens[m] / totals.span[m]),
            "latency_mean_s": float(figs.latency[mask].mean()) if mask.any() else None,
            "ttft_mean_s": float((run.first - req.arrival)[mask].mean()) if mask.any() else None,
            "tpot_mean_s": float(figs.tpot[multi_model == m].mean()) if (multi_model == m).any() else None,
            "kv_share": float(run.kv_share[m]),
        }
    return per_model


def _mesh_utilisation(groups: Sequence[Group], group_metrics: List[dict]) -> dict:
    """SM and KV utilisation over the meshes, weighted by their GPUs."""
    n_gpu = np.array([g.n_gpus for g in groups], dtype=float)
    sm_u = np.array([gm["sm_utilisation"] for gm in group_metrics])
    kv_u = np.array([gm["kv_utilisation"] for gm in group_metrics])
    return {"sm_utilisation": float((sm_u * n_gpu).sum() / n_gpu.sum()) if n_gpu.sum() else 0.0,
            "kv_utilisation": float((kv_u * n_gpu).sum() / n_gpu.sum()) if n_gpu.sum() else 0.0}


def llm_metrics(specs: List[LLMSpec], req: Requests, output: np.ndarray, slo: np.ndarray, groups: Sequence[Group],
                run: LLMRun, policy: str) -> dict:
    """Overall and per-LLM metrics of a run of the placement's ``groups`` on the requests
    ``req`` (their ``output`` tokens and ``slo`` seconds)."""
    n = len(req)
    span = max(run.stop, req.duration_s)
    figs = _request_figures(req, output, slo, run)
    totals = _model_figures(len(specs), req, output, run, figs, span)
    rates = np.array([s.rate for s in specs])
    tput = totals.finished / totals.span
    weighted = float((rates * tput).sum() / rates.sum()) if rates.sum() > 0 else 0.0
    out = {
        "policy": policy,
        "requests": int(n), "accepted": int(figs.ok.sum()), "finished": int(figs.done.sum()),
        "dropped": int((run.finish == -2).sum()), "unfinished": int((run.finish == -1).sum()),
        "slo_attainment": float(figs.ok.sum() / n) if n else 1.0,
        "goodput_rps": float((totals.accepted / totals.span).sum()),
        "throughput_rps": float(tput.sum()),
        "throughput_weighted_rps": weighted,
        "tokens_per_s": float((totals.tokens / totals.span).sum()),
        "preemptions": int(run.preempt.sum()),
        "simulated_s": float(span),
    }
    out.update(_stats("latency", figs.latency[figs.done]))
    out.update(_stats("ttft", (run.first - req.arrival)[figs.done]))
    out.update(_stats("tpot", figs.tpot))
    out.update(_mesh_utilisation(groups, run.group_metrics))
    out["per_model"] = _per_model_metrics(specs, req, run, figs, totals)
    out["groups"] = run.group_metrics
    return out
