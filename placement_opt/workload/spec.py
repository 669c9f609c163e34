"""The workload of an instance: how requests arrive for each model and their SLOs.

A workload is one of
* a synthetic process (``poisson``, ``gamma`` or ``mmpp``) whose total rate is split over
  the models (``equal`` or ``power_law``), optionally overridden per model;
* a trace replayed as is, or refitted window by window (Gamma per window, then rate and
  CV scaled), as the AlpaServe paper does with the Azure Functions traces.

SLOs are per model: ``slo.scale`` x the model's reference latency (its one-GPU latency),
or ``slo.seconds``; a model's own ``slo_s`` / ``slo_scale`` overrides the default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from placement_opt.errors import InputError
from placement_opt.limits import MAX_TOKENS
from placement_opt.validation import as_number, check_keys, get_int, get_number, get_str
from placement_opt.workload.processes import mmpp_mean_rate

PROCESSES = ("poisson", "gamma", "mmpp")
#: Refitting a trace in more windows than this is taken for a typo (each window is a Python step).
MAX_WINDOWS = 1e6


@dataclass(frozen=True)
class ArrivalProcess:
    """A per-model arrival process; ``rate`` is the long-run rate in requests/s."""

    kind: str = "poisson"
    rate: float = 1.0
    cv: float = 1.0
    mmpp_rates: Tuple[float, float] = (0.0, 0.0)
    mmpp_switch_rates: Tuple[float, float] = (1.0, 1.0)

    @classmethod
    def from_dict(cls, d: dict, field: str, need_rate: bool = True) -> "ArrivalProcess":
        check_keys(d, field, ["process"], ["rate", "cv", "rates", "switch_rates"])
        kind = get_str(d, "process", field, choices=PROCESSES)
        if kind == "mmpp":
            check_keys(d, field, ["process", "rates", "switch_rates"], [])
            rates = _pair(d, "rates", field, minimum=0)
            switch = _pair(d, "switch_rates", field, exclusive_minimum=0)
            return cls(kind="mmpp", rate=mmpp_mean_rate(rates, switch), mmpp_rates=rates, mmpp_switch_rates=switch)
        if kind == "poisson" and "cv" in d:
            raise InputError("a poisson process has cv 1; use process gamma", f"{field}.cv")
        check_keys(d, field, ["process"], ["rate", "cv"])  # rates/switch_rates belong to mmpp only
        rate = get_number(d, "rate", field, None if need_rate else 0.0, minimum=0)
        # below CV 1e-3 the process is deterministic for all purposes, and 1/cv^2 would overflow
        cv = get_number(d, "cv", field, 1.0, minimum=1e-3, maximum=100) if kind == "gamma" else 1.0
        return cls(kind=kind, rate=rate, cv=cv)

    def scaled(self, factor: float) -> "ArrivalProcess":
        """The same process at ``factor`` times the rate."""
        return ArrivalProcess(self.kind, self.rate * factor, self.cv,
                              (self.mmpp_rates[0] * factor, self.mmpp_rates[1] * factor), self.mmpp_switch_rates)

    def to_dict(self) -> dict:
        if self.kind == "mmpp":
            return {"process": "mmpp", "rates": list(self.mmpp_rates), "switch_rates": list(self.mmpp_switch_rates)}
        d = {"process": self.kind, "rate": self.rate}
        if self.kind == "gamma":
            d["cv"] = self.cv
        return d


def _pair(d: dict, key: str, field: str, **bounds: float) -> Tuple[float, float]:
    """The two numbers of list ``d[key]``, each within ``bounds`` (as for :func:`as_number`)."""
    v = d.get(key)
    where = f"{field}.{key}"
    if not isinstance(v, list) or len(v) != 2:
        raise InputError("expected a list of two numbers", where)
    return (as_number(v[0], where, **bounds), as_number(v[1], where, **bounds))


@dataclass(frozen=True)
class TraceSpec:
    """A trace file to replay; with ``refit_window_s`` it is refitted instead of replayed."""

    path: str
    refit_window_s: Optional[float] = None
    rate_scale: float = 1.0
    cv_scale: float = 1.0
    time_scale: float = 1.0

    @classmethod
    def from_dict(cls, d: Any, field: str, base_dir: str) -> "TraceSpec":
        if isinstance(d, str):
            d = {"path": d}
        check_keys(d, field, ["path"], ["refit_window_s", "rate_scale", "cv_scale", "time_scale"])
        path = get_str(d, "path", field)
        if not os.path.isabs(path):
            path = os.path.normpath(os.path.join(base_dir, path))
        if not os.path.exists(path):
            raise InputError(f"trace file not found: {path}", f"{field}.path")
        window = get_number(d, "refit_window_s", field, exclusive_minimum=0) if "refit_window_s" in d else None
        return cls(
            path=path,
            refit_window_s=window,
            rate_scale=get_number(d, "rate_scale", field, 1.0, exclusive_minimum=0),
            cv_scale=get_number(d, "cv_scale", field, 1.0, minimum=1e-3, maximum=1e3),
            time_scale=get_number(d, "time_scale", field, 1.0, exclusive_minimum=0),
        )


@dataclass(frozen=True)
class SLOSpec:
    """Either ``seconds`` (absolute) or ``scale`` (x the model's reference latency)."""

    scale: Optional[float] = 5.0
    seconds: Optional[float] = None

    @classmethod
    def from_dict(cls, d: dict, field: str) -> "SLOSpec":
        check_keys(d, field, [], ["scale", "seconds"])
        if ("scale" in d) == ("seconds" in d):
            raise InputError("give exactly one of scale and seconds", field)
        if "seconds" in d:
            return cls(scale=None, seconds=get_number(d, "seconds", field, exclusive_minimum=0))
        return cls(scale=get_number(d, "scale", field, exclusive_minimum=0))

    def resolve(self, reference_latency: float) -> float:
        """The SLO in seconds for a model whose reference latency is ``reference_latency``."""
        if self.seconds is not None:
            return self.seconds
        assert self.scale is not None  # one of scale and seconds is always set
        return self.scale * reference_latency

    def to_dict(self) -> dict:
        return {"seconds": self.seconds} if self.seconds is not None else {"scale": self.scale}


@dataclass(frozen=True)
class LengthSpec:
    """Request lengths in tokens for LLM workloads: fixed or exponential around a mean."""

    distribution: str = "fixed"  # fixed | exponential
    prompt_tokens: float = 161.0
    output_tokens: float = 338.0
    max_prompt_tokens: int = 2048
    max_output_tokens: int = 2048

    @classmethod
    def from_dict(cls, d: dict, field: str) -> "LengthSpec":
        check_keys(d, field, [], ["distribution", "prompt_tokens", "output_tokens", "max_prompt_tokens",
                                  "max_output_tokens"])
        return cls(
            distribution=get_str(d, "distribution", field, "fixed", choices=("fixed", "exponential")),
            prompt_tokens=get_number(d, "prompt_tokens", field, 161.0, minimum=1, maximum=MAX_TOKENS),
            output_tokens=get_number(d, "output_tokens", field, 338.0, minimum=1, maximum=MAX_TOKENS),
            max_prompt_tokens=get_int(d, "max_prompt_tokens", field, 2048, minimum=1, maximum=MAX_TOKENS),
            max_output_tokens=get_int(d, "max_output_tokens", field, 2048, minimum=1, maximum=MAX_TOKENS),
        )

    def to_dict(self) -> dict:
        return {"distribution": self.distribution, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens, "max_prompt_tokens": self.max_prompt_tokens,
                "max_output_tokens": self.max_output_tokens}


@dataclass(frozen=True)
class Workload:
    """Duration, per-model arrival processes (or a trace), default SLO and request lengths."""

    duration_s: float
    process: Optional[ArrivalProcess] = None
    rate_split: str = "equal"
    power_law_exponent: float = 0.5
    per_model: Dict[str, ArrivalProcess] = field(default_factory=dict)
    trace: Optional[TraceSpec] = None
    slo: SLOSpec = SLOSpec()
    lengths: Optional[LengthSpec] = None

    @classmethod
    def from_dict(cls, d: dict, field: str = "workload", base_dir: str = ".") -> "Workload":
        check_keys(d, field, ["duration_s"], ["arrival", "rate_split", "per_model", "trace", "slo", "lengths"])
        duration = get_number(d, "duration_s", field, exclusive_minimum=0, maximum=1e8)
        process = None
        if "arrival" in d:
            process = ArrivalProcess.from_dict(d["arrival"], f"{field}.arrival")
        split, exponent = "equal", 0.5
        if "rate_split" in d:
            rs = d["rate_split"]
            rs_field = f"{field}.rate_split"
            check_keys(rs, rs_field, ["kind"], ["exponent"])
            split = get_str(rs, "kind", rs_field, choices=("equal", "power_law"))
            exponent = get_number(rs, "exponent", rs_field, 0.5, minimum=0, maximum=20)
        per_model = {}
        if "per_model" in d:
            pm = d["per_model"]
            if not isinstance(pm, dict):
                raise InputError("expected an object {model name: arrival process}", f"{field}.per_model")
            for name, spec in pm.items():
                per_model[name] = ArrivalProcess.from_dict(spec, f"{field}.per_model.{name}")
        trace = TraceSpec.from_dict(d["trace"], f"{field}.trace", base_dir) if "trace" in d else None
        if trace is not None and trace.refit_window_s is not None and duration / trace.refit_window_s > MAX_WINDOWS:
            raise InputError(f"{duration / trace.refit_window_s:.3g} windows in duration_s, over the limit of "
                             f"{MAX_WINDOWS:.0e}", f"{field}.trace.refit_window_s")
        if trace is None and process is None and not per_model:
            raise InputError("give an arrival process, per_model processes or a trace", field)
        if trace is not None and (process is not None or per_model):
            raise InputError("a trace workload cannot also have arrival processes", f"{field}.trace")
        slo = SLOSpec.from_dict(d["slo"], f"{field}.slo") if "slo" in d else SLOSpec()
        lengths = LengthSpec.from_dict(d["lengths"], f"{field}.lengths") if "lengths" in d else None
        return cls(duration_s=duration, process=process, rate_split=split, power_law_exponent=exponent,
                   per_model=per_model, trace=trace, slo=slo, lengths=lengths)

    def to_dict(self) -> dict:
        d: dict = {"duration_s": self.duration_s}
        if self.process is not None:
            d["arrival"] = self.process.to_dict()
            d["rate_split"] = {"kind": self.rate_split, "exponent": self.power_law_exponent}
        if self.per_model:
            d["per_model"] = {k: v.to_dict() for k, v in self.per_model.items()}
        if self.trace is not None:
            t = {"path": self.trace.path, "rate_scale": self.trace.rate_scale, "cv_scale": self.trace.cv_scale,
                 "time_scale": self.trace.time_scale}
            if self.trace.refit_window_s is not None:
                t["refit_window_s"] = self.trace.refit_window_s
            d["trace"] = t
        d["slo"] = self.slo.to_dict()
        if self.lengths is not None:
            d["lengths"] = self.lengths.to_dict()
        return d
