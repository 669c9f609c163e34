"""Export an LLM placement to serving engines: MuxServe's runtime YAML, vLLM and SGLang launch scripts.

:func:`export_files` returns ``{file name: text}`` for one target; the ``placeopt export``
command writes them. Every number comes from the placement and the memory plan of its
rule set (:mod:`placement_opt.llm_rules`); ``docs/export.md`` maps each field to its source.

Per LLM of a mesh of ``tp`` GPUs (bytes per GPU): weights ``W / tp``, the rule set's
runtime reserve ``R``, and a KV quota: the mesh's KV pool (memory - weights - reserves)
split in proportion to rate x KV bytes per token (the simulator's initial ADBS quotas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.llm_rules import llm_rule_violations
from placement_opt.llm_units import LLMSpec, llm_config, llm_specs, mesh_memory, placement_rules
from placement_opt.placement import Placement
from placement_opt.settings import RuleSet

TARGETS = ("muxserve", "vllm", "sglang")
GB = 1e9
BASE_PORT = 8000


@dataclass(frozen=True)
class LLMPlan:
    """One LLM of one mesh as an engine must be configured."""

    group: int
    spec: LLMSpec
    devices: tuple  # global device ids
    local_devices: tuple  # ids within the node
    node: int
    tp: int
    share: float  # decode (or only) SM share
    prefill_share: float
    weights_per_gpu: float
    reserve_per_gpu: float
    kv_per_gpu: float
    max_num_seqs: int
    port: int
    shared_mesh: bool  # other LLMs on the same GPUs

    @property
    def engine_bytes(self) -> float:
        """Bytes per GPU the engine may use: weights + reserve + KV quota (vLLM's memory budget)."""
        return self.weights_per_gpu + self.reserve_per_gpu + self.kv_per_gpu

    @property
    def model_path(self) -> str:
        return "${MODEL_ROOT:-/models}/" + self.spec.name


def memory_plans(placement: Placement, instance: Instance) -> List[LLMPlan]:
    """The plan of every LLM of every mesh; a placement that breaks a rule is an input error."""
    if not instance.is_llm:
        raise InputError("only LLM placements can be exported: vLLM, SGLang and MuxServe serve LLMs, and this "
                         "instance has DNN models (serve those with `placeopt execute`)", "--instance")
    problems = llm_rule_violations(placement, instance)
    if problems:
        raise InputError(f"{problems[0].reason} (run `placeopt validate` for every violation)", problems[0].field)
    rules = placement_rules(placement)
    memory = mesh_memory(instance, rules)
    cfg = llm_config(instance)
    index = {s.name: s for s in llm_specs(instance)}
    gpn = instance.cluster.gpus_per_node
    out: List[LLMPlan] = []
    for gi, g in enumerate(placement.groups):
        members = [index[m] for m in g.models]
        weights = sum(s.weight_bytes for s in members)
        pool = memory.kv_pool(g.n_gpus, weights, len(members))
        demand = sum(s.rate * s.kv_bytes_per_token for s in members)
        shares = g.sm_share or (1.0,) * len(members)
        for s, share in zip(members, shares):
            part = s.rate * s.kv_bytes_per_token / demand if demand > 0 else 1.0 / len(members)
            seqs = int(pool * part // (s.kv_bytes_per_token * s.tokens_per_request))
            out.append(LLMPlan(group=gi, spec=s, devices=g.devices, local_devices=tuple(d % gpn for d in g.devices),
                               node=g.devices[0] // gpn, tp=g.tp, share=float(share),
                               prefill_share=rules.prefill_share(s.params_billion, float(share)),
                               weights_per_gpu=s.weight_bytes / g.n_gpus, reserve_per_gpu=memory.reserve,
                               kv_per_gpu=pool * part / g.n_gpus, max_num_seqs=max(1, min(seqs, cfg.max_batch)),
                               port=BASE_PORT + len(out), shared_mesh=len(members) > 1))
    return out


def _percent(share: float) -> int:
    return int(round(share * 100))


def muxserve_yaml(plans: List[LLMPlan], gpu_bytes: float, max_batch: int) -> str:
    """One mesh as MuxServe's runtime config (field names of its examples/basic/model_config.yaml)."""
    kv = sum(p.kv_per_gpu for p in plans)
    lines = [f"num_gpus: {plans[0].tp}", f"max_num_seqs: {max_batch}", "overload_threshold: 2",
             f"gpu_memory_utilization: {kv / gpu_bytes:.4f}", "models:"]
    for p in plans:
        lines += [f"- name: {p.spec.name}", f"  model: {p.model_path}", f"  tensor_parallel_size: {p.tp}",
                  "  pipeline_parallel_size: 1", "  placement:", f"  - [{', '.join(str(d) for d in p.local_devices)}]",
                  f"  mps_percentage: [{_percent(p.prefill_share)}, {_percent(p.share)}]",
                  f"  max_num_seqs: {p.max_num_seqs}", f"  model_dtype: {p.spec.architecture.dtype}"]
    lines += ["workloads:", "  workload_file:"]
    return "\n".join(lines) + "\n"


def launch_script(plans: List[LLMPlan], target: str, gpu_bytes: float) -> str:
    """A bash script starting every LLM of one mesh with vLLM or SGLang, then waiting for them."""
    lines = ["#!/usr/bin/env bash", f"# mesh {plans[0].group}: node {plans[0].node}, GPUs "
             f"{','.join(str(d) for d in plans[0].local_devices)} (placement devices "
             f"{','.join(str(d) for d in plans[0].devices)}); generated by placeopt export", "set -euo pipefail"]
    for p in plans:
        env = [f"CUDA_VISIBLE_DEVICES={','.join(str(d) for d in p.local_devices)}"]
        if p.shared_mesh:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={_percent(p.share)}")
        if target == "vllm":
            cmd = [f"vllm serve \"{p.model_path}\"", f"--served-model-name {p.spec.name}",
                   f"--tensor-parallel-size {p.tp}",
                   f"--gpu-memory-utilization {p.engine_bytes / gpu_bytes:.4f}",
                   f"--max-num-seqs {p.max_num_seqs}", f"--port {p.port}"]
        else:
            cmd = [f"python -m sglang.launch_server --model-path \"{p.model_path}\"",
                   f"--served-model-name {p.spec.name}", f"--tp-size {p.tp}",
                   f"--mem-fraction-static {(p.weights_per_gpu + p.kv_per_gpu) / gpu_bytes:.4f}",
                   f"--max-running-requests {p.max_num_seqs}", f"--port {p.port}"]
        lines.append(" ".join(env) + " \\\n  " + " \\\n  ".join(cmd) + " &")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def readme(plans: List[LLMPlan], target: str, rules: RuleSet, gpu_bytes: float, files: List[str]) -> str:
    """How to start the exported files and where every number came from."""
    start = {"muxserve": "Start MuxServe on each mesh's node with its YAML as the runtime config "
                         "(`mesh<i>.yaml`; see the MuxServe README for the launcher).",
             "vllm": "Run `bash mesh<i>.sh` on the mesh's node; each LLM is an OpenAI-compatible server on its port.",
             "sglang": "Run `bash mesh<i>.sh` on the mesh's node; each LLM is an HTTP server on its port."}[target]
    rows = ["| mesh | LLM | node: GPUs | tp | SM share (prefill / decode) | weights + reserve + KV per GPU, GB "
            "| memory fraction | max seqs | port |", "|---|---|---|---|---|---|---|---|---|"]
    for p in plans:
        fraction = (p.engine_bytes if target != "sglang" else p.weights_per_gpu + p.kv_per_gpu) / gpu_bytes
        rows.append(f"| {p.group} | {p.spec.name} | {p.node}: {','.join(str(d) for d in p.local_devices)} | {p.tp} | "
                    f"{_percent(p.prefill_share)} / {_percent(p.share)} % | {p.weights_per_gpu / GB:.2f} + "
                    f"{p.reserve_per_gpu / GB:.2f} + {p.kv_per_gpu / GB:.2f} | {fraction:.4f} | {p.max_num_seqs} | "
                    f"{p.port} |")
    shared = any(p.shared_mesh for p in plans)
    text = [f"# placeopt export ({target}, {rules.name} rules)", "", "Files: " + ", ".join(f"`{f}`" for f in files),
            "", start, "", "Set `MODEL_ROOT` to the folder holding one checkpoint folder per LLM name.", ""]
    if shared:
        text += ["Several LLMs share GPUs: start the CUDA MPS daemon on each node first "
                 "(`nvidia-cuda-mps-control -d`); `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` is each LLM's SM share.", ""]
    text += rows + ["", "Where the numbers come from (see docs/export.md):", "",
                    "- tp, GPUs, SM shares: the placement's groups (`tp`, `devices`, `sm_share`); device ids are "
                    "local to the node; the prefill share is the rule set's by model size.",
                    f"- reserve: the {rules.name} rule set's runtime reserve per LLM per GPU.",
                    "- KV: the mesh's KV pool (memory - weights - reserves) split in proportion to rate x KV bytes "
                    "per token.",
                    "- memory fraction over the GPU's memory: vLLM `--gpu-memory-utilization` = weights + reserve + "
                    "KV; SGLang `--mem-fraction-static` = weights + KV; MuxServe `gpu_memory_utilization` = the "
                    "mesh's KV per GPU.",
                    "- max seqs: requests of mean length (prompt + output tokens) the LLM's KV quota holds, at most "
                    "`llm.max_batch`.", ""]
    return "\n".join(text)


def export_files(placement: Placement, instance: Instance, target: str) -> Dict[str, str]:
    """``{file name: text}`` exporting ``placement`` to ``target`` (one of :data:`TARGETS`)."""
    if target not in TARGETS:
        raise InputError(f"must be one of {', '.join(TARGETS)}, got {target!r}", "--to")
    plans = memory_plans(placement, instance)
    gpu_bytes = instance.cluster.gpu.memory_bytes
    out: Dict[str, str] = {}
    for gi in sorted({p.group for p in plans}):
        mesh = [p for p in plans if p.group == gi]
        if target == "muxserve":
            out[f"mesh{gi}.yaml"] = muxserve_yaml(mesh, gpu_bytes, llm_config(instance).max_batch)
        else:
            out[f"mesh{gi}.sh"] = launch_script(mesh, target, gpu_bytes)
    out["README.md"] = readme(plans, target, placement_rules(placement), gpu_bytes, sorted(out))
    return out
