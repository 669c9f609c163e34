"""The ``alpaserve`` search's speed-up on a local Ray cluster of 1, 2, 4, 8, 16 worker nodes (issue 14, item 5).

For every worker count ``w`` the script starts a Ray cluster on this machine (``ray start
--head`` plus ``w - 1`` worker nodes, each a separate process group with ``--num-cpus 1``,
so ``w`` CPUs in all), connects to it, solves the instance with ``backend=ray`` (a warm-up
solve first, so that every worker has loaded Numba's cache, then ``--repeat`` timed
solves: the best counts), and stops exactly the node processes it started. Every
placement must equal the one-process (``backend=serial``) placement.

Writes a JSON file (``--out``) with per worker count the wall seconds, the speed-up over
one worker and whether the placement is identical; the last line reads
``workers=<list> speedup=<list> identical=<true|false>``. Needs the ``ray`` extra.

Run: ``python benchmarks/ray_scaling.py --workers 1,2,4,8,16 --out ray_scaling.json``
(``--instance`` takes an instance file; default the bundled S3, full workload;
``--scale 200,256`` uses a generated instance of benchmarks/scale_instance.py instead).
"""

from __future__ import annotations

import argparse
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
from placement_opt.io import atomic_write_text  # noqa: E402
from placement_opt.solvers import run_solver  # noqa: E402
from scale_instance import scale_instance  # noqa: E402

CLUSTER_WAIT_S = 120.0


class LocalCluster:
    """A Ray head and worker nodes started as processes of this machine, one CPU each."""

    def __init__(self, nodes: int, port: int):
        self.address = f"127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []
        common = ["--num-cpus=1", "--block", "--disable-usage-stats"]
        self._start(["ray", "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                     "--include-dashboard=false", *common])
        time.sleep(3.0)  # the head's GCS must listen before workers join
        for _ in range(nodes - 1):
            self._start(["ray", "start", f"--address={self.address}", "--node-ip-address=127.0.0.1", *common])

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


def measure(inst, workers: int, port: int, repeat: int, reference) -> dict:
    """Best-of-``repeat`` wall seconds on a fresh cluster of ``workers`` nodes, and whether every
    placement equals ``reference``."""
    import ray
    cluster = LocalCluster(workers, port)
    try:
        cluster.wait_for_cpus(ray, workers)
        groups, _, _ = solve(inst, "ray", address=cluster.address)  # warm-up: Numba caches in every worker
        identical = groups == reference
        times = []
        for _ in range(repeat):
            groups, seconds, attainment = solve(inst, "ray", address=cluster.address)
            identical = identical and groups == reference
            times.append(seconds)
        return {"workers": workers, "best_s": min(times), "times_s": times, "attainment": attainment,
                "identical": identical}
    finally:
        ray.shutdown()
        cluster.stop()


def load(args):
    if args.scale:
        models, gpus = (int(x) for x in args.scale.split(","))
        return instance_from_dict(scale_instance(models, gpus), base_dir=os.path.join(ROOT, "instances", "alpaserve"))
    return load_instance(args.instance)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4,8,16", help="comma-separated worker counts")
    ap.add_argument("--instance", default=os.path.join(ROOT, "instances", "alpaserve", "s3.json"),
                    help="instance file")
    ap.add_argument("--scale", default="", help="MODELS,GPUS: a generated instance instead (benchmarks/scale_instance.py)")
    ap.add_argument("--repeat", type=int, default=2, help="timed solves per worker count; the best counts")
    ap.add_argument("--port", type=int, default=6390, help="port of the Ray head")
    ap.add_argument("--out", default="ray_scaling.json", help="JSON result file")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    inst = load(args)
    reference, serial_s, serial_att = solve(inst, "serial")
    print(f"{inst.name}: serial {serial_s:.2f} s, attainment {serial_att:.4f}", flush=True)
    rows = []
    for w in counts:
        row = measure(inst, w, args.port, args.repeat, reference)
        rows.append(row)
        print(f"  {w:3d} workers: {row['best_s']:.2f} s, identical {row['identical']}", flush=True)
    one = next((r["best_s"] for r in rows if r["workers"] == 1), None)
    for row in rows:
        row["speedup_vs_1"] = one / row["best_s"] if one else None
    result = {"instance": inst.name, "cpu_count": os.cpu_count(), "serial_s": serial_s, "serial_attainment": serial_att,
              "rows": rows, "identical": all(r["identical"] for r in rows)}
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    speedups = ",".join(f"{r['speedup_vs_1']:.2f}" if r["speedup_vs_1"] else "-" for r in rows)
    print(f"workers={','.join(map(str, counts))} speedup={speedups} identical={str(result['identical']).lower()}")
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
