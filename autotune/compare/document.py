"""The JSON rendering of a compare result: base units, unit-suffixed keys,
a schema version; every number is copied from the result."""

from __future__ import annotations

import json
from typing import Any

from autotune.compare.comparison import AlgorithmResult, ComparePoint, CompareResult, Phase1Gain
from cost_models import MeshShape, TimeBreakdown

COMPARE_SCHEMA = "meshtune.compare/1"


def _mesh(mesh: MeshShape | None) -> dict[str, int] | None:
    return None if mesh is None else {"num_rows": mesh.num_rows, "num_cols": mesh.num_cols}


def _breakdown(b: TimeBreakdown | None) -> dict[str, float] | None:
    if b is None:
        return None
    return {
        "total_s": b.total_s,
        "compute_s": b.compute_s,
        "exposed_comm_s": b.exposed_comm_s,
        "launch_s": b.launch_s,
        "sync_s": b.sync_s,
        "transfer_s": b.transfer_s,
    }


def _algorithm(a: AlgorithmResult) -> dict[str, Any]:
    return {
        "algorithm": a.algorithm.value,
        "feasible": a.feasible,
        "reason": a.reason,
        "mesh": _mesh(a.mesh),
        "step_fc_time_s": a.step_fc_time_s,
        "flop_utilization": a.flop_utilization,
        "meshslice_gain": a.meshslice_gain,
        "settings": a.settings,
        "num_meshes_tried": a.num_meshes_tried,
        "breakdown": _breakdown(a.breakdown),
    }


def _phase1(p: Phase1Gain) -> dict[str, Any]:
    return {
        "always_w_mesh": _mesh(p.always_w_mesh),
        "always_w_step_fc_time_s": p.always_w_step_fc_time_s,
        "chosen_step_fc_time_s": p.chosen_step_fc_time_s,
        "gain": p.gain,
        "reason": p.reason,
        "always_y_mesh": _mesh(p.always_y_mesh),
        "always_y_step_fc_time_s": p.always_y_step_fc_time_s,
        "gain_over_always_y": p.gain_over_always_y,
    }


def _point(p: ComparePoint) -> dict[str, Any]:
    return {
        "num_chips": p.num_chips,
        "batch_sequences": p.batch_sequences,
        "tokens": p.tokens,
        "fc_flops_per_step": p.fc_flops_per_step,
        "meshslice_stationaries": p.stationaries,
        "algorithms": [_algorithm(a) for a in p.algorithms],
        "phase1": _phase1(p.phase1),
    }


def to_document(result: CompareResult) -> dict[str, Any]:
    """The compare result as a JSON-ready mapping."""
    return {
        "schema": COMPARE_SCHEMA,
        "model": result.model_name,
        "cluster": result.cluster_name,
        "calibration": result.calibration_name,
        "scaling": result.scaling,
        "sequence_length": result.sequence_length,
        "peak_flops_per_s": result.peak_flops_per_s,
        "points": [_point(p) for p in result.points],
    }


def to_json(result: CompareResult) -> str:
    """:func:`to_document` as indented JSON text ending in a newline."""
    return json.dumps(to_document(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
