"""The compute slowdown while a collective runs beside it, from `overlap`
rows of the benchmark CSV (written by `meshtune bench`).

Estimator (derivation): an overlap row times a GEMM and an independent
collective issued together, `t_pair`; a `gemm` row of the same shape and
dtype times the GEMM alone, `t_gemm`. With the GEMM the longer of the two
(bench sizes it so), perfect overlap without interference gives
`t_pair = t_gemm`, and a GEMM slowed by a factor s gives `t_pair = s t_gemm`,
so `s = t_pair / t_gemm` (at least 1). A device that cannot overlap at all
(a CPU host) gives `s = 1 + t_comm / t_gemm`, which is what it costs there.
The calibration's `overlap_slowdown` is the median over the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate.samples import GemmSample, OverlapSample

#: a slowdown above this suggests the pair ran one after the other
SERIAL_HINT = 1.8


@dataclass(frozen=True)
class OverlapFit:
    """The measured slowdown and the rows behind it."""

    slowdown: float
    per_row: tuple[float, ...]
    skipped: int  # overlap rows with no GEMM-alone row of the same shape
    note: str | None


def fit_overlap(
    overlaps: Sequence[OverlapSample], gemms: Sequence[GemmSample]
) -> OverlapFit | None:
    """Median slowdown over the overlap rows that have a matching GEMM row."""
    alone: dict[tuple[int, int, int, str], list[float]] = {}
    for g in gemms:
        alone.setdefault((g.m, g.n, g.k, g.dtype), []).append(g.seconds)
    ratios, skipped = [], 0
    for o in overlaps:
        key = (o.gemm.m, o.gemm.n, o.gemm.k, o.gemm.dtype)
        if key not in alone:
            skipped += 1
            continue
        ratios.append(max(1.0, o.seconds / float(np.median(alone[key]))))
    if not ratios:
        return None
    slowdown = float(np.median(ratios))
    note = None
    if slowdown > SERIAL_HINT:
        note = (
            f"the GEMM and the collective took {slowdown:.2f}x the GEMM alone: they ran "
            "mostly one after the other on this device, not overlapped"
        )
    return OverlapFit(slowdown=slowdown, per_row=tuple(ratios), skipped=skipped, note=note)
