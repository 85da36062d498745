"""Interruptions: Ctrl-C (SIGINT) and SIGTERM stop a command within a
second, exit 130/143 with one line, leave existing outputs untouched and no
temporary files behind.

The command runs in a child process whose planner is replaced by a slow
stand-in (pure Python, like the real search), so the signal always lands
while work is under way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import autotune.plan.search as search

    def slow_plan(*args, **kwargs):
        # an external solver stand-in: a child process that would outlive us
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(sys.argv[3]).write_text(str(child.pid))
        Path(sys.argv[1]).write_text("ready")
        while True:
            time.sleep(0.01)

    search.plan = slow_plan
    from autotune.cli import main
    main(["plan", "examples/gpt3.yaml", "--out", sys.argv[2]])
    """
)


def _gone(pid: int, wait_s: float = 5.0) -> bool:
    """Whether `pid` has exited (or is a zombie awaiting its reaper)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                state = handle.read().rsplit(")", 1)[-1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _interrupt(tmp_path: Path, signum: int) -> tuple[subprocess.CompletedProcess, float]:
    ready = tmp_path / "ready"
    out = tmp_path / "plan.json"
    out.write_text("previous result")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ready), str(out), str(tmp_path / "child.pid")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never started planning"
        time.sleep(0.02)
    sent = time.monotonic()
    child.send_signal(signum)
    stdout, stderr = child.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    assert out.read_text() == "previous result"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    grandchild = int((tmp_path / "child.pid").read_text())
    assert _gone(grandchild), "the interrupted command left its child process running"
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr), elapsed


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")],
)
def test_signals_stop_within_a_second_with_one_line(tmp_path, signum, code, word):
    done, elapsed = _interrupt(tmp_path, signum)
    assert done.returncode == code, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"meshtune: {word}")
    assert "Traceback" not in done.stderr
    assert elapsed < 1.0 + 2.0  # one second, plus slack for a loaded test machine
