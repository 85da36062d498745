"""`meshtune export`: write what a trainer reads from one plan JSON."""

from __future__ import annotations

import click

from autotune.cli.common import guarded
from autotune.formats.export import TARGETS


@click.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option(
    "--to",
    "target",
    type=click.Choice(list(TARGETS)),
    required=True,
    help="Trainer to write for.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder to write the files into (created if missing); default: print them.",
)
@guarded
def export(plan_file: str, target: str, out: str | None) -> None:
    """Write the trainer config for PLAN_FILE (a `meshtune plan --out` JSON).

    jax: mesh, PartitionSpecs and a runnable shard_map module; maxtext:
    parallelism, remat policy and XLA flags; megatron: command-line arguments
    and Transformer Engine's tp_comm_overlap_cfg YAML (1D plans); torchtitan:
    the TOML job config (1D plans); mindformers: parallel_config, offset and
    recompute lists. What a target cannot express is listed, one line per
    choice, in each file's header and on stderr.

    Exit codes: 0 ok, 2 bad input or a plan the target cannot run.
    """
    from autotune.formats.export import export_plan, write_export

    result = export_plan(plan_file, target)
    if out is None:
        for f in result.files:
            click.echo(f"==> {f.name} <==")
            click.echo(f.text, nl=False)
    else:
        for path in write_export(result, out):
            click.echo(f"wrote {path}")
    for line in result.not_expressed:
        click.echo(f"meshtune: not expressed in {target}: {line}", err=True)
