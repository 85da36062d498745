"""`meshtune compare`: MeshSlice against Collective, Wang, SUMMA, Cannon,
1D TP and FSDP over a sweep of chip counts."""

from __future__ import annotations

import click

from autotune.cli.common import bad_usage, format_option, guarded
from autotune.errors import shorten
from autotune.specs.base import MAX_CHIPS, MAX_COUNT


def _chip_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        bad_usage(
            f"--chips: got {shorten(text)!r}; expected comma-separated integers; "
            "fix: e.g. --chips 16,32,64,128,256"
        )
    if not counts or min(counts) < 1 or max(counts) > MAX_CHIPS:
        bad_usage(
            f"--chips: got {shorten(text)!r}; chip counts must be 1 to 2^24; "
            "fix: e.g. --chips 16,32,64,128,256"
        )
    return counts


@click.command()
@click.argument("model_file", type=click.Path(dir_okay=False))
@click.option(
    "--model",
    "model",
    metavar="FILE_OR_PRESET",
    help="Model preset, model YAML or Hugging Face config.json (overrides the plan file's).",
)
@click.option(
    "--cluster",
    "cluster",
    metavar="FILE_OR_PRESET",
    help="Cluster YAML or preset used as the template for every chip count.",
)
@click.option(
    "--calibration",
    "calibration",
    metavar="FILE_OR_PRESET",
    help="Calibration JSON or preset (overrides the cluster's).",
)
@click.option(
    "--chips",
    "chips",
    default="16,32,64,128,256",
    show_default=True,
    help="Comma-separated chip counts to sweep.",
)
@click.option(
    "--batch",
    "batch",
    type=int,
    default=None,
    help="Sequences per step for every chip count (strong scaling); "
    "default: chips / 2 (weak scaling, as in the paper).",
)
@format_option(help="Report as tables or as JSON (base units).")
@guarded
def compare(
    model_file: str,
    model: str | None,
    cluster: str | None,
    calibration: str | None,
    chips: str,
    batch: int | None,
    fmt: str,
) -> None:
    """Compare MeshSlice with the 2D and 1D algorithms users run today for
    MODEL_FILE (a plan YAML: model and training), each on its best mesh shape.

    Exit codes: 0 ok, 1 no feasible plan, 2 bad input.
    """
    from autotune.compare.comparison import compare as run_compare
    from autotune.loading import load_plan_input
    from autotune.render_progress import progress

    counts = _chip_counts(chips)
    if batch is not None and not 1 <= batch <= MAX_COUNT:
        bad_usage(
            f"--batch: got {shorten(str(batch))}; must be 1 to 2^24; "
            "fix: give sequences per step, e.g. 32"
        )
    # compare prices the FC layers of the file's pinned degrees (data and
    # pipeline parallelism 1, one micro-batch, where left to the search)
    inp = load_plan_input(model_file, cluster, calibration, model).plan_input()
    with progress(f"planning every algorithm at {len(counts)} chip counts"):
        result = run_compare(inp, counts, batch)
    if fmt == "json":
        from autotune.compare.document import to_json

        click.echo(to_json(result), nl=False)
    else:
        from autotune.compare.render import render_compare

        render_compare(result)
