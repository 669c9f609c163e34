"""Our flow-shop kernel beside the AlpaServe artifact's own, on one case (issue 14, kernel target 1).

The artifact (github.com/alpa-projects/mms, AlpaServe's OSDI'23 code) simulates a placement
request by request in the Numba function ``simulate_requests_mixed`` of
``alpa_serve/simulator/controller.py`` (called by ``approximate_one_case_one_placement``): per
request, dispatch to the model's group whose last stage frees first, pass the stages, admit
when finish + 0.011 s - arrival <= SLO. Its inputs: arrival times (float64), model ids and
SLOs per request (int32, float32), a model -> groups table padded with -1, stages per group,
and stage latencies per (model, group, stage) (float32); it writes every request's finish
time and admission flag.

This script imports that function from the artifact's own files (``--artifact DIR``, a
directory holding ``alpa_serve/...`` as in the repository; nothing of it is copied into this
repository) and runs it beside ``accept_flow_shop`` (the attainment-only kernel the searches
use, as in ``benchmarks/search_speed.py``) and ``run_flow_shop`` (ours with per-request output,
like the artifact's) on ``search_speed``'s kernel case: 64 x BERT-1.3B on 16 groups of 4 stages,
100 req/s for ``--seconds`` (20000 s: 2 M requests).

Importing ``alpa_serve.simulator.controller`` pulls in ``alpa_serve.controller`` (the Ray /
Starlette / uvicorn serving controller) and, through ``alpa_serve/util.py``, ``ray``. The
script puts a stub module in ``sys.modules`` for ``alpa_serve.controller`` (its four names are
used only by the event-driven simulator's classes, not by the kernel) and, when ``ray`` is not
installed, an empty ``ray`` (``alpa_serve/util.py`` calls it only inside a function). The
other imported files are the artifact's own: ``ARTIFACT_FILES``. To fetch them from a clone::

    mkdir -p .artifact/mms && git -C MMS_CLONE archive HEAD \\
        $(python benchmarks/kernel_vs_artifact.py --list-files) | tar -x -C .artifact/mms

Same case for both: the artifact's kernel takes float32 stage latencies and SLOs, so both
kernels get our tables' stage latencies and the per-model SLOs rounded to float32 (ours as the
float64 values of those float32 numbers, deadlines = arrival + SLO). The script checks that
both make the same decisions: the same requests admitted, the same finish times bit for bit,
the same admitted requests per model and per group (exit status 1 if not).

Timing: every kernel is compiled (or loaded from Numba's cache) on a first call, then the
three run ``--repeat`` times interleaved (the order rotates every round) and the best run of
each counts. The last line reads ``artifact_requests_per_s=<a> placeopt_requests_per_s=<p>
ratio=<p/a>`` (p: ``accept_flow_shop``); ``--json FILE`` writes every run's time, the
decision check, the artifact kernel file's git blob id, versions and the machine's load.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import sys
import time
import types
from typing import Any, Callable, NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import numba  # noqa: E402
import numpy as np  # noqa: E402

from placement_opt.io import atomic_write_text  # noqa: E402
from placement_opt.simulate.kernels import EARLIEST, HostTables, accept_flow_shop, run_flow_shop  # noqa: E402
from search_speed import kernel_case  # noqa: E402

#: the artifact's files this script imports (relative to ``--artifact``)
ARTIFACT_FILES = ("alpa_serve/__init__.py", "alpa_serve/util.py", "alpa_serve/profiling.py",
                  "alpa_serve/simulator/controller.py", "alpa_serve/simulator/cluster.py",
                  "alpa_serve/simulator/event_loop.py", "alpa_serve/simulator/util.py",
                  "alpa_serve/simulator/workload.py")
KERNEL_FILE = "alpa_serve/simulator/controller.py"
KERNEL_NAME = "simulate_requests_mixed"
#: the fixed per-request overhead hard-coded in the artifact's kernel (``fixed_overhead``)
ARTIFACT_OVERHEAD_S = 0.011
#: names ``alpa_serve/simulator/controller.py`` imports from ``alpa_serve.controller``
CONTROLLER_NAMES = ("CreateInfo", "ModelInfo", "GroupInfo", "build_logger")
EXIT_BAD_INPUT = 2


class SharedCase(NamedTuple):
    """One case in both kernels' input formats (the same numbers)."""

    n_models: int
    overhead: float
    tables: HostTables  # ours, stage latencies rounded to float32
    requests: tuple  # ours: (arrival, model, deadline)
    artifact_inputs: tuple  # the artifact's: (tstamps, model_ids, slos, m_id2g_id, num_stages, stage_latency)


def git_blob_id(path: str) -> str:
    """The file's git blob id (as ``git ls-tree`` shows it), to tell which artifact version ran."""
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _stub_module(name: str, names: tuple[str, ...]) -> types.ModuleType:
    """A module whose ``names`` raise when called: stands in for an import the kernel never uses."""
    module = types.ModuleType(name)
    module.__doc__ = "stub set by benchmarks/kernel_vs_artifact.py; the kernel does not use it"

    def unavailable(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError(f"{name} is stubbed by kernel_vs_artifact.py")

    for attr in names:
        setattr(module, attr, unavailable)
    return module


def load_artifact_kernel(artifact_dir: str) -> tuple[Callable, list[str]]:
    """Import the artifact's kernel from its own files under ``artifact_dir``; returns the
    function and the modules stubbed to import it. Exits 2 when a file is missing."""
    for rel in ARTIFACT_FILES:
        if not os.path.isfile(os.path.join(artifact_dir, rel)):
            print(f"kernel_vs_artifact: error: --artifact {artifact_dir}: missing {rel} "
                  f"(see --list-files)", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
    stubbed = ["alpa_serve.controller"]
    sys.modules["alpa_serve.controller"] = _stub_module("alpa_serve.controller", CONTROLLER_NAMES)
    if importlib.util.find_spec("ray") is None:
        sys.modules["ray"] = _stub_module("ray", ("get",))
        stubbed.append("ray")
    sys.path.insert(0, os.path.abspath(artifact_dir))
    module = importlib.import_module("alpa_serve.simulator.controller")
    expected = os.path.abspath(os.path.join(artifact_dir, KERNEL_FILE))
    if os.path.abspath(module.__file__ or "") != expected:
        print(f"kernel_vs_artifact: error: --artifact {artifact_dir}: alpa_serve was imported from "
              f"{module.__file__}, not from this directory", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    return getattr(module, KERNEL_NAME), stubbed


def _artifact_tables(tables: HostTables, n_models: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Our host tables as the artifact lays them out: model -> groups (padded with -1, in our
    host order, which is the artifact's group order), stages per group, and float32 stage
    latencies per (model, group, stage) (``inf`` where the model is not hosted; never read)."""
    n_groups = tables.n_groups
    num_stages = np.diff(tables.stage_ptr).astype(np.int32)
    m_id2g_id = np.full((n_models, n_groups), -1, dtype=np.int32)
    stage_latency = np.full((n_models, n_groups, int(num_stages.max())), np.inf, dtype=np.float32)
    for m in range(n_models):
        for j, h in enumerate(range(tables.host_ptr[m], tables.host_ptr[m + 1])):
            g = int(tables.host_group[h])
            m_id2g_id[m, j] = g
            off = int(tables.host_lat_ptr[h])
            stage_latency[m, g, :num_stages[g]] = tables.lat[off:off + num_stages[g]]
    return m_id2g_id, num_stages, stage_latency


def shared_case(seconds: float) -> SharedCase:
    """``search_speed``'s kernel case, with stage latencies and SLOs rounded to float32 (the
    artifact's precision) for both kernels, so that the two compute with the same numbers."""
    inst, tables, req = kernel_case(seconds)
    if len(tables.batch_sizes) != 1 or inst.simulator.overhead_s != ARTIFACT_OVERHEAD_S:
        raise SystemExit("kernel_vs_artifact: the case must be unbatched with the artifact's 0.011 s overhead")
    tables = tables._replace(lat=tables.lat.astype(np.float32).astype(np.float64))
    n_models = len(inst.models)
    slo32 = inst.slo_seconds().astype(np.float32)
    slos = slo32[req.model]
    deadline = req.arrival + slos.astype(np.float64)
    m_id2g_id, num_stages, stage_latency = _artifact_tables(tables, n_models)
    return SharedCase(n_models, inst.simulator.overhead_s, tables, (req.arrival, req.model, deadline),
                      (req.arrival, req.model.astype(np.int32), slos, m_id2g_id, num_stages, stage_latency))


def kernel_runs(case: SharedCase, artifact_kernel: Callable) -> dict[str, Callable[[], tuple]]:
    """The three timed calls on the whole case; each returns its outputs for the decision check.
    Per-request output arrays are allocated outside the timed call (lazily, by ``np.empty``)."""
    n = case.requests[0].shape[0]
    tables, n_groups, n_clocks = tuple(case.tables), case.tables.n_groups, int(case.tables.stage_ptr[-1])
    tstamps, model_ids, slos, m_id2g_id, num_stages, stage_latency = case.artifact_inputs

    def artifact() -> tuple:
        finish, good = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.bool_)
        counts = artifact_kernel(finish, good, tstamps, model_ids, slos, m_id2g_id, num_stages, stage_latency, n)
        return finish, good, counts

    def accept() -> tuple:
        counts = np.zeros(case.n_models, dtype=np.int64)
        accepted = accept_flow_shop(case.requests, tables, np.zeros(n_groups), np.zeros(n_clocks), counts,
                                    case.overhead, EARLIEST)
        return accepted, counts

    def full() -> tuple:
        finish, group = np.empty(n, dtype=np.float64), np.empty(n, dtype=np.int64)
        out = (finish, group, np.ones(n, dtype=np.int64), np.zeros(n_groups), np.zeros(n_clocks))
        return run_flow_shop(case.requests, tables, out, case.overhead, EARLIEST), finish, group

    return {"artifact": artifact, "accept_flow_shop": accept, "run_flow_shop": full}


def compare_decisions(outputs: dict[str, tuple], n_groups: int) -> dict[str, Any]:
    """Whether our kernels and the artifact's admit the same requests, with the same finish
    times (bit for bit), per model and per group."""
    art_finish, good, (_, art_model_good, _, art_group_good) = outputs["artifact"]
    accepted, model_counts = outputs["accept_flow_shop"]
    full_accepted, finish, group = outputs["run_flow_shop"]
    ours_good = finish >= 0
    differing = int(np.count_nonzero(ours_good != good))
    both = ours_good & good
    finish_differing = int(np.count_nonzero(art_finish[both].view(np.int64) != finish[both].view(np.int64)))
    per_model = bool(np.array_equal(np.asarray(art_model_good, dtype=np.int64), model_counts))
    per_group = bool(np.array_equal(np.asarray(art_group_good, dtype=np.int64),
                                    np.bincount(group[ours_good], minlength=n_groups)))
    same = (differing == 0 and finish_differing == 0 and per_model and per_group
            and accepted == full_accepted == int(good.sum()))
    return {"same_decisions": bool(same), "requests_admitted_differently": differing,
            "finish_times_differing": finish_differing, "same_per_model": per_model,
            "same_per_group": per_group, "admitted_artifact": int(good.sum()),
            "admitted_accept_flow_shop": int(accepted), "admitted_run_flow_shop": int(full_accepted)}


def time_interleaved(runs: dict[str, Callable[[], tuple]], repeat: int) -> tuple[dict[str, list[float]], dict]:
    """Every run ``repeat`` times, the order rotating each round; seconds per run and the last outputs."""
    names = list(runs)
    seconds: dict[str, list[float]] = {k: [] for k in names}
    outputs: dict[str, tuple] = {}
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            outputs[name] = runs[name]()
            seconds[name].append(time.perf_counter() - t0)
    return seconds, outputs


def warm_up(runs: dict[str, Callable[[], tuple]]) -> dict[str, float]:
    """One call of each (compiles the artifact's kernel, loads or compiles ours); seconds each."""
    out = {}
    for name, fn in runs.items():
        t0 = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t0
    return out


def machine() -> dict[str, Any]:
    """What ran it: versions, CPU, the cores this process may use, the load average."""
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return {"python": platform.python_version(), "numba": numba.__version__, "numpy": np.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(),
            "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", help="directory holding the artifact's alpa_serve/ files (see --list-files)")
    ap.add_argument("--list-files", action="store_true", help="print the artifact files needed, one a line, and exit")
    ap.add_argument("--seconds", type=float, default=20000.0,
                    help="workload seconds of the case (100 req/s: 20000 s = 2 M requests)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each kernel; the best counts")
    ap.add_argument("--json", help="write the measurements to this JSON file")
    args = ap.parse_args(argv)
    if args.list_files:
        print("\n".join(ARTIFACT_FILES))
        return 0
    if not args.artifact:
        ap.error("--artifact DIR is required")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    kernel, stubbed = load_artifact_kernel(args.artifact)
    before = machine()
    case = shared_case(args.seconds)
    runs = kernel_runs(case, kernel)
    first_call_s = warm_up(runs)
    seconds, outputs = time_interleaved(runs, args.repeat)
    check = compare_decisions(outputs, case.tables.n_groups)
    n = int(case.requests[0].shape[0])
    rate = {k: n / min(v) for k, v in seconds.items()}
    report = {"requests": n, "repeat": args.repeat, "decisions": check, "first_call_s": first_call_s,
              "seconds": seconds, "requests_per_s": rate,
              "ratio_accept_flow_shop": rate["accept_flow_shop"] / rate["artifact"],
              "ratio_run_flow_shop": rate["run_flow_shop"] / rate["artifact"],
              "artifact": {"dir": os.path.abspath(args.artifact), "kernel": f"{KERNEL_FILE}:{KERNEL_NAME}",
                           "kernel_file_git_blob": git_blob_id(os.path.join(args.artifact, KERNEL_FILE)),
                           "stubbed_modules": stubbed},
              "machine_before": before, "loadavg_after": machine()["loadavg"]}
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("decisions", "requests_per_s", "ratio_run_flow_shop")}),
          file=sys.stderr)
    print(f"artifact_requests_per_s={rate['artifact']:.0f} placeopt_requests_per_s={rate['accept_flow_shop']:.0f} "
          f"ratio={report['ratio_accept_flow_shop']:.3f}")
    return 0 if check["same_decisions"] else 1


if __name__ == "__main__":
    sys.exit(main())
