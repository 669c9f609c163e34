"""Turn a :class:`Workload` into the request arrays the simulators consume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from placement_opt.errors import InputError
from placement_opt.workload.processes import gamma_arrivals, merge_sorted_runs, mmpp_arrivals, power_law_split
from placement_opt.workload.spec import ArrivalProcess, LengthSpec, TraceSpec, Workload
from placement_opt.limits import check_request_memory
from placement_opt.workload.trace import read_trace, refit_arrivals


#: More requests than this from a rescaled trace (about 10 GB of arrays) is taken for a typo.
MAX_TRACE_REQUESTS = 5e8


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests sorted by arrival: times (float64), model ids (int32), absolute deadlines (float64).

    ``prompt_tokens``/``output_tokens`` are set for LLM workloads.
    """

    arrival: np.ndarray
    model: np.ndarray
    deadline: np.ndarray
    duration_s: float
    prompt_tokens: Optional[np.ndarray] = None
    output_tokens: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.arrival)

    def select(self, mask: np.ndarray) -> "Requests":
        """The sub-workload of the requests where ``mask`` holds (still sorted)."""
        pick = (lambda a: None if a is None else a[mask])
        return Requests(self.arrival[mask], self.model[mask], self.deadline[mask], self.duration_s,
                        pick(self.prompt_tokens), pick(self.output_tokens))


def model_processes(workload: Workload, model_names: Sequence[str]) -> list[Optional[ArrivalProcess]]:
    """Arrival process of every model (None: the model gets no synthetic requests)."""
    n = len(model_names)
    out: list[Optional[ArrivalProcess]] = [None] * n
    if workload.process is not None:
        p = workload.process
        if workload.rate_split == "power_law":
            rates = power_law_split(p.rate, n, workload.power_law_exponent)
        else:
            rates = np.full(n, p.rate / n)
        for i in range(n):
            out[i] = p.scaled(rates[i] / p.rate) if p.rate > 0 else p
    index = {name: i for i, name in enumerate(model_names)}
    for name, proc in workload.per_model.items():
        if name not in index:
            raise InputError(f"no model named {name!r}", f"workload.per_model.{name}")
        out[index[name]] = proc
    return out


def _arrivals(rng: np.random.Generator, proc: ArrivalProcess, duration: float) -> np.ndarray:
    if proc.kind == "mmpp":
        return mmpp_arrivals(rng, proc.mmpp_rates, proc.mmpp_switch_rates, duration)
    return gamma_arrivals(rng, proc.rate, proc.cv, duration)


def generate_requests(workload: Workload, model_names: Sequence[str], slo_seconds: npt.ArrayLike,
                      seed: int = 0, contexts: Optional[npt.ArrayLike] = None) -> Requests:
    """Draw every model's arrivals from its own seeded stream and merge them in time order.

    Model ``i`` draws from ``default_rng([seed, i])``, so adding a model does not change
    the arrivals of the others. Ties in time keep model order (stable sort).
    ``contexts`` (LLMs: every model's context in tokens) bounds the prompt plus output of each
    request whose lengths are drawn from ``workload.lengths`` (:func:`cap_at_context`; fixed
    lengths over it are refused when the instance is checked). A trace's lengths are kept as
    recorded: they are what was served.
    """
    n = len(model_names)
    slo = np.asarray(slo_seconds, dtype=np.float64)
    prompt: Optional[np.ndarray] = None
    output: Optional[np.ndarray] = None
    if workload.trace is not None:
        times, ids, prompt, output = _trace_requests(workload.trace, workload.duration_s, model_names, seed)
    else:
        times, ids = _synthetic_arrivals(workload, model_names, seed)
    if workload.lengths is not None and prompt is None:
        prompt, output = _draw_lengths(workload.lengths, len(times), seed)
        if contexts is not None:
            prompt, output = cap_at_context(prompt, output, np.asarray(contexts, dtype=np.int64)[ids])
    deadline = times + slo[ids] if n else times.copy()
    return Requests(times.astype(np.float64, copy=False), ids.astype(np.int32, copy=False), deadline,
                    workload.duration_s, prompt, output)


def _synthetic_arrivals(workload: Workload, model_names: Sequence[str], seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Every model's arrivals from its own stream, merged in time order (ties: lower model
    first), with the model ids: the order of a stable sort of the concatenated arrivals,
    built by a compiled k-way merge of the per-model runs (each already sorted)."""
    parts, ids = [], []
    for i, proc in enumerate(model_processes(workload, model_names)):
        if proc is None:
            continue
        parts.append(_arrivals(np.random.default_rng([seed, i]), proc, workload.duration_s))
        ids.append(i)
    if not parts:
        return np.empty(0), np.empty(0, dtype=np.int32)
    starts = np.zeros(len(parts) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(t) for t in parts])
    return merge_sorted_runs(np.concatenate(parts), starts, np.array(ids, dtype=np.int32))


#: Arrival times, model ids, and prompt and output token counts (None where the trace has none).
TraceRequests = Tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]


def cap_at_context(prompt: np.ndarray, output: np.ndarray, context: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Drawn lengths within each request's ``context`` (its model's, in tokens), as a serving
    engine truncates: the prompt keeps room for one output token, the output stops where the
    context ends."""
    prompt = np.minimum(prompt, np.maximum(context - 1, 1)).astype(np.int32)
    output = np.minimum(output, np.maximum(context - prompt, 1)).astype(np.int32)
    return prompt, output


def _trace_requests(spec: TraceSpec, duration_s: float, model_names: Sequence[str], seed: int) -> TraceRequests:
    """The requests of trace ``spec`` within ``duration_s``: replayed, or refitted and rescaled."""
    trace = read_trace(spec.path)
    t = trace.arrival_s / spec.time_scale
    n = len(model_names)
    if trace.model:
        index = {name: i for i, name in enumerate(model_names)}
        try:
            ids = np.array([index[m] for m in trace.model], dtype=np.int32)
        except KeyError as e:
            raise InputError(f"trace names model {e.args[0]!r} that the instance lacks", "model", spec.path) from None
    else:
        ids = (np.arange(len(t)) % max(n, 1)).astype(np.int32)
    keep = t < duration_s
    t, ids = t[keep], ids[keep]
    if len(t) * spec.rate_scale > MAX_TRACE_REQUESTS:
        raise InputError(f"{len(t)} requests x rate_scale {spec.rate_scale:g} is over the limit of "
                         f"{MAX_TRACE_REQUESTS:.0e} requests", "workload.trace.rate_scale")
    check_request_memory(len(t) * spec.rate_scale, trace.prompt_tokens is not None, "workload.trace.rate_scale")
    prompt = trace.prompt_tokens[keep] if trace.prompt_tokens is not None else None
    output = trace.output_tokens[keep] if trace.output_tokens is not None else None
    if spec.refit_window_s is None and spec.rate_scale == 1.0:
        return t, ids, prompt, output
    window = spec.refit_window_s or duration_s
    parts, id_parts = [], []
    for i in range(n):
        regenerated = refit_arrivals(np.random.default_rng([seed, i]), t[ids == i], duration_s, window,
                                     spec.rate_scale, spec.cv_scale)
        parts.append(regenerated)
        id_parts.append(np.full(len(regenerated), i, dtype=np.int32))
    times = np.concatenate(parts)
    new_ids = np.concatenate(id_parts)
    order = np.argsort(times, kind="stable")
    times, new_ids = times[order], new_ids[order]
    if prompt is not None and len(prompt):
        # Refitted requests take token counts resampled from the trace's own requests.
        rng = np.random.default_rng([seed, n, 7])
        pick = rng.integers(0, len(prompt), size=len(times))
        assert output is not None, "a trace with prompt_tokens needs output_tokens to resample"
        prompt, output = prompt[pick], output[pick]
    return times, new_ids, prompt, output


def _draw_lengths(spec: LengthSpec, count: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Prompt and output token counts of ``count`` requests drawn from ``spec`` (int32)."""
    if spec.distribution == "fixed":
        prompt = np.full(count, int(round(spec.prompt_tokens)), dtype=np.int32)
        output = np.full(count, int(round(spec.output_tokens)), dtype=np.int32)
    else:
        rng = np.random.default_rng([seed, 1 << 20])
        # clipped as floats, before the int32 cast: a draw over 2^31 must not wrap around
        prompt = np.clip(np.ceil(rng.exponential(spec.prompt_tokens, count)), 1, spec.max_prompt_tokens).astype(np.int32)
        output = np.clip(np.ceil(rng.exponential(spec.output_tokens, count)), 1, spec.max_output_tokens).astype(np.int32)
    np.clip(prompt, 1, spec.max_prompt_tokens, out=prompt)
    np.clip(output, 1, spec.max_output_tokens, out=output)
    return prompt, output
