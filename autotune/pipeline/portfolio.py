"""Two searches at once on two cores: the chains of rounds with two sets of
seeds, and the MILP in two configurations.

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

A MILP solve's time to its proof depends on its configuration more than
on its time: `solve_on_cores` runs a cutoff solve as configured in this
process and in SECOND_MILP in a child, and uses the second's outcome only
when this one's limit stopped it and the second's solve ended on its own.

The child is a fresh interpreter (`python -m autotune.pipeline.portfolio`)
that reads its job and input from stdin (a temporary file) and writes its
result to stdout, both pickled: no fork of a process that may hold solver
threads, and no re-import of the caller's main module. It ignores Ctrl-C
(the caller stops it) and is stopped when the caller is interrupted, when
the caller's own solve ends on its own, or when its deadline passes.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from typing import TYPE_CHECKING

from autotune.pipeline.assignment import Assignment
from autotune.pipeline.deadline import (
    OutOfTime,
    clock_cuts,
    deadline_at,
    note_clock_cut,
    run_until,
    time_left_s,
)
from autotune.pipeline.problem import Problem
from autotune.processes import usable_cores

if TYPE_CHECKING:
    from autotune.pipeline.ilp import IlpOutcome

# The second process's chain k uses seed k + SEED_SHIFT (this process's: k).
SEED_SHIFT = 100
# Cores needed to run the second search (with fewer, only this process's).
CORES = 2
# Seconds past the deadline the caller waits for the second search's plan
# (it is stopped at its own deadline, then sends what it has within a
# fraction of a second): at most the final polish's grace, so that a
# command's whole run keeps its time limit (balance.POLISH_GRACE_S).
GRACE_S = 1.0


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
    child = _start("chains", (problem, starts, chain_options), left_s)
    try:
        mine = iterated_chains(problem, starts, deadline_s=deadline_s, **chain_options)
        other = _result_of(child, deadline_s)
    finally:
        _stop(child)
    if other is _LATE:
        note_clock_cut()
        other = None
    plans = [mine] if other is None else [mine, other]
    return fastest_first(problem, plans)[0][0]


def solve_on_cores(problem: Problem, paths, **solve_options) -> IlpOutcome:
    """ilp.solve(problem, paths, **solve_options) and, with CORES usable
    cores and a HiGHS cutoff solve, the same model in the other
    configuration (SECOND_MILP) in a second process at the same time.

    This process's outcome is used when its solve ended on its own (not
    stopped by the limit), else the second's when that one did, else this
    one's; the bound is the larger of the two (each is valid). The choice
    never depends on which solve ended first, only on whether each ended
    within the limit, as with one solve. So this process waits for the
    second until its own solve ends, and stops it then."""
    from autotune.pipeline.ilp import solve

    if (
        usable_cores() < CORES
        or solve_options.get("solver") != "highs"
        or solve_options.get("cutoff_s") is None
    ):
        return solve(problem, paths, **solve_options)
    left_s = float(time_left_s(solve_options["time_limit_s"]))  # a limit is always given
    deadline_s = time.perf_counter() + left_s
    second = {**solve_options, **SECOND_MILP, "time_limit_s": left_s}
    verbose = bool(solve_options.get("verbose"))
    child = _start("milp", (problem, paths, second), left_s, show_log=verbose)
    if verbose:  # both logs go to stderr as they come
        print(
            f"meshtune: a second MILP solve (root restarts, no split rows) runs in "
            f"process {child.pid}; its log is interleaved below",
            file=sys.stderr,
            flush=True,
        )
    try:
        mine = solve(problem, paths, **solve_options)
        other = None
        if mine.status in _LIMITED:
            other = _result_of(child, deadline_s)
    finally:
        _stop(child)
    if other is None or other is _LATE:
        return mine
    bound = max((b for b in (mine.bound, other.bound) if b is not None), default=None)
    if other.status in _LIMITED:
        return dataclasses.replace(mine, bound=bound)
    return dataclasses.replace(other, bound=bound, solve_time_s=mine.solve_time_s)


# The second configuration of a cutoff solve: root restarts allowed and no
# split rows (ilp.py's default keeps its root and adds the split rows on
# interleaved schedules). On dense-moe-mtp, 2 chunks, 16 micro-batches, 2%
# above the tightest cap, from the chains' 519.22 ms plan, it finds and
# proves 497.02 ms in 17 s; the default was still searching at 45 s
# (docs/pipeline.md, "Two searches on two cores").
SECOND_MILP = {"split_step_limit_s": None, "allow_restart": True}
# A solve's statuses when its limit stopped it (ilp.IlpOutcome.status).
_LIMITED = ("feasible", "no_solution")
# What _result_of returns for a child not in by the deadline plus GRACE_S.
_LATE = object()


def _start(
    job: str, payload: object, left_s: float | None, show_log: bool = False
) -> subprocess.Popen:
    """A child `python -m autotune.pipeline.portfolio` given `job`, its
    input and the seconds left (pickled in a temporary file on its stdin);
    its stderr is this process's with `show_log`, else kept for the error
    message if it fails."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    with tempfile.TemporaryFile() as handle:
        pickle.dump((job, payload, left_s), handle)
        handle.seek(0)
        return subprocess.Popen(
            [sys.executable, "-m", "autotune.pipeline.portfolio"],
            stdin=handle,
            stdout=subprocess.PIPE,
            stderr=None if show_log else subprocess.PIPE,
            env=env,
        )


def _stop(child: subprocess.Popen) -> None:
    """Kill the child if it still runs; reap it and close its pipes."""
    if child.poll() is None:
        child.kill()
    child.wait()
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def _result_of(child: subprocess.Popen, deadline_s: float | None):
    """The child's result (None when its time box expired before one),
    or _LATE when it is not in by the deadline plus GRACE_S. Its own stops
    by the clock count here."""
    timeout_s = None if deadline_s is None else deadline_s + GRACE_S - time.perf_counter()
    try:
        out, err = child.communicate(timeout=None if timeout_s is None else max(timeout_s, 0.0))
    except subprocess.TimeoutExpired:
        return _LATE
    if child.returncode != 0 or not out:
        text = (err or b"").decode("utf-8", "replace").strip().splitlines()
        raise RuntimeError(
            "the second search (autotune.pipeline.portfolio) failed: "
            + (text[-1] if text else f"exit status {child.returncode}")
        )
    result, cut = pickle.loads(out)
    if cut:
        note_clock_cut()
    return result


def _second_search() -> None:
    """The child: job, input and seconds left from stdin; to stdout its
    result and whether the clock stopped it. "chains": the chains' plan with
    shifted seeds (None when the time box expires first: the caller keeps
    its own). "milp": ilp.solve's outcome (a limited solve is a status, not
    a stop by the clock; the solve is not put in a time box, see
    deadline.py)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller stops this process
    # Descriptor 1 carries only the result: anything else printed goes to stderr.
    result_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    job, payload, left_s = pickle.loads(sys.stdin.buffer.read())
    deadline_s = None if left_s is None else time.perf_counter() + left_s
    result = None
    try:
        result = _run_job(job, payload, deadline_s)
    except OutOfTime:  # the alarm landed just outside its time box: the clock stopped it
        note_clock_cut()
    result_out.write(pickle.dumps((result, clock_cuts() > 0)))
    result_out.flush()


def _run_job(job: str, payload: object, deadline_s: float | None) -> object:
    """The child's job (see _second_search)."""
    result = None
    if job == "chains":
        from autotune.pipeline.perturb import iterated_chains

        problem, starts, options = payload
        with run_until(deadline_s):
            result = iterated_chains(
                problem, starts, deadline_s=deadline_s, seed_shift=SEED_SHIFT, **options
            )
    elif job == "milp":
        from autotune.pipeline.ilp import solve

        problem, paths, options = payload
        with deadline_at(deadline_s):
            result = solve(problem, paths, **options)
    else:
        raise ValueError(f"unknown job {job!r}")
    return result


if __name__ == "__main__":
    _second_search()
