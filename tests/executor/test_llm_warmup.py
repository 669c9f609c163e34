"""The LLM engine's start-up prepares every bucket the replay can use (no capture during it).

The first H100 trials of the third engine captured each prefill graph the first time its
(batch, padded length) bucket was met, during the replay, and measured a mean TTFT 61-81%
above the simulator's. Start-up now prepares every bucket an LLM's jobs can use, bounded by
its most requests in one job and its longest request. On CPUs there are no graphs, so these
tests check what the GPU relies on through the engine's own accounting:

* :func:`prefill_buckets` holds the bucket of every prefill within the bounds (exhaustively);
* after ``warm_up`` the engine meets no bucket it did not prepare while serving jobs within
  the bounds (``cold_buckets`` empty), counts one beyond them (the hook works), and the
  warm-up's scratch prefills took no KV blocks and left no tokens behind;
* on two gloo ranks (TP 2, ``warm_prefills`` forcing the eager warm-up run on CPUs) every
  rank warms the same buckets in the same order (their all-reduces pair up) and then serves
  the TP-1 engine's greedy tokens;
* a whole ``placeopt execute`` reports each worker's warm-up and no cold bucket in any trial.

What only a GPU can check: that the captured graphs replay (``gpu_check.py``), the capture
time (``worker_info.*.warmup`` of the H100 runs) and that first trials are no longer cold.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from placement_opt.model import Architecture  # noqa: E402

CPU = torch.device("cpu")
ARCH = Architecture(layers=2, hidden=64, heads=4, kv_heads=2, vocab=97, ffn_ratio=2.0, gated_mlp=True,
                    tied_embeddings=False, learned_positions=False, dtype="fp32")
OTHER = Architecture(layers=3, hidden=64, heads=4, kv_heads=4, vocab=61, ffn_ratio=3.0, dtype="fp32")


def test_prefill_buckets_hold_every_prefill_within_the_bounds():
    from placement_opt.executor.llm_engine import prefill_bucket, prefill_buckets

    for max_batch, longest in ((32, 1024), (5, 300), (1, 20), (24, 4500)):
        planned = prefill_buckets(max_batch, longest)
        assert planned == sorted(set(planned))
        met = {prefill_bucket(b, n) for b in range(1, max_batch + 1) for n in range(1, longest + 1)}
        assert met - {None} == set(planned)
    # batch 1: 16 ... 1024 (13 lengths), 2: up to 512 (11), 4: 9, 8: 7, 16: 5, 32: 3
    assert len(prefill_buckets(32, 1024)) == 48
    assert prefill_buckets(3, 40) == [(1, 16), (1, 24), (1, 32), (1, 48), (2, 16), (2, 24), (2, 32), (2, 48),
                                          (4, 16), (4, 24), (4, 32), (4, 48)]


def _spec(tp=1, tp_rank=0, warm=True):
    from placement_opt.executor.llm_engine import EngineSpec, LLMBuild

    llms = (LLMBuild("a", ARCH, 1, 0.5, max_batch=3, longest=40), LLMBuild("b", OTHER, 2, 0.5, max_batch=2, longest=20))
    return EngineSpec(llms=llms, tp=tp, tp_rank=tp_rank, pool_pages=300, block=4, max_batch=4, max_blocks=12,
                      cuda_graphs=False, attention="gather", warm_prefills=warm)


def _serve(engine):
    """Prefills of every shape within LLM a's bounds and of b's, then decode steps; the tokens."""
    from placement_opt.executor.llm_sched import DECODE, PREFILL, Job

    jobs = [Job(PREFILL, 0, [0, 1, 2], [39, 5, 17]), Job(PREFILL, 1, [3, 4], [20, 1]), Job(PREFILL, 0, [5], [1]),
            Job(PREFILL, 1, [6], [9])]
    for job in jobs:
        engine.launch(job)
        engine.finish(job.kind, job.llm)
    for step in range(4):
        for k, reqs in ((0, [0, 1, 2, 5]), (1, [3, 4, 6])):
            ctx = [len(engine.tokens[r]) for r in reqs]
            engine.launch(Job(DECODE, k, reqs, ctx))
            engine.finish(DECODE, k)
    return {r: list(t) for r, t in engine.tokens.items()}


def test_warm_up_prepares_every_bucket_and_the_replay_meets_none_cold():
    from placement_opt.executor.llm_engine import MeshEngine, prefill_buckets
    from placement_opt.executor.llm_sched import PREFILL, Job

    engine = MeshEngine(_spec(), CPU, [(None, None), (None, None)])
    engine.warm_up()
    w = engine.warmup
    assert w["prefill_buckets"] == len(prefill_buckets(3, 40)) + len(prefill_buckets(2, 20)) == 16
    assert w["prefill_graphs"] == w["decode_graphs"] == 0  # no graphs on CPUs
    assert w["warm_up_s"] >= w["prefill_capture_s"] > 0
    assert engine.pool.used_pages == 0 and not engine.tokens and not engine.running
    _serve(engine)
    assert engine.cold_buckets == [] and engine.eager_prefills == 0
    engine.launch(Job(PREFILL, 1, [9], [30]))  # longer than b's longest request: a bucket start-up skipped
    engine.finish(PREFILL, 1)
    assert engine.cold_buckets == [("b", 1, 32)]
    for r in list(engine.tokens):
        engine.release(0 if r in (0, 1, 2, 5) else 1, r, True)
    engine.reset()
    assert engine.cold_buckets == [] and engine.pool.used_pages == 0


def test_the_engine_runs_eagerly_exactly_the_prefills_the_simulator_does():
    """One rule: over a grid of batches up to twice the engine's ``max_batch`` (past it too) and
    prompt lengths, the engine's bucket is the simulator's padded size (the batch rounded up to
    a power of two x the padded length) and it has none exactly where
    :func:`~placement_opt.simulate.meshsim.prefill_runs_eagerly` says eager. Then the engine
    itself, past its ``max_batch`` of 4: a prefill of 5 prompts of 150 tokens pads to 8 x 192
    tokens and runs eagerly (the old rule padded it to 5 x 192 = 960 and replayed a graph);
    5 x 100 tokens pads to the bucket (8, 128)."""
    from placement_opt.executor.llm_engine import PREFILL_GRAPH_TOKENS, MeshEngine, prefill_bucket
    from placement_opt.executor.llm_sched import PREFILL, Job
    from placement_opt.simulate.meshsim import padded_prefill_length, prefill_runs_eagerly

    for batch in range(1, 65):
        for longest in range(1, 2200, 7):
            bucket = prefill_bucket(batch, longest)
            eager = prefill_runs_eagerly(batch, longest, PREFILL_GRAPH_TOKENS)
            assert (bucket is None) == eager, (batch, longest)
            if bucket is not None:
                assert bucket[0] >= batch > bucket[0] // 2 and bucket[1] == padded_prefill_length(longest)
                assert bucket[0] * bucket[1] <= PREFILL_GRAPH_TOKENS
    spec = replace(_spec(), block=16, max_blocks=12, pool_pages=2000)
    engine = MeshEngine(spec, CPU, [(None, None), (None, None)])
    assert spec.max_batch == 4
    engine.launch(Job(PREFILL, 0, [0, 1, 2, 3, 4], [150, 9, 30, 150, 2]))
    engine.finish(PREFILL, 0)
    assert prefill_runs_eagerly(5, 150, PREFILL_GRAPH_TOKENS) and engine.eager_prefills == 1
    engine.launch(Job(PREFILL, 0, [5, 6, 7, 8, 9], [100] * 5))
    engine.finish(PREFILL, 0)
    assert engine.eager_prefills == 1 and engine.cold_buckets == [("a", 8, 128)]


def test_without_warm_prefills_the_engine_only_plans_them():
    from placement_opt.executor.llm_engine import MeshEngine

    engine = MeshEngine(_spec(warm=None), CPU, [(None, None), (None, None)])
    engine.warm_up()
    assert engine.warmup["prefill_buckets"] == 16 and engine.prefill_graphs_on is False
    assert _serve(engine) == _served_tp1()
    assert engine.cold_buckets == []


_TP1 = {}


def _served_tp1():
    from placement_opt.executor.llm_engine import MeshEngine

    if not _TP1:
        engine = MeshEngine(_spec(), CPU, [(None, None), (None, None)])
        engine.warm_up()
        _TP1.update(_serve(engine))
    return dict(_TP1)


def _tp2_rank(rank: int, init_method: str, out_dir: str) -> None:
    import torch.distributed as dist

    from placement_opt.executor.llm_engine import MeshEngine

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=2)
    groups = [(dist.new_group([0, 1]), dist.new_group([0, 1])) for _ in range(2)]
    engine = MeshEngine(_spec(tp=2, tp_rank=rank), CPU, groups)
    engine.warm_up()
    tokens = _serve(engine)
    torch.save({"tokens": tokens, "warmup": dict(engine.warmup), "cold": list(engine.cold_buckets)},
               os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_tp2_ranks_warm_the_same_buckets_and_serve_the_tp1_tokens(tmp_path):
    import torch.multiprocessing as mp

    # the ranks meet through a file of this test's own (no TCP port to pick: under pytest-xdist
    # another test may be taking ports at the same moment)
    mp.spawn(_tp2_rank, args=(f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for got in ranks:
        assert got["cold"] == [] and got["warmup"]["prefill_buckets"] == 16
        assert got["tokens"] == _served_tp1()


class _Replay:
    """A stand-in for a captured prefill graph on CPUs: ``replay`` reruns the prefill on the
    bucket's static inputs into its static output, as the graph would."""

    def __init__(self, model, inputs):
        self.model, self.inputs = model, inputs
        self.out = torch.zeros(inputs.batch, dtype=torch.long)

    def replay(self):
        self.out.copy_(self.model.prefill(self.inputs.tokens, self.inputs.lengths, self.inputs).argmax(-1))


def test_with_prefill_graphs_every_capture_happens_at_start_up(monkeypatch):
    """The GPU path on a CPU: captures replaced by :class:`_Replay`, counted; every one happens in
    ``warm_up``, none while serving, and the replays serve the eager engine's tokens."""
    from placement_opt.executor.llm_engine import MeshEngine

    captures = []

    def capture(self, rt, inputs):
        captures.append((rt.build.name, inputs.batch, inputs.length))
        graph = _Replay(rt.model, inputs)
        return graph, inputs, graph.out

    monkeypatch.setattr(MeshEngine, "_capture_prefill", capture)
    engine = MeshEngine(_spec(warm=None), CPU, [(None, None), (None, None)])
    engine.prefill_graphs_on = True  # as on a GPU with CUDA graphs
    engine.warm_up()
    at_start = len(captures)
    assert at_start == engine.warmup["prefill_graphs"] == engine.warmup["prefill_buckets"] == 16
    assert len(set(captures)) == at_start
    assert _serve(engine) == _served_tp1()
    assert len(captures) == at_start and engine.cold_buckets == []  # no capture during the replay
