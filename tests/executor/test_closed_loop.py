"""The closed-loop dispatcher (``placeopt execute --admission closed-loop``) on a virtual clock.

No devices: the measured stage ends are fed to the dispatcher as a run would deliver them (a
stage end is known only once the virtual clock has passed it). With ends equal to the
predictions it admits exactly what the open-loop dispatcher (and the simulator) admits; with a
machine slower than the profile it rejects the requests that would finish late.
"""

import dataclasses
import heapq

import numpy as np
import pytest

from placement_opt import instance_from_dict
from placement_opt.executor.dispatch import Decision, Dispatcher
from placement_opt.placement import Group
from placement_opt.simulate.flowshop import run_groups
from placement_opt.workload import SLOSpec

WARM = {"stage_idle_factor": [0.8], "heat_time_s": 0.1, "cool_time_s": 0.02}
GROUPS = (Group(devices=(0,), models=("a",)), Group(devices=(1,), models=("b",)),
          Group(devices=(2, 3), pp=2, tp=1, models=("a", "b")))


def _instance(dispatch: str = "earliest", warm: bool = False, gaps: bool = False, rate: float = 80.0,
              slo_scale: float = 3.0, tail: float = 0.0, duration_s: float = 20.0):
    """Two models on a one-GPU group each and a shared 2-stage pipeline (10 ms; 6 + 5 ms);
    ``tail``: the admission tail margin of both configs; ``duration_s`` seconds of arrivals."""
    configs = [{"pp": 1, "tp": 1, "stage_latency_s": {"1": [0.01]}, "stage_weight_gb": [1]},
               {"pp": 2, "tp": 1, "stage_latency_s": {"1": [0.006, 0.005]}, "stage_weight_gb": [1, 1]}]
    if warm:
        configs[0].update(WARM)
        configs[1].update({**WARM, "stage_idle_factor": [0.9, 0.85]})
    if gaps:
        configs[0]["stage_gap_s"] = [0.001]
        configs[1]["stage_gap_s"] = [0.0005, 0.0007]
    if tail:
        for c in configs:
            c["tail_margin"] = tail
    return instance_from_dict({
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu": {"name": "g", "memory_gb": 16}},
        "profiles": {"p": {"weight_gb": 2.0, "configs": configs}},
        "models": [{"name": "a", "profile": "p"}, {"name": "b", "profile": "p"}],
        "workload": {"duration_s": duration_s, "arrival": {"process": "gamma", "rate": rate, "cv": 3},
                     "slo": {"scale": slo_scale}},
        "simulator": {"dispatch": dispatch, "overhead_s": 0.0005, "stage_overhead_factor": 0.0},
    })


def _deliver(d: Dispatcher, reports: list[tuple[float, int, int]], now: float) -> None:
    """Report to ``d`` every stage end of the min-heap ``reports`` (end, request, stage) that
    the virtual clock ``now`` has passed."""
    while reports and reports[0][0] <= now:
        end, r, s = heapq.heappop(reports)
        d.observe(r, s, end)


def _replay_predicted(inst, closed_loop: bool) -> tuple[list[Decision], Dispatcher]:
    """Dispatch every request; a closed-loop dispatcher learns each stage end, exactly as
    predicted, once the virtual clock (the next arrival) has passed it."""
    req = inst.requests()
    d = Dispatcher(inst, GROUPS, closed_loop=closed_loop)
    reports: list[tuple[float, int, int]] = []  # (end, request, stage), a min-heap
    out = []
    for i in range(len(req)):
        now = float(req.arrival[i])
        _deliver(d, reports, now)
        dec = d.decide(int(req.model[i]), now, float(req.deadline[i]), request=i)
        out.append(dec)
        for s, end in enumerate(dec.stage_ends):
            heapq.heappush(reports, (end, i, s))
    for end, r, s in sorted(reports):
        d.observe(r, s, end)
    return out, d


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
@pytest.mark.parametrize("warm,gaps", [(False, False), (True, True), (False, True)])
def test_without_drift_closed_loop_admits_as_open_loop_and_the_simulator(dispatch, warm, gaps):
    inst = _instance(dispatch, warm, gaps)
    closed, dc = _replay_predicted(inst, closed_loop=True)
    opened, do = _replay_predicted(inst, closed_loop=False)
    sim = run_groups(inst, GROUPS, inst.requests())
    assert 0 < sim.accepted < len(closed)  # some rejected, some served: the rule matters
    assert [x.group for x in closed] == [x.group for x in opened] == list(sim.group)
    assert [x.finish for x in closed] == [x.finish for x in opened]  # bit for bit
    np.testing.assert_allclose([x.finish for x in closed], sim.finish, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(dc.clocks, do.clocks)
    assert dc.corrections == 0 and dc.correction_max_s == 0.0
    assert not dc._queued  # every request's ends were observed and it left the backlog


def _one_stage():
    inst = _instance()
    return inst, (Group(devices=(0,), models=("a", "b")),)


def test_a_late_stage_end_rejects_the_request_that_would_finish_late():
    """10 ms stage, no gaps: request 0 really took 16 ms, so request 1 (queued behind it) ends at
    26 ms and request 2 at 36 ms, 5 ms past its deadline; open loop predicts 30 ms and admits it."""
    inst, groups = _one_stage()
    deadline2 = 0.017 + 0.0135 + 0.0005  # meets the predicted 30 ms finish, not the real 36 ms

    def run(closed_loop: bool, end0: float) -> Decision:
        d = Dispatcher(inst, groups, closed_loop=closed_loop)
        assert d.decide(0, 0.0, 1.0, request=0).stage_ends == (0.01,)
        assert d.decide(1, 0.001, 1.0, request=1).stage_ends == pytest.approx((0.02,))
        d.observe(0, 0, end0)  # reported at end0 <= 17 ms
        return d.decide(0, 0.017, deadline2, request=2)

    assert run(False, 0.016).admitted  # open loop ignores what it measured
    assert not run(True, 0.016).admitted  # closed loop: the queue really ends at 26 ms
    on_time = run(True, 0.010)  # measured as predicted: identical decision
    assert on_time.admitted and on_time.finish == run(False, 0.010).finish
    early = run(True, 0.008)  # an early end never makes the clock earlier than predicted
    assert early.finish == on_time.finish


def _serve_on_a_slow_machine(inst, slowdown, closed_loop: bool, dispatcher=Dispatcher,
                             decisions: list | None = None) -> tuple[int, int]:
    """Dispatch every request to a virtual machine whose stages take ``slowdown`` x the profile
    (a number, or one per request); the closed-loop dispatcher learns each real stage end once
    the virtual clock passed it. Returns (admitted, admitted but finished after the deadline);
    appends every decision to ``decisions`` when given."""
    req = inst.requests()
    d = dispatcher(inst, GROUPS, closed_loop=closed_loop)
    factor = np.broadcast_to(np.asarray(slowdown, dtype=float), (len(req),))
    t = d.tables
    free = np.zeros(int(t.stage_ptr[-1]))  # the real machine's stage free times
    reports: list[tuple[float, int, int]] = []
    admitted = late = 0
    for i in range(len(req)):
        now = float(req.arrival[i])
        _deliver(d, reports, now)
        dec = d.decide(int(req.model[i]), now, float(req.deadline[i]), request=i)
        if decisions is not None:
            decisions.append(dec)
        if not dec.admitted:
            continue
        host = next(h for h in range(t.host_ptr[req.model[i]], t.host_ptr[req.model[i] + 1])
                    if t.host_group[h] == dec.group)
        ready, s0 = now, int(t.stage_ptr[dec.group])
        for s in range(len(dec.stage_ends)):
            ready = max(ready, free[s0 + s]) + t.lat[t.host_lat_ptr[host] + s] * factor[i]
            free[s0 + s] = ready
            heapq.heappush(reports, (ready, i, s))
        admitted += 1
        late += int(ready + inst.simulator.overhead_s > req.deadline[i])
    if decisions is not None:
        decisions.append(d)
    return admitted, late


class _FullReplay(Dispatcher):
    """The closed loop as first written: every report replays the group's whole backlog from
    the floor (the reference the incremental replay must equal); counts the requests it walks."""

    walked = 0

    def _replay(self, g, changed):
        s0 = int(self.tables.stage_ptr[g])
        backlog = self._backlog[g]
        frees = self._floor_of(g)
        for q in backlog:
            frees = self._replay_one(q, frees)
            _FullReplay.walked += 1
        while backlog and all(m is not None for m in backlog[0].measured):
            done = backlog.popleft()
            del self._queued[done.request]
            self._floor[s0:s0 + len(done.ends)] = np.maximum(self._floor[s0:s0 + len(done.ends)], self._frees_of(done))
        return frees


class _Counting(Dispatcher):
    """The incremental replay, counting the requests it walks."""

    walked = 0

    def _replay_one(self, q, frees):
        _Counting.walked += 1
        return Dispatcher._replay_one(q, frees)


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
def test_incremental_replay_equals_the_full_replay_over_a_long_backlog(dispatch):
    """Over capacity (420 req/s in Gamma bursts on 366 req/s), SLO scale 200, 10 s of arrivals:
    the backlog grows to hundreds of requests. Every stage runs 0.9-1.1 x the profile at random
    (ends early and late, so floors and early stops both happen): the incremental replay makes
    the same decisions, clocks, finishes and corrections as the whole-backlog replay, walking
    fewer requests."""
    inst = _instance(dispatch, rate=420.0, slo_scale=200.0, duration_s=10.0)
    factor = np.random.default_rng(7).uniform(0.9, 1.1, size=len(inst.requests()))
    full: list = []
    incremental: list = []
    _FullReplay.walked = _Counting.walked = 0
    served = _serve_on_a_slow_machine(inst, factor, True, _FullReplay, full)
    assert _serve_on_a_slow_machine(inst, factor, True, _Counting, incremental) == served
    d_full, d_inc = full.pop(), incremental.pop()
    assert [(x.group, x.stage_ends, x.finish) for x in incremental] == [(x.group, x.stage_ends, x.finish) for x in full]
    np.testing.assert_array_equal(d_inc.clocks, d_full.clocks)
    assert (d_inc.corrections, d_inc.correction_max_s) == (d_full.corrections, d_full.correction_max_s)
    assert d_full.corrections > 100 and served[0] < len(full)  # the rule matters: corrections, rejections
    assert max(len(b) for b in d_full._backlog) > 100  # queued at the last arrival: a long backlog
    assert d_inc._queued.keys() == d_full._queued.keys()
    assert _Counting.walked < _FullReplay.walked
    print(f"requests walked: full {_FullReplay.walked}, incremental {_Counting.walked}")


@pytest.mark.parametrize("dispatch", ["earliest", "shortest_queue"])
def test_on_a_machine_slower_than_the_profile_closed_loop_rejects_what_would_be_late(dispatch):
    """Saturated (350 req/s in Gamma bursts on 366 req/s of capacity), SLO scale 10, every stage 3% slower
    than profiled: open loop's clocks fall behind over every long busy period. The closed loop
    removes that past drift; what stays late is the 3% drift of the requests still queued ahead
    when a request is admitted, which no measured end can show yet."""
    inst = _instance(dispatch, rate=350.0, slo_scale=10.0)
    admitted_open, late_open = _serve_on_a_slow_machine(inst, 1.03, closed_loop=False)
    admitted_closed, late_closed = _serve_on_a_slow_machine(inst, 1.03, closed_loop=True)
    assert late_open > 300  # open loop admits many requests that the slow machine finishes late
    assert late_closed < late_open / 2
    assert admitted_closed < admitted_open
    assert admitted_open - late_open < admitted_closed - late_closed  # and it serves more on time
    assert _serve_on_a_slow_machine(inst, 1.0, closed_loop=True) == _serve_on_a_slow_machine(inst, 1.0, False)


def test_replay_of_the_measured_tp4_trial(tmp_path):
    """benchmarks/fidelity/closed_loop_replay.py on the committed 4 x H100 tp=4 trial (Poisson,
    SLO 5: 38 admitted requests late): the virtual stage that runs as the measured one did
    reproduces the open-loop late count within 3, and the closed loop leaves at most a quarter."""
    import importlib.util
    import os
    import tarfile

    from placement_opt import load_instance, load_placement

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fidelity = os.path.join(root, "benchmarks", "fidelity")
    spec = importlib.util.spec_from_file_location("closed_loop_replay", os.path.join(fidelity, "closed_loop_replay.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with tarfile.open(os.path.join(fidelity, "results", "runs-h100x4-warm.tar.gz")) as tar:
        member = tar.getmember("./warm4-poisson-tp4/slo-5/requests.csv")
        (tmp_path / "requests.csv").write_bytes(tar.extractfile(member).read())
    inst = load_instance(os.path.join(root, "instances", "fidelity", "four-models-poisson-warm.json"))
    inst = dataclasses.replace(inst, workload=dataclasses.replace(inst.workload, slo=SLOSpec(scale=5.0)))
    groups = load_placement(os.path.join(root, "instances", "fidelity", "placement4-tp4.json")).groups
    rows = mod._read(str(tmp_path / "requests.csv"))
    measured_late = sum(r["admitted"] == "1" and r["met_slo"] == "0" for r in rows)
    assert measured_late == 38
    stage = mod.measured_stage(rows, 0)
    _, late_open, on_time_open = mod.replay(inst, groups, rows, stage, 0, closed_loop=False)
    _, late_closed, on_time_closed = mod.replay(inst, groups, rows, stage, 0, closed_loop=True)
    assert abs(late_open - measured_late) <= 3
    assert late_closed <= measured_late / 4 and on_time_closed > on_time_open


def test_reevals_flagged_column_is_the_dispatchers_admission_rule():
    """``benchmarks/fidelity/reeval.py`` flags an admitted request whose replayed finish plus tail
    margin misses its deadline, by the dispatcher's own rule (:meth:`Decision.late`): the requests
    a dispatcher with a tail margin admitted, replayed in their groups, are never flagged, and the
    margin is what rejected some of them (no margin: more admitted)."""
    import importlib.util
    import os

    from placement_opt.placement import Placement

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("reeval", os.path.join(root, "benchmarks", "fidelity", "reeval.py"))
    reeval = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reeval)

    def admitted_groups(inst) -> np.ndarray:
        d, req = Dispatcher(inst, GROUPS), inst.requests()
        return np.array([d.decide(int(req.model[i]), float(req.arrival[i]), float(req.deadline[i])).group
                         for i in range(len(req))])

    inst = _instance(gaps=True, rate=300.0, slo_scale=3.0, tail=0.3)
    group = admitted_groups(inst)
    assert (group >= 0).sum() < (admitted_groups(_instance(gaps=True, rate=300.0, slo_scale=3.0)) >= 0).sum()
    assert not reeval.flagged(inst, Placement(groups=GROUPS), inst.requests(), group).any()
    everyone = np.array([int(g) for g in admitted_groups(dataclasses.replace(
        inst, workload=dataclasses.replace(inst.workload, slo=SLOSpec(scale=1e6))))])
    flags = reeval.flagged(inst, Placement(groups=GROUPS), inst.requests(), everyone)
    assert 0 < flags.sum() < len(flags)  # served regardless of deadlines: some would miss
    d = Dispatcher(inst, GROUPS).place(0, 0, 0.0)
    busy = Dispatcher(inst, GROUPS)
    for i in range(5):
        late = busy.place(0, 0, 0.0)
    assert late.margin > d.margin > 0  # the margin grows with the busy period
    assert not late.late(late.finish + late.margin) and late.late(late.finish + late.margin - 1e-9)
