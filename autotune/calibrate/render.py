"""The terminal report of `meshtune calibrate` (rich): inputs, the
parameter table with uncertainties, fit quality, warnings and a
measured-vs-fitted plot. Human units here, no model arithmetic."""

from __future__ import annotations

import math
import sys

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from autotune.calibrate.fit_compute import ComputeFit
from autotune.calibrate.result import CalibrationResult
from autotune.calibrate.textplot import legend, loglog_scatter
from autotune.render_text import byte_size, user_text

RESOURCE_NAMES = {
    "intra_node": "intra-node links (one host)",
    "scale_out": "scale-out network (several hosts)",
    "mixed": "mixed single- and multi-host logs",
    "not stated": "not stated (benchmark CSV or unknown hosts)",
}


def _cv(stats: tuple[float | None, float | None, float | None] | None) -> str:
    if stats is None or stats[0] is None:
        return "-"
    return f"{stats[0]:.1%} / {stats[2]:.0%}"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e6:.2f}"


def _pm(value: float | None, err: float | None, scale: float, digits: int = 2) -> str:
    if value is None:
        return "-"
    text = f"{value * scale:.{digits}f}"
    return text if err is None else f"{text}±{err * scale:.{digits}f}"


def plot_series(result: CalibrationResult) -> list[tuple[str, list[float], list[float]]]:
    """(label, fitted seconds, measured seconds) per fit, for the plots."""
    series = [(label, list(f.fitted_s), list(f.measured_s)) for label, f in result.shown_fits()]
    for c in (result.compute_fit, result.compute_fp8_fit):
        if c is not None:
            series.append((f"gemm {c.dtype}", list(c.fitted_s), list(c.measured_s)))
    return series


def _compute_table(c: ComputeFit) -> Table:
    """The compute fit's parameters and errors: the tile model's or the
    efficiency curve's, whichever was written."""
    tail = (
        "R² log",
        "rms err",
        "max err",
        "1-rate rms",
        "out",
    )
    errors = (
        "-" if c.r2_log is None else f"{c.r2_log:.3f}",
        f"{c.rms_rel_error:.1%}",
        f"{c.max_rel_error:.1%}",
        f"{c.constant_rms_rel_error:.1%}",
        str(c.num_outliers),
    )
    if c.tile is not None:
        table = Table(
            box=box.SIMPLE,
            title=f"Compute ({c.dtype}), tile model: t = launch + waves of whole tiles over "
            f"{c.tile.num_cores} cores / rate (tiles {len(c.tile.tiles)} shapes, 64-256)",
            title_justify="left",
        )
        head = ("n", "TFLOP/s", "launch µs", "k overhead", "reuse penalty")
        for column in (*head, *tail):
            table.add_column(column, justify="right")
        table.add_row(
            str(c.num_points),
            f"{c.effective_flops_per_s / 1e12:.1f}",
            f"{c.tile.launch_s * 1e6:.2f}",
            f"{c.tile.k_overhead:g}",
            f"{c.tile.reuse_penalty:g}",
            *errors,
        )
        return table
    table = Table(
        box=box.SIMPLE,
        title=f"Compute ({c.dtype}): t = 2mnk / (rate · m/(m+m½) · n/(n+n½) · k/(k+k½))",
        title_justify="left",
    )
    for column in ("n", "TFLOP/s", "m½", "n½", "k½", *tail):
        table.add_column(column, justify="right")
    halves = [_pm(h, e, 1.0, 0) for h, e in zip(c.halves, c.halves_stderr, strict=True)]
    table.add_row(
        str(c.num_points),
        _pm(c.effective_flops_per_s, c.effective_flops_per_s_stderr, 1e-12, 1),
        *halves,
        *errors,
    )
    return table


def _held_out_line(c: ComputeFit) -> str | None:
    """Which GEMM model was written and why, by held-out error."""
    if not c.cv_errors or not c.other_cv_errors:
        return None
    chosen, other = np.median(c.cv_errors), np.median(c.other_cv_errors)
    names = ("tile model", "efficiency curve")
    name, rival = names if c.tile is not None else names[::-1]
    return (
        f"compute: the {name} is written: held-out median error {chosen:.1%} "
        f"against the {rival}'s {other:.1%}"
    )


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

    chip = spec.chip or "unknown"
    console.print(f"chip: {chip} ({result.chip_reason})", highlight=False)
    resources = sorted({f.resource or "not stated" for f in result.comm_fits})
    if resources:
        console.print(
            "resource calibrated: " + ", ".join(RESOURCE_NAMES.get(r, r) for r in resources),
            highlight=False,
        )
    for note in result.resource_notes:
        console.print(f"  written as collectives.{note}", highlight=False)
    if result.comm_fits:
        table = Table(
            box=box.SIMPLE,
            title="Collectives: t = launch + (P-1)·(sync + shard/bw), per size regime",
            title_justify="left",
        )
        for column in (
            "op.entry",
            "model",
            "n",
            "P",
            "launch µs",
            "sync µs",
            "bw GB/s",
            "rms err",
            "max err",
            "cv interp",
            "cv extrap",
            "cv msg",
            "out",
        ):
            if column == "op.entry":
                table.add_column(column, justify="left", overflow="fold")
            else:
                table.add_column(column, justify="left" if column == "model" else "right")
        for label, f in result.shown_fits():
            launch = _pm(f.launch_s, f.launch_s_stderr, 1e6, 1)
            if f.combined_latency_s is not None:
                launch = (
                    _pm(f.combined_latency_s, f.combined_latency_stderr_s, 1e6, 1) + " L+(P-1)S"
                )
            model = f.model if not f.regimes else f"{len(f.regimes)} regimes"
            table.add_row(
                label + ("" if f.usable else " (not written)"),
                model,
                str(f.num_points),
                ",".join(str(p) for p in f.ring_sizes),
                launch,
                _pm(f.sync_s, f.sync_s_stderr, 1e6, 1) if f.combined_latency_s is None else "-",
                _pm(f.link_bytes_per_s, f.link_bytes_per_s_stderr, 1e-9, 1),
                f"{f.rms_rel_error:.1%}",
                f"{f.max_rel_error:.1%}",
                _cv(f.cv.interpolation if f.cv else None),
                _cv(f.cv.extrapolation if f.cv else None),
                _cv(f.cv.message_extrapolation if f.cv else None),
                str(f.num_outliers),
            )
        console.print(table)
        console.print(
            "cv interp: median / worst error on each inner size left out; cv extrap: fitted "
            "on pieces up to the cut (32 MiB), median / worst on the larger ones; cv msg: "
            "the same with the cut on the message (the nccl-tests size column); "
            "max err includes every point; the last regime's values are shown.",
            highlight=False,
        )
        shown: set[tuple] = set()
        for label, f in result.shown_fits():
            if f.regimes and (f.op, f.regimes) not in shown:
                shown.add((f.op, f.regimes))
                regime_table = Table(
                    box=box.SIMPLE,
                    title=f"{label} regimes",
                    title_justify="left",
                )
                for column in ("pieces up to", "launch µs", "sync µs", "bw GB/s"):
                    regime_table.add_column(column, justify="right")
                for bound, launch_s, sync_s, bw in f.regimes:
                    regime_table.add_row(
                        "beyond" if math.isinf(bound) else byte_size(bound),
                        f"{launch_s * 1e6:.1f}",
                        f"{sync_s * 1e6:.1f}",
                        f"{bw * 1e-9:.1f}",
                    )
                console.print(regime_table)
                if f.extrapolation:
                    console.print(
                        f"{label}: pieces above "
                        f"{byte_size(f.shard_bytes_range[1])} (the largest measured) are "
                        f"extrapolated with {f.extrapolation}",
                        highlight=False,
                    )
            if f.cv is not None and f.cv.note:
                console.print(f"{label}: {f.cv.note}", highlight=False)
            for file, line, err in f.outliers:
                console.print(
                    f"outlier {label}: {file}:{line} off by {err:+.0%}",
                    highlight=False,
                )
    for c in (result.compute_fit, result.compute_fp8_fit):
        if c is not None:
            console.print(_compute_table(c))
            held = _held_out_line(c)
            if held:
                console.print(held, highlight=False)
    a = result.attention_fit
    for label, fit in (("attention", a), ("attention backward", a and a.backward)):
        if fit is None:
            continue
        half = f", half that at {fit.seq_half:,.0f} tokens" if fit.seq_half > 0 else " (constant)"
        console.print(
            f"{label} ({fit.dtype}): {fit.flops_per_s / 1e12:.1f} TFLOP/s at long "
            f"sequences{half}; {fit.num_rows} row(s) of {fit.measured_seq[0]:,}-"
            f"{fit.measured_seq[1]:,} tokens, RMS error {fit.rms_rel_error:.1%}",
            highlight=False,
        )
    elsewhere = [
        *(f"derived: {d}" for d in spec.derived),
        *(f"from --base {user_text(spec.base_calibration)}: {k}" for k in spec.kept_from_base),
        *(f"from the chip preset: {p}" for p in spec.from_preset),
    ]
    if elsewhere:
        console.print("[bold]Values not fitted from the inputs[/bold]")
        for line in elsewhere:
            console.print(f"  {user_text(line, 200)}", highlight=False)
    if spec.expected_error is not None:
        e = spec.expected_error
        parts = []
        if e.collective_median_rel_error is not None:
            parts.append(
                f"collectives {e.collective_median_rel_error:.1%} median, "
                f"{e.collective_worst_rel_error:.0%} worst"
            )
        if e.compute_median_rel_error is not None:
            parts.append(
                f"compute {e.compute_median_rel_error:.1%} median, "
                f"{e.compute_worst_rel_error:.0%} worst"
            )
        console.print(f"expected error (held out): {'; '.join(parts)}", highlight=False)

    if result.overlap_fit is not None:
        o = result.overlap_fit
        console.print(
            f"overlap_slowdown {o.slowdown:.3f}: median of {len(o.per_row)} overlap rows "
            f"(GEMM beside a collective / GEMM alone)"
            + (f", {o.skipped} without a GEMM-alone row skipped" if o.skipped else ""),
            highlight=False,
        )
    rows = result.host_launch_rows
    if rows:
        console.print(
            f"host_launch_s {result.spec.host_launch_s * 1e6:.1f} us: median of {len(rows)} "
            f"host_launch rows ({min(rows) * 1e6:.1f}-{max(rows) * 1e6:.1f} us), the host time "
            "of one routed-expert kernel launch",
            highlight=False,
        )
    series = plot_series(result)
    console.print("\n[bold]Measured vs fitted[/bold] (points on the dotted diagonal fit exactly)")
    for line in loglog_scatter(series):
        console.print(line, markup=False, highlight=False)
    for line in legend(series):
        console.print(line, markup=False, highlight=False)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {user_text(warning, 400)}", highlight=False)
    console.print(f"\nwrote {out_path}")
