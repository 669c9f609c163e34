"""The executor's host probe (``placement_opt.executor.llm_probe``) and the simulator's
measured decode host seconds (``simulate_llm(..., decode_host=)``), without a GPU: the probe's
requests keep to the workers' job bounds and the pool, its reading of token times recovers a
known host time exactly and skips what is not a back-to-back step, and the simulator uses
the measured value in place of the calibrated one, per LLM.

(The probe on real workers: ``tests/executor/test_llm_executor.py``'s tiny runs; on the
H100s: docs/fidelity-llm.md.)
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from placement_opt import load_instance
from placement_opt.executor.llm_probe import MIN_STEPS, PROBE_BATCH, decode_host_seconds, probe_requests
from placement_opt.executor.llm_sched import len_interp
from placement_opt.llm_units import llm_specs
from placement_opt.placement import load_placement
from placement_opt.simulate import llm as simllm

from .helpers import ROOT

GPU4 = os.path.join(ROOT, "instances", "fidelity-llm", "gpu4s1")


def _mesh():
    inst = load_instance(os.path.join(GPU4, "measured", "poisson.json"))
    return inst, llm_specs(inst), inst.llm_settings


def test_probe_requests_keep_to_the_job_bounds_and_the_pool():
    """Each LLM's batch arrives together, after the previous LLM's slot, within its job bound
    (batch and longest request); with a small pool the batches shrink until all fit it."""
    _, specs, cfg = _mesh()
    bounds = [{"max_batch": 32, "longest": 2048}, {"max_batch": 3, "longest": 40}, {"max_batch": 32, "longest": 2048},
              {"max_batch": 32, "longest": 2048}]
    req, span = probe_requests(specs, bounds, 4, [1.0] * 4, cfg, 32, [1, 1, 1, 1], 10**6)
    counts = np.bincount(req.llm, minlength=4)
    assert counts.tolist() == [PROBE_BATCH, 3, PROBE_BATCH, PROBE_BATCH]
    starts = [req.arrival[req.llm == k] for k in range(4)]
    assert all(len(set(s.tolist())) == 1 for s in starts)
    assert starts[0][0] == 0 < starts[1][0] < starts[2][0] < starts[3][0] < span
    assert ((req.prompt + req.output)[req.llm == 1] <= 40).all()
    blocks = (req.prompt + req.output + cfg.kv_block_tokens) // cfg.kv_block_tokens
    small, _ = probe_requests(specs, bounds, 4, [1.0] * 4, cfg, 32, [2, 1, 1, 1], 60)
    small_blocks = (small.prompt + small.output + cfg.kv_block_tokens) // cfg.kv_block_tokens
    assert (small_blocks * np.array([2, 1, 1, 1])[small.llm]).sum() <= 60 < (blocks * np.array([2, 1, 1, 1])[req.llm]).sum()
    assert np.bincount(small.llm, minlength=4).min() >= 1


def _token_times(req, specs, cfg, tp, host, max_batch=32):
    """Token times of the probe requests as if each LLM's steps took the simulator's step time
    without host seconds (on whole GPUs: its table time plus the KV read, or x the decode
    stretch and plus its seconds per request) plus ``host[k]``, each LLM's batch alone (its
    prefill 10 ms)."""
    P, D, lgrid = simllm._mesh_tables(list(specs), tp, [1.0] * len(specs), max_batch)
    times = [[] for _ in req.arrival]
    for k in range(len(specs)):
        mine = np.flatnonzero(req.llm == k)
        t = float(req.arrival[mine[0]]) + 0.01
        for i in mine:
            times[i].append(t)
        p, o = int(req.prompt[mine[0]]), int(req.output[mine[0]])
        for j in range(1, o):
            ctx = p + j
            step = len_interp(D[k, len(mine)], lgrid.astype(np.float64), float(ctx))
            stretch = simllm.decode_stretch(cfg, 1.0, tp)
            if stretch > 0:
                step *= stretch
            else:
                step += len(mine) * ctx * specs[k].kv_bytes_per_token / tp / (simllm.kv_read_gbps(cfg, tp) * 1e9)
            step += simllm.decode_request_seconds(cfg, 1.0, tp) * len(mine)
            step += simllm.page_fill_seconds(cfg, specs[k], list(specs), tp) * len(mine) * (
                (ctx + cfg.kv_block_tokens) // cfg.kv_block_tokens)
            t += step + host[k]
            for i in mine:
                times[i].append(t)
    return times


def test_reading_recovers_the_host_time_of_each_llm():
    """Steps that took the modelled time + h_k read back as h_k (to the microsecond's rounding)."""
    _, specs, cfg = _mesh()
    bounds = [{"max_batch": 32, "longest": 2048}] * 4
    req, _ = probe_requests(specs, bounds, 4, [1.0] * 4, cfg, 32, [1, 1, 1, 1], 10**6)
    host = [1.2e-3, 1.5e-3, 2.3e-3, 0.9e-3]
    got = decode_host_seconds(specs, 4, [1.0] * 4, cfg, 32, req, _token_times(req, specs, cfg, 4, host))
    assert got == pytest.approx(host, abs=2e-6)


def test_reading_is_beyond_the_decode_stretch_on_a_one_gpu_mesh():
    """With ``decode_full_stretch`` the probe's modelled step on a whole GPU of a one-GPU mesh is
    the stretched table time (no KV read), so steps that took it + h_k read back as h_k; the
    same steps read against the KV read instead give other values."""
    _, specs, cfg = _mesh()
    stretched = dataclasses.replace(cfg, decode_full_stretch=1.07)
    bounds = [{"max_batch": 32, "longest": 2048}] * 4
    req, _ = probe_requests(specs, bounds, 1, [1.0] * 4, stretched, 32, [1, 1, 1, 1], 10**6)
    host = [2e-4, 3e-4, 2.5e-4, 1.5e-4]
    times = _token_times(req, specs, stretched, 1, host)
    assert decode_host_seconds(specs, 1, [1.0] * 4, stretched, 32, req, times) == pytest.approx(host, abs=2e-6)
    other = decode_host_seconds(specs, 1, [1.0] * 4, cfg, 32, req, times)
    assert all(abs(o - h) > 1e-5 for o, h in zip(other, host))


def test_reading_is_beyond_the_seconds_per_request_on_a_one_gpu_mesh():
    """With ``decode_full_request_s`` too, steps that took the stretched table time + the seconds
    per request x the batch + h_k read back as h_k; read without that term, h_k + that much."""
    _, specs, cfg = _mesh()
    on = dataclasses.replace(cfg, decode_full_stretch=1.02, decode_full_request_s=1.5e-5)
    bounds = [{"max_batch": 32, "longest": 2048}] * 4
    req, _ = probe_requests(specs, bounds, 1, [1.0] * 4, on, 32, [1, 1, 1, 1], 10**6)
    host = [2e-4, 3e-4, 2.5e-4, 1.5e-4]
    times = _token_times(req, specs, on, 1, host)
    assert decode_host_seconds(specs, 1, [1.0] * 4, on, 32, req, times) == pytest.approx(host, abs=2e-6)
    batch = [int(np.sum(req.llm == k)) for k in range(4)]
    without = decode_host_seconds(specs, 1, [1.0] * 4, dataclasses.replace(on, decode_full_request_s=0.0), 32, req, times)
    assert without == pytest.approx([h + 1.5e-5 * b for h, b in zip(host, batch)], abs=2e-6)


def test_reading_is_beyond_the_step_at_its_effective_context():
    """With ``decode_attention_sms`` the probe models a whole-GPU step at its effective context
    (:func:`~placement_opt.simulate.meshsim.decode_context`): two requests of one LLM with
    prompts of 100 and 1500 tokens whose steps took the stretched table time there + h read back
    as h; read at the mean context instead they give less (the table rises with the context)."""
    from placement_opt.simulate.meshsim import MeshRequests, decode_context

    _, specs, cfg = _mesh()
    spec = specs[2]  # llm-7b: 32 KV heads, a wave of 132 / 32 requests
    on = dataclasses.replace(cfg, decode_full_stretch=1.03, decode_attention_sms=132)
    wave = simllm.decode_wave(on, spec, 1.0, 1)
    assert wave == pytest.approx(132 / 32)
    _, D, lgrid = simllm._mesh_tables([spec], 1, [1.0], 32)
    fill = simllm.page_fill_seconds(on, spec, [spec], 1)
    prompts, output, host = [100, 1500], 12, 2.5e-4
    req = MeshRequests(arrival=np.zeros(2), llm=np.zeros(2, dtype=np.int64),
                       prompt=np.array(prompts, dtype=np.int64), output=np.full(2, output, dtype=np.int64))
    t, times = 0.01, [[0.01], [0.01]]
    for j in range(1, output):
        context = [p + j for p in prompts]
        step = 1.03 * len_interp(D[0, 2], lgrid.astype(np.float64),
                                 decode_context(float(sum(context)), float(max(context)), 2, wave))
        t += step + fill * sum((c + cfg.kv_block_tokens) // cfg.kv_block_tokens for c in context) + host
        for times_i in times:
            times_i.append(t)
    assert decode_host_seconds([spec], 1, [1.0], on, 32, req, times)[0] == pytest.approx(host, abs=2e-6)
    at_mean = dataclasses.replace(on, decode_attention_sms=0)
    assert decode_host_seconds([spec], 1, [1.0], at_mean, 32, req, times)[0] > host + 1e-5


def test_reading_skips_mixed_steps_and_needs_enough_of_them():
    """LLM 0 has exactly MIN_STEPS back-to-back decode pairs; a token of LLM 1 landing between
    two of them breaks that pair (a job of another LLM ran between), so LLM 0 is left with
    too few and measures nothing (None); LLM 1, untouched, reads its host time."""
    _, specs, cfg = _mesh()
    specs = specs[:2]
    n = MIN_STEPS + 2  # prompt and output tokens of LLM 0: output - 2 = MIN_STEPS decode pairs
    bounds = [{"max_batch": 4, "longest": 2 * n}, {"max_batch": 4, "longest": 2048}]
    req, _ = probe_requests(specs, bounds, 1, [1.0, 1.0], cfg, 32, [1, 1], 10**6)
    assert int(req.output[req.llm == 0][0]) == n
    clean = _token_times(req, specs, cfg, 1, [5e-4, 7e-4])
    assert decode_host_seconds(specs, 1, [1.0, 1.0], cfg, 32, req, clean) == pytest.approx([5e-4, 7e-4], abs=2e-6)
    a = [i for i in range(len(clean)) if req.llm[i] == 0]
    b = [i for i in range(len(clean)) if req.llm[i] == 1]
    mixed = [list(t) for t in clean]
    mixed[b[0]][0] = (clean[a[0]][3] + clean[a[0]][4]) / 2  # LLM 1's first token between LLM 0's 3rd and 4th
    got = decode_host_seconds(specs, 1, [1.0, 1.0], cfg, 32, req, mixed)
    assert got[0] is None and got[1] == pytest.approx(7e-4, abs=2e-6)


def test_the_simulator_uses_the_measured_decode_host_time():
    """decode_host: the calibrated values give the prediction unchanged; a slower host on the
    TP-4 temporal mesh lowers its throughput; None keeps an LLM's calibrated value."""
    inst, specs, cfg = _mesh()
    placement = load_placement(os.path.join(GPU4, "poisson-temporal4.placement.json"))
    calibrated = simllm.host_seconds(cfg, 1.0, 4)[0]
    base = simllm.simulate_llm(inst, placement)
    same = simllm.simulate_llm(inst, placement, decode_host={0: [calibrated] * 4})
    assert same == base
    keep = simllm.simulate_llm(inst, placement, decode_host={0: [None] * 4})
    assert keep == base
    slow = simllm.simulate_llm(inst, placement, decode_host={0: [calibrated + 1e-3] * 4})
    assert slow["throughput_rps"] < base["throughput_rps"]
    off = dataclasses.replace(inst, llm=dataclasses.replace(cfg, decode_host_full_s=cfg.decode_host_full_s + 1e-3))
    assert simllm.simulate_llm(off, placement)["throughput_rps"] == pytest.approx(slow["throughput_rps"])
