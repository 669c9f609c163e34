"""``placeopt export``: an LLM placement as MuxServe runtime YAML or vLLM / SGLang launch scripts."""

from __future__ import annotations

import os

import click

from placement_opt.cli.common import read_instance
from placement_opt.errors import InputError
from placement_opt.io import atomic_write_text
from placement_opt.llm_export import TARGETS, export_files
from placement_opt.placement import load_placement


@click.command(name="export")
@click.argument("placement", type=click.Path(dir_okay=False))
@click.option("--instance", "instance_path", required=True, type=click.Path(dir_okay=False),
              help="The instance the placement was made for.")
@click.option("--to", "target", required=True, type=click.Choice(TARGETS),
              help="Serving engine: muxserve (runtime YAML per mesh), vllm or sglang (launch script per mesh).")
@click.option("-o", "--output", "out_dir", required=True,
              help="Folder to write into (created if missing); a README there says how to start the engines.")
def export_cmd(placement: str, instance_path: str, target: str, out_dir: str) -> None:
    """Export PLACEMENT of an LLM instance to a serving engine's configuration files."""
    inst = read_instance(instance_path)
    plc = load_placement(placement)
    try:
        files = export_files(plc, inst, target)
    except InputError as e:
        raise e.with_file(placement) from None
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError("exists and is not a folder", "--output", out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        for name, text in files.items():
            atomic_write_text(os.path.join(out_dir, name), text)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", "--output", out_dir) from None
    click.echo(f"wrote {len(files)} files to {out_dir} ({', '.join(sorted(files))})")


COMMANDS = [export_cmd]
