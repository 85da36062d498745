"""The terminal report of `meshtune calibrate` (rich): inputs, the
parameter table with uncertainties, fit quality, warnings and a
measured-vs-fitted plot. Human units here, no model arithmetic."""

from __future__ import annotations

import sys

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.calibrate.result import CalibrationResult
from autotune.calibrate.textplot import legend, loglog_scatter
from autotune.render_text import user_text


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.2f}"


def _pm(value: float | None, err: float | None, scale: float, digits: int = 2) -> str:
    if value is None:
        return "-"
    text = f"{value * scale:.{digits}f}"
    return text if err is None else f"{text}±{err * scale:.{digits}f}"


def plot_series(result: CalibrationResult) -> list[tuple[str, list[float], list[float]]]:
    """(label, fitted seconds, measured seconds) per fit, for the plots."""
    series = [
        (f"{f.op.value}.{f.axis.value}", list(f.fitted_s), list(f.measured_s))
        for f in result.comm_fits
    ]
    if result.compute_fit is not None:
        c = result.compute_fit
        series.append((f"gemm {c.dtype}", list(c.fitted_s), list(c.measured_s)))
    return series


def render_calibration(
    result: CalibrationResult, out_path: str, console: Console | None = None
) -> None:
    """Print the report."""
    # piped output gets room for the uncertainty columns instead of rich's 80
    console = console or Console(width=None if sys.stdout.isatty() else 130)
    spec = result.spec
    inputs = Table(box=box.SIMPLE, title="Inputs", title_justify="left")
    for column in ("file", "kind", "rows", "what it measured"):
        inputs.add_column(column)
    for f in result.files:
        skipped = f" ({len(f.skipped_lines)} garbled rows skipped)" if f.skipped_lines else ""
        inputs.add_row(
            user_text(f.path), f.kind, str(f.num_rows), user_text(f.description + skipped, 200)
        )
    console.print(inputs)

    if result.comm_fits:
        table = Table(
            box=box.SIMPLE,
            title="Collectives: t = launch + (P-1)·(sync + shard/bw)",
            title_justify="left",
        )
        for column in (
            "op.axis",
            "n",
            "P",
            "launch µs",
            "sync µs",
            "bw GB/s",
            "R²",
            "rms err",
            "max err",
            "out",
        ):
            table.add_column(column, justify="left" if column == "op.axis" else "right")
        for f in result.comm_fits:
            launch = _pm(f.launch_s, f.launch_s_stderr, 1e6, 1)
            if f.combined_latency_s is not None:
                launch = (
                    _pm(f.combined_latency_s, f.combined_latency_stderr_s, 1e6, 1) + " L+(P-1)S"
                )
            table.add_row(
                f"{f.op.value}.{f.axis.value}" + ("" if f.usable else " (not written)"),
                str(f.num_points),
                ",".join(str(p) for p in f.ring_sizes),
                launch,
                _pm(f.sync_s, f.sync_s_stderr, 1e6, 1) if f.combined_latency_s is None else "-",
                _pm(f.link_bytes_per_s, f.link_bytes_per_s_stderr, 1e-9, 1),
                "-" if f.r2 is None else f"{f.r2:.3f}",
                f"{f.rms_rel_error:.1%}",
                f"{f.max_rel_error:.1%}",
                str(f.num_outliers),
            )
        console.print(table)

    c = result.compute_fit
    if c is not None:
        table = Table(
            box=box.SIMPLE,
            title=f"Compute ({c.dtype}): t = 2mnk / (rate · m/(m+m½) · n/(n+n½) · k/(k+k½))",
            title_justify="left",
        )
        for column in (
            "n",
            "TFLOP/s",
            "m½",
            "n½",
            "k½",
            "R² log",
            "rms err",
            "max err",
            "1-rate rms",
            "out",
        ):
            table.add_column(column, justify="right")
        halves = [_pm(h, e, 1.0, 0) for h, e in zip(c.halves, c.halves_stderr, strict=True)]
        table.add_row(
            str(c.num_points),
            _pm(c.effective_flops_per_s, c.effective_flops_per_s_stderr, 1e-12, 1),
            *halves,
            "-" if c.r2_log is None else f"{c.r2_log:.3f}",
            f"{c.rms_rel_error:.1%}",
            f"{c.max_rel_error:.1%}",
            f"{c.constant_rms_rel_error:.1%}",
            str(c.num_outliers),
        )
        console.print(table)
    if spec.kept_from_base:
        base = user_text(spec.base_calibration)
        console.print(f"kept from {base}: {', '.join(spec.kept_from_base)}")

    series = plot_series(result)
    console.print("\n[bold]Measured vs fitted[/bold] (points on the dotted diagonal fit exactly)")
    for line in loglog_scatter(series):
        console.print(line, markup=False, highlight=False)
    for line in legend(series):
        console.print(line, markup=False, highlight=False)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {user_text(warning, 400)}", highlight=False)
    console.print(f"\nwrote {out_path}")
