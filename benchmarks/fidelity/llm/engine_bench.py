"""Engine micro-benchmark on one GPU: host overhead per job and concurrency of colocated LLMs.

The first H100 run measured every colocated LLM's inter-token time growing with the number
of LLMs decoding at once (llm-0.4b: 10 ms with 2 decoding, 47 ms with 5; alone its step is
4 ms), i.e. the five LLMs' decode steps ran one after another. This benchmark builds the
executor's own :class:`~placement_opt.executor.llm_engine.MeshEngine` with the fidelity
instance's LLMs (each at ``--share`` of the SMs) and measures, per SM-partitioning mechanism:

* host time of ``launch`` and ``finish`` of one decode step (what the leader's loop spends per
  job), and of launching one prefill (the loop can do nothing else meanwhile): the first of
  its bucket (run eagerly, then captured as a CUDA graph: ``prefill_first_host_ms``) and a
  later one (a graph replay on GPUs: ``prefill_host_ms``);
* each LLM's decode step alone (GPU time between CUDA events on its stream, and wall time);
* all LLMs' decode steps launched together, round after round: each one's GPU time, the
  round's wall time, and ``overlap`` = (sum of alone - round) / (sum of alone - max of alone)
  (1: the steps overlap fully; 0: they serialise);
* bytes each step must read (weights + batch x context x KV bytes per token), so the achieved
  HBM bandwidth alone and the aggregate when together say whether colocated decodes contend
  for memory bandwidth (the simulator's optional contention model, docs/fidelity-llm.md);
* with ``--prefill-beside``, each LLM's prefill of ``--prefill-batch`` prompts (at most
  ``--batch``) of ``--context`` tokens (GPU time on its prefill stream from just before its
  launch, median): alone, while every other LLM decodes step after step, and while its own LLM
  decodes too (on its own partition): how much a prefill slows beside decodes, which the decode
  rounds above do not measure; and the decode steps beside it (``decode_beside_prefill_*``:
  each LLM's first step of a run, launched just before the prefill, so partly alone, against
  its steps alone just after). The engine is then built for ``--batch`` + ``--prefill-batch``
  requests per LLM (the probe's, in the pool beside the decode batch).

With ``--models`` and ``--shares`` it builds some of the instance's LLMs (copies too) on unequal
partitions, e.g. ``--models llm-1b,llm-8b --shares 0.25,0.75``: a small partition beside a large
one, which the even splits above do not tell apart from a small LLM's own traffic.

Usage (GPU): python benchmarks/fidelity/llm/engine_bench.py instances/fidelity-llm/poisson.json -o engine.json
(without a GPU it runs on the CPU with wall-clock timing, as a smoke test of the benchmark itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union


def _architectures(path: str, names: Optional[Sequence[str]] = None) -> List[tuple]:
    """(name, Architecture) of the instance's LLMs, or of those ``names`` in that order (a name
    given again is another copy of that LLM, named ``NAME#2``, ``NAME#3``...); ValueError for a
    name the instance lacks."""
    from placement_opt.model import Architecture

    with open(path) as f:
        models = {m["name"]: Architecture(**m["architecture"]) for m in json.load(f)["models"]}
    if not names:
        return list(models.items())
    out, seen = [], {}  # type: List[tuple], Dict[str, int]
    for name in names:
        if name not in models:
            raise ValueError(f"{path}: --models: no LLM {name!r} (the instance has {', '.join(models)})")
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", models[name]))
    return out


def _shares(text: Optional[str], share: float, n: int) -> List[float]:
    """Per LLM its SM share: ``--shares`` (comma-separated, one per LLM, each in (0, 1], summing to
    at most 1) or ``--share`` for every one; ValueError naming what is wrong."""
    if not text:
        return [share] * n
    try:
        shares = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--shares: not a comma-separated list of numbers: {text!r}") from None
    if len(shares) != n:
        raise ValueError(f"--shares: {len(shares)} shares for {n} LLMs")
    if not all(0 < x <= 1 for x in shares) or sum(shares) > 1 + 1e-9:
        raise ValueError(f"--shares: each share must be in (0, 1] and together at most 1, got {text}")
    return shares


class _WallEvent:
    """CPU stand-in for a CUDA timing event (jobs run inside ``launch`` on CPUs)."""

    def __init__(self, enable_timing: bool = True):
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        """Nothing to wait for on CPUs."""

    def elapsed_time(self, end: "_WallEvent") -> float:
        return (end.t - self.t) * 1e3


def _device(torch: Any) -> Any:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def _event(torch: Any) -> Any:
    return torch.cuda.Event(enable_timing=True) if torch.cuda.is_available() else _WallEvent()


def _engine(torch: Any, llms: List[tuple], share: Union[float, Sequence[float]], green: bool, batch: int,
            max_blocks: int, longest: int = 0, engine_class: Any = None) -> Any:
    """A warmed-up MeshEngine with every LLM at ``share`` (one per LLM where a sequence; green
    contexts or plain streams), its pool sized for ``batch`` requests of ``max_blocks`` blocks per
    LLM (``longest``: every LLM's longest request, which start-up prepares; 0: the pool's bound;
    ``engine_class``: another engine class of the same interface, e.g. an earlier revision's,
    default the executor's)."""
    from placement_opt.executor.llm_engine import EngineSpec, LLMBuild, MeshEngine, widen_hardware_queues
    from placement_opt.llm_units import page_units, units_per_block

    widen_hardware_queues()  # as the executor's workers do, before the first engine's CUDA context

    archs = [a for _, a in llms]
    page = page_units(archs, 1)
    pages = sum(batch * max_blocks * units_per_block(a, 1) // page for a in archs) + 64
    shares = [float(share)] * len(llms) if isinstance(share, (int, float)) else [float(x) for x in share]
    builds = tuple(LLMBuild(name, arch, seed=i + 1, share=shares[i], longest=longest)
                   for i, (name, arch) in enumerate(llms))
    spec = EngineSpec(llms=builds, tp=1, tp_rank=0, pool_pages=pages, block=16, max_batch=batch,
                      max_blocks=max_blocks, cuda_graphs=True, green_contexts=green)
    engine = (engine_class or MeshEngine)(spec, _device(torch), [(None, None)] * len(llms))
    engine.warm_up()
    return engine


class _Steps:
    """Decode steps of every LLM's ``batch`` requests, their contexts growing one token a step."""

    def __init__(self, torch: Any, engine: Any, batch: int, context: int, prefill_batch: int):
        from placement_opt.executor.llm_sched import PREFILL, Job

        self.torch, self.engine, self.batch = torch, engine, batch
        self.requests = [[k * 1000 + i for i in range(batch)] for k in range(len(engine.llms))]
        self.context = [context + 1] * len(engine.llms)
        # the prefill probe's requests per LLM (``--prefill-beside``): prefilled and released again
        self.probe = [[k * 1000 + 900 + i for i in range(prefill_batch)] for k in range(len(engine.llms))]
        self.probe_context = context
        self.prefill_first_host_ms: List[float] = []
        self.prefill_host_ms: List[float] = []
        self.prefill_wall_ms: List[float] = []
        for k, reqs in enumerate(self.requests):
            chunks = [reqs[i:i + prefill_batch] for i in range(0, batch, prefill_batch)]
            for i, chunk in enumerate(chunks + [chunks[0]]):  # the first chunk again: its bucket's graph replays
                if i == len(chunks):
                    for r in chunk:
                        engine.release(k, r, False)
                t0 = time.perf_counter()
                engine.launch(Job(PREFILL, k, chunk, [context] * len(chunk)))
                t1 = time.perf_counter()
                engine.finish(PREFILL, k)
                if i == 0:
                    self.prefill_first_host_ms.append((t1 - t0) * 1e3)
            self.prefill_host_ms.append((t1 - t0) * 1e3)
            self.prefill_wall_ms.append((time.perf_counter() - t0) * 1e3)

    def launch(self, k: int) -> tuple:
        """Launch LLM k's next step between two timing events; returns (start, end, host s)."""
        from placement_opt.executor.llm_sched import DECODE, Job

        stream = self.engine.llms[k].streams[1]
        start, end = _event(self.torch), _event(self.torch)
        start.record(stream)
        t0 = time.perf_counter()
        self.engine.launch(Job(DECODE, k, self.requests[k], [self.context[k]] * self.batch))
        host = time.perf_counter() - t0
        end.record(stream)
        self.context[k] += 1
        return start, end, host

    def finish(self, k: int, events: tuple) -> float:
        """Wait for LLM k's step; returns the host seconds of ``finish`` after the GPU is done."""
        events[1].synchronize()
        t0 = time.perf_counter()
        self.engine.finish("decode", k)
        return time.perf_counter() - t0


def _alone(steps: _Steps, k: int, n: int) -> Dict[str, float]:
    gpu, wall, launch, finish = [], [], [], []
    for i in range(n + 3):
        t0 = time.perf_counter()
        ev = steps.launch(k)
        fin = steps.finish(k, ev)
        if i >= 3:  # the first steps warm up
            wall.append(time.perf_counter() - t0)
            gpu.append(ev[0].elapsed_time(ev[1]) / 1e3)
            launch.append(ev[2])
            finish.append(fin)
    return {"gpu_ms": statistics.median(gpu) * 1e3, "wall_ms": statistics.median(wall) * 1e3,
            "launch_us": statistics.median(launch) * 1e6, "finish_us": statistics.median(finish) * 1e6}


def _together(steps: _Steps, n: int) -> Dict[str, Any]:
    llms = range(len(steps.engine.llms))
    rounds, gpu = [], [[] for _ in llms]
    for i in range(n + 3):
        t0 = time.perf_counter()
        evs = [steps.launch(k) for k in llms]
        for k in llms:
            steps.finish(k, evs[k])
        if i >= 3:
            rounds.append(time.perf_counter() - t0)
            for k in llms:
                gpu[k].append(evs[k][0].elapsed_time(evs[k][1]) / 1e3)
    return {"round_ms": statistics.median(rounds) * 1e3, "gpu_ms": [statistics.median(g) * 1e3 for g in gpu]}


#: timed probe prefills per LLM and setting (``--prefill-beside``; median)
PREFILL_RUNS = 10
#: most decode steps an LLM beside a probe prefill runs per prefill (the committed runs: 2-7)
MAX_BESIDE_STEPS = 20


def _prefill_times(steps: _Steps, k: int, n: int, beside: List[int]) -> Tuple[float, Dict[int, float]]:
    """Median GPU ms of LLM k's probe prefill (``steps.probe`` requests at ``steps.probe_context``
    tokens) over ``n`` runs, while the LLMs ``beside`` decode step after step (their steps
    relaunched until the prefill has ended, at most :data:`MAX_BESIDE_STEPS` times; none:
    alone), and per LLM beside, the median GPU ms
    of its first decode step of each run (launched just before the prefill, so it runs beside
    it)."""
    from placement_opt.executor.llm_sched import PREFILL, Job

    stream = steps.engine.llms[k].streams[0]
    times: List[float] = []
    first: Dict[int, List[float]] = {j: [] for j in beside}
    for i in range(n + 1):
        start, end = _event(steps.torch), _event(steps.torch)
        evs = {j: steps.launch(j) for j in beside}
        start.record(stream)
        steps.engine.launch(Job(PREFILL, k, steps.probe[k], [steps.probe_context] * len(steps.probe[k])))
        end.record(stream)
        first_steps = dict(evs)
        for relaunch in range(MAX_BESIDE_STEPS + 1):  # the pool holds that many steps' tokens
            ended = not steps.torch.cuda.is_available() or end.query() or relaunch == MAX_BESIDE_STEPS
            for j in beside:
                steps.finish(j, evs[j])
                if not ended:
                    evs[j] = steps.launch(j)
            if ended:
                break
        end.synchronize()
        steps.engine.finish(PREFILL, k)
        for r in steps.probe[k]:
            steps.engine.release(k, r, True)
        if i >= 1:  # the first run warms up
            times.append(start.elapsed_time(end))
            for j, ev in first_steps.items():
                first[j].append(ev[0].elapsed_time(ev[1]))
    return statistics.median(times), {j: statistics.median(v) for j, v in first.items()}


def _prefill_beside(steps: _Steps, k: int, names: List[str]) -> Dict[str, Any]:
    """LLM k's probe prefill alone, beside the other LLMs' decodes and beside every LLM's (its
    own too), and the decode steps beside it with each one's steps alone just after (GPU ms)."""
    everyone = list(range(len(names)))
    out: Dict[str, Any] = {"prefill_alone_ms": _prefill_times(steps, k, PREFILL_RUNS, [])[0]}
    for label, beside in (("others", [j for j in everyone if j != k]), ("all", everyone)):
        prefill, decodes = _prefill_times(steps, k, PREFILL_RUNS, beside)
        out[f"prefill_beside_{label}_ms"] = prefill
        out[f"decode_beside_prefill_{label}"] = {
            names[j]: {"beside_ms": ms, "alone_ms": _alone(steps, j, 5)["gpu_ms"]} for j, ms in decodes.items()}
    return out


def measure(torch: Any, llms: List[tuple], args: argparse.Namespace, green: bool) -> Dict[str, Any]:
    """One mechanism's numbers (see the module docstring)."""
    max_blocks = math.ceil((args.context + 2 * args.steps + 16) / 16)
    if args.prefill_beside:  # an LLM decodes in 2K - 1 probe settings: 11 runs of at most 21 steps, 8 alone
        sets = 2 * len(llms) - 1
        beside_tokens = sets * ((PREFILL_RUNS + 1) * (MAX_BESIDE_STEPS + 1) + 8)
        max_blocks = math.ceil((args.context + 2 * args.steps + beside_tokens + 16) / 16)
    prefill_batch = max(1, min(args.prefill_batch, args.batch))
    engine = _engine(torch, llms, args.shares, green, args.batch + (prefill_batch if args.prefill_beside else 0),
                     max_blocks)
    steps = _Steps(torch, engine, args.batch, args.context, prefill_batch)
    alone = [_alone(steps, k, args.steps) for k in range(len(llms))]
    together = _together(steps, args.steps)
    prefills: List[Dict[str, Any]] = [{} for _ in llms]
    if args.prefill_beside:
        prefills = [_prefill_beside(steps, k, [name for name, _ in llms]) for k in range(len(llms))]
    per_llm = []
    for k, (name, arch) in enumerate(llms):
        moved = engine.llms[k].model.weight_bytes() + args.batch * steps.context[k] * arch.kv_bytes_per_token()
        per_llm.append({"model": name, "share": args.shares[k], "sm": engine.sm[k], "bytes": moved, **alone[k],
                        "together_gpu_ms": together["gpu_ms"][k],
                        "slowdown_together": together["gpu_ms"][k] / alone[k]["gpu_ms"],
                        "alone_gbps": moved / alone[k]["gpu_ms"] / 1e6,
                        "prefill_first_host_ms": steps.prefill_first_host_ms[k],
                        "prefill_host_ms": steps.prefill_host_ms[k], "prefill_wall_ms": steps.prefill_wall_ms[k],
                        **prefills[k]})
    total_alone = sum(a["wall_ms"] for a in alone)
    longest = max(a["wall_ms"] for a in alone)
    out = {"mechanism": engine.mechanism, "sm_counts": engine.sm, "sm_layout": engine.sm_layout,
           "fallback": getattr(engine, "fallback_reason", None),
           "attention": engine.attention, "attention_fallback": engine.attention_fallback,
           "prefill_graphs": engine.prefill_graphs_on, "prefill_graph_fallback": engine.prefill_graph_fallback,
           "per_llm": per_llm, "round_ms": together["round_ms"], "sum_alone_ms": total_alone,
           "max_alone_ms": longest,
           "overlap": (total_alone - together["round_ms"]) / (total_alone - longest) if total_alone > longest else None,
           "aggregate_gbps_together": sum(p["bytes"] for p in per_llm) / together["round_ms"] / 1e6}
    del steps, engine
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("instance", help="LLM instance JSON whose models are built (instances/fidelity-llm/poisson.json)")
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--share", type=float, default=0.2, help="SM share of every LLM (default 0.2, the muxserve placement's)")
    ap.add_argument("--models", default="",
                    help="comma-separated LLMs of the instance to build, in order (a name again: another copy); "
                         "default every LLM")
    ap.add_argument("--shares", default="",
                    help="comma-separated SM share per LLM built (unequal partitions); default --share for every one")
    ap.add_argument("--batch", type=int, default=8, help="requests per decode step (default 8)")
    ap.add_argument("--context", type=int, default=512, help="prompt tokens of every request (default 512)")
    ap.add_argument("--prefill-batch", type=int, default=1,
                    help="prompts per prefill job when filling the batch (default 1, as most Poisson prefills)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per measurement (median; default 30)")
    ap.add_argument("--prefill-beside", action="store_true",
                    help="also time each LLM's prefill alone and beside the other LLMs' (and its own) decode steps, "
                         "and those decode steps")
    ap.add_argument("--mechanisms", default="green,streams",
                    help="comma-separated: green (SM partitions) and/or streams (plain streams, no SM limit)")
    args = ap.parse_args()
    try:
        llms = _architectures(args.instance, [m for m in args.models.split(",") if m])
        args.shares = _shares(args.shares, args.share, len(llms))
    except ValueError as e:
        ap.error(str(e))
    import torch

    runs = []
    for mech in args.mechanisms.split(","):
        run = measure(torch, llms, args, mech == "green")
        print(json.dumps({k: v for k, v in run.items() if k != "per_llm"}), flush=True)
        for p in run["per_llm"]:
            print("  " + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in p.items()}), flush=True)
        runs.append(run)
        out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
               "torch": torch.__version__, "instance": args.instance, "share": args.share, "shares": args.shares,
               "models": [name for name, _ in llms], "batch": args.batch,
               "context": args.context, "steps": args.steps, "runs": runs}
        tmp = args.output + ".tmp"  # after every mechanism: a run cut short keeps what it measured
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
