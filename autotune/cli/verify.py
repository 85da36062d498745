"""`meshtune verify`: execute a plan's GEMMs and check them against a
plain matmul."""

from __future__ import annotations

import sys

import click

from autotune.cli.common import format_option, guarded


@click.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "--backend",
    type=click.Choice(["numpy", "jax"]),
    default="numpy",
    show_default=True,
    help="numpy: emulated mesh with byte counting; jax: shard_map on a device mesh "
    "(CPU runs on virtual host devices).",
)
@format_option(help="Report as a table or as JSON (meshtune.verify/1).")
@guarded
def verify(plan_file: str, backend: str, fmt: str) -> None:
    """Run every GEMM of PLAN_FILE (from `meshtune plan --out`) forward and
    backward, scaled down but with the plan's mesh shape, dataflows, block
    size and slice counts, and compare each with a plain matmul.

    Exit codes: 0 all match, 1 a mismatch, 2 bad input (e.g. an invalid
    slice count).
    """
    from autotune.render_progress import progress
    from autotune.verify.plan_file import read_plan
    from autotune.verify.render import render_verify, to_json
    from autotune.verify.runner import verify_plan

    plan = read_plan(plan_file)
    with progress(f"running the GEMMs of {plan_file} on the {backend} backend"):
        if backend == "jax":
            from autotune.verify.jax_backend import verify_engine

            engine, dtype = verify_engine(plan.mesh.num_rows * plan.mesh.num_cols)
            result = verify_plan(plan, plan_file, "jax", engine, dtype)
        else:
            from autotune.verify.runner import numpy_engine

            result = verify_plan(plan, plan_file, "numpy", numpy_engine)
    if fmt == "json":
        click.echo(to_json(result), nl=False)
    else:
        render_verify(result)
    if not result.ok:
        failed = sum(not c.ok for c in result.checks)
        click.echo(
            f"meshtune: error: {failed} of {len(result.checks)} GEMMs do not match", err=True
        )
        sys.exit(1)
