"""`meshtune pipeline`: balance layers and recomputation over pipeline stages."""

from __future__ import annotations

from dataclasses import replace

import click

from autotune.cli.common import OutputPath, format_option, guarded


@click.command()
@click.argument("spec_file", type=click.Path(dir_okay=False))
@format_option(help="Report on stdout as tables or as the meshtune.pipeline/1 JSON document.")
@click.option(
    "--out",
    "out",
    type=OutputPath(),
    default=None,
    help="Also write the JSON document to this file (atomically).",
)
@click.option(
    "--timeline",
    "timeline",
    type=OutputPath(),
    default=None,
    metavar="FILE.svg",
    help="Write the simulated schedule of the plan as an SVG timeline.",
)
@guarded
def pipeline(spec_file: str, fmt: str, out: str | None, timeline: str | None) -> None:
    """Balance SPEC_FILE's layers and recomputation over pipeline stages and chunks
    (meshtune's pipeline YAML or the seed tool's init YAML with a `meshtune:` block).

    Exit codes: 0 ok, 1 no plan fits the memory cap, 2 bad input.
    """
    from autotune.errors import InputError, NoFeasiblePlanError
    from autotune.io import atomic_write_text
    from autotune.pipeline.balance import balance
    from autotune.pipeline.document import to_json
    from autotune.pipeline.readers import read_pipeline_file

    if timeline is not None and not timeline.lower().endswith(".svg"):
        raise InputError(
            "must name an .svg file", field="--timeline", value=timeline, fix="e.g. plan.svg"
        )
    from autotune.render_progress import progress

    with progress(f"balancing {spec_file} (solving the stage-assignment ILP)"):
        read = read_pipeline_file(spec_file)
        result = replace(balance(read.problem, read.settings), decomposition=read.decomposition)
    text = to_json(result, spec_file) if (fmt == "json" or out) else None
    svg = None
    if timeline and result.plan is not None:
        from autotune.pipeline.render_svg import timeline_svg

        title = f"{spec_file}: {result.plan.label}"
        svg = timeline_svg(result.plan.simulation, result.problem.num_stages, title)
    if fmt != "json":
        from autotune.pipeline.render import render_result

        render_result(result)
    # everything is computed and rendered before the first file is written
    if out:
        atomic_write_text(out, text)
    if svg is not None:
        atomic_write_text(timeline, svg, "--timeline")
    if fmt == "json":
        click.echo(text, nl=False)
    else:
        for path in (out, timeline if result.plan is not None else None):
            if path:
                click.echo(f"wrote {path}")
    if result.plan is None:
        reason = result.infeasible.reason if result.infeasible else "no plan"
        raise NoFeasiblePlanError(reason)
