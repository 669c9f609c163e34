"""The instance's simulator settings: ``simulator`` (the DNN flow-shop simulator) and ``llm``
(how the LLM simulator schedules and sizes its meshes), shared by the simulators, the
solvers that call them and the executor."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from placement_opt.validation import option, parse_fields

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

    dispatch: str = option("earliest", choices=DISPATCH_POLICIES,
                           help="group a request goes to: earliest (last stage frees first) or shortest_queue")
    overhead_s: float = option(0.011, minimum=0, help="fixed seconds added to every request's finish")
    stage_overhead_factor: float = option(0.009, minimum=0,
                                          help="a stage's latency is the profiled one x (1 + factor x stages)")
    batching: bool = option(False, help="per-model FIFO queues and batches up to max_batch")
    max_batch: int = option(16, minimum=1, maximum=4096, help="largest batch when batching")

    @classmethod
    def from_dict(cls, d: dict, field: str = "simulator") -> "SimulatorConfig":
        """The settings of JSON object ``d`` (the instance's ``simulator`` section), checked."""
        return parse_fields(cls, d, field)

    def to_dict(self) -> dict:
        return asdict(self)


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

    policy: str = option("adbs", choices=POLICIES, help="scheduling policy of a mesh")
    kv_block_tokens: int = option(16, minimum=1, maximum=4096, help="tokens per KV-cache block")
    prefill_token_budget: int = option(4096, minimum=1, help="most prompt tokens one prefill job batches")
    max_batch: int = option(256, minimum=1, maximum=65536, help="most requests an LLM decodes together")
    rebalance_period_s: float = option(5.0, exclusive_minimum=0, help="ADBS quota re-balancing period")
    rebalance_fraction: float = option(0.5, minimum=0, maximum=1,
                                       help="part of a donor's unused quota moved each period")
    kv_reserve_fraction: float = option(0.05, minimum=0, maximum=0.9,
                                        help="part of a mesh's memory after weights kept free")
    drain_s: float = option(60.0, minimum=0, help="simulated seconds after the workload's end to finish requests")
    prompt_tokens: float = option(161.0, minimum=1, help="prompt length without workload lengths")
    output_tokens: float = option(338.0, minimum=1, help="output length without workload lengths")

    @classmethod
    def from_dict(cls, d: dict, field: str = "llm") -> "LLMConfig":
        """The settings of JSON object ``d`` (the instance's ``llm`` section), checked."""
        return parse_fields(cls, d, field)

    def to_dict(self) -> dict:
        return asdict(self)
