"""Errors that the CLI maps to exit codes and one-line messages."""

from __future__ import annotations

EXIT_OK = 0
EXIT_NO_PLAN = 1
EXIT_BAD_INPUT = 2


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
        where = self.file or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        if where:
            parts.append(where)
        if self.field:
            parts.append(self.field)
        head = ": ".join(parts)
        body = self.message
        if self.value is not None:
            shown = repr(self.value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            body = f"got {shown}; {body}"
        if self.fix:
            body = f"{body}; fix: {self.fix}"
        return " ".join(f"{head}: {body}".split()) if head else " ".join(body.split())


class NoFeasiblePlanError(MeshtuneError):
    """Every candidate was infeasible; the message summarises why."""

    exit_code = EXIT_NO_PLAN
