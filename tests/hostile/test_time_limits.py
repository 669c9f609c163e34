"""``--time-limit`` is a promise (issue 15.2): the best complete placement found within the
limit, counted from the command's start, plus one simulation of it; ``compare`` keeps the
limit per solver and exits by docs/cli.md's policy when one was stopped.

The instances are generated at test time and sized so that the searches outlast the small
limits used here, while their final simulation stays short (well under the 1.5 s of slack the
bounds allow for it and start-up noise). The machine's load is measured, not guessed: a run
on a loaded machine gets less than a core, so everything it does after its limit (the final
simulation, the output) takes that much longer in wall time. Each test measures the share of a
core its own run got (its CPU seconds over its wall seconds, from the child's resource usage)
and stretches the slack by the inverse; on a quiet machine (a core's worth, or more with worker
processes) the bounds are exactly the fixed 1.5 s ones. The stop itself is asserted from the
run's recorded stop reason.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import signal
import time

import pytest

from inputs import GOOD
from hostile.test_hostile_cli import ROOT, llm_instance, placeopt, start

#: seconds a run that had a whole core may take beyond its limit: the final simulation (short
#: on these instances), writing the output and start-up noise (stretched by :func:`_load`)
SLACK_S = 1.5

#: the per-solver limit of the timed ``compare`` (and of its warm-up, which must compile what it reaches)
COMPARE_LIMIT_S = 1.5


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished, waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load(wall_s: float, cpu_s: float) -> float:
    """How much longer than on a core of its own a run took: its wall seconds over its CPU
    seconds, at least 1 (a run with worker processes may use more CPU than wall time)."""
    return max(1.0, wall_s / max(cpu_s, 1e-3))


def _dnn_instance(tmp_path) -> str:
    """72 models on 32 GPUs at 1000 req/s for 60 s: every search runs for many seconds."""
    d = copy.deepcopy(GOOD)
    d["cluster"].update(nodes=4, gpus_per_node=8)
    d["profiles"]["small"] = {"derive": {"latency_s": 0.05, "weight_gb": 1.3, "max_gpus": 8, "layers": 24}}
    d["profiles"]["mid"] = {"derive": {"latency_s": 0.1, "weight_gb": 5.3, "max_gpus": 8, "layers": 24}}
    d["models"] = [{"name": "s", "profile": "small", "count": 48}, {"name": "m", "profile": "mid", "count": 24}]
    d["workload"].update(duration_s=60)
    d["workload"]["arrival"]["rate"] = 1000.0
    path = tmp_path / "dnn.json"
    path.write_text(json.dumps(d))
    return str(path)


def _llm_instance(tmp_path) -> str:
    """40 7B LLMs on 20 nodes of 8 A100s: the mesh-group enumeration runs for many seconds (14 s
    unbounded on a 2-core machine, where 32 on 16 nodes took 3.4-4.6 s: too near the 3 s limit)."""
    def many(d):
        d["name"] = "llm-many"
        d["cluster"].update(nodes=20, gpus_per_node=8)
        d["models"][0]["count"] = 40
    return llm_instance(tmp_path, many)


def _solvers(family: str) -> list[str]:
    from placement_opt.solvers import get_solver_class, solver_names
    return [n for n in solver_names() if get_solver_class(n).family == family and n != "exhaustive"]


@pytest.fixture(scope="module", autouse=True)
def _compiled_kernels(tmp_path_factory):
    """The limits are promised for an installed package whose Numba kernels are compiled: the
    first run after installing compiles them (once, cached on disk, about 10 s on this machine,
    and not interruptible; docs/cli.md), which these bounds do not cover. Compile them first,
    with the limit the tests use: a search reaches some kernels only after a while, and a run
    that spent its limit compiling the first ones never reached them (a fresh clone's suite once
    compiled one inside the timed ``compare``: alpaserve 26 s for 1.5). So the solvers that
    overran the limit by more than the tests' slack (that compiled something) run again, at most
    five times, until none does."""
    tmp = tmp_path_factory.mktemp("compile")
    limit = COMPARE_LIMIT_S
    for family, make in (("dnn", _dnn_instance), ("llm", _llm_instance)):
        instance, names = make(tmp), _solvers(family)
        for _ in range(5):
            proc, _, load = _timed(["compare", instance, "--solvers", ",".join(names), "--time-limit", str(limit),
                                    "--json"], timeout=600)
            names = [r["solver"] for r in json.loads(proc.stdout)["results"] if r["solve_s"] > limit + SLACK_S * load]
            if not names:
                break


def _timed(args: list[str], timeout: float = 120.0):
    """Run ``placeopt ARGS``: (the process, its wall seconds, its :func:`_load`)."""
    cpu, began = _children_cpu_s(), time.perf_counter()
    proc = placeopt(args, timeout=timeout)
    wall = time.perf_counter() - began
    return proc, wall, _load(wall, _children_cpu_s() - cpu)


@pytest.mark.parametrize("solver, make", [("clockwork++", _dnn_instance), ("selective-replication", _dnn_instance),
                                          ("muxserve", _llm_instance)])
def test_solve_ends_within_the_limit_counted_from_the_start(tmp_path, solver, make):
    """The limit counts from the process's start (imports, loading, workload): the whole run,
    final simulation and output included, ends within the limit plus the slack."""
    limit = 3.0
    out = tmp_path / "p.json"
    proc, wall, load = _timed(["solve", make(tmp_path), "--solver", solver, "--time-limit", str(limit), "-o", str(out)])
    assert "Traceback" not in proc.stderr
    assert wall <= limit + SLACK_S * load, (solver, wall, load, proc.stderr[-500:])
    assert proc.returncode in (3, 124), proc.stderr[-500:]  # these searches outlast 3 s
    if proc.returncode == 3:
        assert json.loads(out.read_text())["provenance"]["stopped"] == "time limit"


@pytest.mark.parametrize("family, make", [("dnn", _dnn_instance), ("llm", _llm_instance)])
def test_compare_keeps_the_limit_for_every_solver_and_exits_3(tmp_path, family, make):
    """Every registered solver of the family (exhaustive has its own test) ends within the
    per-solver limit plus the slack; a solver stopped by the limit is marked in its row and
    the command exits 3 (was 0)."""
    names = _solvers(family)
    limit = COMPARE_LIMIT_S
    proc, wall, load = _timed(["compare", make(tmp_path), "--solvers", ",".join(names), "--time-limit", str(limit),
                         "--json"])
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 3, proc.stderr[-800:]
    rows = json.loads(proc.stdout)["results"]
    assert [r["solver"] for r in rows] == names
    for r in rows:
        assert r["solve_s"] <= limit + SLACK_S * load, (r, load)
    stopped = [r for r in rows if "stopped" in r]
    assert stopped and all(f"placeopt: {r['solver']} was stopped ({r['stopped']})" in proc.stderr for r in stopped)
    assert wall <= len(names) * limit + 2 * SLACK_S * load, (wall, load)


def test_exhaustive_counting_a_huge_space_stops_at_the_limit(tmp_path):
    """exhaustive counted its space before searching, without looking at the clock: minutes
    on a large cluster. Now the limit passes while counting: nothing found, exit 124."""
    with open(os.path.join(ROOT, "instances", "alpaserve", "s3.json")) as f:
        d = json.load(f)
    d["cluster"]["nodes"] = 32  # 256 GPUs: very many partitions, each of whose configs takes time to list
    path = tmp_path / "s3-256.json"
    path.write_text(json.dumps(d))
    proc, wall, load = _timed(["solve", str(path), "--solver", "exhaustive", "--time-limit", "2",
                         "-o", str(tmp_path / "p.json")])
    assert proc.returncode == 124, proc.stderr[-500:]
    assert "time limit passed before any placement was found" in proc.stderr
    assert wall <= 2 + SLACK_S * load, (wall, load)


def test_round_robin_on_a_large_cluster_stops_at_the_limit(tmp_path):
    """round-robin ignored the limit; on 8192 GPUs its passes take far longer than 2 s."""
    def edit(d):
        d["cluster"].update(nodes=1024, gpus_per_node=8)
        d["profiles"]["small"] = {"derive": {"latency_s": 0.05, "weight_gb": 1.3, "max_gpus": 8, "layers": 24}}
        d["models"] = [{"name": "s", "profile": "small", "count": 60}]
    d = copy.deepcopy(GOOD)
    edit(d)
    path = tmp_path / "rr.json"
    path.write_text(json.dumps(d))
    proc, wall, load = _timed(["solve", str(path), "--solver", "round-robin", "--time-limit", "2",
                         "-o", str(tmp_path / "p.json")])
    assert proc.returncode == 3, proc.stderr[-500:]
    assert wall <= 2 + (SLACK_S + 1.0) * load, (wall, load)  # 8192 groups: a longer final simulation and output


def test_compare_interrupted_prints_the_rows_so_far_and_exits_3(tmp_path):
    """Ctrl-C during the second solver: the comparison ends there, the finished row and the
    interrupted solver's row are printed, exit 3 (a placement was found); was: the next
    solver started as if nothing happened, then exit 0."""
    proc = start(["compare", _dnn_instance(tmp_path), "--solvers", "mp-equal,clockwork++,selective-replication",
                  "-O", "clockwork++:window_s=5", "--json"])
    time.sleep(4.0)
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == 3, (proc.returncode, err[-800:])
    rows = json.loads(out)["results"]
    assert [r["solver"] for r in rows] == ["mp-equal", "clockwork++"]
    assert "stopped" not in rows[0] and rows[1]["stopped"].startswith("interrupted")
    assert "selective-replication" not in err


@pytest.mark.parametrize("solver", ["muxserve", "greedy-memory"])
def test_a_signal_stops_the_mesh_group_search_within_2_s(tmp_path, solver):
    """SIGINT after 2 s of an LLM search (the DNN solvers have theirs in test_hostile_cli):
    out within 2 s more, plus one simulation, with the best placement so far (exit 3) or a
    clear 'nothing written' (130)."""
    out = tmp_path / "p.json"
    path = _llm_instance(tmp_path)
    cpu, began = _children_cpu_s(), time.perf_counter()
    proc = start(["solve", path, "--solver", solver, "-o", str(out)])
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    sent = time.perf_counter()
    try:
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    ended = time.perf_counter()
    load = _load(ended - began, _children_cpu_s() - cpu)
    assert "Traceback" not in err
    assert ended - sent < 2.0 + SLACK_S * load, (ended - sent, load)
    if proc.returncode == 3:
        assert json.loads(out.read_text())["provenance"]["stopped"] == "interrupted"
    else:
        assert proc.returncode == 130, (proc.returncode, err[-500:])
        assert "nothing written" in err and not out.exists()
