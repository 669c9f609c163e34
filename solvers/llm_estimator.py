"""MuxServe's throughput estimator (paper Eq. 3) and the parallel candidates (Algorithm 2).

For LLM ``m`` colocated in a unit (a mesh and the LLMs on it)::

    tpt(m) = min(b_m / (sum over the unit's LLMs i of prefill_i(b_i) + decode_m(b_m) x out_m), rate_m)

prefill phases of colocated LLMs run one after another while their decode phases overlap.
Under temporal scheduling (``serial_decode``) decode steps run one after another too, so
``decode_m(b_m)`` becomes ``sum over the unit's LLMs i of decode_i(b_i)``.
``b_m`` is the smallest batch whose estimate meets the rate (binary search), capped by
``max_batch`` and by the KV cache the LLM's quota holds: the mesh's pool after weights and
the runtime reserves (the rule set's memory plan) is split in proportion to rate x per-token KV size (ADBS's quotas), and a request needs
``prompt + output`` tokens of cache. Because each LLM's batch changes the others' prefill
sum, the batches are found by a few rounds of fixed-point iteration.

With the simulator's host and contention models (``llm.decode_host_s``, ``prefill_host_s``,
their ``_full_s`` twins for LLMs holding the whole GPU, ``decode_host_tp_s`` per extra TP rank
and ``decode_host_mesh_s`` on a mesh of several,
``prefill_eager_host_s`` and its twin for prefills over the CUDA-graph limit,
``contention_hbm_gbps``, ``contention_hbm_cap_gbps``; off by default) the estimate sees what
the simulator does: a decode
step takes its host seconds longer (its launch on the mesh's one scheduling thread), a prefill
at least its host seconds (plus the eager seconds where its padded size at the mean prompt
exceeds ``prefill_graph_tokens``), and colocated decode steps, which overlap, stretch each other:
member ``m``'s step by ``1 + sum over the other members j of demand_j / (hbm x mesh GPUs)``
(``hbm`` divided by ``tp**llm.contention_tp_power`` on a mesh of TP degree ``tp``,
:func:`mesh_contention_gbps`)
and, with the bandwidth cap, at least by ``sum over all members j of demand_j / max(cap x mesh
GPUs, demand_m)`` (the simulator's :func:`~placement_opt.simulate.meshsim.contention_stretch`),
``demand_j = (weights_j + b_j x context_j x KV bytes per token_j) / decode_j(b_j)`` (GB/s;
context = prompt + output / 2). The stretch depends on the others' batches, so it is
re-evaluated in every round of the fixed-point iteration. Prefills are not stretched by this
term (they are compute-bound and Eq. 3 runs them one at a time; their own stretch beside decode
steps: below); temporal units (``serial_decode``) have no overlap, so no stretch.

The simulator's decode models enter in mean-value form (off when their fields are 0):
``llm.decode_kv_gbps``: a decode step of ``b`` requests lasts ``b x context x KV bytes per token
per GPU / decode_kv_gbps`` longer, that rate divided by ``tp**llm.decode_kv_tp_power`` on a
mesh of TP degree ``tp`` (the simulator adds the KV bytes of the step's actual contexts);
``llm.decode_full_stretch``: on a whole GPU of a one-GPU mesh a decode step lasts that many
times its table time instead (no KV term there, as in the simulator), and
``llm.decode_full_request_s`` seconds more per request (``b x`` that); on an SM partition of
one, ``llm.decode_partition_stretch`` and ``llm.decode_partition_request_s`` likewise;
``llm.decode_attention_sms``: there (on a partition: x its SM fraction) a step of ``b``
requests is read at the simulator's effective context
(:func:`~placement_opt.simulate.meshsim.decode_context`) of the mean context and the longest of
``b`` requests whose decode progress is spread evenly, prompt + output x b / (b + 1);
``llm.decode_page_entry_s``: a decode step lasts ``b x blocks at the mean context x pages per
block x decode_page_entry_s`` longer (the simulator's page-table fill on the scheduling thread;
the search's per-LLM tables take a block as one page, as alone on a mesh, and
:func:`placement_estimates` the pages of the placement's meshes);
``llm.own_prefill_decode_share`` = s: LLM ``m``'s decode steps last ``1 + f x (1/s - 1)``
times longer, ``f = prefill_m(b_m) / round`` the part of its Eq. 3 round its own prefill runs
(the simulator stretches a step by 1/s while that prefill runs; with
``llm.own_prefill_decode_knee_tokens``, s over ``1 + prompt / knee`` at the LLM's mean prompt),
the round solved exactly
(:func:`_cycle`); only where the simulator can run the two jobs together (share at most 0.5)
and jobs overlap (not ``serial_decode``).

Two prefill terms of the simulator enter the same way (off when 0): ``llm.prefill_host_tp_s``:
a prefill on a mesh of TP degree ``t`` lasts ``(t - 1) x prefill_host_tp_s`` (and, for ``t`` > 1,
``llm.prefill_host_mesh_s``) longer than its table time (added before the ``prefill_host_s``
floor, as the simulator does);
``llm.prefill_eager_hold_s``: an eager prefill on an SM partition holds the mesh's one
scheduling thread ``prefill_host_s + prefill_eager_hold_s`` (on the whole GPU
``prefill_host_full_s + prefill_eager_hold_full_s`` at TP 1), during which no job of any member
is launched, so its term in every member's Eq. 3 round is at least that hold (a per-round host
cost; ``prefill_eager_host_s`` remains how much longer the prefill itself lasts). The hold's
excess over the prefill also counts in ``f`` above (mean-value approximation). An eager
prefill's ``llm.prefill_eager_host_tp_s`` per rank beyond the first comes with its eager host
seconds (:func:`host_seconds`).

The prefill's stretch beside other jobs enters in mean-value form (off when its fields are 0):
with ``llm.prefill_beside_stretch`` s, ``_delay_s`` d, ``_gbps`` g, ``_requests`` q,
``_knee_tokens`` n, ``_knee_s`` t and ``_share_power`` p, member ``m``'s prefill in a unit of
several (not ``serial_decode``) lasts ``(1 + s + (demand / (g x mesh GPUs) + requests / q) /
(1 + b_m x prompt_m / n) / (1 + prefill_m(b_m) / t) x share_m ** p) x prefill_m(b_m) + d`` on an
SM partition (share_m below 1; p = 0: no share term; n or t 0: no such knee), ``demand`` the
decode demand as above and ``requests``
the batches of the other members (and of its own where two jobs of its share fit): Eq. 3 runs
prefills one at a time while those decode steps run beside them (the simulator's
:func:`~placement_opt.simulate.meshsim.prefill_beside_stretch` over its co-runners of the
moment, at the padded prompt and sparing eager prefills without a knee; here the mean prompt
and every prefill). The stretches depend on the batches and are re-evaluated with them, a
member's own at each batch its search tries (:func:`_beside_terms`). With
``llm.own_decode_prefill_share`` o and two jobs of its share fitting, its own decode step leaves
``requests`` and ``demand`` and the prefill lasts all that over o (a lone member: ``prefill_m / o``):
it keeps that part of its speed beside its own decode step, which Eq. 3 runs throughout (with
``llm.own_decode_prefill_knee_tokens``, the part it loses over ``1 + b x prompt / knee`` at batch
``b``). Not in the estimate:
``llm.prefill_partition_stretch`` and the timing at the longest prompt (``prefill_at_longest``) or
at the CUDA-graph bucket (``prefill_at_bucket``): Eq. 3 has no batch composition, only ``b``
mean-length prompts.

Latency vectors ``P[row, b]`` and ``D[row, b]`` (prefill of ``b`` mean-length prompts,
decode step of ``b`` requests at the mean context, or the effective one above) are precomputed per (LLM, TP degree) at
the candidate SM share, so the kernels below touch only flat arrays. :class:`Headroom`
estimates units at multiples of the rates (the mesh-group search's tie-break).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from numba import njit

from placement_opt.cluster import Cluster
from placement_opt.costs.interp import lookup, lookup_batches
from placement_opt.instance import Instance
from placement_opt.llm_rules import tp_violations
from placement_opt.llm_units import LLMSpec, MeshMemory, llm_config, llm_specs, mesh_memory, placement_rules
from placement_opt.placement import Placement
from placement_opt.settings import LLMConfig
from placement_opt.simulate.llm import (combine_spill_seconds, contention_gbps, decode_request_seconds, decode_stretch,
                                        decode_wave, eager_hold_seconds, host_seconds, kv_read_gbps, page_fill_seconds,
                                        prefill_extra_seconds, resolve_policy, sm_shares)
from placement_opt.simulate.meshsim import (contention_stretch, decode_context, offered_load, prefill_runs_eagerly,
                                            served_latency)

SM_SHARES = np.round(np.arange(0.3, 1.0001, 0.1), 2)  # the reference implementation's 30-100 %
FIXED_POINT_ROUNDS = 4


@njit(cache=True)
def _cycle(prefills: float, decodes: float, own_prefill: float, own_decode: float, out: float, slow: float) -> float:
    """Eq. 3's denominator, one round of an LLM: ``prefills`` (every member's prefill seconds)
    + ``decodes`` (its decode-step seconds, with the other members' under ``serial_decode``) x
    ``out`` steps. With the shared-partition slowdown ``slow`` (1 / ``own_prefill_decode_share``
    - 1; 0: off) each of its own decode steps (``own_decode`` seconds) lasts ``1 + f x slow``
    times longer, ``f = own_prefill / round``: the part of the round its own prefill runs (mean
    value). That round solves ``round^2 - base x round - own_decode x out x slow x own_prefill
    = 0``, ``base`` the round without the slowdown."""
    base = prefills + decodes * out
    if slow <= 0:
        return base
    extra = own_decode * out * slow * own_prefill
    return (base + np.sqrt(base * base + 4.0 * extra)) / 2.0


@njit(cache=True)
def _smallest_batch(r: int, m: int, others_p: float, others_d: float, P: np.ndarray, D: np.ndarray,
                    out_len: np.ndarray, rate: np.ndarray, hi: int, stretch: float, slow: float,
                    beside: np.ndarray) -> int:
    """The smallest batch (at most ``hi``) whose Eq. 3 estimate meets the rate, given the other
    members' prefill seconds ``others_p`` and decode-step seconds ``others_d`` per round, the
    contention ``stretch`` of this member's decode steps, its shared-partition ``slow``
    (:func:`_cycle`) and its prefill's stretch beside the others at each candidate batch
    (``beside``: :func:`_beside_terms`, :func:`_beside_seconds`)."""
    lo = 1
    p_hi = _beside_seconds(P[r, hi], hi, beside)
    if hi / _cycle(others_p + p_hi, others_d + D[r, hi] * stretch, p_hi, D[r, hi] * stretch, out_len[m],
                   slow) < rate[m]:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        p_mid = _beside_seconds(P[r, mid], mid, beside)
        if mid / _cycle(others_p + p_mid, others_d + D[r, mid] * stretch, p_mid, D[r, mid] * stretch,
                        out_len[m], slow) >= rate[m]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _decode_demand(j: int, rows: np.ndarray, llms: np.ndarray, D: np.ndarray, out_len: np.ndarray,
                   weights: np.ndarray, kv: np.ndarray, tokens: np.ndarray, batch: np.ndarray) -> float:
    """Member ``j``'s decode-step HBM demand at its batch (GB/s, the mesh's bytes): its weights
    and its batch's KV at the mean context (prompt + output / 2) over the step's seconds."""
    m = llms[j]
    context = tokens[m] - out_len[m] / 2.0
    return (weights[m] + batch[j] * context * kv[m]) / D[rows[j], batch[j]] / 1e9


@njit(cache=True)
def _stretch(i: int, rows: np.ndarray, llms: np.ndarray, D: np.ndarray, out_len: np.ndarray, weights: np.ndarray,
             kv: np.ndarray, tokens: np.ndarray, batch: np.ndarray, hbm_mesh_gbps: float,
             hbm_cap_mesh_gbps: float, curve_mesh_gbps: float = 0.0, curve_power: float = 2.0) -> float:
    """How much member ``i``'s decode steps stretch beside the other members' (module
    docstring): :func:`~placement_opt.simulate.meshsim.contention_stretch` of the members' HBM
    demands at their batches, with the mesh's contention bandwidth, bandwidth cap and
    loaded-latency curve (its scale in the mesh's GB/s; 1 when all are off)."""
    if hbm_mesh_gbps <= 0 and hbm_cap_mesh_gbps <= 0 and curve_mesh_gbps <= 0:
        return 1.0
    total = 0.0
    own = 0.0
    offered = 0.0
    for j in range(rows.shape[0]):
        demand = _decode_demand(j, rows, llms, D, out_len, weights, kv, tokens, batch)
        total += demand
        offered += offered_load(demand, curve_mesh_gbps, curve_power)
        if j == i:
            own = demand
    return contention_stretch(total, own, served_latency(offered, curve_mesh_gbps, curve_power), hbm_mesh_gbps,
                              hbm_cap_mesh_gbps, curve_mesh_gbps, curve_power)


#: the fields of a prefill-beside parameter vector (:func:`prefill_beside_params`), in order
PREFILL_BESIDE = ("prefill_beside_stretch", "prefill_beside_delay_s", "prefill_beside_gbps",
                  "prefill_beside_requests", "prefill_beside_knee_tokens", "own_decode_prefill_share",
                  "prefill_beside_share_power", "prefill_beside_knee_s", "own_decode_prefill_knee_tokens",
                  "prefill_beside_eager_knee_s", "prefill_graph_tokens")
#: the length of a member's :func:`_beside_terms` vector
BESIDE_TERMS = 10


def prefill_beside_params(llm: Optional[LLMConfig], mesh_gpus: float = 1.0) -> np.ndarray:
    """``llm``'s prefill stretch beside other jobs as the estimator takes it: the fields of
    :data:`PREFILL_BESIDE`, the bandwidth for a mesh of ``mesh_gpus`` GPUs (the members' demand
    is the mesh's, as the contention stretch counts it); zeros (off) without settings."""
    if llm is None:
        return np.zeros(len(PREFILL_BESIDE))
    out = np.array([float(getattr(llm, f)) for f in PREFILL_BESIDE])
    out[2] *= mesh_gpus
    return out


@njit(cache=True)
def _beside_terms(i: int, rows: np.ndarray, llms: np.ndarray, D: np.ndarray, out_len: np.ndarray,
                  weights: np.ndarray, kv: np.ndarray, tokens: np.ndarray, batch: np.ndarray, row_share: np.ndarray,
                  params: np.ndarray, out: np.ndarray) -> None:
    """Member ``i``'s prefill stretch beside the decode steps running with it, into ``out`` =
    (base, load, prompt over the knee, delay, one over the time knee, own share, prompt over the
    own share's knee, one over an eager prefill's time knee, the prompt, the graph limit;
    :data:`BESIDE_TERMS`): at batch ``b`` its prefill
    lasts ``(base + load / (1 + b x prompt / knee) / (1 + P(b) / knee_s)) x P(b) + delay``
    (:func:`_beside_seconds`; ``params[7]``, ``prefill_beside_knee_s``: 0 off; where the prefill
    of ``b`` prompts runs eagerly, over ``params[10]``, ``prefill_graph_tokens``, its knee
    ``params[9]``, ``prefill_beside_eager_knee_s``, where set), the
    simulator's :func:`~placement_opt.simulate.meshsim.prefill_beside_stretch` in mean-value form:
    the other members decode throughout it at their batches (Eq. 3 runs prefills one at a time
    while the decode steps overlap), and its own LLM's too where two jobs of its share fit
    (share at most 0.5: the simulator then runs its prefill and decode step together); their HBM
    demand as :func:`_stretch` counts it, their requests their batches, its prompt its mean
    prompt (the simulator's knee: the padded prompt, a little longer), the load times its share
    to ``prefill_beside_share_power`` (``params[6]``; 0: off). With
    ``own_decode_prefill_share`` s (``params[5]``) and its own decode step beside it, that step
    leaves the others and the whole stretch is over s (the prefill keeps that part of its speed
    throughout, a lone member too: the simulator's
    :func:`~placement_opt.simulate.meshsim.prefill_factor_beside`); with
    ``own_decode_prefill_knee_tokens`` (``params[8]``) that part is ``1 - (1 - s) / (1 + b x
    prompt / knee)`` at batch ``b`` (``out[5]``, ``out[6]``; the simulator's
    :func:`~placement_opt.simulate.meshsim.own_decode_prefill_speed`). Only on an SM partition
    (``row_share`` below 1, as the simulator); (1, 0, 0, 0, 0, 1, 0) on the whole GPU, or alone or with the
    terms off where s is 0 or no own decode step runs beside it (``params``:
    :func:`prefill_beside_params`). Mean-value form: the own step and the others count at once
    even where their SM shares could not run together with the prefill (docs/fidelity-llm.md)."""
    out[0], out[1], out[2], out[3], out[4], out[5], out[6] = 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0
    out[7], out[8], out[9] = 0.0, 0.0, 0.0
    on = params[0] > 0 or params[1] > 0 or params[2] > 0 or params[3] > 0
    share = row_share[rows[i]]
    beside_own = 2.0 * share <= 1.0 + 1e-9  # its own decode step runs beside it
    apart = params[5] > 0 and beside_own  # ... and keeps it at that part of its speed instead
    if share >= 1.0 - 1e-9:
        return
    if on and rows.shape[0] >= 2:
        demand = 0.0
        requests = 0.0
        for j in range(rows.shape[0]):
            if j == i and (not beside_own or apart):
                continue
            demand += _decode_demand(j, rows, llms, D, out_len, weights, kv, tokens, batch)
            requests += batch[j]
        out[0] = 1.0 + params[0]
        out[1] = (demand / params[2] if params[2] > 0 else 0.0) + (requests / params[3] if params[3] > 0 else 0.0)
        if params[6] > 0:
            out[1] *= share ** params[6]
        out[2] = (tokens[llms[i]] - out_len[llms[i]]) / params[4] if params[4] > 0 else 0.0
        out[3] = params[1]
        out[4] = 1.0 / params[7] if params[7] > 0 else 0.0
        out[7] = 1.0 / params[9] if params[9] > 0 else out[4]
        out[8] = tokens[llms[i]] - out_len[llms[i]]
        out[9] = params[10] if params[9] > 0 else 0.0
    if apart and params[8] > 0:
        out[5] = params[5]
        out[6] = (tokens[llms[i]] - out_len[llms[i]]) / params[8]
    elif apart:
        out[0] /= params[5]
        out[1] /= params[5]
        out[3] /= params[5]


@njit(cache=True)
def _beside_seconds(p: float, b: int, terms: np.ndarray) -> float:
    """A prefill of table seconds ``p`` at batch ``b`` under :func:`_beside_terms`' ``terms``
    (exactly ``p`` with the terms off); where it runs eagerly
    (:func:`~placement_opt.simulate.meshsim.prefill_runs_eagerly` at the mean prompt and
    ``terms[9]``'s limit) with an eager prefill's time knee."""
    knee = terms[4]
    if terms[9] > 0 and prefill_runs_eagerly(b, int(np.ceil(terms[8])), int(terms[9])):
        knee = terms[7]
    seconds = p * (terms[0] + terms[1] / ((1.0 + b * terms[2]) * (1.0 + p * knee))) + terms[3]
    if terms[6] > 0:
        seconds /= 1.0 - (1.0 - terms[5]) / (1.0 + b * terms[6])
    return seconds


@njit(cache=True)
def _prefills_beside(rows: np.ndarray, llms: np.ndarray, P: np.ndarray, D: np.ndarray, out_len: np.ndarray,
                     weights: np.ndarray, kv: np.ndarray, tokens: np.ndarray, batch: np.ndarray, row_share: np.ndarray,
                     params: np.ndarray, terms: np.ndarray) -> float:
    """Every member's :func:`_beside_terms` at the current batches into ``terms[i]``; returns the
    members' prefill seconds per round so stretched."""
    total = 0.0
    for i in range(rows.shape[0]):
        _beside_terms(i, rows, llms, D, out_len, weights, kv, tokens, batch, row_share, params, terms[i])
        total += _beside_seconds(P[rows[i], batch[i]], batch[i], terms[i])
    return total


@njit(cache=True)
def mesh_contention_gbps(gbps: float, tp_power: float, size: float) -> float:
    """The contention stretch's rate of a mesh of ``size`` GPUs in the estimator's units, GB/s
    of the whole mesh (its demands are whole-model bytes over a step's time): the simulator's
    rate per GPU, ``gbps / size**tp_power``
    (:func:`~placement_opt.simulate.llm.contention_gbps`), times the GPUs. The search's meshes
    are tensor-parallel only, so their size is their TP degree (:func:`placement_estimates`,
    which takes placements with pipeline stages too, uses ``contention_gbps`` at the group's TP
    degree times its GPUs instead)."""
    return gbps / size ** tp_power * size


@njit(cache=True)
def unit_throughput(rows: np.ndarray, llms: np.ndarray, P: np.ndarray, D: np.ndarray, out_len: np.ndarray,
                    rate: np.ndarray, weights: np.ndarray, kv: np.ndarray, tokens: np.ndarray, cap: float,
                    reserve: float, max_batch: int, serial_decode: bool, tpt: np.ndarray, batch: np.ndarray,
                    hbm_mesh_gbps: float, hbm_cap_mesh_gbps: float, slow: np.ndarray, beside: np.ndarray,
                    row_share: np.ndarray, curve_mesh_gbps: float = 0.0, curve_power: float = 2.0) -> float:
    """Eq. 3 for the unit of LLMs ``llms`` (their latency rows ``rows``) on a mesh of ``cap``
    bytes where every LLM reserves ``reserve`` bytes; writes per-member throughput and batch
    into ``tpt``/``batch`` and returns their sum, or -1 when weights and reserves leave no
    room for one request of each LLM. ``serial_decode``: the members' decode steps run one after
    another too (temporal multiplexing: one job at a time), so each decode step of an LLM
    waits for one step of every other member. ``hbm_mesh_gbps``, ``hbm_cap_mesh_gbps``: HBM
    bandwidth and bandwidth cap of the whole mesh for the contention stretch of overlapping
    decode steps, ``curve_mesh_gbps``, ``curve_power``: its loaded-latency curve (the scale in the
    whole mesh's GB/s; 0: off; all unused with ``serial_decode``). ``slow[row]``: the
    shared-partition slowdown of the decode steps of that latency row beside its own prefill
    (:func:`_cycle`; 0: off; unused with ``serial_decode``).
    ``beside``: the prefill's stretch beside the others' decode steps (:func:`prefill_beside_params`
    for the mesh, :func:`_beside_terms`; zeros: off; unused with ``serial_decode``), which applies
    to the latency rows whose SM share ``row_share[row]`` is below 1."""
    k = rows.shape[0]
    pool = cap
    need = 0.0
    demand = 0.0
    for i in range(k):
        m = llms[i]
        pool -= weights[m] + reserve
        need += kv[m] * tokens[m]
        demand += rate[m] * kv[m]
    if pool < need:
        return -1.0
    maxb = np.empty(k, dtype=np.int64)
    for i in range(k):
        m = llms[i]
        share = rate[m] * kv[m] / demand if demand > 0 else 1.0 / k
        nb = int(pool * share / (kv[m] * tokens[m]))
        maxb[i] = min(max(nb, 1), max_batch)
        batch[i] = 1
    total_p = 0.0
    total_d = 0.0
    for i in range(k):
        total_p += P[rows[i], 1]
        total_d += D[rows[i], 1]
    hbm = 0.0 if serial_decode else hbm_mesh_gbps
    hbm_cap = 0.0 if serial_decode else hbm_cap_mesh_gbps
    curve = 0.0 if serial_decode else curve_mesh_gbps
    # each member's prefill beside the decode steps running with it (_beside_terms; off: exactly P)
    terms = np.zeros((k, BESIDE_TERMS))
    terms[:, 0] = 1.0
    on = not serial_decode and (beside[0] > 0 or beside[1] > 0 or beside[2] > 0 or beside[3] > 0 or beside[5] > 0)
    for _ in range(FIXED_POINT_ROUNDS):
        for i in range(k):
            r = rows[i]
            if on:  # the stretches follow every member's current batch: the sum afresh
                total_p = _prefills_beside(rows, llms, P, D, out_len, weights, kv, tokens, batch, row_share, beside,
                                           terms)
            others_p = total_p - _beside_seconds(P[r, batch[i]], batch[i], terms[i])
            others_d = total_d - D[r, batch[i]]
            stretch = _stretch(i, rows, llms, D, out_len, weights, kv, tokens, batch, hbm, hbm_cap, curve, curve_power)
            own = 0.0 if serial_decode else slow[r]
            b = _smallest_batch(r, llms[i], others_p, others_d if serial_decode else 0.0, P, D, out_len, rate, maxb[i],
                                stretch, own, terms[i])
            batch[i] = b
            total_p = others_p + _beside_seconds(P[r, b], b, terms[i])  # (recomputed next, while on)
            total_d = others_d + D[r, b]
    if on:
        total_p = _prefills_beside(rows, llms, P, D, out_len, weights, kv, tokens, batch, row_share, beside, terms)
    s = 0.0
    for i in range(k):
        m = llms[i]
        r = rows[i]
        step = total_d if serial_decode else D[r, batch[i]] * _stretch(i, rows, llms, D, out_len, weights, kv, tokens,
                                                                       batch, hbm, hbm_cap, curve, curve_power)
        own = 0.0 if serial_decode else slow[r]
        tpt[i] = min(batch[i] / _cycle(total_p, step, _beside_seconds(P[r, batch[i]], batch[i], terms[i]), step,
                                       out_len[m], own), rate[m])
        s += tpt[i]
    return s


@dataclass(frozen=True, eq=False)
class EstimatorTables:
    """Flat arrays of every LLM x TP-degree candidate (row ``llm * n_tp + t``)."""

    tps: np.ndarray  # TP degrees considered, ascending
    share: np.ndarray  # [llm, t] candidate SM share, 0 where infeasible
    feasible: np.ndarray  # [llm, t] bool
    P: np.ndarray  # [row, b] prefill seconds of b prompts, b = 0..max_batch
    D: np.ndarray  # [row, b] decode-step seconds of b requests
    slow: np.ndarray  # [row] shared-partition slowdown of the row's decode steps beside its own prefill (0: off)
    out_len: np.ndarray
    rate: np.ndarray
    weights: np.ndarray
    kv: np.ndarray
    tokens: np.ndarray
    max_batch: int
    memory: MeshMemory  # the rule set's memory plan per GPU
    serial_decode: bool = False  # colocated LLMs' decode steps run one after another (temporal multiplexing)
    hbm_gbps: float = 0.0  # llm.contention_hbm_gbps: HBM GB/s per GPU of the contention stretch (0: off)
    hbm_cap_gbps: float = 0.0  # llm.contention_hbm_cap_gbps: HBM GB/s per GPU colocated steps share (0: off)
    hbm_tp_power: float = 0.0  # llm.contention_tp_power: the stretch's rate over tp**this on a TP mesh
    host: LLMConfig = LLMConfig()  # the settings whose host seconds (by share) P and D include

    def contention(self, size: float) -> Tuple[float, float]:
        """The contention rate and bandwidth cap of a mesh of ``size`` GPUs in the estimator's
        whole-mesh units (:func:`mesh_contention_gbps`; the cap times the GPUs)."""
        return mesh_contention_gbps(self.hbm_gbps, self.hbm_tp_power, size), self.hbm_cap_gbps * size

    def curve(self, size: float) -> Tuple[float, float]:
        """The loaded-latency curve's scale (``host.contention_curve_gbps`` times the GPUs: the
        estimator's whole-mesh units) and power on a mesh of ``size`` GPUs."""
        return self.host.contention_curve_gbps * size, self.host.contention_curve_power

    def beside(self, size: float) -> np.ndarray:
        """The prefill-beside parameters of ``host`` for a mesh of ``size`` GPUs (:func:`prefill_beside_params`)."""
        return prefill_beside_params(self.host, size)

    def row(self, llm: int, t: int) -> int:
        return llm * len(self.tps) + t

    def estimate(self, llms: Sequence[int] | np.ndarray, t: int) -> Tuple[float, np.ndarray, np.ndarray]:
        """(sum, per-LLM throughput, batches) of a unit of ``llms`` on a mesh of TP index ``t``."""
        members = np.asarray(llms, dtype=np.int64)
        rows = members * len(self.tps) + t
        tpt = np.zeros(len(members))
        batch = np.zeros(len(members), dtype=np.int64)
        size = float(self.tps[t])
        s = unit_throughput(rows, members, self.P, self.D, self.out_len, self.rate, self.weights, self.kv,
                            self.tokens, self.memory.per_gpu * size, self.memory.reserve * size, self.max_batch,
                            self.serial_decode, tpt, batch, *self.contention(size), self.slow, self.beside(size),
                            self.share.reshape(-1), *self.curve(size))
        return s, tpt, batch


def latency_vectors(spec: LLMSpec, tp: int, share: float, max_batch: int,
                    llm: Optional[LLMConfig] = None,
                    mesh: Optional[Sequence[LLMSpec]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Prefill and decode-step seconds for batches 0..max_batch at the spec's mean lengths;
    with ``llm``'s host model (:func:`host_seconds` at this share and TP degree) a decode step
    takes its launch longer, a prefill at least its launch, and a prefill whose padded size at
    the mean prompt exceeds ``llm.prefill_graph_tokens`` (it runs eagerly) its eager host
    seconds longer (the simulator's host model; the TP collect and the eager thread hold too:
    :func:`_prefill_with_host`); with ``llm.decode_kv_gbps`` a decode step of ``b`` requests
    lasts their KV bytes per GPU at the mean context / that rate at its TP degree longer (the
    simulator's KV-read term, :func:`kv_read_gbps`), or where the LLM has a decode stretch
    (:func:`decode_stretch`: ``llm.decode_full_stretch`` on a whole GPU of a one-GPU mesh,
    ``llm.decode_partition_stretch`` on an SM partition of one) its table time that many times and
    the seconds per request (:func:`decode_request_seconds`) more per request, and its
    split-combine spill (:func:`combine_spill_seconds`, ``llm.decode_combine_spill_s``) at that
    longest context where it spills, read there with
    ``llm.decode_attention_sms`` at the step's
    effective context (:func:`decode_wave`, the kernel's ``decode_context``; mean-value form: the
    longest of ``b`` requests whose decode progress is spread evenly, prompt + output x b / (b + 1)
    tokens, the mean context at one request); with ``llm.decode_page_entry_s`` it lasts
    the host fill of its page table longer: ``b`` x the blocks of the mean context x the
    simulator's fill seconds per block (:func:`page_fill_seconds`) on a mesh serving ``mesh``
    (None: the LLM alone, as the search's tables, built before any colocation, take it; the
    placement's meshes in :func:`placement_estimates`)."""
    bgrid, lgrid, p2, d2 = spec.table.at_share(tp, share)
    b = np.arange(max_batch + 1, dtype=np.float64)
    b[0] = 1.0
    context = spec.prompt_tokens + spec.output_tokens / 2.0
    pre = lookup_batches(p2, bgrid, lgrid, b, spec.prompt_tokens)
    wave = 0.0 if llm is None else decode_wave(llm, spec, share, tp)
    longest = spec.prompt_tokens + spec.output_tokens * b / (b + 1.0)  # mean-value form, progress spread evenly
    if wave > 0:  # each batch at its effective context
        dec = np.array([lookup(d2, bgrid, lgrid, n, decode_context(context * n, top, n, wave))
                        for n, top in zip(b, longest)])
    else:
        dec = lookup_batches(d2, bgrid, lgrid, b, context)
    if llm is None:
        return pre, dec
    decode_host, prefill_host, eager_host = host_seconds(llm, share, tp)
    stretch = decode_stretch(llm, share, tp)
    if stretch > 0:
        dec = dec * stretch
    per_request = decode_request_seconds(llm, share, tp)
    if per_request > 0:
        dec = dec + b * per_request
    if llm.decode_combine_spill_s > 0:  # at the mean-value longest context, as the effective context
        dec = dec + np.array([combine_spill_seconds(llm, spec, tp, int(n), int(np.ceil(top)))
                              for n, top in zip(b, longest)])
    if decode_host > 0:
        dec = dec + decode_host
    if llm.decode_kv_gbps > 0 and stretch == 0:
        dec = dec + b * context * (spec.kv_bytes_per_token / tp) / (kv_read_gbps(llm, tp) * 1e9)
    if llm.decode_page_entry_s > 0:
        blocks = np.ceil((context + 1.0) / llm.kv_block_tokens)
        dec = dec + b * blocks * page_fill_seconds(llm, spec, mesh or [spec], tp)
    return _prefill_with_host(pre, b, spec, llm, share, tp, prefill_host, eager_host), dec


def _prefill_with_host(pre: np.ndarray, b: np.ndarray, spec: LLMSpec, llm: LLMConfig, share: float, tp: int,
                       prefill_host: float, eager_host: float) -> np.ndarray:
    """The prefill seconds ``pre`` (batches ``b``) under the simulator's host model, in its
    order: the ranks' collect (:func:`prefill_collect_seconds`: ``llm.prefill_host_tp_s`` per TP
    rank beyond the first, ``llm.prefill_host_mesh_s`` on any mesh of several) and on a whole
    GPU of a one-GPU mesh the start into its launch (``llm.prefill_start_full_s``; together
    :func:`prefill_extra_seconds`) added to the table time, at least the launch's
    ``prefill_host``, an eager prefill (padded size at the mean prompt over
    ``prefill_graph_tokens``) ``eager_host`` longer; and, with ``llm.prefill_eager_hold_s`` (an SM
    partition) or ``prefill_eager_hold_full_s`` (the whole GPU), an eager prefill's round share at least the
    thread's hold ``prefill_host`` plus that hold: the mesh's one scheduling thread
    launches nothing else that long, so every member's round waits for it as Eq. 3 waits for
    a prefill (mean value; the hold only counts where it outlasts the prefill)."""
    collect = prefill_extra_seconds(llm, share, tp)
    if collect > 0:
        pre = pre + collect
    if prefill_host > 0:
        pre = np.maximum(pre, prefill_host)
    hold = eager_hold_seconds(llm, share, tp)
    if eager_host > 0 or hold > 0:
        eager = eager_batches(b.astype(np.int64), int(np.ceil(spec.prompt_tokens)), llm.prefill_graph_tokens)
        pre = pre + eager_host * eager
        if hold > 0:
            pre = np.where(eager > 0, np.maximum(pre, prefill_host + hold), pre)
    return pre


@njit(cache=True)
def eager_batches(batches: np.ndarray, longest: int, graph_tokens: int) -> np.ndarray:
    """1.0 where a prefill of that many prompts of ``longest`` tokens runs eagerly
    (:func:`prefill_runs_eagerly`, the simulator's and the engine's one test), else 0.0: one
    compiled call for a whole batch vector."""
    out = np.zeros(batches.shape[0])
    for i in range(batches.shape[0]):
        if prefill_runs_eagerly(batches[i], longest, graph_tokens):
            out[i] = 1.0
    return out


def own_prefill_slowdown(llm: Optional[LLMConfig], share: float, serial_decode: bool,
                         prompt_tokens: float = 0.0) -> float:
    """The shared-partition slowdown of an LLM's decode steps at SM ``share`` (:func:`_cycle`):
    ``1 / s - 1``, ``s`` the part of its speed a step keeps beside its own prefill
    (``llm.own_prefill_decode_share``, over ``1 + prompt_tokens / llm.own_prefill_decode_knee_tokens``
    where that is set: the simulator's ``meshsim.own_prefill_decode_speed`` at a prefill of one
    prompt of the LLM's mean length, mean value) where the simulator can run the LLM's prefill and
    decode together (two jobs of its share fit the mesh: share at most 0.5) and scheduling
    overlaps jobs, else 0 (off, or never beside its own prefill)."""
    if llm is None or llm.own_prefill_decode_share <= 0 or serial_decode or 2.0 * share > 1.0 + 1e-9:
        return 0.0
    knee = llm.own_prefill_decode_knee_tokens
    return (1.0 + prompt_tokens / knee if knee > 0 else 1.0) / llm.own_prefill_decode_share - 1.0


def build_tables(specs: List[LLMSpec], cluster: Cluster, max_batch: int, memory: MeshMemory,
                 tps: Sequence[int] | None = None, full_share: bool = False,
                 serial_decode: bool = False, llm: Optional[LLMConfig] = None) -> EstimatorTables:
    """Candidates of Algorithm 2: per LLM and TP degree, the smallest SM share (30-100 %)
    whose Eq. 3 estimate alone on the mesh meets the LLM's rate (all SMs if none does).

    A TP degree is feasible when it keeps the hardware rules (:func:`tp_violations`: heads,
    KV heads, MLP width, a cost-table entry) and a mesh of that size holds the weights, the
    reserve and one request's KV cache under ``memory``. ``full_share`` fixes every share at
    1; ``serial_decode`` makes every estimate of the tables serialise colocated decode steps
    (temporal scheduling, :func:`unit_throughput`). ``llm``: the instance's settings, whose
    host and contention parameters the estimates then include (module docstring).
    """
    gpn = cluster.gpus_per_node
    if tps is None:
        tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= gpn]
    tp_degrees = np.asarray(tps, dtype=np.int64)
    n, nt = len(specs), len(tp_degrees)
    share = np.zeros((n, nt))
    feasible = np.zeros((n, nt), dtype=bool)
    P = np.full((n * nt, max_batch + 1), np.inf)
    D = np.full((n * nt, max_batch + 1), np.inf)
    tables = EstimatorTables(tps=tp_degrees, share=share, feasible=feasible, P=P, D=D, slow=np.zeros(n * nt),
                             out_len=np.array([s.output_tokens for s in specs]), rate=np.array([s.rate for s in specs]),
                             weights=np.array([s.weight_bytes for s in specs]),
                             kv=np.array([s.kv_bytes_per_token for s in specs]),
                             tokens=np.array([s.tokens_per_request for s in specs]), max_batch=max_batch, memory=memory,
                             serial_decode=serial_decode, hbm_gbps=llm.contention_hbm_gbps if llm else 0.0,
                             hbm_cap_gbps=llm.contention_hbm_cap_gbps if llm else 0.0,
                             hbm_tp_power=llm.contention_tp_power if llm else 0.0,
                             host=llm or LLMConfig())
    for i, spec in enumerate(specs):
        for t, tp in enumerate(tp_degrees):
            if tp_violations(spec, int(tp)) or not _holds_alone(spec, int(tp), memory):
                continue
            feasible[i, t] = True
            share[i, t] = _candidate_share(tables, spec, i, t, full_share)
    return tables


def _holds_alone(spec: LLMSpec, tp: int, memory: MeshMemory) -> bool:
    """Whether a mesh of ``tp`` GPUs holds the LLM's weights, reserve and one request's KV cache."""
    return (memory.weights_fit(tp, spec.weight_bytes, 1)
            and memory.kv_pool(tp, spec.weight_bytes, 1) >= spec.kv_bytes_per_token * spec.tokens_per_request)


def _candidate_share(tables: EstimatorTables, spec: LLMSpec, i: int, t: int, full_share: bool) -> float:
    """Fill the latency rows of (LLM ``i``, TP index ``t``) at the smallest SM share whose
    estimate alone meets the rate, and return that share (1 with ``full_share``)."""
    row = tables.row(i, t)
    tp = int(tables.tps[t])
    chosen = 1.0
    for sh in ([1.0] if full_share else SM_SHARES):
        tables.P[row], tables.D[row] = latency_vectors(spec, tp, float(sh), tables.max_batch, tables.host)
        tables.slow[row] = own_prefill_slowdown(tables.host, float(sh), tables.serial_decode, spec.prompt_tokens)
        chosen = float(sh)
        if tables.estimate([i], t)[0] >= tables.rate[i] * (1 - 1e-9):
            break
    return chosen


class Headroom:
    """How a unit's Eq. 3 estimate holds up as every rate grows: the estimate (req/s) at each
    of ``scales`` x the rates, memoised per unit (the tie-break of the mesh-group search).

    With ``fit_shares``, a unit whose candidate SM shares sum to more than the mesh is
    estimated at those shares scaled down in proportion to sum to 1, the most the simulator
    runs at once (and what the written placement gives them); candidates that fit keep their
    shares. Without it (temporal scheduling, all shares 1: one job at a time) the rows are
    used as they are.
    """

    def __init__(self, tables: EstimatorTables, specs: Sequence[LLMSpec], scales: Sequence[float],
                 fit_shares: bool) -> None:
        self.tables = tables
        self.specs = specs
        self.scales = tuple(float(x) for x in scales)
        self.fit_shares = fit_shares
        self._units: Dict[Tuple[Tuple[int, ...], int], Tuple[float, ...]] = {}

    def of_unit(self, llms: Sequence[int], t: int) -> Tuple[float, ...]:
        """The estimate of the unit ``llms`` on a mesh of TP index ``t`` at every scale."""
        key = (tuple(int(m) for m in llms), int(t))
        if key not in self._units:
            self._units[key] = self._ladder(np.asarray(key[0], dtype=np.int64), key[1])
        return self._units[key]

    def _ladder(self, members: np.ndarray, t: int) -> Tuple[float, ...]:
        tb = self.tables
        rows = members * len(tb.tps) + t
        P, D, slow = tb.P, tb.D, tb.slow
        shares = tb.share[members, t]
        row_share = tb.share.reshape(-1)
        if self.fit_shares and shares.sum() > 1.0 + 1e-9:
            tp = int(tb.tps[t])
            fitted_shares = shares / shares.sum()
            fitted = [latency_vectors(self.specs[m], tp, float(sh), tb.max_batch, tb.host)
                      for m, sh in zip(members, fitted_shares)]
            P = np.stack([f[0] for f in fitted])
            D = np.stack([f[1] for f in fitted])
            slow = np.array([own_prefill_slowdown(tb.host, float(sh), tb.serial_decode, self.specs[m].prompt_tokens)
                             for m, sh in zip(members, fitted_shares)])
            rows = np.arange(len(members), dtype=np.int64)
            row_share = fitted_shares
        size = float(tb.tps[t])
        tpt = np.zeros(len(members))
        batch = np.zeros(len(members), dtype=np.int64)
        hbm, hbm_cap = tb.contention(size)
        beside = tb.beside(size)
        return tuple(unit_throughput(rows, members, P, D, tb.out_len, tb.rate * scale, tb.weights, tb.kv, tb.tokens,
                                     tb.memory.per_gpu * size, tb.memory.reserve * size, tb.max_batch,
                                     tb.serial_decode, tpt, batch, hbm, hbm_cap, slow, beside, row_share,
                                     *tb.curve(size))
                     for scale in self.scales)


def placement_estimates(instance: Instance, placement: Placement) -> Dict[str, float]:
    """Eq. 3 throughput (req/s) of every placed LLM at the placement's meshes and SM shares,
    under the placement's rule set's memory plan, its policy and shares read as the simulator
    reads them (:func:`resolve_policy`, :func:`sm_shares`: under ``temporal`` every LLM has the
    whole mesh)."""
    cfg = llm_config(instance)
    policy = resolve_policy(instance, placement)
    temporal = policy == "temporal"
    specs = llm_specs(instance)
    memory = mesh_memory(instance, placement_rules(placement))
    index = {s.name: s.index for s in specs}
    columns = {a: np.array([getattr(s, a) for s in specs])
               for a in ("output_tokens", "rate", "weight_bytes", "kv_bytes_per_token", "tokens_per_request")}
    out: Dict[str, float] = {}
    for g in placement.groups:
        if not g.models:
            continue
        members = [index[m] for m in g.models]
        shares = sm_shares(g, policy)
        k = len(members)
        P = np.empty((k, cfg.max_batch + 1))
        D = np.empty_like(P)
        slow = np.array([own_prefill_slowdown(cfg, float(sh), temporal, specs[i].prompt_tokens)
                         for i, sh in zip(members, shares)])
        mesh = [specs[i] for i in members]
        for j, (i, sh) in enumerate(zip(members, shares)):
            P[j], D[j] = latency_vectors(specs[i], g.tp, float(sh), cfg.max_batch, cfg, mesh)
        tpt = np.zeros(k)
        batch = np.zeros(k, dtype=np.int64)
        unit_throughput(np.arange(k, dtype=np.int64), np.asarray(members, dtype=np.int64), P, D,
                        columns["output_tokens"], columns["rate"], columns["weight_bytes"],
                        columns["kv_bytes_per_token"], columns["tokens_per_request"], memory.per_gpu * g.n_gpus,
                        memory.reserve * g.n_gpus, cfg.max_batch, temporal, tpt, batch,
                        contention_gbps(cfg, g.tp) * g.n_gpus,
                        cfg.contention_hbm_cap_gbps * g.n_gpus, slow,
                        prefill_beside_params(cfg, g.n_gpus), np.asarray(shares, dtype=np.float64),
                        cfg.contention_curve_gbps * g.n_gpus, cfg.contention_curve_power)
        for j, i in enumerate(members):
            out[specs[i].name] = float(tpt[j])
    return out
