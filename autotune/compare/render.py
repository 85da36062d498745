"""The terminal report of `meshtune compare` (rich): the largest chip
count in detail, the sweep, a utilization chart and what phase 1 buys.
Human units only here; every number comes from the result."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from autotune.compare.comparison import PAPER_MESHSLICE_OVER_WANG, PAPER_PHASE1_GAIN, CompareResult
from autotune.plan.report import fmt_pct, fmt_s
from autotune.render_text import user_text

CHART_WIDTH = 50
_MARKS = {
    "meshslice": "█",
    "collective": "▓",
    "wang": "▒",
    "summa": "░",
    "cannon": "▪",
    "1d-tp": "·",
    "fsdp": "-",
}


def _gain(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def render_compare(result: CompareResult, console: Console | None = None) -> None:
    """Print the comparison."""
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=130)
    batch = "batch = chips / 2 sequences" if result.scaling == "weak" else "fixed batch"
    console.print(
        f"[bold]meshtune compare[/bold]  {user_text(result.model_name)} "
        f"on {user_text(result.cluster_name)} "
        f"(calibration {user_text(result.calibration_name)}), {result.scaling} scaling ({batch}, "
        f"{result.sequence_length} tokens each), all chips tensor-parallel"
    )
    last = result.points[-1]
    detail = Table(
        title=f"{last.num_chips} chips, {last.batch_sequences} sequences: FC layers per step "
        f"(MeshSlice dataflows {last.stationaries})",
        box=box.SIMPLE_HEAD,
    )
    for col in (
        "algorithm",
        "mesh",
        "FC time",
        "FLOP util",
        "MeshSlice gain",
        "compute",
        "exposed comm",
        "launch",
        "sync",
        "transfer",
    ):
        detail.add_column(col, justify="left" if col in ("algorithm", "mesh") else "right")
    for a in last.algorithms:
        if not a.feasible:
            detail.add_row(
                a.algorithm.value, "-", "-", "-", "-", "-", "-", "-", "-", f"infeasible: {a.reason}"
            )
            continue
        b = a.breakdown
        detail.add_row(
            a.algorithm.value,
            str(a.mesh),
            fmt_s(a.step_fc_time_s),
            fmt_pct(a.flop_utilization),
            _gain(a.meshslice_gain),
            fmt_s(b.compute_s),
            fmt_s(b.exposed_comm_s),
            fmt_s(b.launch_s),
            fmt_s(b.sync_s),
            fmt_s(b.transfer_s),
        )
    console.print(detail)
    for a in last.algorithms:
        if a.settings:
            console.print(f"  {a.algorithm.value} settings on {a.mesh}: {a.settings}")

    sweep = Table(title="FLOP utilization (best mesh) by chip count", box=box.SIMPLE_HEAD)
    sweep.add_column("algorithm")
    for p in result.points:
        sweep.add_column(f"{p.num_chips}", justify="right")
    for i, a in enumerate(result.points[0].algorithms):
        cells = []
        for p in result.points:
            r = p.algorithms[i]
            cells.append(f"{fmt_pct(r.flop_utilization)} {r.mesh}" if r.feasible else "infeasible")
        sweep.add_row(a.algorithm.value, *cells)
    console.print(sweep)

    console.print("[bold]Utilization against chip count[/bold] (bar = FLOP utilization, 0-100%)")
    for i, a in enumerate(result.points[0].algorithms):
        name = a.algorithm.value
        mark = _MARKS.get(name, "#")
        for p in result.points:
            r = p.algorithms[i]
            util = r.flop_utilization
            bar = "" if util is None else mark * round(util * CHART_WIDTH)
            console.print(f"  {name:<10} {p.num_chips:>5} |{bar:<{CHART_WIDTH}}| {fmt_pct(util)}")
    console.print()

    console.print(
        "[bold]What phase 1 buys[/bold] (MeshSlice, chosen dataflows vs every layer "
        "W-stationary; paper Table 2)"
    )
    for p in result.points:
        ph = p.phase1
        if ph.gain is None:
            console.print(f"  {p.num_chips:>5} chips: always-w infeasible ({ph.reason})")
            continue
        console.print(
            f"  {p.num_chips:>5} chips: always-w {fmt_s(ph.always_w_step_fc_time_s)} on "
            f"{ph.always_w_mesh}, chosen {fmt_s(ph.chosen_step_fc_time_s)}: gain {_gain(ph.gain)}"
        )
        if ph.gain_over_always_y is not None:
            console.print(
                f"  {'':>5}        always-y {fmt_s(ph.always_y_step_fc_time_s)} on "
                f"{ph.always_y_mesh}: gain {_gain(ph.gain_over_always_y)}"
            )
    paper_wang = PAPER_MESHSLICE_OVER_WANG.get(result.model_name)
    paper_p1 = PAPER_PHASE1_GAIN.get(result.model_name)
    if last.num_chips == 256 and (paper_wang is not None or paper_p1 is not None):
        wang = next(a for a in last.algorithms if a.algorithm.value == "wang")
        console.print(
            f"\nPaper at 256 chips (seed 000 Fig 9, Table 2): MeshSlice over Wang "
            f"{_gain(paper_wang)} (ours {_gain(wang.meshslice_gain)}), phase 1 "
            f"{_gain(paper_p1)} (ours {_gain(last.phase1.gain)} over always-w, "
            f"{_gain(last.phase1.gain_over_always_y)} over always-y); "
            "see docs/compare.md, accuracy."
        )
