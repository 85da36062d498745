"""Shared CLI plumbing: error-to-exit-code mapping and output writing."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from autotune.errors import EXIT_BAD_INPUT, MeshtuneError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_INTERNAL = 3


def guarded(fn: F) -> F:
    """Run a command body; report meshtune errors as one line on stderr with
    their exit code, and never show a traceback (unless MESHTUNE_DEBUG=1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MeshtuneError as exc:
            click.echo(f"meshtune: error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("meshtune: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:
            if os.environ.get("MESHTUNE_DEBUG"):
                raise
            msg = " ".join(str(exc).split())
            click.echo(
                f"meshtune: internal error: {type(exc).__name__}: {msg} "
                "(rerun with MESHTUNE_DEBUG=1 for a traceback and report it)",
                err=True,
            )
            sys.exit(EXIT_INTERNAL)

    return wrapper  # type: ignore[return-value]


def format_option(help: str) -> Callable[[F], F]:
    """The `--format table|json` option every command shares (as `fmt`)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help=help,
    )


def bad_usage(message: str) -> None:
    """Exit 2 with a one-line usage error."""
    click.echo(f"meshtune: error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)
