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


def roofline_gemm_s(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    ceiling_flops_per_s: float,
    hbm_bytes_per_s: float | None,
    element_bytes: float,
) -> np.ndarray:
    """The fastest a local GEMM can run on a chip: its roofline.

    Formula (hardware.md section 3; Williams et al., "Roofline", CACM 2009)::

        t >= max(2 m n k / ceiling_flops_per_s,
                 (m k + k n + m n) * element_bytes / hbm_bytes_per_s)

    The first term is the arithmetic at the chip's peak, the second reads
    both operands and writes the result once over HBM
    (:func:`gemm_hbm_bytes`). Seconds; dimensions in elements; the memory
    term is left out when `hbm_bytes_per_s` is None or 0.
    """
    bound = gemm_flops(m, n, k) / ceiling_flops_per_s
    if hbm_bytes_per_s:
        bound = np.maximum(bound, gemm_hbm_bytes(m, n, k, element_bytes) / hbm_bytes_per_s)
    return bound


@dataclass(frozen=True)
class ComputeModel:
    """Local GEMM time on one chip: a rate shaped by a shape-dependent
    efficiency (constant when every `*_half` is zero), bounded by the chip's
    roofline and held flat beyond the measured shapes.

    `peak_flops_per_s` is the rate the curve scales: the chip's peak with
    `max_efficiency` (<= 1) the large-GEMM fraction a calibration measured,
    or a fitted curve's asymptotic rate with `max_efficiency` 1; then
    `ceiling_flops_per_s` (the chip's peak) keeps every GEMM at or below
    peak. `hbm_bytes_per_s` is the HBM bandwidth (0: no memory bound, for
    clusters that give none); `element_bytes` the operand element size the
    memory bound counts; `max_dims` the largest (m, n, k) measured.
    """

    peak_flops_per_s: float
    max_efficiency: float = 1.0
    m_half: float = 0.0
    n_half: float = 0.0
    k_half: float = 0.0
    hbm_bytes_per_s: float = 0.0
    element_bytes: float = 2.0
    #: the chip's peak FLOP/s: no GEMM is predicted faster (None: the curve's own rate bounds)
    ceiling_flops_per_s: float | None = None
    #: largest (m, n, k) measured: beyond it the efficiency stays at its value there
    max_dims: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        assert self.peak_flops_per_s > 0 and 0 < self.max_efficiency <= 1.0
        assert min(self.m_half, self.n_half, self.k_half) >= 0
        assert self.hbm_bytes_per_s >= 0 and self.element_bytes > 0

    def efficiency(self, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
        """:func:`saturating_efficiency` with this model's parameters, each
        dimension capped at `max_dims` when set (a shape larger than any
        measured is assumed no more efficient than the largest measured)."""
        if self.max_dims is not None:
            m = np.minimum(m, self.max_dims[0])
            n = np.minimum(n, self.max_dims[1])
            k = np.minimum(k, self.max_dims[2])
        return saturating_efficiency(
            m, n, k, self.max_efficiency, self.m_half, self.n_half, self.k_half
        )

    def gemm_s(self, m: ArrayLike, n: ArrayLike, k: ArrayLike) -> np.ndarray:
        """Seconds for one local GEMM: the roofline.

        Formula (seed 000 section 3.2.2; model.md section 5; hardware.md
        section 3)::

            t = max( 2*m*n*k / (peak_flops_per_s * eff(m, n, k)),
                     2*m*n*k / ceiling_flops_per_s,               (when set)
                     (m*k + k*n + m*n) * element_bytes / hbm_bytes_per_s )

        with `eff <= max_efficiency <= 1`, so no GEMM is faster than its
        FLOPs at peak or its operands and result over HBM. Dimensions in
        elements; a GEMM with a zero dimension takes no time.
        """
        flops = gemm_flops(m, n, k)
        eff = self.efficiency(np.maximum(m, 1), np.maximum(n, 1), np.maximum(k, 1))
        t = flops / (self.peak_flops_per_s * eff)
        if self.ceiling_flops_per_s is not None:
            t = np.maximum(t, flops / self.ceiling_flops_per_s)
        if self.hbm_bytes_per_s > 0:
            memory = gemm_hbm_bytes(m, n, k, self.element_bytes) / self.hbm_bytes_per_s
            t = np.where(flops > 0, np.maximum(t, memory), 0.0)
        return t

    @property
    def effective_flops_per_s(self) -> float:
        """The large-GEMM rate `peak * max_efficiency`."""
        return self.peak_flops_per_s * self.max_efficiency

    @property
    def fastest_flops_per_s(self) -> float:
        """The rate no GEMM of :meth:`gemm_s` exceeds: `peak *
        max_efficiency` (every efficiency is at most `max_efficiency`), and
        at most the ceiling when one is set."""
        rate = self.effective_flops_per_s
        if self.ceiling_flops_per_s is not None:
            rate = min(rate, self.ceiling_flops_per_s)
        return rate
