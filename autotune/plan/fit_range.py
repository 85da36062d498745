"""Warnings when a plan leans on a weak part of its calibration: a fit that
describes its measurements poorly, or collective pieces outside the sizes
the fit was measured on (extrapolated)."""

from __future__ import annotations

from collections.abc import Sequence

from autotune.plan.results import LayerPlan
from autotune.specs.plan_input import PlanInput
from cost_models import MeshShape, collective_calls

#: RMS relative error (every row) above which a plan calls a fit poor; the
#: same bound `meshtune calibrate` refuses to write without --accept-poor-fit
POOR_FIT_WARN_REL = 0.25


def _size(num_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.3g} {unit}"
    return f"{num_bytes:.3g} B"


def fit_range_warnings(
    inp: PlanInput, mesh: MeshShape, layers: Sequence[LayerPlan]
) -> tuple[str, ...]:
    """Poor and extrapolated calibration fits the chosen plan uses."""
    cal = inp.calibration
    element_bytes = inp.training.dtype.num_bytes
    used: dict[tuple[str, str], list[float]] = {}
    for lp in layers:
        for g in lp.gemms:
            s = g.shape
            for call in collective_calls(
                s.dataflow, s.m, s.n, s.k, mesh, g.num_slices, element_bytes, s.transposed
            ):
                key = (call.op.value, call.axis.value)
                lo_hi = used.setdefault(key, [call.shard_bytes, call.shard_bytes])
                lo_hi[0] = min(lo_hi[0], call.shard_bytes)
                lo_hi[1] = max(lo_hi[1], call.shard_bytes)
    warnings = []
    for (op, axis), (lo, hi) in sorted(used.items()):
        link = cal.collectives.get(op, {}).get(axis)
        fit = link.fit if link is not None else None
        if fit is None:
            continue
        if fit.rms_rel_error is not None and fit.rms_rel_error > POOR_FIT_WARN_REL:
            warnings.append(
                f"calibration {cal.name}: {op}.{axis} is a poor fit (RMS error "
                f"{fit.rms_rel_error:.0%} on its measurements): its times are unreliable"
            )
        if fit.shard_bytes_min is None or fit.shard_bytes_max is None:
            continue
        if lo < fit.shard_bytes_min or hi > fit.shard_bytes_max:
            warnings.append(
                f"calibration {cal.name}: {op}.{axis} was measured on pieces of "
                f"{_size(fit.shard_bytes_min)} to {_size(fit.shard_bytes_max)}; this plan "
                f"sends {_size(lo)} to {_size(hi)} (extrapolated)"
            )
    return tuple(warnings)
