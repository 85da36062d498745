"""Solver calls that Ctrl-C and SIGTERM stop at once.

HiGHS runs in-process: a plain `Highs.run()` holds the main thread in C++
until the solve returns (up to the time limit), and Python only handles a
signal between bytecodes, so Ctrl-C would wait for it. Here the solve runs
in highspy's solver thread while the main thread waits in short slices; a
KeyboardInterrupt (SIGTERM arrives as one, see autotune.cli.common) asks
HiGHS to stop through its interrupt callbacks (checked during simplex, IPM
and branch-and-bound), waits briefly for it, and propagates.

Every solve inside `balance` also ends by the balancer's wall-clock
deadline (deadline.py): a solver's own limit counts from when it starts,
after the model was built, so the limit each call is given is cut to the
time left.

CBC runs as a child process that PuLP waits for, writing its model,
solution and log to temporary files. Each CBC solve gets a private folder
for them; when the solve is interrupted the CBC process (found by that
folder in its command line) is sent SIGTERM, and the folder is removed in
every case.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy
import pulp

from autotune.pipeline.deadline import time_left_s
from autotune.processes import SOLVER_THREAD, child_pids

# How often the waiting main thread wakes to see a signal, and how long an
# interrupted solve may take to notice the interrupt before the exception
# propagates anyway (HiGHS checks its interrupt callbacks often, but early in
# a MIP, at the root node, it can take a second or more on a busy machine).
POLL_S = 0.05
STOP_GRACE_S = 0.3


def run_interruptibly(highs) -> None:
    """`highs.run()` (a highspy.Highs) in a thread named SOLVER_THREAD,
    waited for in slices of POLL_S. On KeyboardInterrupt, HiGHS is asked to
    stop and the exception propagates once it has, or after STOP_GRACE_S;
    the thread then ends by itself at HiGHS's next interrupt check (the CLI
    exits at once without waiting for it, see autotune.processes)."""
    highs.HandleUserInterrupt = True  # HiGHS's interrupt callbacks check cancelSolve's flag
    done = threading.Event()

    def solve() -> None:
        try:
            highs.run()
        finally:
            done.set()

    thread = threading.Thread(target=solve, name=SOLVER_THREAD, daemon=True)
    thread.start()
    try:
        while not done.wait(POLL_S):
            pass
    except KeyboardInterrupt:
        highs.cancelSolve()
        try:
            done.wait(STOP_GRACE_S)
        except KeyboardInterrupt:  # a second signal: leave at once
            pass
        raise


class InterruptibleHighs(pulp.HiGHS):
    """PuLP's HiGHS driver with the solve stoppable by Ctrl-C and SIGTERM,
    and the model passed to HiGHS in one call per kind."""

    def buildSolverModel(self, lp) -> None:  # PuLP's hook, run before callSolver
        """The model PuLP's own hook builds (columns in its order, rows in
        insertion order, zero coefficients dropped, integer columns marked
        when solving a MIP), passed as arrays instead of one call per column
        and row."""
        import highspy

        inf = highspy.kHighsInf
        variables = lp.variables()
        sign = -1 if lp.sense == pulp.LpMaximize else 1
        objective = lp.objective or {}
        for i, var in enumerate(variables):
            var.index = i
        cost = numpy.array([sign * objective.get(var, 0.0) for var in variables], dtype=float)
        lower = numpy.array(
            [-inf if var.lowBound is None else var.lowBound for var in variables], dtype=float
        )
        upper = numpy.array(
            [inf if var.upBound is None else var.upBound for var in variables], dtype=float
        )
        model = lp.solverModel
        none = numpy.zeros(0, dtype=numpy.int32)
        model.addCols(len(variables), cost, lower, upper, 0, none, none, numpy.zeros(0))
        if self.mip:
            integer = [var.index for var in variables if var.cat == pulp.LpInteger]
            if integer:
                model.changeColsIntegrality(
                    len(integer),
                    numpy.array(integer, dtype=numpy.int32),
                    numpy.full(len(integer), highspy.HighsVarType.kInteger),
                )
        starts, index, values, row_lower, row_upper = [], [], [], [], []
        for i, constraint in enumerate(lp._constraints.values()):
            starts.append(len(index))
            for var, coef in constraint.items():
                if coef != 0:
                    index.append(var.index)
                    values.append(coef)
            constraint.index = i
            low, up = constraint.getLb(), constraint.getUb()
            row_lower.append(-inf if low is None else low)
            row_upper.append(inf if up is None else up)
        if starts:
            model.addRows(
                len(starts),
                numpy.array(row_lower, dtype=float),
                numpy.array(row_upper, dtype=float),
                len(index),
                numpy.array(starts, dtype=numpy.int32),
                numpy.array(index, dtype=numpy.int32),
                numpy.array(values, dtype=float),
            )

    def callSolver(self, lp) -> None:  # PuLP's hook, run after the model is built
        limit_s = time_left_s(self.timeLimit)
        if limit_s is not None:
            lp.solverModel.setOptionValue("time_limit", float(limit_s))
        run_interruptibly(lp.solverModel)


class DeadlineCbc(pulp.PULP_CBC_CMD):
    """PuLP's CBC driver with its time limit cut to the time left."""

    def actualSolve(self, lp, **kwargs):  # PuLP's hook, run after the model is built
        limit_s = time_left_s(self.timeLimit)
        if limit_s is not None:
            self.timeLimit = max(1, round(limit_s))  # CBC takes whole seconds
        return super().actualSolve(lp, **kwargs)


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _stop_processes_using(folder: str) -> None:
    """SIGTERM to this process's children whose command line names `folder`
    (the CBC of one solve), then wait up to STOP_GRACE_S for them to exit."""
    pids = [pid for pid in child_pids() if folder in _command_line(pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # already reaped
                break
            if done:
                break
            time.sleep(0.01)


@contextmanager
def cbc_folder() -> Iterator[str]:
    """A private folder for one CBC solve's files (give it to the solver as
    its `tmpDir`); on an exception the CBC process is stopped first, and the
    folder is always removed."""
    folder = tempfile.mkdtemp(prefix="meshtune-cbc-")
    try:
        yield folder
    except BaseException:
        _stop_processes_using(folder)
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
