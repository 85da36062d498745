"""How well a fit predicts measurements it did not see.

Two schemes per collective (docs/calibrate.md "Accuracy"):

- interpolation: each inner distinct size (neither the smallest nor the
  largest) is left out in turn, the model refitted on the rest and the
  left-out points predicted;
- extrapolation, twice: the model is fitted on sizes up to
  EXTRAPOLATION_CUT_BYTES (32 MiB) and predicts every larger one, once with
  the cut on the per-chip piece (the size the planner prices) and once on
  the message (the nccl-tests `size` column: the whole buffer of an
  all-gather or reduce-scatter, the all-reduce buffer, the send-recv
  message). When no size is larger, or too few are smaller, that cut moves
  to the median distinct size.

Errors are relative, |predicted - measured| / measured, over every point
including those a robust fit set aside as outliers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the fit-small / predict-large cut (on the piece, and on the message), bytes
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
    #: the same split on the message size (the nccl-tests `size` column)
    message_cut_bytes: float | None = None
    message_errors: tuple[float, ...] = ()

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
    def message_extrapolation(self) -> tuple[float | None, float | None, float | None]:
        """(median, 90th percentile, worst) of the message-size-cut errors."""
        return self._stats(self.message_errors)

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
    message: np.ndarray | None = None,
) -> CrossValidationResult:
    """Both schemes for the points (ring, shard, t) and a refitting function;
    `interpolation_errors`, when the caller already left each inner size out
    with the same model, are used as they are; `message` (bytes per point,
    the nccl-tests size) is what the fit-small/predict-large cut applies to
    (the piece `shard` when None)."""
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

    cut, extrap = _fit_small_predict_large(ring, shard, t, fitter, shard, "piece", notes)
    message_cut, message_errors = None, []
    if message is not None:
        message_cut, message_errors = _fit_small_predict_large(
            ring, shard, t, fitter, np.asarray(message, dtype=float), "message", notes
        )
    return CrossValidationResult(
        interpolation_errors=tuple(interp),
        extrapolation_cut_bytes=cut,
        extrapolation_errors=tuple(extrap),
        note="; ".join(notes) or None,
        message_cut_bytes=message_cut,
        message_errors=tuple(message_errors),
    )


def _fit_small_predict_large(
    ring: np.ndarray,
    shard: np.ndarray,
    t: np.ndarray,
    fitter: Fitter,
    size_of: np.ndarray,
    what: str,
    notes: list[str],
) -> tuple[float | None, list[float]]:
    """Fit on the points whose `size_of` is up to 32 MiB (or the median
    size when too few sizes sit on one side), predict the rest: the cut
    and the relative errors."""
    cut_sizes = np.unique(size_of)
    cut: float | None = EXTRAPOLATION_CUT_BYTES
    below = cut_sizes[cut_sizes <= EXTRAPOLATION_CUT_BYTES]
    if len(below) < MIN_SIZES_BELOW_CUT or len(below) == len(cut_sizes):
        median_cut = float(cut_sizes[len(cut_sizes) // 2 - 1]) if len(cut_sizes) >= 2 else None
        if median_cut is not None and len(cut_sizes[cut_sizes <= median_cut]) >= 3:
            cut = median_cut
            notes.append(
                f"fit-small/predict-large cut at the median {what} size ({median_cut:.4g} B) "
                "instead of 32 MiB"
            )
        else:
            cut = None
    errors: list[float] = []
    if cut is not None:
        small = size_of <= cut
        predict = fitter(small)
        if predict is None:
            cut = None
        else:
            errors = np.abs(predict(ring[~small], shard[~small]) / t[~small] - 1.0).tolist()
    if cut is None:
        notes.append(f"too few {what} sizes to fit small and predict large")
    return cut, errors
