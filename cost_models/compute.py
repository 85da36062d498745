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


#: the output tiles a GEMM library chooses among (elements, m x n): the
#: CUTLASS / cuBLAS and hipBLASLt thread-block tiles of Hopper, Blackwell and
#: CDNA 3 bf16 kernels span 64 to 256 on each side (CUTLASS
#: include/cutlass/gemm/collective/builders/sm90_gmma_builder.inl; the tile
#: shapes in hipBLASLt's logic files)
DEFAULT_TILES: tuple[tuple[int, int], ...] = (
    (64, 64),
    (64, 128),
    (128, 64),
    (128, 128),
    (128, 256),
    (256, 128),
    (256, 256),
)


def tiled_gemm_work(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    num_cores: int,
    tiles: tuple[tuple[int, int], ...] = DEFAULT_TILES,
    k_overhead: float = 0.0,
    reuse_penalty: float = 0.0,
    batch: ArrayLike = 1,
) -> np.ndarray:
    """FLOPs a GEMM costs on a chip of `num_cores` cores (SMs, CUs), counting
    the work its tiling wastes: the smallest over the library's tile shapes.
    `batch` independent GEMMs of one shape in one kernel (a strided-batched
    GEMM) share the waves: their tiles are counted together.

    Formula (derivation; the tile and wave quantisation of NVIDIA's "Matrix
    Multiplication Background User's Guide", sections "Tile Quantization"
    and "Wave Quantization")::

        tiles(Tm, Tn) = batch * ceil(m / Tm) * ceil(n / Tn)
        waves         = ceil(tiles / num_cores)
        work(Tm, Tn)  = waves * num_cores * 2 * Tm * Tn * (k + k_overhead)
                        * (1 + reuse_penalty * (1/Tm + 1/Tn))
        work          = min over (Tm, Tn) in tiles of work(Tm, Tn)

    Each core computes whole `Tm x Tn` output tiles; a partial tile costs a
    whole one (tile quantisation) and the last wave of tiles keeps every
    core busy for as long as a full one (wave quantisation). `k_overhead`
    (elements of k) is each tile's fixed prologue and epilogue, as if k were
    that much longer; `reuse_penalty` (elements) is the cost of a small
    tile's lower operand reuse (a tile reads `Tm + Tn` operand rows per
    `Tm * Tn` outputs). The library is assumed to pick the cheapest tile.
    Dimensions in elements; FLOPs out, at least `2 m n k`, so a rate
    applied to it is never beaten. Vectorised over m, n, k.
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    b = np.asarray(batch, dtype=float)
    best = None
    for tm, tn in tiles:
        count = b * np.ceil(m / tm) * np.ceil(n / tn)
        waves = np.ceil(count / num_cores)
        work = (
            waves
            * num_cores
            * 2.0
            * tm
            * tn
            * (k + k_overhead)
            * (1.0 + reuse_penalty * (1.0 / tm + 1.0 / tn))
        )
        best = work if best is None else np.minimum(best, work)
    assert best is not None, "at least one tile shape"
    return best


@dataclass(frozen=True)
class TileModel:
    """The shape-aware GEMM model of :func:`tiled_gemm_work`: a chip of
    `num_cores` cores, the library's tile shapes, each tile's `k_overhead`
    and `reuse_penalty` (elements), and a fixed `launch_s` every GEMM
    kernel takes (seconds: its start, the last tile's epilogue and the
    memory pipeline's fill, measured as the time of the smallest GEMMs)."""

    num_cores: int
    launch_s: float = 0.0
    k_overhead: float = 0.0
    reuse_penalty: float = 0.0
    tiles: tuple[tuple[int, int], ...] = DEFAULT_TILES

    def __post_init__(self) -> None:
        assert self.num_cores >= 1 and self.launch_s >= 0
        assert self.k_overhead >= 0 and self.reuse_penalty >= 0 and self.tiles

    def work(self, m: ArrayLike, n: ArrayLike, k: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
        """:func:`tiled_gemm_work` with this model's parameters."""
        return tiled_gemm_work(
            m, n, k, self.num_cores, self.tiles, self.k_overhead, self.reuse_penalty, batch
        )


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
    #: the shape-aware model (tiles, waves, launch); replaces the efficiency curve
    tile: TileModel | None = None

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

    def gemm_s(self, m: ArrayLike, n: ArrayLike, k: ArrayLike, batch: ArrayLike = 1) -> np.ndarray:
        """Seconds for one local GEMM (or `batch` of one shape in one
        strided-batched kernel): the roofline.

        Formula (seed 000 section 3.2.2; model.md section 5; hardware.md
        section 3)::

            t = max( 2*m*n*k / (peak_flops_per_s * eff(m, n, k)),
                     2*m*n*k / ceiling_flops_per_s,               (when set)
                     (m*k + k*n + m*n) * element_bytes / hbm_bytes_per_s )

        with `eff <= max_efficiency <= 1`, so no GEMM is faster than its
        FLOPs at peak or its operands and result over HBM. With a
        :class:`TileModel` (the shape-aware model) the first term is
        `launch_s + work(m, n, k) / peak_flops_per_s`
        (:func:`tiled_gemm_work`, at least `2 m n k`) and the HBM term is
        added to `launch_s` too. A batched kernel does `batch` times the
        FLOPs and bytes; with tiles, its GEMMs share the waves and one
        `launch_s` (:func:`tiled_gemm_work`), with the curve it is `batch`
        GEMMs at the curve's rate. Dimensions in elements; a GEMM with a
        zero dimension takes no time.
        """
        b = np.asarray(batch, dtype=float)
        flops = gemm_flops(m, n, k) * b
        if self.tile is not None:
            return self._tiled_s(m, n, k, flops, b)
        eff = self.efficiency(np.maximum(m, 1), np.maximum(n, 1), np.maximum(k, 1))
        t = flops / (self.peak_flops_per_s * eff)
        if self.ceiling_flops_per_s is not None:
            t = np.maximum(t, flops / self.ceiling_flops_per_s)
        if self.hbm_bytes_per_s > 0:
            memory = b * gemm_hbm_bytes(m, n, k, self.element_bytes) / self.hbm_bytes_per_s
            t = np.where(flops > 0, np.maximum(t, memory), 0.0)
        return t

    def _tiled_s(
        self, m: ArrayLike, n: ArrayLike, k: ArrayLike, flops: np.ndarray, batch: np.ndarray
    ) -> np.ndarray:
        """:meth:`gemm_s` with the tile model (its docstring has the formula)."""
        assert self.tile is not None
        busy = self.tile.work(np.maximum(m, 1), np.maximum(n, 1), np.maximum(k, 1), batch)
        t = busy / self.effective_flops_per_s
        if self.ceiling_flops_per_s is not None:
            t = np.maximum(t, flops / self.ceiling_flops_per_s)
        if self.hbm_bytes_per_s > 0:
            memory = batch * gemm_hbm_bytes(m, n, k, self.element_bytes) / self.hbm_bytes_per_s
            t = np.maximum(t, memory)
        return np.where(flops > 0, self.tile.launch_s + t, 0.0)

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
