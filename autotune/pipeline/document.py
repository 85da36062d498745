"""The `meshtune.pipeline/1` JSON document (base units, unit-suffixed keys)."""

from __future__ import annotations

import json
from typing import Any

from autotune import __version__
from autotune.pipeline.result import BalanceResult, PlanEvaluation

SCHEMA = "meshtune.pipeline/1"


def _plan(p: PlanEvaluation) -> dict[str, Any]:
    return {
        "label": p.label,
        "step_time_s": p.step_time_s,
        "fits": p.fits,
        "bubble": {
            "total": p.bubble.total,
            "ideal": p.bubble.ideal,
            "imbalance": p.bubble.imbalance,
            "recompute": p.bubble.recompute,
        },
        "stages": [
            {
                "stage": st.stage,
                "peak_memory_bytes": st.peak_memory_bytes,
                "static_memory_bytes": st.static_bytes,
                "headroom_bytes": st.headroom_bytes,
                "busy_s": st.busy_s,
                "chunks": [
                    {
                        "chunk": ch.chunk,
                        "local_chunk": ch.local_chunk,
                        "layers": ch.layers,
                        "recompute": ch.recompute,
                        "forward_s": ch.forward_s,
                        "backward_s": ch.backward_s,
                    }
                    for ch in st.chunks
                ],
            }
            for st in p.stages
        ],
        "seed_config": {
            "offset": p.seed.offset,
            "recompute": p.seed.recompute,
            "select_recompute": p.seed.select_recompute,
            "select_comm_recompute": p.seed.select_comm_recompute,
        },
    }


def _decomposition(dec: Any) -> dict[str, Any]:
    return {
        "parameter_bytes_per_layer": dec.parameter_bytes,
        "activation_bytes_per_layer": dec.activation_bytes,
        "constant_bytes": dec.constant_bytes,
        "head_bytes": dec.head_bytes,
        "tail_bytes": dec.tail_bytes,
        "residuals": [
            {"measurement": label, "residual_bytes": r}
            for label, r in zip(dec.labels, dec.residuals_bytes, strict=True)
        ],
        "rms_residual_bytes": dec.rms_residual_bytes,
        "max_relative_residual": dec.max_relative_residual,
        "warnings": list(dec.warnings),
    }


def decomposition_document(
    source_file: str, decomposition: Any, warnings: tuple[str, ...]
) -> dict[str, Any]:
    """The document of a file with no time data: its memory decomposition only."""
    return {
        "schema": SCHEMA,
        "tool_version": __version__,
        "inputs": {"file": source_file, "format": "seed"},
        "status": "decomposition_only",
        "warnings": list(warnings),
        "plan": None,
        "decomposition": _decomposition(decomposition),
    }


def _manual(p: PlanEvaluation, ours: PlanEvaluation | None) -> dict[str, Any]:
    out = {"name": p.label, "num_chunks": len(p.stages[0].chunks)}
    out["step_time_s"] = p.step_time_s
    out["fits"] = p.fits
    out["step_time_vs_plan"] = p.step_time_s / ours.step_time_s if ours is not None else None
    out["plan"] = _plan(p)
    return out


def to_document(result: BalanceResult, source_file: str) -> dict[str, Any]:
    """The result as a JSON-ready dict."""
    pr = result.problem
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "tool_version": __version__,
        "inputs": {
            "file": source_file,
            "format": result.source_format,
            "num_stages": pr.num_stages,
            "num_chunks": pr.num_chunks,
            "num_micro_batches": pr.num_micro_batches,
            "schedule": pr.schedule.value,
            "memory_cap_bytes": pr.memory_cap_bytes,
            "layer_kinds": [{"kind": g.kind, "count": g.count} for g in pr.groups],
            "recompute_options": {o.name: o.backward_time_coef for o in pr.options},
        },
        "status": "ok" if result.plan is not None else result.solver.status,
        "solver": {
            "name": result.solver.solver,
            "status": result.solver.status,
            "solve_time_s": result.solver.solve_time_s,
            "gap": result.solver.gap,
            "lower_bound_s": result.solver.lower_bound_s,
            "num_rounds": result.solver.num_rounds,
            "first_plan_s": result.solver.first_plan_s,
            "time_limited": result.solver.time_limited,
            "repeatable": result.solver.repeatable,
        },
        "predicted_step_time_s": result.predicted_step_s,
        "plan": _plan(result.plan) if result.plan is not None else None,
        "baseline": _plan(result.baseline) if result.baseline is not None else None,
        "infeasible": None,
        "decomposition": None,
        "warnings": list(result.warnings),
        "manual_plans": [_manual(m, result.plan) for m in result.manual_plans],
    }
    if result.infeasible is not None:
        doc["infeasible"] = {
            "tightest_stage": result.infeasible.stage,
            "shortfall_bytes": result.infeasible.shortfall_bytes,
            "reason": result.infeasible.reason,
        }
    if result.decomposition is not None:
        doc["decomposition"] = _decomposition(result.decomposition)
    return doc


def to_json(result: BalanceResult, source_file: str) -> str:
    """The JSON text (2-space indent, trailing newline)."""
    return json.dumps(to_document(result, source_file), indent=2, allow_nan=False) + "\n"
