"""The result of a solver: device groups, their parallel configuration and served models.

A :class:`Placement` is serialisable (``to_json``/``from_json``) with its metrics and its
provenance (instance sha256, package version, solver and options, seed, wall time), so
``placeopt simulate`` can re-score what ``placeopt solve`` wrote. A time-varying placement
(e.g. Clockwork++) lists ``windows``: each has a start time and its own groups.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, Optional, Tuple

from placement_opt.errors import InputError
from placement_opt.io import parse_json, read_json
from placement_opt.profile import _parse_stage_layers
from placement_opt.settings import POLICIES
from placement_opt.validation import as_int, as_number, check_keys, get_int, get_list, get_number, get_str

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Group:
    """A device group: ``devices`` run ``pp`` stages of ``tp`` GPUs each, serving ``models``.

    ``stage_layers`` optionally records the layer range of each stage; ``sm_share`` is used
    by LLM colocation (MuxServe) and gives every model's SM fraction on this mesh.
    """

    devices: Tuple[int, ...]
    pp: int = 1
    tp: int = 1
    models: Tuple[str, ...] = ()
    stage_layers: Optional[Tuple[Tuple[int, int], ...]] = None
    sm_share: Optional[Tuple[float, ...]] = None

    def __post_init__(self) -> None:
        if len(self.devices) != self.pp * self.tp:
            raise InputError(f"{len(self.devices)} devices but pp x tp = {self.pp * self.tp}", "groups")

    @property
    def n_gpus(self) -> int:
        return len(self.devices)

    def with_models(self, models: Iterable[str]) -> "Group":
        """The same group serving ``models`` instead."""
        return replace(self, models=tuple(models))

    def to_dict(self) -> dict:
        d: Dict[str, Any] = {"devices": list(self.devices), "pp": self.pp, "tp": self.tp, "models": list(self.models)}
        if self.stage_layers is not None:
            d["stage_layers"] = [list(r) for r in self.stage_layers]
        if self.sm_share is not None:
            d["sm_share"] = list(self.sm_share)
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "Group":
        check_keys(d, where, ["devices", "pp", "tp", "models"], ["stage_layers", "sm_share"])
        devices = tuple(as_int(x, f"{where}.devices", minimum=0) for x in get_list(d, "devices", where))
        pp = get_int(d, "pp", where, minimum=1)
        tp = get_int(d, "tp", where, minimum=1)
        if len(devices) != pp * tp:
            raise InputError(f"{len(devices)} devices but pp x tp = {pp * tp}", f"{where}.devices")
        models = tuple(get_list(d, "models", where, nonempty=False))
        if not all(isinstance(m, str) for m in models):
            raise InputError("expected a list of model names", f"{where}.models")
        stage_layers = None
        if "stage_layers" in d:
            stage_layers = _parse_stage_layers(d["stage_layers"], pp, f"{where}.stage_layers")
        sm = None
        if "sm_share" in d:
            sm_list = get_list(d, "sm_share", where)
            if len(sm_list) != len(models):
                raise InputError("needs one share per model", f"{where}.sm_share")
            sm = tuple(as_number(x, f"{where}.sm_share", exclusive_minimum=0, maximum=1) for x in sm_list)
        return cls(devices=devices, pp=pp, tp=tp, models=models, stage_layers=stage_layers, sm_share=sm)


@dataclass(frozen=True)
class Window:
    """Groups in force from ``start_s`` until the next window's start."""

    start_s: float
    groups: Tuple[Group, ...]


@dataclass(frozen=True)
class Placement:
    """Groups (or time windows of groups), plus how LLM meshes schedule their jobs.

    ``scheduling`` overrides the instance's ``llm.policy`` for this placement; the
    ``temporal`` baseline sets it to run one job at a time per mesh. ``None`` means the
    instance's policy. DNN placements leave it unset.
    """

    groups: Tuple[Group, ...]
    windows: Tuple[Window, ...] = ()
    metrics: Dict[str, Any] = field(default_factory=dict)
    provenance: Dict[str, Any] = field(default_factory=dict)
    scheduling: Optional[str] = None

    @property
    def all_group_sets(self) -> Tuple[Tuple[Group, ...], ...]:
        return tuple(w.groups for w in self.windows) if self.windows else (self.groups,)

    def with_metrics(self, metrics: dict) -> "Placement":
        return replace(self, metrics=dict(metrics))

    def with_provenance(self, **kw: Any) -> "Placement":
        """The same placement with ``kw`` added to (or replacing entries of) its provenance."""
        p = dict(self.provenance)
        p.update(kw)
        return replace(self, provenance=p)

    def to_dict(self) -> dict:
        d: Dict[str, Any] = {"format_version": FORMAT_VERSION, "groups": [g.to_dict() for g in self.groups]}
        if self.windows:
            d["windows"] = [{"start_s": w.start_s, "groups": [g.to_dict() for g in w.groups]} for w in self.windows]
        if self.scheduling is not None:
            d["scheduling"] = self.scheduling
        d["metrics"] = self.metrics
        d["provenance"] = self.provenance
        return d

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, d: Any) -> "Placement":
        check_keys(d, "", ["groups"], ["format_version", "windows", "metrics", "provenance", "scheduling"])
        version = get_int(d, "format_version", "", FORMAT_VERSION, minimum=1)
        if version > FORMAT_VERSION:
            raise InputError(f"format version {version} is newer than this placeopt reads ({FORMAT_VERSION})",
                             "format_version")
        groups = tuple(Group.from_dict(g, f"groups[{i}]") for i, g in enumerate(get_list(d, "groups", "",
                                                                                          nonempty=False)))
        windows = []
        raw_windows = [] if d.get("windows") is None else get_list(d, "windows", "", nonempty=False)
        for i, w in enumerate(raw_windows):
            where = f"windows[{i}]"
            check_keys(w, where, ["start_s", "groups"])
            windows.append(Window(
                start_s=get_number(w, "start_s", where, minimum=0),
                groups=tuple(Group.from_dict(g, f"{where}.groups[{j}]")
                             for j, g in enumerate(get_list(w, "groups", where, nonempty=False)))))
        if windows and any(b.start_s <= a.start_s for a, b in zip(windows, windows[1:])):
            raise InputError("window start times must increase", "windows")
        metrics = d.get("metrics", {}) or {}
        provenance = d.get("provenance", {}) or {}
        if not isinstance(metrics, dict) or not isinstance(provenance, dict):
            raise InputError("expected an object", "metrics" if not isinstance(metrics, dict) else "provenance")
        scheduling = get_str(d, "scheduling", "", choices=POLICIES) if "scheduling" in d else None
        return cls(groups=groups, windows=tuple(windows), metrics=metrics, provenance=provenance,
                   scheduling=scheduling)

    @classmethod
    def from_json(cls, text: str) -> "Placement":
        return cls.from_dict(parse_json(text))


def load_placement(path: str) -> Placement:
    data = read_json(path)
    try:
        return Placement.from_dict(data)
    except InputError as e:
        raise e.with_file(path) from None
