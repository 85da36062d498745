"""`meshtune plan`: the best configuration of a training job on a cluster,
with its FC layers' dataflows and slice counts, as a report and a Plan."""

from __future__ import annotations

import click

from autotune.cli.common import OutputPath, format_option, guarded


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
    help="Cluster YAML or preset name, e.g. h100-hgx-32n or tpu-v5p-256-4s (overrides).",
)
@click.option(
    "--calibration",
    "calibration",
    metavar="FILE_OR_PRESET",
    help="Calibration JSON from `meshtune calibrate` or a preset (overrides).",
)
@click.option(
    "--dataflow",
    type=click.Choice(["cost", "size-rule", "always-w", "always-y"]),
    default=None,
    help="Phase-1 dataflow policy (overrides the plan file's search.dataflow).",
)
@format_option(help="Report on stdout as a table or as the Plan JSON (meshtune.plan/3).")
@click.option(
    "--out",
    "out",
    type=OutputPath(),
    default=None,
    help="Also write the Plan JSON to this file (atomically).",
)
@guarded
def plan(
    model_file: str,
    model: str | None,
    cluster: str | None,
    calibration: str | None,
    dataflow: str | None,
    fmt: str,
    out: str | None,
) -> None:
    """Plan MODEL_FILE (a plan YAML: model, training, optional cluster,
    calibration, search and constraints): every parallel degree the file
    leaves out or sets to `auto` is searched, every number pins one, on any
    cluster (GPU nodes, NVL72 racks, MI300X nodes, TPU slices). Prints the
    chosen configuration, why it wins, where the step's time goes, memory
    per stage and the FC layers' dataflows and slice counts.

    Exit codes: 0 ok, 1 no feasible plan (or out of memory), 2 bad input.
    """
    from autotune.errors import NoFeasiblePlanError
    from autotune.io import atomic_write_text
    from autotune.job.document import to_json
    from autotune.job.plan import make_plan, out_of_memory_message
    from autotune.loading import load_plan_input
    from autotune.render_progress import progress
    from autotune.specs.plan_input import DataflowPolicy

    inp = load_plan_input(model_file, cluster, calibration, model)
    if dataflow is not None:
        search = inp.search.model_copy(update={"dataflow": DataflowPolicy(dataflow)})
        inp = inp.model_copy(update={"search": search})
    with progress("planning"):
        result = make_plan(inp)
    # the report is rendered before anything is written, so a failure while
    # rendering leaves no output behind
    if fmt != "json":
        from autotune.job.report import render_report

        # the report, memory table included, also shows why a plan does not fit
        render_report(result)
    if not result.fits:
        raise NoFeasiblePlanError(out_of_memory_message(result))
    text = to_json(result) if (fmt == "json" or out) else None
    if out:
        atomic_write_text(out, text)
    if fmt == "json":
        click.echo(text, nl=False)
    elif out:
        click.echo(f"\nwrote {out}")
