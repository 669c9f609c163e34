"""``placeopt parallelize``: the auto-parallelization plan of one model of an instance."""

from __future__ import annotations

from typing import Optional

import click

from placement_opt.errors import InputError
from placement_opt.instance import Instance
from placement_opt.model import ModelSpec

from placement_opt.cli.common import INSTANCE, JSON_FLAG, emit_json, read_instance, table


@click.command()
@INSTANCE
@click.option("--model", "model_name", required=True, help="Model name (as expanded: NAME-k for count > 1).")
@click.option("--gpus", type=int, required=True, help="GPUs of the group (pp x tp).")
@click.option("--pp", type=int, default=None, help="Pipeline stages (with --tp; default: list every config).")
@click.option("--tp", type=int, default=None, help="Tensor-parallel degree per stage (with --pp).")
@click.option("--solver", type=click.Choice(["cp-sat", "highs"]), default="cp-sat", show_default=True,
              help="ILP solver of the intra-op pass.")
@JSON_FLAG
def parallelize(instance: str, model_name: str, gpus: int, pp: Optional[int], tp: Optional[int], solver: str,
                as_json: bool) -> None:
    """Print how MODEL of INSTANCE runs on GPUS GPUs: stages, latencies, memory, sharding."""
    from placement_opt.parallel import enumerate_parallel_configs
    from placement_opt.parallel import parallelize as run_parallelize
    inst = read_instance(instance)
    model = _find_model(inst, model_name)
    if (pp is None) != (tp is None):
        raise InputError("give both --pp and --tp, or neither", "--pp/--tp")
    if gpus < 1:
        raise InputError(f"must be >= 1, got {gpus}", "--gpus")
    if pp is None:
        configs = [run_parallelize(model, inst.cluster, gpus, cpp, ctp, solver=solver)
                   for cpp, ctp in enumerate_parallel_configs(model, gpus, inst.cluster, solver=solver)]
        if as_json:
            emit_json({"model": model.name, "gpus": gpus, "configs": [c.to_dict() for c in configs]})
            return
        if not configs:
            click.echo(f"{model.name}: no (pp, tp) on {gpus} GPUs fits the usable memory")
            return
        rows = [[c.pp, c.tp, c.latency(1), float(c.stage_latency[0].max()), max(c.stage_weight_bytes) / 1e9]
                for c in configs]
        click.echo(table(["pp", "tp", "latency (s)", "max stage (s)", "max GB/GPU"], rows))
        return
    assert tp is not None  # --pp and --tp come together (checked above)
    pm = run_parallelize(model, inst.cluster, gpus, pp, tp, solver=solver)
    d = pm.to_dict()
    if as_json:
        emit_json({"model": model.name, **d})
        return
    click.echo(f"{model.name} on {gpus} GPUs: pp={pp} tp={tp}, latency {pm.latency(1):.4g} s at batch 1"
               + ("" if pm.fits_memory else f" (does NOT fit {pm.memory_budget / 1e9:.2f} GB per GPU)"))
    stage_rows = [[s, f"{st['units'][0]}-{st['units'][1] - 1}", ", ".join(st["unit_kinds"]), st["plan"],
                   st["latency_s"]["1"], st["weight_gb_per_gpu"],
                   ", ".join(f"{k} x{v}" for k, v in sorted(st["collectives"].items())) or "-"]
                  for s, st in enumerate(d["stages"])]
    click.echo(table(["stage", "units", "kinds", "plan", "latency b=1 (s)", "GB/GPU", "collectives"], stage_rows))
    for kind, plans in d["sharding"].items():
        ops = ", ".join(f"{op}={strat}" for op, strat in plans["fast"]["ops"].items())
        click.echo(f"{kind}: {ops}")


def _find_model(inst: Instance, name: str) -> ModelSpec:
    for m in inst.models:
        if m.name == name:
            if m.architecture is None:
                raise InputError("this model has a measured profile but no architecture to parallelize", "--model")
            return m
    names = inst.model_names
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    raise InputError(f"no model named {name!r} (models: {shown})", "--model")


COMMANDS = [parallelize]
