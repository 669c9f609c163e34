"""The ``alpaserve`` search's speed-up on a local Ray cluster of 1, 2, 4, 8, 16 worker nodes (issue 14, item 5).

For every worker count ``w`` the script starts a Ray cluster on this machine (``ray start
--head`` plus ``w - 1`` worker nodes, each a separate process group with ``--num-cpus 1``,
so ``w`` CPUs in all), connects to it, solves the instance with ``backend=ray`` (a warm-up
solve first, so that every worker has loaded Numba's cache, then ``--repeat`` timed
solves: the best counts), and stops exactly the node processes it started. Every
placement must equal the one-process (``backend=serial``) placement.

Writes a JSON file (``--out``) with per worker count the wall seconds, the speed-up over
one worker and whether the placement is identical, rewritten after every worker count (a
count that does not finish within ``--count-timeout`` seconds is recorded as timed out and
the next one starts; rows of other counts already in the file, from an earlier run on the
same instance, are kept, so runs can be split across calls); the last line reads
``workers=<list> speedup=<list> identical=<true|false>``. Needs the ``ray`` extra (run as
``python benchmarks/ray_scaling.py ...`` with ray importable).

The one-process reference placement is read from ``--reference`` when that file exists and
was written for the same instance and solver options (``--reference-only`` writes it and
stops); otherwise it is solved here first and written there.

Run: ``python benchmarks/ray_scaling.py --workers 1,2,4,8,16 --out ray_scaling.json``
(``--instance`` takes an instance file; default the bundled S3, full workload;
``--scale 200,256`` uses a generated instance of benchmarks/scale_instance.py instead).
Within one 9-minute call on 16 cores: ``python benchmarks/ray_scaling.py --workers 8,16
--repeat 1 --count-timeout 180 --reference benchmarks/ray_scaling/s3_reference.json``
(a short serial solve first fills Numba's cache: about a minute on a fresh machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from placement_opt import instance_from_dict, load_instance  # noqa: E402
from placement_opt.placement import Placement  # noqa: E402
from placement_opt.io import atomic_write_text  # noqa: E402
from placement_opt.solvers import run_solver  # noqa: E402
from scale_instance import scale_instance  # noqa: E402

CLUSTER_WAIT_S = 120.0


class LocalCluster:
    """A Ray head and worker nodes started as processes of this machine, ``cpus_per_node`` CPUs each."""

    def __init__(self, port: int, cpus_per_node: int = 1):
        self.port = port
        self.cpus_per_node = cpus_per_node
        self.address = f"127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []

    def start(self, cpus: int) -> None:
        """Start nodes of ``cpus_per_node`` CPUs (the last one the rest) until they hold ``cpus``: the
        head, then workers (every process started is in ``procs`` at once, so that :meth:`stop` ends
        them even when this is interrupted). One node per CPU is the most faithful to a cluster of
        machines, but on one host every node is a raylet and its agents: 8 or 16 of them did not all
        join within two minutes on a 16-core machine."""
        sizes = [min(self.cpus_per_node, cpus - i) for i in range(0, cpus, self.cpus_per_node)]
        common = ["--block", "--disable-usage-stats"]
        self._start(["ray", "start", "--head", f"--port={self.port}", "--node-ip-address=127.0.0.1",
                     "--include-dashboard=false", f"--num-cpus={sizes[0]}", *common])
        time.sleep(3.0)  # the head's GCS must listen before workers join
        for size in sizes[1:]:
            self._start(["ray", "start", f"--address={self.address}", "--node-ip-address=127.0.0.1",
                         f"--num-cpus={size}", *common])

    def _start(self, cmd: list[str]) -> None:
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))

    def wait_for_cpus(self, ray, cpus: int) -> None:
        """Connect and wait until the cluster has ``cpus`` CPUs."""
        ray.init(address=self.address, log_to_driver=False, _node_ip_address="127.0.0.1")
        deadline = time.time() + CLUSTER_WAIT_S
        while ray.cluster_resources().get("CPU", 0) < cpus:
            if time.time() > deadline:
                raise RuntimeError(f"the Ray cluster at {self.address} did not reach {cpus} CPUs")
            time.sleep(0.5)

    def stop(self) -> None:
        """End the node processes this cluster started (their whole process groups)."""
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._forget()

    def _forget(self) -> None:
        """Remove Ray's note of the latest cluster when it names ours (``ray stop`` would), so that a
        later ``ray.init()`` without an address starts its own cluster instead of looking for this one."""
        note = os.path.join(tempfile.gettempdir(), "ray", "ray_current_cluster")
        try:
            with open(note) as f:
                ours = f.read().strip().endswith(":" + self.address.rsplit(":", 1)[1])
            if ours:
                os.remove(note)
        except OSError:
            pass


def solve(inst, backend: str, **opts):
    """(groups, wall seconds, attainment) of one alpaserve solve."""
    start = time.perf_counter()
    p = run_solver(inst, "alpaserve", options={"progress": False, "backend": backend, **opts})
    return p.groups, time.perf_counter() - start, p.metrics["slo_attainment"]


class CountTimeout(BaseException):
    """A worker count ran past ``--count-timeout`` (a BaseException, so that Ray's own retry loops,
    which catch Exception, let it through)."""


def _on_alarm(signum, frame):
    raise CountTimeout()


def measure(inst, workers: int, port: int, repeat: int, reference, timeout_s: float, cpus_per_node: int = 1) -> dict:
    """Best-of-``repeat`` wall seconds on a fresh cluster of ``workers`` nodes, and whether every
    placement equals ``reference``; after ``timeout_s`` seconds (cluster start included) the
    count is given up and recorded as timed out, with the solves it finished."""
    import ray
    times: list[float] = []
    identical = True
    attainment = None
    started = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    cluster = LocalCluster(port, cpus_per_node)
    try:
        cluster.start(workers)
        cluster.wait_for_cpus(ray, workers)
        groups, _, _ = solve(inst, "ray", address=cluster.address)  # warm-up: Numba caches in every worker
        identical = groups == reference
        for _ in range(repeat):
            groups, seconds, attainment = solve(inst, "ray", address=cluster.address)
            identical = identical and groups == reference
            times.append(seconds)
        timed_out, error = False, None
    except CountTimeout:
        timed_out, error = True, None
    except Exception as e:  # a cluster that does not start or connect: recorded, the next count runs
        timed_out, error = False, f"{type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        ray.shutdown()
        cluster.stop()
    return {"workers": workers, "best_s": min(times) if times else None, "times_s": times, "attainment": attainment,
            "identical": identical if times else None, "timed_out": timed_out, "error": error,
            "count_wall_s": round(time.perf_counter() - started, 1)}


def load(args):
    if args.scale:
        models, gpus = (int(x) for x in args.scale.split(","))
        return instance_from_dict(scale_instance(models, gpus), base_dir=os.path.join(ROOT, "instances", "alpaserve"))
    return load_instance(args.instance)


def fill_numba_cache() -> float:
    """Seconds of a short one-process solve (S3 on a 10 s workload) that compiles every kernel the
    search uses, or loads them, into Numba's on-disk cache, so that the Ray workers of this
    machine load them instead of each compiling them during its first task."""
    start = time.perf_counter()
    with open(os.path.join(ROOT, "instances", "alpaserve", "s3.json")) as f:
        data = json.load(f)
    data["workload"]["duration_s"] = 10.0
    solve(instance_from_dict(data, base_dir=os.path.join(ROOT, "instances", "alpaserve")), "serial")
    return time.perf_counter() - start


def reference_placement(inst, path: str):
    """(groups, serial seconds, attainment, where from) of the one-process placement: read from
    ``path`` when it was written for this instance with today's default options (its serial
    seconds are then those of the machine that wrote it), else solved here (and written to
    ``path`` when given)."""
    if path and os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
        if data.get("instance_sha256") == inst.sha256 and data.get("options") == _options_key():
            return (Placement.from_dict(data["placement"]).groups, data["serial_s"], data["serial_attainment"],
                    f"read from {path}")
    groups, seconds, attainment = solve(inst, "serial")
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        atomic_write_text(path, json.dumps({"instance": inst.name, "instance_sha256": inst.sha256,
                                            "options": _options_key(), "serial_s": seconds,
                                            "serial_attainment": attainment, "cpu_count": os.cpu_count(),
                                            "placement": Placement(groups=groups).to_dict()}, indent=1) + "\n")
    return groups, seconds, attainment, "solved here"


def _options_key() -> dict:
    """alpaserve's default options as JSON values (a reference written under other defaults is stale)."""
    from placement_opt.solvers.alpaserve import AlpaServeOptions
    return json.loads(json.dumps(dataclasses.asdict(AlpaServeOptions())))


def earlier_rows(path: str, inst) -> dict:
    """Rows by worker count of an earlier result file for the same instance (kept unless re-measured)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if data.get("instance_sha256") != inst.sha256:
        return {}
    return {r["workers"]: r for r in data.get("rows", [])}


def write_result(path: str, inst, serial: tuple, rows: dict, cpus_per_node: int) -> dict:
    """Write the result file (rows by worker count, speed-ups over the 1-worker row when there is one)."""
    ordered = [rows[w] for w in sorted(rows)]
    one = rows.get(1, {}).get("best_s")
    for row in ordered:
        row["speedup_vs_1"] = one / row["best_s"] if one and row.get("best_s") else None
    result = {"instance": inst.name, "instance_sha256": inst.sha256, "cpu_count": os.cpu_count(),
              "cpus_per_node": cpus_per_node,
              "serial_s": serial[1], "serial_attainment": serial[2], "reference": serial[3], "rows": ordered,
              "identical": all(r["identical"] is not False for r in ordered)}
    atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8,16", help="comma-separated worker counts")
    ap.add_argument("--instance", default=os.path.join(ROOT, "instances", "alpaserve", "s3.json"),
                    help="instance file")
    ap.add_argument("--scale", default="", help="MODELS,GPUS: a generated instance instead (benchmarks/scale_instance.py)")
    ap.add_argument("--repeat", type=int, default=2, help="timed solves per worker count; the best counts")
    ap.add_argument("--port", type=int, default=6390, help="port of the Ray head")
    ap.add_argument("--out", default="ray_scaling.json", help="JSON result file (rows of other counts kept)")
    ap.add_argument("--reference", default="", help="one-process placement file: read when it matches, else written")
    ap.add_argument("--reference-only", action="store_true", help="write --reference and stop")
    ap.add_argument("--count-timeout", type=float, default=0.0,
                    help="seconds one worker count may take, cluster start included (0 = no limit)")
    ap.add_argument("--cpus-per-node", type=int, default=1,
                    help="CPUs of each Ray node started (default 1: one node per worker)")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",") if x]
    inst = load(args)
    print(f"numba cache filled (or loaded) in {fill_numba_cache():.1f} s", flush=True)
    serial = reference_placement(inst, args.reference)
    print(f"{inst.name}: serial {serial[1]:.2f} s, attainment {serial[2]:.4f} ({serial[3]})", flush=True)
    if args.reference_only:
        return 0
    rows = earlier_rows(args.out, inst)
    for w in counts:
        rows[w] = measure(inst, w, args.port, args.repeat, serial[0], args.count_timeout or 1e9, args.cpus_per_node)
        write_result(args.out, inst, serial, rows, args.cpus_per_node)
        best = rows[w]["best_s"]
        print(f"  {w:3d} workers: {'-' if best is None else f'{best:.2f}'} s, identical {rows[w]['identical']}"
              f"{' (timed out)' if rows[w]['timed_out'] else ''}{' ' + rows[w]['error'] if rows[w]['error'] else ''}",
              flush=True)
    done = [rows[w] for w in sorted(rows)]
    identical = all(r["identical"] is not False for r in done)
    speedups = ",".join(f"{r['speedup_vs_1']:.2f}" if r.get("speedup_vs_1") else "-" for r in done)
    print(f"workers={','.join(str(r['workers']) for r in done)} speedup={speedups} identical={str(identical).lower()}")
    return 0 if identical and not any(r.get("error") for r in done) else 1


if __name__ == "__main__":
    sys.exit(main())
