"""How fast the machine runs a host thread, per vCPU and over time (docs/fidelity-llm.md).

The executor's engine launches every job from one Python thread per mesh, so a step's host
time is that thread's pace. The fidelity runs measured it moving from run to run (the same
LLM alone on the same GPU, 0.23 to 0.64 ms a step beyond the model) and the host probe, taken
before a trial, not reading it. This measures the pace itself, with no GPU involved: a fixed
piece of pure-Python work (dictionary and integer operations, the kind the scheduler does) is
timed

* ``per_cpu``: on each vCPU in turn (the process pinned to it), a few rounds: whether some
  vCPUs are slower and stay so;
* ``busy``: in several processes at once for ``--seconds``, each keeping its vCPU busy as a
  leader worker does (it polls its jobs' events between launches), pinned to one vCPU
  (``pinned``), pinned to the fastest of four after timing each (``fastest``: can a worker pick
  a fast vCPU at start-up and keep it?), or left to the guest's scheduler (``free``); the pace
  of each window of ``--window`` seconds is the median of its pieces.

Every pace is a ratio to the fastest piece of work seen in the run (1.0: the fastest).

Usage: python benchmarks/fidelity/llm/host_pace.py -o host-pace.json [--seconds 50 --window 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import time
from queue import Empty
from typing import Dict, List, Optional, Tuple

#: operations in one piece of work (about 2.5 ms on a 2.1 GHz Xeon vCPU at full pace: the
#: order of a decode step's host time and of a small LLM's whole step)
PIECE_OPS = 30_000


def piece_seconds(ops: int = PIECE_OPS) -> float:
    """Seconds this thread takes for ``ops`` dictionary updates and look-ups."""
    table: Dict[int, int] = {}
    acc = 0
    began = time.perf_counter()
    for i in range(ops):
        table[i & 1023] = i
        acc += table.get((i * 7) & 1023, 0)
    return time.perf_counter() - began


def per_cpu(rounds: int) -> List[List[float]]:
    """Seconds of a piece on each vCPU (the median of three, pinned there), ``rounds`` times."""
    cpus = sorted(os.sched_getaffinity(0))
    out = []
    for _ in range(rounds):
        row = []
        for c in cpus:
            os.sched_setaffinity(0, {c})
            row.append(statistics.median(piece_seconds() for _ in range(3)))
        out.append(row)
    os.sched_setaffinity(0, set(cpus))
    return out


def fastest_of(cpus: List[int]) -> int:
    """The vCPU among ``cpus`` on which a piece ran fastest (the best of three on each)."""
    best: Optional[Tuple[float, int]] = None
    for c in cpus:
        os.sched_setaffinity(0, {c})
        t = min(piece_seconds() for _ in range(3))
        if best is None or t < best[0]:
            best = (t, c)
    assert best is not None
    return best[1]


def busy(mode: str, cpus: List[int], seconds: float, window: float, out: "mp.Queue") -> None:
    """Run pieces back to back for ``seconds`` in ``mode`` (module docstring) and put
    ``(mode, vCPU or None, [median piece seconds per window])`` on ``out``."""
    cpu: Optional[int] = None
    if mode == "pinned":
        cpu = cpus[0]
    elif mode == "fastest":
        cpu = fastest_of(cpus)
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    began = time.monotonic()
    windows: List[List[float]] = []
    while (now := time.monotonic() - began) < seconds:
        w = int(now // window)
        while len(windows) <= w:
            windows.append([])
        windows[w].append(piece_seconds())
    out.put((mode, cpu, [statistics.median(w) for w in windows if w]))


def machine() -> Dict[str, str]:
    """lscpu's lines on the processor model and its topology as the guest sees it."""
    keys = ("Model name", "Thread(s) per core", "Core(s) per socket", "Socket(s)", "NUMA node(s)")
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines()) if k.strip() in keys}


def summary(values: List[float]) -> str:
    """The 10th percentile, median, 90th percentile and largest of ``values``, as one phrase."""
    q = statistics.quantiles(values, n=10, method="inclusive") if len(values) > 1 else values * 9
    return f"p10 {q[0]:.2f}, median {statistics.median(values):.2f}, p90 {q[-1]:.2f}, max {max(values):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="JSON file to write")
    ap.add_argument("--rounds", type=int, default=3, help="per_cpu rounds (default 3)")
    ap.add_argument("--seconds", type=float, default=50.0, help="busy phase length (default 50, a trial's)")
    ap.add_argument("--window", type=float, default=5.0, help="busy phase window in seconds (default 5)")
    ap.add_argument("--each", type=int, default=2, help="busy processes per mode (default 2)")
    args = ap.parse_args()
    for name in ("rounds", "seconds", "window", "each"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name} {getattr(args, name)}: must be positive")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
        ap.error(f"-o {args.output}: its folder does not exist")

    cpus = sorted(os.sched_getaffinity(0))
    rounds = per_cpu(args.rounds)
    ctx = mp.get_context("fork")
    queue: "mp.Queue" = ctx.Queue()
    jobs = [(mode, cpus[4 * i % len(cpus):][:4])
            for i, mode in enumerate(m for m in ("pinned", "fastest", "free") for _ in range(args.each))]
    procs = [ctx.Process(target=busy, args=(mode, c, args.seconds, args.window, queue)) for mode, c in jobs]
    for p in procs:
        p.start()
    try:  # a process that died puts nothing: wait no longer than the phase and a minute
        runs = sorted((queue.get(timeout=args.seconds + 60) for _ in procs),
                      key=lambda r: (r[0], r[1] if r[1] is not None else -1))
    except Empty:
        for p in procs:
            p.kill()
        raise SystemExit(f"host_pace.py: a busy process died (exit codes {[p.exitcode for p in procs]})") from None
    for p in procs:
        p.join()

    fastest = min(min(min(r) for r in rounds), min(min(w) for _, _, w in runs))
    per_cpu_pace = [[t / fastest for t in row] for row in rounds]
    busy_pace = [{"mode": m, "cpu": c, "pace": [t / fastest for t in w]} for m, c, w in runs]
    result = {"machine": machine(), "vcpus": len(cpus), "piece_ops": PIECE_OPS, "fastest_piece_s": fastest,
              "per_cpu": per_cpu_pace, "busy": busy_pace, "window_s": args.window, "seconds": args.seconds}
    tmp = args.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, args.output)

    print(f"{len(cpus)} vCPUs, {result['machine']}; fastest piece {1e3 * fastest:.2f} ms; paces are ratios to it")
    for i, row in enumerate(per_cpu_pace):
        print(f"per_cpu round {i}: {summary(row)}")
    if len(per_cpu_pace) > 1:
        moved = [max(col) / min(col) for col in zip(*per_cpu_pace)]
        print(f"per_cpu: one vCPU's slowest / fastest round: {summary(moved)}")
    for b in busy_pace:
        where = f"vCPU {b['cpu']}" if b["cpu"] is not None else "any vCPU"
        print(f"busy {b['mode']:7s} {where:9s} per {args.window:g} s: " + " ".join(f"{p:.2f}" for p in b["pace"]))
    print(f"busy, every window: {summary([p for b in busy_pace for p in b['pace']])}")


if __name__ == "__main__":
    main()
