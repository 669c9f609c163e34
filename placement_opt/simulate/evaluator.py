"""Fast scoring of candidate placements for search algorithms.

:class:`PlacementEvaluator` simulates a set of groups on an instance's requests (or a subset
of them, e.g. one model bucket's). For greedy searches it scores a *component*: requests
interact only through the groups that host their model, so after changing group ``g`` only
the models in ``g``'s connected component of the model-group graph need re-simulation
(:meth:`PlacementEvaluator.component_result`), and a component already simulated is
looked up instead (memoised by its groups' configs and models).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from placement_opt.instance import Instance
from placement_opt.placement import Group
from placement_opt.simulate.flowshop import run_tables
from placement_opt.simulate.kernels import EARLIEST, SHORTEST_QUEUE, accept_flow_shop
from placement_opt.simulate.tables import HostTables, batch_size_grid, build_tables, stage_latencies
from placement_opt.workload import Requests

#: Component simulations remembered per evaluator (keys are small tuples, values small arrays).
MEMO_LIMIT = 200_000


class PlacementEvaluator:
    """Score groups by accepted requests (SLO attainment), in full or one component at a time."""

    def __init__(self, instance: Instance, requests: Optional[Requests] = None):
        self.instance = instance
        self.config = instance.simulator
        self.requests = instance.requests() if requests is None else requests
        self.n_models = len(instance.models)
        order = np.argsort(self.requests.model, kind="stable")
        counts = np.bincount(self.requests.model, minlength=self.n_models)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        self._model_requests = [np.sort(order[bounds[m]:bounds[m + 1]]) for m in range(self.n_models)]
        self.requests_per_model = counts
        self.evaluations = 0
        self.memo_hits = 0
        self._memo: Dict[tuple, Tuple[np.ndarray, np.ndarray]] = {}
        self._subsets: Dict[tuple, Requests] = {}
        self._lat: Dict[Tuple[int, int, int], np.ndarray] = {}
        self._blocks: Dict[Tuple[int, int, tuple], Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._batch_sizes = (batch_size_grid(instance.model_profiles, self.config.max_batch) if self.config.batching
                             else np.array([1], dtype=np.int64))

    @property
    def n_requests(self) -> int:
        return len(self.requests)

    def accepted_per_model(self, groups: Sequence[Group]) -> np.ndarray:
        """Accepted requests of every model when ``groups`` serve all the evaluator's requests."""
        self.evaluations += 1
        res = run_tables(build_tables(self.instance, groups, self.config), self.requests, self.n_models, self.config)
        return np.bincount(self.requests.model[res.finish >= 0], minlength=self.n_models)

    def attainment(self, groups: Sequence[Group]) -> float:
        """Fraction of the evaluator's requests that ``groups`` serve within their SLO."""
        n = self.n_requests
        return float(self.accepted_per_model(groups).sum() / n) if n else 1.0

    # --- fast path for searches that describe groups as (pp, tp) shells and model-index lists ---

    def latencies(self, m: int, pp: int, tp: int) -> np.ndarray:
        """Model ``m``'s stage latencies in config (pp, tp), batch size by batch size (cached)."""
        key = (m, pp, tp)
        lat = self._lat.get(key)
        if lat is None:
            lat = stage_latencies(self.instance.model_profiles[m], pp, tp, self._batch_sizes, self.config).ravel()
            self._lat[key] = lat
        return lat

    def _requests_of(self, models: tuple) -> Requests:
        req = self._subsets.get(models)
        if req is None:
            idx = np.sort(np.concatenate([self._model_requests[m] for m in models])) if models else \
                np.zeros(0, dtype=np.int64)
            req = self.requests.select(idx)
            if len(self._subsets) < 4096:
                self._subsets[models] = req
        return req

    def _block(self, pp: int, tp: int, models: tuple) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One group's models (array), their latencies back to back, and each one's offset (cached)."""
        key = (pp, tp, models)
        block = self._blocks.get(key)
        if block is None:
            lats = [self.latencies(m, pp, tp) for m in models]
            offsets = np.zeros(len(models), dtype=np.int64)
            if lats:
                offsets[1:] = np.cumsum([x.size for x in lats[:-1]])
            block = (np.asarray(models, dtype=np.int64), np.concatenate(lats) if lats else np.zeros(0), offsets)
            if len(self._blocks) < MEMO_LIMIT:
                self._blocks[key] = block
        return block

    def shell_tables(self, configs: Sequence[tuple], model_lists: Sequence[Sequence[int]]) -> HostTables:
        """Kernel tables for groups given as ``(pp, tp)`` and model-index lists (same host order as
        :func:`~placement_opt.simulate.tables.build_tables`: by model, then group; latencies are
        laid out group by group from cached per-group blocks)."""
        n_groups = len(configs)
        stage_ptr = np.zeros(n_groups + 1, dtype=np.int32)
        stage_ptr[1:] = np.cumsum([c[0] for c in configs])
        blocks = [self._block(c[0], c[1], tuple(sorted(ms))) for c, ms in zip(configs, model_lists)]
        sizes = np.array([b[1].size for b in blocks], dtype=np.int64)
        base = np.zeros(n_groups, dtype=np.int64)
        base[1:] = np.cumsum(sizes[:-1])
        counts = np.array([b[0].size for b in blocks], dtype=np.int64)
        models = np.concatenate([b[0] for b in blocks]) if n_groups else np.zeros(0, dtype=np.int64)
        groups = np.repeat(np.arange(n_groups, dtype=np.int64), counts)
        ptrs = np.concatenate([b[2] + base[g] for g, b in enumerate(blocks)]) if n_groups else \
            np.zeros(0, dtype=np.int64)
        order = np.lexsort((groups, models))
        host_model = models[order]
        host_group = groups[order]
        host_ptr = np.zeros(self.n_models + 1, dtype=np.int64)
        host_ptr[1:] = np.cumsum(np.bincount(host_model, minlength=self.n_models))
        group_host_ptr = np.zeros(n_groups + 1, dtype=np.int64)
        group_host_ptr[1:] = np.cumsum(np.bincount(host_group, minlength=n_groups))
        return HostTables(host_ptr=host_ptr, host_group=host_group, host_model=host_model,
                          host_lat_ptr=ptrs[order], lat=np.concatenate([b[1] for b in blocks]) if n_groups
                          else np.zeros(0), stage_ptr=stage_ptr, group_host_ptr=group_host_ptr,
                          group_hosts=np.argsort(host_group, kind="stable").astype(np.int64),
                          batch_sizes=self._batch_sizes)

    def accepted_of_component(self, configs: Sequence[tuple], model_lists: Sequence[Sequence[int]],
                              models: tuple) -> np.ndarray:
        """Accepted requests of ``models`` (sorted tuple) when served by exactly these groups.

        Results are memoised by the groups' (pp, tp, models) in order: the simulation depends
        on nothing else, so identical components met in other beam entries, rounds or
        candidates are simulated once.
        """
        result = self.component_result(configs, model_lists, models)
        assert result is not None  # no min_accepted: the simulation runs to the end
        return result[0]

    def accepted_of_component_at_least(self, configs: Sequence[tuple], model_lists: Sequence[Sequence[int]],
                                       models: tuple, min_accepted: Optional[int]) -> Optional[np.ndarray]:
        """:meth:`accepted_of_component`, or None as soon as the simulation shows that fewer than
        ``min_accepted`` requests will be accepted (a simulation that gave up is not memoised)."""
        result = self.component_result(configs, model_lists, models, min_accepted)
        return None if result is None else result[0]

    def _simulate_component(self, tables: HostTables, req: Requests, models: tuple,
                            min_accepted: Optional[int] = None) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(accepted of ``models``, busy seconds per group): the attainment-only kernel when
        requests are served one at a time (nothing per request is written; None once fewer than
        ``min_accepted`` can be accepted), else the batching one (always run to the end)."""
        if self.config.batching:
            res = run_tables(tables, req, self.n_models, self.config)
            return np.bincount(req.model[res.finish >= 0], minlength=self.n_models)[list(models)], res.busy
        counts = np.zeros(self.n_models, dtype=np.int64)
        busy = np.zeros(tables.n_groups)
        policy = SHORTEST_QUEUE if self.config.dispatch == "shortest_queue" else EARLIEST
        max_rejected = -1 if min_accepted is None or min_accepted <= 0 else max(len(req) - min_accepted, 0)
        if accept_flow_shop((req.arrival, req.model, req.deadline), tuple(tables), busy,
                            np.zeros(int(tables.stage_ptr[-1])), counts, self.config.overhead_s, policy,
                            max_rejected) < 0:
            return None
        return counts[list(models)], busy

    def component_result(self, configs: Sequence[tuple], model_lists: Sequence[Sequence[int]],
                         models: tuple, min_accepted: Optional[int] = None) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(accepted of ``models``, busy seconds of every group) for one component (memoised);
        None when fewer than ``min_accepted`` requests will be accepted (see accepted_of_component)."""
        key = tuple((c[0], c[1], tuple(sorted(ms))) for c, ms in zip(configs, model_lists))
        hit = self._memo.get(key)
        if hit is not None:
            self.memo_hits += 1
            return hit
        self.evaluations += 1
        req = self._requests_of(models)
        tables = self.shell_tables(configs, model_lists)
        out = self._simulate_component(tables, req, models, min_accepted)
        if out is None:
            return None
        if len(self._memo) < MEMO_LIMIT:
            self._memo[key] = out
        return out
