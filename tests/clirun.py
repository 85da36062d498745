"""Running the CLI in-process and checking meshtune's failure contract."""

from __future__ import annotations

import re
from dataclasses import dataclass

from click.testing import CliRunner

from autotune.cli import main

ERROR_LINE = re.compile(r"^meshtune: (error|interrupted|terminated|internal error)")


@dataclass(frozen=True)
class Run:
    """Exit code and the two output streams of one in-process run."""

    exit_code: int
    stdout: str
    stderr: str
    exception: BaseException | None


def run_cli(*args: str) -> Run:
    """`meshtune ARGS...` in-process (exceptions are reported, not raised)."""
    result = CliRunner().invoke(main, list(args))
    return Run(result.exit_code, result.stdout, result.stderr, result.exception)


def assert_one_line_error(run: Run, *fragments: str, code: int = 2) -> str:
    """The run failed with `code` and exactly one stderr line starting
    `meshtune: error:` holding every fragment; returns that line."""
    assert run.exit_code == code, (run.exit_code, run.stderr, run.exception)
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert line.startswith("meshtune: error: "), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert "Traceback" not in run.stderr
    return line
