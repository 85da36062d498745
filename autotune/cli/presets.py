"""`meshtune presets`: list the bundled models, chips, clusters and calibrations."""

from __future__ import annotations

import click

from autotune.cli.common import guarded


@click.command()
@guarded
def presets() -> None:
    """List bundled model, chip, cluster and calibration presets (usable by
    name in plan files and in --cluster / --calibration)."""
    from autotune.hardware.chips import chip_names, load_chip
    from autotune.hardware.cluster import load_cluster
    from autotune.loading import (
        calibration_preset_names,
        load_calibration,
        load_model_spec,
        preset_names,
    )

    click.echo("models:")
    for name in preset_names("models"):
        m = load_model_spec(name)
        kv = f", {m.kv_heads} kv heads" if m.kv_heads != m.num_heads else ""
        click.echo(
            f"  {name:<20} {m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads of "
            f"{m.head_dim}{kv}, {m.ffn_kind.value} ffn {m.ffn_size}"
        )
    click.echo("chips (dense peaks):")
    for name in chip_names():
        c = load_chip(name)
        peaks = ", ".join(f"{k} {v:g}" for k, v in c.peak_tflops_per_s.items())
        click.echo(
            f"  {name:<20} {c.vendor} {peaks} TFLOP/s; HBM {c.hbm_gib:g} GiB at "
            f"{c.hbm_tb_per_s:g} TB/s ({c.figures.value})"
        )
    click.echo("clusters (NAME-<N>n sets the node count of a node preset, e.g. h100-hgx-32n):")
    for name in preset_names("clusters"):
        c = load_cluster(name)
        peak = c.peak_flops_per_s("bf16")
        chip = f"{c.chip.name} x {c.num_chips}" if c.chip else f"{c.num_chips} chips"
        links = _links(c)
        click.echo(
            f"  {name:<20} {chip}, {c.topology.value}{links}, "
            f"bf16 {peak / 1e12 if peak else 0:g} TFLOP/s per chip, calibration "
            f"{c.spec.calibration}"
        )
    click.echo("calibrations:")
    for name in calibration_preset_names():
        cal, _ = load_calibration(name)
        kind = f" ({cal.figures.value})" if cal.figures is not None else ""
        attention = ""
        if cal.attention is not None:
            attention = f"; attention {cal.attention.flops_per_s / 1e12:.0f} TFLOP/s"
            if cal.attention.backward is not None:
                attention += f" (backward {cal.attention.backward.flops_per_s / 1e12:.0f})"
            attention += " at long sequences"
        click.echo(
            f"  {name:<20} {', '.join(sorted(cal.collectives))}; compute "
            f"{cal.compute.effective_flops_per_s / 1e12:.1f} TFLOP/s {cal.compute.dtype}"
            f"{attention}; overlap slowdown {cal.overlap_slowdown:g}{kind}"
        )


def _links(c) -> str:
    """Key link figures of a cluster, GB/s per chip and direction."""
    parts = []
    if c.spec.torus is not None:
        t = c.spec.torus
        dims = "x".join(str(d) for d in t.dims)
        parts.append(f" {dims}, ICI {t.link_gb_per_s:g} GB/s per link")
    if c.node_bytes_per_s:
        parts.append(f" {c.chips_per_node} per node at {c.node_bytes_per_s / 1e9:g} GB/s")
    if c.scale_out_bytes_per_s:
        parts.append(f", NIC {c.scale_out_bytes_per_s / 1e9:g} GB/s")
    return "".join(parts)
