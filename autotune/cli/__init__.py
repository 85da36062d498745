"""The `meshtune` command line. Only this package imports click.

Subcommands live one per module and are imported only when invoked, so
`meshtune plan` does not pay for the pipeline solver's or JAX's imports.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from autotune import __version__
from autotune.cli.common import (
    fail,
    interrupted,
    note_command_start,
    signals_handled,
    usage_error,
)
from autotune.errors import MeshtuneError

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

    def main(self, args: Any = None, prog_name: str | None = None, **extra: Any) -> Any:
        """Run the CLI with one error format for everything, click's usage
        errors included, and SIGTERM handled like Ctrl-C (exit 143)."""
        standalone = extra.pop("standalone_mode", True)
        note_command_start(as_program=args is None)
        with signals_handled():
            try:
                result = super().main(args, prog_name or "meshtune", standalone_mode=False, **extra)
            except click.exceptions.NoArgsIsHelpError as exc:  # bare `meshtune`
                click.echo(exc.ctx.get_help())
                result = 0
            except MeshtuneError as exc:  # e.g. an --out path checked while parsing
                fail(f"error: {exc.one_line()}", exc.exit_code)
            except click.ClickException as exc:
                usage_error(exc)
            except click.exceptions.Abort as exc:
                cause = exc.__cause__
                interrupted(cause if isinstance(cause, KeyboardInterrupt) else KeyboardInterrupt())
            except KeyboardInterrupt as exc:
                interrupted(exc)
        if not standalone:
            return result
        raise SystemExit(result if isinstance(result, int) else 0)


@click.group(
    cls=LazyGroup, lazy=SUBCOMMANDS, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="meshtune")
def main() -> None:
    """meshtune: plan 2D tensor-parallel (MeshSlice) training of an LLM on an
    accelerator mesh. Exit codes: 0 ok, 1 no feasible plan, 2 bad input."""
