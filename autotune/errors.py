"""Errors that the CLI maps to exit codes and one-line messages."""

from __future__ import annotations

import reprlib

EXIT_OK = 0
EXIT_NO_PLAN = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
EXIT_NO_PLAN_FOUND = 4  # `pipeline`: the time limit ran out, no plan and no proof
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM

MAX_SHOWN_CHARS = 80  # a value quoted in a message
MAX_FILE_CHARS = 160  # a file name in a message
MAX_FIX_CHARS = 300  # the fix (it may list valid values)

# Bounded repr: a huge value (say a YAML alias bomb) is never rendered whole.
_REPR = reprlib.Repr()
_REPR.maxstring = MAX_SHOWN_CHARS
_REPR.maxother = MAX_SHOWN_CHARS
_REPR.maxlong = 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def shorten(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters, the middle replaced by "..."."""
    if len(text) <= limit:
        return text
    keep = max(limit - 3, 2)
    return text[: keep - keep // 2] + "..." + text[len(text) - keep // 2 :]


def shown_value(value: object) -> str:
    """A bounded, one-line repr of `value` for an error message; a number
    read from a file is shown as it was written there (`1e308`, `.nan`)."""
    written = getattr(value, "written", None)
    if isinstance(written, str):
        return shorten(written)
    if isinstance(value, bool):
        return "true" if value else "false"  # as YAML and JSON write it
    return shorten(" ".join(_REPR.repr(value).split()))


class MeshtuneError(Exception):
    """Base class of every error meshtune reports without a traceback."""

    exit_code = EXIT_BAD_INPUT

    def one_line(self) -> str:
        """The message on one line."""
        return " ".join(str(self).split())


class InputError(MeshtuneError):
    """Bad input: names the file, the field, the value, the rule and the fix.

    Rendered as ``FILE: FIELD: got VALUE; RULE; fix: FIX`` (parts that do not
    apply are left out), always one line.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        field: str | None = None,
        value: object = None,
        fix: str | None = None,
        line: int | None = None,
    ) -> None:
        self.file = file
        self.field = field
        self.value = value
        self.fix = fix
        self.line = line
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        where = shorten(self.file, MAX_FILE_CHARS) if self.file else ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        if where:
            parts.append(where)
        if self.field:
            parts.append(shorten(self.field))
        head = ": ".join(parts)
        body = self.message
        if self.value is not None:
            shown = shown_value(self.value)
            body = f"got {shown}; {body}"
        if self.fix:
            body = f"{body}; fix: {shorten(self.fix, MAX_FIX_CHARS)}"
        return " ".join(f"{head}: {body}".split()) if head else " ".join(body.split())


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt so
    that every cleanup path that handles one handles both."""


class NoFeasiblePlanError(MeshtuneError):
    """Every candidate was infeasible; the message summarises why."""

    exit_code = EXIT_NO_PLAN


class NoPlanFoundError(MeshtuneError):
    """`pipeline`: the time limit ran out before any plan was found, and no
    proof that none exists: not exit 1, which means proven infeasible."""

    exit_code = EXIT_NO_PLAN_FOUND
