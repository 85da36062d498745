"""Terminal report of a balanced pipeline (rich). Human units only here;
every number comes from the result, converted for display."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.pipeline.result import BalanceResult, PlanEvaluation
from autotune.pipeline.timeline import timeline_rows
from autotune.render_text import user_text

GIB = 2**30
TIMELINE_WIDTH = 100


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f}"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.2f}%"


def _stage_table(plan: PlanEvaluation, kinds: list[str], cap_bytes: float) -> Table:
    title = f"{user_text(plan.label)}: layers and memory per stage"
    table = Table(box=box.SIMPLE_HEAVY, title=title)
    table.add_column("stage", justify="right")
    table.add_column("chunk", justify="right")
    for k in kinds:
        table.add_column(user_text(k), justify="right")
    table.add_column("recompute", justify="left")
    table.add_column("fwd+bwd", justify="right")
    table.add_column("peak GiB", justify="right")
    table.add_column("headroom GiB", justify="right")
    for st in plan.stages:
        for i, ch in enumerate(st.chunks):
            rec = "; ".join(
                f"{kind}: " + ", ".join(f"{n} {opt}" for opt, n in opts.items() if opt != "none")
                for kind, opts in ch.recompute.items()
                if any(opt != "none" for opt in opts)
            )
            table.add_row(
                str(st.stage) if i == 0 else "",
                str(ch.local_chunk),
                *[str(ch.layers.get(k, 0)) for k in kinds],
                user_text(rec, 200) or "-",
                _ms(ch.forward_s + ch.backward_s),
                _gib(st.peak_memory_bytes) if i == 0 else "",
                _gib(st.headroom_bytes) if i == 0 else "",
                style="red" if st.headroom_bytes < 0 and i == 0 else None,
            )
    return table


def render_result(result: BalanceResult, timeline: bool = True, console: Console | None = None):
    """Print the plan, the baseline, the seed config lists and the timeline."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=130)
    pr = result.problem
    kinds = [g.kind for g in pr.groups]
    console.print(
        f"[bold]Pipeline[/bold]: pp={pr.num_stages}, v={pr.num_chunks}, "
        f"m={pr.num_micro_batches}, {pr.schedule.value}, "
        f"{' + '.join(f'{g.count} {user_text(g.kind)}' for g in pr.groups)} layers, "
        f"cap {_gib(pr.memory_cap_bytes)} GiB"
    )
    if result.decomposition is not None:
        render_decomposition(result.decomposition, console)
    s = result.solver
    console.print(f"Solver: {s.solver}, {s.status}, {s.solve_time_s:.2f} s, gap {_pct(s.gap)}")
    if result.plan is None:
        reason = result.infeasible.reason if result.infeasible else "no plan"
        console.print(f"[bold red]No feasible plan[/bold red]: {user_text(reason, 400)}")
        return
    plan = result.plan
    console.print(_stage_table(plan, kinds, pr.memory_cap_bytes))
    b = plan.bubble
    console.print(
        f"[bold]Step time[/bold] {_ms(plan.step_time_s)} (simulated; ILP predicted "
        f"{_ms(result.predicted_step_s)}); bubble {b.total:.4f} = ideal {b.ideal:.4f} "
        f"+ imbalance {b.imbalance:.4f} + recompute {b.recompute:.4f}"
    )
    if result.baseline is not None:
        base = result.baseline
        console.print(
            f"Baseline ({base.label}): {_ms(base.step_time_s)}, bubble {base.bubble.total:.4f}"
        )
    else:
        console.print("Baseline: no even split with one recomputation option fits the cap")
    if result.manual_plans:
        table = Table(box=box.SIMPLE_HEAVY, title="Manual plans (simulated)")
        for col in ("plan", "chunks", "step time", "vs balanced", "fits"):
            table.add_column(col, justify="right")
        for m in result.manual_plans:
            table.add_row(
                user_text(m.label),
                str(len(m.stages[0].chunks)),
                _ms(m.step_time_s),
                f"{m.step_time_s / plan.step_time_s:.4f}x",
                "yes" if m.fits else "[red]no[/red]",
            )
        console.print(table)
    console.print("[bold]Seed framework config[/bold]:")
    console.print(f"  offset: {plan.seed.offset}")
    console.print(f"  recompute: {plan.seed.recompute}")
    console.print(f"  select_recompute: {plan.seed.select_recompute}")
    console.print(f"  select_comm_recompute: {plan.seed.select_comm_recompute}")
    if timeline:
        console.print(
            "Timeline (a,b,c = forward of local chunk 0,1,2; A,B,C = backward; . = idle):"
        )
        for st, row in enumerate(timeline_rows(plan.simulation, pr.num_stages, TIMELINE_WIDTH)):
            console.print(f"{st:>3} {row}", markup=False, highlight=False)


def render_decomposition(dec, console: Console | None = None) -> None:
    """Print the solved per-layer memories, the fit and its warnings."""
    console = console or Console()
    acts = ", ".join(f"{k} {v / 2**20:.0f}" for k, v in dec.activation_bytes.items())
    console.print(
        f"Memory decomposition (MiB): parameters {dec.parameter_bytes / 2**20:.0f}/layer, "
        f"activation/layer/micro-batch {acts}, constant {dec.constant_bytes / 2**20:.0f}, "
        f"head {dec.head_bytes / 2**20:.0f}, tail {dec.tail_bytes / 2**20:.0f}; "
        f"rms residual {dec.rms_residual_bytes / 2**20:.1f} MiB over "
        f"{dec.num_measurements} stages (max {_pct(dec.max_relative_residual)})",
        highlight=False,
    )
    for w in dec.warnings:
        console.print(f"[yellow]warning[/yellow]: {user_text(w, 400)}", highlight=False)
