"""A mesh leader's job trace: when each job was launched on the host and ran on the device.

``placeopt execute --job-trace`` (LLM instances) writes ``jobs.csv`` per trial: for every job a
mesh's leader finished, its LLM, kind, requests, longest context and contexts summed, the host's monotonic time
before and after :meth:`~.llm_engine.MeshEngine.launch` (what the scheduling thread spent on
it), the device's start and end of its work, and the time the leader had it done. The device
times come from CUDA timing events recorded on the job's stream before and after its work (the
start: when the stream reached the job; a graph replay's kernels follow at once, an eager
prefill's come one by one from the host, so its device time includes its launch),
placed on the host clock by two anchor events the host waits for, one at the trial's start and
one at its end (:func:`host_seconds`: the GPU's timer and the host's monotonic clock drift
apart by about 12 microseconds a second on an H100 host, 0.6 ms over a 50 s trial); on CPUs a
job runs inside ``launch``, so its device times are the launch's. Where the simulator charges host time that the executor
does not spend, or the device starts a job later than it was launched (a hardware queue shared
with another stream, a partition busy), the trace shows it; the fidelity study reads it
(``docs/fidelity-llm.md``).

The trace is off by default: its events cost a little device and host time per job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

JOB_COLUMNS = ("llm", "kind", "requests", "longest_context", "context_tokens", "launch_s", "launched_s", "device_start_s",
               "device_end_s", "seen_s")


@dataclass
class TracedJob:
    """One finished job's facts; its device times still as events until :meth:`JobTrace.rows`."""

    llm: int
    kind: str
    requests: int
    longest_context: int
    context_tokens: int  # its requests' contexts summed (the KV a decode step reads, a prefill writes)
    launch: float  # host monotonic seconds before launch
    launched: float  # ... after it returned
    start: Any  # timing event before its work (None on CPUs)
    end: Any  # timing event after it (None on CPUs)
    seen: float  # host monotonic seconds when the leader had it finished (its end event waited for)


def host_seconds(elapsed: float, anchors: Tuple[float, float, float]) -> float:
    """A device time ``elapsed`` seconds after the first anchor event on the host's clock:
    ``anchors`` = (host seconds when the first anchor had run, device seconds from it to the
    second, host seconds between them); the device clock is scaled linearly onto the host's
    between them (a zero device span: not scaled)."""
    at, device_span, host_span = anchors
    return at + elapsed * (host_span / device_span if device_span > 0 else 1.0)


class JobTrace:
    """The jobs one rank finished since :meth:`begin` (only a trace that began records)."""

    def __init__(self, device: Any):
        self.device = device
        self.active = False
        self.jobs: List[TracedJob] = []
        self._origin: Optional[Tuple[Any, float]] = None  # first anchor: (event, host monotonic seconds it had run)

    def begin(self) -> None:
        """Start a trial's trace: forget earlier jobs and place the device clock on the host's."""
        self.jobs, self.active = [], True
        if self.device.type == "cuda":
            self._origin = self._anchor()

    def add(self, job: TracedJob) -> None:
        if self.active:
            self.jobs.append(job)

    def _anchor(self) -> Tuple[Any, float]:
        """An event recorded now on the current stream and the host time once it has run."""
        import time

        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        event.synchronize()
        return event, time.monotonic()

    def rows(self, t0: float, names: Sequence[str]) -> List[tuple]:
        """Every traced job as a :data:`JOB_COLUMNS` row, times in seconds from ``t0`` (the
        trial's monotonic start); ends the trace. Called with no job in flight."""
        out = []
        if self._origin is not None:
            origin, at = self._origin
            last, at_last = self._anchor()
            anchors = (at, origin.elapsed_time(last) / 1e3, at_last - at)
        for j in self.jobs:
            if j.start is not None and self._origin is not None:
                start = host_seconds(origin.elapsed_time(j.start) / 1e3, anchors)
                end = host_seconds(origin.elapsed_time(j.end) / 1e3, anchors)
            else:
                start, end = j.launch, j.launched
            out.append((names[j.llm], j.kind, j.requests, j.longest_context, j.context_tokens,
                        *(round(x - t0, 6) for x in (j.launch, j.launched, start, end, j.seen))))
        self.jobs, self.active, self._origin = [], False, None
        return out
