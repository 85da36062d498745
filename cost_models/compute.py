"""The local GEMM compute model (seed 000 section 3.2.2; model.md section 5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def gemm_flops(m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
    """FLOPs of one `m x k` by `k x n` GEMM: `2 * m * n * k` (a multiply and
    an add per term). Dimensions are element counts."""
    return (
        2.0 * np.asarray(m, dtype=float) * np.asarray(n, dtype=float) * np.asarray(k, dtype=float)
    )


def saturating_efficiency(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    max_efficiency: float,
    m_half: float,
    n_half: float,
    k_half: float,
) -> np.ndarray:
    """Fraction of peak FLOP/s a local GEMM of this shape reaches.

    Formula (meshtune's efficiency curve; derivation: each dimension `d` of a
    tiled GEMM wastes work in a fixed-size tail and per-tile overhead, which
    a saturating factor `d / (d + d_half)` captures; the product of the three
    factors reaches `max_efficiency` for large GEMMs)::

        eff = max_efficiency * m/(m + m_half) * n/(n + n_half) * k/(k + k_half)

    `m_half` etc. are the sizes (elements) at which that dimension alone
    halves the efficiency; all-zero halves give a constant efficiency. Thin
    GEMMs, such as those a large slice count produces, land far below peak,
    which keeps the planner away from absurd slice counts.
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return max_efficiency * (m / (m + m_half)) * (n / (n + n_half)) * (k / (k + k_half))


def gemm_hbm_bytes(m: ArrayLike, n: ArrayLike, k: ArrayLike, element_bytes: float) -> np.ndarray:
    """Fewest HBM bytes a local GEMM moves: read `A` (m x k) and `B`
    (k x n) once and write `C` (m x n) once::

        bytes = (m*k + k*n + m*n) * element_bytes

    (the roofline's memory side; hardware.md section 3). Dimensions in
    elements, `element_bytes` per element, bytes out."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return (m * k + k * n + m * n) * element_bytes


@dataclass(frozen=True)
class ComputeModel:
    """Local GEMM time on one chip: a roofline bounded by the chip's peak
    FLOP/s and its HBM bandwidth, with a shape-dependent efficiency below
    peak (constant when every `*_half` is zero).

    `peak_flops_per_s` is the chip's peak; `max_efficiency` (<= 1) the
    large-GEMM fraction of it a calibration measured; `hbm_bytes_per_s`
    the HBM bandwidth (0: no memory bound, for clusters that give none);
    `element_bytes` the operand element size the memory bound counts.
    """

    peak_flops_per_s: float
    max_efficiency: float = 1.0
    m_half: float = 0.0
    n_half: float = 0.0
    k_half: float = 0.0
    hbm_bytes_per_s: float = 0.0
    element_bytes: float = 2.0

    def __post_init__(self) -> None:
        assert self.peak_flops_per_s > 0 and 0 < self.max_efficiency <= 1.0
        assert min(self.m_half, self.n_half, self.k_half) >= 0
        assert self.hbm_bytes_per_s >= 0 and self.element_bytes > 0

    def efficiency(self, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
        """:func:`saturating_efficiency` with this model's parameters."""
        return saturating_efficiency(
            m, n, k, self.max_efficiency, self.m_half, self.n_half, self.k_half
        )

    def gemm_s(self, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
        """Seconds for one local GEMM: the roofline.

        Formula (seed 000 section 3.2.2; model.md section 5; hardware.md
        section 3)::

            t = max( 2*m*n*k / (peak_flops_per_s * eff(m, n, k)),
                     (m*k + k*n + m*n) * element_bytes / hbm_bytes_per_s )

        with `eff <= max_efficiency <= 1`, so no GEMM is faster than its
        FLOPs at peak or its operands and result over HBM. Dimensions in
        elements; a GEMM with a zero dimension takes no time.
        """
        flops = gemm_flops(m, n, k)
        eff = self.efficiency(np.maximum(m, 1), np.maximum(n, 1), np.maximum(k, 1))
        t = flops / (self.peak_flops_per_s * eff)
        if self.hbm_bytes_per_s > 0:
            memory = gemm_hbm_bytes(m, n, k, self.element_bytes) / self.hbm_bytes_per_s
            t = np.where(flops > 0, np.maximum(t, memory), 0.0)
        return t

    @property
    def effective_flops_per_s(self) -> float:
        """The large-GEMM rate `peak * max_efficiency`."""
        return self.peak_flops_per_s * self.max_efficiency
