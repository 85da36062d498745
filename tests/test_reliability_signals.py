"""Interruptions: Ctrl-C (SIGINT) and SIGTERM stop a command within a
second, exit 130/143 with one line, leave existing outputs untouched and no
temporary files behind.

The first test runs `plan` in a child process whose planner is replaced by
a slow stand-in (pure Python, like the real search), so the signal always
lands while work is under way. The pipeline tests run the real command on
an instance whose MILP runs to any limit: Ctrl-C used to wait for the
running HiGHS call to return, and SIGINT/SIGTERM during a CBC solve left the
CBC process running and its temporary files behind.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import autotune.job.plan as planner

    def slow_plan(*args, **kwargs):
        # an external solver stand-in: a child process that would outlive us
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        Path(sys.argv[3]).write_text(str(child.pid))
        Path(sys.argv[1]).write_text("ready")
        while True:
            time.sleep(0.01)

    planner.make_plan = slow_plan
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


def _as_from_a_terminal() -> None:
    """Run in the child before exec: Ctrl-C and SIGTERM at their default
    dispositions, as for a command started from a terminal. A test run in
    the background (a CI job started with `&`) inherits SIGINT ignored, and
    a process that starts with SIGINT ignored rightly keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
        preexec_fn=_as_from_a_terminal,
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


# A pipeline instance whose MILP runs to any limit (16 stages x 3 chunks,
# interleaved, the cap 5% above the tightest at which a plan exists; from the
# family of benchmarks/pipeline_robustness.py): the signal lands while the
# solver, not Python, is running.
HARD_PIPELINE = textwrap.dedent(
    """
    pipeline: {num_stages: 16, num_chunks: 3, num_micro_batches: 16, schedule: interleaved-1f1b}
    memory: {cap_gib: 11.05, constant_gib: 4.0}
    recompute_options: {none: 0.0, selective: 0.04, comm: 0.125, selective_comm: 0.165, full: 0.5}
    head: {forward_ms: 1.0, memory_gib: 3.0}
    tail: {forward_ms: 2.0, memory_gib: 3.0}
    layers:
      - kind: decoder
        count: 96
        forward_ms: 1.0
        parameter_memory_gib: 0.4
        activation_memory_gib:
          {none: 0.30, selective: 0.219, comm: 0.189, selective_comm: 0.12, full: 0.03}
    """
)


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[1] == str(pid):
            found.add(int(entry))
    return found


def _cbc_children(pid: int) -> set[int]:
    """`pid`'s children that run CBC (not the second plan search, portfolio.py)."""
    found = set()
    for child in _children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"cbc" in command.lower():
            found.add(child)
    return found


def _start_pipeline(tmp_path: Path, solver: str) -> tuple[subprocess.Popen, Path]:
    spec = tmp_path / "hard.yaml"
    spec.write_text(HARD_PIPELINE + f"solver: {{solver: {solver}}}\n")
    out = tmp_path / "plan.json"
    tmp = tmp_path / "tmp"  # the solver's temporary files go here
    tmp.mkdir()
    args = ["pipeline", str(spec), "--time-limit", "60", "--out", str(out), "--verbose"]
    child = subprocess.Popen(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    return child, tmp


def _signal_and_wait(child: subprocess.Popen, signum: int) -> tuple[float, str]:
    sent = time.monotonic()
    child.send_signal(signum)
    try:
        _, stderr = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail("the command did not stop within 30 s of the signal")
    return time.monotonic() - sent, stderr


@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_hangs_ctrl_c_waits_for_the_running_highs_call(tmp_path, signum, code, word):
    child, tmp = _start_pipeline(tmp_path, "highs")
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in child.stderr], daemon=True)
    reader.start()
    deadline = time.monotonic() + 90
    while True:  # the MILP's log (on stderr with --verbose) says it is running
        assert child.poll() is None, "the command ended before its MILP started"
        assert time.monotonic() < deadline, "the MILP never started"
        try:
            if "Solving MIP model" in lines.get(timeout=0.5):
                break
        except queue.Empty:
            pass
    time.sleep(1.0)  # well inside the solve (it runs to the 60 s limit)
    assert child.poll() is None
    sent = time.monotonic()
    child.send_signal(signum)
    child.wait(timeout=60)
    elapsed = time.monotonic() - sent
    reader.join(timeout=5)
    tail = []
    while not lines.empty():
        tail.append(lines.get())
    assert child.returncode == code, tail[-5:]
    assert tail and tail[-1].startswith(f"meshtune: {word}"), tail[-5:]
    assert elapsed < 1.5, f"stopped {elapsed:.2f} s after the signal"
    assert not (tmp_path / "plan.json").exists()
    assert list(tmp.iterdir()) == []


def test_hangs_sigterm_during_a_cbc_solve_leaves_cbc_running_and_temp_files(tmp_path):
    child, tmp = _start_pipeline(tmp_path, "cbc")
    deadline = time.monotonic() + 90
    while True:  # a CBC process that lives on for a second: a MILP, not a quick LP
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "CBC never ran"
        before = _cbc_children(child.pid)
        if before:
            time.sleep(1.0)
            cbc = before & _cbc_children(child.pid)
            if cbc:
                break
        time.sleep(0.05)
    assert any(list(tmp.iterdir()))  # CBC's model and log files, meanwhile
    elapsed, stderr = _signal_and_wait(child, signal.SIGTERM)
    assert child.returncode == 143, stderr[-500:]
    assert stderr.strip().splitlines()[-1] == "meshtune: terminated (SIGTERM)"
    assert elapsed < 1.5, f"stopped {elapsed:.2f} s after the signal"
    assert all(_gone(pid, wait_s=2.0) for pid in cbc), "CBC still runs"
    assert list(tmp.iterdir()) == [], "temporary files left behind"
    assert not (tmp_path / "plan.json").exists()
