"""The terminal report of a Plan (rich): the chosen configuration, why it
wins, where the step's time goes, memory per stage, the FC layers, the
alternatives and, for a pinned file, the better configuration. Human units
only here; every number is taken from the plan, never derived."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.hardware.layout import ParallelAxis
from autotune.job.hardware import GIB
from autotune.job.model import PARTS
from autotune.job.plan import Alternative, Plan
from autotune.plan.report import fmt_pct, fmt_s, render_fc
from autotune.render_text import user_text
from autotune.specs.training import Fp8Recipe

_AXIS = {
    ParallelAxis.TENSOR_COL: "tensor col",
    ParallelAxis.TENSOR_ROW: "tensor row",
    ParallelAxis.CONTEXT: "context",
    ParallelAxis.DATA: "data",
    ParallelAxis.PIPELINE: "pipeline",
    ParallelAxis.GRADIENT: "data x context (gradients)",
    ParallelAxis.EXPERT: "expert",
    ParallelAxis.EXPERT_TENSOR: "expert tensor",
    ParallelAxis.EXPERT_DATA: "expert data (expert gradients)",
}


def config_line(config: dict[str, int | str], recompute: str, micro_batches: int) -> str:
    """A configuration in one line."""
    v, cp = int(config["v"]), int(config.get("cp", 1))
    return (
        f"TP {config['rows']}x{config['cols']}"
        + (f" x CP {cp}" if cp > 1 else "")
        + f" x PP {config['pp']}"
        + (f" (interleave {v})" if v > 1 else "")
        + f" x DP {config['dp']}"
        + (f" ({expert_degrees(config)})" if int(config.get("ep", 1)) > 1 else "")
        + f", {micro_batches} micro-batch(es) of {config['mbs']}, "
        f"recompute {recompute}, ZeRO-{config['zero']}"
    )


def short_config(config: dict[str, int | str], recompute: str, micro_batches: int) -> str:
    """A configuration in a table cell."""
    v, cp = int(config["v"]), int(config.get("cp", 1))
    return (
        f"TP {config['rows']}x{config['cols']}"
        + (f" CP {cp}" if cp > 1 else "")
        + f" PP {config['pp']}"
        + (f"x{v}" if v > 1 else "")
        + f" DP {config['dp']}"
        + (f" {expert_degrees(config)}" if int(config.get("ep", 1)) > 1 else "")
        + f" mb {config['mbs']}x{micro_batches} {recompute} Z{config['zero']}"
    )


def expert_degrees(config: dict[str, int | str]) -> str:
    """`EP n`, and `x ETP m` when the experts are split too."""
    ep, etp = int(config.get("ep", 1)), int(config.get("etp", 1))
    return f"EP {ep}" + (f" x ETP {etp}" if etp > 1 else "")


def experts_line(plan: Plan) -> str:
    """The mixture of experts' layout and routing in one line."""
    moe, x = plan.inp.model.moe, plan.experts
    assert moe is not None and x is not None
    ep, etp = int(plan.config.get("ep", 1)), int(plan.config.get("etp", 1))
    if moe.expert_imbalance is not None:
        source = "moe.expert_imbalance"
    elif moe.capacity_factor is not None:
        source = "the capacity factor"
    elif ep == 1:
        source = "one rank holds every expert"
    else:
        source = (
            f"real-routing default for {ep} ranks of {moe.num_experts} experts, scaled from "
            "UltraEP's lowest measured; set moe.expert_imbalance from your runs, 1 for forced "
            "balance"
        )
    return (
        f"Experts: {expert_degrees(plan.config)}, {moe.num_experts // ep} of {moe.num_experts} "
        "routed experts per chip" + (f" (1/{etp} of each)" if etp > 1 else "") + ", "
        f"{moe.experts_per_token} per token; busiest rank {x.imbalance:.2f}x the mean ({source}); "
        f"{x.rows_per_expert:,.0f} tokens per expert per micro-batch; "
        + dispatch_words(plan)
        + host_words(plan)
    )


def host_words(plan: Plan) -> str:
    """Where the host's launches of the per-expert kernels bound the
    experts: how many, at what rate and from where (empty otherwise)."""
    x = plan.experts
    assert x is not None
    if x.host_wait_s <= 0.0:
        return ""
    launches = sum(x.host_launches)
    source = (
        "the calibration's host_launch_s"
        if plan.hw.host_launch_measured
        else "a public profile's median; host_launch rows in meshtune calibrate measure yours"
    )
    return (
        f"; host-bound: {launches:.0f} per-expert kernel launches per layer and micro-batch "
        f"(Megatron-LM with Transformer Engine) at {plan.hw.host_launch_s * 1e6:.1f} us ({source}) "
        f"add {x.host_wait_s * 1e3:.2f} ms to each layer's expert GEMMs per micro-batch"
    )


def dispatch_words(plan: Plan) -> str:
    """The dispatcher priced, its inter-node byte share and the overlap."""
    t, x = plan.training, plan.experts
    assert x is not None
    if int(plan.config.get("ep", 1)) == 1:
        return "no expert all-to-all (EP 1)"
    words = f"{t.expert_dispatcher.value} dispatcher"
    shares = []
    if x.scale_out_share < 1.0:
        shares.append(f"inter-node bytes x{x.scale_out_share:.2f}")
    if x.scale_up_share < 1.0:
        shares.append(f"in-node bytes x{x.scale_up_share:.2f}")
    if shares:
        words += f" ({', '.join(shares)})"
    if t.overlap_expert_comm:
        words += ", all-to-alls overlapped with another micro-batch"
    return words


def _m(plan: Plan, config: dict[str, int | str]) -> int:
    batch = plan.inp.training.global_batch_sequences
    return batch // (int(config["dp"]) * int(config["mbs"]))


def render_report(plan: Plan, console: Console | None = None) -> None:
    """Print the plan (module docstring)."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=120)
    inp, t = plan.inp, plan.inp.training
    console.print(
        f"[bold]meshtune plan[/bold]  {user_text(inp.model.name)} on "
        f"{user_text(inp.cluster.name)} ({plan.num_chips} chips), batch "
        f"{t.global_batch_sequences} x {t.sequence_length} tokens, {t.dtype.value}, calibration "
        f"{user_text(inp.calibration.name)}",
        highlight=False,
    )
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/yellow] {user_text(warning, 400)}", highlight=False)
    band = "" if plan.band_rel is None else f" ±{plan.band_rel:.0%}"
    expected = inp.calibration.expected_error
    if plan.band_rel is not None and expected is not None:
        console.print(
            f"error band ±{plan.band_rel:.1%}: the calibration's held-out errors (collectives "
            f"{_pct_or_dash(expected.collective_median_rel_error)}, compute "
            f"{_pct_or_dash(expected.compute_median_rel_error)} median) weighted by where the "
            "step's time goes",
            highlight=False,
        )
    elif expected is None:
        console.print(
            f"no error band: calibration {user_text(inp.calibration.name)} records no held-out "
            "error (data-sheet figures); calibrate from measurements for one",
            highlight=False,
        )
    for x in plan.extrapolations:
        console.print(f"[yellow]extrapolated:[/yellow] {user_text(x.line(), 400)}", highlight=False)
    pinned = t.pinned_degrees
    console.print(
        f"\n[bold green]{'Planned' if plan.fits else 'Closest (does not fit)'}:[/bold green] "
        + config_line(plan.config, plan.recompute, plan.micro_batches)
        + f", FC {t.fc_algorithm.value}, attention {t.attention.value}"
        + (
            f", context exchange {t.context_parallel_comm.value}"
            if int(plan.config.get("cp", 1)) > 1
            else ""
        ),
        highlight=False,
    )
    console.print(
        "  pinned by the file: " + (", ".join(pinned) if pinned else "nothing (all searched)"),
        highlight=False,
    )
    # with an FP8 recipe the FC GEMMs run above the dtype's peak, which stays
    # the utilisation's denominator (docs/accuracy.md "MFU and HFU conventions")
    basis = (
        f" (of the {t.dtype.value} peak; FP8 GEMMs run above it)"
        if plan.training.fp8 is not Fp8Recipe.NONE and plan.hw.peak_flops_per_s
        else ""
    )
    console.print(
        f"Step time: [bold]{fmt_s(plan.step_s)}[/bold]{band}   tokens/s: "
        f"[bold]{plan.tokens_per_s:,.0f}[/bold]   MFU: [bold]{fmt_pct(plan.mfu)}[/bold]"
        f"   HFU: {fmt_pct(plan.hfu)}{basis}   pipeline bubble: "
        f"{fmt_pct(plan.bubble_fraction)}   "
        f"peak memory {plan.peak_bytes / GIB:.1f} of {plan.hw.hbm_bytes / GIB:.1f} GiB",
        highlight=False,
    )
    _why(plan, console)
    if plan.better is not None:
        b = plan.better
        console.print(
            "[bold yellow]Faster configuration:[/bold yellow] "
            + config_line(b.config, b.recompute, _m(plan, b.config))
            + f" takes {fmt_s(b.step_s)}, {b.speedup:.2f}x faster than the pinned plan, and "
            f"fits ({b.peak_bytes / GIB:.1f} GiB); pin it, or leave the degrees out to let "
            "meshtune choose",
            highlight=False,
        )

    console.print("\n[bold]Layout[/bold] (ranks from innermost)", highlight=False)
    context = plan.layout.axis(ParallelAxis.CONTEXT).size
    for a in plan.layout.axes:
        if a.axis is ParallelAxis.GRADIENT and context == 1:
            continue  # the data axis itself
        console.print(f"  {_AXIS[a.axis]} ({a.size}): {a.description}", highlight=False)
    if plan.experts is not None:
        console.print(experts_line(plan), highlight=False)

    where = Table(
        title=f"Where the step's time goes (pipeline stage {plan.busiest_stage})",
        box=box.SIMPLE_HEAD,
    )
    where.add_column("part")
    where.add_column("time", justify="right")
    where.add_column("share of step", justify="right")
    for key, label in PARTS.items():
        if key in ("expert_s", "ep_comm_s") and plan.experts is None:
            continue  # a dense model: no routed experts
        where.add_row(label, fmt_s(plan.parts[key]), fmt_pct(plan.parts[key] / plan.step_s))
    console.print(where)
    _memory(plan, console)
    render_fc(plan.fc, console, inp.search.num_runner_ups)
    _alternatives(plan, console)
    s = plan.outcome
    console.print(
        f"Search: {s.num_candidates} configurations, {s.num_pruned_by_memory_bound} pruned by the "
        f"memory bound, {s.num_refused_by_fc} refused by the FC planner, {s.num_priced} priced by "
        f"the step model ({s.num_pruned_by_step_bound} left to the step bound), {s.num_fit} fit, "
        f"{s.num_balanced} balanced by the pipeline ILP"
        + (f" ({s.num_balancer_unproved} not proved in time)" if s.num_balancer_unproved else "")
        + f"; {'proved best' if s.proved else 'not proved best'} under the model; "
        f"{s.elapsed_s:.2f} s",
        highlight=False,
    )


def _pct_or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _why(plan: Plan, console: Console) -> None:
    if plan.tied:
        console.print(
            f"{len(plan.tied)} other configuration(s) are exactly as fast; the tie rule chose "
            "this one (fewer tensor chips, stages, rows; lower ZeRO; less recomputation)",
            highlight=False,
        )
    if not plan.alternatives:
        console.print("No other configuration fits.", highlight=False)
        return
    r = plan.alternatives[0]
    console.print(
        f"Why it wins: the runner-up, {config_line(r.config, r.recompute, _m(plan, r.config))}, "
        f"is {fmt_s(r.slower_by_s)} slower ({r.slower_by_s / plan.step_s:+.1%}); it loses most "
        f"to {r.loses_to} (+{fmt_s(r.loses_s)})",
        highlight=False,
    )
    near = [a for a in plan.alternatives if a.within_band]
    if near and plan.band_rel is not None:
        console.print(
            f"[yellow]Near-tie:[/yellow] {len(near)} configuration(s) within the error band "
            f"(±{plan.band_rel:.0%}) of this one; the model cannot rank them, so benchmark "
            "them too: "
            + "; ".join(
                f"{short_config(a.config, a.recompute, _m(plan, a.config))} "
                f"({a.slower_by_s / plan.step_s:+.1%})"
                for a in near
            ),
            highlight=False,
        )


def _memory(plan: Plan, console: Console) -> None:
    st = plan.stages
    hw = plan.hw
    mem = Table(
        title=f"Memory per chip by pipeline stage (GiB of {hw.hbm_bytes / GIB:.1f}; each stage "
        f"also keeps {hw.workspace_bytes / GIB:.2f} workspace and {hw.reserve_bytes / GIB:.2f} "
        "reserve)",
        box=box.SIMPLE_HEAD,
    )
    for col in (
        "stage",
        "layers",
        "recompute",
        "weights",
        "grads",
        "optimizer",
        "acts",
        "buffers",
        "total",
        "headroom",
    ):
        mem.add_column(col, justify="left" if col == "recompute" else "right")
    modes = ("none", "selective", "full")
    for s in range(len(st.total_bytes)):
        layers = "+".join(str(int(x)) for x in st.layers[s])
        rec = ", ".join(
            f"{int(n)} {modes[i]}" for i, n in enumerate(st.recompute_counts[s]) if n > 0
        )
        head = (hw.hbm_bytes - st.total_bytes[s]) / GIB
        mem.add_row(
            str(s),
            layers,
            rec,
            *(
                f"{x / GIB:.2f}"
                for x in (
                    st.weights_bytes[s],
                    st.gradients_bytes[s],
                    st.optimizer_bytes[s],
                    st.activation_bytes[s],
                    st.buffer_bytes[s],
                    st.total_bytes[s],
                )
            ),
            f"{head:.2f}" if head >= 0 else f"[red]{head:.2f}[/red]",
        )
    console.print(mem)
    layout = plan.inp.training.pipeline_layout
    if layout is not None:
        console.print(f"Layer split: the file's pipeline_layout {layout}", highlight=False)
    if plan.even_split_step_s is not None:
        console.print(
            f"Balanced layer split: {fmt_s(plan.step_s)} against {fmt_s(plan.even_split_step_s)} "
            "for the even split (pipeline ILP, proved within its gap)",
            highlight=False,
        )


def _alternatives(plan: Plan, console: Console) -> None:
    rows: list[tuple[str, Alternative]] = [("", a) for a in plan.alternatives]
    rows += [("out of memory", a) for a in plan.faster_but_out_of_memory]
    if not rows:
        return
    table = Table(title="Alternatives", box=box.SIMPLE_HEAD)
    for col in ("configuration", "step", "slower by", "loses to", "peak GiB"):
        table.add_column(col, justify="left" if col in ("configuration", "loses to") else "right")
    for note, a in rows:
        loses = (
            f"memory ({a.peak_bytes / GIB:.1f} GiB)"
            if note
            else f"{a.loses_to} (+{fmt_s(a.loses_s)})"
        )
        table.add_row(
            short_config(a.config, a.recompute, _m(plan, a.config)),
            fmt_s(a.step_s),
            fmt_s(a.slower_by_s) if a.slower_by_s >= 0 else f"-{fmt_s(-a.slower_by_s)}",
            loses,
            f"{a.peak_bytes / GIB:.1f}",
        )
    console.print(table)
