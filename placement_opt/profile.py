"""Latency and memory profiles of a model under each parallel configuration.

A :class:`Profile` maps a parallel configuration ``(pp, tp)`` (pipeline stages x
tensor-parallel degree, so ``pp * tp`` GPUs) to a :class:`ConfigProfile`: the latency
of every stage for each batch size and the weight bytes every GPU of each stage holds.
Profiles come from measurements (JSON), from the analytic cost model
(:mod:`placement_opt.parallel`), or are *derived* from one single-GPU latency and a
total weight size with the scaling shape of a measured profile (see
:func:`derive_profile`), which is how the paper's Table 1 models are described.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from placement_opt.validation import as_number, check_keys, get_int, get_list, get_number
from placement_opt.cluster import GB
from placement_opt.errors import InputError

#: Latency of tensor-parallel degree t relative to t=1 and of batch size b relative to
#: b=1, both measured on the BERT-1.3B V100 profile shipped in ``placement_opt/data``
#: (``op`` 1/2/4/8 at batch 1, and op=1 pp=1 by batch size).
MEASURED_TP_FACTOR = {1: 1.0, 2: 0.6784, 4: 0.4097, 8: 0.3018}
MEASURED_BATCH_FACTOR = {1: 1.0, 2: 1.1586, 4: 2.2268, 8: 4.3058, 16: 8.4437}


@dataclass(frozen=True, eq=False)
class ConfigProfile:
    """One parallel configuration of one model.

    ``stage_latency[i, s]`` is the latency (s) of stage ``s`` for a batch of
    ``batch_sizes[i]``; ``stage_weight_bytes[s]`` is what each GPU of stage ``s`` holds.
    ``stage_gap_s[s]`` (optional, measured by calibration runs of the executor) is the time a
    request occupies stage ``s`` beyond its latency when requests queue back to back: the
    serving loop's host work between two of them (launch, activation send and receive).

    The *warm-up* terms (optional, measured by calibration runs; issue 13) model that a GPU serves
    a stage faster after idle time than back to back, which is how the profile is measured:
    ``stage_idle_factor[s]`` is stage ``s``'s latency after a long idle time over its back-to-back
    latency. A stage's *heat* (0: idle long enough, 1: busy long enough) grows by busy time /
    ``heat_time_s`` and falls by idle time / ``cool_time_s``; a request's stage latency is the
    back-to-back one x ``(factor + (1 - factor) x heat)`` at its start.
    """

    pp: int
    tp: int
    batch_sizes: Tuple[int, ...]
    stage_latency: np.ndarray
    stage_weight_bytes: Tuple[float, ...]
    stage_layers: Optional[Tuple[Tuple[int, int], ...]] = None
    stage_gap_s: Tuple[float, ...] = ()
    stage_idle_factor: Tuple[float, ...] = ()
    heat_time_s: float = 0.0
    cool_time_s: float = 0.0
    tail_margin: float = 0.0

    @property
    def warms_up(self) -> bool:
        """Whether the warm-up terms are set (then the simulator's stage clock follows heat)."""
        return bool(self.stage_idle_factor)

    @property
    def n_gpus(self) -> int:
        return self.pp * self.tp

    @property
    def max_stage_weight_bytes(self) -> float:
        return max(self.stage_weight_bytes)

    def latency(self, batch: int = 1) -> float:
        """End-to-end latency (sum of stages) of one batch."""
        return float(self.stage_latency[self.batch_sizes.index(batch)].sum())

    def to_dict(self) -> dict:
        d = {
            "pp": self.pp,
            "tp": self.tp,
            "stage_latency_s": {str(b): [float(x) for x in self.stage_latency[i]] for i, b in enumerate(self.batch_sizes)},
            "stage_weight_gb": [w / GB for w in self.stage_weight_bytes],
        }
        if self.stage_layers is not None:
            d["stage_layers"] = [list(r) for r in self.stage_layers]
        if self.stage_gap_s:
            d["stage_gap_s"] = [float(g) for g in self.stage_gap_s]
        if self.warms_up:
            d["stage_idle_factor"] = [float(f) for f in self.stage_idle_factor]
            d["heat_time_s"] = float(self.heat_time_s)
            d["cool_time_s"] = float(self.cool_time_s)
        if self.tail_margin:
            d["tail_margin"] = float(self.tail_margin)
        return d

    @classmethod
    def from_dict(cls, d: dict, field: str) -> "ConfigProfile":
        check_keys(d, field, ["pp", "tp", "stage_latency_s", "stage_weight_gb"], ["stage_layers", "stage_gap_s", "tail_margin",
                                                                               *_WARM_KEYS])
        pp = get_int(d, "pp", field, minimum=1, maximum=1024)
        tp = get_int(d, "tp", field, minimum=1, maximum=1024)
        lat = d["stage_latency_s"]
        if not isinstance(lat, dict) or not lat:
            raise InputError("expected a non-empty object {batch size: [stage latencies]}", f"{field}.stage_latency_s")
        batches = []
        rows = []
        for key, row in lat.items():
            where = f"{field}.stage_latency_s.{key}"
            if not (key.isascii() and key.isdigit()) or int(key) < 1:
                raise InputError("batch size keys must be positive integers", where)
            if int(key) in batches:
                raise InputError(f"duplicate batch size {int(key)}", where)
            if not isinstance(row, list) or len(row) != pp:
                raise InputError(f"expected a list of {pp} stage latencies", where)
            rows.append([as_number(x, where, exclusive_minimum=0) for x in row])
            batches.append(int(key))
        order = np.argsort(batches)
        weights = get_list(d, "stage_weight_gb", field)
        if len(weights) != pp:
            raise InputError(f"expected {pp} entries, one per stage", f"{field}.stage_weight_gb")
        stage_layers = None
        if "stage_layers" in d:
            stage_layers = _parse_stage_layers(d["stage_layers"], pp, f"{field}.stage_layers")
        gaps = get_list(d, "stage_gap_s", field) if "stage_gap_s" in d else []
        if gaps and len(gaps) != pp:
            raise InputError(f"expected {pp} entries, one per stage", f"{field}.stage_gap_s")
        return cls(
            pp=pp, tp=tp,
            batch_sizes=tuple(int(batches[i]) for i in order),
            stage_latency=np.array([rows[i] for i in order], dtype=np.float64),
            stage_weight_bytes=tuple(as_number(w, f"{field}.stage_weight_gb", minimum=0) * GB for w in weights),
            stage_layers=stage_layers,
            stage_gap_s=tuple(as_number(g, f"{field}.stage_gap_s", minimum=0, maximum=1.0) for g in gaps),
            tail_margin=get_number(d, "tail_margin", field, 0.0, minimum=0, maximum=0.5),
            **_parse_warm_up(d, pp, field),
        )


_WARM_KEYS = ("stage_idle_factor", "heat_time_s", "cool_time_s")


def _parse_warm_up(d: dict, pp: int, field: str) -> Dict[str, Any]:
    """The warm-up terms of a config (all three or none), as ConfigProfile keyword arguments."""
    present = [k for k in _WARM_KEYS if k in d]
    if not present:
        return {}
    if len(present) != len(_WARM_KEYS):
        missing = next(k for k in _WARM_KEYS if k not in d)
        raise InputError(f"the warm-up terms go together: {', '.join(_WARM_KEYS)}", f"{field}.{missing}")
    factors = get_list(d, "stage_idle_factor", field)
    if len(factors) != pp:
        raise InputError(f"expected {pp} entries, one per stage", f"{field}.stage_idle_factor")
    return {"stage_idle_factor": tuple(as_number(f, f"{field}.stage_idle_factor", exclusive_minimum=0, maximum=2.0)
                                       for f in factors),
            "heat_time_s": get_number(d, "heat_time_s", field, exclusive_minimum=0, maximum=60.0),
            "cool_time_s": get_number(d, "cool_time_s", field, exclusive_minimum=0, maximum=60.0)}


def _parse_stage_layers(value: Any, pp: int, where: str) -> Tuple[Tuple[int, int], ...]:
    if not isinstance(value, list) or len(value) != pp:
        raise InputError(f"expected {pp} [start, end) layer ranges", where)
    out = []
    prev_end = 0
    for r in value:
        if (not isinstance(r, list) or len(r) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in r)
                or r[0] != prev_end or r[1] <= r[0]):
            raise InputError("layer ranges must be contiguous [start, end) pairs starting at 0", where)
        prev_end = r[1]
        out.append((r[0], r[1]))
    return tuple(out)


@dataclass(frozen=True, eq=False)
class Profile:
    """Every measured or modelled parallel configuration of one model."""

    name: str
    weight_bytes: float
    configs: Dict[Tuple[int, int], ConfigProfile] = field(default_factory=dict)
    layers: Optional[int] = None
    source: str = ""

    def config(self, pp: int, tp: int) -> Optional[ConfigProfile]:
        return self.configs.get((pp, tp))

    def reference_latency(self, memory_budget: float | None = None) -> float:
        """Latency of one request on the fewest GPUs that hold the model (one GPU when it fits).

        This is the base of an SLO given as a scale: the paper's "single-GPU latency", or
        for models that need several GPUs, the latency at the minimum inter-op degree
        (pipeline configs preferred). Without a budget every config counts.
        """
        configs = [c for c in self.configs.values()
                   if memory_budget is None or c.max_stage_weight_bytes <= memory_budget]
        cfg = min(configs or self.configs.values(), key=lambda c: (c.n_gpus, c.tp, c.pp))
        return cfg.latency(cfg.batch_sizes[0])

    def to_dict(self) -> dict:
        d = {"weight_gb": self.weight_bytes / GB,
             "configs": [c.to_dict() for _, c in sorted(self.configs.items())]}
        if self.layers is not None:
            d["layers"] = self.layers
        if self.source:
            d["source"] = self.source
        return d

    @classmethod
    def from_dict(cls, name: str, d: dict, field: str) -> "Profile":
        if isinstance(d, dict) and "derive" in d:
            check_keys(d, field, ["derive"], ["source"])
            return derive_profile_from_dict(name, d["derive"], f"{field}.derive", source=d.get("source", ""))
        check_keys(d, field, ["weight_gb", "configs"], ["layers", "source"])
        configs = {}
        for i, c in enumerate(get_list(d, "configs", field)):
            where = f"{field}.configs[{i}]" if field else f"configs[{i}]"  # a profile file alone: field ""
            cfg = ConfigProfile.from_dict(c, where)
            if (cfg.pp, cfg.tp) in configs:
                raise InputError(f"duplicate config pp={cfg.pp} tp={cfg.tp}", where)
            configs[(cfg.pp, cfg.tp)] = cfg
        return cls(
            name=name,
            weight_bytes=get_number(d, "weight_gb", field, exclusive_minimum=0) * GB,
            configs=configs,
            layers=get_int(d, "layers", field, minimum=1) if "layers" in d else None,
            source=str(d.get("source", "")),
        )


def parallel_configs(n_gpus: int, max_tp: int) -> list[tuple[int, int]]:
    """Every (pp, tp) with pp * tp == n_gpus and tp a power of two <= max_tp."""
    out = []
    tp = 1
    while tp <= min(n_gpus, max_tp):
        if n_gpus % tp == 0:
            out.append((n_gpus // tp, tp))
        tp *= 2
    return out


def derive_profile(name: str, latency_s: float, weight_bytes: float, *, max_gpus: int, max_tp: int = 8,
                   layers: int = 32, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16), source: str = "") -> Profile:
    """Profile every power-of-two GPU count up to ``max_gpus`` from one-GPU numbers.

    Stage latency of (pp, tp) at batch b = latency_s / pp x TP factor(tp) x batch factor(b),
    with the factors measured on the shipped BERT-1.3B V100 profile; weights split evenly
    over the pp x tp GPUs. ``latency_s`` is the one-GPU latency even when the model does
    not fit one GPU (then only configurations whose stages fit are useful).
    """
    configs = {}
    n = 1
    while n <= max_gpus:
        for pp, tp in parallel_configs(n, max_tp):
            if pp > layers:
                continue
            base = latency_s / pp * _tp_factor(tp)
            lat = np.array([[base * _batch_factor(b)] * pp for b in batch_sizes], dtype=np.float64)
            bounds = np.linspace(0, layers, pp + 1).round().astype(int)
            configs[(pp, tp)] = ConfigProfile(
                pp=pp, tp=tp, batch_sizes=tuple(batch_sizes), stage_latency=lat,
                stage_weight_bytes=tuple([weight_bytes / (pp * tp)] * pp),
                stage_layers=tuple((int(bounds[i]), int(bounds[i + 1])) for i in range(pp)),
            )
        n *= 2
    return Profile(name=name, weight_bytes=weight_bytes, configs=configs, layers=layers, source=source)


def _tp_factor(tp: int) -> float:
    if tp in MEASURED_TP_FACTOR:
        return MEASURED_TP_FACTOR[tp]
    # Beyond the measured degrees, keep the 4->8 efficiency trend.
    return MEASURED_TP_FACTOR[8] * (8 / tp) ** 0.44


def _batch_factor(b: int) -> float:
    if b in MEASURED_BATCH_FACTOR:
        return MEASURED_BATCH_FACTOR[b]
    return MEASURED_BATCH_FACTOR[16] * b / 16


def derive_profile_from_dict(name: str, d: dict, field: str, source: str = "") -> Profile:
    check_keys(d, field, ["latency_s", "weight_gb"], ["max_gpus", "max_tp", "layers", "batch_sizes"])
    batch_sizes = d.get("batch_sizes", [1, 2, 4, 8, 16])
    if (not isinstance(batch_sizes, list) or not batch_sizes
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in batch_sizes)):
        raise InputError("expected a non-empty list of positive integers", f"{field}.batch_sizes")
    return derive_profile(
        name,
        get_number(d, "latency_s", field, exclusive_minimum=0),
        get_number(d, "weight_gb", field, exclusive_minimum=0) * GB,
        max_gpus=get_int(d, "max_gpus", field, 64, minimum=1, maximum=4096),
        max_tp=get_int(d, "max_tp", field, 8, minimum=1, maximum=1024),
        layers=get_int(d, "layers", field, 32, minimum=1, maximum=100000),
        batch_sizes=tuple(sorted(set(batch_sizes))),
        source=source or "derived from a single-GPU latency and weight size (placement_opt.profile.derive_profile)",
    )
