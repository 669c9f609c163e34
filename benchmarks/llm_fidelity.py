"""LLM fidelity: measured against simulated, from the committed results of the GPU runs.

Reads every results folder ``benchmarks/fidelity/llm/results*/`` (one per GPU run of an
engine version, written by ``benchmarks/fidelity/llm/run_gpu.sh``; ``results`` is the first H100
run, ``results-v2`` the run after the engine fixes, ...): every ``summary.json`` under it (one
per run and policy: ``placeopt execute`` of an LLM instance, the simulator's prediction beside
the measurement), ``roofline.json`` and ``engine.json`` (the engine micro-benchmark). Prints,
per folder, the engine benchmark's summary, one row per run, the GPUs' clocks during each run
where the folder has ``run_gpu.sh``'s ``gpu-log.csv`` (a run during which a GPU slowed itself is
printed but counted nowhere: :func:`slowed`; so is one the executor found on a GPU other than its
cost tables': :func:`other_gpu`), the placement and policy rankings per workload;
and as its last line, over every run of the newest engine generation
that has any and of those it derives from (all their folders of ``GENERATIONS`` that exist: fit
and held-out alike; without a generation, e.g. ``--results DIR``, the newest folder that has any
result),

    max_throughput_err=<x> max_llm_err=<y> max_ttft_err=<t> max_attain_pp=<z> ranking_ok=<0|1> decode_roofline=<r>

Errors are fractions (|measured - simulated| / simulated), the worst over the runs;
attainment in points; ``ranking_ok`` is 1 when, in every folder counted and for every
workload, the placements (and the policies of the ablation) ordered by measured total
throughput are ordered the same by the simulator (and at least one ranking was compared),
two runs whose throughputs differ by at most ``NOISE_TOLERANCE`` (0.5%, the spread of
repeated warm runs) ranking as tied on either side;
``decode_roofline`` is the worst fraction of the HBM roofline (specified
bandwidth) of the 7B decode step over batch 1-32 at a 512-token context, from the newest
folder that has ``roofline.json``. ``nan`` marks a figure with no result behind it.

Every run of an engine generation in ``GENERATIONS`` (every folder but ``results``, whose
engine ran the five LLMs on one overlapping SM partition) is also **re-predicted with the
current simulator** (``simulate_llm`` on ``instances/fidelity-llm/measured/<workload>.json``
with the cost tables *of the run's engine generation*, the run's placement and policy):
*before*, with the host and contention models off (``llm.contention_hbm_gbps``,
``contention_hbm_cap_gbps``, ``decode_host_s``, ``prefill_host_s`` = 0), and *after*, with that generation's calibrated
values. Attainment is scored on both sides
against the SLOs of that instance (the measured requests of ``requests.csv`` re-scored), so a
new cost table changes both sides alike. The last line takes each run's *after* errors (its
committed ones where its instance or placement is not in the repository: not re-predicted),
over the runs that measured their whole trial (:func:`whole_trial`: a run a time cap interrupted
after its last request finished counts; one cut short with requests unfinished is printed, not
counted).
A folder may use its own tables (``Generation.folder_tables``: ``results-v3-tp2`` uses
``tables-tp2``, profiled in the same call); a model without a table there keeps the measured
instance's. Run folders are named ``<workload>-<placement>`` (the workload may contain ``-``);
:func:`run_inputs` finds the instance and placement (``tp2-poisson-spatial``: the 2-GPU set's
``instances/fidelity-llm/tp2/measured/poisson.json`` and ``tp2/poisson-spatial.placement.json``).

Engine generations (``GENERATIONS``): ``v2``; ``v3`` (``results-v3``, ``results-v3b``: each
CUDA-graph bucket captured the first time a trial met it, so the workers' first trial ran
cold); ``v3w`` (``results-v3c``, ``results-v3-tp2``: the same kernels with every bucket captured
at start-up, so every trial is warm). The start-up capture changed what a first trial measures,
so v3w is a generation of its own, calibrated only on its own runs (and engine rounds: its
bandwidth cap on ``contention_rounds`` measured with v3p, whose decode kernels are v3w's); v3
stays as history with
``calibration-v3.json``. ``v3p`` (``results-v3p-gpu4``, ``-gpu4b``) is v3w with a vectorised
page-table fill: a *derived* generation (``Generation.derives``), whose calibration is v3w's
with the one field its change moves measured anew (``decode_page_entry_s``, from its own
``page_table_bench.py`` runs), and whose runs the last line counts with v3w's.

``--calibrate [GENERATION]`` fits one generation's parameters (default: the newest) and writes
its calibration file (which ``measured_instances.py`` copies into the measured instances' ``llm``
section), and one more per GPU its runs also ran on (``Generation.gpus``: the generation's with
the two HBM contention fields refitted on engine rounds measured on that GPU, for the runs whose
cost tables that GPU's label names):
``contention_hbm_gbps`` from the generation's ``engine.json`` (the five decode steps launched
together on their SM partitions, replayed with the stretch model, least squares on log
times); ``contention_hbm_cap_gbps`` at that value, on that round and the generation's
``contention_rounds`` (engine rounds of other LLM sets and shares; none: no cap), the same
way; ``decode_host_s`` and ``prefill_host_s`` on one run only (the generation's ``fit`` run, a warm trial:
the grid point, decode at or above ``engine.json``'s launch + collect time, whose
re-prediction has the smallest worst of |TPOT error| and |TTFT error|); their ``_full_s``
twins (an LLM on the whole GPU, plain streams) measured on the generation's plain-stream fit
run (``fit_streams``, a temporal run: decode, the median time a decode step takes beyond its
table between back-to-back steps; prefill, ``engine.json``'s streams launch time), or where
it has none scaled by ``engine.json``'s streams / green context host-time ratios;
``decode_page_entry_s`` (host seconds per entry of a decode step's page table) is not fitted but
measured on the GPU machine (``page_table_bench.py``, ``Generation.page_bench``: the median of
its runs' ``per_entry_ns``) and taken out of every step first; ``decode_kv_gbps`` and
``decode_kv_tp_power`` (the rate at which the KV bytes a decode step reads add to its time, one
for every model, divided by ``tp**power`` on a TP mesh) on the back-to-back decode steps of the
plain-stream fit runs, TP 1, 2 and 4 (``fit_streams``, ``fit_tp``, ``fit_tp_wide``, ``fit_kv``;
off for a generation without the first two), before the host times, which are then measured
beyond them; ``prefill_host_tp_s`` (a prefill's serial collect per TP rank beyond
the first) as the median back-to-back prefill time beyond the table on ``fit_tp`` less that on
``fit_streams`` (:func:`tp_prefill_host`); with a run at a second TP degree (``fit_tp_wide``) the
TP decode host time and the prefill collect each split into a per-rank and a per-mesh part
(``decode_host_mesh_s``, ``prefill_host_mesh_s``, :func:`rank_and_mesh`); ``prefill_eager_hold_s``
(where the generation sets ``measure_eager_hold``: how much longer an eager prefill's launch
holds the scheduling thread than a graph one, from the silences after prefill ends in the
partition eager fit run's ``requests.csv``) before the eager-prefill times, which are fitted on
TTFT with it in place; where a derived generation names traced plain-stream runs
(``fit_whole_gpu``), ``decode_full_stretch`` (a decode step on a whole GPU of a one-GPU mesh
over its table time, from the traced GPU times, each step read at its effective context where
the generation sets ``decode_attention_sms``; with ``whole_gpu_per_request`` also
``decode_full_request_s``, its seconds per request beside the factor) and, with it in place of
the KV term there,
``decode_host_full_s`` on their back-to-back steps (:func:`apply_whole_gpu_fields`), before the
prefill and eager fields; last, where a generation names a run of LLMs colocated on a TP > 1 mesh
(``fit_contention_tp``), ``contention_tp_power`` (the contention rate over ``tp**power`` on
such a mesh) on its mean TPOT with everything else in place (:func:`fit_contention_tp_power`).
Every other run is held out; the report marks the fit runs.

``--policy-load SCALE[:RESERVE]`` simulates the Poisson muxserve placement under the three
policies with the rates times SCALE (and ``llm.kv_reserve_fraction`` RESERVE): the load at
which the policy ablation is worth measuring (docs/fidelity-llm.md).

``--predict FOLDER/RUN[/POLICY]...`` prints the prediction of runs not made yet, to commit before
they run; ``--set FIELD=VALUE`` (repeatable) predicts them with those calibration fields set over
the generation's (e.g. the loaded-latency curve, ``latency_curve.py``).

Usage: python benchmarks/llm_fidelity.py [--results DIR] [--calibrate [GENERATION]] [--policy-load SCALE[:RESERVE]]
       [--predict FOLDER/RUN[/POLICY]... [--set FIELD=VALUE]...]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import glob
import gzip
import json
import lzma
import math
import os
import statistics
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from placement_opt.settings import LLMConfig

HERE = os.path.dirname(os.path.abspath(__file__))
LLM = os.path.join(HERE, "fidelity", "llm")
INSTANCES = os.path.join(os.path.dirname(HERE), "instances", "fidelity-llm")
#: the padded prefill size above which the engine of the fidelity runs prefills eagerly (the
#: ``llm.prefill_graph_tokens`` default; the runs' instances leave it there)
GRAPH_TOKENS = LLMConfig().prefill_graph_tokens
MODEL_FIELDS = ("contention_hbm_gbps", "decode_host_s", "prefill_host_s", "decode_host_full_s", "prefill_host_full_s",
                "prefill_eager_host_s", "prefill_eager_host_full_s", "decode_host_tp_s", "decode_host_mesh_s",
                "decode_kv_gbps", "decode_kv_tp_power", "decode_page_entry_s", "own_prefill_decode_share",
                "prefill_host_tp_s", "prefill_host_mesh_s", "prefill_eager_hold_s", "prefill_partition_stretch",
                "prefill_eager_host_tp_s", "contention_hbm_cap_gbps", "prefill_beside_stretch", "prefill_beside_delay_s",
                "prefill_beside_gbps", "prefill_beside_requests", "prefill_beside_knee_tokens", "prefill_at_longest",
                "contention_tp_power", "decode_full_stretch", "prefill_start_full_s", "decode_attention_sms",
                "decode_full_request_s", "decode_partition_stretch", "decode_partition_request_s",
                "own_decode_prefill_share", "prefill_beside_share_power", "prefill_at_bucket",
                "contention_curve_gbps", "contention_curve_power", "prefill_beside_knee_s",
                "own_prefill_decode_knee_tokens", "own_decode_prefill_knee_tokens", "prefill_beside_eager_knee_s",
                "prefill_eager_hold_full_s", "decode_combine_spill_s")
#: the value a model field takes where a calibration (or the all-off model) leaves it out: 0
#: (off), but the curve's power, which is inert while its scale is 0, its setting's default
FIELD_ABSENT = {"contention_curve_power": LLMConfig().contention_curve_power}


def model_fields(given: Dict[str, float]) -> Dict[str, float]:
    """Every :data:`MODEL_FIELDS` entry: ``given``'s value, else :data:`FIELD_ABSENT`'s or 0."""
    return {f: given.get(f, FIELD_ABSENT.get(f, 0.0)) for f in MODEL_FIELDS}


@dataclasses.dataclass(frozen=True)
class GpuCalibration:
    """A generation's calibration for its runs on another GPU than the one its fit runs ran on
    (runs whose cost tables' ``gpu`` label names it): the generation's calibration with the fields
    that are that GPU's HBM refitted on engine rounds measured there (:func:`gpu_calibration`:
    ``contention_hbm_gbps`` on the five-LLM round, ``contention_hbm_cap_gbps`` on every round, as a
    root generation fits them) and, where ``traces`` names job-traced runs there, the fields of
    jobs on SM partitions refitted on them: a graph prefill's stretch beside others and its
    launch's host time (:func:`fit_prefill_trace`) and a decode step's host time
    (:func:`traced_partition_decode_host`); where ``whole_gpu`` does, the decode step on a whole
    GPU refitted on theirs (:func:`apply_whole_gpu_fields`: ``decode_full_stretch``,
    ``decode_host_full_s``, ``prefill_start_full_s``); the rest stays the generation's."""

    gpu: str  # the GPU's model, as its cost tables' ``gpu`` label names it (``H200``)
    calibration: str  # its calibration file (relative to benchmarks/fidelity/llm)
    # engine_bench.py outputs of the five LLMs at share 0.2 (batches and contexts): their rounds fit
    # contention_hbm_gbps
    engines: Tuple[str, ...]
    rounds: Tuple[str, ...]  # more engine_bench.py outputs: with ``engines``', their rounds fit the cap
    traces: Tuple[Tuple[str, str], ...] = ()  # job-traced runs on this GPU: its SM-partition job fields
    whole_gpu: Tuple[Tuple[str, str], ...] = ()  # job-traced runs on this GPU: its whole-GPU decode step
    # with ``whole_gpu``: fit the step's seconds per request too (``Generation.whole_gpu_per_request``)
    whole_gpu_per_request: bool = False
    # with ``traces``: fit ``own_prefill_decode_share`` on them too (:func:`fit_own_prefill_share`);
    # False: the generation's (the H100's 0.25)
    fit_own_prefill: bool = False
    # job-traced runs on this GPU whose decode steps alone on SM partitions of one-GPU meshes fit
    # ``decode_partition_stretch`` and ``decode_partition_request_s`` (:func:`apply_partition_decode_fields`);
    # empty: off (the table time at the mean context plus the KV read)
    partition_decode: Tuple[Tuple[str, str], ...] = ()
    # job-traced runs on this GPU whose prefills beside their own LLM's decode steps fit, with
    # ``traces``' prefills, ``own_decode_prefill_share`` and the stretch beside the other LLMs' jobs
    # (:func:`apply_own_decode_prefill_fields`); empty: off (the own decode step counts as any other)
    own_decode_prefill: Tuple[Tuple[str, str], ...] = ()
    # time a graph prefill at its CUDA-graph bucket (``llm.prefill_at_bucket``) in every fit on
    # this GPU's traces and in the calibration (docs/fidelity-llm.md "A graph prefill costs its bucket")
    prefill_at_bucket: bool = False
    # job-traced runs on this GPU whose graph prefills on SM partitions refit, last, the stretch beside
    # the other LLMs' jobs with its knee in the prefill's time alone (:func:`apply_prefill_time_knee_fields`);
    # empty: the knee in prompt tokens, as fitted before
    prefill_time_knee: Tuple[Tuple[str, str], ...] = ()
    # job-traced runs on this GPU whose graph prefills refit, after that, the prefill beside its own
    # decode step with the part of its speed it loses shrinking with its prompt, jointly with the
    # stretch beside others (:func:`apply_own_partition_knees`); empty: off
    own_partition_knees: Tuple[Tuple[str, str], ...] = ()
    # with ``own_partition_knees``: the decode step's speed beside its own prefill and that speed's
    # knee in the prefill's padded prompt tokens (``own_prefill_decode_share``,
    # ``own_prefill_decode_knee_tokens``), chosen with ``fidelity/llm/own_prefill_decode.py`` so that
    # the simulated steps of those runs fit the measured ones' c and knee
    own_prefill_decode_knee: Tuple[float, float] = ()
    # job-traced runs on this GPU whose eager prefills fit, last, their own knee in their time alone
    # (:func:`apply_prefill_eager_knee`); empty: the graph prefills' knee
    eager_time_knee: Tuple[Tuple[str, str], ...] = ()
    # job-traced runs on this GPU of one-GPU meshes at share 1 (temporal) whose eager prefills fit,
    # last, the eager launch on the whole GPU: ``prefill_eager_hold_full_s`` and, apart from it,
    # ``prefill_eager_host_full_s`` (:func:`apply_whole_gpu_eager_fields`); empty: the generation's eager
    # host time on the whole GPU, serial with the table time
    whole_gpu_eager: Tuple[Tuple[str, str], ...] = ()
    # job-traced runs on this GPU whose decode steps alone on one-GPU meshes fit, last, the seconds
    # per layer a step whose split-combine spills lasts more (``decode_combine_spill_s``,
    # :func:`apply_combine_spill_fields`); empty: off
    combine_spill: Tuple[Tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Generation:
    """One engine version: the results folders its GPU runs wrote (those not yet written are
    skipped), the cost tables it was profiled into (``folder_tables``: a results folder whose
    instance was profiled into tables of its own), the engine micro-benchmark, the run (a
    warm trial: the second on its workers) its SM-partition host seconds are fitted on, the
    plain-stream run (one job at a time) its ``_full_s`` host seconds are measured on (None:
    scaled from the partition ones by ``engine.json``'s ratios), and its calibration file.
    Every run that is not a fit run is held out."""

    results: Tuple[str, ...]
    tables: str
    engine: str
    fit: Optional[Tuple[str, str]]  # None: a derived generation (``derives``), no fit of its own
    calibration: str
    fit_streams: Optional[Tuple[str, str]] = None
    folder_tables: Tuple[Tuple[str, str], ...] = ()
    fit_eager: Tuple[Tuple[str, str], ...] = ()  # (partition run, whole-GPU run) the eager-prefill host seconds fit on
    fit_tp: Optional[Tuple[str, str]] = None  # a TP > 1 plain-stream run: decode host seconds per extra rank
    # a plain-stream run at a higher TP degree than ``fit_tp``'s: the TP host times split into a per-rank
    # and a per-mesh part (None: all per rank)
    fit_tp_wide: Optional[Tuple[str, str]] = None
    # more plain-stream runs ``decode_kv_gbps`` is fitted on (beside ``fit_streams`` and ``fit_tp``)
    fit_kv: Tuple[Tuple[str, str], ...] = ()
    # speed a decode step keeps while its LLM's prefill runs on the same SM partition (measured on
    # the eager fit run, docs/fidelity-llm.md "What fcfs does in the stalls"); 0: not modelled
    own_prefill_decode_share: float = 0.0
    # the eager launch's hold of the scheduling thread measured apart on the partition eager fit
    # run (``prefill_eager_hold_s``, :func:`eager_launch_hold`); False: one fitted eager time
    measure_eager_hold: bool = False
    # the graph prefill launch's hold of the thread (``prefill_host_s``) measured on the host fit
    # run's silences and the partition prefill's stretch (``prefill_partition_stretch``) fitted
    # with ``decode_host_s`` instead of a fitted ``prefill_host_s`` (:func:`fit_partition`)
    measure_graph_hold: bool = False
    # engine_bench.py outputs (relative to benchmarks/fidelity/llm) whose green-context rounds, with
    # ``engine``'s, fit ``contention_hbm_cap_gbps`` at the fitted ``contention_hbm_gbps``; empty: no cap
    contention_rounds: Tuple[str, ...] = ()
    # engine_bench.py --prefill-beside outputs (relative to benchmarks/fidelity/llm) whose prefills
    # alone and beside the other LLMs' decodes fit ``prefill_beside_stretch`` and
    # ``prefill_beside_delay_s`` (:func:`fit_prefill_beside`); empty: off
    prefill_rounds: Tuple[str, ...] = ()  # (tried, not adopted on v3w: PREFILL_ROUNDS)
    # traced runs (``jobs.csv``) whose graph prefills on SM partitions measure the prefill's stretch
    # beside other jobs (their HBM demand and decode requests, over its prompt's length), its
    # launch's hold and its timing at the longest prompt (:func:`apply_prefill_trace_fields`; a
    # derived generation, before its eager fields); empty: off
    fit_prefill_trace: Tuple[Tuple[str, str], ...] = ()  # v3f: PREFILL_TRACES
    # a run of LLMs colocated on SM partitions of a TP > 1 mesh whose mean TPOT fits
    # ``contention_tp_power`` (:func:`fit_contention_tp_power`; a derived generation, after its other
    # fields); None: the parent's
    fit_contention_tp: Optional[Tuple[str, str]] = None
    # traced plain-stream runs (``jobs.csv`` with its ``context_tokens`` column) whose jobs on whole
    # GPUs of one-GPU meshes measure ``decode_full_stretch`` and, with it, ``decode_host_full_s``, and
    # ``prefill_start_full_s`` (:func:`apply_whole_gpu_fields`; a derived generation, before its
    # prefill fields); empty: off
    fit_whole_gpu: Tuple[Tuple[str, str], ...] = ()
    # with ``fit_whole_gpu``: the SM count of its GPUs (``llm.decode_attention_sms``: a decode step on a
    # whole GPU read at its effective context; the GPU's own count, not fitted: 132 on an H100 SXM,
    # which the traces' steps also fit best); 0: at the mean context
    decode_attention_sms: int = 0
    # with ``fit_whole_gpu``: fit ``decode_full_request_s`` (seconds per request) with the stretch, where
    # the traces hold steps at two loads (:func:`fit_decode_full_stretch`); False: the stretch alone
    whole_gpu_per_request: bool = False
    # page_table_bench.py outputs (on the GPU machine) whose per-entry host time of a decode step's
    # page-table fill is ``decode_page_entry_s`` (their median); empty: off
    page_bench: Tuple[str, ...] = ()
    # the generation whose engine this one changes only where it measures its own fields (its
    # ``page_bench``; and, where it names its own plain-stream runs ``fit_streams``, ``fit_tp``,
    # ``fit_tp_wide``, the decode step's host seconds on them): its calibration is that one's with
    # those fields replaced, and its runs count in the last line together with that one's (None: a
    # generation of its own)
    derives: Optional[str] = None
    # a derived generation that changes only how a TP mesh's ranks are driven (its TP-1 path is its
    # parent's): its own ``fit_tp`` / ``fit_tp_wide`` runs re-measure the TP decode host seconds
    # beyond the parent's ``decode_host_full_s`` and the TP prefill host seconds against this TP-1
    # plain-stream run (:func:`tp_prefill_host`); None: the TP fields are refitted only with ``fit_streams``
    tp_prefill_against: Optional[Tuple[str, str]] = None
    # its runs on other GPUs, each GPU with a calibration of its own (:class:`GpuCalibration`)
    gpus: Tuple[GpuCalibration, ...] = ()


#: the traced plain-stream runs (the 7B and 8B each on a whole GPU; traces with the contexts) v3f's
#: decode step and graph prefill start on a whole GPU are measured on (``Generation.fit_whole_gpu``)
WHOLE_GPU_TRACES = (("results-v3f-tp2s2", "tp2s2-poisson-spatial"), ("results-v3f-tp2s3", "tp2s3-poisson-spatial"))
#: the traced runs v3f's stretch of a prefill on an SM partition beside other jobs is fitted on
#: (``fit_prefill_trace``; docs/fidelity-llm.md "The prefill's stretch on the job trace")
PREFILL_TRACES = (("results-v3f", "conv-muxserve"), ("results-v3f-tp2", "tp2-poisson-muxserve"))
# v2: disjoint green contexts, gather + SDPA decode, eager prefills; v3: Triton paged decode
# attention, prefill CUDA graphs, each graph bucket captured the first time a trial meets it
# (the workers' first trial runs cold); v3w: the same kernels, every CUDA-graph bucket captured
# at start-up (``warmup`` in summary.json's worker_info, ``cold_buckets`` empty), so the first
# trial measures what the later ones do (docs/fidelity-llm.md). A different engine: its own
# runs, its own calibration. Its kernels are v3's, so it keeps v3's tables and engine
# micro-benchmark (``results-v3/engine.json``). The newest is the engine in use.
# results-v3-tp2: 2 GPUs, TP 2 (runs tp2-poisson-<placement>, tables profiled in the same call
# into tables-tp2, run_gpu.sh's TABLES2); results-v3-tp2b: the same placements and tables with the
# arrivals re-drawn (instances/fidelity-llm/tp2s1, seed 1; runs tp2s1-poisson-<placement>);
# results-v3-tp2c: its temporal placement again on fresh workers (how far the GPU repeats itself);
# results-v3c2: the code trace's temporal and muxserve placements again (1 x H100, fresh workers).
# results-v3-gpu4: 4 GPUs (instances/fidelity-llm/gpu4: runs gpu4-poisson-<placement>, tables
# profiled in the same call into tables-gpu4); results-v3-gpu4b: the same with the arrivals
# re-drawn (instances/fidelity-llm/gpu4s1, seed 1); results-v3-gpu4c: gpu4b's muxserve and temporal
# placements again, and results-v3-tp2d: the 2-GPU set's (seed 0) temporal and muxserve placements
# again, both on the 4 x H100 machine (fresh workers: how far the GPU repeats itself).
# v3p: v3w with each request's KV pages kept as rows of one array, so a decode step's page table
# is a slice copy per request, not an entry-by-entry one (page_table_bench.py on the H100 host:
# ~44 -> ~1.4 ns per entry); derived from v3w (its calibration but for decode_page_entry_s); its
# runs predicted before they ran: results-v3p (1 x H100: the Poisson and conv temporal placements
# of results-v3c), results-v3p-gpu4, -gpu4b (4 x H100: the four placements, seeds 0 and 1). Those
# runs showed its decode step's host time differs from v3w's (TP 1 longer, TP 2 and 4 shorter:
# docs/fidelity-llm.md "v3p's own decode host time"), so it measures its decode host seconds on its
# own seed-0 plain-stream runs (TP 1, 2, 4) the way v3w does; the seed-1 runs and conv stay held out.
# results-v3p-gpu4s2 (4 x H100, the four placements on arrivals drawn with seed 2,
# instances/fidelity-llm/gpu4s2) and results-v3p-gpu1s1 (1 x H100, the Poisson temporal and muxserve
# placements with seed 1, instances/fidelity-llm/gpu1s1): fresh workloads, predicted (--predict) and
# committed before they ran; results-v3p2: results-v3p's Poisson temporal run repeated on that 1 x H100
# machine (another machine of the kind: how far the host time per step moves between machines);
# results-v3p-gpu4s2r: gpu4s2's four placements again on another 4 x H100 machine, with the
# executor's host probe (each run predicted a second time with the decode host time it measured);
# results-v3p-gpu4s2-probe1 / -probe0: gpu4s2's spatial placement on a third 4 x H100 machine, with
# the probe and then without it (whether the probe changes what the trial measures);
# results-v3p-gpu4s3 (4 x H100, seed 3, predicted and committed before it ran); results-v3p-tp4probe:
# the temporal4 placement of seeds 2, 0, 1 again with the probe, on the seed-3 machine, and
# results-v3p-tp4probe2 seed 0's on another (its index trials.json was lost to an executor bug fixed
# since); results-v3p-x3: the 1-GPU policy ablation (Poisson and poisson-x3 muxserve, three policies),
# predicted and committed before it ran.
# v3f: v3p with every eager prefill's attention by FlashAttention, not cuDNN (whose execution
# plan for each new sequence length held the scheduling thread 60-100 ms per eager prefill:
# eager_probe.py); derived from v3p (its calibration but for the prefill fields measured on its
# job traces, PREFILL_TRACES, and the eager-prefill fields, fitted on its own conv runs, the
# partition hold measured on the job trace); its runs, all with the job trace: results-v3f (1 x
# H100), the conv and code traces' muxserve and temporal placements and poisson-x3's muxserve
# placement under adbs and round-robin; results-v3f-tp2 and -tp2s1 (2 x H100), the 2-GPU seeds 0
# and 1; results-v3f-x3a, -x3b, -x3c, the 3 x adbs run repeated; results-v3f-tr2, conv and code
# again with context_tokens; results-v3f-tp2s2 (2-GPU seed 2), -x3s1 and -x3s2 (the 3 x load's
# arrivals re-drawn), predicted after the prefill fields were adopted; results-v3f-x3p, the policy
# ablation (adbs, round-robin, fcfs) on those two seeds; results-v3f-tp2s3 (2-GPU seed 3, the four
# placements), predicted after the contention rate's TP power was fitted, and results-v3f-gpu4s4 (the
# 4-GPU set's four placements on arrivals drawn with seed 4, v3f's first 4-GPU runs); results-v3f-gpu4s5
# and -tp2s4 (the 4-GPU set with seed 5, the 2-GPU set with seed 4, the four placements each),
# predicted after the whole-GPU decode step was measured on the traces; results-v3f-gpu4s6 (the 4-GPU set
# with seed 6, its measured instance the first with v3f's calibration: the executor's host probe
# measures beyond the stretch); results-v3f-gpu4s7 and -gpu4s8 (the 4-GPU set with seeds 7 and 8),
# and results-v3f-tp2s5 (the 2-GPU set with seed 5), predicted after the decode step on a whole GPU
# was read at its effective context (decode_attention_sms); results-v3f-gpu4s9 and -tp2s6 (seeds 9
# and 6), the first runs whose executor also writes the in-run host reading. Its TP > 1 eager term
# (prefill_eager_host_tp_s) stays v3p's, measured against v3p's cuDNN-era TP-1 eager time.
# v3s: v3f with a TP mesh's operations sent to its followers over OS pipes, not a gloo broadcast
# (executor llm_worker.PipeChannel; ~1 ms less host time per TP step); derived from v3f (its
# calibration but for the TP host fields, measured on its own seed-0 4-GPU temporal runs
# results-v3s-gpu4, the TP prefill against v3p's TP-1 run: tp_prefill_against); its TP-1 path is
# v3f's. results-v3s-gpu4s10 and -tp2s7: fresh seeds 10 and 7, predicted and committed
# (predictions/v3s-*.jsonl) before they run. results-v3s-h200s11 and -h200s12: the 2-GPU set on
# two H200s (seeds 11 and 12) with cost tables profiled on them (tables-h200), the calibration as
# fitted on H100s, predicted and committed before they ran: how far it carries to another GPU;
# their calibration since is calibration-v3s-h200.json (the HBM contention fields refitted on engine
# rounds measured on an H200: Generation.gpus). results-v3s-h200s13 (seed 13): predicted with it and
# committed (predictions/v3s-h200s13.jsonl) before it ran. results-v3s-h200g4s14: the 4-GPU set on
# four H200s (seed 14; -h200g4s15: seed 15) with its tables profiled there (tables-gpu4-h200),
# predicted with the H200 calibration and committed (predictions/v3s-h200g4s14.jsonl,
# -h200g4s15.jsonl) before they ran. results-v3s-h200x3s16, -h200x3s17 (the 3 x load's policy ablation,
# seeds 16 and 17) and -h200g1s18 (the 1 x load's muxserve and temporal placements, seed 18): the 1-GPU
# sets on one H200 each with their tables profiled there (tables-h200-g1), predicted and committed
# (predictions/v3s-h200g1.jsonl, with v3s's H100 fields: the tables_gpu fault) before they ran; their
# measured instances, also committed before, carry the H200 fields, and the report scores those. The
# H200 calibration's SM-partition job fields were then refitted on h200x3s16's job traces (H200_TRACES);
# with it results-v3s-h200x3s19, -h200x3s20 (the 3 x load's policy ablation, seeds 19 and 20) and
# -h200s21 (the 2-GPU set, seed 21) were predicted and committed (predictions/v3s-h200-traces.jsonl)
# before they ran. results-v3s-h200g4s14-7b-g0 to -g3: seed 14's llm-7b alone on one H200 (its
# arrivals as in the spatial placement, a whole GPU, the other LLMs unplaced: placement "7b"), one run
# on each of four GPUs at once: the GPU's own spread where its TTFT missed by +230%. The H200
# calibration's whole-GPU decode step was then refitted on h200g4s14's spatial job trace
# (H200_WHOLE_GPU_TRACES); with it results-v3s-h200g4s23 (the 4-GPU set, seed 23) was predicted and
# committed (predictions/v3s-h200g4s23.jsonl) before it ran. Then the refit on the 2-GPU set's
# spatial traces too, with seconds per request beside the factor (whole_gpu_per_request); with it
# results-v3s-h200g4s25-7b and -h200g4s26-7b (fresh seeds' llm-7b alone on one H200) and
# -h200s24 (the 2-GPU set, seed 24) were predicted and committed (predictions/v3s-h200-request.jsonl)
# before they ran, and so were -h200g4s27-7b and -h200g4s28-7b (predictions/v3s-h200-request-7b.jsonl);
# results-v3s-h200s24r: seed 24's temporal placement again on fresh workers (its FCFS hand-off,
# docs/fidelity-llm.md), predicted alike (the same instance and placement);
# results-v3s-h200x3s20r and -h200x3s19r: seeds 20 and 19's 3 x load policy ablation again on a
# fresh machine (their mean TTFT errors -5% to -39%, three beyond 15%: the run or the model?),
# predicted and committed before they ran (predictions/v3s-h200x3s20r.jsonl, v3s-h200x3s19r.jsonl).
# v3g: v3s with the SM partitions of one split of the whole device (executor llm_greenctx: the groups a
# driver's split makes alike, dealt to the LLMs) where v3s split each from what the previous splits left
# (its fifth 24-SM partition ran a decode step alone 14-20% slower on an H200); derived from v3s, its
# H200 calibration's contention rate refitted on rounds measured with the new layout
# (H200_ONE_SPLIT_ROUNDS), and its SM-partition job fields refitted on job traces (the own-prefill
# share; then the partition decode step and the prefill beside its own decode step on v3g's own
# runs: GpuCalibration.partition_decode, own_decode_prefill); every other field v3s's H200
# calibration's. Its runs (V3G_RESULTS) were predicted and committed (predictions/v3g-h200x3.jsonl)
# before they ran.
# v3s's and v3g's H200 calibrations time a graph prefill at its CUDA-graph bucket (the batch rounded up to
# a power of two, the padded length: the shape the engine's graph computes, llm.prefill_at_bucket) and fit
# their prefill fields so (GpuCalibration.prefill_at_bucket); the H100 calibrations keep the longest prompt.
#: the five LLMs' decode rounds at share 0.2 on one H200 (``engine_bench.py --mechanisms green``) that fit
#: its ``contention_hbm_gbps``: batch 8 at context 512 (the first, 2026-11-26), and batches 16 and 32
#: at 512 and 16 at 1024, measured after the 3 x load's runs (the b8 fit over-stretched them by 2-12%:
#: RMS log error 0.053 over the four, 0.031 refitted; docs/fidelity-llm.md "The contention rounds at
#: larger batches")
H200_FIVE_LLM_ROUNDS = ("engine-h200/engine-b8.json", "engine-h200/engine-b16-c512.json",
                        "engine-h200/engine-b32-c512.json", "engine-h200/engine-b16-c1024.json")
#: the job-traced runs on one H200 whose jobs on SM partitions (five LLMs at 0.2 of the GPU, 3 x
#: load, the three policies) refit v3s's H200 calibration's prefill stretch beside others and host
#: times (``GpuCalibration.traces``; docs/fidelity-llm.md "The 1-GPU sets on one H200")
H200_TRACES = tuple(("results-v3s-h200x3s16", f"h200x3s16-poisson-muxserve/{p}") for p in ("adbs", "round-robin", "fcfs"))

#: the job-traced runs on H200s whose decode steps on whole GPUs refit v3s's H200 calibration's
#: whole-GPU decode step, its factor and seconds per request (``GpuCalibration.whole_gpu``,
#: ``whole_gpu_per_request``): the 2-GPU set's spatial runs of seeds 11 and 12 (llm-7b and llm-8b
#: alone on a GPU each, at most 16 requests a step) and the 4-GPU set's of seed 14 (llm-1b to
#: llm-8b, llm-7b near saturation at 32): the steps' excess grows with the batch, so the fit needs
#: both loads (docs/fidelity-llm.md "The whole-GPU decode step's seconds per request")
H200_WHOLE_GPU_TRACES = (("results-v3s-h200s11", "h200s11-poisson-spatial"),
                         ("results-v3s-h200s12", "h200s12-poisson-spatial"),
                         ("results-v3s-h200g4s14", "h200g4s14-poisson-spatial"))

#: the five LLMs' decode rounds at share 0.2 on one H200 with v3g's SM layout (one split of the whole
#: device, ``sm_layout`` "one-split of 24-SM groups"), at the points of ``H200_FIVE_LLM_ROUNDS``: they fit
#: v3g's ``contention_hbm_gbps`` there (docs/fidelity-llm.md "One split of the device: SM partitions alike")
H200_ONE_SPLIT_ROUNDS = ("engine-h200/one-split-b8.json", "engine-h200/one-split-b16-c512.json",
                         "engine-h200/one-split-b32-c512.json", "engine-h200/one-split-b16-c1024.json")

#: v3g's runs: the 3 x load's policy ablation on one H200, seeds 19 and 20 again (measured twice each
#: with v3s's sequential splits) and fresh seeds 29 and 30; seed 30's fcfs again on a fresh machine
#: (``-h200x3s30r``, predicted with the H200's own-prefill share and committed before it ran)
V3G_RESULTS = ("results-v3g-h200x3s19", "results-v3g-h200x3s20", "results-v3g-h200x3s29", "results-v3g-h200x3s30",
               "results-v3g-h200x3s30r")
#: the job-traced runs on one H200 whose decode steps alone on SM partitions of unequal shares (48,
#: 64 and 96 SMs: llm-1b and llm-8b at 2 + 8 req/s) fit v3g's H200 ``decode_partition_stretch`` and
#: ``decode_partition_request_s`` (``GpuCalibration.partition_decode``; docs/fidelity-llm.md "Unequal SM
#: shares on one H200"): seed 32's three splits, seed 31's four held out
H200_PARTITION_TRACES = tuple(("results-v3g-h200us32", f"h200us32-poisson-{p}") for p in ("muxserve", "skewed", "reverse"))
#: the job-traced runs on one H200 of one LLM alone on an SM partition (llm-1b, llm-3b, llm-8b at 24 to
#: 48 SMs: every prefill beside its own decode steps only): with ``H200_TRACES``' (five LLMs) and
#: ``H200_PARTITION_TRACES``' (two) they fit v3g's H200 ``own_decode_prefill_share`` and the stretch
#: beside the other LLMs' jobs
#: (``GpuCalibration.own_decode_prefill``; docs/fidelity-llm.md "A prefill beside its own decode step")
H200_OWN_DECODE_TRACES = tuple((f"results-v3g-{s}", f"{s}-poisson-{p}") for s, splits in
                               (("h200p36", ("p20", "p42")), ("h200p37", ("p20", "p42")), ("h200p38", ("p20", "p30")))
                               for p in splits)
#: v3g's runs of unequal SM shares: llm-1b and llm-8b (and llm-3b, ``-h200u3s35``) on one H200 in
#: MuxServe's split and others (make_instances.py --h200u), with the cost tables measured at seven
#: shares there (``tables-h200-shares``), predicted and committed before they ran: seeds 31 and 32
#: (predictions/v3g-h200us.jsonl), then with the partition decode step refitted on seed 32's
#: traces (``H200_PARTITION_TRACES``) seeds 33 and 35 (predictions/v3g-h200us-refit.jsonl); then one
#: LLM alone on a partition (``-h200p36`` to ``-h200p38``: llm-1b, llm-3b, llm-8b at 24 to 48 SMs;
#: predictions/v3g-h200p.jsonl), the partition step's check on LLMs and SM counts it was not fitted on;
#: then, held out from the fit of the prefill beside its own decode step on those, fresh lone LLMs and
#: pairs (``-h200p40``, ``-h200p41``, ``-h200us42``, ``-h200us43``; predictions/v3g-h200-own.jsonl);
#: then, held out from the fit of the stretch's power of the SM share, fresh pairs and a triple
#: (``-h200us44``, ``-h200us45``, ``-h200u3s46``; predictions/v3g-h200-power.jsonl); and seeds 31 and
#: 33's muxserve split again on a fresh machine (``-h200us31r``, ``-h200us33r``;
#: predictions/v3g-h200us-again.jsonl); then, after graph prefills were timed at their CUDA-graph
#: buckets (GpuCalibration.prefill_at_bucket), fresh pairs near saturation and ``llm-8b`` alone on
#: the whole GPU (``-h200us47``, ``-h200us48``, ``-h200f49``; predictions/v3g-h200-bucket.jsonl, and
#: -bucket-before.jsonl with the calibration before), and the two TTFT misses among them again on a
#: fresh machine (``-h200us48r``, ``-h200f49r``; predictions/v3g-h200-bucket-again.jsonl)
V3G_SHARE_RESULTS = ("results-v3g-h200us31", "results-v3g-h200us32", "results-v3g-h200us33", "results-v3g-h200u3s35",
                     "results-v3g-h200p36", "results-v3g-h200p37", "results-v3g-h200p38", "results-v3g-h200p40",
                     "results-v3g-h200p41", "results-v3g-h200us42", "results-v3g-h200us43", "results-v3g-h200us44",
                     "results-v3g-h200us45", "results-v3g-h200u3s46", "results-v3g-h200us31r", "results-v3g-h200us33r",
                     "results-v3g-h200us47", "results-v3g-h200us48", "results-v3g-h200f49", "results-v3g-h200us48r",
                     "results-v3g-h200f49r")

#: v3h: v3g's engine with a decode step's host path cut (docs/fidelity-llm.md "The decode step's host
#: path": a job's tokens come back in one asynchronous copy into a pinned buffer, with no device clone
#: and no blocking copy; its stream is set directly): its GPU work is v3g's, and so is its calibration,
#: none of its fields refitted (its traces put llm-8b's median decode launch on a partition at
#: 0.16-0.17 ms, where v3g's calibration has 0.164). Seed 31's muxserve and equal splits ran again with
#: it first (``-h200us31``: not predicted before), then fresh pairs, predicted with v3g's calibration
#: and committed before they ran (``-h200us50`` to ``-h200us52``; predictions/v3h-h200us.jsonl)
V3H_RESULTS = ("results-v3h-h200us31", "results-v3h-h200us50", "results-v3h-h200us51", "results-v3h-h200us52",
               "results-v3h-h200us53", "results-v3h-h200us54")
#: v3h's five-LLM runs at 3 x load on one H200 (the policy ablation; tables-h200-g1), seeds 55 to 58,
#: both contention models' predictions committed before they ran
V3H_X3_RESULTS = tuple(f"results-v3h-h200x3s{s}" for s in (55, 56, 57, 58))
#: v3i: v3h's engine with its LLM workers' CUDA contexts on 32 hardware work queues
#: (``CUDA_DEVICE_MAX_CONNECTIONS``, executor ``llm_engine.CUDA_CONNECTIONS``; the driver's default 8
#: held 13-19% of the jobs of v3h's five-LLM runs behind another LLM's token copy,
#: ``fidelity/llm/start_delay.py``); its calibration is v3h's (v3g's), none of its fields refitted
#: (a refit of the SM-partition job fields on seed 55's traces was tried and lost on the held-out
#: seeds: docs/fidelity-llm.md). Seeds 55 to 58's five-LLM runs again: v3h's committed predictions,
#: made before either engine ran them, are v3i's (predictions/v3i-h200x3-55-58.jsonl, the same figures);
#: then a fresh seed, 59 (adbs and fcfs), both models' predictions committed before it ran; then fresh
#: seeds 60 to 63, predicted with that calibration and with the prefill stretch's knee in the prefill's
#: time fitted on seeds 55-58 (a candidate, predictions/v3i-h200x3-60-63-time-knee.jsonl), which was
#: then adopted (``V3I_TIME_KNEE_TRACES``); then seeds 64 to 66, predicted with it (and with the knee in
#: tokens, and with both own-partition knees, then adopted: ``own_partition_knees``); then seeds 67 to 72,
#: predicted with the adopted file
V3I_X3_RESULTS = tuple(f"results-v3i-h200x3s{s}" for s in range(55, 73))
#: v3i's pairs on one H200 (tables-h200-shares; make_instances.py --h200u), held out from its refit:
#: seeds 64 and 65, both calibrations' predictions committed before they ran
V3I_PAIR_RESULTS = ("results-v3i-h200us64", "results-v3i-h200us65")
#: v3i's five LLMs on one H200 (tables-h200-g1; make_instances.py --h200t) serving the Splitwise
#: conversation and code traces under the muxserve and temporal placements: set 73, every run
#: held out, predicted with the adopted H200 file and committed before it ran
#: (predictions/v3i-h200t73.jsonl)
V3I_TRACE_RESULTS = ("results-v3i-h200t73", "results-v3i-h200t74", "results-v3i-h200t75", "results-v3i-h200t76")
#: v3i's own five-LLM job traces (seeds 55 to 58, every policy) its H200 calibration's stretch of a
#: prefill beside the other LLMs' jobs is refitted on, with the knee in the prefill's time alone
#: (``GpuCalibration.prefill_time_knee``; docs/fidelity-llm.md "The prefill's knee in its time alone")
V3I_TIME_KNEE_TRACES = tuple((f"results-v3i-h200x3s{s}", f"h200x3s{s}-poisson-muxserve/{p}")
                             for s in (55, 56, 57, 58) for p in ("adbs", "round-robin", "fcfs"))
#: v3g's H200 calibration: its contention rounds and the job traces its fields are fitted on
V3G_H200 = GpuCalibration("H200", "calibration-v3g-h200.json", H200_ONE_SPLIT_ROUNDS,
                          tuple(f"engine-h200/engine-tp2-s05-b{b}.json" for b in (8, 16, 32)),
                          H200_TRACES, H200_WHOLE_GPU_TRACES, whole_gpu_per_request=True,
                          fit_own_prefill=True, partition_decode=H200_PARTITION_TRACES,
                          own_decode_prefill=H200_OWN_DECODE_TRACES + H200_PARTITION_TRACES,
                          prefill_at_bucket=True)
#: v3i's temporal runs on one H200 whose eager prefills on the whole GPU fit the eager launch there
#: (``GpuCalibration.whole_gpu_eager``; docs/fidelity-llm.md "The eager launch on the whole GPU")
V3I_WHOLE_GPU_EAGER_TRACES = (("results-v3i-h200t73", "h200t73-conv-temporal"),
                              ("results-v3i-h200t73", "h200t73-code-temporal"))
#: the same two runs, whose decode steps on the whole GPU at long contexts fit the split-combine
#: spill (``GpuCalibration.combine_spill``; docs/fidelity-llm.md "The split-combine spill")
V3I_COMBINE_SPILL_TRACES = V3I_WHOLE_GPU_EAGER_TRACES

GENERATIONS = {
    "v2": Generation(("results-v2", "results-v2b"), "tables-v2b", "results-v2",
                     ("results-v2b", "poisson-muxserve/round-robin"), "calibration-v2.json"),
    "v3": Generation(("results-v3", "results-v3b"), "tables-v3", "results-v3",
                     ("results-v3b", "poisson-muxserve/round-robin"), "calibration-v3.json",
                     fit_streams=("results-v3b", "poisson-temporal")),
    "v3w": Generation(("results-v3c", "results-v3c2", "results-v3-tp2", "results-v3-tp2b", "results-v3-tp2c",
                       "results-v3-gpu4", "results-v3-gpu4b", "results-v3-gpu4c", "results-v3-tp2d"),
                      "tables-v3", "results-v3",
                      ("results-v3c", "poisson-muxserve/round-robin"), "calibration.json",
                      fit_streams=("results-v3c", "poisson-temporal"),
                      folder_tables=(("results-v3-tp2", "tables-tp2"), ("results-v3-tp2b", "tables-tp2"),
                                     ("results-v3-tp2c", "tables-tp2"), ("results-v3-gpu4", "tables-gpu4"),
                                     ("results-v3-gpu4b", "tables-gpu4"), ("results-v3-gpu4c", "tables-gpu4"),
                                     ("results-v3-tp2d", "tables-tp2")),
                      fit_eager=(("results-v3c", "conv-muxserve"), ("results-v3c", "conv-temporal")),
                      fit_tp=("results-v3-tp2", "tp2-poisson-temporal"), own_prefill_decode_share=0.25,
                      fit_kv=(("results-v3-gpu4", "gpu4-poisson-spatial"),),
                      fit_tp_wide=("results-v3-gpu4", "gpu4-poisson-temporal4"),
                      measure_eager_hold=True, page_bench=("page-table/procs1.json", "page-table/procs4.json"),
                      contention_rounds=tuple(f"engine-v3p/engine-{n}.json" for n in (
                          "b8", "b24", "b32", "tp2-s05-b8", "tp2-s05-b16", "tp2-s05-b32", "gpu4-s025-b16"))),
    "v3p": Generation(("results-v3p", "results-v3p-gpu4", "results-v3p-gpu4b", "results-v3p-gpu4s2",
                       "results-v3p-gpu1s1", "results-v3p2", "results-v3p-gpu4s2r", "results-v3p-gpu4s2-probe1",
                       "results-v3p-gpu4s2-probe0", "results-v3p-gpu4s3", "results-v3p-tp4probe", "results-v3p-x3",
                       "results-v3p-tp4probe2", "results-v3p-tp2", "results-v3p-tp2s1", "results-v3p-traces", "results-v3p-trace8", "results-v3p-trace-x3"),
                      "tables-v3", "results-v3", None,
                      "calibration-v3p.json",
                      fit_streams=("results-v3p", "poisson-temporal"),
                      folder_tables=(("results-v3p-gpu4", "tables-gpu4"), ("results-v3p-gpu4b", "tables-gpu4"),
                                     ("results-v3p-gpu4s2", "tables-gpu4"), ("results-v3p-gpu4s2r", "tables-gpu4"),
                                     ("results-v3p-gpu4s2-probe1", "tables-gpu4"), ("results-v3p-gpu4s2-probe0", "tables-gpu4"),
                                     ("results-v3p-gpu4s3", "tables-gpu4"), ("results-v3p-tp4probe", "tables-gpu4"),
                                     ("results-v3p-tp4probe2", "tables-gpu4"), ("results-v3p-tp2", "tables-tp2"),
                                     ("results-v3p-tp2s1", "tables-tp2")),
                      fit_tp=("results-v3p-gpu4", "gpu4-poisson-temporal"),
                      fit_tp_wide=("results-v3p-gpu4", "gpu4-poisson-temporal4"),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3w"),
    "v3f": Generation(("results-v3f", "results-v3f-tp2", "results-v3f-tp2s1", "results-v3f-x3a", "results-v3f-x3b",
                       "results-v3f-x3c", "results-v3f-tr2", "results-v3f-tp2s2", "results-v3f-x3s1",
                       "results-v3f-x3s2", "results-v3f-x3p", "results-v3f-tp2s3", "results-v3f-gpu4s4",
                       "results-v3f-gpu4s5", "results-v3f-tp2s4", "results-v3f-gpu4s6", "results-v3f-gpu4s7",
                       "results-v3f-gpu4s8", "results-v3f-tp2s5", "results-v3f-gpu4s9", "results-v3f-tp2s6"),
                      "tables-v3", "results-v3", None, "calibration-v3f.json",
                      fit_eager=(("results-v3f", "conv-muxserve"), ("results-v3f", "conv-temporal")),
                      measure_eager_hold=True, fit_prefill_trace=PREFILL_TRACES,
                      fit_contention_tp=("results-v3f-tp2", "tp2-poisson-colocated"),
                      fit_whole_gpu=WHOLE_GPU_TRACES, decode_attention_sms=132,
                      folder_tables=(("results-v3f-tp2", "tables-tp2"), ("results-v3f-tp2s1", "tables-tp2"),
                                     ("results-v3f-tp2s2", "tables-tp2"), ("results-v3f-tp2s3", "tables-tp2"),
                                     ("results-v3f-gpu4s4", "tables-gpu4"), ("results-v3f-gpu4s5", "tables-gpu4"),
                                     ("results-v3f-tp2s4", "tables-tp2"), ("results-v3f-gpu4s6", "tables-gpu4"),
                                     ("results-v3f-gpu4s7", "tables-gpu4"), ("results-v3f-gpu4s8", "tables-gpu4"),
                                     ("results-v3f-tp2s5", "tables-tp2"), ("results-v3f-gpu4s9", "tables-gpu4"),
                                     ("results-v3f-tp2s6", "tables-tp2")),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3p"),
    "v3s": Generation(("results-v3s-gpu4", "results-v3s-gpu4s10", "results-v3s-tp2s7", "results-v3s-h200s11",
                       "results-v3s-h200s12", "results-v3s-h200s13", "results-v3s-h200g4s14",
                       "results-v3s-h200g4s15", "results-v3s-h200x3s16", "results-v3s-h200x3s17",
                       "results-v3s-h200g1s18", "results-v3s-h200x3s19", "results-v3s-h200x3s20",
                       "results-v3s-h200s21", *(f"results-v3s-h200g4s14-7b-g{i}" for i in range(4)),
                       "results-v3s-h200g4s23", "results-v3s-h200s24", "results-v3s-h200g4s25-7b",
                       "results-v3s-h200g4s26-7b", "results-v3s-h200g4s27-7b", "results-v3s-h200g4s28-7b",
                       "results-v3s-h200s24r", "results-v3s-h200x3s20r", "results-v3s-h200x3s19r"),
                      "tables-v3", "results-v3",
                      None, "calibration-v3s.json",
                      fit_tp=("results-v3s-gpu4", "gpu4-poisson-temporal"),
                      fit_tp_wide=("results-v3s-gpu4", "gpu4-poisson-temporal4"),
                      tp_prefill_against=("results-v3p", "poisson-temporal"),
                      folder_tables=(("results-v3s-gpu4", "tables-gpu4"), ("results-v3s-gpu4s10", "tables-gpu4"),
                                     ("results-v3s-tp2s7", "tables-tp2"), ("results-v3s-h200s11", "tables-h200"),
                                     ("results-v3s-h200s12", "tables-h200"), ("results-v3s-h200s13", "tables-h200"),
                                     ("results-v3s-h200g4s14", "tables-gpu4-h200"),
                                     ("results-v3s-h200g4s15", "tables-gpu4-h200"),
                                     ("results-v3s-h200x3s16", "tables-h200-g1"),
                                     ("results-v3s-h200x3s17", "tables-h200-g1"),
                                     ("results-v3s-h200g1s18", "tables-h200-g1"),
                                     ("results-v3s-h200x3s19", "tables-h200-g1"),
                                     ("results-v3s-h200x3s20", "tables-h200-g1"),
                                     ("results-v3s-h200s21", "tables-h200"),
                                     *((f"results-v3s-h200g4s14-7b-g{i}", "tables-gpu4-h200") for i in range(4)),
                                     ("results-v3s-h200g4s23", "tables-gpu4-h200"),
                                     ("results-v3s-h200s24", "tables-h200"),
                                     ("results-v3s-h200g4s25-7b", "tables-gpu4-h200"),
                                     ("results-v3s-h200g4s26-7b", "tables-gpu4-h200"),
                                     ("results-v3s-h200g4s27-7b", "tables-gpu4-h200"),
                                     ("results-v3s-h200g4s28-7b", "tables-gpu4-h200"),
                                     ("results-v3s-h200s24r", "tables-h200"),
                                     ("results-v3s-h200x3s20r", "tables-h200-g1"),
                                     ("results-v3s-h200x3s19r", "tables-h200-g1")),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3f",
                      gpus=(GpuCalibration("H200", "calibration-v3s-h200.json", H200_FIVE_LLM_ROUNDS,
                                           tuple(f"engine-h200/engine-tp2-s05-b{b}.json" for b in (8, 16, 32)),
                                           H200_TRACES, H200_WHOLE_GPU_TRACES, whole_gpu_per_request=True,
                                           prefill_at_bucket=True),)),
    "v3g": Generation(V3G_RESULTS + V3G_SHARE_RESULTS, "tables-v3", "results-v3", None, "calibration-v3g.json",
                      folder_tables=tuple((f, "tables-h200-g1") for f in V3G_RESULTS)
                      + tuple((f, "tables-h200-shares") for f in V3G_SHARE_RESULTS),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3s",
                      gpus=(V3G_H200,)),
    "v3h": Generation(V3H_RESULTS + V3H_X3_RESULTS, "tables-v3", "results-v3", None, "calibration-v3h.json",
                      folder_tables=tuple((f, "tables-h200-shares") for f in V3H_RESULTS)
                      + tuple((f, "tables-h200-g1") for f in V3H_X3_RESULTS),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3g",
                      gpus=(dataclasses.replace(V3G_H200, calibration="calibration-v3h-h200.json"),)),
    "v3i": Generation(V3I_X3_RESULTS + V3I_PAIR_RESULTS + V3I_TRACE_RESULTS, "tables-v3", "results-v3", None,
                      "calibration-v3i.json",
                      folder_tables=tuple((f, "tables-h200-g1") for f in V3I_X3_RESULTS + V3I_TRACE_RESULTS)
                      + tuple((f, "tables-h200-shares") for f in V3I_PAIR_RESULTS),
                      page_bench=("page-table-v3p/procs1.json", "page-table-v3p/procs4.json"), derives="v3h",
                      gpus=(dataclasses.replace(V3G_H200, calibration="calibration-v3i-h200.json",
                                                prefill_time_knee=V3I_TIME_KNEE_TRACES,
                                                own_partition_knees=V3I_TIME_KNEE_TRACES,
                                                own_prefill_decode_knee=(0.75, 430.0),
                                                eager_time_knee=V3I_TIME_KNEE_TRACES,
                                                whole_gpu_eager=V3I_WHOLE_GPU_EAGER_TRACES,
                                                combine_spill=V3I_COMBINE_SPILL_TRACES),)),
}


def fit_runs(gen: Generation) -> List[Tuple[str, str]]:
    """The runs ``gen``'s calibration (or one of its GPUs', ``gen.gpus``) was fitted on (folder, run name)."""
    return ([gen.fit] if gen.fit else []) + ([gen.fit_streams] if gen.fit_streams else []) + list(gen.fit_eager) + (
        [gen.fit_tp] if gen.fit_tp else []) + ([gen.fit_tp_wide] if gen.fit_tp_wide else []) + list(gen.fit_kv) + [
        r for r in gen.fit_prefill_trace if r not in gen.fit_eager] + list(gen.fit_whole_gpu) + (
        [gen.fit_contention_tp] if gen.fit_contention_tp else []) + list(dict.fromkeys(
        r for g in gen.gpus
        for r in g.traces + g.whole_gpu + g.partition_decode + g.own_decode_prefill + g.prefill_time_knee
        + g.own_partition_knees + g.eager_time_knee + g.whole_gpu_eager + g.combine_spill))


def is_fit_run(run: dict) -> bool:
    """Whether ``run`` is one its generation's calibration was fitted on (else it is held out)."""
    gen = generation_of(run["folder"])
    return gen is not None and (os.path.basename(os.path.normpath(run["folder"])), run["name"]) in fit_runs(gen)


def generation_of(folder: str) -> Optional[Generation]:
    """The engine generation whose runs ``folder`` holds (None: not re-predicted)."""
    name = os.path.basename(os.path.normpath(folder))
    return next((g for g in GENERATIONS.values() if name in g.results), None)


def calibration_for_gpu(gen: Generation, gpu: str) -> str:
    """``gen``'s calibration file for cost tables labelled ``gpu``: that GPU's (``gen.gpus``) once
    ``--calibrate`` has written it, else the generation's own."""
    for_gpu = [g.calibration for g in gen.gpus if g.gpu in gpu]
    return next((c for c in for_gpu if os.path.exists(os.path.join(LLM, c))), gen.calibration)


@functools.lru_cache(maxsize=None)
def tables_gpu(tables: str) -> str:
    """The ``gpu`` label of the cost tables in folder ``tables`` (one of its tables'; "" without one).
    Only cost tables count: the profiler's ``<model>.details.json`` beside them has no label (read
    first, it once gave the H100 calibration to H200 tables)."""
    from placement_opt.costs.costtable import FORMAT

    for path in sorted(glob.glob(os.path.join(tables, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            return str(doc.get("gpu", ""))
    return ""


def check_tables_gpu(run: dict, gen: Generation) -> None:
    """SystemExit naming ``run`` where the cost tables it is re-predicted with (:func:`tables_of`)
    are labelled another GPU than those its executor ran with (``summary.json``'s ``tables_gpu``,
    written since v3s): its calibration (:func:`calibration_file`) is picked by that label, so a
    label misread (once, the profiler's details file: ``tables_gpu``) would score it with another
    GPU's fields."""
    ran = run.get("summary", {}).get("tables_gpu")  # none for a run --predict makes before it runs
    if not ran:
        return
    label = folder_tables_gpu(run["folder"], gen)
    if not label or any(label not in g and g not in label for g in ran):
        raise SystemExit(f"{os.path.basename(os.path.normpath(run['folder']))}/{run['name']}: re-predicted with "
                         f"tables labelled {label or 'nothing'!r}, ran with tables of {', '.join(ran)}")


def calibration_file(gen: Generation, folder: Optional[str] = None) -> str:
    """``gen``'s calibration file for its results folder ``folder``: the one for the GPU its
    cost tables were measured on (:func:`tables_of`, :func:`calibration_for_gpu`)."""
    if folder is None:
        return gen.calibration
    return calibration_for_gpu(gen, folder_tables_gpu(folder, gen))


def folder_tables_gpu(folder: str, gen: Generation) -> str:
    """The ``gpu`` label of the cost tables ``gen``'s runs in results folder ``folder`` are
    re-predicted with (:func:`tables_of`, :func:`tables_gpu`)."""
    return tables_gpu(os.path.join(LLM, tables_of(folder, gen)))


def generation_model(gen: Generation, folder: Optional[str] = None) -> Dict[str, float]:
    """The host and contention parameters of ``gen``'s calibration file for the results folder
    ``folder`` (:func:`calibration_file`; all off without one)."""
    path = os.path.join(LLM, calibration_file(gen, folder))
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        cal = json.load(f)
    return model_fields(cal)


def results_folders() -> List[str]:
    """``results``, then ``results-v2``, ``results-v3``... (oldest first)."""
    found = [p for p in glob.glob(os.path.join(LLM, "results*")) if os.path.isdir(p)]
    return sorted(found, key=lambda p: (len(os.path.basename(p)), os.path.basename(p)))


def load_runs(results: str) -> List[dict]:
    """Every run under ``results``: its folder, name (sub-folder), workload, placement, policy, summary."""
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "**", "summary.json"), recursive=True)):
        with open(path) as f:
            s = json.load(f)
        rel = os.path.relpath(os.path.dirname(path), results).split(os.sep)
        workload, _, placement = rel[0].rpartition("-")  # <workload>-<placement>: the workload may hold a '-'
        workload = workload or placement
        runs.append({"folder": results, "name": "/".join(rel), "workload": workload, "placement": placement or rel[0],
                     "policy": s["policy"], "summary": s})
    return runs


def whole_trial(run: dict) -> bool:
    """Whether ``run`` measured its whole trial: it completed, or it was interrupted (a time cap's
    SIGINT) after its every request had finished, while its results were being saved. A trial
    cut short with requests unfinished is printed but counted nowhere: its throughput and
    attainment are of part of the workload."""
    s = run["summary"]
    if s["status"] == "complete":
        return True
    m = s.get("measured", {})
    return s["status"] == "interrupted" and m.get("unfinished") == 0 and m.get("finished") == m.get("requests")


def _worst(values: List[Optional[float]]) -> float:
    known = [abs(v) for v in values if v is not None]
    return max(known) if known else math.nan


#: Relative throughput difference below which two runs of one folder rank as tied (measurement
#: noise). The same warm run repeated on other workers (results-v3, -v3b, -v3c: the Poisson
#: muxserve placement under each policy) measured within 0.29% of itself (round-robin 6.145 and
#: 6.163 req/s; adbs 6.153-6.164; fcfs 6.162-6.163): 0.5% is that spread rounded up.
#: :func:`repeat_spreads` prints the spreads the committed runs show.
NOISE_TOLERANCE = 0.005


def _relation(a: float, b: float) -> int:
    """1 if ``a`` exceeds ``b`` by more than the noise tolerance, -1 if ``b`` exceeds ``a``, 0: tied."""
    if abs(a - b) <= NOISE_TOLERANCE * max(abs(a), abs(b)):
        return 0
    return 1 if a > b else -1


def _chain(items: Dict[str, Tuple[float, float]], which: int) -> str:
    """The items ordered by value ``which`` (best first), ``=`` between neighbours tied within
    the noise tolerance and ``>`` elsewhere."""
    order = sorted(items, key=lambda k: -items[k][which])
    text = order[0]
    for prev, k in zip(order, order[1:]):
        text += f" {'=' if _relation(items[prev][which], items[k][which]) == 0 else '>'} {k}"
    return text


def _pair_differences(items: Dict[str, Tuple[float, float]]) -> List[str]:
    """The pairs measured and simulated throughput order differently (none: the rankings agree;
    a pair agrees when both sides tie it, within :data:`NOISE_TOLERANCE`, or both order it the
    same way beyond it): ``a/b inverted`` where
    both sides order them beyond :data:`NOISE_TOLERANCE`, the opposite ways; ``a/b tied on one
    side`` where one side ties them and the other does not."""
    names, out = sorted(items), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            measured, simulated = _relation(items[a][0], items[b][0]), _relation(items[a][1], items[b][1])
            if measured != simulated:
                out.append(f"{a}/{b} {'inverted' if measured * simulated < 0 else 'tied on one side'}")
    return out


def repeat_spreads(runs: List[dict]) -> Dict[Tuple[str, str, str], Tuple[float, float, float]]:
    """Per (workload, placement, policy) measured complete in more than one folder: the relative
    spreads (max - min) / max of its measured throughput and of its measured mean TTFT, and the
    spread of its measured SLO attainment in points (the noise the tolerance must cover, and how
    far the GPU repeats itself; cold first trials included, so a spread may also hold the
    warm-up's effect)."""
    seen: Dict[Tuple[str, str, str], List[Tuple[float, float, float]]] = {}
    for r in runs:
        if whole_trial(r):
            key = (r["workload"], r["placement"], r["policy"])
            measured = r["summary"]["measured"]
            seen.setdefault(key, []).append((measured["throughput_rps"], measured["ttft_mean_s"],
                                             100.0 * measured["slo_attainment"]))

    def spread(values: List[float]) -> float:
        return (max(values) - min(values)) / max(values)

    return {k: (spread([x[0] for x in v]), spread([x[1] for x in v]), max(x[2] for x in v) - min(x[2] for x in v))
            for k, v in seen.items() if len(v) > 1}


def repeat_means(runs: List[dict]) -> Dict[Tuple[str, str, str, str], dict]:
    """Per (generation, workload, placement, policy) re-predicted in at least three runs of one
    engine: the simulated figures (one calibration, one prediction) against the measured runs'
    mean: the errors of the mean throughput and mean TTFT, the attainment's in points, and
    the runs' own attainment errors' range (where the GPU's repeats spread more than a target,
    the mean is the figure a deterministic simulator can be held to)."""
    groups: Dict[Tuple[str, str, str, str], List[dict]] = {}
    for r in runs:
        gen = generation_of(r["folder"])
        if gen is not None and "after" in r:
            name = next(k for k, g in GENERATIONS.items() if g is gen)
            groups.setdefault((name, r["workload"], r["placement"], r["policy"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        if len(rs) < 3:
            continue
        sim = rs[0]["after"]["simulated"]
        pp = [r["after"]["errors"]["slo_attainment_pp"] for r in rs]
        out[key] = {"runs": len(rs),
                    "throughput_err": float(np.mean([r["summary"]["measured"]["throughput_rps"] for r in rs]))
                    / sim["throughput_rps"] - 1,
                    "ttft_err": float(np.mean([r["summary"]["measured"]["ttft_mean_s"] for r in rs]))
                    / sim["ttft_mean_s"] - 1,
                    "attainment_pp": float(np.mean(pp)), "attainment_pp_range": (min(pp), max(pp))}
    return out


def _simulated_tput(run: dict) -> float:
    """The run's simulated throughput: re-predicted (after) where there is one, else committed."""
    return (run["after"] if "after" in run else run["summary"])["simulated"]["throughput_rps"]


def rankings(runs: List[dict]) -> Tuple[List[str], bool, bool]:
    """Per workload, placements (adbs or their own policy) and, for muxserve, policies ordered
    by measured and by simulated throughput (re-predicted where there is a prediction),
    differences within :data:`NOISE_TOLERANCE` counting as ties; returns the report lines,
    whether all agree and whether there was anything to compare."""
    lines, ok, compared = [], True, False
    for w in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == w and whole_trial(r)]
        placements = {r["placement"]: (r["summary"]["measured"]["throughput_rps"], _simulated_tput(r))
                      for r in mine if r["policy"] in ("adbs", "temporal")}
        policies = {r["policy"]: (r["summary"]["measured"]["throughput_rps"], _simulated_tput(r))
                    for r in mine if r["placement"] == "muxserve"}
        for what, items in (("placements", placements), ("policies", policies)):
            if len(items) < 2:
                continue
            compared = True
            differences = _pair_differences(items)
            ok &= not differences
            lines.append(f"{w} {what}: measured {_chain(items, 0)}; simulated {_chain(items, 1)}"
                         f"{'  DIFFER: ' + ', '.join(differences) if differences else ''}")
    return lines, ok, compared


def roofline(results: str) -> float:
    """The worst roofline fraction over batch 1-32 at context 512 (nan without results)."""
    path = os.path.join(results, "roofline.json")
    if not os.path.exists(path):
        return math.nan
    with open(path) as f:
        points = json.load(f)["points"]
    fr = [p["roofline_fraction_spec"] for p in points if p["context"] == 512 and p["batch"] <= 32
          and p["roofline_fraction_spec"] is not None]
    return min(fr) if fr else math.nan


def engine_lines(results: str) -> List[str]:
    """The engine micro-benchmark's summary per mechanism (none without ``engine.json``)."""
    path = os.path.join(results, "engine.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    lines = []
    for run in data["runs"]:
        per = run["per_llm"]
        overlap = "-" if run["overlap"] is None else f"{run['overlap']:.2f}"
        lines.append(f"engine {run['mechanism']} SMs {run['sm_counts']}: decode round {run['round_ms']:.1f} ms "
                     f"(alone: sum {run['sum_alone_ms']:.1f}, max {run['max_alone_ms']:.1f}; overlap {overlap}), "
                     f"aggregate {run['aggregate_gbps_together']:.0f} GB/s; host per step launch "
                     f"{max(p['launch_us'] for p in per):.0f} us, finish {max(p['finish_us'] for p in per):.0f} us; "
                     f"slowdown together {min(p['slowdown_together'] for p in per):.2f}-"
                     f"{max(p['slowdown_together'] for p in per):.2f}x")
    return lines


#: per GPU and SM layout (its label), the cost tables its LLMs at share 0.2 were profiled into, the
#: five-LLM engine rounds measured there and the calibration file whose KV term the simulator's
#: step takes (:func:`alone_over_table`): the H200's with v3s's sequential splits and with v3g's one split
ALONE_ROUNDS = (("H100", "tables-v3", ("engine-v3p/engine-b8.json", "engine-v3p/engine-b32.json"), "calibration-v3s.json"),
                ("H200", "tables-h200-g1", H200_FIVE_LLM_ROUNDS, "calibration-v3s-h200.json"),
                ("H200 one split", "tables-h200-g1", H200_ONE_SPLIT_ROUNDS, "calibration-v3g-h200.json"))


def step_alone_ms(p: dict) -> float:
    """An engine round's ``per_llm`` entry's step alone: its GPU time less its launch's host time
    (its start event is recorded before the launch, which the simulator models apart; the GPU may
    start the step's copies before the launch ends, so this is a lower bound)."""
    return p["gpu_ms"] - p["launch_us"] / 1e3


def timed_context(data: dict) -> float:
    """The context of an engine round's median timed step alone: the benchmark's contexts grow a
    token a step from ``context`` + 1, after three untimed steps."""
    return data["context"] + 1 + 3 + (data["steps"] - 1) / 2


def simulated_step_alone_ms(table: dict, share: float, batch: int, context: float, kv_bytes_per_token: float,
                            kv_gbps: float) -> Optional[float]:
    """The simulator's decode step alone on an SM partition: the cost table's (``tp`` "1" of a
    table file) at ``share`` and ``batch``, at ``context`` (linear between its points), plus the
    KV term (the step's KV bytes over ``kv_gbps``); None where the table lacks the share or batch."""
    if share not in table["sm_share"] or batch not in table["batch"]:
        return None
    row = table["decode_ms"][table["sm_share"].index(share)][table["batch"].index(batch)]
    at = float(np.interp(context, np.array(table["seq_len"], float), np.array(row, float)))
    return at + batch * context * kv_bytes_per_token / kv_gbps / 1e6


def alone_over_table(tables: str, rounds: Tuple[str, ...], calibration: str) -> Dict[str, List[float]]:
    """Per LLM, its decode step alone on an SM partition in each engine round of ``rounds``
    (green contexts; :func:`step_alone_ms`, a lower bound) over the simulator's step alone at that
    point (:func:`simulated_step_alone_ms` from ``tables`` at the round's SM share, batch and
    :func:`timed_context`, the KV term at ``calibration``'s ``decode_kv_gbps``). The contention
    fit (:func:`replay_round`) compares the rounds' raw times with each other instead, the launch
    on both sides. A round whose batch the table lacks is skipped. Above 1: the engine's step runs
    longer than the simulator's (docs/fidelity-llm.md "The contention rounds at larger
    batches")."""
    from placement_opt.model import Architecture

    with open(os.path.join(LLM, calibration)) as f:
        kv_gbps = json.load(f)["decode_kv_gbps"]
    out: Dict[str, List[float]] = {}
    for path in rounds:
        with open(os.path.join(LLM, path)) as f:
            data = json.load(f)
        with open(os.path.join(os.path.dirname(HERE), data["instance"])) as f:
            archs = {m["name"]: Architecture(**m["architecture"]) for m in json.load(f)["models"]}
        [per] = [r["per_llm"] for r in data["runs"] if r["mechanism"] == "green-contexts"]
        for p in per:
            with open(os.path.join(LLM, tables, f"{p['model']}.json")) as f:
                table = json.load(f)["tp"]["1"]
            simulated = simulated_step_alone_ms(table, data["share"], data["batch"], timed_context(data),
                                                archs[p["model"]].kv_bytes_per_token(), kv_gbps)
            if simulated is not None:
                out.setdefault(p["model"], []).append(step_alone_ms(p) / simulated)
    return out


def alone_over_table_lines() -> List[str]:
    """:func:`alone_over_table` per GPU and layout of :data:`ALONE_ROUNDS`, one line each."""
    lines = []
    for gpu, tables, rounds, calibration in ALONE_ROUNDS:
        ratios = alone_over_table(tables, rounds, calibration)
        lines.append(f"engine step alone over the simulator's, table and KV term ({gpu}, share 0.2, "
                     f"{len(rounds)} rounds): " + ", ".join(f"{m} {min(v):.2f}-{max(v):.2f}" for m, v in sorted(ratios.items())))
    return lines


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.3f}"


# ---------------------------------------------------------------- re-prediction


def run_inputs(run: dict) -> Tuple[str, str]:
    """The measured instance and the placement a run replayed: ``measured/<workload>.json`` and
    ``<workload>-<placement>.placement.json`` of ``instances/fidelity-llm/``, or of its
    sub-folder ``<set>`` for a workload ``<set>-<name>`` when that folder exists (the 2-GPU
    set: ``tp2-poisson`` is ``tp2/measured/poisson.json``)."""
    folder, workload = INSTANCES, run["workload"]
    prefix, _, rest = workload.partition("-")
    if rest and os.path.isdir(os.path.join(INSTANCES, prefix)):
        folder, workload = os.path.join(INSTANCES, prefix), rest
    return (os.path.join(folder, "measured", f"{workload}.json"),
            os.path.join(folder, f"{workload}-{run['placement']}.placement.json"))


def tables_of(folder: str, gen: Generation) -> str:
    """The cost-table folder of ``gen`` that the runs of results folder ``folder`` use."""
    return dict(gen.folder_tables).get(os.path.basename(os.path.normpath(folder)), gen.tables)


def cost_table_paths(refs: Dict[str, str], inst_dir: str, tables: str) -> Dict[str, str]:
    """Each model's table in folder ``tables`` where it has one, else the instance's own
    reference ``refs[model]`` (relative to ``inst_dir``), as absolute paths."""
    return {m: (os.path.join(tables, f"{m}.json") if os.path.exists(os.path.join(tables, f"{m}.json"))
                else os.path.normpath(os.path.join(inst_dir, ref))) for m, ref in refs.items()}


@functools.lru_cache(maxsize=None)
def generation_instance(inst_path: str, gen: Optional[Generation], folder: str = "") -> Any:
    """The measured instance with the cost tables of ``gen`` for the runs of ``folder`` (a
    model without a table there keeps the instance's own; as committed without a generation).
    Cached: the fits predict the same run many times, and callers only ``replace`` it."""
    from placement_opt.instance import instance_from_dict, load_instance

    if gen is None:
        return load_instance(inst_path)
    with open(inst_path) as f:
        data = json.load(f)
    data["cost_tables"] = cost_table_paths(data["cost_tables"], os.path.dirname(inst_path),
                                           os.path.join(LLM, tables_of(folder, gen)))
    # paths (traces, the new tables) resolve against the original's folder
    return instance_from_dict(data, base_dir=os.path.dirname(os.path.abspath(inst_path)), path=inst_path)


def predict(run: dict, model: Optional[Dict[str, float]], probed: bool = False,
            host: Optional[Dict[int, List[Optional[float]]]] = None) -> Tuple[dict, float]:
    """The current simulator's metrics of ``run`` (:func:`simulate_run`) and the measured SLO
    attainment re-scored against that instance's SLOs."""
    sim, inst = simulate_run(run, model, probed, host)
    return sim, measured_attainment(inst, run)


def probe_host(run: dict) -> Optional[Dict[int, List[Optional[float]]]]:
    """The decode host seconds the executor's host probe measured before ``run`` (per group,
    per LLM; ``summary.json``'s ``host_probe``), None for a run made without the probe."""
    probe = run.get("summary", {}).get("host_probe")
    return None if probe is None else {int(g): v["decode_host_s"] for g, v in probe.items()}


def in_run_host(run: dict) -> Optional[Dict[int, List[Optional[float]]]]:
    """The decode host seconds ``run``'s own steps took, per group that runs one job at a time,
    per LLM: the executor's reading (:func:`~placement_opt.executor.llm_run.read_trial_host`) of
    ``requests.csv``'s token times, beside the step the run's generation models (its calibration
    and tables; the executor's own ``host_in_run``, written since, reads beside its measured
    instance's, the same where that carries the calibration); None where no group has them.
    SystemExit naming the file where it names an LLM the instance lacks or a field is malformed."""
    from placement_opt.executor.llm_run import read_trial_host
    from placement_opt.placement import load_placement
    from placement_opt.workload import Requests

    inst = run_instance(run, None)
    placement = load_placement(run_inputs(run)[1])
    policy = run["summary"].get("policy") or run_policy(run, inst, placement)
    rows = sorted(request_rows(run), key=lambda r: int(r["request"]))
    index = {name: k for k, name in enumerate(inst.model_names)}
    try:
        req = Requests(arrival=np.array([float(r["arrival_s"]) for r in rows]),
                       model=np.array([index[r["model"]] for r in rows], dtype=np.int32),
                       deadline=np.zeros(len(rows)), duration_s=float(run["summary"]["duration_s"]),
                       prompt_tokens=np.array([int(r["prompt_tokens"]) for r in rows], dtype=np.int64),
                       output_tokens=np.array([int(r["output_tokens"]) for r in rows], dtype=np.int64))
        host = read_trial_host(inst, placement, req, policy, [[float(t) for t in r["token_times_s"].split()]
                                                              for r in rows],
                               [int(r["preemptions"]) > 0 for r in rows])
    except (KeyError, ValueError, IndexError) as e:
        raise SystemExit(f"{run_file(run, 'requests.csv')}: unreadable request rows "
                         f"({type(e).__name__}: {e})") from None
    return {g: v["decode_host_s"] for g, v in host.items()} or None


def simulate_run(run: dict, model: Optional[Dict[str, float]], probed: bool = False,
                 host: Optional[Dict[int, List[Optional[float]]]] = None) -> Tuple[dict, Any]:
    """The current simulator's metrics of ``run`` (the measured instance with the cost tables of
    the run's engine generation and the host and contention fields set to ``model``, ``{}``:
    all off; None: the generation's calibration; ``probed``: with the decode host seconds the
    run's host probe measured on its machine, :func:`probe_host`; ``host``: with these decode
    host seconds, as the simulator's ``decode_host`` takes them) and that instance."""
    from placement_opt.placement import load_placement
    from placement_opt.simulate.llm import simulate_llm

    inst = run_instance(run, model)
    policy = None if run["policy"] == "temporal" else run["policy"]
    if probed:
        if host is not None:
            raise ValueError("simulate_run: probed and host are two sources of one decode host time")
        host = probe_host(run)
    return simulate_llm(inst, load_placement(run_inputs(run)[1]), policy=policy, decode_host=host), inst


def run_instance(run: dict, model: Optional[Dict[str, float]]) -> Any:
    """``run``'s measured instance with its generation's cost tables and the host and
    contention fields set to ``model`` (as :func:`simulate_run` takes it)."""
    gen = generation_of(run["folder"])
    inst = generation_instance(run_inputs(run)[0], gen, run["folder"])
    if model is None and gen is not None:
        check_tables_gpu(run, gen)
        model = generation_model(gen, run["folder"])
    if model is not None:
        inst = dataclasses.replace(inst, llm=with_model(inst.llm_settings, model_fields(model)))
    return inst


def with_model(llm: Any, fields: Dict[str, float]) -> Any:
    """The LLM settings ``llm`` with the calibration ``fields`` set, each as its setting's declared
    type (``LLMConfig``'s default: a calibration file and ``--set`` hold numbers, and the flag
    ``prefill_at_longest`` is 0 or 1 there)."""
    defaults = LLMConfig()
    return dataclasses.replace(llm, **{f: type(getattr(defaults, f))(v) for f, v in fields.items()})


def parse_overrides(items: List[str]) -> Dict[str, float]:
    """``FIELD=VALUE`` items (the ``--set`` options of the trace scripts) as calibration fields;
    ValueError naming the item whose field is not one of :data:`MODEL_FIELDS` or whose value is
    not a number."""
    out = {}
    for item in items:
        field, _, value = item.partition("=")
        if field not in MODEL_FIELDS:
            raise ValueError(f"--set {item}: unknown field {field!r}")
        try:
            out[field] = float(value)
        except ValueError:
            raise ValueError(f"--set {item}: {value!r} is not a number") from None
    return out


#: the suffixes of a committed result file, compressed to keep the repository small (``xz -9e``;
#: the older ``gzip -n -9``), after the plain file a run writes
COMPRESSED = (".xz", ".gz")


def stored(path: str) -> str:
    """``path`` where it exists, else its compressed twin (:data:`COMPRESSED`) that exists, else
    ``path`` + the first suffix."""
    return next((p for p in [path] + [path + c for c in COMPRESSED] if os.path.exists(p)), path + COMPRESSED[0])


def open_text(path: str) -> Any:
    """A text file plain, xz- or gzip-compressed, by its suffix, opened for reading."""
    if path.endswith(".xz"):
        return lzma.open(path, "rt", newline="")
    return gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")


def run_file(run: dict, name: str) -> str:
    """The path of the file ``name`` of ``run``'s folder, or of its compressed twin where the
    folder is committed compressed (:func:`stored`)."""
    return stored(os.path.join(run["folder"], run["name"], name))


def read_csv(path: str) -> List[Dict[str, str]]:
    """The rows of a CSV file, plain or compressed (:func:`open_text`)."""
    with open_text(path) as f:
        return list(csv.DictReader(f))


def request_rows(run: dict) -> List[Dict[str, str]]:
    """The rows of ``run``'s ``requests.csv`` (every request, its token times)."""
    return read_csv(run_file(run, "requests.csv"))


def measured_attainment(inst: Any, run: dict) -> float:
    """The measured requests (``requests.csv``) scored against ``inst``'s per-request SLOs."""
    from placement_opt.llm_units import llm_specs
    from placement_opt.simulate.llm import _with_lengths, request_slo_seconds

    req = inst.requests()
    prompt, output = _with_lengths(inst, req)
    slo = request_slo_seconds(inst, llm_specs(inst), req, prompt, output)
    rows = sorted(request_rows(run), key=lambda r: int(r["request"]))
    if len(rows) != len(req) or not np.allclose([float(r["arrival_s"]) for r in rows], req.arrival, atol=1e-5):
        raise SystemExit(f"{run['name']}: requests.csv does not replay {run_inputs(run)[0]}'s workload")
    finish = np.array([float(r["finish_s"]) if r["finish_s"] not in ("", None) else -1.0 for r in rows])
    ok = (finish >= 0) & (finish - req.arrival <= slo * (1 + 1e-12))
    return float(ok.mean()) if len(rows) else 1.0


def errors(measured: dict, simulated: dict, attain_measured: Optional[float] = None) -> Dict[str, Optional[float]]:
    """(measured - simulated) / simulated of throughput, the worst LLM's throughput, mean TTFT
    and TPOT; attainment difference in points (measured one re-scored when given)."""
    def rel(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return None if a is None or not b else (a - b) / b

    per = [rel(m["throughput_rps"], simulated["per_model"][n]["throughput_rps"])
           for n, m in measured["per_model"].items()]
    attain = measured["slo_attainment"] if attain_measured is None else attain_measured
    return {"throughput_err": rel(measured["throughput_rps"], simulated["throughput_rps"]),
            "max_llm_err": max((abs(x) for x in per if x is not None), default=None),
            "ttft_err": rel(measured["ttft_mean_s"], simulated["ttft_mean_s"]),
            "tpot_err": rel(measured["tpot_mean_s"], simulated["tpot_mean_s"]),
            "slo_attainment_pp": 100.0 * (attain - simulated["slo_attainment"])}


def repredict(runs: List[dict]) -> None:
    """Add ``before`` / ``after`` predictions and errors to every run of an engine in use (and
    ``probe`` with the host probe's reading, ``in-run`` with the run's own steps' host time,
    :func:`in_run_host`, where it has them; a run whose measured instance or placement is not in
    the repository is left as committed)."""
    for r in runs:
        if generation_of(r["folder"]) is None or not whole_trial(r):
            continue
        missing = [p for p in run_inputs(r) if not os.path.exists(p)]
        if missing:
            print(f"{r['name']}: not re-predicted, {os.path.relpath(missing[0], os.path.dirname(HERE))} is missing")
            continue
        for label, model in (("before", {}), ("after", None)):
            sim, attain = predict(r, model)
            r[label] = {"simulated": sim, "errors": errors(r["summary"]["measured"], sim, attain)}
        if probe_host(r) is not None:
            sim, attain = predict(r, None, probed=True)
            r["probe"] = {"simulated": sim, "errors": errors(r["summary"]["measured"], sim, attain)}
        own = in_run_host(r)
        if own is not None:
            sim, attain = predict(r, None, host=own)
            r["in-run"] = {"simulated": sim, "errors": errors(r["summary"]["measured"], sim, attain), "host": own}


# ---------------------------------------------------------------- calibration


def replay_round(hbm_gbps: float, per_llm: List[dict], cap_gbps: float = 0.0, curve_gbps: float = 0.0,
                 curve_power: float = 2.0) -> List[float]:
    """The stretch model (the simulator's :func:`~placement_opt.simulate.meshsim.contention_stretch`
    at ``hbm_gbps``, the bandwidth cap ``cap_gbps`` and the loaded-latency curve ``curve_gbps``,
    ``curve_power``) on ``engine.json``'s round: the LLMs' steps launched one after another
    (each launch's host time apart), each alone taking its ``gpu_ms`` and demanding its
    ``bytes`` over it; returns each step's time from its launch to its end (ms)."""
    from placement_opt.simulate.meshsim import contention_stretch, offered_load, served_latency

    work = [p["gpu_ms"] for p in per_llm]
    demand = [p["bytes"] / p["gpu_ms"] / 1e6 for p in per_llm]  # GB/s
    start = list(np.cumsum([0.0] + [p["launch_us"] / 1e3 for p in per_llm[:-1]]))
    end: List[Optional[float]] = [None] * len(per_llm)
    t = 0.0
    while any(e is None for e in end):
        running = [i for i in range(len(work)) if start[i] <= t and end[i] is None]
        total = sum(demand[i] for i in running)
        loaded = served_latency(sum(offered_load(demand[i], curve_gbps, curve_power) for i in running),
                                curve_gbps, curve_power)
        stretch = {i: contention_stretch(total, demand[i], loaded, hbm_gbps, cap_gbps, curve_gbps, curve_power)
                   for i in running}
        t_next = min([start[i] for i in range(len(work)) if start[i] > t]
                     + [t + work[i] * stretch[i] for i in running])
        for i in running:
            work[i] -= (t_next - t) / stretch[i]
            if work[i] <= 1e-9:
                end[i] = t_next
        t = t_next
    return [float(e - s) for e, s in zip(end, start)]  # type: ignore[operator]


def fit_hbm(rounds: List[List[dict]]) -> Tuple[float, float]:
    """The ``contention_hbm_gbps`` (50 GB/s grid) whose replay best fits the measured times
    together over every round of ``rounds`` (least squares on log times); returns it and the RMS
    log error."""
    grid = np.arange(500.0, 10000.0, 50.0)
    best = (0.0, math.inf)
    for hbm in grid:
        rms = replay_rms(float(hbm), rounds, 0.0)
        if rms < best[1]:
            best = (float(hbm), rms)
    if best[0] in (grid[0], grid[-1]):
        raise ValueError(f"contention_hbm_gbps fitted at the edge of its grid ({best[0]:g} GB/s): widen the grid")
    return best


def engine_rounds(paths: Tuple[str, ...]) -> List[List[dict]]:
    """The green-context rounds (``per_llm``) of the engine micro-benchmark outputs ``paths``
    (relative to ``benchmarks/fidelity/llm``)."""
    rounds = []
    for path in paths:
        with open(os.path.join(LLM, path)) as f:
            rounds += [r["per_llm"] for r in json.load(f)["runs"] if r["mechanism"] == "green-contexts"]
    return rounds


def fit_contention(five: List[List[dict]], round_paths: Tuple[str, ...]
                   ) -> Tuple[float, float, float, float, List[List[dict]]]:
    """The contention model fitted on engine rounds: ``contention_hbm_gbps`` on the five-LLM rounds
    ``five`` (:func:`fit_hbm`) and ``contention_hbm_cap_gbps`` at it on ``five`` and the rounds of
    ``round_paths`` (:func:`fit_hbm_cap`; none: no cap); returns both with their RMS log errors and
    the rounds."""
    hbm, rms = fit_hbm(five)
    rounds = five + engine_rounds(round_paths)
    cap, cap_rms = fit_hbm_cap(hbm, rounds) if round_paths else (0.0, math.nan)
    return hbm, rms, cap, cap_rms, rounds


def fit_hbm_cap(hbm: float, rounds: List[List[dict]]) -> Tuple[float, float]:
    """``contention_hbm_cap_gbps`` (0: none, or a 50 GB/s grid) whose replay, with ``hbm``,
    best fits the measured times together over every round of ``rounds`` (least squares on log
    times); returns it and the RMS log error."""
    best = (0.0, math.inf)
    for cap in [0.0] + list(np.arange(1000.0, 6000.0, 50.0)):
        rms = replay_rms(hbm, rounds, float(cap))
        if rms < best[1]:
            best = (float(cap), rms)
    return best


#: the prefill-beside rounds (1 x H100, docs/fidelity-llm.md "Prefills beside decodes, modelled"):
#: ``prefill_rounds=PREFILL_ROUNDS`` on v3w reproduces that section's "with" column by ``--calibrate``
PREFILL_ROUNDS = tuple(f"engine-v3p/engine-{n}-pf.json" for n in ("tp2-s05-b16-c128", "tp2-s05-b16-c512",
                                                                  "tp2-s05-b16-c1024", "b8-c512"))


def prefills_beside(paths: Tuple[str, ...]) -> Tuple[np.ndarray, np.ndarray]:
    """(alone, beside) ms of every LLM's probe prefill in the green-context rounds of the
    ``engine_bench.py --prefill-beside`` outputs ``paths``: alone, and beside the other LLMs'
    decode steps (its own LLM not decoding)."""
    per = [p for r in engine_rounds(paths) for p in r]
    return (np.array([p["prefill_alone_ms"] for p in per]), np.array([p["prefill_beside_others_ms"] for p in per]))


def fit_prefill_beside(paths: Tuple[str, ...]) -> Tuple[float, float, float]:
    """(``prefill_beside_stretch``, ``prefill_beside_delay_s``) whose ``(1 + stretch) x alone +
    delay`` best fits the prefills beside the other LLMs' decodes of ``paths``
    (:func:`prefills_beside`; least squares on log times, stretch on a 0.01 grid, delay on a
    0.1 ms one) and the RMS log error."""
    alone, beside = prefills_beside(paths)
    best = (0.0, 0.0, math.inf)
    for stretch in np.arange(0.0, 2.0 + 1e-9, 0.01):
        for delay_ms in np.arange(0.0, 20.0 + 1e-9, 0.1):
            rms = float(np.sqrt(np.mean(np.log(((1 + stretch) * alone + delay_ms) / beside) ** 2)))
            if rms < best[2]:
                best = (round(float(stretch), 4), round(float(delay_ms) / 1e3, 6), rms)
    return best


def replay_rms(hbm: float, rounds: List[List[dict]], cap: float, curve_gbps: float = 0.0,
               curve_power: float = 2.0) -> float:
    """The RMS log error of the rounds' replayed times (:func:`replay_round`) at ``hbm``,
    ``cap`` (0: no cap) and the loaded-latency curve (0: off) against their measured times together."""
    measured = np.log([p["together_gpu_ms"] for per in rounds for p in per])
    replayed = np.log([x for per in rounds for x in replay_round(hbm, per, cap, curve_gbps, curve_power)])
    return float(np.sqrt(np.mean((replayed - measured) ** 2)))


def _host_ratios(engine: dict) -> Tuple[float, float]:
    """Host time of a job on plain streams (an LLM on the whole GPU) over its time on a green
    context, for decode steps (launch + collect) and prefill launches (medians over the LLMs)."""
    runs = {r["mechanism"]: r["per_llm"] for r in engine["runs"]}
    green, streams = runs["green-contexts"], runs["streams"]
    decode = [(s["launch_us"] + s["finish_us"]) / (g["launch_us"] + g["finish_us"]) for g, s in zip(green, streams)]
    prefill = [s["prefill_host_ms"] / g["prefill_host_ms"] for g, s in zip(green, streams)]
    return statistics.median(decode), statistics.median(prefill)


def fit_host(run: dict, hbm: float, floor: float, ratios: Tuple[float, float],
             kv_gbps: float = 0.0, shared: float = 0.0, entry_s: float = 0.0,
             cap: float = 0.0, beside: Tuple[float, float] = (0.0, 0.0)) -> Tuple[float, float, float]:
    """(decode, prefill) host seconds on SM partitions, on a grid (decode from ``floor`` in
    0.2 ms steps to 4 ms, prefill 0-80 ms in 4 ms steps), whose re-prediction of ``run`` (with
    the KV term ``kv_gbps``, the page-table fill at ``entry_s``, the contention model at
    ``hbm`` and ``cap`` and the prefills' stretch and delay beside other jobs ``beside``)
    has the smallest worst of |TPOT error| and |TTFT error|; returns them and that error."""
    best = (floor, 0.0, math.inf)
    for decode_host in np.arange(floor, 0.004 + 1e-12, 0.0002):
        for prefill_host in np.arange(0.0, 0.080 + 1e-12, 0.004):
            model = {"contention_hbm_gbps": hbm, "contention_hbm_cap_gbps": cap, "decode_host_s": float(decode_host),
                     "prefill_host_s": float(prefill_host), "decode_host_full_s": float(decode_host) * ratios[0],
                     "prefill_host_full_s": float(prefill_host) * ratios[1], "decode_kv_gbps": kv_gbps,
                     "own_prefill_decode_share": shared, "decode_page_entry_s": entry_s,
                     "prefill_beside_stretch": beside[0], "prefill_beside_delay_s": beside[1]}
            e = errors(run["summary"]["measured"], predict(run, model)[0])
            worst = max(abs(e["tpot_err"] or math.inf), abs(e["ttft_err"] or math.inf))
            if worst < best[2]:
                best = (float(decode_host), float(prefill_host), worst)
    return best


def fit_partition(run: dict, hbm: float, floor: float, ratios: Tuple[float, float], kv_gbps: float = 0.0,
                  shared: float = 0.0, entry_s: float = 0.0, cap: float = 0.0,
                  beside: Tuple[float, float] = (0.0, 0.0)) -> Tuple[float, float, float, float]:
    """SM-partition host and prefill model with the graph launch's hold measured: ``prefill_host_s``
    is the median silence before a graph prefill launch on ``run`` (:func:`prefill_launch_silences`),
    then (``decode_host_s``, ``prefill_partition_stretch``) on a grid (decode from ``floor`` in
    0.1 ms steps to 4 ms, stretch 1-3 in 0.05 steps) whose re-prediction of ``run`` has the
    smallest worst of |TPOT error| and |TTFT error| (``beside``: the prefill-beside stretch and delay
    it runs with); returns the three and that error."""
    graph_hold = round(statistics.median(prefill_launch_silences(run)[False]), 6)
    best = (floor, 1.0, math.inf)
    for decode_host in np.arange(floor, 0.004 + 1e-12, 0.0001):
        for stretch in np.arange(1.0, 3.0 + 1e-9, 0.05):
            model = {"contention_hbm_gbps": hbm, "contention_hbm_cap_gbps": cap, "decode_host_s": float(decode_host),
                     "prefill_host_s": graph_hold,
                     "decode_host_full_s": float(decode_host) * ratios[0], "prefill_host_full_s": graph_hold * ratios[1],
                     "decode_kv_gbps": kv_gbps, "own_prefill_decode_share": shared,
                     "prefill_partition_stretch": round(float(stretch), 4), "decode_page_entry_s": entry_s,
                     "prefill_beside_stretch": beside[0], "prefill_beside_delay_s": beside[1]}
            e = errors(run["summary"]["measured"], predict(run, model)[0])
            worst = max(abs(e["tpot_err"] or math.inf), abs(e["ttft_err"] or math.inf))
            if worst < best[2]:
                best = (float(decode_host), round(float(stretch), 4), worst)
    return round(best[0], 6), graph_hold, best[1], best[2]


def _mesh_step_tables(run: dict, at_shares: bool = False) -> Dict[str, Tuple[Any, int, float, int]]:
    """Per model of ``run``'s placement: its mesh's latency tables at share 1 (``at_shares``:
    at the SM shares the run's policy gives) as the simulator resamples them
    (:class:`LatencyTables`), its index on the mesh, its KV bytes per token per GPU (the
    simulator's ``MeshLLMs.kv_bytes``) and the pages one of its KV blocks takes in the mesh's
    pool (:func:`~placement_opt.llm_units.pages_per_block`)."""
    from placement_opt.llm_units import llm_specs, pages_per_block
    from placement_opt.simulate.llm import _mesh_tables, sm_shares
    from placement_opt.simulate.meshsim import LatencyTables

    inst, placement, policy = run_setup(run)
    specs = {s.name: s for s in llm_specs(inst)}
    out = {}
    for g in placement.groups:
        mesh = [specs[m] for m in g.models]
        shares = sm_shares(g, policy) if at_shares else [1.0] * len(mesh)
        prefill, decode, lgrid = _mesh_tables(mesh, g.tp, shares, inst.llm_settings.max_batch)
        for k, m in enumerate(g.models):
            out[m] = (LatencyTables(prefill=prefill, decode=decode, lgrid=lgrid.astype(np.float64)), k,
                      specs[m].kv_bytes_per_token / g.tp,
                      pages_per_block(specs[m].architecture, [s.architecture for s in mesh], g.tp))
    return out


def decode_waves(run: dict, attention_sms: int, on_partitions: bool = False) -> Dict[str, float]:
    """Per model of ``run``'s placement its decode wave (the simulator's
    :func:`~placement_opt.simulate.llm.decode_wave`) under ``llm.decode_attention_sms`` =
    ``attention_sms``, at the SM share the run's policy gives it (0 on a partition, unless
    ``on_partitions``: there as with a partition stretch, that count x the partition's SMs)."""
    from placement_opt.llm_units import llm_specs
    from placement_opt.simulate.llm import decode_wave, sm_shares

    inst, placement, policy = run_setup(run)
    cfg = dataclasses.replace(LLMConfig(), decode_attention_sms=attention_sms,
                              decode_partition_stretch=1.0 if on_partitions else 0.0)
    specs = {s.name: s for s in llm_specs(inst)}
    out = {}
    for g in placement.groups:
        for m, share in zip(g.models, sm_shares(g, policy)):
            out[m] = decode_wave(cfg, specs[m], share, g.tp)
    return out


def plain_stream_steps(run: dict, attention_sms: int = 0) -> np.ndarray:
    """The back-to-back decode steps of a plain-stream run (one job at a time per mesh: a temporal
    run, or a spatial one): over every pair of consecutive token events of one mesh that are
    decode steps of the same LLM (nothing ran on that mesh between them), (gap - the table time of
    the second step at its batch and mean context (with ``attention_sms``, ``llm.decode_attention_sms``,
    at its effective context: :func:`decode_waves`), the GB of KV cache per GPU that step reads, the
    mesh's TP degree, the entries of the step's page table: its requests' KV blocks x pages per
    block, that table time, its requests), one row per pair."""
    from placement_opt.executor.llm_sched import len_interp
    from placement_opt.simulate.meshsim import decode_context

    tables = _mesh_step_tables(run)
    waves = decode_waves(run, attention_sms)
    events = token_events(run)
    inst = generation_instance(run_inputs(run)[0], generation_of(run["folder"]), run["folder"])
    block = inst.llm_settings.kv_block_tokens
    steps = []
    for tp, (t0, m0), (t1, m1) in _consecutive_events(run, events):
        step, before = events[(t1, m1)], events[(t0, m0)]
        if m0 != m1 or any(j == 0 for _, j, _ in step + before):
            continue
        table, k, kv_bytes, pages = tables[m1]
        context = sum(p + j for p, j, _ in step)
        entries = pages * sum((p + j + block) // block for p, j, _ in step)  # blocks of context + 1 tokens
        length = decode_context(float(context), float(max(p + j for p, j, _ in step)), len(step), waves[m1])
        seconds = len_interp(table.decode[k, len(step)], table.lgrid, length)
        steps.append((t1 - t0 - seconds, context * kv_bytes / 1e9, tp, entries, seconds, len(step)))
    return np.array(steps, dtype=np.float64).reshape(-1, 6)


def _modelled_seconds(steps: np.ndarray, kv_gbps: float, power: float, entry_s: float,
                      stretch: float = 0.0, per_request: float = 0.0) -> np.ndarray:
    """The modelled excess of each of :func:`plain_stream_steps`' steps over its table time: its
    KV GB per GPU / the rate at its mesh's TP degree (``kv_gbps / tp**power``, the simulator's
    :func:`~placement_opt.simulate.llm.kv_read_gbps`; 0: off) or, on a one-GPU mesh with a decode
    ``stretch`` (``llm.decode_full_stretch``), its table time x (stretch - 1) in its place (the
    simulator's :func:`~placement_opt.simulate.llm.decode_stretch` at share 1: a plain-stream
    run's LLMs hold whole GPUs), there with its requests x ``per_request`` more
    (``llm.decode_full_request_s``); and its page-table entries x ``entry_s`` (the simulator's
    page-table fill)."""
    kv = steps[:, 1] * steps[:, 2] ** power / kv_gbps if kv_gbps > 0 else np.zeros(len(steps))
    if stretch > 0:
        kv = np.where(steps[:, 2] == 1, steps[:, 4] * (stretch - 1.0), kv)
    if per_request > 0:
        kv = kv + np.where(steps[:, 2] == 1, steps[:, 5] * per_request, 0.0)
    return kv + steps[:, 3] * entry_s


def plain_stream_decode_extra(runs: Sequence[dict], kv_gbps: float = 0.0, power: float = 0.0, entry_s: float = 0.0,
                              tp: Optional[int] = None, stretch: float = 0.0, attention_sms: int = 0,
                              per_request: float = 0.0) -> Tuple[float, int]:
    """Seconds a decode step takes beyond its table time (and beyond the KV term at ``kv_gbps``
    and TP power ``power``: ``llm.decode_kv_gbps``, ``decode_kv_tp_power``, or on one-GPU meshes
    beyond its table time x ``stretch`` and its requests x ``per_request``: ``decode_full_stretch``,
    ``decode_full_request_s``; and beyond its page-table fill
    at ``entry_s``: ``decode_page_entry_s``) on plain streams: the median over the
    :func:`plain_stream_steps` of ``runs`` (only the meshes of TP degree ``tp``; None: every
    mesh; ``attention_sms``: their table times at the effective context). Returns it and the
    number of steps. The median ignores the few steps that wait for a cold prefill's capture."""
    steps = np.vstack([plain_stream_steps(r, attention_sms) for r in runs])
    if tp is not None:
        steps = steps[steps[:, 2] == tp]
    if not len(steps):
        return math.nan, 0
    modelled = _modelled_seconds(steps, kv_gbps, power, entry_s, stretch, per_request)
    return float(np.median(steps[:, 0] - modelled)), len(steps)


#: the fewest back-to-back eager prefills a TP > 1 run needs to measure ``prefill_eager_host_tp_s``
MIN_EAGER = 5

#: the TP powers :func:`fit_kv_gbps` tries for ``llm.decode_kv_tp_power``
KV_TP_POWERS = tuple(np.round(np.arange(0.0, 3.0 + 1e-9, 0.25), 2))


def fit_kv_gbps(runs: List[dict], entry_s: float = 0.0) -> Tuple[float, float, float]:
    """``decode_kv_gbps`` and ``decode_kv_tp_power``: the one rate and TP power, shared by every
    model and run, at which the KV bytes a decode step reads add to its time (GB per GPU x
    tp**power / rate), fitted on the back-to-back steps of the plain-stream runs ``runs`` beyond
    their page-table fill at ``entry_s`` (least
    absolute deviations, each run with its own constant host time: the median of its residuals;
    grid of 1/rate in 0.01 ms/GB steps up to 2 ms/GB, 0 = off, and the powers
    :data:`KV_TP_POWERS`, 0 where the runs have one TP degree). Returns the rate (0: off fits
    best), the power and the mean absolute deviation (s)."""
    steps = [plain_stream_steps(r) for r in runs]
    degrees = {float(t) for s in steps for t in s[:, 2]}
    best = (0.0, 0.0, math.inf)
    for power in (KV_TP_POWERS if len(degrees) > 1 else (0.0,)):
        for ms_per_gb in np.arange(0.0, 2.0 + 1e-9, 0.01):
            rate = 1e3 / ms_per_gb if ms_per_gb > 0 else 0.0
            residuals = (s[:, 0] - _modelled_seconds(s, rate, power, entry_s) for s in steps)
            dev = np.concatenate([np.abs(r - np.median(r)) for r in residuals])
            if dev.mean() < best[2] - 1e-12:
                best = (rate, float(power) if rate > 0 else 0.0, float(dev.mean()))
    return best


def streams_host(gen: Generation, engine: dict, ratios: Tuple[float, float], partition: Tuple[float, float],
                 kv_gbps: float = 0.0, entry_s: float = 0.0) -> dict:
    """``decode_host_full_s`` and ``prefill_host_full_s`` (an LLM on the whole GPU, plain
    streams): measured on ``gen.fit_streams`` (decode: :func:`plain_stream_decode_extra` beyond
    the KV term at ``kv_gbps`` and the page-table fill at ``entry_s``; prefill: ``engine.json``'s median host time of a prefill launch
    on streams) where the generation has such a run, else the partition values ``partition``
    scaled by ``ratios``."""
    if gen.fit_streams is None:
        return {"decode_host_full_s": partition[0] * ratios[0], "prefill_host_full_s": partition[1] * ratios[1],
                "source": "partition values x streams / green-context host ratios"}
    decode, source = full_decode_host(gen.fit_streams, kv_gbps, entry_s)
    streams = next(r for r in engine["runs"] if r["mechanism"] == "streams")["per_llm"]
    prefill = statistics.median(p["prefill_host_ms"] for p in streams) / 1e3
    return {"decode_host_full_s": decode, "prefill_host_full_s": prefill,
            "source": f"{source}; prefill launch: engine.json streams"}


def full_decode_host(where: Tuple[str, str], kv_gbps: float, entry_s: float) -> Tuple[float, str]:
    """``decode_host_full_s`` measured on the plain-stream run ``where``: the median time its
    TP-1 decode steps take beyond the table, the KV term at ``kv_gbps`` and the page-table fill
    at ``entry_s`` (:func:`plain_stream_decode_extra`), and where it comes from."""
    decode, pairs = plain_stream_decode_extra([_find_run(where)], kv_gbps, 0.0, entry_s, tp=1)
    return decode, (f"{'/'.join(where)}: median decode-step time beyond the table"
                    f"{' and the KV term' if kv_gbps > 0 else ''}{' and the page-table fill' if entry_s > 0 else ''} "
                    f"over {pairs} back-to-back steps")


def _find_run(where: Tuple[str, str]) -> dict:
    """The run ``where`` = (results folder, run name)."""
    folder, name = where
    return next(r for r in load_runs(os.path.join(LLM, folder)) if r["name"] == name)


def find_run(spec: str) -> dict:
    """The run ``spec`` = ``RESULTS/RUN`` (a results folder under benchmarks/fidelity/llm and its
    run's sub-folder); ValueError saying which part is missing."""
    folder, _, name = spec.strip("/").partition("/")
    if not os.path.isdir(os.path.join(LLM, folder)):
        raise ValueError(f"{spec}: no results folder {folder!r} under {LLM}")
    run = next((r for r in load_runs(os.path.join(LLM, folder)) if r["name"] == name), None)
    if run is None:
        raise ValueError(f"{spec}: {folder} has no run {name!r}")
    return run


def traced_run(spec: str) -> dict:
    """The run ``spec`` (:func:`find_run`) made with the job trace; ValueError saying which part
    is missing."""
    run = find_run(spec)
    if not os.path.exists(run_file(run, "jobs.csv")):
        raise ValueError(f"{spec}: the run has no job trace (jobs.csv: made without --job-trace)")
    return run


def prefill_launch_silences(run: dict) -> Dict[bool, List[float]]:
    """The mesh-wide silences after prefill ends, by whether the next prefill runs eagerly:
    a prefill is the requests of one LLM whose first tokens come at one instant (0.5 ms), in
    time order; after each, the seconds until the next token of any request of the run (the
    scheduling thread launches the next prefill when it has collected one, so that silence is
    the launch's hold of the thread, where the next prefill waited). Keyed by whether that next
    prefill runs eagerly (the engine's rule, ``prefill_runs_eagerly`` at the default ``llm.prefill_graph_tokens``)."""
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    rows = [r for r in request_rows(run) if r["token_times_s"]]
    stamps = np.unique([float(t) for r in rows for t in r["token_times_s"].split()])
    prefills: List[Tuple[float, str, List[int]]] = []
    # the first token's time as ``token_times_s`` rounds it (the stamps compared with it)
    for first, model, prompt in sorted((float(r["token_times_s"].split()[0]), r["model"], int(r["prompt_tokens"]))
                                       for r in rows):
        if prefills and prefills[-1][1] == model and first - prefills[-1][0] < 5e-4:
            prefills[-1][2].append(prompt)
        else:
            prefills.append((first, model, [prompt]))
    out: Dict[bool, List[float]] = {False: [], True: []}
    for (end, _, _), (_, _, nxt) in zip(prefills, prefills[1:]):
        i = int(np.searchsorted(stamps, end + 1e-6))
        if i < len(stamps):
            out[bool(prefill_runs_eagerly(len(nxt), max(nxt), GRAPH_TOKENS))].append(float(stamps[i] - end))
    return out


#: the times of a job trace row (``jobs.csv``, ``placeopt execute --job-trace``), seconds
TRACE_TIMES = ("launch_s", "launched_s", "device_start_s", "device_end_s", "seen_s")
#: the fields of a job of the simulator's timeline (``executor.llm_run.simulated_jobs``' tuples), as
#: :func:`traced_jobs` names a measured job's
SIMULATED_JOB_COLUMNS = ("group", "llm", "kind", "requests", "longest_context", "context_tokens", *TRACE_TIMES)


def trace_has_contexts(run: dict) -> bool:
    """Whether ``run``'s job trace records each job's contexts summed (``context_tokens``, the
    column traces have had since results-v3f-tr2); :func:`traced_jobs` puts an upper bound in its
    place for the older ones."""
    path = run_file(run, "jobs.csv")
    with open_text(path) as f:
        return "context_tokens" in f.readline().strip().split(",")


def traced_jobs(run: dict) -> Optional[List[dict]]:
    """The rows of ``run``'s job trace (``jobs.csv`` or its compressed twin, :func:`stored`), times
    as floats, the group (the placement's group index) and counts as ints (``context_tokens``,
    the job's contexts summed, is requests x longest context in traces made before it was
    recorded: :func:`trace_has_contexts`); None for a run without the trace."""
    path = run_file(run, "jobs.csv")
    if not os.path.exists(path):
        return None
    rows = read_csv(path)
    for r in rows:
        for c in TRACE_TIMES:
            r[c] = float(r[c])
        r["group"], r["requests"], r["longest_context"] = int(r["group"]), int(r["requests"]), int(r["longest_context"])
        # traces before the column: an upper bound, every request at the longest context
        r["context_tokens"] = int(r.get("context_tokens") or r["requests"] * r["longest_context"])
    return rows


def traced_table_seconds(run: dict, jobs: List[dict], at_bucket: bool = False) -> List[float]:
    """Per job of a trace its table time alone at its LLM's SM share, batch and longest context
    (the trace keeps no mean context); with ``at_bucket`` a graph prefill's at its CUDA-graph
    bucket (``llm.prefill_at_bucket``: :func:`~placement_opt.simulate.meshsim.prefill_point`)."""
    from placement_opt.executor.llm_sched import len_interp
    from placement_opt.simulate.meshsim import prefill_point, prefill_runs_eagerly

    tables = _mesh_step_tables(run, at_shares=True)
    out = []
    for j in jobs:
        table, k = tables[j["llm"]][:2]
        rows = table.prefill[k] if j["kind"] == "prefill" else table.decode[k]
        n, longest, last = j["requests"], j["longest_context"], rows.shape[0] - 1
        if j["kind"] == "prefill":
            eager = at_bucket and bool(prefill_runs_eagerly(n, longest, GRAPH_TOKENS))
            row, length = prefill_point(n, longest, float(n * longest), eager, True, at_bucket, last)
        else:
            row, length = min(n, last), float(longest)
        out.append(len_interp(rows[row], table.lgrid, length))
    return out


def traced_launch_holds(run: dict) -> Optional[Dict[bool, List[float]]]:
    """The host seconds of every prefill launch ``run``'s job trace recorded (``jobs.csv``,
    ``placeopt execute --job-trace``), by whether the prefill ran eagerly (the engine's rule);
    None for a run without the trace."""
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    jobs = traced_jobs(run)
    if jobs is None:
        return None
    out: Dict[bool, List[float]] = {False: [], True: []}
    for j in jobs:
        if j["kind"] == "prefill":
            eager = bool(prefill_runs_eagerly(j["requests"], j["longest_context"], GRAPH_TOKENS))
            out[eager].append(j["launched_s"] - j["launch_s"])
    return out


def eager_launch_hold(run: dict) -> Tuple[float, str]:
    """``prefill_eager_hold_s``: how much longer the scheduling thread is held by an eager
    prefill's launch than by a CUDA-graph one on ``run`` (an SM-partition run with eager
    prefills): measured directly where the run has a job trace (the median host time of its
    eager launches less that of its graph ones, :func:`traced_launch_holds`), else the median
    silence after a prefill end when the next prefill runs eagerly less that when it replays a
    graph (:func:`prefill_launch_silences`)."""
    traced = traced_launch_holds(run)
    if traced is not None and traced[True] and traced[False]:
        eager, graph = statistics.median(traced[True]), statistics.median(traced[False])
        return eager - graph, (f"{os.path.basename(run['folder'])}/{run['name']}: job trace, median host time of "
                               f"an eager prefill launch {1e3 * eager:.1f} ms ({len(traced[True])}), of a graph one "
                               f"{1e3 * graph:.1f} ms ({len(traced[False])})")
    silences = prefill_launch_silences(run)
    eager, graph = statistics.median(silences[True]), statistics.median(silences[False])
    return eager - graph, (f"{os.path.basename(run['folder'])}/{run['name']}: median silence after a prefill end "
                           f"{1e3 * eager:.1f} ms before an eager launch ({len(silences[True])}), "
                           f"{1e3 * graph:.1f} ms before a graph one ({len(silences[False])})")


def add_trace_arguments(ap: argparse.ArgumentParser, model: str = "the simulated timeline") -> None:
    """The trace scripts' shared arguments: the runs (``RESULTS/RUN``, made with ``--job-trace``)
    and ``--set FIELD=VALUE``, a calibration field of ``model`` (read by :func:`trace_script_inputs`)."""
    ap.add_argument("runs", nargs="+", help="RESULTS/RUN: a run made with --job-trace")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                    help=f"a calibration field for {model} (one of {', '.join(MODEL_FIELDS)})")


def trace_script_inputs(ap: argparse.ArgumentParser, specs: List[str], items: List[str]
                        ) -> Tuple[List[Tuple[str, dict]], Dict[str, float]]:
    """The trace scripts' runs (``RESULTS/RUN`` each, :func:`traced_run`) and ``--set``
    calibration fields (:func:`parse_overrides`); bad input ends the script through ``ap``
    (one line, exit 2)."""
    try:
        return [(spec, traced_run(spec)) for spec in specs], parse_overrides(items)
    except ValueError as e:
        ap.error(str(e))
        raise  # ap.error exits


def traced_instance(run: dict, overrides: Dict[str, float]) -> Any:
    """``run``'s instance as the trace scripts simulate it: its generation's tables and
    calibration (:func:`run_instance`) or, for a folder of no generation, the committed
    instance, with the calibration fields ``overrides`` set."""
    gen = generation_of(run["folder"])
    if gen is not None:
        return run_instance(run, dict(generation_model(gen, run["folder"]), **overrides))
    inst = run_instance(run, None)
    return dataclasses.replace(inst, llm=with_model(inst.llm_settings, overrides)) if overrides else inst


def requests_by_id(run: dict) -> Tuple[List[Dict[str, str]], np.ndarray, np.ndarray]:
    """``run``'s request rows in request order, their arrival times and their measured first
    tokens (-1: none)."""
    rows = sorted(request_rows(run), key=lambda r: int(r["request"]))
    arrival = np.array([float(r["arrival_s"]) for r in rows])
    first = np.array([float(r["first_token_s"]) if r["first_token_s"] not in ("", "dropped") else -1.0 for r in rows])
    return rows, arrival, first


def run_policy(run: dict, inst: Any, placement: Any) -> str:
    """The policy ``run`` ran under (its placement's or instance's own for a temporal run)."""
    from placement_opt.simulate.llm import resolve_policy

    return resolve_policy(inst, placement, None if run["policy"] == "temporal" else run["policy"])


def run_setup(run: dict) -> Tuple[Any, Any, str]:
    """What ``run`` replayed: its measured instance with its generation's tables
    (:func:`generation_instance`), its placement and the policy it ran under (:func:`run_policy`)."""
    from placement_opt.placement import load_placement

    inst_path, placement_path = run_inputs(run)
    inst = generation_instance(inst_path, generation_of(run["folder"]), run["folder"])
    placement = load_placement(placement_path)
    return inst, placement, run_policy(run, inst, placement)


def simulated_run_jobs(run: dict, inst: Any, clock: Any = None) -> Tuple[List[tuple], np.ndarray]:
    """The simulator's job timeline of ``run``'s requests on ``inst`` and every request's first
    token in it (``executor.llm_run.simulated_jobs``; ``clock``: its job timing instead of the
    model's, as that function takes it)."""
    from placement_opt.executor.llm_run import simulated_jobs
    from placement_opt.placement import load_placement

    placement = load_placement(run_inputs(run)[1])
    return simulated_jobs(inst, placement, inst.requests(), run_policy(run, inst, placement), clock=clock)


def simulated_run_rows(run: dict, inst: Any) -> Tuple[List[dict], np.ndarray]:
    """:func:`simulated_run_jobs`' timeline as rows named as :func:`traced_jobs` names a measured
    job's (:data:`SIMULATED_JOB_COLUMNS`), and every request's first token in it."""
    jobs, first = simulated_run_jobs(run, inst)
    return [dict(zip(SIMULATED_JOB_COLUMNS, j)) for j in jobs], first


#: the columns of :func:`traced_partition_prefills`
PREFILL_COLUMNS = ("table_s", "gpu_s", "others_gbps", "host_s", "decoding", "tokens", "eager", "share")


def traced_partition_prefills(run: dict, at_bucket: bool = False) -> np.ndarray:
    """One row per prefill on an SM partition in ``run``'s job trace (:data:`PREFILL_COLUMNS`):
    its table time alone, its GPU time, the HBM demand in GB/s of the other jobs of its mesh on
    the GPU while it ran and the requests in their decode steps (both time-weighted), its
    launch's host seconds, its padded prompt tokens (requests x longest context), whether it
    ran eagerly (1) or as a CUDA graph (0) and its LLM's SM share. A job's demand is counted about as the simulator's
    contention model counts it: its bytes per GPU (weights, and the KV of its requests'
    contexts: :func:`traced_jobs`' ``context_tokens``) over its table time (the model: over its
    time alone, which adds the KV read and, on TP meshes, the prefill's collect; likewise the
    kernel stretches a prefill's table time and collect together, where the table time here has
    no collect: the same on TP-1 meshes, as ``PREFILL_TRACES``'; ``at_bucket``: the table time at
    a graph prefill's bucket, :func:`traced_table_seconds`); ValueError for a run without the trace."""
    rows = [(table, took, float(np.dot(overlap, demand)) / took, host, float(np.dot(overlap, decoding)) / took,
             tokens, eager, share)
            for table, took, overlap, _, host, tokens, eager, demand, decoding, share, _
            in _partition_prefills(run, at_bucket)]
    return np.array(rows).reshape(-1, len(PREFILL_COLUMNS))


def traced_demand(jobs: List[dict], specs: Dict[str, Any], tp: Sequence[int], seconds: Sequence[float]) -> np.ndarray:
    """Per traced job (:func:`traced_jobs`' rows) its HBM demand in GB/s per GPU, about as the
    simulator's contention model counts it: its LLM's weights and the KV of its contexts
    (``context_tokens``) over its mesh's TP degree ``tp`` and over ``seconds``, its time alone
    (0 where that is 0); ``specs``: the LLMs' :class:`~placement_opt.llm_units.LLMSpec` by name."""
    return np.array([(specs[j["llm"]].weight_bytes + specs[j["llm"]].kv_bytes_per_token * j["context_tokens"])
                     / n / t / 1e9 if t > 0 else 0.0 for j, n, t in zip(jobs, tp, seconds)])


def _partition_prefills(run: dict, at_bucket: bool = False) -> Iterator[tuple]:
    """Per prefill on an SM partition in ``run``'s job trace: its table seconds, GPU seconds, the
    seconds each job of the trace overlapped it on its mesh (itself 0), a mask of its own LLM's
    jobs, its launch's host seconds, padded prompt tokens and whether it ran eagerly (1.0), the
    trace's per-job HBM demand (GB/s) and decode requests, its LLM's SM share and its LLM's name
    (:func:`traced_partition_prefills`; ``at_bucket``: table times at graph prefills' buckets);
    ValueError for a run without the trace."""
    from placement_opt.llm_units import llm_specs
    from placement_opt.simulate.llm import on_partition, sm_shares
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    jobs = traced_jobs(run)
    if jobs is None:
        raise ValueError(f"{os.path.basename(run['folder'])}/{run['name']}: the run has no job trace (jobs.csv)")
    inst, placement, policy = run_setup(run)
    specs = {s.name: s for s in llm_specs(inst)}
    share, tp = {}, {}
    for gi, g in enumerate(placement.groups):
        for m, sh in zip(g.models, sm_shares(g, policy)):
            share[(gi, m)], tp[(gi, m)] = sh, g.tp
    table = np.array(traced_table_seconds(run, jobs, at_bucket))
    demand = traced_demand(jobs, specs, [tp[(j["group"], j["llm"])] for j in jobs], table)
    decoding = np.array([j["requests"] if j["kind"] == "decode" else 0 for j in jobs], dtype=float)
    start = np.array([j["device_start_s"] for j in jobs])
    end = np.array([j["device_end_s"] for j in jobs])
    group = np.array([j["group"] for j in jobs])
    llm = np.array([j["llm"] for j in jobs])
    for i, j in enumerate(jobs):
        if j["kind"] != "prefill" or not on_partition(share[(j["group"], j["llm"])]) or end[i] <= start[i]:
            continue
        overlap = np.clip(np.minimum(end, end[i]) - np.maximum(start, start[i]), 0.0, None) * (group == group[i])
        overlap[i] = 0.0
        yield (table[i], end[i] - start[i], overlap, llm == j["llm"], j["launched_s"] - j["launch_s"],
               j["requests"] * j["longest_context"],
               float(prefill_runs_eagerly(j["requests"], j["longest_context"], GRAPH_TOKENS)), demand, decoding,
               share[(j["group"], j["llm"])], j["llm"])


#: the columns of :func:`traced_own_decode_prefills`
OWN_PREFILL_COLUMNS = ("table_s", "gpu_s", "others_gbps", "others_decoding", "own_fraction", "tokens", "eager",
                       "own_gbps", "own_decoding", "share")


def traced_own_decode_prefills(run: dict, at_bucket: bool = False) -> np.ndarray:
    """One row per prefill on an SM partition in ``run``'s job trace (:data:`OWN_PREFILL_COLUMNS`),
    as :func:`traced_partition_prefills` but with its own LLM's decode steps apart: the HBM demand
    and decode requests of the *other* LLMs' jobs of its mesh beside it (time-weighted), the
    part of its GPU time its own LLM's decode steps ran beside it (on the same SM partition),
    their demand and requests likewise (with the others', :func:`traced_partition_prefills`'
    columns), and its LLM's SM share (``at_bucket``: table times at graph prefills' buckets)."""
    return traced_own_decode_prefills_by_llm(run, at_bucket)[0]


def traced_own_decode_prefills_by_llm(run: dict, at_bucket: bool = False) -> Tuple[np.ndarray, List[str]]:
    """:func:`traced_own_decode_prefills`' rows and each one's LLM name."""
    rows, names = [], []
    for (table, took, overlap, own, _, tokens, eager, demand, decoding, share,
         name) in _partition_prefills(run, at_bucket):
        others, mine = overlap * ~own, overlap * own
        rows.append((table, took, float(np.dot(others, demand)) / took, float(np.dot(others, decoding)) / took,
                     float(np.sum(mine)) / took, tokens, eager, float(np.dot(mine, demand)) / took,
                     float(np.dot(mine, decoding)) / took, share))
        names.append(name)
    return np.array(rows).reshape(-1, len(OWN_PREFILL_COLUMNS)), names


def own_decode_part(share: float, tokens: np.ndarray, knee: float) -> Any:
    """The part of its speed a prefill of ``tokens`` padded prompt tokens keeps beside its own
    decode step: ``share``, its loss over ``1 + tokens / knee`` where ``knee`` is set (the
    simulator's :func:`~placement_opt.simulate.meshsim.own_decode_prefill_speed` on arrays)."""
    return 1.0 - (1.0 - share) / (1.0 + tokens / knee) if knee > 0 else share


def own_decode_prefill_model(points: np.ndarray, fields: Dict[str, float]) -> np.ndarray:
    """The GPU seconds of :func:`traced_own_decode_prefills`' ``points`` in mean-value form of the
    kernel's :func:`~placement_opt.simulate.meshsim.prefill_factor_beside`: the stretch beside the
    other LLMs' jobs (``prefill_beside_gbps``, ``_requests``, ``_knee_tokens``, ``_knee_s``, ``_share_power`` at
    the LLM's SM share, ``_delay_s``) while any ran (:func:`prefill_trace_model` of those), over the speed ``1 - f + f x share`` for the
    part f of the time its own decode step ran (``own_decode_prefill_share``; the part it loses over
    ``1 + tokens / own_decode_prefill_knee_tokens`` where that is set)."""
    table, gpu, others, decoding, own, tokens, eager, _, _, sm_share = points.T
    share, knee = fields["own_decode_prefill_share"], fields.get("own_decode_prefill_knee_tokens", 0.0)
    part = own_decode_part(share, tokens, knee)
    speed = 1.0 - own + own * part if share > 0 else 1.0
    beside_others = np.column_stack([table, gpu, others, np.zeros(len(table)), decoding, tokens, eager, sm_share])
    return prefill_trace_model(beside_others, fields) / speed


#: the values ``own_decode_prefill_share`` is fitted among (:func:`fit_own_decode_prefill`)
OWN_DECODE_SHARES = tuple(round(0.01 * i, 2) for i in range(20, 100))
#: the values ``prefill_beside_share_power`` is fitted among (:func:`fit_own_decode_prefill`)
BESIDE_SHARE_POWERS = tuple(round(0.05 * i, 2) for i in range(0, 31))


def traced_graph_prefills(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float],
                          eager: bool = False) -> np.ndarray:
    """The graph prefills (``eager``: the eager ones instead) on SM partitions of ``runs``' job
    traces (:func:`traced_own_decode_prefills`' rows, their table times at their buckets where
    ``fields`` sets ``prefill_at_bucket``); ValueError where there is none."""
    at_bucket = bool(fields.get("prefill_at_bucket", False))
    points = np.vstack([traced_own_decode_prefills(_find_run(r), at_bucket) for r in runs])
    points = points[points[:, OWN_PREFILL_COLUMNS.index("eager")] == int(eager)]
    if not len(points):
        raise ValueError(f"{', '.join(f'{f}/{n}' for f, n in runs)}: no {'eager' if eager else 'graph'} prefill "
                         "on an SM partition traced")
    return points


def fit_own_decode_prefill(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                           ) -> Tuple[Dict[str, float], float, float, int]:
    """``own_decode_prefill_share`` and the stretch beside the other LLMs' jobs
    (``prefill_beside_gbps``, ``prefill_beside_requests``, ``prefill_beside_share_power``)
    measured on the graph prefills on SM partitions of ``runs``' job traces
    (:func:`traced_own_decode_prefills`), the knee and delay kept from ``fields``
    (:func:`fit_prefill_trace`'s): per share of :data:`OWN_DECODE_SHARES` and power of
    :data:`BESIDE_SHARE_POWERS` the pair by least squares on the relative error (at least 0),
    the share and power of least RMS log error kept (:func:`own_decode_prefill_model`). Returns
    those four fields, the RMS log error with them and with ``fields`` (the own decode step
    counted as any other job, :func:`prefill_trace_model`), and the number of prefills. The table
    times are at the graph prefills' buckets where ``fields`` sets ``prefill_at_bucket``."""
    points = traced_graph_prefills(runs, fields)
    table, gpu, others, decoding, own, tokens, eager, own_gbps, own_decoding, sm_share = points.T
    # the same prefills with the own decode step as any other job (traced_partition_prefills' columns)
    before = np.column_stack([table, gpu, others + own_gbps, np.zeros(len(table)), decoding + own_decoding, tokens,
                              eager, sm_share])
    beside = (others > 0) | (decoding > 0)
    knee, delay = fields["prefill_beside_knee_tokens"], fields["prefill_beside_delay_s"]
    x = np.stack([others, decoding]) * beside / (1.0 + tokens / knee if knee > 0 else 1.0)
    best: Tuple[float, Dict[str, float]] = (math.inf, {})
    for power in BESIDE_SHARE_POWERS:
        x_power = x * sm_share ** power
        for share in OWN_DECODE_SHARES:
            c = table / ((1.0 - own + own * share) * gpu - delay * beside)  # model / measured = c (1 + a x0 + b x1)
            a, b = _nonnegative_pair(x_power * c, 1.0 - c)
            trial = dict(fields, prefill_beside_gbps=round(1.0 / a, 1) if a > 0 else 0.0,
                         prefill_beside_requests=round(1.0 / b, 2) if b > 0 else 0.0, own_decode_prefill_share=share,
                         prefill_beside_share_power=power)
            rms = float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, trial) / gpu) ** 2)))
            if rms < best[0]:
                best = (rms, trial)
    rms_before = float(np.sqrt(np.mean(np.log(prefill_trace_model(before, fields) / before[:, 1]) ** 2)))
    keep = ("prefill_beside_gbps", "prefill_beside_requests", "own_decode_prefill_share", "prefill_beside_share_power")
    return {k: best[1][k] for k in keep}, best[0], rms_before, len(points)


def apply_own_decode_prefill_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s ``own_decode_prefill_share`` and its stretch beside the other
    LLMs' jobs to those measured on ``runs``' job traces (:func:`fit_own_decode_prefill`, the knee
    and delay ``out``'s); returns the fields set."""
    fields, rms, before, count = fit_own_decode_prefill(runs, out)
    out.update(fields)
    out["fit"]["own_decode_prefill"] = (
        f"{', '.join(f'{f}/{n}' for f, n in runs)}: job traces, {count} graph prefills on SM partitions: GPU time = "
        f"table time x (1 + (other LLMs' HBM demand / {fields['prefill_beside_gbps']:.0f} GB/s + requests in their "
        f"decode steps / {fields['prefill_beside_requests']:.1f}) / (1 + prompt tokens / "
        f"{out['prefill_beside_knee_tokens']:.0f}) x SM share ** {fields['prefill_beside_share_power']:.2f}) / "
        f"(1 - f + f x {fields['own_decode_prefill_share']:.2f}), f the "
        f"part of it its own LLM's decode steps ran beside it; RMS log error {rms:.4f} ({before:.4f} with the own "
        f"decode step counted as any other job)")
    return list(fields)


#: the knees (seconds of a prefill's time alone) :func:`fit_prefill_time_knee` tries: 1 ms to 1 s, 2% apart
PREFILL_TIME_KNEES = tuple(round(1e-3 * 1.02 ** i, 7) for i in range(349))


def fit_prefill_time_knee(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                          ) -> Tuple[Dict[str, float], float, float, int]:
    """The stretch of a graph prefill on an SM partition beside the other LLMs' jobs with its
    knee in the prefill's time alone instead of its prompt tokens (``prefill_beside_knee_s``;
    ``prefill_beside_knee_tokens`` 0), measured on the graph prefills of ``runs``' job traces
    (:func:`traced_own_decode_prefills`, at their buckets where ``fields`` sets
    ``prefill_at_bucket``), with ``fields``' ``own_decode_prefill_share``, delay and SM-share
    power: per knee of :data:`PREFILL_TIME_KNEES` the pair ``prefill_beside_gbps``,
    ``prefill_beside_requests`` by least squares on the relative error (at least 0), the knee of
    least RMS log error kept (:func:`own_decode_prefill_model`). On the five-LLM H200 a large
    LLM's prefill slows less beside the same others than a small one's of the same prompt (it
    does more work and lasts longer), which a knee in tokens cannot tell apart
    (docs/fidelity-llm.md "The prefill's knee in its time alone"). Returns those four fields,
    the RMS log error with them and with ``fields``, and the number of prefills."""
    points = traced_graph_prefills(runs, fields)
    table, gpu, others, decoding, own, _, _, _, _, sm_share = points.T
    beside = (others > 0) | (decoding > 0)
    own_share, delay = fields["own_decode_prefill_share"], fields["prefill_beside_delay_s"]
    power = fields.get("prefill_beside_share_power", 0.0)
    speed = 1.0 - own + own * own_share if own_share > 0 else 1.0
    c = table / (speed * gpu - delay * beside)  # model / measured = c (1 + a x0 + b x1)
    x = np.stack([others, decoding]) * beside * (sm_share ** power if power > 0 else 1.0)
    best: Tuple[float, Dict[str, float]] = (math.inf, {})
    for knee in PREFILL_TIME_KNEES:
        a, b = _nonnegative_pair(x / (1.0 + table / knee) * c, 1.0 - c)
        trial = dict(fields, prefill_beside_gbps=round(1.0 / a, 1) if a > 0 else 0.0,
                     prefill_beside_requests=round(1.0 / b, 2) if b > 0 else 0.0, prefill_beside_knee_tokens=0.0,
                     prefill_beside_knee_s=knee)
        rms = float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, trial) / gpu) ** 2)))
        if rms < best[0]:
            best = (rms, trial)
    before = float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, fields) / gpu) ** 2)))
    keep = ("prefill_beside_gbps", "prefill_beside_requests", "prefill_beside_knee_tokens", "prefill_beside_knee_s")
    return {k: best[1][k] for k in keep}, best[0], before, len(points)


def fit_prefill_eager_knee(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                           ) -> Tuple[float, float, float, int]:
    """An eager prefill's knee in its time alone (``prefill_beside_eager_knee_s``), measured on
    the eager prefills on SM partitions of ``runs``' job traces (:func:`traced_graph_prefills`;
    ``fields``' rates, delay, power and own-decode share kept): the knee of
    :data:`PREFILL_TIME_KNEES` of least RMS log error (:func:`own_decode_prefill_model`). The
    graph prefills' fits leave the eager ones out, and on v3i's five-LLM H200 those, whose
    kernels the host launches one by one, ran beside others 14-28% longer than the graph
    prefills' knee gives (docs/fidelity-llm.md "An eager prefill's own knee"). Returns the knee, the
    RMS log error with it and with ``fields``, and the number of eager prefills."""
    points = traced_graph_prefills(runs, fields, eager=True)
    gpu = points[:, OWN_PREFILL_COLUMNS.index("gpu_s")]

    def rms(trial: Dict[str, float]) -> float:
        return float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, trial) / gpu) ** 2)))

    best = min(PREFILL_TIME_KNEES, key=lambda knee: rms(dict(fields, prefill_beside_eager_knee_s=knee)))
    return best, rms(dict(fields, prefill_beside_eager_knee_s=best)), rms(fields), len(points)


def apply_prefill_eager_knee(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s ``prefill_beside_eager_knee_s`` to :func:`fit_prefill_eager_knee`'s
    on ``runs``' job traces; returns the field set."""
    knee, rms, before, count = fit_prefill_eager_knee(runs, out)
    out["prefill_beside_eager_knee_s"] = knee
    out["fit"]["eager_time_knee"] = (
        f"{len(runs)} runs of {', '.join(dict.fromkeys(f for f, _ in runs))}: job traces, {count} eager prefills on "
        f"SM partitions: their load beside others over 1 + T / {1e3 * knee:.1f} ms (T the table time), the other "
        f"fields kept; RMS log error {rms:.4f} ({before:.4f} with the graph prefills' knee)")
    return ["prefill_beside_eager_knee_s"]


def whole_gpu_eager_prefills(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                             ) -> Tuple[np.ndarray, float]:
    """Per eager prefill of ``runs``' job traces (one-GPU meshes, every LLM on the whole GPU: the
    temporal placement) its (time alone: the table time at its longest prompt plus the start
    into its launch ``fields["prefill_start_full_s"]``, launch to GPU end, launch host time), and
    the graph prefills' median launch host time (:func:`traced_launch_holds`; 0 where there are none)."""
    from placement_opt.simulate.llm import sm_shares
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    rows, graph = [], []
    for where in runs:
        run = _find_run(where)
        _, placement, policy = run_setup(run)
        if any(len(g.devices) != 1 or min(sm_shares(g, policy)) < 1.0 for g in placement.groups):
            raise ValueError(f"{where[0]}/{where[1]}: not every LLM holds a whole GPU of a one-GPU mesh")
        jobs = [j for j in traced_jobs(run) or () if j["kind"] == "prefill"]
        if not jobs:
            raise ValueError(f"{where[0]}/{where[1]}: no job trace with prefills")
        graph += traced_launch_holds(run)[False]
        for j, table in zip(jobs, traced_table_seconds(run, jobs, at_bucket=True)):
            if prefill_runs_eagerly(j["requests"], j["longest_context"], GRAPH_TOKENS):
                rows.append((table + fields.get("prefill_start_full_s", 0.0), j["device_end_s"] - j["launch_s"],
                             j["launched_s"] - j["launch_s"]))
    return np.array(rows).reshape(-1, 3), statistics.median(graph) if graph else 0.0


def fit_whole_gpu_eager(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                        ) -> Tuple[float, float, float, float, int]:
    """The eager launch on the whole GPU, measured on ``runs``' eager prefills
    (:func:`whole_gpu_eager_prefills`): the kernels come one by one from the host while the GPU
    runs those launched, so a prefill lasts about the later of its GPU work and its launch
    (docs/fidelity-llm.md "The eager launch on the whole GPU"). ``prefill_eager_hold_full_s``
    is the median launch host time of an eager prefill less a graph one's; ``prefill_eager_host_full_s``
    the median time from launch to GPU end beyond the time alone over the eager prefills whose
    time alone outlasts the launch (their GPU work is what they wait for). Returns the two, the
    RMS log error of launch to GPU end against the later of the two ends with them and with
    ``fields``' (the sum), and the number of eager prefills."""
    points, graph_host = whole_gpu_eager_prefills(runs, fields)
    alone, gpu, host = points.T
    hold = max(0.0, float(np.median(host) - graph_host))
    launch = fields.get("prefill_host_full_s", 0.0) + hold
    bound = alone > launch
    tail = max(0.0, float(np.median(gpu[bound] - alone[bound]))) if bound.any() else 0.0
    after = np.maximum(alone + tail, launch)
    before = fields.get("prefill_eager_host_full_s", 0.0) + np.maximum(alone, fields.get("prefill_host_full_s", 0.0))
    rms = lambda model: float(np.sqrt(np.mean(np.log(model / gpu) ** 2)))  # noqa: E731
    return hold, tail, rms(after), rms(before), len(points)


def apply_whole_gpu_eager_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s ``prefill_eager_hold_full_s`` and ``prefill_eager_host_full_s``
    to :func:`fit_whole_gpu_eager`'s on ``runs``' job traces; returns the fields set."""
    hold, tail, rms, before, count = fit_whole_gpu_eager(runs, out)
    out["prefill_eager_hold_full_s"], out["prefill_eager_host_full_s"] = round(hold, 6), round(tail, 6)
    out["fit"]["whole_gpu_eager"] = (
        f"{len(runs)} runs of {', '.join(dict.fromkeys(f for f, _ in runs))}: job traces, {count} eager prefills on "
        f"whole GPUs: the launch holds the thread {1e3 * hold:.2f} ms beyond a graph launch's (medians), a prefill "
        f"whose time alone outlasts it ends {1e3 * tail:.2f} ms beyond that time (median); launch to GPU end as the "
        f"later of the two, RMS log error {rms:.4f} ({before:.4f} as their sum, the file before)")
    out["fit"].pop("prefill_eager_host_full_s_fit", None)
    return ["prefill_eager_hold_full_s", "prefill_eager_host_full_s"]


def combine_spill_steps(run: dict, fields: Dict[str, float]) -> np.ndarray:
    """Per decode step of ``run``'s job trace that ran alone on a one-GPU mesh (an LLM on its whole
    GPU or on an SM partition: :func:`whole_gpu_groups`, :func:`partition_groups`) its (GPU
    seconds, the simulator's time of it under the calibration ``fields`` but the split-combine
    spill, its LLM's layers, whether its split-combine spills): the table time at the effective
    context of ``fields``' ``decode_attention_sms`` times the decode stretch, plus the seconds
    per request (``simulate.llm``'s ``decode_wave``, ``decode_stretch``,
    ``decode_request_seconds``), and the spill as the kernel decides it
    (:func:`~placement_opt.simulate.meshsim.decode_combine_spills`)."""
    from placement_opt.llm_units import llm_specs
    from placement_opt.simulate.llm import (attention_kv_heads, decode_request_seconds, decode_stretch, decode_wave,
                                            sm_shares, spill_splits)
    from placement_opt.simulate.meshsim import decode_combine_spills

    inst, placement, policy = run_setup(run)
    cfg = with_model(inst.llm_settings, model_fields(fields))
    specs = {s.name: s for s in llm_specs(inst)}
    share = {m: sh for g in placement.groups for m, sh in zip(g.models, sm_shares(g, policy))}
    waves = {m: decode_wave(cfg, specs[m], share[m], 1) for m in specs}
    rows = []
    for j, table in decode_jobs_alone(run, whole_gpu_groups(run) | partition_groups(run), waves):
        spec, n, sh = specs[j["llm"]], j["requests"], share[j["llm"]]
        stretch = decode_stretch(cfg, sh, 1) or 1.0
        spills = decode_combine_spills(n, j["longest_context"], cfg.kv_block_tokens, attention_kv_heads(spec, 1),
                                       spill_splits(spec))
        rows.append((j["device_end_s"] - j["device_start_s"], stretch * table + decode_request_seconds(cfg, sh, 1) * n,
                     spec.architecture.layers, float(spills)))
    return np.array(rows, dtype=np.float64).reshape(-1, 4)


def fit_combine_spill(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]) -> Tuple[float, float, float, int]:
    """``decode_combine_spill_s``: the median, over the decode steps of ``runs``' job traces whose
    split-combine spills (:func:`combine_spill_steps`), of their GPU time beyond the simulator's
    time of them under ``fields`` per layer of their LLM (the combine kernel runs once a layer).
    Returns it, the RMS log error of those steps' GPU time against their time with it and without
    it, and their number."""
    steps = np.vstack([combine_spill_steps(_find_run(w), fields) for w in runs])
    steps = steps[steps[:, 3] > 0]
    if not len(steps):
        raise ValueError("no decode step whose split-combine spills traced")
    gpu, modelled, layers, _ = steps.T
    per_layer = max(0.0, float(np.median((gpu - modelled) / layers)))
    rms = lambda model: float(np.sqrt(np.mean(np.log(model / gpu) ** 2)))  # noqa: E731
    return per_layer, rms(modelled + per_layer * layers), rms(modelled), len(gpu)


def apply_combine_spill_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s ``decode_combine_spill_s`` to :func:`fit_combine_spill`'s on
    ``runs``' job traces; returns the field set."""
    per_layer, rms, before, count = fit_combine_spill(runs, out)
    out["decode_combine_spill_s"] = round(per_layer, 8)
    out["fit"]["combine_spill"] = (
        f"{', '.join(f'{f}/{n}' for f, n in runs)}: job traces, {count} decode steps alone on one-GPU meshes whose "
        f"split-combine spills: {1e6 * per_layer:.2f} us a layer beyond the step's time (median), RMS log error "
        f"{rms:.4f} ({before:.4f} without it)")
    return ["decode_combine_spill_s"]


#: the own-decode shares and their knees (padded prompt tokens; 0: none) and the time knees
#: (seconds) :func:`fit_own_decode_prefill_knee` tries
OWN_KNEE_SHARES = tuple(round(0.05 * i, 2) for i in range(6, 20))
OWN_KNEE_TOKENS = (0.0,) + tuple(round(32.0 * 128.0 ** (i / 14.0), 3) for i in range(15))
OWN_KNEE_TIME_KNEES = (0.0,) + tuple(round(0.003 * 100.0 ** (i / 11.0), 7) for i in range(12))


def fit_own_decode_prefill_knee(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]
                                ) -> Tuple[Dict[str, float], float, float, int]:
    """The prefill beside its own LLM's decode step with the part of its speed it loses shrinking
    with its padded prompt (``own_decode_prefill_share`` o and ``own_decode_prefill_knee_tokens``:
    ``1 - (1 - o) / (1 + tokens / knee)``), fitted jointly with the stretch beside the other
    LLMs' jobs and its knee in the prefill's time alone on the graph prefills of ``runs``' job
    traces (:func:`traced_graph_prefills`; ``fields``' delay and SM-share power kept, the token
    knee of that stretch 0): per o of :data:`OWN_KNEE_SHARES`, knee of :data:`OWN_KNEE_TOKENS`
    and time knee of :data:`OWN_KNEE_TIME_KNEES`, the two rates by least squares on the relative
    error (:func:`_nonnegative_pair`), the triple of least RMS log error kept
    (:func:`own_decode_prefill_model`). On v3i's five-LLM traces a long prefill beside its own
    decode step kept most of its speed and its step slowed 4-5 x, a short one the other way
    round (docs/fidelity-llm.md "Both sides of the shared partition"). Returns the six fields,
    the RMS log error with them and with ``fields``, and the number of prefills."""
    points = traced_graph_prefills(runs, fields)
    table, gpu, others, decoding, own, tokens, _, _, _, sm_share = points.T
    beside = (others > 0) | (decoding > 0)
    delay, power = fields["prefill_beside_delay_s"], fields.get("prefill_beside_share_power", 0.0)
    x = np.stack([others, decoding]) * beside * (sm_share ** power if power > 0 else 1.0)
    best: Tuple[float, Dict[str, float]] = (math.inf, {})
    for share in OWN_KNEE_SHARES:
        for knee in OWN_KNEE_TOKENS:
            part = own_decode_part(share, tokens, knee)
            c = table / ((1.0 - own + own * part) * gpu - delay * beside)  # model / measured = c (1 + a x0 + b x1)
            for knee_s in OWN_KNEE_TIME_KNEES:
                a, b = _nonnegative_pair(x / (1.0 + table / knee_s if knee_s > 0 else 1.0) * c, 1.0 - c)
                trial = dict(fields, own_decode_prefill_share=share, own_decode_prefill_knee_tokens=knee,
                             prefill_beside_gbps=round(1.0 / a, 1) if a > 0 else 0.0,
                             prefill_beside_requests=round(1.0 / b, 2) if b > 0 else 0.0,
                             prefill_beside_knee_tokens=0.0, prefill_beside_knee_s=knee_s)
                rms = float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, trial) / gpu) ** 2)))
                if rms < best[0]:
                    best = (rms, trial)
    before = float(np.sqrt(np.mean(np.log(own_decode_prefill_model(points, fields) / gpu) ** 2)))
    keep = ("own_decode_prefill_share", "own_decode_prefill_knee_tokens", "prefill_beside_gbps",
            "prefill_beside_requests", "prefill_beside_knee_tokens", "prefill_beside_knee_s")
    return {k: best[1][k] for k in keep}, best[0], before, len(points)


def apply_prefill_time_knee_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s stretch of a prefill beside the other LLMs' jobs to the one
    with its knee in the prefill's time alone measured on ``runs``' job traces
    (:func:`fit_prefill_time_knee`, ``out``'s own-decode share, delay and power kept); returns
    the fields set."""
    fields, rms, before, count = fit_prefill_time_knee(runs, out)
    out.update(fields)
    out["fit"]["prefill_time_knee"] = (
        f"{len(runs)} runs of {', '.join(dict.fromkeys(f for f, _ in runs))}: job traces, {count} graph prefills on "
        f"SM partitions: GPU time = table time T x (1 + (other LLMs' HBM demand / "
        f"{fields['prefill_beside_gbps']:.0f} GB/s + requests in their "
        f"decode steps / {fields['prefill_beside_requests']:.1f}) / (1 + T / "
        f"{1e3 * fields['prefill_beside_knee_s']:.2f} ms)), the own decode step's share and the delay kept; "
        f"RMS log error {rms:.4f} ({before:.4f} with the knee in prompt tokens)")
    return list(fields)


def apply_own_partition_knees(runs: Tuple[Tuple[str, str], ...], decode: Tuple[float, float], out: dict) -> List[str]:
    """Set the calibration ``out``'s prefill beside its own decode step and beside the others to
    :func:`fit_own_decode_prefill_knee`'s on ``runs``' job traces, and the decode step beside its
    own prefill to ``decode`` (its share and knee); returns the fields set."""
    fields, rms, before, count = fit_own_decode_prefill_knee(runs, out)
    out.update(fields)
    out["own_prefill_decode_share"], out["own_prefill_decode_knee_tokens"] = decode
    out["fit"]["own_partition_knees"] = (
        f"{len(runs)} runs of {', '.join(dict.fromkeys(f for f, _ in runs))}: job traces, {count} graph prefills on "
        f"SM partitions: beside its own decode step a prefill keeps 1 - (1 - {fields['own_decode_prefill_share']}) / "
        f"(1 + tokens / {fields['own_decode_prefill_knee_tokens']:.0f}) of its speed, fitted with the stretch beside "
        f"others ({fields['prefill_beside_gbps']:.0f} GB/s, {fields['prefill_beside_requests']:.1f} requests, time knee "
        f"{1e3 * fields['prefill_beside_knee_s']:.1f} ms); RMS log error {rms:.4f} ({before:.4f} before); the decode "
        f"step beside its own prefill {decode[0]} / (1 + tokens / {decode[1]:.0f}) (own_prefill_decode.py: its "
        f"simulated steps fit the measured ones' c and knee)")
    return list(fields) + ["own_prefill_decode_share", "own_prefill_decode_knee_tokens"]


#: the knees (prompt tokens) :func:`fit_prefill_trace` tries: 100-10000, 2% apart
PREFILL_KNEES = np.round(100.0 * 1.02 ** np.arange(233))


def prefill_trace_model(points: np.ndarray, fields: Dict[str, float]) -> np.ndarray:
    """The GPU seconds of :func:`traced_partition_prefills`' ``points`` under the stretch
    beside others of ``fields`` (``prefill_beside_gbps``, ``prefill_beside_requests``,
    ``prefill_beside_knee_tokens``, ``prefill_beside_knee_s`` (an eager prefill's
    ``prefill_beside_eager_knee_s`` where set), ``prefill_beside_share_power``: 0
    where absent, ``prefill_beside_delay_s``; the simulator's ``meshsim.prefill_beside_stretch`` at
    each prefill's mean co-runners, its table time its time alone, the fixed stretch off; a test
    holds the two equal)."""
    table, _, others, _, decoding, tokens, eager, share = points.T
    gbps, per, knee = (fields["prefill_beside_gbps"], fields["prefill_beside_requests"],
                       fields["prefill_beside_knee_tokens"])
    power = fields.get("prefill_beside_share_power", 0.0)
    knee_s = fields.get("prefill_beside_knee_s", 0.0)
    knee_s = np.where(eager > 0, fields.get("prefill_beside_eager_knee_s", 0.0) or knee_s, knee_s)
    load = (others / gbps if gbps > 0 else 0.0) + (decoding / per if per > 0 else 0.0)
    if knee > 0:
        load = load / (1.0 + tokens / knee)
    load = load / (1.0 + np.divide(table, knee_s, out=np.zeros_like(table), where=knee_s > 0))
    if power > 0:
        load = load * share ** power
    beside = (others > 0) | (decoding > 0)
    return table * (1.0 + load * beside) + fields["prefill_beside_delay_s"] * beside


def fit_prefill_trace(runs: Tuple[Tuple[str, str], ...], at_bucket: bool = False
                      ) -> Tuple[Dict[str, float], float, int]:
    """The stretch of a prefill on an SM partition beside other jobs and its launch's hold,
    measured on the job traces of ``runs`` (:func:`traced_partition_prefills`, the graph
    prefills): ``T x (1 + (D / gbps + R / requests) / (1 + tokens / knee)) + delay`` beside others
    that demand D GB/s of HBM with R requests in their decode steps (T its table time, tokens its
    padded prompt), least squares on the relative error for each knee (:data:`PREFILL_KNEES`) and
    delay (0-10 ms in 0.1 ms steps), the pair of least RMS log error kept; ``prefill_host_s``
    the median host time of their launches. Returns those fields (``prefill_beside_gbps``,
    ``prefill_beside_requests``, ``prefill_beside_knee_tokens``, ``prefill_beside_delay_s``,
    ``prefill_host_s``), the RMS log error and the number of prefills (``at_bucket``: T at the
    graph prefills' buckets, ``llm.prefill_at_bucket``)."""
    points = np.vstack([traced_partition_prefills(_find_run(r), at_bucket) for r in runs])
    points = points[points[:, PREFILL_COLUMNS.index("eager")] == 0]
    if not len(points):
        raise ValueError(f"{', '.join(f'{f}/{n}' for f, n in runs)}: no graph prefill on an SM partition traced")
    table, gpu, others, host, decoding, tokens, _, _ = points.T
    beside = (others > 0) | (decoding > 0)
    best: Tuple[float, Dict[str, float]] = (math.inf, {})
    for knee in PREFILL_KNEES:
        x = np.stack([others, decoding]) * beside / (1.0 + tokens / knee) * table / gpu
        for delay in np.arange(0.0, 10.0 + 1e-9, 0.1) / 1e3:
            y = (gpu - table - delay * beside) / gpu  # = a x[0] + b x[1]: a = 1 / gbps, b = 1 / requests
            a, b = _nonnegative_pair(x, y)
            fields = {"prefill_beside_gbps": round(1.0 / a, 1) if a > 0 else 0.0,
                      "prefill_beside_requests": round(1.0 / b, 2) if b > 0 else 0.0,
                      "prefill_beside_knee_tokens": float(knee), "prefill_beside_delay_s": round(float(delay), 6)}
            rms = float(np.sqrt(np.mean(np.log(prefill_trace_model(points, fields) / gpu) ** 2)))
            if rms < best[0]:
                best = (rms, fields)
    return dict(best[1], prefill_host_s=round(float(np.median(host)), 6)), best[0], len(points)


def _nonnegative_pair(x: np.ndarray, y: np.ndarray) -> Tuple[float, float]:
    """The least-squares ``(a, b) >= 0`` of ``y = a x[0] + b x[1]`` (where the two columns are
    collinear, or the free optimum has a negative part, the better of the two one-column fits)."""
    gram, rhs = x @ x.T, x @ y
    det = gram[0, 0] * gram[1, 1] - gram[0, 1] ** 2
    if det > 1e-9 * gram[0, 0] * gram[1, 1]:  # else the columns are (nearly) collinear: one of them
        a = (rhs[0] * gram[1, 1] - rhs[1] * gram[0, 1]) / det
        b = (rhs[1] * gram[0, 0] - rhs[0] * gram[0, 1]) / det
        if a >= 0 and b >= 0:
            return float(a), float(b)
    single = [(max(0.0, rhs[i] / gram[i, i]) if gram[i, i] > 0 else 0.0) for i in (0, 1)]
    cost = [float(np.sum((y - single[i] * x[i]) ** 2)) for i in (0, 1)]
    return (single[0], 0.0) if cost[0] <= cost[1] else (0.0, single[1])


def apply_prefill_trace_fields(gen: Generation, out: dict) -> List[str]:
    """Set the calibration ``out``'s prefill fields on SM partitions to those measured on
    ``gen.fit_prefill_trace``'s job traces (:func:`fit_prefill_trace`): the stretch beside other
    jobs in proportion to their HBM demand and decode requests, over the prompt's length
    (``prefill_beside_gbps``, ``prefill_beside_requests``, ``prefill_beside_knee_tokens``,
    ``prefill_beside_delay_s``; no fixed stretch, no partition stretch) and the launch's hold of
    the thread (``prefill_host_s``); a prefill's table time at its longest prompt
    (``prefill_at_longest``: the engine pads a batch to it, and the fit times the traced
    prefills so, :func:`traced_table_seconds`); returns the fields set."""
    fields, rms, count = fit_prefill_trace(gen.fit_prefill_trace)
    out.update(fields, prefill_beside_stretch=0.0, prefill_partition_stretch=0.0, prefill_at_longest=True)
    out["fit"]["prefill_trace_fit"] = prefill_trace_note(gen.fit_prefill_trace, fields, rms, count)
    return [*fields, "prefill_beside_stretch", "prefill_partition_stretch", "prefill_at_longest"]


def prefill_trace_note(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float], rms: float, count: int) -> str:
    """The calibration file's record of a :func:`fit_prefill_trace` on ``runs``."""
    names = ", ".join(f"{f}/{n}" for f, n in runs)
    return (f"{names}: job traces, {count} graph prefills on SM partitions: GPU time = table time x (1 + (others' "
            f"HBM demand / {fields['prefill_beside_gbps']:.0f} GB/s + requests in their decode steps / "
            f"{fields['prefill_beside_requests']:.1f}) / (1 + prompt tokens / "
            f"{fields['prefill_beside_knee_tokens']:.0f})) + {1e3 * fields['prefill_beside_delay_s']:.1f} ms beside "
            f"others, RMS log error {rms:.4f}; prefill_host_s the median launch host time")


def jobs_alone(mesh: List[dict]) -> List[dict]:
    """The traced jobs of one mesh (:func:`traced_jobs`' rows) that ran alone on its GPUs: no
    other job's GPU time overlaps theirs (in GPU start order)."""
    mesh = sorted(mesh, key=lambda j: j["device_start_s"])
    out = []
    ended = -math.inf  # the latest end of the jobs before job i
    for i, j in enumerate(mesh):
        after = mesh[i + 1]["device_start_s"] if i + 1 < len(mesh) else math.inf
        if ended <= j["device_start_s"] and after >= j["device_end_s"]:
            out.append(j)
        ended = max(ended, j["device_end_s"])
    return out


def whole_gpu_groups(run: dict) -> Set[int]:
    """The indices of ``run``'s placement groups whose LLMs each hold a whole GPU of a one-GPU
    mesh under the run's policy (:func:`~placement_opt.simulate.llm.on_whole_gpu`)."""
    from placement_opt.simulate.llm import on_whole_gpu, sm_shares

    _, placement, policy = run_setup(run)
    return {gi for gi, g in enumerate(placement.groups)
            if all(on_whole_gpu(sh, g.tp) for sh in sm_shares(g, policy))}


def traced_full_decode_steps(run: dict, attention_sms: int = 0) -> np.ndarray:
    """(GPU seconds, table seconds, requests) of every decode step of ``run``'s job trace on a whole GPU
    of a one-GPU mesh that ran alone on its GPU (no other job of its mesh overlapping it), its
    table time at its batch and mean context (the trace's ``context_tokens`` over its requests,
    as the simulator takes it; with ``attention_sms``, ``llm.decode_attention_sms``, at its
    effective context between that and the trace's ``longest_context``: :func:`decode_waves`);
    ValueError for a run without the trace or whose trace does not record the contexts (its
    mean context unknown: :func:`trace_has_contexts`)."""
    return _decode_steps_alone(run, whole_gpu_groups(run), decode_waves(run, attention_sms))


def _decode_steps_alone(run: dict, groups: Set[int], waves: Dict[str, float]) -> np.ndarray:
    """(GPU seconds, table seconds, requests) of every decode step of ``run``'s job trace in the
    placement groups ``groups`` that ran alone on its GPUs (:func:`decode_jobs_alone`)."""
    rows = [(j["device_end_s"] - j["device_start_s"], seconds, j["requests"])
            for j, seconds in decode_jobs_alone(run, groups, waves)]
    return np.array(rows, dtype=np.float64).reshape(-1, 3)


def decode_jobs_alone(run: dict, groups: Set[int], waves: Dict[str, float]) -> Iterator[Tuple[dict, float]]:
    """Every decode step of ``run``'s job trace (:func:`traced_jobs`' row) in the placement groups
    ``groups`` that ran alone on its GPUs, with its table time at its LLM's share and batch, read
    at the effective context of its LLM's wave in ``waves``
    (:func:`~placement_opt.simulate.meshsim.decode_context`); ValueError for a run without the
    trace or whose trace does not record the contexts (:func:`trace_has_contexts`)."""
    from placement_opt.executor.llm_sched import len_interp
    from placement_opt.simulate.meshsim import decode_context

    jobs = traced_jobs(run)
    if jobs is None or not trace_has_contexts(run):
        raise ValueError(f"{os.path.basename(run['folder'])}/{run['name']}: no job trace with the "
                         "context_tokens column")
    tables = _mesh_step_tables(run, at_shares=True)
    for gi in sorted(groups):
        for j in jobs_alone([j for j in jobs if j["group"] == gi]):
            if j["kind"] != "decode":
                continue
            table, k = tables[j["llm"]][:2]
            n = j["requests"]
            length = decode_context(float(j["context_tokens"]), float(j["longest_context"]), n, waves[j["llm"]])
            yield j, len_interp(table.decode[k][min(n, table.decode.shape[1] - 1)], table.lgrid, length)


def partition_groups(run: dict) -> Set[int]:
    """The indices of ``run``'s placement groups of one GPU whose LLMs each run on an SM partition
    under the run's policy (:func:`~placement_opt.simulate.llm.on_partition`)."""
    from placement_opt.simulate.llm import on_partition, sm_shares

    _, placement, policy = run_setup(run)
    return {gi for gi, g in enumerate(placement.groups)
            if g.tp == 1 and all(on_partition(sh) for sh in sm_shares(g, policy))}


def traced_partition_decode_steps(run: dict, attention_sms: int) -> np.ndarray:
    """(GPU seconds, table seconds, requests) of every decode step of ``run``'s job trace on an SM
    partition of a one-GPU mesh (:func:`partition_groups`) that ran alone on its GPU (no other job
    of its mesh overlapping it), its table time at its LLM's share and batch, read at its
    effective context with ``attention_sms`` (``llm.decode_attention_sms``) x the partition's SMs
    (:func:`decode_waves` on partitions); ValueError for a run without the trace or whose trace
    does not record the contexts (:func:`trace_has_contexts`)."""
    return _decode_steps_alone(run, partition_groups(run), decode_waves(run, attention_sms, on_partitions=True))


def apply_partition_decode_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s decode step on SM partitions of one-GPU meshes to the one
    measured on ``runs``' job traces: GPU time = ``decode_partition_stretch`` x table time at
    the effective context (``out``'s ``decode_attention_sms`` x the partition's SMs) +
    ``decode_partition_request_s`` x requests, least squares with both at least 0 over the steps
    that ran alone (:func:`traced_partition_decode_steps`; in place of the KV term there, as on
    a whole GPU). Returns the fields set."""
    sms = int(out.get("decode_attention_sms", 0))
    if sms <= 0:
        raise ValueError("the partition decode step is read at its effective context: decode_attention_sms wanted")
    steps = np.vstack([traced_partition_decode_steps(_find_run(w), sms) for w in runs])
    if not len(steps):
        raise ValueError("no decode step alone on an SM partition of a one-GPU mesh traced")
    gpu, table, requests = steps.T
    stretch, per_request = _nonnegative_pair(np.vstack([table, requests]), gpu)
    out["decode_partition_stretch"], out["decode_partition_request_s"] = round(stretch, 4), round(per_request, 8)
    before = np.sqrt(np.mean(np.log(gpu / table) ** 2))
    after = np.sqrt(np.mean(np.log(gpu / (out["decode_partition_stretch"] * table
                                         + out["decode_partition_request_s"] * requests)) ** 2))
    out["fit"]["partition_decode"] = (
        f"{', '.join(f'{f}/{n}' for f, n in runs)}: job traces, {len(steps)} decode steps alone on SM partitions "
        f"of one-GPU meshes: GPU time = {out['decode_partition_stretch']:.4f} x table time at the effective "
        f"context ({sms} SMs x the partition's share) + {1e6 * out['decode_partition_request_s']:.2f} us x "
        f"requests (least squares; RMS log error {after:.4f}, {before:.4f} at the table time alone)")
    return ["decode_partition_stretch", "decode_partition_request_s"]


def traced_full_prefill_starts(run: dict) -> List[float]:
    """Seconds from the launch of each graph prefill (one the engine runs as a CUDA graph) on a
    whole GPU of a one-GPU mesh in ``run``'s job trace to its GPU start; ValueError for a run
    without the trace."""
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    jobs = traced_jobs(run)
    if jobs is None:
        raise ValueError(f"{os.path.basename(run['folder'])}/{run['name']}: no job trace")
    whole = whole_gpu_groups(run)
    return [j["device_start_s"] - j["launch_s"] for j in jobs
            if j["kind"] == "prefill" and j["group"] in whole
            and not prefill_runs_eagerly(j["requests"], j["longest_context"], GRAPH_TOKENS)]


def fit_decode_full_stretch(runs: Sequence[dict], attention_sms: int = 0,
                            per_request: bool = False) -> Tuple[float, float, int]:
    """``decode_full_stretch``: the factor on the table time that fits the GPU time of the traced
    decode steps on whole GPUs of one-GPU meshes in ``runs`` (:func:`traced_full_decode_steps`;
    least squares through the origin: the long steps, which set a loaded mesh's pace, weigh
    most) and, with ``per_request``, ``decode_full_request_s`` beside it (GPU time = factor x
    table time + seconds x requests, both at least 0: the steps' excess that grows with their
    batch; 0 without); returns them and the number of steps."""
    steps = np.vstack([traced_full_decode_steps(r, attention_sms) for r in runs])
    if not len(steps):
        raise ValueError("no decode step on a whole GPU of a one-GPU mesh traced")
    gpu, table, requests = steps.T
    if per_request:
        stretch, seconds = _nonnegative_pair(np.vstack([table, requests]), gpu)
        return stretch, seconds, len(steps)
    return float(gpu @ table / (table @ table)), 0.0, len(steps)


def apply_whole_gpu_fields(gen: Generation, out: dict) -> List[str]:
    """Set the calibration ``out``'s decode step on whole GPUs of one-GPU meshes to the one
    measured on ``gen.fit_whole_gpu``'s job traces: ``decode_full_stretch``
    (:func:`fit_decode_full_stretch`, in place of the KV term there) and, with it in place,
    ``decode_host_full_s`` (the median time their back-to-back TP-1 steps take beyond it and the
    page-table fill, :func:`plain_stream_decode_extra`); ``decode_host_mesh_s`` takes the change
    of ``decode_host_full_s``, so the decode host time of a whole mesh of several GPUs (where the
    KV term stays and whose fit measured that time whole) is unchanged, and an SM partition of
    such a mesh, which pays the per-mesh term too, takes the change; and
    ``prefill_start_full_s``, the median time from a graph prefill's launch to its GPU start there
    (:func:`traced_full_prefill_starts`); every step's table time at its effective context where
    ``gen.decode_attention_sms`` is set (which ``llm.decode_attention_sms`` takes). Returns the
    fields set."""
    runs = [_find_run(w) for w in gen.fit_whole_gpu]
    sms = gen.decode_attention_sms
    stretch, per_request, count = fit_decode_full_stretch(runs, sms, gen.whole_gpu_per_request)
    stretch, per_request = round(stretch, 4), round(per_request, 8)
    host, pairs = plain_stream_decode_extra(runs, out["decode_kv_gbps"], out["decode_kv_tp_power"],
                                            out["decode_page_entry_s"], tp=1, stretch=stretch, attention_sms=sms,
                                            per_request=per_request)
    before = out["decode_host_full_s"]
    out["decode_attention_sms"] = sms
    out["decode_full_stretch"] = stretch
    if gen.whole_gpu_per_request:
        out["decode_full_request_s"] = per_request
    else:  # fitted without it: none inherited from the parent's file stays
        out.pop("decode_full_request_s", None)
    out["decode_host_full_s"] = round(host, 6)
    out["decode_host_mesh_s"] = round(out["decode_host_mesh_s"] + before - out["decode_host_full_s"], 6)
    starts = [s for r in runs for s in traced_full_prefill_starts(r)]
    out["prefill_start_full_s"] = round(statistics.median(starts), 6)
    names = ", ".join(f"{f}/{n}" for f, n in gen.fit_whole_gpu)
    out["fit"]["whole_gpu_fit"] = (
        f"{names}: job traces, {count} decode steps alone on whole GPUs of one-GPU meshes: GPU time = "
        f"{stretch:.4f} x table time"
        f"{f' + {1e6 * per_request:.2f} us x requests' if gen.whole_gpu_per_request else ''} (least squares"
        f"{f'; at the effective context, {sms} SMs' if sms else ''}); decode_host_full_s the median of {pairs} "
        f"back-to-back steps beyond it and the page-table fill; decode_host_mesh_s "
        f"{1e3 * (before - out['decode_host_full_s']):.3f} "
        f"ms more (a whole mesh of several GPUs keeps its host time, its SM partitions take the change); "
        f"prefill_start_full_s the median of {len(starts)} graph prefills' launch to GPU start")
    own = (["decode_attention_sms"] if sms else []) + ["decode_full_stretch"]
    own += ["decode_full_request_s"] if gen.whole_gpu_per_request else []
    return own + ["decode_host_full_s", "decode_host_mesh_s", "prefill_start_full_s"]


def fit_on_run(run: dict, model: Dict[str, float], field: str, values: Any, error: str) -> Tuple[float, float]:
    """The value of calibration ``field`` among ``values`` whose re-prediction of ``run`` (the
    other fields ``model``) has the smallest |``error``| (a key of :func:`errors`: the first of
    equals kept); returns it and that error."""
    best = (0.0, math.inf)
    for value in values:
        e = errors(run["summary"]["measured"], predict(run, dict(model, **{field: float(value)}))[0])[error]
        err = math.inf if e is None else abs(e)
        if err < best[1]:
            best = (float(value), err)
    return best


def fit_eager_host(run: dict, model: Dict[str, float], field: str) -> Tuple[float, float]:
    """The ``field`` (an eager-prefill host time; 0-100 ms in 1 ms steps) whose re-prediction
    of ``run`` (the other parameters ``model``) has the smallest |mean TTFT error|; returns it
    and that error (:func:`fit_on_run`)."""
    return fit_on_run(run, model, field, np.arange(0.0, 0.100 + 1e-12, 0.001), "ttft_err")


def _tp_degree(run: dict) -> int:
    """The largest TP degree of ``run``'s placement."""
    return max(tp for tp, _ in mesh_models(run))


def rank_and_mesh(points: List[Tuple[int, float]]) -> Tuple[float, float]:
    """(per rank beyond the first, per mesh of several GPUs) seconds through the excess a job
    takes on meshes of TP degree ``t`` > 1, ``points`` = [(t, excess)]: one degree, all of it per
    rank (no mesh term); two or more, the line ``mesh + rank x (t - 1)`` through the lowest and
    highest degrees; neither below 0."""
    points = sorted(points)
    (t0, e0), (t1, e1) = points[0], points[-1]
    if t1 == t0:
        return max(0.0, e0 / (t0 - 1)), 0.0
    rank = max(0.0, (e1 - e0) / (t1 - t0))
    return rank, max(0.0, e0 - rank * (t0 - 1))


def _tp_runs(gen: Generation) -> List[Tuple[str, str]]:
    """The plain-stream TP > 1 fit runs of ``gen``: ``fit_tp`` and ``fit_tp_wide``."""
    return [w for w in (gen.fit_tp, gen.fit_tp_wide) if w is not None]


def tp_decode_host(gen: Generation, decode_host_full: float, kv_gbps: float = 0.0,
                   kv_power: float = 0.0, entry_s: float = 0.0) -> Tuple[float, float, str]:
    """``decode_host_tp_s`` and ``decode_host_mesh_s``: on each TP > 1 plain-stream fit run
    (``fit_tp``, and ``fit_tp_wide`` at a higher degree) the median decode-step time of its
    widest meshes beyond the table, the KV term at ``kv_gbps`` and TP power ``kv_power`` and the
    page-table fill at ``entry_s`` (:func:`plain_stream_decode_extra`) less the TP-1 value
    ``decode_host_full``, split by :func:`rank_and_mesh` (0 without such a run)."""
    if gen.fit_tp is None:
        return 0.0, 0.0, "no TP > 1 plain-stream run"
    points, notes = [], []
    for where in _tp_runs(gen):
        run = _find_run(where)
        tp = _tp_degree(run)
        extra, pairs = plain_stream_decode_extra([run], kv_gbps, kv_power, entry_s, tp=tp)
        points.append((tp, extra - decode_host_full))
        notes.append(f"{where[0]}/{where[1]}: median decode-step time beyond the TP-{tp} table"
                     f"{' and the KV term' if kv_gbps > 0 else ''}{' and the page-table fill' if entry_s > 0 else ''} "
                     f"{1e3 * extra:.3f} ms over {pairs} "
                     f"back-to-back steps")
    rank, mesh = rank_and_mesh(points)
    return rank, mesh, "; ".join(notes) + ", less decode_host_full_s"


def token_events(run: dict) -> Dict[Tuple[float, str], List[Tuple[int, int, float]]]:
    """Every token event of ``run`` (time, model) -> the (prompt tokens, token index, arrival)
    of each request that got a token then: one event per job end of a one-job-at-a-time mesh."""
    rows = request_rows(run)
    events: Dict[Tuple[float, str], List[Tuple[int, int, float]]] = {}
    for r in rows:
        for j, t in enumerate(r["token_times_s"].split()):
            events.setdefault((float(t), r["model"]), []).append((int(r["prompt_tokens"]), j, float(r["arrival_s"])))
    return events


def plain_stream_prefills(run: dict, tp: Optional[int] = None) -> np.ndarray:
    """The back-to-back prefills of a plain-stream run (one job at a time per mesh): every token
    event of a mesh that is the first token of all its requests, each arrived before the mesh's
    previous token event (so the prefill started when that event's job ended): the gap less
    the prefill's table time at its batch and mean prompt, one value per prefill (s); only the
    meshes of TP degree ``tp`` (None: every mesh)."""
    from placement_opt.executor.llm_sched import len_interp

    tables = _mesh_step_tables(run)
    events = token_events(run)
    extra = []
    for _, (t0, _), (t1, m1) in _consecutive_events(run, events, tp):
        batch = events[(t1, m1)]
        if any(j != 0 for _, j, _ in batch) or max(a for _, _, a in batch) > t0:
            continue
        table, k, _, _ = tables[m1]
        prompt = sum(p for p, _, _ in batch) / len(batch)
        extra.append(t1 - t0 - len_interp(table.prefill[k, len(batch)], table.lgrid, prompt))
    return np.array(extra, dtype=np.float64)


def _consecutive_events(run: dict, events: Dict[Tuple[float, str], Any], tp: Optional[int] = None
                        ) -> List[Tuple[int, Tuple[float, str], Tuple[float, str]]]:
    """Every pair of consecutive token events (time, model) of one mesh of ``run``'s placement
    (a run of several meshes interleaves their events; a job's start is its own mesh's last
    event), with the mesh's TP degree first, of the meshes of TP degree ``tp`` (None: every mesh)."""
    pairs: List[Tuple[int, Tuple[float, str], Tuple[float, str]]] = []
    for degree, models in mesh_models(run):
        if tp is not None and degree != tp:
            continue
        ordered = sorted(e for e in events if e[1] in models)
        pairs += [(degree, a, b) for a, b in zip(ordered, ordered[1:])]
    return pairs


def mesh_models(run: dict) -> List[Tuple[int, List[str]]]:
    """(TP degree, models) of every mesh of ``run``'s placement, in group order."""
    from placement_opt.placement import load_placement

    return [(g.tp, list(g.models)) for g in load_placement(run_inputs(run)[1]).groups]


def plain_stream_eager_prefills(run: dict, tp: Optional[int] = None) -> Dict[str, List[Tuple[float, float]]]:
    """The back-to-back eager prefills of a plain-stream run (one job at a time, as
    :func:`plain_stream_prefills` finds them, on the meshes of TP degree ``tp``, None: every
    mesh; eager by the engine's rule at ``GRAPH_TOKENS``),
    per model: (time beyond the table at the batch and mean prompt, the table time), seconds.
    Tells whether the eager launch's cost on the whole GPU overlaps the GPU work (the excess
    would shrink as the table time grows) or adds to it (docs/fidelity-llm.md, "The eager
    launch on plain streams")."""
    from placement_opt.executor.llm_sched import len_interp
    from placement_opt.simulate.meshsim import prefill_runs_eagerly

    tables = _mesh_step_tables(run)
    events = token_events(run)
    out: Dict[str, List[Tuple[float, float]]] = {}
    for _, (t0, _), (t1, m1) in _consecutive_events(run, events, tp):
        batch = events[(t1, m1)]
        if any(j != 0 for _, j, _ in batch) or max(a for _, _, a in batch) > t0:
            continue
        if not prefill_runs_eagerly(len(batch), max(p for p, _, _ in batch), GRAPH_TOKENS):
            continue
        table, k, _, _ = tables[m1]
        time = len_interp(table.prefill[k, len(batch)], table.lgrid, sum(p for p, _, _ in batch) / len(batch))
        out.setdefault(m1, []).append((t1 - t0 - time, time))
    return out


def tp_prefill_host(gen: Generation, single_run: Optional[Tuple[str, str]] = None) -> Tuple[float, float, str]:
    """``prefill_host_tp_s`` and ``prefill_host_mesh_s``: the median time a back-to-back prefill
    takes beyond its table (:func:`plain_stream_prefills`) on the widest meshes of each TP > 1
    plain-stream fit run (``fit_tp``, ``fit_tp_wide``) less the same on the TP-1 run ``single_run`` (default
    ``gen.fit_streams``; TP 1, where the launch model already stands for it), split by
    :func:`rank_and_mesh` (0 without both kinds of run)."""
    single_run = single_run or gen.fit_streams
    if gen.fit_tp is None or single_run is None:
        return 0.0, 0.0, "no TP-1 and TP > 1 plain-stream runs"
    single = plain_stream_prefills(_find_run(single_run))
    points, notes = [], []
    for where in _tp_runs(gen):
        run = _find_run(where)
        tp = _tp_degree(run)
        multi = plain_stream_prefills(run, tp)
        if not len(multi) or not len(single):
            return 0.0, 0.0, "no back-to-back prefills"
        points.append((tp, float(np.median(multi) - np.median(single))))
        notes.append(f"{'/'.join(where)}: median prefill time beyond the table {1e3 * float(np.median(multi)):.3f} ms "
                     f"(TP {tp}, {len(multi)} back-to-back prefills)")
    rank, mesh = rank_and_mesh(points)
    return rank, mesh, ("; ".join(notes) + f"; less {1e3 * float(np.median(single)):.3f} ms on "
                        f"{'/'.join(single_run)} (TP 1, {len(single)})")


def _median_eager_excess(where: Tuple[str, str], tp: Optional[int] = None) -> Tuple[float, int]:
    """The median time an eager prefill takes beyond its table on the plain-stream run
    ``where`` (:func:`plain_stream_eager_prefills`, every model of its meshes of TP degree
    ``tp``, None: every mesh) and how many there are."""
    excess = [e for per in plain_stream_eager_prefills(_find_run(where), tp).values() for e, _ in per]
    return (float(np.median(excess)) if excess else math.nan), len(excess)


def tp_eager_host(gen: Generation, reference: Tuple[str, str]) -> Tuple[float, str]:
    """``prefill_eager_host_tp_s``: per TP rank beyond the first, how much longer an eager prefill
    takes beyond its table on the widest meshes of the TP > 1 plain-stream fit runs of ``gen`` (``fit_tp``,
    ``fit_tp_wide``; those with at least ``MIN_EAGER`` eager prefills) than on the TP-1 whole-GPU
    eager fit run ``reference`` (medians of :func:`plain_stream_eager_prefills`), divided by
    ``tp - 1``; the median over those runs (0 where there is none)."""
    base, n_base = _median_eager_excess(reference)
    values, notes = [], []
    for where in _tp_runs(gen):
        tp = _tp_degree(_find_run(where))
        excess, n = _median_eager_excess(where, tp)
        if n >= MIN_EAGER and n_base:
            values.append(max(0.0, (excess - base) / (tp - 1)))
            notes.append(f"{'/'.join(where)}: median eager prefill {1e3 * excess:.1f} ms beyond the TP-{tp} table ({n})")
    if not values:
        return 0.0, "no TP > 1 plain-stream run with eager prefills"
    return float(np.median(values)), ("; ".join(notes) + f"; less {1e3 * base:.1f} ms on {'/'.join(reference)} "
                                       f"(TP 1, {n_base}), per rank beyond the first")


def kv_fields(gen: Generation, entry_s: float = 0.0) -> Tuple[float, float, str]:
    """``decode_kv_gbps`` and ``decode_kv_tp_power`` of ``gen``: fitted (:func:`fit_kv_gbps`) on
    its plain-stream runs, the ``fit_streams``, ``fit_tp``, ``fit_tp_wide`` and ``fit_kv`` ones
    beyond their page-table fill at ``entry_s`` (0 without a ``fit_tp`` run: one TP degree cannot
    separate the KV term from the host time as well; kept off for older generations)."""
    if gen.fit_streams is None or gen.fit_tp is None:
        return 0.0, 0.0, "off (no TP-1 and TP > 1 plain-stream runs to fit on)"
    where = [gen.fit_streams, *_tp_runs(gen), *gen.fit_kv]
    gbps, power, mad = fit_kv_gbps([_find_run(w) for w in where], entry_s)
    return round(gbps, 1), power, (f"{', '.join('/'.join(w) for w in where)}: back-to-back decode steps, "
                                   f"least absolute deviations, mean |deviation| {1e3 * mad:.3f} ms")


def page_entry_seconds(gen: Generation) -> Tuple[float, str]:
    """``decode_page_entry_s`` of ``gen``: the median ``per_entry_ns`` of its
    ``page_table_bench.py`` runs on the GPU machine (0 without any)."""
    if not gen.page_bench:
        return 0.0, "off (no page_table_bench.py run)"
    values = []
    for rel in gen.page_bench:
        with open(os.path.join(LLM, rel)) as f:
            values.append(json.load(f)["per_entry_ns"])
    return round(statistics.median(values) * 1e-9, 12), (f"{', '.join(gen.page_bench)}: page_table_bench.py per_entry_ns "
                                                         f"{', '.join(f'{v:.1f}' for v in values)} (median)")


def eager_fields(gen: Generation, model: Dict[str, float]) -> Dict[str, Any]:
    """The eager-prefill host seconds of ``gen``: the partition value fitted on the first
    ``fit_eager`` run, the whole-GPU value on the second (each: smallest |mean TTFT error|).
    With ``gen.measure_eager_hold`` the partition launch's hold of the thread is measured first
    on the first run (``prefill_eager_hold_s``, :func:`eager_launch_hold`), and the fitted
    partition value is then only how much later the eager prefill ends."""
    out: Dict[str, Any] = {}
    model = dict(model)
    if gen.measure_eager_hold and gen.fit_eager:
        hold, source = eager_launch_hold(_find_run(gen.fit_eager[0]))
        model["prefill_eager_hold_s"] = out["prefill_eager_hold_s"] = round(hold, 6)
        out["prefill_eager_hold_s_fit"] = source
    for where, field in zip(gen.fit_eager, ("prefill_eager_host_s", "prefill_eager_host_full_s")):
        value, err = fit_eager_host(_find_run(where), model, field)
        out[field] = round(value, 6)
        out[f"{field}_fit"] = f"{where[0]}/{where[1]}: |mean TTFT error| {err:.4f}"
    return out


def apply_eager_fields(gen: Generation, out: dict) -> List[str]:
    """Set the calibration ``out``'s eager-prefill fields to :func:`eager_fields` of ``gen``
    (fitted with ``out``'s other fields) and their sources in ``out["fit"]``; returns the
    fields set."""
    eager = eager_fields(gen, {k: v for k, v in out.items() if k in MODEL_FIELDS})
    fields = [f for f in ("prefill_eager_hold_s", "prefill_eager_host_s", "prefill_eager_host_full_s") if f in eager]
    for field in fields:
        out[field] = eager[field]
        out["fit"][f"{field}_fit"] = eager[f"{field}_fit"]
    return fields


#: the TP powers of the contention rate :func:`fit_contention_tp_power` tries
CONTENTION_TP_POWERS = tuple(np.round(np.arange(0.0, 2.0 + 1e-9, 0.05), 2))


def fit_contention_tp_power(run: dict, model: Dict[str, float]) -> Tuple[float, float]:
    """``contention_tp_power`` (:data:`CONTENTION_TP_POWERS`) whose re-prediction of ``run`` (LLMs
    colocated on SM partitions of a TP > 1 mesh; the other fields ``model``) has the smallest
    |mean TPOT error|; returns it and that error (:func:`fit_on_run`)."""
    return fit_on_run(run, model, "contention_tp_power", CONTENTION_TP_POWERS, "tpot_err")


def apply_contention_tp_power(gen: Generation, out: dict) -> List[str]:
    """Set the calibration ``out``'s ``contention_tp_power`` to the one fitted on
    ``gen.fit_contention_tp`` with ``out``'s other fields (:func:`fit_contention_tp_power`) and
    its source in ``out["fit"]``; returns the field set."""
    where = gen.fit_contention_tp
    assert where is not None
    run = _find_run(where)
    power, err = fit_contention_tp_power(run, {k: v for k, v in out.items() if k in MODEL_FIELDS})
    out["contention_tp_power"] = power
    tp = _tp_degree(run)
    out["fit"]["contention_tp_power_fit"] = (
        f"{where[0]}/{where[1]}: |mean TPOT error| {err:.4f}, the stretch's rate "
        f"{out['contention_hbm_gbps'] / tp ** power:.0f} GB/s per GPU at TP {tp}")
    return ["contention_tp_power"]


def _write_calibration(gen: Generation, out: dict, name: Optional[str] = None) -> dict:
    """Write ``out`` to ``gen``'s calibration file (or to ``name``), atomically."""
    path = os.path.join(LLM, name or gen.calibration)
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return out


def derived_calibration(gen: Generation) -> dict:
    """The calibration of a derived generation: its parent's (``gen.derives``) with the fields
    it measures itself replaced: ``decode_page_entry_s`` from its ``page_bench`` and, where it
    names its own plain-stream runs, the decode host seconds measured on them beyond the parent's
    KV term and its own page fill (``decode_host_full_s`` on ``fit_streams``:
    :func:`plain_stream_decode_extra` at TP 1; ``decode_host_tp_s`` and ``decode_host_mesh_s`` on
    ``fit_tp`` and ``fit_tp_wide``: :func:`tp_decode_host`; ``prefill_eager_host_tp_s`` on them
    against the parent's TP-1 eager run: :func:`tp_eager_host`) and, where it names its own eager
    runs (``fit_eager``), the eager-prefill fields fitted on them (:func:`eager_fields`), after
    the decode step on whole GPUs measured on its traced plain-stream runs (``fit_whole_gpu``:
    :func:`apply_whole_gpu_fields`) and the prefill fields measured on its traced runs (the
    stretch beside others, the launch hold, ``prefill_at_longest``; ``fit_prefill_trace``:
    :func:`apply_prefill_trace_fields`) where it names any; last, where it names a colocated TP
    run (``fit_contention_tp``), the contention rate's TP power fitted on it
    (:func:`apply_contention_tp_power`)."""
    with open(os.path.join(LLM, GENERATIONS[gen.derives].calibration)) as f:
        out = json.load(f)
    entry_s, out["fit"]["decode_page_entry_fit"] = page_entry_seconds(gen)
    out["decode_page_entry_s"] = entry_s
    own = ["decode_page_entry_s"]
    kv_gbps, kv_power = out["decode_kv_gbps"], out["decode_kv_tp_power"]
    if gen.fit_streams is not None:
        full, out["fit"]["full_host_fit"] = full_decode_host(gen.fit_streams, kv_gbps, entry_s)
        out["decode_host_full_s"] = round(full, 6)
        own.append("decode_host_full_s")
    if gen.fit_tp is not None and (gen.fit_streams is not None or gen.tp_prefill_against is not None):
        tp_host, mesh_host, out["fit"]["tp_host_fit"] = tp_decode_host(gen, out["decode_host_full_s"], kv_gbps,
                                                                       kv_power, entry_s)
        out["decode_host_tp_s"], out["decode_host_mesh_s"] = round(tp_host, 6), round(mesh_host, 6)
        own += ["decode_host_tp_s", "decode_host_mesh_s"]
        if "whole_gpu_fit" in out["fit"] and not gen.fit_whole_gpu:  # its note on decode_host_mesh_s is the parent's
            out["fit"]["whole_gpu_fit"] += " [decode_host_mesh_s since measured again: tp_host_fit]"
        parent = GENERATIONS[gen.derives]
        if len(parent.fit_eager) > 1:
            tp_eager, out["fit"]["prefill_eager_host_tp_s_fit"] = tp_eager_host(gen, parent.fit_eager[1])
            out["prefill_eager_host_tp_s"] = round(tp_eager, 6)
            own.append("prefill_eager_host_tp_s")
        if gen.tp_prefill_against is not None:
            rank, mesh, out["fit"]["prefill_tp_fit"] = tp_prefill_host(gen, gen.tp_prefill_against)
            out["prefill_host_tp_s"], out["prefill_host_mesh_s"] = round(rank, 6), round(mesh, 6)
            own += ["prefill_host_tp_s", "prefill_host_mesh_s"]
    if gen.fit_whole_gpu:
        own += apply_whole_gpu_fields(gen, out)
    if gen.fit_prefill_trace:
        own += apply_prefill_trace_fields(gen, out)
    if gen.fit_eager:
        own += apply_eager_fields(gen, out)
    if gen.fit_contention_tp:
        own += apply_contention_tp_power(gen, out)
    out["fit"]["derived_from"] = (f"{gen.derives} ({GENERATIONS[gen.derives].calibration}): every field but "
                                  f"{', '.join(own)}")
    return out


def gpu_calibration(gen: Generation, gpu: GpuCalibration) -> dict:
    """``gen``'s calibration for its runs on ``gpu.gpu``: its file's fields with
    ``contention_hbm_gbps`` fitted on ``gpu.engines``' green-context rounds and
    ``contention_hbm_cap_gbps`` on those and ``gpu.rounds``' (:func:`fit_hbm`,
    :func:`fit_hbm_cap`, as :func:`calibrate` fits a root generation's) and, with ``gpu.traces``,
    the SM-partition job fields fitted on their job traces (:func:`apply_gpu_trace_fields`), with
    ``gpu.whole_gpu`` the whole-GPU decode step on theirs (:func:`apply_whole_gpu_fields`), with
    ``gpu.partition_decode`` the decode step on partitions (:func:`apply_partition_decode_fields`),
    with ``gpu.own_decode_prefill`` the prefill beside its own decode step and the stretch beside
    others (:func:`apply_own_decode_prefill_fields`, on those and ``gpu.traces``), and with
    ``gpu.fit_own_prefill`` the decode step's speed beside its own prefill
    (:func:`fit_own_prefill_share`), then with ``gpu.prefill_time_knee`` the stretch beside
    others with its knee in the prefill's time alone (:func:`apply_prefill_time_knee_fields`), and
    with ``gpu.own_partition_knees`` both jobs of an LLM's partition with their knees in the
    prefill's prompt (:func:`apply_own_partition_knees`), with ``gpu.eager_time_knee`` an eager
    prefill's own knee (:func:`apply_prefill_eager_knee`), with ``gpu.whole_gpu_eager`` the eager
    launch on the whole GPU (:func:`apply_whole_gpu_eager_fields`) and last with
    ``gpu.combine_spill`` a decode step's split-combine spill (:func:`apply_combine_spill_fields`); with
    ``gpu.prefill_at_bucket`` every fit times a graph prefill at its bucket and the file sets
    ``prefill_at_bucket``."""
    with open(os.path.join(LLM, gen.calibration)) as f:
        out = json.load(f)
    if gpu.prefill_at_bucket:
        out["prefill_at_bucket"] = True
    five = engine_rounds(gpu.engines)
    if len(five) != len(gpu.engines):
        raise ValueError(f"{gpu.gpu}: one green-context round per five-LLM file wanted, got {len(five)} "
                         f"in {len(gpu.engines)}")
    hbm, rms, cap, cap_rms, rounds = fit_contention(five, gpu.rounds)
    before = replay_rms(out["contention_hbm_gbps"], rounds, out["contention_hbm_cap_gbps"])
    out["contention_hbm_gbps"], out["contention_hbm_cap_gbps"] = hbm, cap
    out["fit"]["gpu"] = (f"{gpu.gpu}: contention_hbm_gbps on {', '.join(gpu.engines)} (RMS log error {rms:.4f}), "
                         f"contention_hbm_cap_gbps on {len(rounds)} green-context rounds ({', '.join(gpu.engines)}, "
                         f"{', '.join(gpu.rounds)}; RMS log error {cap_rms:.4f}, {before:.4f} with "
                         f"{gen.calibration}'s); every other field {gen.calibration}'s"
                         f"{' but those below (gpu_traces, whole_gpu_fit)' if gpu.traces or gpu.whole_gpu else ''}")
    if gpu.traces:
        apply_gpu_trace_fields(gpu.traces, out)
    if gpu.whole_gpu:
        # at the effective context of the SM count the file holds (a derived generation inherits it)
        apply_whole_gpu_fields(dataclasses.replace(gen, fit_whole_gpu=gpu.whole_gpu,
                                                   decode_attention_sms=int(out.get("decode_attention_sms", 0)),
                                                   whole_gpu_per_request=gpu.whole_gpu_per_request), out)
    if gpu.partition_decode:
        apply_partition_decode_fields(gpu.partition_decode, out)
    if gpu.own_decode_prefill:
        apply_own_decode_prefill_fields(gpu.traces + gpu.own_decode_prefill, out)
    if gpu.fit_own_prefill:
        share, out["fit"]["own_prefill"] = fit_own_prefill_share(gpu.traces, out)
        out["own_prefill_decode_share"] = share
    if gpu.prefill_time_knee:
        apply_prefill_time_knee_fields(gpu.prefill_time_knee, out)
    if gpu.own_partition_knees:
        apply_own_partition_knees(gpu.own_partition_knees, gpu.own_prefill_decode_knee, out)
    if gpu.eager_time_knee:
        apply_prefill_eager_knee(gpu.eager_time_knee, out)
    if gpu.whole_gpu_eager:
        apply_whole_gpu_eager_fields(gpu.whole_gpu_eager, out)
    if gpu.combine_spill:
        apply_combine_spill_fields(gpu.combine_spill, out)
    return out


#: a decode step runs beside its own LLM's prefill when at least this part of its GPU time overlaps one
OWN_PREFILL_OVERLAP = 0.8
#: the values ``own_prefill_decode_share`` is fitted among (:func:`fit_own_prefill_share`), ascending
#: (the setting's range ends below 1)
OWN_PREFILL_SHARES = tuple(round(0.05 * i, 2) for i in range(4, 20))


def _union(spans: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """``spans`` merged where they overlap, in order."""
    out: List[Tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def own_prefill_slowdowns(jobs: List[dict]) -> List[float]:
    """Per decode step of a job trace (measured rows, or the simulator's timeline as rows) that
    ran at least :data:`OWN_PREFILL_OVERLAP` of its GPU time beside a prefill of its own LLM (same
    mesh), its GPU time over the mean of its LLM's nearest steps (two either side) that ran clear
    of one: how much the LLM's own prefill slows its decode on their shared SM partition."""
    return [slowdown for _, slowdown, _ in own_prefill_steps(jobs)]


def own_prefill_steps(jobs: List[dict]) -> List[Tuple[str, float, int]]:
    """:func:`own_prefill_slowdowns`' steps with their LLM and the padded prompt tokens
    (requests x longest context) of the own prefill they overlap most: ``(llm, slowdown,
    tokens)`` per step."""
    steps: Dict[Tuple[int, str], List[Tuple[float, float]]] = defaultdict(list)
    prefills: Dict[Tuple[int, str], List[Tuple[float, float, int]]] = defaultdict(list)
    for j in jobs:
        if j["kind"] == "decode":
            steps[(j["group"], j["llm"])].append((j["device_start_s"], j["device_end_s"]))
        else:
            prefills[(j["group"], j["llm"])].append((j["device_start_s"], j["device_end_s"],
                                                     int(j["requests"]) * int(j["longest_context"])))
    out = []
    for key, decode in steps.items():
        own = sorted(prefills.get(key, []))
        spans = _union([(a, b) for a, b, _ in own])
        if not spans:
            continue
        starts, ends = np.array([a for a, _ in spans]), np.array([b for _, b in spans])
        decode.sort()

        def beside(a: float, b: float) -> float:
            i, o = int(np.searchsorted(ends, a)), 0.0
            while i < len(starts) and starts[i] < b:
                o += max(0.0, min(b, ends[i]) - max(a, starts[i]))
                i += 1
            return o / (b - a) if b > a else 0.0

        def tokens(a: float, b: float) -> int:
            return max((p for p in own if p[0] < b and p[1] > a), key=lambda p: min(b, p[1]) - max(a, p[0]))[2]

        part = [beside(a, b) for a, b in decode]
        for i, share in enumerate(part):
            clear = [decode[k][1] - decode[k][0] for k in (i - 2, i - 1, i + 1, i + 2)
                     if 0 <= k < len(decode) and part[k] == 0.0]
            if share >= OWN_PREFILL_OVERLAP and clear:
                a, b = decode[i]
                out.append((key[1], (b - a) / float(np.mean(clear)), tokens(a, b)))
    return out


def nearest_share(slowdown: Any, measured: float, grid: Sequence[float] = OWN_PREFILL_SHARES) -> float:
    """The value of ``grid`` (ascending) whose ``slowdown(share)`` is nearest ``measured`` (in log),
    by bisection: the slowdown falls as the share grows. ValueError when it lands at an end of the
    grid (the fit would lie beyond it)."""
    lo, hi = 0, len(grid) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if slowdown(grid[mid]) > measured else (lo, mid)
    best = min((grid[lo], grid[hi]), key=lambda s: abs(math.log(slowdown(s) / measured)))
    if best in (grid[0], grid[-1]):
        raise ValueError(f"own_prefill_decode_share fitted at the end of its grid ({best}): measured slowdown "
                         f"{measured:.2f}, simulated {slowdown(best):.2f}")
    return best


def simulated_own_prefill_slowdown(runs: List[dict], fields: Dict[str, float], share: float) -> float:
    """The median :func:`own_prefill_slowdowns` over the simulator's timelines of ``runs``
    (:func:`simulated_run_rows`) with the calibration ``fields`` and ``own_prefill_decode_share`` =
    ``share``; ValueError when no step runs beside its own LLM's prefill."""
    model = dict(model_fields(fields), own_prefill_decode_share=share)
    steps = [x for run in runs for x in own_prefill_slowdowns(simulated_run_rows(run, run_instance(run, model))[0])]
    if not steps:
        raise ValueError(f"no simulated decode step beside its own LLM's prefill at share {share}")
    return float(np.median(steps))


def fit_own_prefill_share(runs: Tuple[Tuple[str, str], ...], fields: Dict[str, float]) -> Tuple[float, str]:
    """``own_prefill_decode_share`` fitted on the job traces of ``runs``: the value of
    :data:`OWN_PREFILL_SHARES` whose simulated timelines of those runs (the calibration ``fields``
    otherwise) give the median :func:`own_prefill_slowdowns` nearest the measured one's
    (:func:`nearest_share`); returns it and a note. Why: the H100's 0.25 (measured on eager
    prefills, v3w) stretches a decode step beside its own LLM's graph prefill about 3x in the
    simulator, where one H200's fit traces measured 1.74-1.78x (docs/fidelity-llm.md "One split of
    the device: SM partitions alike"). ValueError for a run without a job trace or no such step."""
    chosen = [_find_run(spec) for spec in runs]
    measured_steps = []
    for spec, run in zip(runs, chosen):
        jobs = traced_jobs(run)
        if jobs is None:
            raise ValueError(f"{spec[0]}/{spec[1]}: the run has no job trace (jobs.csv)")
        measured_steps += own_prefill_slowdowns(jobs)
    if not measured_steps:
        raise ValueError(f"{', '.join(f'{f}/{n}' for f, n in runs)}: no decode step beside its own LLM's prefill")
    measured = float(np.median(measured_steps))
    simulated: Dict[float, float] = {}

    def slowdown(share: float) -> float:
        if share not in simulated:
            simulated[share] = simulated_own_prefill_slowdown(chosen, fields, share)
        return simulated[share]

    best = nearest_share(slowdown, measured)
    note = (f"own_prefill_decode_share on the job traces of {', '.join(f'{f}/{n}' for f, n in runs)}: a decode step "
            f"beside its own LLM's prefill measured {measured:.2f} x its neighbours' (median), simulated "
            f"{slowdown(best):.2f} x at {best}")
    return best, note


def traced_partition_decode_host(runs: Tuple[Tuple[str, str], ...]) -> Tuple[float, int]:
    """``decode_host_s`` measured on the job traces of ``runs``: the median host time of a decode
    step's launch (``launched_s - launch_s``, what the simulator's host model charges per step)
    of an LLM on an SM partition of a one-GPU mesh; returns it and the number of steps."""
    from placement_opt.simulate.llm import on_partition, sm_shares

    hosts = []
    for spec in runs:
        run = _find_run(spec)
        jobs = traced_jobs(run)
        if jobs is None:
            raise ValueError(f"{spec[0]}/{spec[1]}: the run has no job trace (jobs.csv)")
        _, placement, policy = run_setup(run)
        partition = {(gi, m) for gi, g in enumerate(placement.groups) if g.tp == 1
                     for m, sh in zip(g.models, sm_shares(g, policy)) if on_partition(sh)}
        hosts += [j["launched_s"] - j["launch_s"] for j in jobs
                  if j["kind"] == "decode" and (j["group"], j["llm"]) in partition]
    if not hosts:
        raise ValueError(f"{', '.join(f'{f}/{n}' for f, n in runs)}: no decode step on an SM partition traced")
    return float(np.median(hosts)), len(hosts)


def apply_gpu_trace_fields(runs: Tuple[Tuple[str, str], ...], out: dict) -> List[str]:
    """Set the calibration ``out``'s fields of jobs on SM partitions to those measured on the job
    traces of ``runs`` (runs on the calibration's GPU): a graph prefill's stretch beside others and
    its launch's host time (:func:`fit_prefill_trace`: ``prefill_beside_gbps``,
    ``prefill_beside_requests``, ``prefill_beside_knee_tokens``, ``prefill_beside_delay_s``,
    ``prefill_host_s``) and a decode step's host time (:func:`traced_partition_decode_host`:
    ``decode_host_s``), the prefills' table times at their buckets where ``out`` sets
    ``prefill_at_bucket``; returns the fields set. Why: on one H200 these ran 2.3-2.5 x and 0.4-0.7
    ms and 0.17-0.20 ms where the H100's fields say 3.0 x, 0.7-1.7 ms and 0.30 ms, and the mean
    TTFT at 3 x load came out 30-44% short on the GPU (docs/fidelity-llm.md)."""
    fields, rms, count = fit_prefill_trace(runs, bool(out.get("prefill_at_bucket", False)))
    host, steps = traced_partition_decode_host(runs)
    out.update(fields, decode_host_s=round(host, 6))
    out["fit"]["gpu_traces"] = (f"{prefill_trace_note(runs, fields, rms, count)}; decode_host_s the median of {steps} "
                                f"decode launches")
    return [*fields, "decode_host_s"]


def calibrate(gen: Generation) -> dict:
    """Fit ``gen``'s parameters (module docstring) and write its calibration file (a derived
    generation: :func:`derived_calibration`), then its other GPUs' files (:func:`gpu_calibration`)."""
    out = _calibrate(gen)
    for gpu in gen.gpus:
        _write_calibration(gen, gpu_calibration(gen, gpu), gpu.calibration)
    return out


def _calibrate(gen: Generation) -> dict:
    """:func:`calibrate` of ``gen``'s own calibration file."""
    if gen.derives:
        return _write_calibration(gen, derived_calibration(gen))
    if gen.fit_whole_gpu:  # a root generation's host fits take the KV term on whole GPUs
        raise ValueError(f"{gen.calibration}: only a derived generation measures the whole-GPU decode step "
                         "(fit_whole_gpu)")
    assert gen.fit is not None
    with open(os.path.join(LLM, gen.engine, "engine.json")) as f:
        engine = json.load(f)
    per = next(r for r in engine["runs"] if r["mechanism"] == "green-contexts")["per_llm"]
    hbm, rms, cap, cap_rms, rounds = fit_contention([per], gen.contention_rounds)
    floor = round(statistics.median((p["launch_us"] + p["finish_us"]) for p in per) / 1e6, 4)
    ratios = _host_ratios(engine)
    folder, name = gen.fit
    run = _find_run((folder, name))
    entry_s, entry_source = page_entry_seconds(gen)
    kv_gbps, kv_power, kv_source = kv_fields(gen, entry_s)
    stretch = 0.0
    beside = fit_prefill_beside(gen.prefill_rounds) if gen.prefill_rounds else (0.0, 0.0, math.nan)
    if gen.measure_graph_hold:
        decode_host, prefill_host, stretch, worst = fit_partition(run, hbm, floor, ratios, kv_gbps,
                                                                  gen.own_prefill_decode_share, entry_s, cap,
                                                                  beside[:2])
    else:
        decode_host, prefill_host, worst = fit_host(run, hbm, floor, ratios, kv_gbps, gen.own_prefill_decode_share,
                                                    entry_s, cap, beside[:2])
    full = streams_host(gen, engine, ratios, (decode_host, prefill_host), kv_gbps, entry_s)
    out = {"contention_hbm_gbps": hbm, "contention_hbm_cap_gbps": cap,
           "decode_host_s": round(decode_host, 6), "prefill_host_s": round(prefill_host, 6),
           "decode_host_full_s": round(full["decode_host_full_s"], 6),
           "prefill_host_full_s": round(full["prefill_host_full_s"], 6),
           "own_prefill_decode_share": gen.own_prefill_decode_share, "prefill_partition_stretch": stretch,
           "prefill_beside_stretch": beside[0], "prefill_beside_delay_s": beside[1],
           "fit": {"engine": os.path.join(gen.engine, "engine.json"), "tables": gen.tables, "hbm_rms_log_error": round(rms, 4),
                   "replayed_ms": [round(x, 3) for x in replay_round(hbm, per, cap)],
                   "measured_ms": [round(p["together_gpu_ms"], 3) for p in per],
                   "decode_host_floor_s": floor, "streams_over_green_host": [round(x, 4) for x in ratios],
                   "host_fit_run": f"{folder}/{name}", "host_fit_worst_tpot_ttft_err": round(worst, 4),
                   "full_host_fit": full["source"]}}
    if gen.contention_rounds:
        out["fit"]["hbm_cap_fit"] = (f"{os.path.join(gen.engine, 'engine.json')}, {', '.join(gen.contention_rounds)}: "
                                     f"{len(rounds)} green-context rounds replayed at contention_hbm_gbps {hbm:.0f}, "
                                     f"RMS log error {cap_rms:.4f} (without the cap "
                                     f"{replay_rms(hbm, rounds, 0.0):.4f})")
    if gen.prefill_rounds:
        count = len(prefills_beside(gen.prefill_rounds)[0])
        out["fit"]["prefill_beside_fit"] = (f"{', '.join(gen.prefill_rounds)}: {count} prefills beside the other "
                                            f"LLMs' decodes, RMS log error {beside[2]:.4f}")
    if gen.measure_graph_hold:
        out["fit"]["prefill_host_fit"] = (f"{folder}/{name}: median silence before a graph prefill launch; "
                                          f"decode_host_s and prefill_partition_stretch fitted with it")
    tp_host, mesh_host, tp_source = tp_decode_host(gen, out["decode_host_full_s"], kv_gbps, kv_power, entry_s)
    out["decode_host_tp_s"] = round(tp_host, 6)
    out["decode_host_mesh_s"] = round(mesh_host, 6)
    out["fit"]["tp_host_fit"] = tp_source
    out["decode_kv_gbps"] = kv_gbps
    out["decode_kv_tp_power"] = kv_power
    out["decode_page_entry_s"] = entry_s
    out["fit"]["decode_page_entry_fit"] = entry_source
    out["fit"]["decode_kv_fit"] = kv_source
    prefill_tp, prefill_mesh, prefill_tp_source = tp_prefill_host(gen)
    out["prefill_host_tp_s"] = round(prefill_tp, 6)
    out["prefill_host_mesh_s"] = round(prefill_mesh, 6)
    out["fit"]["prefill_tp_fit"] = prefill_tp_source
    apply_eager_fields(gen, out)
    if len(gen.fit_eager) > 1:
        tp_eager, out["fit"]["prefill_eager_host_tp_s_fit"] = tp_eager_host(gen, gen.fit_eager[1])
        out["prefill_eager_host_tp_s"] = round(tp_eager, 6)
    if gen.fit_contention_tp:
        apply_contention_tp_power(gen, out)
    return _write_calibration(gen, out)


# ---------------------------------------------------------------- policy load


def policy_load_lines(spec: str) -> List[str]:
    """The Poisson muxserve placement simulated under adbs, round-robin and fcfs with the
    workload's rates times SCALE and, if given, ``llm.kv_reserve_fraction`` RESERVE (``spec``
    is ``SCALE[:RESERVE]``), with the newest generation's tables and calibration: one line per
    policy (throughput, SLO attainment, mean TTFT and TPOT, preemptions)."""
    from placement_opt.placement import load_placement
    from placement_opt.simulate.llm import simulate_llm

    scale_text, _, reserve_text = spec.partition(":")
    try:
        scale, reserve = float(scale_text), (float(reserve_text) if reserve_text else None)
    except ValueError:
        raise SystemExit(f"--policy-load: expected SCALE[:RESERVE], two numbers, got {spec!r}")
    gen = list(GENERATIONS.values())[-1]
    run = {"workload": "poisson", "placement": "muxserve", "folder": os.path.join(LLM, gen.results[0])}
    inst_path, placement_path = run_inputs(run)
    inst = generation_instance(inst_path, gen, run["folder"])
    llm = with_model(inst.llm_settings, generation_model(gen, run["folder"]))
    if reserve is not None:
        llm = dataclasses.replace(llm, kv_reserve_fraction=reserve)
    w = inst.workload
    w = dataclasses.replace(w, process=None if w.process is None else w.process.scaled(scale),
                            per_model={m: p.scaled(scale) for m, p in w.per_model.items()})
    inst = dataclasses.replace(inst, llm=llm, workload=w)
    placement = load_placement(placement_path)
    lines = []
    for policy in ("adbs", "round-robin", "fcfs"):
        m = simulate_llm(inst, placement, policy=policy)
        lines.append(f"rates x{scale:g} kv_reserve_fraction {llm.kv_reserve_fraction:g} "
                     f"(pool {m['groups'][0]['kv_pool_gb']:.2f} GB, {m['requests']} requests) {policy:11}: "
                     f"throughput {m['throughput_rps']:.3f} req/s, attainment {m['slo_attainment']:.3f}, "
                     f"TTFT {1e3 * m['ttft_mean_s']:.0f} ms, TPOT {1e3 * m['tpot_mean_s']:.1f} ms, "
                     f"preemptions {m['preemptions']}")
    return lines


# ---------------------------------------------------------------- predictions before a run


def prediction_lines(specs: List[str], overrides: Optional[Dict[str, float]] = None) -> List[str]:
    """The simulator's prediction of runs not made yet, each ``FOLDER/<workload>-<placement>``
    or ``FOLDER/<workload>-<placement>/<policy>`` (a results folder of an engine generation, and
    the run folder ``run_gpu.sh`` will write there; a policy names one trial of several on one
    set of workers): one JSON line per run with its generation's tables and calibration (the
    policy named, else the one the executor will use: the placement's scheduling or the
    instance's), to commit before the GPU runs it; ``overrides``: calibration fields set over the
    generation's (:func:`parse_overrides`), recorded in the line as ``set``."""
    from placement_opt.placement import load_placement
    from placement_opt.simulate.llm import resolve_policy

    lines = []
    for spec in specs:
        folder, _, name = spec.partition("/")
        workload, _, placement = name.partition("/")[0].rpartition("-")
        run = {"folder": os.path.join(LLM, folder), "name": name, "workload": workload, "placement": placement}
        gen = generation_of(run["folder"])
        if gen is None:
            raise SystemExit(f"--predict {spec}: {folder} is no results folder of an engine generation (GENERATIONS)")
        inst_path, placement_path = run_inputs(run)
        run["policy"] = resolve_policy(generation_instance(inst_path, gen, run["folder"]),
                                       load_placement(placement_path), name.partition("/")[2] or None)
        model = dict(generation_model(gen, run["folder"]), **overrides) if overrides else None
        sim = simulate_run(run, model)[0]
        lines.append(json.dumps({"run": spec, "generation": next(k for k, g in GENERATIONS.items() if g is gen),
                                 **({"set": overrides} if overrides else {}),
                                 "policy": run["policy"], "throughput_rps": round(sim["throughput_rps"], 4),
                                 "per_llm_rps": {m: round(v["throughput_rps"], 4) for m, v in sim["per_model"].items()},
                                 "ttft_mean_s": round(sim["ttft_mean_s"], 5), "tpot_mean_s": round(sim["tpot_mean_s"], 6),
                                 "slo_attainment": round(sim["slo_attainment"], 4)}))
    return lines


# ---------------------------------------------------------------- machine health

#: NVML clock-event reasons by which a GPU slows itself below the clocks its cost tables were
#: measured at: hardware slowdown, software thermal, hardware thermal, hardware power brake
SLOWDOWN_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal", 0x40: "hardware thermal",
                    0x80: "power brake"}


def _reading(cell: str) -> float:
    """One GPU-log reading; nan for ``[N/A]`` (a reading this GPU or driver does not give)."""
    try:
        return float(cell)
    except ValueError:
        return math.nan


def gpu_log(results: str) -> Optional[np.ndarray]:
    """``run_gpu.sh``'s ``gpu-log.csv`` (or its compressed twin) of a results folder as rows (Unix
    time, GPU index, SM MHz, memory MHz, power W, temperature C, utilisation %, clock-event
    reasons); None without one (folders measured before the log existed)."""
    path = stored(os.path.join(results, "gpu-log.csv"))
    if not os.path.exists(path):
        return None
    rows = []
    with open_text(path) as f:
        for line in f:
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != 8:  # a line cut by the logger's stop
                continue
            try:
                rows.append([float(cells[0]), float(cells[1])] + [_reading(c) for c in cells[2:7]]
                            + [float(int(cells[7], 16))])
            except ValueError:  # no time, GPU or reasons: nothing to place the line by
                continue
    return np.array(rows, dtype=float).reshape(-1, 8)


def gpu_window(log: np.ndarray, run: dict) -> Optional[dict]:
    """The log's samples inside ``run``'s trial (``summary.json`` ``trial_wall_s``): per GPU the
    minimum and median SM clock and peak temperature, and the slowdown reasons seen with the
    share of samples they were active in; None without a trial window or samples in it."""
    wall = run["summary"].get("trial_wall_s")
    if not wall:
        return None
    inside = log[(log[:, 0] >= wall[0]) & (log[:, 0] <= wall[1])]
    if not len(inside):
        return None
    per_gpu, reasons = {}, {}
    for g in sorted({int(i) for i in inside[:, 1]}):
        rows = inside[inside[:, 1] == g]
        per_gpu[g] = (float(np.nanmin(rows[:, 2])), float(np.nanmedian(rows[:, 2])), float(np.nanmax(rows[:, 5])))
        bits = rows[:, 7].astype(np.int64)
        for bit, name in SLOWDOWN_REASONS.items():
            active = np.mean((bits & bit) != 0)
            if active > 0:
                reasons[f"GPU {g} {name}"] = float(active)
    return {"per_gpu": per_gpu, "slowdown": reasons}


def gpu_lines(runs: List[dict]) -> List[str]:
    """One line per run with a GPU log window: its clocks, and the slowdown reasons seen."""
    lines = []
    for r in runs:
        w = r.get("gpu")
        if w is None:
            continue
        clocks = ", ".join(f"{g}: {lo:.0f}/{med:.0f} MHz {temp:.0f} C" for g, (lo, med, temp) in w["per_gpu"].items())
        slow = "; ".join(f"{k} {100 * v:.0f}% of samples" for k, v in w["slowdown"].items())
        lines.append(f"gpu {r['name']}: SM clock min/median per GPU {clocks}; "
                     f"{'SLOWED, not counted: ' + slow if slow else 'no slowdown'}")
    return lines


def slowed(run: dict) -> bool:
    """Whether a GPU logged slowing itself during ``run``'s trial: the run measured a machine
    unlike the one its tables were measured on, so it is printed but not counted."""
    return bool(run.get("gpu") and run["gpu"]["slowdown"])


def other_gpu(run: dict) -> bool:
    """Whether the executor found ``run``'s GPUs not the one its cost tables were measured on
    (``summary.json``'s ``tables_match_device``, :func:`placement_opt.executor.llm_run.tables_device`):
    it measured another card, so it is printed but not counted."""
    return run["summary"].get("tables_match_device") is False


# ---------------------------------------------------------------- report


def report(results: str) -> Tuple[List[dict], bool, bool]:
    """Print one results folder (the committed predictions, then the re-predicted ones, then
    the GPUs' clocks during each run where the folder has a GPU log); returns its runs but
    those a GPU slowed (:func:`slowed`) and those run on another GPU (:func:`other_gpu`), whether their rankings agree (re-predicted where there
    are any) and whether it had any ranking to compare."""
    runs = load_runs(results)
    repredict(runs)
    log = gpu_log(results)
    for r in runs:
        r["gpu"] = gpu_window(log, r) if log is not None else None
    print(f"== {os.path.relpath(results, HERE)}")
    for line in engine_lines(results):
        print(line)
    print(f"{'run':32} {'predicted':9} {'tput meas':>9} {'sim':>7} {'err':>6} {'llm err':>7} {'ttft err':>8} "
          f"{'tpot err':>8} {'attain pp':>9}  SM partitioning")
    for r in runs:
        s = r["summary"]
        for label, sim, e in [("committed", s["simulated"], s["errors"])] + [
                (lb, r[lb]["simulated"], r[lb]["errors"]) for lb in ("before", "after", "probe", "in-run") if lb in r]:
            print(f"{r['name']:32} {label:9} {s['measured']['throughput_rps']:9.3f} "
                  f"{sim['throughput_rps']:7.3f} {_fmt(e['throughput_err']):>6} {_fmt(e['max_llm_err']):>7} "
                  f"{_fmt(e['ttft_err']):>8} {_fmt(e['tpot_err']):>8} {e['slo_attainment_pp']:9.2f}  "
                  f"{','.join(s['sm_partitioning'])}{' (fit run)' if is_fit_run(r) else ''}")
    for line in gpu_lines(runs):
        print(line)
    for r in filter(other_gpu, runs):
        print(f"gpu {r['name']}: ran on {', '.join(r['summary']['device_names'])}, its tables measured on "
              f"{', '.join(r['summary']['tables_gpu'])}: ANOTHER GPU, not counted")
    runs = [r for r in runs if not slowed(r) and not other_gpu(r)]
    lines, ranking_ok, compared = rankings(runs)
    for line in lines:
        print(line)
    return runs, ranking_ok, compared


def _final_errors(runs: List[dict]) -> List[dict]:
    """The errors the last line summarises: per run, the re-predicted (after) ones where it
    has them, else the committed ones (a run whose inputs are not in the repository). A run's
    ``probe`` row (the prediction with the decode host time its host probe measured) is
    printed, not counted: at TP 4, where it would matter, it orders runs by their host time but
    reads 0.1-0.3 ms per step low, and predicts no better than the calibration (docs/fidelity-llm.md);
    nor is its ``in-run`` row (it reads the run it predicts: :func:`in_run_line`)."""
    return [r["after"]["errors"] if "after" in r else r["summary"]["errors"] for r in runs]


def summary_scope(folders: List[str], reported: Dict[str, Tuple[List[dict], bool, bool]]) -> List[str]:
    """The folders the last line summarises: every folder with results of the newest engine
    generation that has any and of the generations it derives from (all their runs count, fit
    and held out, warm and cold); without one, the newest folder with any result (runs or a
    roofline)."""
    for gen in reversed(list(GENERATIONS.values())):
        family = [gen]
        while family[-1].derives:
            family.append(GENERATIONS[family[-1].derives])
        mine = [f for f in folders if any(generation_of(f) is g for g in family) and reported[f][0]]
        if any(generation_of(f) is gen for f in mine):
            return mine
    have = [f for f in folders if reported[f][0] or os.path.exists(os.path.join(f, "roofline.json"))]
    return have[-1:] if have else folders[-1:]


#: issue 11's targets: |error| bound per metric (fractions; attainment in points)
TARGETS = (("throughput_err", 0.05, "throughput 5%"), ("max_llm_err", 0.10, "per-LLM 10%"),
           ("ttft_err", 0.15, "TTFT 15%"), ("tpot_err", 0.15, "TPOT 15%"), ("slo_attainment_pp", 3.0, "attainment 3 pp"))


def targets_line(runs: List[dict]) -> str:
    """How many of ``runs`` meet each target (a run without the metric counts as missing it)."""
    errs = _final_errors(runs)
    met = [f"{label} {sum(1 for e in errs if e.get(key) is not None and abs(e[key]) <= bound)}/{len(errs)}"
           for key, bound, label in TARGETS]
    return "targets met: " + ", ".join(met)


def scored_lines(paths: List[str]) -> List[str]:
    """Committed predictions (``--predict`` outputs, one JSON line per run) scored against the
    runs they were made for: per run its errors (:func:`errors`, against the measured figures
    of the run's summary), then per file how many runs meet each of :data:`TARGETS` and the
    mean |error| of throughput, TTFT and TPOT. A prediction whose run is not measured whole is
    left out and named."""
    out = []
    for path in paths:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        errs, missing = [], []
        for p in lines:
            try:
                run: Optional[dict] = find_run(p["run"])
            except ValueError:  # not run yet
                run = None
            if run is None or not whole_trial(run):
                missing.append(p["run"])
                continue
            sim = {"throughput_rps": p["throughput_rps"], "ttft_mean_s": p["ttft_mean_s"],
                   "tpot_mean_s": p["tpot_mean_s"], "slo_attainment": p["slo_attainment"],
                   "per_model": {m: {"throughput_rps": v} for m, v in p["per_llm_rps"].items()}}
            e = errors(run["summary"]["measured"], sim)
            errs.append(e)
            out.append(f"{os.path.basename(path)} {p['run']}: throughput {e['throughput_err']:+.3f}, worst LLM "
                       f"{e['max_llm_err']:.3f}, TTFT {e['ttft_err']:+.3f}, TPOT {e['tpot_err']:+.3f}, "
                       f"attainment {e['slo_attainment_pp']:+.2f} pp")
        met = ", ".join(f"{label} {sum(1 for e in errs if abs(e[key]) <= bound)}/{len(errs)}"
                        for key, bound, label in TARGETS)
        means = ", ".join(f"{k} {np.mean([abs(e[k + '_err']) for e in errs]):.3f}" for k in ("throughput", "ttft", "tpot"))
        out.append(f"{os.path.basename(path)}: targets met {met}; mean |error| {means}"
                   + (f"; not measured whole: {', '.join(missing)}" if missing else ""))
    return out


def in_run_line(runs: List[dict]) -> str:
    """Over the runs with an ``in-run`` row (:func:`in_run_host`: groups that run one job at a
    time), how many meet each target with the decode host time their own steps took, beside how
    many their counted (calibrated) prediction meets: how much of what is missed is the run's host
    pace, which no prediction made before the run knows (docs/fidelity-llm.md)."""
    have = [r for r in runs if "in-run" in r and "after" in r]

    def met(label: str, key: str, bound: float) -> int:
        return sum(1 for r in have if r[label]["errors"].get(key) is not None and abs(r[label]["errors"][key]) <= bound)

    return (f"with each run's own decode host time (in-run rows, {len(have)} runs, printed, not counted): "
            + ", ".join(f"{label} {met('in-run', key, bound)} (calibrated {met('after', key, bound)})"
                        for key, bound, label in TARGETS))


def last_line(runs: List[dict], ranking_ok: bool, roof: float) -> str:
    """The summary line over ``runs`` (module docstring)."""
    errs = _final_errors(runs)
    return (f"max_throughput_err={_worst([e['throughput_err'] for e in errs]):.4f} "
            f"max_llm_err={_worst([e['max_llm_err'] for e in errs]):.4f} "
            f"max_ttft_err={_worst([e['ttft_err'] for e in errs]):.4f} "
            f"max_attain_pp={_worst([e['slo_attainment_pp'] for e in errs]):.2f} "
            f"ranking_ok={int(ranking_ok)} decode_roofline={roof:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=None, help="one folder of GPU results (default: every results* folder)")
    ap.add_argument("--calibrate", nargs="?", const=list(GENERATIONS)[-1], choices=list(GENERATIONS), default=None,
                    help="fit one engine generation's host and contention parameters (default: the newest) "
                         "and write its calibration file, and its other GPUs' (Generation.gpus)")
    ap.add_argument("--policy-load", default=None, metavar="SCALE[:RESERVE]",
                    help="simulate the Poisson muxserve placement under adbs, round-robin and fcfs with the "
                         "rates times SCALE (and llm.kv_reserve_fraction RESERVE) with the newest calibration, "
                         "and print each policy's figures")
    ap.add_argument("--predict", nargs="+", default=None, metavar="FOLDER/RUN[/POLICY]",
                    help="print the prediction of runs not made yet (a generation's results folder / "
                         "<workload>-<placement>, and / policy for one trial of several), one JSON line each, "
                         "to commit before the GPU runs them")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                    help="with --predict: a calibration field set over the generation's (repeatable)")
    ap.add_argument("--scored", nargs="+", default=None, metavar="PREDICTIONS.jsonl",
                    help="score committed predictions (--predict outputs) against the runs they were made for")
    args = ap.parse_args()
    if args.scored:
        for line in scored_lines(args.scored):
            print(line)
        return
    if args.predict:
        try:
            overrides = parse_overrides(args.overrides)
        except ValueError as e:
            ap.error(str(e))
        for line in prediction_lines(args.predict, overrides):
            print(line)
        return
    if args.calibrate:
        print(json.dumps(calibrate(GENERATIONS[args.calibrate]), indent=1))
        return
    if args.policy_load:
        for line in policy_load_lines(args.policy_load):
            print(line)
        return
    folders = [args.results] if args.results else results_folders()
    reported = {folder: report(folder) for folder in folders}
    scope = summary_scope(folders, reported) if folders else []
    runs = [r for f in scope for r in reported[f][0] if whole_trial(r)]
    cut = [f"{os.path.relpath(r['folder'], LLM)}/{r['name']} ({r['summary']['status']})"
           for f in scope for r in reported[f][0] if not whole_trial(r)]
    if cut:
        print(f"trials not measured whole, counted nowhere: {', '.join(cut)}")
    # every ranking of the scope agrees, and there is at least one
    ranking_ok = all(reported[f][1] for f in scope) and any(reported[f][2] for f in scope)
    for (w, placement, policy), (tput, ttft, attain) in sorted(repeat_spreads(runs).items()):
        print(f"repeat spread {w}-{placement}/{policy}: {100 * tput:.2f}% of throughput "
              f"(ranking tolerance {100 * NOISE_TOLERANCE:.1f}%), {100 * ttft:.1f}% of mean TTFT, "
              f"{attain:.1f} points of SLO attainment")
    for (gen, w, placement, policy), m in sorted(repeat_means(runs).items()):
        lo, hi = m["attainment_pp_range"]
        print(f"repeat mean {gen} {w}-{placement}/{policy} ({m['runs']} runs): throughput {100 * m['throughput_err']:+.1f}%, "
              f"mean TTFT {100 * m['ttft_err']:+.1f}%, attainment {m['attainment_pp']:+.2f} points "
              f"(the runs: {lo:+.2f} to {hi:+.2f})")
    roofs = [f for f in folders if os.path.exists(os.path.join(f, "roofline.json"))]
    roof = roofs[-1] if roofs else (folders[-1] if folders else LLM)
    for line in alone_over_table_lines():
        print(line)
    print(f"(last line: {', '.join(os.path.relpath(f, HERE) for f in scope) or '-'}; "
          f"decode roofline: {os.path.relpath(roof, HERE)})")
    print(in_run_line(runs))
    print(targets_line(runs))
    print(last_line(runs, ranking_ok, roofline(roof)))


if __name__ == "__main__":
    main()
