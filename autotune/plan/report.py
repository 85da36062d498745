"""The terminal report of a plan (rich). Human units only here; every number
is taken from the result, converted for display, never derived."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.plan.results import OneDComparison, PlanResult, breakdown_shares

_PASS_LABEL = {"forward": "fwd", "backward_data": "bwd-data", "backward_weight": "bwd-weight"}


def fmt_s(seconds: float | None) -> str:
    """Seconds in the most readable unit (µs, ms or s)."""
    if seconds is None:
        return "-"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def fmt_pct(fraction: float | None) -> str:
    """A fraction as a percentage."""
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def one_d_line(one: OneDComparison) -> str:
    """2D against 1D in words, with both times."""
    if one.two_d_speedup is None:
        return f"2D vs 1D: {one.note}"
    verdict = "2D beats 1D" if one.two_d_speedup > 1 else "1D beats 2D"
    return (
        f"2D vs 1D: {verdict}: best 2D mesh {one.two_d_mesh} {fmt_s(one.two_d_step_fc_time_s)}, "
        f"best 1D mesh {one.one_d_mesh} {fmt_s(one.one_d_step_fc_time_s)} "
        f"(1D/2D = {one.two_d_speedup:.2f}x)"
    )


def render_fc(result: PlanResult, console: Console, num_runner_ups: int) -> None:
    """Print the FC layers of a plan: the tensor mesh's axes on their
    resources, per-layer dataflows and slice counts, where FC time goes,
    the mesh shapes of this tensor-parallel size ranked by FC time, the
    transposes and the size-rule comparison."""
    expected = result.inputs.calibration.expected_error
    util = fmt_pct(result.flop_utilization)
    console.print(
        f"\n[bold]FC layers on the {result.mesh.num_rows} x {result.mesh.num_cols} tensor mesh"
        f"[/bold] (rows x cols)   FC time per step: [bold]{fmt_s(result.step_fc_time_s)}[/bold]"
        + (
            f" ±{expected.collective_median_rel_error:.0%}"
            if expected is not None and expected.collective_median_rel_error is not None
            else ""
        )
        + f"   FC FLOP utilization: [bold]{util}[/bold]"
        + ("   residual stream stored transposed" if result.residual_transposed else ""),
        highlight=False,
    )
    if result.placement is not None:
        shared = (
            "row and col traffic share one resource (their bytes add)"
            if result.placement.shared
            else "row and col traffic run on separate resources (they overlap)"
        )
        for a in (result.placement.row, result.placement.col):
            console.print(f"  {a.axis.value} axis ({a.size}): {a.description}")
        console.print(f"  {shared}")
    one = result.one_d
    if one is not None:
        console.print(one_d_line(one))

    layers = Table(
        title="FC layers (per training step, busiest pipeline stage)", box=box.SIMPLE_HEAD
    )
    for col in (
        "layer",
        "in->out",
        "stationary",
        "fwd",
        "bwd-data",
        "bwd-weight",
        "time",
        "exposed comm",
    ):
        layers.add_column(
            col, justify="right" if col in ("time", "exposed comm") else "left", no_wrap=True
        )
    for lp in result.layers:
        st = lp.stationary.value + (" transposed" if lp.transposed else "")
        if lp.stationary != lp.size_rule_stationary:
            st += f" [dim](rule: {lp.size_rule_stationary.value})[/dim]"
        cells = [f"{g.shape.dataflow.value} S={g.num_slices}" for g in lp.gemms]
        per_step = lp.breakdown_per_step
        layers.add_row(
            lp.layer.name,
            f"{lp.layer.in_features}->{lp.layer.out_features}",
            st,
            *cells,
            fmt_s(per_step.total_s),
            fmt_s(per_step.exposed_comm_s),
        )
    console.print(layers)

    b = result.breakdown_per_step
    shares = breakdown_shares(b)
    where = Table(title="Where time goes (per step)", box=box.SIMPLE_HEAD)
    where.add_column("part")
    where.add_column("time", justify="right")
    where.add_column("share of FC time", justify="right")
    where.add_row("compute", fmt_s(b.compute_s), fmt_pct(shares["compute"]))
    where.add_row("exposed communication", fmt_s(b.exposed_comm_s), fmt_pct(shares["exposed"]))
    where.add_row(
        "[dim]all launch (hidden or not)[/dim]", fmt_s(b.launch_s), fmt_pct(shares["launch"])
    )
    where.add_row("[dim]all sync (hidden or not)[/dim]", fmt_s(b.sync_s), fmt_pct(shares["sync"]))
    where.add_row(
        "[dim]all transfer (hidden or not)[/dim]", fmt_s(b.transfer_s), fmt_pct(shares["transfer"])
    )
    if result.transposes:
        where.add_row("transposes", fmt_s(result.transpose_s_per_step), "")
    console.print(where)

    ranked = Table(title=f"Mesh shapes of {result.tp_chips} chips by FC time", box=box.SIMPLE_HEAD)
    ranked.add_column("mesh")
    ranked.add_column("FC time per step", justify="right")
    ranked.add_column("stationaries")
    ranked.add_column("note")
    shown = 0
    for c in result.candidates:
        if c.feasible:
            if shown > num_runner_ups:
                continue
            shown += 1
            mark = "chosen" if c.mesh == result.mesh else ""
            if c.mesh != result.mesh and shown == 1:
                mark = "fastest FC layers; the whole step chose another mesh"
            ranked.add_row(str(c.mesh), fmt_s(c.step_fc_time_s), c.stationaries or "", mark)
        else:
            ranked.add_row(f"[dim]{c.mesh}[/dim]", "-", "", f"[dim]infeasible: {c.reason}[/dim]")
    console.print(ranked)

    if result.transposes:
        console.print(f"Transposes per block ({len(result.transposes)}):")
        for tr in result.transposes:
            console.print(f"  {tr.where} ({tr.rows} x {tr.cols})")

    cmp = result.comparison
    if cmp is not None:
        if cmp.mesh is None:
            console.print(f"Size rule (the paper's phase 1): {cmp.reason}")
        else:
            same = (
                f", {fmt_s(cmp.same_mesh_step_fc_time_s)} on {result.mesh}"
                if cmp.same_mesh_step_fc_time_s is not None
                else f"; infeasible on {result.mesh}"
            )
            diff = ", ".join(cmp.differing_layers) if cmp.differing_layers else "none"
            console.print(
                f"Size rule (the paper's phase 1): {fmt_s(cmp.step_fc_time_s)} on its best mesh "
                f"{cmp.mesh}{same}; layers that differ on the chosen mesh: {diff}"
            )
