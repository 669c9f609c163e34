"""Fast scoring of candidate placements for search algorithms.

:class:`PlacementEvaluator` simulates a set of groups on an instance's requests and, for
greedy searches, evaluates a candidate change *incrementally*: requests interact only
through the groups that host their model, so after changing group ``g`` only the models
in ``g``'s connected component of the model-group graph need re-simulation; everything
else keeps the accepted counts of the last full simulation.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .placement import Group
from .simulate.flowshop import run_tables
from .simulate.tables import build_tables
from .workload import Requests


class PlacementEvaluator:
    """Score groups by SLO attainment with the artifact's tie-breaks (see :meth:`score`)."""

    def __init__(self, instance, requests: Optional[Requests] = None):
        self.instance = instance
        self.config = instance.simulator
        self.requests = instance.requests() if requests is None else requests
        self.n_models = len(instance.models)
        self.index = {m: i for i, m in enumerate(instance.model_names)}
        order = np.argsort(self.requests.model, kind="stable")
        counts = np.bincount(self.requests.model, minlength=self.n_models)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        self._model_requests = [np.sort(order[bounds[m]:bounds[m + 1]]) for m in range(self.n_models)]
        self.requests_per_model = counts
        self.evaluations = 0

    @property
    def n_requests(self) -> int:
        return len(self.requests)

    def accepted_per_model(self, groups: Sequence[Group], models: Optional[Sequence[int]] = None) -> np.ndarray:
        """Accepted requests of every model (only ``models`` are simulated when given)."""
        self.evaluations += 1
        if models is None:
            req = self.requests
        else:
            idx = np.sort(np.concatenate([self._model_requests[m] for m in models])) if len(models) else \
                np.zeros(0, dtype=np.int64)
            req = self.requests.select(idx)
        tables = build_tables(self.instance, groups, self.config, model_filter=None if models is None else set(models))
        res = run_tables(tables, req, self.n_models, self.config)
        ok = res.finish >= 0
        return np.bincount(req.model[ok], minlength=self.n_models)

    def run(self, groups: Sequence[Group]):
        tables = build_tables(self.instance, groups, self.config)
        return run_tables(tables, self.requests, self.n_models, self.config)

    def attainment(self, groups: Sequence[Group]) -> float:
        n = self.n_requests
        return float(self.accepted_per_model(groups).sum() / n) if n else 1.0

    def score(self, groups: Sequence[Group]) -> float:
        """Attainment, minus mean latency / 1e4, plus replica count / 1e6 (artifact tie-breaks)."""
        self.evaluations += 1
        res = self.run(groups)
        return self.score_result(res, groups)

    def score_result(self, res, groups: Sequence[Group]) -> float:
        n = self.n_requests
        ok = res.finish >= 0
        att = ok.sum() / n if n else 1.0
        lat = float((res.finish[ok] - self.requests.arrival[ok]).mean()) if ok.any() else 0.0
        replicas = sum(len(g.models) for g in groups)
        return float(att - lat / 1e4 + replicas / 1e6)

    def component(self, groups: Sequence[Group], group_index: int) -> tuple[list[int], list[int]]:
        """Models and groups connected to ``groups[group_index]`` through shared models."""
        hosts = {}
        for g, grp in enumerate(groups):
            for name in grp.models:
                hosts.setdefault(self.index[name], []).append(g)
        seen_groups = {group_index}
        frontier = [group_index]
        models = set()
        while frontier:
            g = frontier.pop()
            for name in groups[g].models:
                m = self.index[name]
                if m in models:
                    continue
                models.add(m)
                for g2 in hosts[m]:
                    if g2 not in seen_groups:
                        seen_groups.add(g2)
                        frontier.append(g2)
        return sorted(models), sorted(seen_groups)

    def accepted_after_change(self, groups: Sequence[Group], group_index: int,
                              base_accepted: np.ndarray) -> np.ndarray:
        """Accepted counts after ``groups[group_index]`` changed, re-simulating only its component."""
        models, comp_groups = self.component(groups, group_index)
        sub_groups = [groups[g] for g in comp_groups]
        new = self.accepted_per_model(sub_groups, models)
        out = base_accepted.copy()
        out[models] = new[models]
        return out
