"""Shared CLI plumbing: one error format, signal handling and output paths.

Every failure reaches the user as one line on stderr,
``meshtune: error: FILE: FIELD: got VALUE; RULE; fix: FIX`` (parts that do
not apply left out), click's own usage errors included; docs/reliability.md
describes the exit codes and the signal behaviour.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from autotune.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    MeshtuneError,
    Terminated,
    shorten,
)
from autotune.processes import solver_thread_running, terminate_children

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "EXIT_INTERNAL",
    "WRITTEN_NUMBER",
    "OutputPath",
    "bad_usage",
    "format_option",
    "guarded",
]


class WrittenNumber(click.ParamType):
    """A number option that keeps the text as typed, so an error shows
    `1e308` rather than `1e+308`."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        from autotune.safe_load import WrittenFloat

        try:
            return WrittenFloat(float(value), str(value))
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)


WRITTEN_NUMBER = WrittenNumber()


# time.perf_counter() when the running command started (see note_command_start)
_command_started_s: float | None = None


def note_command_start(as_program: bool) -> None:
    """Record when this command started: run as a program (`meshtune ...`),
    when its process started, so that a time limit counts the interpreter's
    start-up and imports too; called in-process (tests, a caller's
    `main([...])`), now."""
    global _command_started_s
    from autotune.processes import process_age_s

    now = time.perf_counter()
    _command_started_s = now - (process_age_s() if as_program else 0.0)


def command_started_s() -> float:
    """time.perf_counter() when the running command started (now, when no
    command has started)."""
    return time.perf_counter() if _command_started_s is None else _command_started_s


def fail(line: str, code: int) -> None:
    """Print `line` (whitespace collapsed to one line) on stderr and exit."""
    click.echo(f"meshtune: {' '.join(line.split())}", err=True)
    sys.exit(code)


def interrupted(exc: KeyboardInterrupt) -> None:
    """Stop child processes, then exit 143 after SIGTERM or 130 after Ctrl-C,
    with one line."""
    terminate_children()
    if isinstance(exc, Terminated):
        line, code = "terminated (SIGTERM)", EXIT_TERMINATED
    else:
        line, code = "interrupted (Ctrl-C)", EXIT_INTERRUPTED
    if solver_thread_running():
        # HiGHS still finishing its step after the interrupt (every cleanup has
        # run by now): a normal exit would wait for it, or abort under it.
        click.echo(f"meshtune: {line}", err=True)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    fail(line, code)


def usage_error(exc: click.ClickException) -> None:
    """Report a click usage error (bad option value, missing argument,
    unknown command or option) in meshtune's one-line format, exit 2."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "meshtune"
    message = " ".join(exc.format_message().split()).rstrip(".")
    fail(f"error: {command}: {shorten(message, 400)}; fix: see `{command} --help`", EXIT_BAD_INPUT)


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextmanager
def signals_handled() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` (a KeyboardInterrupt) for the
    duration, so cleanup code runs and the process exits 143 at once."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def guarded(fn: F) -> F:
    """Run a command body; report meshtune errors as one line on stderr with
    their exit code, and never show a traceback (unless MESHTUNE_DEBUG=1)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MeshtuneError as exc:
            fail(f"error: {exc.one_line()}", exc.exit_code)
        except KeyboardInterrupt as exc:
            interrupted(exc)
        except click.exceptions.Exit:
            raise
        except click.ClickException:
            raise
        except Exception as exc:
            if os.environ.get("MESHTUNE_DEBUG"):
                raise
            msg = shorten(" ".join(str(exc).split()), 300)
            fail(
                f"internal error: {type(exc).__name__}: {msg} "
                "(rerun with MESHTUNE_DEBUG=1 for a traceback and report it)",
                EXIT_INTERNAL,
            )

    return wrapper  # type: ignore[return-value]


class OutputPath(click.ParamType):
    """A file the command will write: checked when the options are parsed,
    before any work is done (see autotune.io.check_output_path)."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from autotune.io import check_output_path

        option = param.opts[0] if param is not None and param.opts else "--out"
        check_output_path(value, option)
        return str(value)


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
    fail(f"error: {message}", EXIT_BAD_INPUT)
