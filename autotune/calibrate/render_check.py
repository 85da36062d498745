"""The terminal report of `meshtune calibrate --check` (rich)."""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.calibrate.check import CheckResult


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.2f} µs"


def _pct(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def render_check(result: CheckResult, console: Console | None = None) -> None:
    """Print every row, then the summary."""
    console = console or Console(width=None if sys.stdout.isatty() else 140)
    table = Table(box=box.SIMPLE, title=f"Predicted by {result.calibration}", title_justify="left")
    for column in ("file:line", "measurement", "measured", "predicted", "error", "note"):
        table.add_column(
            column, justify="left" if column in ("file:line", "measurement", "note") else "right"
        )
    for r in result.rows:
        note = "; ".join(x for x in ("extrapolated" if r.extrapolated else None, r.note) if x)
        table.add_row(
            f"{r.file}:{r.line}",
            r.what,
            _s(r.measured_s),
            _s(r.predicted_s),
            "-" if r.rel_error is None else f"{r.rel_error:+.1%}",
            note,
        )
    console.print(table)
    summary = Table(box=box.SIMPLE, title="Summary (|error|)", title_justify="left")
    for column in ("rows", "n", "median", "p90", "worst"):
        summary.add_column(column, justify="left" if column == "rows" else "right")
    for which in ("all", "collective", "gemm", "fitted-range", "extrapolated"):
        s = result.summary(which)
        if s["rows"]:
            summary.add_row(
                which, str(s["rows"]), _pct(s["median"]), _pct(s["p90"]), _pct(s["worst"])
            )
    console.print(summary)
    unpriced = sum(1 for r in result.rows if r.predicted_s is None)
    if unpriced:
        console.print(f"[yellow]warning:[/yellow] {unpriced} rows could not be priced (see note)")
