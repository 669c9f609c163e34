"""``placeopt execute`` and ``placeopt profile``: run placements and profile models on real devices.

torch is imported only when a command runs, so the CLI works without the executor extra.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Optional

import click

from placement_opt.errors import InputError
from placement_opt.io import read_json
from placement_opt.model import Architecture

from placement_opt.cli.common import (INSTANCE, check_output_path, emit_json, exit_interrupted, progress, read_instance,
                                      read_placement, table)
from placement_opt.limits import stop_requested


def _floats(text: str, field: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated numbers, got {text!r}", field) from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise InputError("expected positive finite numbers", field)
    return values


@click.command(name="execute")
@INSTANCE
@click.argument("placement", type=click.Path(dir_okay=False))
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="nccl: one process per GPU; gloo: CPU processes (auto: nccl when CUDA is available).")
@click.option("-o", "--output-dir", default="execute-out", show_default=True,
              help="Folder for metrics.json, simulated.json, requests.csv, summary.json.")
@click.option("--slo-scale", "slo_scales", default=None,
              help="Comma-separated SLO scales: one trial each on the same workers (subfolders slo-X).")
@click.option("--duration", type=float, default=None, help="Replay only the first this many seconds.")
@click.option("--hang-timeout", type=float, default=30.0, show_default=True,
              help="Stop when a request is this many seconds past its predicted finish.")
@click.option("--start-timeout", type=float, default=600.0, show_default=True,
              help="Stop when the workers are not ready after this many seconds.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Warm-up passes per model.")
@click.option("--cpu-threads", type=int, default=1, show_default=True, help="Torch threads per CPU worker.")
@click.option("--cuda-graphs/--no-cuda-graphs", default=True, show_default=True,
              help="On GPUs, run each stage as one CUDA graph replay (its all-reduces included).")
@click.option("--admission", type=click.Choice(["open-loop", "closed-loop"]), default="open-loop",
              show_default=True,
              help="DNN instances: open-loop admits on the profile-predicted stage clocks alone, as the "
                   "simulator does; closed-loop also corrects a group's clocks to at least what the measured "
                   "stage ends imply, so requests that would finish late behind a slower-than-profiled queue "
                   "are rejected.")
@click.option("--policy", default=None,
              help="LLM instances: comma-separated mesh scheduling policies (adbs, round-robin, fcfs, temporal), "
                   "one trial each on the same workers (subfolders <policy> when several); default: the "
                   "placement's scheduling, else the instance's llm.policy.")
@click.option("--host-probe/--no-host-probe", default=True, show_default=True,
              help="LLM instances: before the trials, measure every mesh's decode host time per LLM on this "
                   "machine and print the prediction made with it beside the calibrated one.")
@click.option("--job-trace", is_flag=True,
              help="LLM instances: also write jobs.csv per trial, every job's host launch and device start and end.")
@click.option("--op-channel", type=click.Choice(["pipe", "gloo"]), default="pipe", show_default=True,
              help="LLM instances: how a tensor-parallel mesh's leader sends each step's operations to its other "
                   "ranks: OS pipes, or a gloo broadcast (the engine before v3s, ~1 ms more per step; a baseline).")
@click.option("--json", "as_json", is_flag=True, help="Print the trial summaries as JSON.")
def execute_cmd(instance: str, placement: str, backend: str, output_dir: str, slo_scales: Optional[str],
                duration: Optional[float], hang_timeout: float, start_timeout: float, warmup: int, cpu_threads: int,
                cuda_graphs: bool, admission: str, policy: Optional[str], host_probe: bool, job_trace: bool,
                op_channel: str, as_json: bool) -> None:
    """Run PLACEMENT on INSTANCE's workload on real devices and compare with the simulator.

    DNN instances replay requests through pipelines of transformer stages; LLM instances run
    every mesh's LLMs with a paged KV cache and the simulator's scheduling policy.
    """
    from placement_opt.executor import require_torch

    require_torch()
    from placement_opt.executor.controller import ExecutorConfig, ExecutorError, execute

    inst = read_instance(instance)
    plc = read_placement(placement, inst)
    scales = _floats(slo_scales, "--slo-scale") if slo_scales else None
    names = [f"{x:g}" for x in scales or ()]
    repeated = [n for i, n in enumerate(names) if n in names[:i]]
    if repeated:
        raise InputError(f"{repeated[0]} is repeated (each scale's trial writes folder slo-X)", "--slo-scale")
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise InputError("must be a finite number > 0", "--duration")
    for value, flag in ((hang_timeout, "--hang-timeout"), (start_timeout, "--start-timeout")):
        if not (math.isfinite(value) and value > 0):
            raise InputError("timeouts must be finite and > 0", flag)
    if warmup < 0 or cpu_threads < 1:
        raise InputError("expected warmup >= 0 and cpu threads >= 1", "--warmup" if warmup < 0 else "--cpu-threads")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise InputError("exists and is not a folder", "--output-dir", output_dir)
    config = ExecutorConfig(backend=backend, hang_timeout_s=hang_timeout, start_timeout_s=start_timeout,
                            warmup=warmup, cpu_threads=cpu_threads, duration_s=duration, cuda_graphs=cuda_graphs,
                            admission=admission, host_probe=host_probe, job_trace=job_trace, op_channel=op_channel)
    if inst.is_llm:
        if scales:
            raise InputError("SLO-scale trials are for DNN instances", "--slo-scale")
        if admission != "open-loop":
            raise InputError("closed-loop admission is for DNN instances", "--admission")
        _execute_llm(inst, plc, output_dir, config, policy, as_json)
        return
    if policy is not None:
        raise InputError("scheduling policies are for LLM instances", "--policy")
    if job_trace:
        raise InputError("the job trace is for LLM instances", "--job-trace")
    if op_channel != "pipe":
        raise InputError("the operation channel is for LLM instances", "--op-channel")
    try:
        summaries = execute(inst, plc, output_dir, config, scales, log=progress)
    except ExecutorError as e:
        click.echo(f"placeopt: execute failed: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        exit_interrupted(stop_requested(), f"after saving the trials so far in {output_dir}")
    if as_json:
        emit_json(summaries)
        return
    rows = [[s["trial"], s["measured"]["slo_attainment"], s["simulated"]["slo_attainment"],
             s["difference"]["slo_attainment_pp"], s["measured"]["latency_mean_s"],
             s["simulated"]["latency_mean_s"], s["late"]] for s in summaries]
    click.echo(table(["trial", "attainment measured", "simulated", "diff (pp)", "mean latency measured (s)",
                      "simulated (s)", "late"], rows))
    progress(f"wrote {output_dir}")


def _execute_llm(inst: Any, plc: Any, output_dir: str, config: Any, policy: Optional[str], as_json: bool) -> None:
    """``placeopt execute`` of an LLM instance: run every policy, print measured beside simulated."""
    from placement_opt.executor.controller import ExecutorError
    from placement_opt.executor.llm_run import execute_llm

    policies = [p.strip() for p in policy.split(",") if p.strip()] if policy else None
    if policies is not None and len(set(policies)) != len(policies):
        raise InputError("a policy is repeated (each one's trial writes folder <policy>)", "--policy")
    try:
        summaries = execute_llm(inst, plc, output_dir, config, policies, log=progress)
    except ExecutorError as e:
        click.echo(f"placeopt: execute failed: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        exit_interrupted(stop_requested(), f"after saving the trials so far in {output_dir}")
    if as_json:
        emit_json(summaries)
        return
    keys = ["throughput_rps", "tokens_per_s", "ttft_mean_s", "tpot_mean_s", "slo_attainment", "sm_utilisation",
            "kv_utilisation"]
    for summary in summaries:
        m, s = summary["measured"], summary["simulated"]
        click.echo(f"policy {summary['policy']}")
        # the prediction made again with the decode host time the probe measured before the
        # trial, and with the one the trial's own steps took (after the fact: not a forecast)
        again = [(label, summary[key]) for label, key in (("with host probe", "simulated_with_probe"),
                                                          ("with in-run host", "simulated_with_in_run_host"))
                 if summary.get(key)]
        click.echo(table(["metric", "measured", "simulated", *(label for label, _ in again)],
                         [[k, m[k], s[k], *(sim[k] for _, sim in again)] for k in keys]))
        rows = [[name, pm["throughput_rps"], s["per_model"][name]["throughput_rps"], pm["ttft_mean_s"],
                 s["per_model"][name]["ttft_mean_s"]] for name, pm in m["per_model"].items()]
        click.echo(table(["model", "req/s measured", "simulated", "TTFT measured (s)", "simulated (s)"], rows))
    progress(f"SM partitioning: {', '.join(summaries[0]['sm_partitioning'])}; wrote {output_dir}")


def _architecture_from_file(path: str, model: str | None) -> tuple[str | None, Architecture]:
    data = read_json(path)
    base_dir = os.path.dirname(os.path.abspath(path))  # an hf_config path is relative to the file
    try:
        if isinstance(data, dict) and "models" in data:
            if not isinstance(data["models"], list):
                raise InputError(f"expected a list, got {type(data['models']).__name__}", "models")
            candidates = [(i, m) for i, m in enumerate(data["models"])
                          if isinstance(m, dict) and "architecture" in m and (model is None or m.get("name") == model)]
            if not candidates:
                raise InputError(f"no model{' named ' + repr(model) if model else ''} with an architecture",
                                 "--model" if model else "models")
            if len(candidates) > 1 and model is None:
                raise InputError("several models have architectures; pick one", "--model")
            i, m = candidates[0]
            arch = Architecture.from_dict(m["architecture"], f"models[{i}].architecture", base_dir)
            return m.get("name", f"model-{i}"), arch
        if isinstance(data, dict) and "architecture" in data:
            data = data["architecture"]
        return model, Architecture.from_dict(data, "architecture", base_dir)
    except InputError as e:
        raise e.with_file(path) from None


@click.command(name="profile")
@click.argument("source", type=click.Path(dir_okay=False))
@click.option("--model", default=None, help="Model of SOURCE (an instance) to profile.")
@click.option("--name", default=None, help="Profile name (default: the model's).")
@click.option("-o", "--output", required=True, help="Profile JSON to write (the format instances reference).")
@click.option("--details", default=None, help="Also write the per-layer / per-stage measurements here.")
@click.option("--configs", default=None, help="PPxTP list, e.g. 1x1,2x1,1x2 (default: all on the devices).")
@click.option("--devices", type=int, default=None,
              help="Devices for the default configs (default: the GPUs present, or 1 on CPU).")
@click.option("--batch-sizes", default="1", show_default=True, help="Comma-separated batch sizes.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="nccl: one process per GPU; gloo: CPU processes (auto: nccl when CUDA is available).")
@click.option("--warmup", type=int, default=5, show_default=True, help="Untimed passes before timing.")
@click.option("--repeats", type=int, default=20, show_default=True, help="Timed passes; the median is kept.")
@click.option("--gap", type=float, default=0.0, show_default=True,
              help="Idle seconds before each timed repeat (0: back to back).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights and inputs.")
@click.option("--cpu-threads", type=int, default=1, show_default=True, help="Torch threads per CPU process.")
@click.option("--cuda-graphs/--no-cuda-graphs", default=True, show_default=True,
              help="On GPUs, run each stage as one CUDA graph replay (its all-reduces included).")
@click.option("--llm", "llm_mode", is_flag=True,
              help="Profile as an LLM (prefill and decode cost table); implied when SOURCE's model has family llm.")
@click.option("--tp", "tp_list", default="1", show_default=True, help="LLM: comma-separated TP degrees.")
@click.option("--sm-shares", default="1", show_default=True,
              help="LLM: comma-separated SM shares in (0, 1] (green contexts on GPUs; CPU: 1 only).")
@click.option("--seq-lens", default="32,64,128,256,512", show_default=True,
              help="LLM: comma-separated prompt lengths (prefill) and context lengths (decode).")
@click.option("--token-budget", type=int, default=4096, show_default=True,
              help="LLM: prefill points with batch x length above this (batch > 1) are left unmeasured.")
@click.option("--block", type=int, default=16, show_default=True, help="LLM: tokens per KV block.")
@click.option("--gpu-name", default=None, help="LLM: the table's gpu field (default: the device's name).")
def profile_cmd(source: str, model: Optional[str], name: Optional[str], output: str, details: Optional[str],
                configs: Optional[str], devices: Optional[int], batch_sizes: str, backend: str, warmup: int,
                repeats: int, gap: float, seed: int, cpu_threads: int, cuda_graphs: bool, llm_mode: bool,
                tp_list: str, sm_shares: str, seq_lens: str, token_budget: int, block: int,
                gpu_name: Optional[str]) -> None:
    """Measure per-stage and per-layer latency and memory of SOURCE's architecture on the devices present.

    SOURCE is an architecture JSON, or an instance JSON (read without loading its profiles)
    with --model naming the model. LLMs (--llm, or a model of family llm) get a prefill and
    decode cost table by TP degree, SM share, batch and length instead (-o), with SM counts and
    memory per GPU in --details.
    """
    from placement_opt.executor import require_torch

    require_torch()
    import torch

    if llm_mode or _is_llm_model(source, model):
        _profile_llm(source, model, output, details, backend, batch_sizes, tp_list, sm_shares, seq_lens,
                     token_budget, block, gpu_name, warmup, repeats, seed, cpu_threads, cuda_graphs)
        return

    from placement_opt.executor.controller import ExecutorConfig, ExecutorError
    from placement_opt.executor.network import check_supported
    from placement_opt.executor.profiler import ProfileSettings, default_configs, parse_configs, profile_architecture
    from placement_opt.io import atomic_write_json

    model_name, arch = _architecture_from_file(source, model)
    check_output_path(output, inputs=[source])
    try:
        check_output_path(details, inputs=[source])
    except InputError as e:
        raise InputError(e.reason, "--details", e.file) from None
    if devices is not None and devices < 1:
        raise InputError(f"must be >= 1, got {devices}", "--devices")
    if cpu_threads < 1:
        raise InputError(f"must be >= 1, got {cpu_threads}", "--cpu-threads")
    name = name or model_name
    if not name:
        raise InputError("name the profile", "--name")
    resolved = ExecutorConfig(backend=backend).resolved_backend()
    present = torch.cuda.device_count() if resolved == "nccl" else 1
    if present == 0:
        raise InputError("nccl needs CUDA GPUs; none is present", "--backend")
    n_dev = devices or present
    if resolved == "nccl" and n_dev > present:
        raise InputError(f"only {present} GPUs are present", "--devices")
    cfgs = parse_configs(configs) if configs else default_configs(n_dev, arch.layers)
    for pp, tp in cfgs:
        if pp > arch.layers:
            raise InputError(f"{pp} stages but only {arch.layers} layers", "--configs")
        if resolved == "nccl" and tp > present:
            raise InputError(f"tp {tp} needs {tp} GPUs; {present} present", "--configs")
        check_supported(arch, tp, "architecture")
    sizes = tuple(sorted({int(b) for b in _floats(batch_sizes, "--batch-sizes")}))
    if warmup < 0 or repeats < 1:
        raise InputError("expected warmup >= 0 and repeats >= 1", "--repeats")
    if gap < 0:
        raise InputError("must be >= 0", "--gap")
    settings = ProfileSettings(configs=cfgs, batch_sizes=sizes, warmup=warmup, repeats=repeats, gap_s=gap,
                               backend=resolved, seed=seed, cpu_threads=cpu_threads, cuda_graphs=cuda_graphs)
    progress(f"profiling {name}: configs {', '.join(f'{p}x{t}' for p, t in cfgs)}, batch sizes {list(sizes)}, "
             f"{resolved}")
    try:
        profile, detail = profile_architecture(name, arch, settings)
    except ExecutorError as e:
        click.echo(f"placeopt: profile failed: {e}", err=True)
        sys.exit(1)
    atomic_write_json(output, profile.to_dict())
    if details:
        atomic_write_json(details, detail)
    rows = [[f"{c.pp}x{c.tp}", b, " ".join(f"{x * 1e3:.3f}" for x in c.stage_latency[i]),
             " ".join(f"{w / 1e9:.3f}" for w in c.stage_weight_bytes)]
            for _, c in sorted(profile.configs.items()) for i, b in enumerate(c.batch_sizes)]
    click.echo(table(["config", "batch", "stage latency (ms)", "stage weights (GB/GPU)"], rows))
    progress(f"wrote {output}")


def _is_llm_model(path: str, model: Optional[str]) -> bool:
    """Whether SOURCE is an instance whose (named, or only) model with an architecture has family llm."""
    data = read_json(path)
    if not (isinstance(data, dict) and isinstance(data.get("models"), list)):
        return False
    found = [m for m in data["models"] if isinstance(m, dict) and "architecture" in m
             and (model is None or m.get("name") == model)]
    return len(found) == 1 and found[0].get("family") == "llm"


def _ints(text: str, field: str) -> tuple[int, ...]:
    values = _floats(text, field)
    if any(v != int(v) for v in values):
        raise InputError("expected whole numbers", field)
    return tuple(sorted({int(v) for v in values}))


def _profile_llm(source: str, model: Optional[str], output: str, details: Optional[str], backend: str,
                 batch_sizes: str, tp_list: str, sm_shares: str, seq_lens: str, token_budget: int, block: int,
                 gpu_name: Optional[str], warmup: int, repeats: int, seed: int, cpu_threads: int,
                 cuda_graphs: bool) -> None:
    """``placeopt profile`` of an LLM: check the options, measure, write the cost table."""
    import torch

    from placement_opt.executor.controller import ExecutorConfig, ExecutorError
    from placement_opt.executor.llm_model import check_llm_supported
    from placement_opt.executor.llm_profiler import LLMProfileSettings, profile_llm
    from placement_opt.io import atomic_write_json

    model_name, arch = _architecture_from_file(source, model)
    check_output_path(output)
    resolved = ExecutorConfig(backend=backend).resolved_backend()
    tps = _ints(tp_list, "--tp")
    shares = tuple(sorted(set(_floats(sm_shares, "--sm-shares"))))
    if any(x > 1 for x in shares):
        raise InputError("SM shares are fractions in (0, 1]", "--sm-shares")
    if resolved == "gloo" and shares != (1.0,):
        raise InputError("CPU processes have no SM shares: use --sm-shares 1", "--sm-shares")
    present = torch.cuda.device_count() if resolved == "nccl" else max(tps)
    if max(tps) > present:
        raise InputError(f"tp {max(tps)} needs {max(tps)} GPUs; {present} present", "--tp")
    for tp in tps:
        check_llm_supported(arch, tp, "architecture")
    if warmup < 0 or repeats < 1 or token_budget < 1 or block < 1 or cpu_threads < 1:
        raise InputError("expected warmup >= 0 and repeats, token budget, block and cpu threads >= 1", "--repeats")
    settings = LLMProfileSettings(tp_degrees=tps, sm_shares=shares, batch_sizes=_ints(batch_sizes, "--batch-sizes"),
                                  seq_lens=_ints(seq_lens, "--seq-lens"), token_budget=token_budget, block=block,
                                  warmup=warmup, repeats=repeats, backend=resolved, seed=seed,
                                  cpu_threads=cpu_threads, cuda_graphs=cuda_graphs)
    progress(f"profiling LLM {model_name or 'model'}: tp {list(tps)}, SM shares {list(shares)}, batch sizes "
             f"{list(settings.batch_sizes)}, lengths {list(settings.seq_lens)}, {resolved}")
    try:
        cost_table, detail = profile_llm(model_name or "model", arch, settings, gpu_name)
    except ExecutorError as e:
        click.echo(f"placeopt: profile failed: {e}", err=True)
        sys.exit(1)
    atomic_write_json(output, cost_table)
    if details:
        atomic_write_json(details, detail)
    rows = [[tp, share, b, t["prefill_ms"][k][i][-1], t["decode_ms"][k][i][-1]]
            for tp, t in cost_table["tp"].items() for k, share in enumerate(t["sm_share"])
            for i, b in enumerate(t["batch"])]
    click.echo(table(["tp", "SM share", "batch", f"prefill ms @{settings.seq_lens[-1]}",
                      f"decode ms @{settings.seq_lens[-1]}"], rows))
    progress(f"wrote {output}")


COMMANDS = [execute_cmd, profile_cmd]
