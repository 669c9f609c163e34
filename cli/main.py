"""Entry point of the ``placeopt`` command.

Every module ``placement_opt.cli.cmd_*`` contributes the click commands in its
``COMMANDS`` list, so features add commands without touching this file. Input errors
become one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any, Optional, Sequence

import click

from placement_opt.version import __version__
from placement_opt.errors import InputError


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except InputError as e:
            click.echo(f"placeopt: error: {e.one_line()}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("placeopt: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="placeopt")
def cli() -> None:
    """Place many deep-learning models on a GPU cluster for SLO attainment or throughput."""


def _load_commands() -> None:
    import placement_opt.cli as pkg
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("cmd_"):
            module = importlib.import_module(f"placement_opt.cli.{info.name}")
            for command in getattr(module, "COMMANDS", []):
                cli.add_command(command)


_load_commands()


def main(argv: Optional[Sequence[str]] = None) -> None:
    cli.main(args=argv, prog_name="placeopt")


if __name__ == "__main__":
    main()
