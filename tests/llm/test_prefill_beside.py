"""Prefills on SM partitions beside other jobs (``llm.prefill_beside_stretch``,
``prefill_beside_delay_s``, ``prefill_beside_gbps``, ``prefill_beside_requests``,
``prefill_beside_knee_tokens``, ``prefill_beside_knee_s``; ``MeshSettings.prefill_beside``,
``prefill_beside_delay``, ``prefill_beside_gbps``, ``prefill_beside_requests``,
``prefill_beside_knee``, ``prefill_beside_knee_s``) and a prefill
timed at its longest prompt (``prefill_at_longest``); docs/fidelity-llm.md "Prefills beside
decodes, modelled" and "The prefill's stretch on the job trace"): a hand-timed mesh."""

from __future__ import annotations

import numpy as np
import pytest

from placement_opt.simulate.llm import _POLICY_CODE
from placement_opt.simulate.meshsim import LatencyTables, MeshLLMs, MeshRequests, MeshSettings, mesh_outputs, simulate_mesh


def _inputs(beside: float, delay: float, share: float = 0.5, prompt: int = 100, gbps: float = 0.0,
            weights: float = 0.0, hbm: float = 0.0, per_request: float = 0.0, knee: float = 0.0, power: float = 0.0,
            knee_s: float = 0.0, eager_knee_s: float = 0.0):
    """A mesh of two LLMs at SM ``share`` (every prefill 0.1 s in the table, every decode step
    0.01 s; no host model): LLM 1's request of 1000 output tokens at t = 0 (it decodes until
    about t = 10), LLM 0's of ``prompt`` tokens at t = 1.005, beside those decode steps, and
    again at t = 20, alone (``weights``: bytes every job of either LLM reads, its HBM demand
    over its table time; ``hbm``: the contention model's bandwidth; ``per_request``, ``knee``:
    the stretch's decode-request term and its knee; ``power``: its power of the SM share;
    ``knee_s``: its knee in the prefill's time alone, seconds; ``eager_knee_s``: that knee for
    an eager prefill, over the 1024-token graph limit)."""
    requests = MeshRequests(arrival=np.array([0.0, 1.005, 20.0]), llm=np.array([1, 0, 0], dtype=np.int64),
                            prompt=np.array([10, prompt, prompt], dtype=np.int64),
                            output=np.array([1000, 1, 1], dtype=np.int64))
    llms = MeshLLMs(share=np.full(2, share), kv_kib=np.ones(2, dtype=np.int64), rate=np.ones(2),
                    weight_bytes=np.full(2, weights), kv_bytes=np.zeros(2))
    tables = LatencyTables(prefill=np.full((2, 5, 2), 0.1), decode=np.full((2, 5, 2), 0.01),
                           lgrid=np.array([1.0, 4096.0]))
    cfg = MeshSettings(policy=_POLICY_CODE["fcfs"], pool=100000, block=16, max_batch=4, token_budget=4096,
                       period=5.0, frac=0.5, horizon=100.0, graph_tokens=1024, prefill_beside=beside,
                       prefill_beside_delay=delay, prefill_beside_gbps=gbps, hbm_gbps=hbm,
                       prefill_beside_requests=per_request, prefill_beside_knee=knee, prefill_beside_power=power,
                       prefill_beside_knee_s=knee_s, prefill_beside_eager_knee_s=eager_knee_s)
    return requests, llms, tables, cfg


def _first_tokens(beside: float, delay: float, share: float = 0.5, prompt: int = 100, gbps: float = 0.0,
                  weights: float = 0.0, per_request: float = 0.0, knee: float = 0.0, power: float = 0.0,
                  knee_s: float = 0.0, eager_knee_s: float = 0.0) -> np.ndarray:
    """The kernel's first-token times on the mesh of :func:`_inputs`."""
    requests, llms, tables, cfg = _inputs(beside, delay, share, prompt, gbps, weights, per_request=per_request,
                                          knee=knee, power=power, knee_s=knee_s, eager_knee_s=eager_knee_s)
    out = mesh_outputs(3, 2, 10)
    simulate_mesh(requests, llms, tables, cfg, out)
    return out.first


def test_a_graph_prefill_beside_another_llms_decode_lasts_its_stretched_time_plus_the_delay():
    """Stretch 0.37, delay 5 ms: beside LLM 1's decode steps the 0.1 s prefill lasts 1.37 x 0.1
    + 0.005 s; alone (t = 20) its table time; the first request's prefill, alone at t = 0, too."""
    first = _first_tokens(0.37, 0.005)
    assert first == pytest.approx([0.1, 1.005 + 0.137 + 0.005, 20.1])
    assert _first_tokens(0.0, 0.0) == pytest.approx([0.1, 1.105, 20.1])


def test_an_eager_prefill_and_an_llm_on_the_whole_gpu_are_not_stretched():
    """A prefill over the graph limit (2000 tokens) keeps its table time beside the decodes; at
    share 1 the two LLMs never run at once (the prefill waits for a decode step's end)."""
    assert _first_tokens(0.37, 0.005, prompt=2000)[1] == pytest.approx(1.105)
    whole = _first_tokens(0.37, 0.005, share=1.0)
    assert whole[1] == pytest.approx(1.01 + 0.1) and whole[2] == pytest.approx(20.1)


def test_a_graph_prefill_beside_a_decode_stretches_in_proportion_to_its_hbm_demand():
    """Every job reads 20 GB: a decode step of 0.01 s demands 2000 GB/s; at 4000 GB/s the 0.1 s
    prefill beside LLM 1's steps runs 1 + 2000 / 4000 = 1.5 x slower, plus the 2 ms delay; alone
    (t = 20) its table time. Without weights (no demand) only the delay is left."""
    first = _first_tokens(0.0, 0.002, gbps=4000.0, weights=20e9)
    assert first == pytest.approx([0.1, 1.005 + 0.15 + 0.002, 20.1])
    assert _first_tokens(0.0, 0.002, gbps=4000.0)[1] == pytest.approx(1.005 + 0.1 + 0.002)
    # the demand term alone switches the model on
    assert _first_tokens(0.0, 0.0, gbps=4000.0, weights=20e9)[1] == pytest.approx(1.005 + 0.15)


def test_the_demand_term_grows_with_the_prefills_sm_share_to_the_power():
    """``prefill_beside_power`` 0.5: the demand term (2000 / 4000 GB/s beside LLM 1's steps)
    times the LLM's share ** 0.5, so the 0.1 s prefill lasts 1 + 0.5 x 0.5 = 1.25 x at share 0.25
    and 1 + 0.5 x 0.45 ** 0.5 x at 0.45 (the kernel reads the LLM's own share), plus the 2 ms
    delay, which the power leaves alone; alone (t = 20) its table time."""
    quarter = _first_tokens(0.0, 0.002, share=0.25, gbps=4000.0, weights=20e9, power=0.5)
    assert quarter == pytest.approx([0.1, 1.005 + 0.125 + 0.002, 20.1])
    wider = _first_tokens(0.0, 0.002, share=0.45, gbps=4000.0, weights=20e9, power=0.5)
    assert wider[1] == pytest.approx(1.005 + 0.1 * (1 + 0.5 * 0.45 ** 0.5) + 0.002)


def test_a_prefill_beside_decode_requests_stretches_by_them_over_its_length():
    """LLM 1's decode steps hold one request: at 2 requests per unit the 0.1 s prefill of 100
    tokens beside them runs 1 + 1 / 2 = 1.5 x slower; with a knee of 100 tokens the term halves
    (1 + 0.5 / (1 + 100 / 100) = 1.25 x). With the knee an eager prefill (2000 tokens, over the
    graph limit) stretches too, by 1 + 0.5 / 21; without it, not at all. Alone (t = 20): its
    table time."""
    assert _first_tokens(0.0, 0.0, per_request=2.0) == pytest.approx([0.1, 1.005 + 0.15, 20.1])
    assert _first_tokens(0.0, 0.0, per_request=2.0, knee=100.0) == pytest.approx([0.1, 1.005 + 0.125, 20.1])
    eager = _first_tokens(0.0, 0.0, prompt=2000, per_request=2.0, knee=100.0)
    assert eager == pytest.approx([0.1, 1.005 + 0.1 * (1 + 0.5 / 21), 20.1])
    assert _first_tokens(0.0, 0.0, prompt=2000, per_request=2.0)[1] == pytest.approx(1.105)
    # the knee divides the demand term as well: 20 GB per 0.01 s step = 2000 GB/s at 4000 GB/s
    demand = _first_tokens(0.0, 0.0, gbps=4000.0, weights=20e9, knee=100.0)[1]
    assert demand == pytest.approx(1.005 + 0.1 * (1 + 0.5 / 2))


def test_a_prefill_beside_others_stretches_less_the_longer_it_lasts_alone():
    """The knee in time (``prefill_beside_knee_s``): at 2 requests per unit the 0.1 s prefill
    beside LLM 1's one-request decode steps runs 1 + 0.5 / (1 + 0.1 / 0.05) = 1.167 x slower with
    a 50 ms knee, and with the token knee too (100 tokens) both divide it: 1 + 0.5 / 2 / 3. An
    eager prefill (2000 tokens) stretches with the time knee alone, as with the token knee;
    alone (t = 20) its table time."""
    kneed = _first_tokens(0.0, 0.0, per_request=2.0, knee_s=0.05)
    assert kneed == pytest.approx([0.1, 1.005 + 0.1 * (1 + 0.5 / 3), 20.1])
    both = _first_tokens(0.0, 0.0, per_request=2.0, knee=100.0, knee_s=0.05)[1]
    assert both == pytest.approx(1.005 + 0.1 * (1 + 0.5 / 2 / 3))
    eager = _first_tokens(0.0, 0.0, prompt=2000, per_request=2.0, knee_s=0.05)
    assert eager == pytest.approx([0.1, 1.005 + 0.1 * (1 + 0.5 / 3), 20.1])


def test_an_eager_prefill_takes_its_own_time_knee():
    """``prefill_beside_eager_knee_s`` 0.2 s beside the 50 ms knee: the eager prefill (2000
    tokens) runs 1 + 0.5 / (1 + 0.1 / 0.2) = 1.333 x slower beside LLM 1's decode steps, the
    graph prefill (100 tokens) keeps the 50 ms knee (1 + 0.5 / 3). With the eager knee alone an
    eager prefill stretches by it and a graph prefill without a knee (1.5 x); alone (t = 20)
    each takes its table time."""
    eager = _first_tokens(0.0, 0.0, prompt=2000, per_request=2.0, knee_s=0.05, eager_knee_s=0.2)
    assert eager == pytest.approx([0.1, 1.005 + 0.1 * (1 + 0.5 / 1.5), 20.1])
    graph = _first_tokens(0.0, 0.0, per_request=2.0, knee_s=0.05, eager_knee_s=0.2)
    assert graph == pytest.approx([0.1, 1.005 + 0.1 * (1 + 0.5 / 3), 20.1])
    assert _first_tokens(0.0, 0.0, prompt=2000, per_request=2.0, eager_knee_s=0.2)[1] == pytest.approx(
        1.005 + 0.1 * (1 + 0.5 / 1.5))
    assert _first_tokens(0.0, 0.0, per_request=2.0, eager_knee_s=0.2)[1] == pytest.approx(1.005 + 0.1 * 1.5)


def test_a_batched_prefill_is_timed_at_its_longest_prompt_where_the_engine_pads():
    """Two prompts of 100 and 300 tokens batched in one prefill, the table 0.1 ms per token of
    length: at their mean (200 tokens, a packing runtime) 20 ms, at the longest (the engine pads
    the batch to it, ``prefill_at_longest``) 30 ms."""
    requests = MeshRequests(arrival=np.zeros(2), llm=np.zeros(2, dtype=np.int64),
                            prompt=np.array([100, 300], dtype=np.int64), output=np.ones(2, dtype=np.int64))
    llms = MeshLLMs(share=np.ones(1), kv_kib=np.ones(1, dtype=np.int64), rate=np.ones(1))
    lgrid = np.array([0.0, 1000.0])
    tables = LatencyTables(prefill=np.broadcast_to(lgrid * 1e-4, (1, 5, 2)).copy(), decode=np.full((1, 5, 2), 0.01),
                           lgrid=lgrid)
    for at_longest, took in ((False, 0.02), (True, 0.03)):
        cfg = MeshSettings(policy=_POLICY_CODE["fcfs"], pool=100000, block=16, max_batch=4, token_budget=4096,
                           period=5.0, frac=0.5, horizon=10.0, prefill_at_longest=at_longest)
        out = mesh_outputs(2, 1, 10)
        simulate_mesh(requests, llms, tables, cfg, out)
        assert out.first == pytest.approx([took, took])


def test_a_replay_clock_keeps_its_fixed_jobs_and_their_demand_still_stretches_the_others():
    """``run_virtual(clock=)``: a fresh :class:`VirtualJobs` gives the default timeline; a
    subclass that fixes LLM 1's decode steps at 0.02 s (a replay's measured times) keeps them
    at that under HBM contention beside LLM 0's prefill (the request finishes at 0.1 + 999 x
    0.02 s), while the prefill beside them still stretches by their demand (2000 GB/s at 4000:
    1.5 x), as the executor's job replay relies on."""
    from placement_opt.executor.llm_sched import DECODE, VirtualJobs, run_virtual

    inputs = _inputs(0.0, 0.0, gbps=4000.0, weights=20e9, hbm=4000.0)
    default = run_virtual(*inputs)
    given = run_virtual(*inputs, clock=VirtualJobs(*inputs[1:]))
    assert given.first == default.first and given.finish == default.finish

    class SlowDecodes(VirtualJobs):
        def launch(self, jobs, t, host_free):
            host_free = super().launch(jobs, t, host_free)
            for job in jobs:
                if job.kind == DECODE and job.llm == 1:
                    j = self.slot(DECODE, 1)
                    self.work[j], self.fixed[j] = 0.02, True
                    self.end[j] = self.start[j] + 0.02
            return host_free

    replayed = run_virtual(*inputs, clock=SlowDecodes(*inputs[1:]))
    assert replayed.finish[0] == pytest.approx(0.1 + 999 * 0.02)
    assert replayed.first[1] == pytest.approx(1.005 + 0.15)
    assert default.finish[0] > 0.1 + 999 * 0.01  # unfixed, the steps beside the prefill stretch
