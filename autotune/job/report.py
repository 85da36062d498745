"""The terminal report of the whole step (rich). Human units only here."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.job.result import JobResult
from autotune.plan.report import fmt_pct, fmt_s

GIB = float(2**30)


def render_job(job: JobResult, console: Console | None = None) -> None:
    """Print the step time, throughput, utilisation, where the step's time
    goes and the memory of every pipeline stage."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=120)
    console.print(
        f"\n[bold]Training step[/bold]  {job.chips} chips = TP {job.tensor_parallel} x "
        f"PP {job.pipeline_parallel}"
        + (f" (interleave {job.interleave})" if job.interleave > 1 else "")
        + f" x DP {job.data_parallel}; {job.micro_batches} micro-batches of "
        f"{job.micro_batch_sequences} sequences; recompute {job.recompute}; ZeRO-{job.zero_stage}; "
        f"FC {job.fc_algorithm}; attention {job.attention}"
    )
    for warning in job.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    console.print(
        f"Step time: [bold]{fmt_s(job.step_s)}[/bold]   tokens/s: "
        f"[bold]{job.tokens_per_s:,.0f}[/bold]   MFU: [bold]{fmt_pct(job.mfu)}[/bold]"
        f"   HFU: {fmt_pct(job.hfu)}   pipeline bubble: {fmt_pct(job.bubble_fraction)}"
    )
    where = Table(
        title=f"Where the step's time goes (pipeline stage {job.busiest_stage})",
        box=box.SIMPLE_HEAD,
    )
    where.add_column("part")
    where.add_column("time", justify="right")
    where.add_column("share of step", justify="right")
    for part in job.breakdown:
        where.add_row(part.name, fmt_s(part.seconds), fmt_pct(part.seconds / job.step_s))
    console.print(where)

    mem = Table(title="Memory per chip by pipeline stage (GiB)", box=box.SIMPLE_HEAD)
    for col in (
        "stage",
        "layers",
        "weights",
        "grads",
        "optimizer",
        "acts",
        "buffers",
        "workspace",
        "reserve",
        "total",
        "of HBM",
        "headroom",
    ):
        mem.add_column(col, justify="right")
    for m in job.memory:
        head = m.headroom / GIB
        mem.add_row(
            str(m.stage),
            str(m.layers),
            *(
                f"{x / GIB:.2f}"
                for x in (
                    m.weights,
                    m.gradients,
                    m.optimizer,
                    m.activations,
                    m.buffers,
                    m.workspace,
                    m.reserve,
                    m.total,
                    m.capacity,
                )
            ),
            f"{head:.2f}" if head >= 0 else f"[red]{head:.2f}[/red]",
        )
    console.print(mem)
