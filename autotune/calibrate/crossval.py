"""How well a fit predicts measurements it did not see.

Two schemes per collective (docs/calibrate.md "Accuracy"):

- interpolation: each inner distinct size (neither the smallest nor the
  largest) is left out in turn, the model refitted on the rest and the
  left-out points predicted;
- extrapolation: the model is fitted on pieces up to EXTRAPOLATION_CUT_BYTES
  (32 MiB) and predicts every larger piece; when no piece is larger, or
  too few are smaller, the cut moves to the median distinct size.

Errors are relative, |predicted - measured| / measured, over every point
including those a robust fit set aside as outliers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the fit-small / predict-large cut on the per-chip piece, bytes
EXTRAPOLATION_CUT_BYTES = 32 * 2**20
#: distinct sizes a fit needs below the cut
MIN_SIZES_BELOW_CUT = 6

#: fit(mask) -> predict(ring_size, shard_bytes) -> seconds; None when the subset is too small
Fitter = Callable[[np.ndarray], Callable[[np.ndarray, np.ndarray], np.ndarray] | None]


@dataclass(frozen=True)
class CrossValidationResult:
    """Held-out relative errors of one fit."""

    interpolation_errors: tuple[float, ...]
    extrapolation_cut_bytes: float | None
    extrapolation_errors: tuple[float, ...]
    note: str | None

    @staticmethod
    def _stats(errors: tuple[float, ...]) -> tuple[float | None, float | None, float | None]:
        if not errors:
            return None, None, None
        e = np.asarray(errors)
        return float(np.median(e)), float(np.percentile(e, 90)), float(e.max())

    @property
    def interpolation(self) -> tuple[float | None, float | None, float | None]:
        """(median, 90th percentile, worst) of the interpolation errors."""
        return self._stats(self.interpolation_errors)

    @property
    def extrapolation(self) -> tuple[float | None, float | None, float | None]:
        """(median, 90th percentile, worst) of the extrapolation errors."""
        return self._stats(self.extrapolation_errors)


def cross_validate(
    ring: np.ndarray,
    shard: np.ndarray,
    t: np.ndarray,
    fitter: Fitter,
    interpolation_errors: np.ndarray | None = None,
) -> CrossValidationResult:
    """Both schemes for the points (ring, shard, t) and a refitting function;
    `interpolation_errors`, when the caller already left each inner size out
    with the same model, are used as they are."""
    sizes = np.unique(shard)
    notes: list[str] = []
    interp: list[float] = []
    if interpolation_errors is not None and len(interpolation_errors):
        interp = [float(e) for e in interpolation_errors]
    for size in sizes[1:-1] if not interp else ():
        held = shard == size
        predict = fitter(~held)
        if predict is None:
            interp = []
            notes.append("too few sizes to leave one out")
            break
        interp.extend(np.abs(predict(ring[held], shard[held]) / t[held] - 1.0).tolist())
    if len(sizes) < 3:
        notes.append("fewer than three sizes: no inner size to leave out")

    cut: float | None = EXTRAPOLATION_CUT_BYTES
    below = sizes[sizes <= EXTRAPOLATION_CUT_BYTES]
    if len(below) < MIN_SIZES_BELOW_CUT or len(below) == len(sizes):
        median_cut = float(sizes[len(sizes) // 2 - 1]) if len(sizes) >= 2 else None
        if median_cut is not None and len(sizes[sizes <= median_cut]) >= 3:
            cut = median_cut
            notes.append(
                f"fit-small/predict-large cut at the median size ({median_cut:.4g} B) "
                "instead of 32 MiB"
            )
        else:
            cut = None
    extrap: list[float] = []
    if cut is not None:
        small = shard <= cut
        predict = fitter(small)
        if predict is None:
            cut = None
        else:
            extrap = np.abs(predict(ring[~small], shard[~small]) / t[~small] - 1.0).tolist()
    if cut is None:
        notes.append("too few sizes to fit small and predict large")
    return CrossValidationResult(
        interpolation_errors=tuple(interp),
        extrapolation_cut_bytes=cut,
        extrapolation_errors=tuple(extrap),
        note="; ".join(notes) or None,
    )
