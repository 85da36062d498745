"""A measured-vs-fitted scatter on a log-log character grid (no plotting
dependency): the numbers behind the terminal plot, kept out of the renderer."""

from __future__ import annotations

import math
from collections.abc import Sequence

WIDTH = 60
HEIGHT = 18


def loglog_scatter(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    width: int = WIDTH,
    height: int = HEIGHT,
) -> list[str]:
    """Lines of a character plot: x = fitted seconds, y = measured seconds,
    both log10; `.` marks the diagonal (perfect fit), each series its own
    marker (its label's first letter is not used: markers are 1-9, A-Z in
    order). Returns the grid rows top to bottom plus an axis line."""
    markers = "123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    values = [v for _, xs, ys in series for v in (*xs, *ys) if v > 0]
    if not values:
        return ["(no points)"]
    lo, hi = math.log10(min(values)), math.log10(max(values))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    grid = [[" "] * width for _ in range(height)]

    def col(v: float) -> int:
        return min(width - 1, max(0, round((math.log10(v) - lo) / (hi - lo) * (width - 1))))

    def row(v: float) -> int:
        return min(height - 1, max(0, round((hi - math.log10(v)) / (hi - lo) * (height - 1))))

    for c in range(width):
        value = 10 ** (lo + (hi - lo) * c / (width - 1))
        grid[row(value)][c] = "."
    for i, (_, xs, ys) in enumerate(series):
        mark = markers[i % len(markers)]
        for x, y in zip(xs, ys, strict=True):
            if x > 0 and y > 0:
                grid[row(y)][col(x)] = mark
    lines = ["".join(r) for r in grid]
    lines.append(f"{'':-<{width}}")
    lines.append(f"fitted {10**lo:.3g} s .. {10**hi:.3g} s (log); measured on the vertical axis")
    return lines


def legend(series: Sequence[tuple[str, Sequence[float], Sequence[float]]]) -> list[str]:
    """`marker = label` lines matching :func:`loglog_scatter`."""
    markers = "123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [f"{markers[i % len(markers)]} = {label}" for i, (label, _, _) in enumerate(series)]
