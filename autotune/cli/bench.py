"""`meshtune bench`: measure collectives and GEMMs on a device mesh and
write the CSV `meshtune calibrate` reads."""

from __future__ import annotations

import click

from autotune.cli.common import OutputPath, bad_usage, guarded
from autotune.errors import shorten


def _parse_mesh(text: str):
    from cost_models import MeshShape

    try:
        rows, cols = (int(x) for x in text.lower().split("x"))
    except ValueError:
        bad_usage(f"--mesh: got {shorten(text)!r}; write ROWSxCOLS; fix: e.g. --mesh 2x4")
    if not (1 <= rows <= 4096 and 1 <= cols <= 4096):
        bad_usage(
            f"--mesh: got {shorten(text)!r}; both sides must be 1 to 4096; fix: e.g. --mesh 2x4"
        )
    return MeshShape(rows, cols)


@click.command()
@click.option(
    "--backend",
    type=click.Choice(["jax"]),
    default="jax",
    show_default=True,
    help="Measurement engine (JAX: virtual host devices on CPU, the real mesh on TPU/GPU).",
)
@click.option("--out", "out", required=True, type=OutputPath(), help="CSV file to write.")
@click.option(
    "--mesh",
    "meshes",
    multiple=True,
    metavar="RxC",
    help="Mesh shape to measure (repeatable); default: every RxC of the devices with R, C >= 2.",
)
@click.option(
    "--dtype",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default="fp32",
    show_default=True,
    help="Element type of the measured collectives and GEMMs.",
)
@click.option("--quick", is_flag=True, help="Fewer sizes and repeats (a smoke run).")
@guarded
def bench(backend: str, out: str, meshes: tuple[str, ...], dtype: str, quick: bool) -> None:
    """Measure all-gather, reduce-scatter and all-to-all along each mesh
    axis over a sweep of shard sizes, send-recv to the ring neighbour, local
    GEMMs, grouped GEMMs (a mixture of experts' experts), and the largest
    GEMM beside an all-gather (the overlap slowdown), and write meshtune's
    benchmark CSV for `meshtune calibrate`.

    Exit codes: 0 ok, 2 bad input (e.g. JAX missing or too few devices).
    """
    from autotune.io import atomic_write_text
    from autotune.verify import bench as b

    shapes = tuple(_parse_mesh(m) for m in meshes)
    if not shapes:
        from autotune.verify.jax_backend import ensure_devices, import_jax

        ensure_devices(8)
        shapes = b.default_meshes(len(import_jax().devices()))
        if not shapes:
            bad_usage("--mesh: JAX sees fewer than 4 devices; pass --mesh RxC explicitly")
    config = b.BenchConfig(
        meshes=shapes,
        shard_bytes=b.QUICK_SHARD_BYTES if quick else b.DEFAULT_SHARD_BYTES,
        gemms=b.QUICK_GEMMS if quick else b.DEFAULT_GEMMS,
        dtype=dtype,
        repeats=3 if quick else 10,
        grouped_gemms=b.QUICK_GROUPED_GEMMS if quick else b.DEFAULT_GROUPED_GEMMS,
    )
    rows, platform = b.run_bench(config, progress=lambda msg: click.echo(msg, err=True))
    atomic_write_text(out, b.to_csv(rows, platform))
    click.echo(f"wrote {out}: {len(rows)} rows ({platform})")
