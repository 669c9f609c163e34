"""Per-request records of an executed run and the files written from them.

A run writes, atomically, into its output folder:

* ``metrics.json``: the measured metrics, the same JSON as ``placeopt simulate --json``
  (:func:`placement_opt.simulate.metrics.serving_metrics`), where a request counts as
  served only if it was admitted and its measured finish met its deadline;
* ``simulated.json``: the simulator's metrics for the same requests and placement;
* ``requests.csv``: one row per request with arrival, deadline, the group it went to,
  the predicted and measured stage end times and finish, and whether it met its SLO;
* ``summary.json``: both metrics side by side, their differences and the run's facts.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import numpy as np

from placement_opt.io import atomic_write_json, atomic_write_text
from placement_opt.simulate.metrics import serving_metrics
from placement_opt.workload import Requests


@dataclass
class TrialRecord:
    """What the controller learned about every request of one trial (times relative to its start)."""

    name: str
    arrival: np.ndarray
    model: np.ndarray
    deadline: np.ndarray
    duration_s: float
    group: np.ndarray  # -1: rejected
    predicted_finish: np.ndarray  # -1: rejected
    dispatch: np.ndarray  # when the request was sent to its group (NaN: not sent)
    predicted_stage_end: List[tuple] = field(default_factory=list)
    stage_times: Dict[int, Dict[int, tuple]] = field(default_factory=dict)  # request -> stage -> (start, end)

    @classmethod
    def empty(cls, name: str, requests: Requests) -> "TrialRecord":
        """The record of trial ``name`` before any of its ``requests`` was dispatched."""
        n = len(requests)
        return cls(name=name, arrival=requests.arrival, model=requests.model, deadline=requests.deadline,
                   duration_s=requests.duration_s, group=np.full(n, -1, dtype=np.int64),
                   predicted_finish=np.full(n, -1.0), predicted_stage_end=[()] * n, dispatch=np.full(n, np.nan))

    def measured_finish(self, n_stages: List[int]) -> np.ndarray:
        """End of the last stage of every admitted request that completed (NaN: not completed)."""
        out = np.full(len(self.arrival), np.nan)
        for i, stages in self.stage_times.items():
            g = self.group[i]
            last = n_stages[g] - 1
            if last in stages:
                out[i] = stages[last][1]
        return out

    def outcome(self, n_stages: List[int]) -> dict:
        """Measured per-request finish (-1 unless admitted, completed and within the deadline) and counts."""
        finish = self.measured_finish(n_stages)
        admitted = self.group >= 0
        completed = admitted & ~np.isnan(finish)
        met = completed & (finish <= self.deadline)
        served = np.where(met, finish, -1.0)
        lat_admitted = (finish - self.arrival)[completed]
        return {"finish": served, "raw_finish": finish, "admitted": int(admitted.sum()),
                "completed": int(completed.sum()), "late": int((completed & ~met).sum()),
                "unfinished": int((admitted & ~completed).sum()),
                "latency_mean_admitted_s": float(lat_admitted.mean()) if lat_admitted.size else None}

    def busy(self, n_groups: int) -> np.ndarray:
        """Measured busy seconds of every group (sum of its reported stage times)."""
        out = np.zeros(n_groups)
        for i, stages in self.stage_times.items():
            out[self.group[i]] += sum(e - s for s, e in stages.values())
        return out


def requests_csv(rec: TrialRecord, model_names: Sequence[str], n_stages: List[int]) -> str:
    """The ``requests.csv`` text: one row per request, predicted and measured stage times side by side."""
    max_pp = max(n_stages) if n_stages else 1
    finish = rec.measured_finish(n_stages)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = ["request", "model", "arrival_s", "deadline_s", "group", "admitted", "dispatch_s",
            "predicted_finish_s"]
    for s in range(max_pp):
        head += [f"stage{s}_predicted_end_s", f"stage{s}_start_s", f"stage{s}_end_s"]
    head += ["finish_s", "latency_s", "met_slo"]
    w.writerow(head)
    fmt = (lambda x: "" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.6f}")
    for i in range(len(rec.arrival)):
        g = int(rec.group[i])
        row = [i, model_names[rec.model[i]], fmt(rec.arrival[i]), fmt(rec.deadline[i]), g, int(g >= 0),
               fmt(rec.dispatch[i]), fmt(rec.predicted_finish[i]) if g >= 0 else ""]
        stages = rec.stage_times.get(i, {})
        pred = rec.predicted_stage_end[i]
        for s in range(max_pp):
            se = stages.get(s)
            row += [fmt(pred[s]) if s < len(pred) else "", fmt(se[0]) if se else "", fmt(se[1]) if se else ""]
        done = not np.isnan(finish[i])
        row += [fmt(finish[i]) if done else "", fmt(finish[i] - rec.arrival[i]) if done else "",
                int(done and finish[i] <= rec.deadline[i])]
        w.writerow(row)
    return buf.getvalue()


def write_trial(out_dir: str, rec: TrialRecord, model_names: Sequence[str], n_stages: List[int], simulated: dict,
                facts: dict) -> dict:
    """Write the trial's four files into ``out_dir`` and return its summary."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    out = rec.outcome(n_stages)
    measured = serving_metrics(rec.arrival, rec.model, out["finish"], model_names, rec.duration_s,
                               rec.busy(len(n_stages)), n_stages)
    summary = {
        "trial": rec.name,
        "measured": measured,
        "simulated": simulated,
        "difference": {
            "slo_attainment_pp": 100.0 * (measured["slo_attainment"] - simulated["slo_attainment"]),
            "latency_mean_s": (None if measured["latency_mean_s"] is None or simulated["latency_mean_s"] is None
                               else measured["latency_mean_s"] - simulated["latency_mean_s"]),
        },
        "admitted": out["admitted"], "completed": out["completed"], "late": out["late"],
        "unfinished": out["unfinished"], "latency_mean_admitted_s": out["latency_mean_admitted_s"],
        **facts,
    }
    atomic_write_json(os.path.join(out_dir, "metrics.json"), measured)
    atomic_write_json(os.path.join(out_dir, "simulated.json"), simulated)
    atomic_write_text(os.path.join(out_dir, "requests.csv"), requests_csv(rec, model_names, n_stages))
    atomic_write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary
