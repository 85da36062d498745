"""Two searches at once on two cores: the chains of rounds with two sets of seeds.

The rounds' plan depends on their seed by several percent on hard
instances (docs/pipeline.md, "The seed matters; even cuts"): a chain ends
in one of a few basins, and which one depends on its path. With two usable
cores, `chains_on_cores` runs the chains (perturb.iterated_chains) in this
process with their own seeds and, at the same time, in a child process
with every seed shifted by SEED_SHIFT, each with the whole work budget,
and keeps the faster plan (equal steps: the tie-break rule, then this
process's). Each search is bounded by counted work, not by the clock, so
the pair gives the same plan on every run, as one search does; the
balancer's deadline stops both (then, as with one, the plan depends on the
machine's load, and the stop counts in deadline.clock_cuts).

The child is a fresh interpreter (`python -m autotune.pipeline.portfolio`)
that reads its problem and starts from stdin (a temporary file) and writes its plan to stdout,
both pickled: no fork of a process that may hold solver threads, and no
re-import of the caller's main module. It ignores Ctrl-C (the caller stops
it) and is stopped when the caller is interrupted or its deadline passes.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

from autotune.pipeline.assignment import Assignment
from autotune.pipeline.deadline import clock_cuts, note_clock_cut, run_until
from autotune.pipeline.problem import Problem
from autotune.processes import usable_cores

# The second process's chain k uses seed k + SEED_SHIFT (this process's: k).
SEED_SHIFT = 100
# Cores needed to run the second search (with fewer, only this process's).
CORES = 2
# Seconds past the deadline the caller waits for the second search's plan
# (it is stopped at its own deadline, then sends what it has).
GRACE_S = 2.0


def chains_on_cores(
    problem: Problem,
    starts: list[Assignment],
    deadline_s: float | None = None,
    **chain_options,
) -> Assignment:
    """perturb.iterated_chains(problem, starts, deadline_s=deadline_s,
    **chain_options), and with CORES usable cores and rounds to run, the
    same with seeds shifted by SEED_SHIFT in a second process at the same
    time; the faster plan (fastest_first)."""
    from autotune.pipeline.perturb import fastest_first, iterated_chains

    if usable_cores() < CORES or chain_options.get("rounds", 1) == 0:
        return iterated_chains(problem, starts, deadline_s=deadline_s, **chain_options)
    left_s = None if deadline_s is None else max(deadline_s - time.perf_counter(), 0.0)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with tempfile.TemporaryFile() as payload:
        pickle.dump((problem, starts, left_s, chain_options), payload)
        payload.seek(0)
        child = subprocess.Popen(
            [sys.executable, "-m", "autotune.pipeline.portfolio"],
            stdin=payload,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    try:
        mine = iterated_chains(problem, starts, deadline_s=deadline_s, **chain_options)
        other = _plan_of(child, deadline_s)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    plans = [mine] if other is None else [mine, other]
    return fastest_first(problem, plans)[0][0]


def _plan_of(child: subprocess.Popen, deadline_s: float | None) -> Assignment | None:
    """The second search's plan; None (a stop by the clock) when it is not
    in by the deadline plus GRACE_S or its time box expired before a plan.
    Its own stops by the clock count here."""
    timeout_s = None if deadline_s is None else deadline_s + GRACE_S - time.perf_counter()
    try:
        out, err = child.communicate(timeout=None if timeout_s is None else max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        note_clock_cut()
        return None
    if child.returncode != 0 or not out:
        text = err.decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(
            "the second plan search (autotune.pipeline.portfolio) failed: "
            + (text[-1] if text else f"exit status {child.returncode}")
        )
    plan, cut = pickle.loads(out)
    if cut:
        note_clock_cut()
    return plan


def _second_search() -> None:
    """The child: problem, starts, seconds left and options from stdin; the
    plan of the chains with shifted seeds, and whether the clock stopped
    them, to stdout."""
    from autotune.pipeline.perturb import iterated_chains

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops this process
    problem, starts, left_s, options = pickle.loads(sys.stdin.buffer.read())
    deadline_s = None if left_s is None else time.perf_counter() + left_s
    plan = None  # stays None when the time box expires: the caller keeps its own
    with run_until(deadline_s):
        plan = iterated_chains(
            problem, starts, deadline_s=deadline_s, seed_shift=SEED_SHIFT, **options
        )
    sys.stdout.buffer.write(pickle.dumps((plan, clock_cuts() > 0)))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _second_search()
