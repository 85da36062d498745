"""The `meshtune` command line. Only this package imports click.

Subcommands live one per module and are imported only when invoked, so
`meshtune plan` does not pay for the pipeline solver's or JAX's imports.
"""

from __future__ import annotations

import importlib

import click

from autotune import __version__

# name -> "module:attribute"; each module defines one click command.
SUBCOMMANDS: dict[str, str] = {
    "bench": "autotune.cli.bench:bench",
    "calibrate": "autotune.cli.calibrate:calibrate",
    "plan": "autotune.cli.plan:plan",
    "compare": "autotune.cli.compare:compare",
    "export": "autotune.cli.export:export",
    "pipeline": "autotune.cli.pipeline:pipeline",
    "presets": "autotune.cli.presets:presets",
    "verify": "autotune.cli.verify:verify",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module on first use."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            return getattr(importlib.import_module(module_name), attr)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup, lazy=SUBCOMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="meshtune")
def main() -> None:
    """meshtune: plan 2D tensor-parallel (MeshSlice) training of an LLM on an
    accelerator mesh. Exit codes: 0 ok, 1 no feasible plan, 2 bad input."""
