"""Getting started: ``import-hf`` (a HuggingFace config.json as an architecture file) and
``init`` (a starter instance from the GPU and model catalogs)."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

import click

from placement_opt.errors import InputError

from placement_opt.cli.common import check_output_path, progress, table, write_output


@click.command(name="import-hf")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--name", default=None,
              help="Model name recorded in the architecture (default: the config's file name, or its folder's "
                   "for a config.json).")
@click.option("--dtype", default=None,
              help="Weights' dtype: fp16, bf16, fp32 or int8 (default: the config's torch_dtype; fp16 if absent).")
@click.option("-o", "--output", default="-", show_default=True,
              help="Architecture JSON to write (atomically); - prints it.")
def import_hf(config: str, name: Optional[str], dtype: Optional[str], output: str) -> None:
    """Convert a HuggingFace model's CONFIG (config.json: llama, mistral, qwen2, mixtral, bert, gpt2 or opt)
    into a placeopt architecture file, printing its parameter count. Instances may also name the
    config directly: "architecture": {"hf_config": "path/config.json"}."""
    from placement_opt.hf_config import load_hf_architecture
    from placement_opt.model import DTYPE_BYTES, Architecture

    check_output_path(output, inputs=[config])
    if dtype is not None and dtype not in DTYPE_BYTES:
        raise InputError(f"must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}", "--dtype")
    fields = load_hf_architecture(config)
    fields.update(name=name or _default_name(config), source=f"HuggingFace config {config}")
    if dtype is not None:
        fields["dtype"] = dtype
    try:
        arch = Architecture.from_dict(fields, "")
    except InputError as e:
        raise e.with_file(config) from None
    write_output(output, json.dumps(arch.to_dict(), indent=2) + "\n")
    params = arch.param_count()
    progress(f"{arch.name}: {arch.layers} layers, hidden {arch.hidden}, {params / 1e9:.3f} B parameters, "
             f"{arch.weight_bytes() / 1e9:.2f} GB of {arch.dtype} weights"
             + (f"; wrote {output}" if output != "-" else ""))


def _default_name(config: str) -> str:
    """``.../Llama-2-7b-hf/config.json`` -> ``Llama-2-7b-hf``; ``.../gpt2.json`` -> ``gpt2``."""
    path = os.path.abspath(config)
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.basename(os.path.dirname(path))
    return folder if stem == "config" and folder else stem


@click.command()
@click.option("--gpus", default="8", show_default=True, metavar="N",
              help="GPUs of the cluster, in nodes of 8: at most 8, or a multiple of 8.")
@click.option("--gpu", default="a100", show_default=True, help="GPU of the catalog (--list shows them).")
@click.option("--models", default=None, metavar="NAME[:COUNT],...",
              help="Catalog models and their copies (--list shows them) [default: bert-1.3b:8; with --llm, "
                   "llama-7b:4].")
@click.option("--rate", default="20", show_default=True, metavar="REQ/S",
              help="Total arrival rate in requests per second, split equally over the models.")
@click.option("--llm", is_flag=True, help="Serve the models as LLMs (MuxServe-style meshes) instead of DNNs.")
@click.option("-o", "--output", default=None, help="Instance JSON to write (atomically); - prints it.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("--list", "list_catalog", is_flag=True, help="List the catalog's GPUs and models, then exit.")
def init(gpus: str, gpu: str, models: Optional[str], rate: str, llm: bool, output: Optional[str], force: bool,
         list_catalog: bool) -> None:
    """Write a starter instance to edit: catalog GPUs, catalog models (AlpaServe's shapes and
    public HuggingFace models), Poisson arrivals, and a description of every section. It is
    checked to load before it is written."""
    from placement_opt.catalog import parse_count, parse_model_list, starter_instance

    if list_catalog:
        _print_catalog()
        return
    if output is None:
        raise InputError("missing: give the instance file to write (-o FILE)", "--output")
    _check_new_file(output, force)
    model_list = parse_model_list(models or ("llama-7b:4" if llm else "bert-1.3b:8"))
    name = "starter" if output == "-" else os.path.splitext(os.path.basename(output))[0]
    document = starter_instance(name, gpu, parse_count(gpus, "--gpus", maximum=100000), model_list,
                                _parse_rate(rate), llm)
    _check_loads(document, output)
    write_output(output, json.dumps(document, indent=2) + "\n")
    if output != "-":
        progress(f"wrote {output}; next: placeopt validate {output} && placeopt solve {output}")


def _check_new_file(output: str, force: bool) -> None:
    """Refuse to overwrite a file (an edited instance, perhaps) unless ``--force``."""
    check_output_path(output)
    if output != "-" and os.path.exists(output) and not force:
        raise InputError("exists (pass --force to overwrite it)", "--output", output)


def _parse_rate(text: str) -> float:
    """``--rate``: a finite number of requests per second > 0."""
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", "--rate") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"must be a finite number > 0, got {text}", "--rate")
    return value


def _check_loads(document: dict[str, Any], output: str) -> None:
    """The instance must load as written (e.g. every model must fit the cluster)."""
    from placement_opt.instance import instance_from_dict

    base_dir = os.path.dirname(os.path.abspath(output)) if output != "-" else "."
    try:
        instance_from_dict(document, base_dir=base_dir)
    except InputError as e:
        raise InputError(f"the starter instance would not load: {e.one_line()}") from None


def _print_catalog() -> None:
    """The GPU and model catalogs as two tables."""
    from placement_opt.catalog import gpu_catalog, model_catalog

    gpus = [[key, e["gpu"]["name"], e["gpu"]["memory_gb"], e["gpu"]["peak_fp16_tflops"],
             e["gpu"]["memory_bandwidth_gbps"]] for key, e in gpu_catalog().items()]
    click.echo(table(["gpu", "name", "memory GB", "fp16 TFLOP/s", "bandwidth GB/s"], gpus))
    click.echo()
    models = [[m.name, ", ".join(m.families), f"{m.architecture.param_count() / 1e9:.3f}", m.architecture.dtype,
               m.source] for m in model_catalog().values()]
    click.echo(table(["model", "families", "params (B)", "dtype", "source"], models))


COMMANDS = [import_hf, init]
