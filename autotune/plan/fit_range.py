"""Warnings when a plan leans on a weak part of its calibration: a fit that
describes its measurements poorly. (Collective pieces and GEMMs outside the
sizes a fit measured are the plan's `extrapolations`, job/extrapolate.py.)"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.plan.results import LayerPlan
from autotune.specs.plan_input import PlanInput
from cost_models import MeshShape, collective_calls

#: RMS relative error (every row) above which a plan calls a fit poor; the
#: same bound `meshtune calibrate` refuses to write without --accept-poor-fit
POOR_FIT_WARN_REL = 0.25


def fit_range_warnings(
    inp: PlanInput, mesh: MeshShape, layers: Sequence[LayerPlan]
) -> tuple[str, ...]:
    """Poor calibration fits the chosen plan uses."""
    cal = inp.calibration
    element_bytes = inp.training.dtype.num_bytes
    used: set[tuple[str, str]] = set()
    for lp in layers:
        for g in lp.gemms:
            s = g.shape
            for call in collective_calls(
                s.dataflow, s.m, s.n, s.k, mesh, g.num_slices, element_bytes, s.transposed
            ):
                used.add((call.op.value, call.axis.value))
    warnings = []
    for op, axis in sorted(used):
        link = cal.collectives.get(op, {}).get(axis)
        fit = link.fit if link is not None else None
        if fit is not None and fit.rms_rel_error is not None:
            if fit.rms_rel_error > POOR_FIT_WARN_REL:
                warnings.append(
                    f"calibration {cal.name}: {op}.{axis} is a poor fit (RMS error "
                    f"{fit.rms_rel_error:.0%} on its measurements): its times are unreliable"
                )
    return tuple(warnings)
