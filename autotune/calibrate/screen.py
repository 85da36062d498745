"""Screening measurements before a fit: a row inconsistent with the rest of
its group (a ring size, a shard size or a time typed with extra digits) is
reported and excluded instead of being fitted.

The rules need no model, only that more work never takes much less time:
a collective's time does not decrease when its ring or its per-chip piece
grows (every term of `launch + (P-1)*(sync + shard/bw)` grows with both),
and a GEMM's time does not decrease when m, n, k or its group count grows. Two rows of one
group violate that when one does at least as much work in every coordinate
yet is more than INCONSISTENCY_FACTOR times faster. Noise and the busy-
machine outliers a robust fit handles stay well inside that factor; one
mistyped digit is a factor of ten. And no row's implied rate (bytes per
ring step per second, FLOP/s) may exceed the best of the rest of its group
by the factor: that catches the largest row of a sweep typed too large.
The row in the most violations is excluded and the check repeated until
none remain (at most a third of a group, so its genuine data decides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from autotune.calibrate.samples import CollectiveSample, GemmSample

INCONSISTENCY_FACTOR = 5.0
#: groups larger than this are not screened (the pairwise check is O(n^2));
#: the robust fit still sets gross outliers aside
MAX_SCREENED_ROWS = 4000
#: a per-chip piece no chip can hold (1 TiB): certainly a typo
MAX_SHARD_BYTES = 2.0**40

SampleT = TypeVar("SampleT", CollectiveSample, GemmSample)


def inconsistent_rows(
    work: np.ndarray, seconds: np.ndarray, rate: np.ndarray | None = None
) -> list[int]:
    """Indices of rows to exclude: `work` is (rows, coordinates), each
    coordinate a quantity the time must not decrease in; `rate` (optional)
    is each row's implied throughput (bytes per step per second, FLOP/s),
    which a row cannot exceed the rest of its group's best by the factor:
    that catches the largest row of a sweep typed too large, which no row
    outranks in work."""
    n = len(seconds)
    if n < 3 or n > MAX_SCREENED_ROWS:
        return []
    alive = np.ones(n, dtype=bool)
    excluded: list[int] = []
    while rate is not None and alive.sum() >= 3 and len(excluded) < n // 3:
        live_rate = np.where(alive, rate, -np.inf)
        top = int(np.argmax(live_rate))
        others = np.delete(live_rate, top)
        if not rate[top] > INCONSISTENCY_FACTOR * np.max(others):
            break
        excluded.append(top)
        alive[top] = False
    # dominates[i, j]: row i does at least as much work as row j in every coordinate
    dominates = np.all(work[:, None, :] >= work[None, :, :], axis=2)
    np.fill_diagonal(dominates, False)
    # violation[i, j]: i does at least j's work but is more than the factor faster
    violation = dominates & (seconds[:, None] * INCONSISTENCY_FACTOR < seconds[None, :])
    while len(excluded) < n // 3:
        live = violation & alive[:, None] & alive[None, :]
        counts = live.sum(axis=0) + live.sum(axis=1)
        if not counts.any():
            break
        worst = int(np.argmax(counts))
        excluded.append(worst)
        alive[worst] = False
    return sorted(excluded)


def _screen(
    samples: Sequence[SampleT],
    group_of: Callable[[SampleT], tuple],
    work_of: Callable[[SampleT], tuple[float, ...]],
    rate_of: Callable[[SampleT], float],
    label: Callable[[SampleT], str],
) -> tuple[list[SampleT], list[str]]:
    groups: dict[tuple, list[SampleT]] = {}
    for s in samples:
        groups.setdefault(group_of(s), []).append(s)
    dropped: set[int] = set()
    reasons: list[str] = []
    for group in groups.values():
        work = np.array([work_of(s) for s in group], dtype=float)
        seconds = np.array([s.seconds for s in group], dtype=float)
        rate = np.array([rate_of(s) for s in group], dtype=float)
        for i in inconsistent_rows(work, seconds, rate):
            s = group[i]
            dropped.add(id(s))
            reasons.append(
                f"{s.file}:{s.line}: {label(s)} in {s.seconds:.3g} s is inconsistent with "
                f"its group (more than {INCONSISTENCY_FACTOR:g}x faster than rows doing no "
                "more work, or than the group's best rate; a size or time typed with extra "
                "digits?); excluded from the fit"
            )
    return [s for s in samples if id(s) not in dropped], reasons


def screen_collectives(
    samples: Sequence[CollectiveSample],
) -> tuple[list[CollectiveSample], list[str]]:
    """The samples to fit, and one message per excluded row."""
    impossible = [s for s in samples if s.shard_bytes > MAX_SHARD_BYTES]
    reasons = [
        f"{s.file}:{s.line}: shard_bytes {s.shard_bytes:.6g} is more than any chip holds "
        f"({MAX_SHARD_BYTES:.6g}); excluded from the fit"
        for s in impossible
    ]
    plausible = [s for s in samples if s.shard_bytes <= MAX_SHARD_BYTES]
    kept, more = _screen(
        plausible,
        lambda s: (s.op, s.axis),
        lambda s: (float(s.ring_size), s.shard_bytes),
        lambda s: max(s.ring_size - 1, 1) * s.shard_bytes / s.seconds,
        lambda s: f"{s.op.value}.{s.axis.value} ring {s.ring_size}, {s.shard_bytes:.6g} bytes",
    )
    return kept, reasons + more


def screen_gemms(samples: Sequence[GemmSample]) -> tuple[list[GemmSample], list[str]]:
    """The GEMM samples to fit, and one message per excluded row."""
    return _screen(
        samples,
        lambda s: (s.dtype,),
        lambda s: (float(s.m), float(s.n), float(s.k), float(s.groups)),
        lambda s: s.flops / s.seconds,
        lambda s: s.label,
    )
