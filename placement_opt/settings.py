"""The instance's simulator settings: ``simulator`` (the DNN flow-shop simulator) and ``llm``
(how the LLM simulator schedules and sizes its meshes), shared by the simulators, the
solvers that call them and the executor."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Tuple

from placement_opt.errors import InputError
from placement_opt.limits import MAX_TOKENS
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
    * ``runtime_reserve_gb``: memory every LLM holds on every GPU of its mesh besides weights
      and KV cache (CUDA contexts of its prefill and decode processes; see :data:`RULE_SETS`).
    * ``drain_s``: simulated time after the workload's end to let queued requests finish;
      requests still unfinished then count as served late (SLO missed).
    * ``prompt_tokens`` / ``output_tokens``: request lengths assumed by the estimator and the
      reference latency when the workload has no ``lengths`` (ShareGPT means, MuxServe paper).
    * ``contention_hbm_gbps``: colocated jobs contend for memory bandwidth: a job's time
      stretches by 1 + (the HBM demand, GB/s per GPU, of the other jobs running on its mesh) /
      this (over ``tp**contention_tp_power`` on a mesh of TP degree ``tp``), re-timed whenever
      the set of running jobs changes (0: off, jobs take their table time). A job's demand is
      the bytes it moves (weights, KV cache read or written) over its table time. Measured H100
      values: docs/fidelity-llm.md.
    * ``contention_hbm_cap_gbps``: the HBM bandwidth (GB/s per GPU) colocated jobs share when
      together they demand more: a running job's time stretches at least by (all the running
      jobs' demand) / max(this, its own demand) (0: off; a job alone is never stretched).
      Measured on H100s: docs/fidelity-llm.md.
    * ``contention_curve_gbps`` / ``contention_curve_power``: the HBM's access time rises with
      the load it serves as ``1 + (load / contention_curve_gbps) ** contention_curve_power``; a
      running decode step stretches at least by that at the load the HBM serves all running
      jobs over that at its own demand (each job keeps its accesses in flight, so it is served its demand
      times its latency alone over the loaded one). A small job beside a bandwidth-heavy one
      thus slows more than the heavy one, as measured on SM partitions of one H200 (0: off;
      docs/fidelity-llm.md).
    * ``contention_tp_power``: on a mesh of TP degree ``tp`` the contention stretch runs at
      ``contention_hbm_gbps / tp**this``: colocated tensor-parallel jobs slow each other more per
      GB/s of demand than jobs on one GPU (every all-reduce of a step waits for the rank the
      co-runners slowed most; measured on two 7B/8B LLMs on halves of two H100s: 0.9,
      docs/fidelity-llm.md; 0: the same rate at every degree).
    * ``decode_host_s`` / ``prefill_host_s``: host seconds the mesh's one scheduling thread
      spends per decode step (launch and collect) and per prefill launch of an LLM on an SM
      partition (share below 1); ``decode_host_full_s`` / ``prefill_host_full_s`` the same for
      an LLM holding the whole GPU (plain streams: faster launches). Jobs are launched one after
      another and ended jobs are noticed only when the thread is free (0: off). A decode step's
      GPU work starts after its launch; a prefill's overlaps it. Measured H100 values of the
      executor's engine: see ``docs/fidelity-llm.md``.
    * ``prefill_eager_host_s`` / ``prefill_eager_host_full_s``: host seconds a prefill run
      eagerly (its padded size, the engine's CUDA-graph buckets, over ``prefill_graph_tokens``
      tokens) adds to its launch on an SM partition / on the whole GPU: the thread is busy that
      much longer and the prefill ends that much later (0: off).
    * ``prefill_eager_hold_s``: where set, the host seconds an eager prefill's launch holds the
      scheduling thread more on an SM partition, apart from ``prefill_eager_host_s``, which then
      is only how much later the prefill ends (0: the thread is held ``prefill_eager_host_s``).
      ``prefill_eager_hold_full_s`` the same for an LLM holding the whole GPU of a TP-1 mesh
      (plain streams), apart from ``prefill_eager_host_full_s``, which then is only how much its
      GPU work outlasts its table time. With either hold the prefill's end is noticed at the
      later of its table time plus its eager host time and the launch's end (on the H200's whole
      GPU a small LLM waits for the launch, a large one's kernels queue behind the GPU).
    * ``prefill_eager_host_tp_s``: seconds an eager prefill adds per tensor-parallel rank beyond
      the first, beside ``prefill_eager_host_s`` / ``prefill_eager_host_full_s`` (its GPU work
      waits for every rank's kernel-by-kernel launch: about 3x longer at TP 4 than at TP 1 on
      the H100s; 0: off).
    * ``decode_host_tp_s``: host seconds a decode step's launch and collect take more per
      tensor-parallel rank beyond the first (added to ``decode_host_s`` and ``decode_host_full_s``).
    * ``prefill_host_tp_s``: seconds a prefill lasts beyond its cost-table time per
      tensor-parallel rank beyond the first (the ranks collect its first tokens after its GPU
      work, serially; 0: off).
    * ``decode_host_mesh_s`` / ``prefill_host_mesh_s``: seconds a decode step's host time / a
      prefill takes more on any mesh of more than one GPU, beside the per-rank terms above (the
      ranks' coordination costs once per job whatever their number; measured at TP 2 and 4; 0:
      off, the per-rank terms alone).
    * ``prefill_partition_stretch``: a prefill of an LLM on an SM partition (share below 1) lasts
      this times its cost-table time (the engine's graph prefills beside the other LLMs' decode
      steps take about 3x their profiled time; 0: off, the table time).
    * ``decode_kv_gbps``: a decode step lasts the KV-cache bytes it reads (per GPU) / this (GB/s)
      longer than its cost-table time: the engine's steps over requests of mixed context lengths
      take longer than the profiled steps at the mean context, by an amount that follows the KV
      bytes read, not the model (0: off).
    * ``decode_kv_tp_power``: on a mesh of TP degree ``tp`` that KV read runs at
      ``decode_kv_gbps / tp**this``: the engine's steps read their shard of the cache slower per
      byte the more ranks share them (measured at TP 1, 2 and 4, the page-table fill apart:
      0.10 / 0.35 / 0.90 ms per GB per GPU beyond the tables; 0: the same rate at every degree).
    * ``decode_full_stretch``: a decode step of an LLM on a whole GPU (no SM partition) of a
      one-GPU mesh lasts this times its cost-table time, in place of the KV read above: the
      engine's steps there run a share over the profiled ones, for every LLM size, not by the
      KV bytes they read (one factor, fitted on job traces of H100 runs: 1.066 at the mean
      context, where it runs 1.00-1.04 at 1-4 requests and 1.08-1.14 at 17-32; 1.025 and flat
      over the batch at the effective context of ``decode_attention_sms`` below;
      docs/fidelity-llm.md; 0: off, the table time plus the KV read as on every mesh).
    * ``decode_full_request_s``: such a step (on a whole GPU of a one-GPU mesh) lasts this many
      seconds more per request it holds, beside the stretch above (after the KV read where the
      stretch is 0): on an H200 the steps' excess over their tables grows with the batch
      (1.04-1.05 x at 1-7 requests, 1.09 x at 32 for a
      LLaMA-7B), which one factor fitted at one load cannot hold at another; fitted with the
      stretch on job traces at two loads (docs/fidelity-llm.md; 0: off).
    * ``decode_attention_sms``: on a whole GPU of a one-GPU mesh, a decode step of ``n``
      requests is read off its cost table at an effective context between its requests' mean
      and their longest: ``mean + min(1, w / n) x (longest - mean)``, ``w`` this SM count over
      the LLM's KV heads. The engine's paged attention runs one program per (request, KV
      head); while they fit on the GPU's SMs at once the step waits for its longest request's
      programs, and the profiled steps, which hold every request at one context, do not show
      it (the GPU's SM count: 132 on an H100 SXM, which job traces of H100 runs also fit best,
      docs/fidelity-llm.md; 0: off, at the mean).
    * ``decode_partition_stretch``: a decode step of an LLM on an SM partition (share below 1) of
      a one-GPU mesh lasts this times its cost-table time, in place of the KV read, read at an
      effective context as on a whole GPU with ``decode_attention_sms`` x the partition's share
      of the SMs (:meth:`~placement_opt.costs.costtable.TPTable.sm_fraction`) over its KV heads:
      the engine's served steps on a partition run over the profiled ones (at one context) by a
      share, and wait for their longest request while their attention programs fit on the
      partition (fitted on job traces of H200 runs of unequal shares, docs/fidelity-llm.md; 0:
      off, the table time at the mean context plus the KV read).
    * ``decode_partition_request_s``: such a step (on an SM partition of a one-GPU mesh, with
      the stretch above; ignored while the stretch is 0, so the KV-read form stays as it was)
      lasts this many seconds more per request it holds (0: off).
    * ``decode_combine_spill_s``: a decode step lasts this many seconds more per layer of its LLM
      when the engine's paged attention splits its CUDA-graph bucket's context over so many
      programs that the kernel combining their partial outputs spills out of registers (a long
      context at a small batch: from 4097 tokens at one request of an LLM of 8 KV heads per GPU;
      :func:`~placement_opt.simulate.meshsim.decode_combine_spills`). The profiled steps
      never split that far, so the tables do not hold it (measured on job traces of TP-1 H200
      runs: about 40 us a layer, 37-42 by LLM, whole GPU or SM partition alike,
      docs/fidelity-llm.md; at TP > 1 the same rule on a rank's KV heads, not measured; 0: off).
    * ``prefill_start_full_s``: a graph prefill of an LLM on a whole GPU of a one-GPU mesh lasts
      this much longer than its table time: the engine's GPU work starts that far into its
      launch (the simulator's starts with the launch; measured on job traces of H100 runs: 0.38
      ms, docs/fidelity-llm.md; 0: off).
    * ``decode_page_entry_s``: the host seconds the engine spends per entry of a decode step's
      page table (built on the host before the launch, one entry per page of every KV block
      the step's requests hold; a block is one page for an LLM alone on its mesh, several for
      an LLM beside LLMs of other block sizes): the launch holds the scheduling thread that much
      longer (0: off).
    * ``prefill_beside_stretch`` / ``prefill_beside_delay_s``: a graph prefill of an LLM on an SM
      partition, while any other job of its mesh runs (another LLM's, or its own LLM's decode
      step), runs at ``1 / (1 + stretch + delay / T)`` of its speed (``T`` its table time), so
      beside others throughout it lasts ``(1 + stretch) x T + delay``; alone it keeps its time.
      Replaces the HBM contention term for such prefills: the engine's prefills beside decode
      steps slow by a part of their time and a fixed delay whatever the others demand (fitted on
      an H100: 0.37 and 5.2 ms; 0 and 0: off). ``prefill_beside_gbps`` (GB/s) adds a term in
      proportion to what the others demand of HBM (their bytes over their table times, as the
      contention model counts them): ``(1 + stretch + D / this) x T + delay`` beside others that
      demand D (fitted on the job trace of the runs on SM partitions; 0: off).
      ``prefill_beside_requests`` adds ``R / this`` beside decode steps that hold R requests
      in all (bigger decode batches slow a prefill more at the same HBM demand; 0: off), and
      ``prefill_beside_knee_tokens`` divides both terms by ``1 + tokens / this`` (the
      prefill's padded prompt tokens: a long prefill is compute-bound and slows less) and,
      where set, applies the stretch to eager prefills too (0: off; both fitted on the job
      trace). ``prefill_beside_knee_s`` divides them by ``1 + T / this`` too (T the prefill's
      time alone, seconds: on the five-LLM H200 a large LLM's prefill slows less than a small
      one's of the same prompt, since it does more work and lasts longer; where set,
      eager prefills stretch too; 0: off). ``prefill_beside_eager_knee_s`` is that knee for an
      eager prefill (over ``prefill_graph_tokens``) instead: on the five-LLM H200 the eager
      prefills, whose kernels the host launches one by one, slowed beside others 14-28% more
      than the graph prefills' knee gives (0: the same knee). ``prefill_beside_share_power`` multiplies both
      terms by the prefill's SM share to this power (a prefill on more of the GPU's SMs slows
      more beside the same others: the rates are then those at the whole GPU; 0: off, every
      share alike).
    * ``prefill_at_longest``: a prefill's time is its cost-table entry at its batch size and its
      longest prompt (an engine that pads a batch's prompts to the longest, as placeopt's
      executor does, computes that much), not at their mean (one that packs them: vLLM, the
      default). Measured: docs/fidelity-llm.md.
    * ``prefill_at_bucket``: a prefill that replays a CUDA graph (its padded size within
      ``prefill_graph_tokens``) is timed at its graph's bucket: its batch rounded up to a power
      of two and its longest prompt padded to the next of 16, 24, 32, 48, ... tokens
      (``meshsim.padded_prefill_length``), the shape placeopt's engine computes; an eager one at
      its longest prompt (as ``prefill_at_longest``). The profiler measures the table at the
      buckets' own shapes, so read at the unpadded prompt a graph prefill alone came out 2-10%
      short on an H200, at its bucket within 3% (docs/fidelity-llm.md).
    * ``own_prefill_decode_share``: the engine runs an LLM's prefill and decode on its one SM
      partition, so while its prefill runs its decode step keeps only this part of its speed
      (applies on a partition, share below 1; 0: off, the step keeps its table time).
      ``own_prefill_decode_knee_tokens`` divides that part by ``1 + tokens / this`` (the
      prefill's padded prompt tokens: beside a longer prefill of its own LLM the step waits
      longer behind its kernels; on the five-LLM H200 the step slowed 1.3-1.4 x beside
      prefills under 64 tokens and 4-5 x beside ones over 1024; 0: off, one part at every
      length).
    * ``own_decode_prefill_share``: the other way round, while its decode step runs a prefill on
      the same SM partition keeps only this part of its speed, and that decode step leaves the
      demand and requests of the prefill's stretch beside others (``prefill_beside_*``: they
      then count the other LLMs' jobs only). A prefill that runs eagerly keeps its speed unless
      ``prefill_beside_knee_tokens`` or ``_knee_s`` is set, as for the stretch. Measured on one
      H200 with one LLM alone on a partition: docs/fidelity-llm.md. 0: off, the own decode step
      counts as any other. ``own_decode_prefill_knee_tokens``: the part it loses shrinks as
      ``1 / (1 + tokens / this)``, tokens the prefill's padded prompt: a long prefill takes most
      of the partition from its decode step (which slows the more: ``own_prefill_decode_knee_tokens``)
      and keeps most of its own speed (0: off, one part at every length).
    """

    policy: str = option("adbs", choices=POLICIES, help="scheduling policy of a mesh")
    kv_block_tokens: int = option(16, minimum=1, maximum=4096, help="tokens per KV-cache block")
    prefill_token_budget: int = option(4096, minimum=1, help="most prompt tokens one prefill job batches")
    max_batch: int = option(256, minimum=1, maximum=65536, help="most requests an LLM decodes together")
    rebalance_period_s: float = option(5.0, minimum=1e-3, help="ADBS quota re-balancing period")
    rebalance_fraction: float = option(0.5, minimum=0, maximum=1,
                                       help="part of a donor's unused quota moved each period")
    kv_reserve_fraction: float = option(0.05, minimum=0, maximum=0.9,
                                        help="part of a mesh's memory after weights kept free")
    runtime_reserve_gb: float = option(1.6, minimum=0,
                                       help="GB every LLM reserves on every GPU of its mesh (CUDA contexts)")
    drain_s: float = option(60.0, minimum=0, help="simulated seconds after the workload's end to finish requests")
    prompt_tokens: float = option(161.0, minimum=1, maximum=MAX_TOKENS, help="prompt length without workload lengths")
    output_tokens: float = option(338.0, minimum=1, maximum=MAX_TOKENS, help="output length without workload lengths")
    contention_hbm_gbps: float = option(0.0, minimum=0,
                                        help="HBM GB/s per GPU that colocated jobs' demands stretch each other by (0: off)")
    contention_hbm_cap_gbps: float = option(0.0, minimum=0,
                                            help="HBM GB/s per GPU that colocated jobs share when they demand more (0: off)")
    contention_curve_gbps: float = option(0.0, minimum=0,
                                          help="HBM GB/s per GPU that scales the loaded-latency curve of the "
                                               "contention stretch (0: off)")
    contention_curve_power: float = option(2.0, minimum=0.5, maximum=8,
                                           help="power of the loaded-latency curve of the contention stretch")
    contention_tp_power: float = option(0.0, minimum=0, maximum=4,
                                        help="on a mesh of tp GPUs the contention stretch runs at "
                                             "contention_hbm_gbps / tp**this (0: the same rate at every TP degree)")
    decode_host_s: float = option(0.0, minimum=0,
                                  help="host seconds of a mesh's scheduling thread per decode step (SM partition)")
    prefill_host_s: float = option(0.0, minimum=0,
                                   help="host seconds of a mesh's scheduling thread per prefill launch (SM partition)")
    decode_host_full_s: float = option(0.0, minimum=0,
                                       help="host seconds per decode step of an LLM holding the whole GPU")
    prefill_host_full_s: float = option(0.0, minimum=0,
                                        help="host seconds per prefill launch of an LLM holding the whole GPU")
    prefill_eager_host_s: float = option(0.0, minimum=0,
                                         help="host seconds an eager prefill (over prefill_graph_tokens) adds "
                                              "on an SM partition (0: off)")
    prefill_eager_hold_s: float = option(0.0, minimum=0,
                                         help="host seconds an eager prefill's launch holds the scheduling thread "
                                              "more on an SM partition, apart from prefill_eager_host_s (0: the same)")
    prefill_eager_host_full_s: float = option(0.0, minimum=0,
                                              help="host seconds an eager prefill adds for an LLM holding the whole "
                                                   "GPU (0: off)")
    prefill_eager_hold_full_s: float = option(0.0, minimum=0,
                                              help="host seconds an eager prefill's launch holds the scheduling "
                                                   "thread for an LLM holding the whole GPU, apart from "
                                                   "prefill_eager_host_full_s (0: the same)")
    prefill_eager_host_tp_s: float = option(0.0, minimum=0,
                                            help="seconds an eager prefill adds for each tensor-parallel rank "
                                                 "beyond one (0: off)")
    decode_host_tp_s: float = option(0.0, minimum=0,
                                     help="host seconds per decode step more for each tensor-parallel rank beyond one")
    prefill_host_tp_s: float = option(0.0, minimum=0,
                                      help="seconds a prefill lasts beyond its table time for each "
                                           "tensor-parallel rank beyond one (0: off)")
    decode_host_mesh_s: float = option(0.0, minimum=0,
                                       help="host seconds per decode step more on a mesh of more than one GPU, "
                                            "beside decode_host_tp_s (0: off)")
    prefill_host_mesh_s: float = option(0.0, minimum=0,
                                        help="seconds a prefill lasts more on a mesh of more than one GPU, "
                                             "beside prefill_host_tp_s (0: off)")
    decode_kv_gbps: float = option(0.0, minimum=0,
                                   help="GB/s at which a decode step's KV-cache bytes add to its table time (0: off)")
    decode_kv_tp_power: float = option(0.0, minimum=0, maximum=4,
                                       help="on a mesh of tp GPUs the KV read runs at decode_kv_gbps / tp**this "
                                            "(0: the same rate at every TP degree)")
    decode_full_stretch: float = option(0.0, minimum=0, maximum=4,
                                        help="a decode step on a whole GPU of a one-GPU mesh lasts this x its table "
                                             "time, in place of the KV read (0: off)")
    decode_full_request_s: float = option(0.0, minimum=0,
                                          help="seconds a decode step on a whole GPU of a one-GPU mesh lasts more per "
                                               "request it holds, beside decode_full_stretch (0: off)")
    decode_attention_sms: int = option(0, minimum=0,
                                       help="SMs a whole GPU's decode attention programs spread over: a decode step "
                                            "on a whole GPU of a one-GPU mesh is timed at mean + min(1, SMs / (KV "
                                            "heads x requests)) x (longest - mean) context (0: off, at the mean)")
    decode_partition_stretch: float = option(0.0, minimum=0, maximum=4,
                                             help="a decode step on an SM partition of a one-GPU mesh lasts this x its "
                                                  "table time at its effective context (decode_attention_sms x the "
                                                  "partition's SM fraction), in place of the KV read (0: off)")
    decode_partition_request_s: float = option(0.0, minimum=0,
                                               help="seconds a decode step on an SM partition of a one-GPU mesh lasts "
                                                    "more per request it holds, with decode_partition_stretch (ignored "
                                                    "while that is 0; 0: off)")
    decode_combine_spill_s: float = option(0.0, minimum=0,
                                           help="seconds per layer a decode step lasts more when the engine's "
                                                "attention split-combine spills (a long context at a small batch; "
                                                "0: off)")
    prefill_start_full_s: float = option(0.0, minimum=0,
                                         help="seconds a graph prefill on a whole GPU of a one-GPU mesh lasts "
                                              "beyond its table time: its GPU work starts that far into its launch "
                                              "(0: off)")
    decode_page_entry_s: float = option(0.0, minimum=0,
                                        help="host seconds per page-table entry a decode step's launch takes (0: off)")
    prefill_graph_tokens: int = option(1024, minimum=1,
                                       help="padded prefill tokens above which the engine runs a prefill eagerly")
    prefill_partition_stretch: float = option(0.0, minimum=0, maximum=100,
                                              help="factor on a prefill's table time on an SM partition (share "
                                                   "below 1), beside the other LLMs' jobs (0: off)")
    prefill_beside_stretch: float = option(0.0, minimum=0, maximum=100,
                                           help="a graph prefill on an SM partition runs 1 + this times its time "
                                                "while any other job of its mesh runs (0: off)")
    prefill_beside_delay_s: float = option(0.0, minimum=0,
                                           help="seconds such a prefill lasts more beside other jobs, "
                                                "beyond prefill_beside_stretch (0: off)")
    prefill_beside_gbps: float = option(0.0, minimum=0,
                                        help="GB/s: such a prefill's stretch beside others also adds (the other "
                                             "running jobs' HBM demand) / this (0: off)")
    prefill_beside_requests: float = option(0.0, minimum=0,
                                            help="requests: such a prefill's stretch beside others also adds "
                                                 "(the requests in the running decode steps) / this (0: off)")
    prefill_beside_knee_tokens: float = option(0.0, minimum=0,
                                               help="tokens: the demand and request terms of such a prefill's "
                                                    "stretch are divided by 1 + its prompt tokens / this, and "
                                                    "eager prefills stretch too (0: off)")
    prefill_beside_knee_s: float = option(0.0, minimum=0,
                                          help="seconds: the demand and request terms of such a prefill's "
                                               "stretch are divided by 1 + its time alone / this, and eager "
                                               "prefills stretch too (0: off)")
    prefill_beside_eager_knee_s: float = option(0.0, minimum=0,
                                                help="seconds: prefill_beside_knee_s for an eager prefill (over "
                                                     "prefill_graph_tokens) instead (0: the same knee)")
    prefill_beside_share_power: float = option(0.0, minimum=0, maximum=4,
                                               help="the demand and request terms of such a prefill's stretch are "
                                                    "multiplied by its SM share to this power (0: off)")
    prefill_at_longest: bool = option(False, help="a prefill's table time at its longest prompt (an engine that "
                                                  "pads to it), not at the mean")
    prefill_at_bucket: bool = option(False, help="a graph prefill's table time at its CUDA-graph bucket (batch "
                                                 "rounded up to a power of two, length padded as the engine pads "
                                                 "it), an eager one's at its longest prompt")
    own_prefill_decode_share: float = option(0.0, minimum=0, maximum=0.999,
                                             help="while an LLM's prefill runs on its SM partition, the part of "
                                                  "its speed its decode step keeps (0: off)")
    own_prefill_decode_knee_tokens: float = option(0.0, minimum=0,
                                                   help="that part is divided by 1 + the prefill's padded prompt "
                                                        "tokens / this (0: off)")
    own_decode_prefill_share: float = option(0.0, minimum=0, maximum=0.999,
                                             help="while an LLM's decode step runs on its SM partition, the part "
                                                  "of its speed a prefill there keeps, in place of that step's part "
                                                  "of the prefill's stretch beside others (0: off)")
    own_decode_prefill_knee_tokens: float = option(0.0, minimum=0,
                                                   help="the part of its speed that prefill loses is divided by 1 + "
                                                        "its padded prompt tokens / this (0: off)")

    @classmethod
    def from_dict(cls, d: dict, field: str = "llm") -> "LLMConfig":
        """The settings of JSON object ``d`` (the instance's ``llm`` section), checked."""
        return parse_fields(cls, d, field)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RuleSet:
    """What a serving runtime allows: the memory plan and the SM-share grid of LLM meshes.

    Memory per GPU of a mesh: ``weights / tp + n_llms x reserve + KV share``, where the basis
    is the GPU's usable memory less ``llm.kv_reserve_fraction`` (``memory_basis="usable"``)
    or the GPU's whole memory (``"total"``). ``weight_cap_fraction`` caps ``weights / tp +
    n_llms x reserve`` at that fraction of the GPU's memory. SM shares are multiples of
    ``sm_step``; the shares of a mesh sum to at most ``sm_limit`` (MPS may oversubscribe).
    ``prefill_shares`` gives the prefill share by model size ((most parameters in
    billions, share), ascending; None: the prefill share is the LLM's share).
    ``kv_block_tokens`` / ``prefill_token_budget`` override the ``llm`` section's when set.
    """

    name: str
    memory_basis: str
    reserve_gb: Optional[float]  # None: the instance's llm.runtime_reserve_gb
    weight_cap_fraction: Optional[float]
    sm_step: float
    sm_limit: float
    prefill_shares: Optional[Tuple[Tuple[float, float], ...]]
    kv_block_tokens: Optional[int]
    prefill_token_budget: Optional[int]

    @property
    def max_llms_per_mesh(self) -> int:
        """Most LLMs a mesh can hold when each needs at least one SM step."""
        return int(self.sm_limit / self.sm_step + 1e-9)

    def prefill_share(self, params_billion: float, share: float) -> float:
        """The prefill SM share of an LLM of ``params_billion`` whose (decode) share is ``share``."""
        if self.prefill_shares is None:
            return share
        for most, pre in self.prefill_shares:
            if params_billion <= most:
                return pre
        return self.prefill_shares[-1][1]


#: The rule sets. ``placeopt``: usable memory less ``kv_reserve_fraction``, 1.6 GB per LLM
#: per GPU (the instance's ``llm.runtime_reserve_gb``; 2 x 0.8 GB, the CUDA context of a
#: prefill and a decode process as MuxServe's placement code counts it), shares in 1 %
#: steps summing to at most 100 %. ``muxserve``: the constants of the MuxServe reference
#: (hao-ai-lab/MuxServe, muxserve/muxsched/placement.py and muxserve/arg_utils.py): 80 GB
#: GPUs, 7.6 GB per LLM per GPU (0.8 GB x 2 processes + 6 GB activations), weights plus
#: reserves at most 0.9 x (1 - 0.4) = 54 % of the GPU (43.2 GB of 80 GB), decode shares in
#: 10 % steps summing to at most 120 % (overload threshold 20), prefill 80 / 90 / 100 % for
#: 7B / 13B / larger, KV blocks of 32 tokens, 2048 prompt tokens per prefill.
RULE_SETS = {
    "placeopt": RuleSet(name="placeopt", memory_basis="usable", reserve_gb=None, weight_cap_fraction=None,
                        sm_step=0.01, sm_limit=1.0, prefill_shares=None, kv_block_tokens=None,
                        prefill_token_budget=None),
    "muxserve": RuleSet(name="muxserve", memory_basis="total", reserve_gb=7.6, weight_cap_fraction=0.54,
                        sm_step=0.1, sm_limit=1.2, prefill_shares=((10.0, 0.8), (20.0, 0.9), (1e9, 1.0)),
                        kv_block_tokens=32, prefill_token_budget=2048),
}
RULES = tuple(RULE_SETS)


def rule_set(name: str, field: str = "rules") -> RuleSet:
    """The rule set called ``name``; an unknown name is an input error at ``field``."""
    if name not in RULE_SETS:
        raise InputError(f"must be one of {', '.join(RULES)}, got {name!r}", field)
    return RULE_SETS[name]
