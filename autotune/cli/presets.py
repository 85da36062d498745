"""`meshtune presets`: list the bundled models, clusters and calibrations."""

from __future__ import annotations

import click

from autotune.cli.common import guarded


@click.command()
@guarded
def presets() -> None:
    """List bundled model, cluster and calibration presets (usable by name
    in plan files and in --cluster / --calibration)."""
    from autotune.loading import (
        calibration_preset_names,
        load_calibration,
        load_cluster_spec,
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
    click.echo("clusters:")
    for name in preset_names("clusters"):
        c, _ = load_cluster_spec(name)
        peaks = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in c.peak_tflops_per_s.items())
        click.echo(
            f"  {name:<20} {c.num_chips} chips, {c.topology.value}, {peaks}, "
            f"calibration {c.calibration}"
        )
    click.echo("calibrations:")
    for name in calibration_preset_names():
        cal, _ = load_calibration(name)
        click.echo(
            f"  {name:<20} {', '.join(sorted(cal.collectives))}; compute "
            f"{cal.compute.effective_flops_per_s / 1e12:.1f} TFLOP/s {cal.compute.dtype}"
        )
