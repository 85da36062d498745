"""The balancer's wall-clock deadline: the whole `balance` call, model
building and heuristics included, ends by its time limit (plus the cost of
the first plan and of one step past the deadline; docs/reliability.md).

Two means: every solver call's own limit is cut to the time left
(`time_left_s`, used by solver_call.py), and pure-Python phases (the local
searches) run in a `TimeBox`, which a SIGALRM timer interrupts at the
deadline, so a phase bounded only by counts of moves cannot overrun it. A
time box is never put around a solver call (a solver call redirects file
descriptors, which an interruption must not leave half-restored).
"""

from __future__ import annotations

import functools
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

# The least time a solve is given past the deadline: enough for a solver to
# return what it has (a solve is never skipped, so every caller gets a status).
MIN_SOLVE_S = 0.05

F = TypeVar("F", bound=Callable[..., Any])

# perf_counter() time by which every solve must end (None: no deadline).
_deadline_s: float | None = None


def deadline_of_whole_call(time_limit_of: Callable[..., float]) -> Callable[[F], F]:
    """Decorator: while the function runs, every solve ends by its start
    plus `time_limit_of(*args, **kwargs)` seconds."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            global _deadline_s
            saved = _deadline_s
            _deadline_s = time.perf_counter() + time_limit_of(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            finally:
                _deadline_s = saved

        return wrapper  # type: ignore[return-value]

    return decorate


def time_left_s(limit_s: float | None) -> float | None:
    """`limit_s` cut to the time left before the deadline (if any)."""
    if _deadline_s is None:
        return limit_s
    left = max(_deadline_s - time.perf_counter(), MIN_SOLVE_S)
    return left if limit_s is None else min(limit_s, left)


class _ClockCuts(threading.local):
    """How many times this thread's search was stopped by the clock."""

    count = 0


_CUTS = _ClockCuts()


def clock_cuts() -> int:
    """Stops by the wall clock so far in this thread: a deadline check that
    ended a search early (`past`) or a time box that expired. A step whose
    stop counts here gives a result that depends on the machine's speed and
    load (balance reports it: SolverReport.repeatable)."""
    return _CUTS.count


def note_clock_cut() -> None:
    """Count one stop by the wall clock (clock_cuts)."""
    _CUTS.count += 1


def past(deadline_s: float | None) -> bool:
    """True (and counted in clock_cuts) when `deadline_s`
    (time.perf_counter()) has passed; False without a deadline."""
    if deadline_s is None or time.perf_counter() <= deadline_s:
        return False
    note_clock_cut()
    return True


class OutOfTime(Exception):
    """Raised inside a TimeBox when the deadline passes."""


# Seconds after which the alarm fires again while the time box is open: an
# exception raised in a garbage-collection callback or a __del__ method is
# printed and dropped by Python, so one alarm can be lost; the next one
# lands elsewhere and ends the body.
REARM_S = 0.01


# Whether a time box is open: an alarm that lands after its box began to
# close is dropped instead of raised outside it.
_box_open = False


def _within(frame: Any, code: Any) -> bool:
    """Whether `frame` or a caller of it runs `code`."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _raise_out_of_time(signum: int, frame: Any) -> None:
    """The SIGALRM handler of an open TimeBox. An alarm that lands in
    `TimeBox.__exit__` (before it marks the box closed) is dropped: it must
    not abort the close. One that lands in `TimeBox.__enter__` (after the
    timer is set, before the body starts: a deadline already past arms it
    for 0.1 ms) re-arms and returns: raising there would skip `__exit__`,
    leaving the box open with its handler installed and the timer re-arming
    for ever (the alarm then lands in unrelated code, or kills the process
    once the default handler is back). Elsewhere it re-arms (an exception
    raised in a garbage-collection callback is dropped by Python) and
    raises OutOfTime."""
    if not _box_open or _within(frame, _EXIT_CODE):
        return
    signal.setitimer(signal.ITIMER_REAL, REARM_S)
    if _within(frame, _ENTER_CODE):
        return
    raise OutOfTime()


class TimeBox:
    """`with TimeBox() as box:` runs the body until the deadline (if any)
    plus `extra_s`; then the body is abandoned, `box.expired` is True and the
    stop counts in clock_cuts. Only in the main thread with no other SIGALRM
    handler; elsewhere the body runs to its end."""

    def __init__(self, extra_s: float = 0.0) -> None:
        self.extra_s = extra_s  # time allowed past the deadline
        self.expired = False
        self._previous: Any = None
        self._armed = False

    def __enter__(self) -> TimeBox:
        if (
            _deadline_s is None
            or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGALRM) != signal.SIG_DFL
        ):
            return self
        global _box_open
        _box_open = True
        self._previous = signal.signal(signal.SIGALRM, _raise_out_of_time)
        self._armed = True
        left = _deadline_s + self.extra_s - time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, max(left, 1e-4))
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        global _box_open
        if self._armed:
            _box_open = False
            while True:  # the timer may fire while it is being stopped
                try:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    break
                except OutOfTime:
                    exc_type = OutOfTime
            signal.signal(signal.SIGALRM, self._previous)
        self.expired = exc_type is OutOfTime
        if self.expired:
            note_clock_cut()
        return self.expired


_EXIT_CODE = TimeBox.__exit__.__code__
_ENTER_CODE = TimeBox.__enter__.__code__


@contextmanager
def deadline_at(deadline_s: float | None) -> Iterator[None]:
    """Every solve's limit cut to `deadline_s` (time.perf_counter(); None:
    no deadline) while the body runs: a solve handed to another process
    (portfolio.py) keeps the caller's deadline."""
    global _deadline_s
    saved = _deadline_s
    _deadline_s = deadline_s
    try:
        yield
    finally:
        _deadline_s = saved


@contextmanager
def run_until(deadline_s: float | None) -> Iterator[TimeBox]:
    """The body in a TimeBox that ends by `deadline_s`, under deadline_at:
    a whole search handed to another process keeps the caller's deadline.
    (Not around a solver call: see the module docstring.)"""
    with deadline_at(deadline_s), TimeBox() as box:
        yield box
