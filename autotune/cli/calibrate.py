"""`meshtune calibrate`: fit a calibration from benchmark measurements, or
check an existing one against new measurements."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli.common import OutputPath, format_option, guarded
from autotune.errors import InputError


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out",
    default=None,
    type=OutputPath(),
    help="Calibration JSON to write (atomically; nothing is written on bad input).",
)
@click.option(
    "--check",
    "check_cal",
    metavar="CAL.json",
    default=None,
    help="Instead of fitting, predict every measurement in FILE... with this calibration "
    "and report predicted, measured and error per row.",
)
@format_option(help="Report as tables and a plot, or print the JSON.")
@click.option(
    "--axis",
    type=click.Choice(["row", "col", "both"]),
    default="both",
    show_default=True,
    help="Mesh axis the rings of nccl-tests logs stand for. row or col keys the entries by "
    "that mesh axis (applied to it whatever resource it lands on); by default they are keyed "
    "by the resource the log measured (switched, fully_connected, scale_out) when known.",
)
@click.option(
    "--chip",
    "chip",
    metavar="PRESET_OR_FILE",
    default=None,
    help="Chip the measurements ran on (default: matched from the logs' device lines); "
    "its peak bounds the GEMM curve and gives compute when there are no GEMM rows.",
)
@click.option(
    "--cluster",
    "cluster",
    metavar="PRESET_OR_FILE",
    default=None,
    help="Cluster the measurements ran on; its chip is used as with --chip.",
)
@click.option(
    "--collective-model",
    "collective_model",
    type=click.Choice(["auto", "regimes", "linear"]),
    default="auto",
    show_default=True,
    help="One straight line, one line per size regime, or regimes when they predict "
    "left-out sizes better.",
)
@click.option(
    "--base",
    "base",
    metavar="FILE_OR_PRESET",
    default=None,
    help="Calibration whose entries are kept, with a warning each, for what the inputs "
    "neither measure nor determine.",
)
@click.option(
    "--accept-poor-fit",
    "accept_poor_fit",
    is_flag=True,
    help="Write the calibration even when a fit misses the rows it kept by more than 25% "
    "RMS (by default that is refused: a plan built on it would be fiction).",
)
@click.option(
    "--plot",
    "plot",
    type=OutputPath(),
    default=None,
    help="Also write the measured-vs-fitted plot as PNG (needs the plot extra).",
)
@guarded
def calibrate(
    files: tuple[str, ...],
    out: str | None,
    check_cal: str | None,
    fmt: str,
    axis: str,
    chip: str | None,
    cluster: str | None,
    collective_model: str,
    base: str | None,
    accept_poor_fit: bool,
    plot: str | None,
) -> None:
    """Fit collective (launch, sync, bandwidth per size regime, op and mesh
    axis) and GEMM (rate, efficiency curve, roofline) models from FILE...
    (meshtune benchmark CSVs and raw nccl-tests / rccl-tests logs) and write
    a calibration for `meshtune plan --calibration`; with --check CAL.json,
    report how well CAL.json predicts FILE... instead.

    Exit codes: 0 ok, 2 bad input.
    """
    from cost_models import Axis

    axes = (Axis.ROW, Axis.COL) if axis == "both" else (Axis(axis),)
    if check_cal is not None:
        if out is not None or plot is not None or base is not None:
            raise InputError(
                "--check reads a calibration and writes nothing",
                field="--check",
                value=check_cal,
                fix="drop --out, --plot and --base, or drop --check to fit",
            )
        _check(check_cal, files, axes, fmt)
        return
    if out is None:
        raise InputError(
            "needs --out CAL.json (where to write the calibration) or --check CAL.json",
            field="--out",
            fix="add --out my_cal.json",
        )
    from autotune.calibrate.result import to_json
    from autotune.calibrate.run import calibrate as run_calibrate
    from autotune.io import atomic_write_text

    if plot:
        from autotune.calibrate.plot_png import require_matplotlib

        require_matplotlib()
    if cluster is not None:
        chip = _chip_of_cluster(cluster, chip)
    result = run_calibrate(
        list(files),
        axes=axes,
        name=Path(out).stem,
        base_ref=base,
        chip_ref=chip,
        model=collective_model,
        by_axis=axis != "both",
    )
    result = _quality_gate(result, files, accept_poor_fit)
    text = to_json(result)
    atomic_write_text(out, text)
    if plot:
        from autotune.calibrate.plot_png import write_png
        from autotune.calibrate.render import plot_series

        write_png(plot, plot_series(result))
    if fmt == "json":
        click.echo(text, nl=False)
        # stdout holds only the document; what the report would say goes to stderr
        for warning in result.warnings:
            click.echo(f"meshtune: warning: {' '.join(warning.split())}", err=True)
    else:
        from autotune.calibrate.render import render_calibration

        render_calibration(result, out)
        if plot:
            click.echo(f"wrote {plot}")


def _quality_gate(result, files: tuple[str, ...], accept: bool):
    """Refuse a poor fit (exit 2) unless accepted; an accepted one is warned about."""
    from dataclasses import replace

    from autotune.calibrate.quality import POOR_FIT_REFUSE_REL, poor_fits
    from autotune.errors import shorten

    poor = poor_fits(result)
    if not poor:
        return result
    if not accept:
        raise InputError(
            f"poor fit, nothing written: {'; '.join(poor)} (more than "
            f"{POOR_FIT_REFUSE_REL:.0%}: the model does not describe these measurements)",
            file=shorten(", ".join(files), 160),
            fix="look for mistyped rows (meshtune calibrate --check), measure again, "
            "or pass --accept-poor-fit to write it anyway",
        )
    warning = f"written with --accept-poor-fit: poor fit {'; '.join(poor)}"
    return replace(result, warnings=(warning, *result.warnings))


def _check(cal_ref: str, files: tuple[str, ...], axes: tuple, fmt: str) -> None:
    import json

    from autotune.calibrate.check import check, to_dict
    from autotune.loading import load_calibration

    calibration, shown = load_calibration(cal_ref, field="--check")
    result = check(calibration, shown, list(files), axes)
    if fmt == "json":
        click.echo(json.dumps(to_dict(result), indent=2))
    else:
        from autotune.calibrate.render_check import render_check

        render_check(result)


def _chip_of_cluster(cluster_ref: str, chip_ref: str | None) -> str:
    """The chip preset a cluster names (it must name one, and agree with --chip)."""
    from autotune.loading import load_cluster_spec

    cluster, _ = load_cluster_spec(cluster_ref, field="--cluster")
    if cluster.chip is None:
        raise InputError(
            "names no chip preset",
            field="--cluster",
            value=cluster_ref,
            fix="pass --chip PRESET, or add `chip:` to the cluster file",
        )
    if chip_ref is not None and chip_ref != cluster.chip:
        raise InputError(
            f"names chip {cluster.chip} but --chip is {chip_ref}",
            field="--cluster",
            value=cluster_ref,
            fix="pass one of them",
        )
    return cluster.chip
