"""This process's child processes (an external solver, say): find them and
stop them, so an interrupted command leaves none running."""

from __future__ import annotations

import os
import signal
import threading
import time

# The name of a thread that runs an in-process solver (HiGHS). Interrupted,
# the solver stops at its next interrupt check, which can take a second; the
# interpreter's shutdown must not wait for it or tear down its memory under it.
SOLVER_THREAD = "meshtune-solver"


def process_age_s() -> float:
    """Seconds since this process started: Linux's /proc/self/stat start
    time (clock ticks after boot) against the boot clock, to 10 ms; 0.0
    where the system does not say (the interpreter's start-up, a few tenths
    of a second, is then not counted)."""
    try:
        with open("/proc/self/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
        # the fields after the command name (which may hold spaces) start
        # with field 3; the start time is field 22
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return age_s if 0.0 <= age_s < 86_400.0 else 0.0


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system
    reports it, else the machine's count; at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def child_pids() -> list[int]:
    """This process's direct children (Linux /proc; elsewhere none found)."""
    me = os.getpid()
    children = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                stat = handle.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after it
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(me):
            children.append(int(entry))
    return children


def terminate_children() -> None:
    """Send SIGTERM to the child processes this process started (an external
    solver, say), so an interrupted command leaves none running."""
    for pid in child_pids():
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def solver_thread_running() -> bool:
    """True while an in-process solver's thread (SOLVER_THREAD) still runs."""
    return any(t.name == SOLVER_THREAD and t.is_alive() for t in threading.enumerate())
