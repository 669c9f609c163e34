"""Simulator settings shared by the DNN simulator and the solvers that call it."""

from __future__ import annotations

from dataclasses import dataclass

from .._validate import check_keys, get_int, get_number, get_str

DISPATCH_POLICIES = ("earliest", "shortest_queue")


@dataclass(frozen=True)
class SimulatorConfig:
    """How the flow-shop simulator times and admits requests (AlpaServe artifact defaults).

    * ``dispatch``: ``earliest`` sends a request to the hosting group whose last stage frees
      first (the artifact's fast path); ``shortest_queue`` to the one with the fewest
      unfinished accepted requests (its event-driven simulator).
    * ``overhead_s``: fixed time added to every request's finish.
    * ``stage_overhead_factor``: a stage latency is the profiled one x (1 + factor x stages).
    * ``batching``: per-model FIFO queues and batches up to ``max_batch`` (sizes from the profile).
    """

    dispatch: str = "earliest"
    overhead_s: float = 0.011
    stage_overhead_factor: float = 0.009
    batching: bool = False
    max_batch: int = 16

    @classmethod
    def from_dict(cls, d: dict, field: str = "simulator") -> "SimulatorConfig":
        check_keys(d, field, [], ["dispatch", "overhead_s", "stage_overhead_factor", "batching", "max_batch"])
        batching = d.get("batching", False)
        if not isinstance(batching, bool):
            from ..errors import InputError
            raise InputError("expected true or false", f"{field}.batching")
        return cls(
            dispatch=get_str(d, "dispatch", field, "earliest", choices=DISPATCH_POLICIES),
            overhead_s=get_number(d, "overhead_s", field, 0.011, minimum=0),
            stage_overhead_factor=get_number(d, "stage_overhead_factor", field, 0.009, minimum=0),
            batching=batching,
            max_batch=get_int(d, "max_batch", field, 16, minimum=1, maximum=4096),
        )

    def to_dict(self) -> dict:
        return {"dispatch": self.dispatch, "overhead_s": self.overhead_s,
                "stage_overhead_factor": self.stage_overhead_factor, "batching": self.batching,
                "max_batch": self.max_batch}
