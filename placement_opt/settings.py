"""The instance's simulator settings: ``simulator`` (the DNN flow-shop simulator) and ``llm``
(how the LLM simulator schedules and sizes its meshes), shared by the simulators, the
solvers that call them and the executor."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from placement_opt.errors import InputError
from placement_opt.validation import check_keys, get_int, get_number, get_str

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


#: Scheduling policies of a mesh (see :mod:`placement_opt.simulate.llm`). ``temporal`` runs
#: one job at a time on the whole mesh in FCFS order (MuxServe's temporal-multiplexing baseline).
POLICIES = ("adbs", "round-robin", "fcfs", "temporal")


@dataclass(frozen=True)
class LLMConfig:
    """Settings of the LLM simulator and of the estimator the solvers use.

    * ``policy``: ``adbs`` (prefill jobs first in round robin, decode jobs fill the remaining
      SMs, KV quotas proportional to rate x per-token KV size, re-balanced every
      ``rebalance_period_s``), ``round-robin``, ``fcfs`` or ``temporal``.
    * ``kv_block_tokens``: tokens per KV-cache block (vLLM's paged blocks).
    * ``prefill_token_budget``: most prompt tokens one prefill job batches.
    * ``max_batch``: most requests an LLM decodes together.
    * ``rebalance_period_s``: ADBS quota re-balancing period; ``rebalance_fraction`` is the part
      of a donor's unused quota moved to the most utilised LLM each period.
    * ``kv_reserve_fraction``: part of a mesh's memory after weights kept free (activations).
    * ``drain_s``: simulated time after the workload's end to let queued requests finish;
      requests still unfinished then count as served late (SLO missed).
    * ``prompt_tokens`` / ``output_tokens``: request lengths assumed by the estimator and the
      reference latency when the workload has no ``lengths`` (ShareGPT means, MuxServe paper).
    """

    policy: str = "adbs"
    kv_block_tokens: int = 16
    prefill_token_budget: int = 4096
    max_batch: int = 256
    rebalance_period_s: float = 5.0
    rebalance_fraction: float = 0.5
    kv_reserve_fraction: float = 0.05
    drain_s: float = 60.0
    prompt_tokens: float = 161.0
    output_tokens: float = 338.0

    @classmethod
    def from_dict(cls, d: dict, field: str = "llm") -> "LLMConfig":
        names = [f for f in cls.__dataclass_fields__]
        check_keys(d, field, [], names)
        return cls(
            policy=get_str(d, "policy", field, "adbs", choices=POLICIES),
            kv_block_tokens=get_int(d, "kv_block_tokens", field, 16, minimum=1, maximum=4096),
            prefill_token_budget=get_int(d, "prefill_token_budget", field, 4096, minimum=1),
            max_batch=get_int(d, "max_batch", field, 256, minimum=1, maximum=65536),
            rebalance_period_s=get_number(d, "rebalance_period_s", field, 5.0, exclusive_minimum=0),
            rebalance_fraction=get_number(d, "rebalance_fraction", field, 0.5, minimum=0, maximum=1),
            kv_reserve_fraction=get_number(d, "kv_reserve_fraction", field, 0.05, minimum=0, maximum=0.9),
            drain_s=get_number(d, "drain_s", field, 60.0, minimum=0),
            prompt_tokens=get_number(d, "prompt_tokens", field, 161.0, minimum=1),
            output_tokens=get_number(d, "output_tokens", field, 338.0, minimum=1),
        )

    def to_dict(self) -> dict:
        return asdict(self)
