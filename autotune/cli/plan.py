"""`meshtune plan`: choose mesh shape, dataflows and slice counts."""

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
    help="Cluster YAML or preset name (overrides the plan file's).",
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
    help="Phase-1 policy (overrides the plan file's search.dataflow).",
)
@format_option(help="Report on stdout as a table or as the JSON sharding config.")
@click.option(
    "--out",
    "out",
    type=OutputPath(),
    default=None,
    help="Also write the JSON sharding config to this file (atomically).",
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
    """Plan MODEL_FILE (a plan YAML: model, training, optional cluster, calibration
    and search) on a 2D torus: per-FC-layer dataflows, mesh shape and slice counts,
    and the whole training step: time, utilisation, memory per pipeline stage.

    When a parallel degree in `training` is `auto` (or the file has
    `constraints`), search tensor mesh x pipeline x data parallel x micro-batch
    x interleave x recomputation x ZeRO stage on a GPU cluster instead.

    Exit codes: 0 ok, 1 no feasible plan (or out of memory), 2 bad input.
    """
    from autotune.errors import NoFeasiblePlanError
    from autotune.io import atomic_write_text
    from autotune.job.search_input import wants_search

    if wants_search(model_file):
        _plan_search(model_file, cluster, fmt, out)
        return
    from autotune.job.document import job_document
    from autotune.job.step import out_of_memory_message, plan_job
    from autotune.loading import load_plan_input
    from autotune.plan.document import to_json
    from autotune.plan.search import plan as run_plan
    from autotune.specs.plan_input import DataflowPolicy

    inp = load_plan_input(model_file, cluster, calibration, model)
    result = run_plan(inp, DataflowPolicy(dataflow) if dataflow else None)
    job = plan_job(inp, result, check_memory=False)
    # the report is rendered before anything is written, so a failure while
    # rendering leaves no output behind
    if fmt != "json":
        from autotune.job.report import render_job
        from autotune.plan.report import render_plan

        # the report, memory table included, also shows why a plan does not fit
        render_plan(result)
        render_job(job)
    if not job.fits:
        raise NoFeasiblePlanError(out_of_memory_message(job))
    text = to_json(result, job_document(job)) if (fmt == "json" or out) else None
    if out:
        atomic_write_text(out, text)
    if fmt == "json":
        click.echo(text, nl=False)
    elif out:
        click.echo(f"\nwrote {out}")


def _plan_search(model_file: str, cluster: str | None, fmt: str, out: str | None) -> None:
    """The joint parallelism search: report, JSON and the optional file."""
    from autotune.io import atomic_write_text
    from autotune.job.render_search import render_text
    from autotune.job.search_document import to_json
    from autotune.job.search_input import load_search_input, plan_search
    from autotune.render_progress import progress

    inp = load_search_input(model_file, cluster)
    with progress("searching parallel configurations"):
        doc = plan_search(inp)
    text = to_json(doc)
    if out:
        atomic_write_text(out, text)
    if fmt == "json":
        click.echo(text, nl=False)
    else:
        click.echo(render_text(doc), nl=False)
        if out:
            click.echo(f"\nwrote {out}")
