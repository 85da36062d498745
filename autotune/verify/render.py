"""Rendering `meshtune verify` results: a rich table for people, JSON
(`meshtune.verify/1`, base units) for tools. No arithmetic here."""

from __future__ import annotations

import json

from autotune.render_text import user_text
from autotune.verify.runner import GemmCheck, VerifyResult

VERIFY_SCHEMA = "meshtune.verify/1"


def _check_doc(c: GemmCheck) -> dict:
    return {
        "layer": c.layer,
        "pass": c.gemm_pass,
        "expression": c.expression,
        "dataflow": c.dataflow,
        "transposed": c.transposed,
        "num_slices": c.num_slices,
        "plan_mnk": list(c.plan_mnk),
        "run_mnk": list(c.run_mnk),
        "max_relative_error": c.max_relative_error,
        "tolerance": c.tolerance,
        "bytes_sent_per_chip": c.bytes_per_chip,
        "model_bytes_sent_per_chip": c.model_bytes_per_chip,
        "bytes_match": c.bytes_match,
        "ok": c.ok,
        "reason": c.reason,
    }


def to_json(result: VerifyResult) -> str:
    """The result as a `meshtune.verify/1` JSON document (2-space indent)."""
    doc = {
        "schema": VERIFY_SCHEMA,
        "plan_file": result.plan_file,
        "backend": result.backend,
        "mesh": {"num_rows": result.mesh.num_rows, "num_cols": result.mesh.num_cols},
        "block_size": result.block_size,
        "dtype": result.dtype,
        "ok": result.ok,
        "worst_relative_error": result.worst_relative_error,
        "gemms": [_check_doc(c) for c in result.checks],
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


_PASS_LABELS = {"forward": "fwd", "backward_data": "bwd data", "backward_weight": "bwd weight"}


def _bytes_cell(c: GemmCheck) -> str:
    if c.bytes_per_chip is None:
        return "not counted"
    return f"{c.bytes_per_chip['row']:.0f},{c.bytes_per_chip['col']:.0f}"


def render_verify(result: VerifyResult) -> None:
    """Print the per-GEMM table and a verdict line to stdout."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    table = Table(
        title=(
            f"meshtune verify: {user_text(result.plan_file)} on a {result.mesh} mesh, "
            f"block {result.block_size}, backend {result.backend} ({result.dtype})"
        ),
        title_justify="left",
    )
    for col, just in (
        ("layer", "left"),
        ("pass", "left"),
        ("GEMM", "left"),
        ("S", "right"),
        ("ran m,n,k", "right"),
        ("rel. error", "right"),
        ("bytes/chip row,col", "right"),
        ("check", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for c in result.checks:
        table.add_row(
            c.layer,
            _PASS_LABELS.get(c.gemm_pass, c.gemm_pass),
            c.expression or f"{c.dataflow}{' (transposed)' if c.transposed else ''}",
            str(c.num_slices),
            ",".join(str(d) for d in c.run_mnk),
            f"{c.max_relative_error:.1e}",
            _bytes_cell(c),
            "[green]ok[/]" if c.ok else "[red]FAIL[/]",
        )
    console.print(table)
    for c in result.checks:
        if not c.ok:
            console.print(f"[red]FAIL[/] {c.layer} {c.gemm_pass}: {c.reason}")
    console.print("ok = matches the plain matmul and, where counted, the model's bytes per chip")
    failed = sum(not c.ok for c in result.checks)
    if failed:
        console.print(f"[red]{failed} of {len(result.checks)} GEMMs do not match[/]")
    else:
        console.print(
            f"[green]all {len(result.checks)} GEMMs match[/] (worst relative error "
            f"{result.worst_relative_error:.2e}, tolerance {result.checks[0].tolerance:g})"
        )
