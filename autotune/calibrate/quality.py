"""Whether a calibration is good enough to write without asking.

A fit is poor when the rows it kept (the robust fit's inliers) still miss
its own model by more than POOR_FIT_REFUSE_REL RMS: then the model does not
describe the measurements and a plan built on it would be fiction.
`meshtune calibrate` refuses to write such a calibration unless given
`--accept-poor-fit`. (The 15% RMS over every row, outliers included, that
the report flags is a warning only: busy-machine outliers raise it while
the fit itself stays sound.)
"""

from __future__ import annotations

import math

from autotune.calibrate.result import CalibrationResult

POOR_FIT_REFUSE_REL = 0.25


def _inlier_rms(measured: tuple[float, ...], fitted: tuple[float, ...], inlier) -> float | None:
    errors = [
        (f - m) / m for m, f, keep in zip(measured, fitted, inlier, strict=True) if keep and m > 0
    ]
    if not errors:
        return None
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def poor_fits(result: CalibrationResult) -> list[str]:
    """One line per written fit whose kept rows miss it by more than
    POOR_FIT_REFUSE_REL RMS."""
    written = {(op, axis) for op, axes in result.spec.collectives.items() for axis in axes}
    poor = []
    for fit in result.comm_fits:
        if (fit.op.value, fit.axis.value) not in written:
            continue
        rms = _inlier_rms(fit.measured_s, fit.fitted_s, fit.inlier)
        if rms is not None and rms > POOR_FIT_REFUSE_REL:
            poor.append(f"{fit.op.value}.{fit.axis.value} (RMS error {rms:.0%} on its kept rows)")
    c = result.compute_fit
    if c is not None:
        rms = _inlier_rms(c.measured_s, c.fitted_s, c.inlier)
        if rms is not None and rms > POOR_FIT_REFUSE_REL:
            poor.append(f"compute (RMS error {rms:.0%} on its kept rows)")
    return poor
