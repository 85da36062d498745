"""`meshtune calibrate`: fit a calibration from benchmark measurements."""

from __future__ import annotations

from pathlib import Path

import click

from autotune.cli.common import OutputPath, format_option, guarded


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out",
    required=True,
    type=OutputPath(),
    help="Calibration JSON to write (atomically; nothing is written on bad input).",
)
@format_option(help="Report as tables and a plot, or print the JSON.")
@click.option(
    "--axis",
    type=click.Choice(["row", "col", "both"]),
    default="both",
    show_default=True,
    help="Mesh axis the rings of nccl-tests logs stand for.",
)
@click.option(
    "--base",
    "base",
    metavar="FILE_OR_PRESET",
    default=None,
    help="Calibration whose entries are kept for pairs the inputs do not cover.",
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
    files: tuple[str, ...], out: str, fmt: str, axis: str, base: str | None, plot: str | None
) -> None:
    """Fit collective (launch, sync, bandwidth per op and mesh axis) and GEMM
    (rate and efficiency curve) models from FILE... (meshtune benchmark CSVs
    and raw nccl-tests logs) and write a calibration for `meshtune plan
    --calibration`.

    Exit codes: 0 ok, 2 bad input.
    """
    from autotune.calibrate.result import to_json
    from autotune.calibrate.run import calibrate as run_calibrate
    from autotune.io import atomic_write_text
    from cost_models import Axis

    axes = (Axis.ROW, Axis.COL) if axis == "both" else (Axis(axis),)
    if plot:
        from autotune.calibrate.plot_png import require_matplotlib

        require_matplotlib()
    result = run_calibrate(list(files), axes=axes, name=Path(out).stem, base_ref=base)
    text = to_json(result)
    atomic_write_text(out, text)
    if plot:
        from autotune.calibrate.plot_png import write_png
        from autotune.calibrate.render import plot_series

        write_png(plot, plot_series(result))
    if fmt == "json":
        click.echo(text, nl=False)
    else:
        from autotune.calibrate.render import render_calibration

        render_calibration(result, out)
        if plot:
            click.echo(f"wrote {plot}")
