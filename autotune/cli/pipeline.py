"""`meshtune pipeline`: balance layers and recomputation over pipeline stages."""

from __future__ import annotations

import math

import click

from autotune.cli.common import WRITTEN_NUMBER, OutputPath, format_option, guarded

# Seconds kept at the end of a time limit for the report, the JSON and the
# timeline (tenths of a second at the largest schedules).
OUTPUT_S = 0.3


def _in_range(value: float | None, flag: str, high: float, low: float = 0.0) -> None:
    """InputError naming `flag` unless `value` is None or a finite number
    above 0, at least `low` and at most `high`."""
    from autotune.errors import InputError

    if value is None:
        return
    above_low = value >= low if low > 0 else value > 0
    if not (math.isfinite(value) and above_low and value <= high):
        shown_low = f"at least {low:g}" if low > 0 else "above 0"
        raise InputError(
            f"must be a finite number {shown_low} and at most {high:g}",
            field=flag,
            value=value,
            fix=f"use a number {shown_low} and at most {high:g}",
        )


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
@click.option("--stages", type=int, default=None, metavar="N", help="Pipeline stages (seed -s).")
@click.option("--chunks", type=int, default=None, metavar="V", help="Chunks per stage (seed -i).")
@click.option(
    "--micro-batches", "micro_batches", type=int, default=None, metavar="M", help="Seed -mb."
)
@click.option(
    "--memory-cap-mb",
    "memory_cap_mb",
    type=WRITTEN_NUMBER,
    default=None,
    metavar="X",
    help="Memory cap per stage in MB as MindSpore prints them (MiB, 2^20 bytes; seed -mem).",
)
@click.option(
    "--time-limit",
    "time_limit",
    type=WRITTEN_NUMBER,
    default=None,
    metavar="S",
    help="Time limit of the whole command, s, from its start (the file's, else 60; up to a "
    "week): it ends within the limit + 1 s, or its first plan + 1 s when that takes longer. "
    "Under 60 s the plan search's budget shrinks in proportion, so it fits.",
)
@click.option(
    "--manual",
    "manual",
    type=click.Path(dir_okay=False),
    default=None,
    help="The seed tool's manual plans (manual1: ...) to simulate and compare (seed -manual).",
)
@click.option("--verbose", is_flag=True, help="Send the solver's log to stderr.")
@guarded
def pipeline(
    spec_file: str,
    fmt: str,
    out: str | None,
    timeline: str | None,
    stages: int | None,
    chunks: int | None,
    micro_batches: int | None,
    memory_cap_mb: float | None,
    time_limit: float | None,
    manual: str | None,
    verbose: bool,
) -> None:
    """Balance SPEC_FILE's layers and recomputation over pipeline stages and chunks.

    SPEC_FILE is meshtune's pipeline YAML, the seed tool's init YAML or its
    layer description JSON; the flags override the file. Exit codes: 0 ok,
    1 no plan fits the memory cap (proven), 2 bad input.
    """
    from dataclasses import replace

    from autotune.errors import InputError, NoFeasiblePlanError, NoPlanFoundError
    from autotune.io import atomic_write_text
    from autotune.pipeline.balance import balance, evaluate_plans
    from autotune.pipeline.document import decomposition_document, to_json
    from autotune.pipeline.problem import ShapeOverrides
    from autotune.pipeline.readers import read_pipeline_file

    if timeline is not None and not timeline.lower().endswith(".svg"):
        raise InputError(
            "must name an .svg file", field="--timeline", value=timeline, fix="e.g. plan.svg"
        )
    from autotune.pipeline.limits import (
        MAX_CHUNKS,
        MAX_MB,
        MAX_MICRO_BATCHES,
        MAX_STAGES,
        MAX_TIME_LIMIT_S,
        MIN_CAP_MB,
    )

    _in_range(stages, "--stages", MAX_STAGES)
    _in_range(chunks, "--chunks", MAX_CHUNKS)
    _in_range(micro_batches, "--micro-batches", MAX_MICRO_BATCHES)
    _in_range(memory_cap_mb, "--memory-cap-mb", MAX_MB, MIN_CAP_MB)
    _in_range(time_limit, "--time-limit", MAX_TIME_LIMIT_S)
    overrides = ShapeOverrides(
        num_stages=stages,
        num_chunks=chunks,
        num_micro_batches=micro_batches,
        memory_cap_bytes=memory_cap_mb * 2**20 if memory_cap_mb is not None else None,
        time_limit_s=time_limit,
    )
    read = read_pipeline_file(spec_file, overrides, manual)
    for warning in read.warnings:
        click.echo(f"meshtune: warning: {warning}", err=True)
    if read.problem is None:
        import json

        text = json.dumps(
            decomposition_document(spec_file, read.decomposition, read.warnings),
            indent=2,
            allow_nan=False,
        )
        if fmt != "json":
            from autotune.pipeline.render import render_decomposition

            render_decomposition(read.decomposition)
        if out:
            atomic_write_text(out, text + "\n")
        if fmt == "json":
            click.echo(text)
        return

    # The time limit counts from the command's start (its process's, run as
    # `meshtune`): the search ends early enough for the final polish and the
    # output to fit in it too (docs/reliability.md, "Input limits").
    from autotune.cli.common import command_started_s
    from autotune.pipeline.balance import POLISH_GRACE_S
    from autotune.render_progress import progress

    deadline_s = command_started_s() + read.settings.time_limit_s - POLISH_GRACE_S - OUTPUT_S
    settings = replace(read.settings, verbose=verbose, deadline_s=deadline_s)
    with progress(f"balancing {spec_file} (solving the stage-assignment ILP)"):
        result = balance(read.problem, settings)
    for warning in result.warnings:
        click.echo(f"meshtune: warning: {warning}", err=True)
    result = replace(
        result,
        decomposition=read.decomposition,
        source_format=read.format,
        warnings=(*read.warnings, *result.warnings),
        manual_plans=evaluate_plans(read.manual_plans),
    )
    text = to_json(result, spec_file) if (fmt == "json" or out) else None
    svg = None
    if timeline and result.plan is not None:
        from autotune.pipeline.render_svg import timeline_svg

        title = f"{spec_file}: {result.plan.label}"
        svg = timeline_svg(result.plan.simulation, result.problem.num_stages, title)
    if fmt != "json":
        from autotune.pipeline.render import render_result

        render_result(result)
    # everything is computed and rendered before the first file is written;
    # no plan is a failure (exit 1 or 4), which writes no file: the report or
    # the JSON on stdout says why
    if out and result.plan is not None:
        atomic_write_text(out, text)
    if svg is not None:
        atomic_write_text(timeline, svg, "--timeline")
    if fmt == "json":
        click.echo(text, nl=False)
    elif result.plan is not None:
        for path in (out, timeline):
            if path:
                click.echo(f"wrote {path}")
    if result.plan is None:
        reason = result.infeasible.reason if result.infeasible else "no plan"
        if result.solver.status == "infeasible":
            raise NoFeasiblePlanError(reason)
        raise NoPlanFoundError(reason)
