"""The host probe: a mesh's decode-step host time measured on the run's own machine.

Why: the simulator's decode host seconds (``llm.decode_host_*``) are fitted on runs of one
machine, but the time a decode step takes beyond its profiled GPU time moves between machines
of one kind, and between runs on one machine, by up to 40% (4 x H100: 1.5-2.3 ms at TP 4,
docs/fidelity-llm.md). Where a run is bound by it (a TP-4 mesh serving four LLMs one job at a
time) that is a 13% throughput miss. So before its trials the executor runs a short probe on
the same workers: on every mesh each LLM in turn decodes a batch of short requests alone,
and the steps' time beyond the cost table (and the simulator's KV-read and page-fill terms, or
on a whole GPU of a one-GPU mesh beyond the table x its decode stretch) is that LLM's decode
host time on this machine, at its SM share and TP degree, for short contexts (at a batch of
``PROBE_BATCH``: where the stretch depends on the batch, a trial at larger batches differs).
The prediction beside the measurement is then made a second time with those host times
(:func:`placement_opt.simulate.llm.simulate_llm`'s ``decode_host``). What it showed on
the H100s: at TP 1 and 2 that prediction is as close as the calibrated one; at TP 4 the probe
orders runs by their host time but reads 0.1-0.3 ms per step below the trial's own steps, so
its prediction is no closer than the calibrated one; and a GPU that slows during the trial is
beyond any probe before it (docs/fidelity-llm.md).

The same reading of a trial's own token times (:func:`trial_decode_host`, on meshes that run one
job at a time) says after the run what host time its steps took: the prediction made again with
it (``summary.json``'s ``host_in_run``) is no forecast, it separates what the model misses from
the pace the machine gave the run's host threads (on the H100 machines that pace moves 1-2 x
over seconds: ``benchmarks/fidelity/llm/host_pace.py``).

:func:`probe_requests` writes one mesh's probe workload (per LLM ``PROBE_BATCH`` requests of
``PROBE_PROMPT`` prompt and ``PROBE_OUTPUT`` output tokens, within the job bounds the workers
prepared and the pool, arriving together, each LLM after the previous one's should have
finished; :func:`placement_opt.executor.llm_run.host_probe_plans` runs it on the trial's
schedulers, pools and shares); :func:`decode_host_seconds` reads the host time per LLM off the
probe's token times.
"""

from __future__ import annotations

from typing import Collection, Dict, List, Optional, Sequence, Tuple

import numpy as np

from placement_opt.executor.llm_sched import len_interp
from placement_opt.llm_units import LLMSpec
from placement_opt.settings import LLMConfig
from placement_opt.simulate import llm as simllm
from placement_opt.simulate.meshsim import MeshRequests, decode_context

PROBE_BATCH = 16  # requests one LLM decodes together in the probe (at most its job bound)
PROBE_PROMPT = 32  # prompt tokens of a probe request (at most half its LLM's longest request)
PROBE_OUTPUT = 48  # output tokens of a probe request: 47 back-to-back decode steps
MIN_STEPS = 5  # fewer back-to-back steps of an LLM measure nothing (its host time stays the calibrated one)
SLOT_MARGIN = 3.0  # an LLM's slot: this many times its steps' table time plus host time, and SLOT_PAD_S more
SLOT_PAD_S = 0.2


def probe_requests(specs: Sequence[LLMSpec], bounds: Sequence[Dict[str, int]], tp: int, shares: Sequence[float],
                   cfg: LLMConfig, max_batch: int, pages_per_block: Sequence[int], pool_pages: int
                   ) -> Tuple[MeshRequests, float]:
    """One mesh's probe requests (mesh-local LLM ids) and the probe's span: LLM k's
    ``min(PROBE_BATCH, its job bound)`` requests arrive together at the start of its slot,
    the slots one after another, each long enough for that LLM's prefill and decode steps
    ``SLOT_MARGIN`` times over (table and calibrated host time) so no two LLMs' steps mix.
    All of them together fit the engine's pool (``pool_pages`` pages, a block of LLM k being
    ``pages_per_block[k]`` of them), even if slots overlapped: the largest batches shrink first."""
    P, D, lgrid = simllm._mesh_tables(list(specs), tp, list(shares), max_batch)
    lgrid = lgrid.astype(np.float64)
    lengths = []
    for b in bounds:
        p = max(1, min(PROBE_PROMPT, b["longest"] // 2))
        lengths.append((p, max(2, min(PROBE_OUTPUT, b["longest"] - p))))
    counts = [max(1, min(PROBE_BATCH, b["max_batch"])) for b in bounds]
    pages = [(p + o + cfg.kv_block_tokens) // cfg.kv_block_tokens * ppb
             for (p, o), ppb in zip(lengths, pages_per_block)]
    while sum(n * c for n, c in zip(counts, pages)) > pool_pages and max(counts) > 1:
        counts[int(np.argmax(counts))] -= 1
    arrival, llm, prompt, output = [], [], [], []
    t = 0.0
    for k, (n, (p, o), share) in enumerate(zip(counts, lengths, shares)):
        host = simllm.host_seconds(cfg, share, tp)
        step = len_interp(D[k, n], lgrid, float(p + o)) + host[0]
        busy = len_interp(P[k, n], lgrid, float(p)) + host[1] + (o - 1) * step
        arrival += [t] * n
        llm += [k] * n
        prompt += [p] * n
        output += [o] * n
        t += SLOT_MARGIN * busy + SLOT_PAD_S
    return MeshRequests(arrival=np.array(arrival, dtype=np.float64), llm=np.array(llm, dtype=np.int64),
                        prompt=np.array(prompt, dtype=np.int64), output=np.array(output, dtype=np.int64)), t


def decode_host_seconds(specs: Sequence[LLMSpec], tp: int, shares: Sequence[float], cfg: LLMConfig,
                        max_batch: int, requests: MeshRequests, token_times: Sequence[Sequence[float]],
                        skip: Collection[int] = ()) -> List[Optional[float]]:
    """Per LLM of one mesh, the median time its probe decode steps took beyond the simulator's
    step time without host seconds (the cost table at the step's batch and mean context, or its
    effective context with a decode wave (:func:`~placement_opt.simulate.llm.decode_wave`; the
    probe's own requests of one LLM hold one context, so there it is their mean), plus
    the KV-read term at this TP degree or, where the LLM has a decode stretch
    (:func:`~placement_opt.simulate.llm.decode_stretch`), times the stretch, plus its seconds per
    request (:func:`~placement_opt.simulate.llm.decode_request_seconds`), plus its split-combine
    spill (:func:`~placement_opt.simulate.llm.combine_spill_seconds`); and the page-table
    fill): over every pair of consecutive
    token events of the mesh that are both decode steps of that LLM (nothing else ran between).
    ``token_times[i]``: the times of request i's tokens; a pair with a request of ``skip`` in
    either event is left out. None where an LLM has fewer than ``MIN_STEPS`` such steps."""
    P, D, lgrid = simllm._mesh_tables(list(specs), tp, list(shares), max_batch)
    lgrid = lgrid.astype(np.float64)
    events: Dict[float, List[Tuple[int, int]]] = {}  # time -> (request, token index) of one job's end
    for i, times in enumerate(token_times):
        for j, t in enumerate(times):
            events.setdefault(round(float(t), 6), []).append((i, j))
    ordered = sorted(events)
    fill = [simllm.page_fill_seconds(cfg, s, list(specs), tp) for s in specs]
    kv_gbps = simllm.kv_read_gbps(cfg, tp)
    stretch = [simllm.decode_stretch(cfg, sh, tp) for sh in shares]
    per_request = [simllm.decode_request_seconds(cfg, sh, tp) for sh in shares]
    wave = [simllm.decode_wave(cfg, s, sh, tp) for s, sh in zip(specs, shares)]
    excess: List[List[float]] = [[] for _ in specs]
    for t0, t1 in zip(ordered, ordered[1:]):
        before, step = events[t0], events[t1]
        ks = {int(requests.llm[i]) for i, _ in before + step}
        if len(ks) != 1 or any(j == 0 or i in skip for i, j in before + step):
            continue  # another LLM's job, or a prefill, between them; or a request to skip
        k = ks.pop()
        context = [int(requests.prompt[i]) + j for i, j in step]  # tokens in the cache when the step ran
        b, total = len(step), float(sum(context))
        modelled = len_interp(D[k, min(b, max_batch)], lgrid, decode_context(total, float(max(context)), b, wave[k]))
        if stretch[k] > 0:
            modelled *= stretch[k]
        elif kv_gbps > 0:
            modelled += total * specs[k].kv_bytes_per_token / tp / (kv_gbps * 1e9)
        modelled += per_request[k] * b
        modelled += simllm.combine_spill_seconds(cfg, specs[k], tp, b, max(context))
        modelled += fill[k] * sum((c + cfg.kv_block_tokens) // cfg.kv_block_tokens for c in context)
        excess[k].append(t1 - t0 - modelled)
    return [float(np.median(e)) if len(e) >= MIN_STEPS else None for e in excess]


def trial_decode_host(specs: Sequence[LLMSpec], tp: int, shares: Sequence[float], cfg: LLMConfig, max_batch: int,
                      requests: MeshRequests, token_times: Sequence[Sequence[float]], skip: Collection[int] = ()
                      ) -> Optional[List[Optional[float]]]:
    """Per LLM of one mesh, the decode host seconds its own trial's steps took
    (:func:`decode_host_seconds` over the trial's token times, ``skip`` as there: the requests
    that were preempted, whose recompute is a prefill), where the mesh runs one job at a time
    (every LLM's share whole: a temporal mesh, or one LLM alone at share 1); None for a mesh of
    SM partitions (there two token events of one LLM in a row may have other LLMs' jobs running
    beside them, which stretch its steps), or where no LLM has ``MIN_STEPS`` back-to-back steps."""
    if any(s < 1.0 for s in shares):
        return None
    host = decode_host_seconds(specs, tp, shares, cfg, max_batch, requests, token_times, skip)
    return host if any(h is not None for h in host) else None
