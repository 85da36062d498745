"""Fit the local GEMM model to measured GEMM times.

Model (model.md section 5; cost_models.compute.saturating_efficiency)::

    t = 2 m n k / (effective_flops_per_s * m/(m+m_half) * n/(n+n_half) * k/(k+k_half))

fitted on log residuals `log t_model - log t` (a relative error, so small
and large GEMMs count alike) with scipy.optimize.least_squares, non-negative
halves, a soft-L1 loss and an inlier refit, as in fit_comm. The baseline it
is compared with is one constant rate, the median of `2 m n k / t`.

A dimension measured at a single size cannot be told from the rate: its
half is fixed at 0 and the rate absorbs it (the fit says so).

When the chip's core count is known (SMs, CUs: the chip preset's
`num_cores`), the shape-aware tile model is fitted too
(cost_models.compute.tiled_gemm_work)::

    t = launch_s + max(work(m, n, k; k_overhead, reuse_penalty) / rate,
                       (m k + k n + m n) * bytes / hbm_bytes_per_s)

with `rate <= peak`: `k_overhead` and `reuse_penalty` on a grid (the work
is piecewise constant in the tile choice, so a gradient cannot move them),
`launch_s` and `rate` by the same robust least squares on log residuals.
Whichever of the two models predicts held-out shapes better (their
cross-validated median error) is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from autotune.calibrate.samples import GemmSample
from autotune.errors import InputError
from cost_models import ComputeModel, gemm_flops, roofline_gemm_s
from cost_models.compute import DEFAULT_TILES, TileModel, gemm_hbm_bytes, tiled_gemm_work

ROBUST_SCALE = 0.05
OUTLIER_SIGMAS = 4.0
OUTLIER_MIN_REL = 0.15
_DIMS = ("m", "n", "k")
#: a measured GEMM this much above the chip's peak is rejected (timer jitter allowance)
PEAK_TOLERANCE = 1.02
_DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0}


def _bytes(dtype: str) -> float:
    """Bytes per element of `dtype`."""
    return _DTYPE_BYTES.get(dtype, 2.0)


@dataclass(frozen=True)
class ComputeFit:
    """The fitted GEMM model of one dtype."""

    dtype: str
    num_points: int
    num_outliers: int
    effective_flops_per_s: float
    effective_flops_per_s_stderr: float | None  # None: not estimated (the tile model)
    halves: tuple[float, float, float]  # m_half, n_half, k_half (elements)
    halves_stderr: tuple[float | None, float | None, float | None]
    constant_flops_per_s: float
    rms_rel_error: float
    max_rel_error: float
    constant_rms_rel_error: float
    r2_log: float | None
    identifiable: tuple[str, ...]
    note: str | None
    other_dtypes: tuple[str, ...]
    measured_s: tuple[float, ...]
    fitted_s: tuple[float, ...]
    inlier: tuple[bool, ...]
    rows: tuple[tuple[str, int], ...]
    peak_flops_per_s: float | None = None  # the roofline ceiling, when the chip is known
    hbm_bytes_per_s: float | None = None
    max_dims: tuple[float, float, float] | None = None  # largest m, n, k measured
    min_dims: tuple[float, float, float] | None = None  # smallest m, n, k measured
    cv_errors: tuple[float, ...] = ()  # held-out |relative errors| of the curve
    constant_cv_errors: tuple[float, ...] = ()  # the same for the one-rate baseline
    #: the shape-aware model, when it was fitted and predicts held-out shapes better
    tile: TileModel | None = None
    #: held-out |relative errors| of the model not chosen (curve or tiles), for the report
    other_cv_errors: tuple[float, ...] = ()

    def model(self) -> ComputeModel:
        """The fitted curve as the planner's compute model: bounded by the
        roofline when the chip is known, held flat beyond the shapes measured."""
        m_half, n_half, k_half = self.halves
        return ComputeModel(
            self.effective_flops_per_s,
            1.0,
            m_half,
            n_half,
            k_half,
            ceiling_flops_per_s=self.peak_flops_per_s,
            hbm_bytes_per_s=self.hbm_bytes_per_s or 0.0,
            element_bytes=_bytes(self.dtype),
            max_dims=self.max_dims,
            tile=self.tile,
        )

    @property
    def kind(self) -> str:
        """ "tiles" (the shape-aware model) or "curve" (the efficiency curve)."""
        return "tiles" if self.tile is not None else "curve"

    @property
    def outliers(self) -> tuple[tuple[str, int], ...]:
        """(file, line) of the rows the robust fit set aside."""
        return tuple(r for r, ok in zip(self.rows, self.inlier, strict=True) if not ok)


def constant_rate_flops_per_s(samples: Sequence[GemmSample]) -> float:
    """The single-rate baseline: median of `2 m n k groups / t` over the
    samples."""
    return float(np.median([s.flops / s.seconds for s in samples]))


def choose_dtype(samples: Sequence[GemmSample]) -> str:
    """bf16 when measured (the training dtype the planner assumes), else the
    most measured dtype."""
    counts = Counter(s.dtype for s in samples)
    return "bf16" if "bf16" in counts else counts.most_common(1)[0][0]


def _check_below_peak(chosen: Sequence[GemmSample], peak_flops_per_s: float) -> None:
    """A measured GEMM faster than the chip's peak is an error in the data
    (seconds, shape or dtype), not a fast GEMM."""
    for s in chosen:
        rate = s.flops / s.seconds
        if rate > PEAK_TOLERANCE * peak_flops_per_s:
            raise InputError(
                f"the {s.label} runs at {rate / 1e12:.0f} TFLOP/s, "
                f"above the chip's {s.dtype} peak {peak_flops_per_s / 1e12:.0f} TFLOP/s, "
                "so the fit is rejected",
                file=s.file,
                line=s.line,
                field="seconds",
                value=s.seconds,
                fix="check that seconds are seconds, the shape and the dtype, or name the "
                "right chip with --chip",
            )


def _cv_errors(
    chosen: Sequence[GemmSample], fitter: Callable[[Sequence[GemmSample]], ComputeFit]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Held-out |relative errors| of `fitter`'s model and of the one-rate
    baseline: each shape left out in turn (ten interleaved folds above 60
    shapes)."""
    n = len(chosen)
    if n < 4:
        return (), ()
    folds = n if n <= 60 else 10
    curve, constant = [], []
    for f in range(folds):
        held = [i for i in range(n) if i % folds == f]
        kept = [s for i, s in enumerate(chosen) if i % folds != f]
        fit = fitter(kept)
        model = fit.model()
        for i in held:
            s = chosen[i]
            curve.append(abs(float(model.gemm_s(s.m, s.n, s.k, s.groups)) / s.seconds - 1.0))
            constant.append(abs(s.flops / fit.constant_flops_per_s / s.seconds - 1.0))
    return tuple(curve), tuple(constant)


#: the tile model's grids (elements): each tile's k overhead and reuse penalty
K_OVERHEAD_GRID = (0.0, 32.0, 64.0, 128.0, 256.0, 512.0)
REUSE_PENALTY_GRID = (0.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: fewest shapes, and distinct sizes of two dimensions, the tile model is fitted from
TILE_MIN_SHAPES = 8


def _tile_identifiable(chosen: Sequence[GemmSample]) -> bool:
    """Enough shapes, varied in at least two dimensions, to fit the tile
    model's four parameters."""
    dims = np.array([[s.m, s.n, s.k] for s in chosen], dtype=float)
    varied = sum(len(np.unique(dims[:, j])) > 1 for j in range(3))
    return len(chosen) >= TILE_MIN_SHAPES and varied >= 2


def fit_tiles(
    chosen: Sequence[GemmSample],
    peak_flops_per_s: float,
    hbm_bytes_per_s: float | None,
    num_cores: int,
    element_bytes: float,
) -> tuple[TileModel, float, np.ndarray]:
    """The tile model fitted to `chosen` (one dtype): (model, rate FLOP/s,
    predicted seconds per sample). For each grid point of `k_overhead` and
    `reuse_penalty`, `launch_s >= 0` and `rate <= peak` by soft-L1 least
    squares on log residuals; the grid point with the smallest median
    |relative error| is kept (module docstring)."""
    dims = np.array([[s.m, s.n, s.k] for s in chosen], dtype=float)
    m, n, k = dims[:, 0], dims[:, 1], dims[:, 2]
    groups = np.array([s.groups for s in chosen], dtype=float)
    log_t = np.log(np.array([s.seconds for s in chosen]))
    memory = (
        groups * gemm_hbm_bytes(m, n, k, element_bytes) / hbm_bytes_per_s
        if hbm_bytes_per_s
        else np.zeros_like(m)
    )
    log_peak = float(np.log(peak_flops_per_s))
    fastest = float(np.exp(log_t).min())
    best: tuple[float, TileModel, float, np.ndarray] | None = None
    for k_overhead in K_OVERHEAD_GRID:
        for reuse in REUSE_PENALTY_GRID:
            work = tiled_gemm_work(m, n, k, num_cores, DEFAULT_TILES, k_overhead, reuse, groups)

            def predict(z: np.ndarray, work: np.ndarray = work) -> np.ndarray:
                return z[0] * fastest + np.maximum(work / np.exp(z[1]), memory)

            def residual(z: np.ndarray) -> np.ndarray:
                return np.log(predict(z)) - log_t

            z0 = np.array([0.5, log_peak - 0.3])
            found = least_squares(
                residual,
                z0,
                bounds=([0.0, log_peak - 12.0], [1.0, log_peak]),
                loss="soft_l1",
                f_scale=ROBUST_SCALE,
            )
            predicted = predict(found.x)
            score = float(np.median(np.abs(predicted / np.exp(log_t) - 1.0)))
            if best is None or score < best[0]:
                model = TileModel(
                    num_cores=num_cores,
                    launch_s=float(found.x[0] * fastest),
                    k_overhead=k_overhead,
                    reuse_penalty=reuse,
                )
                best = (score, model, float(np.exp(found.x[1])), predicted)
    assert best is not None
    return best[1], best[2], best[3]


def fit_gemm(
    samples: Sequence[GemmSample],
    dtype: str | None = None,
    peak_flops_per_s: float | None = None,
    hbm_bytes_per_s: float | None = None,
    cross_validate: bool = True,
    num_cores: int | None = None,
) -> ComputeFit:
    """Fit the GEMM model to the samples of `dtype` (default:
    :func:`choose_dtype`), bounded by the chip's roofline when its peak
    (and HBM bandwidth) are given: the efficiency curve, and the tile model
    too when the chip's `num_cores` is given; the one that predicts
    held-out shapes better is returned (in-sample without
    `cross_validate`)."""
    dtype = dtype or choose_dtype(samples)
    chosen = [s for s in samples if s.dtype == dtype]
    others = tuple(sorted({s.dtype for s in samples} - {dtype}))
    if peak_flops_per_s is not None:
        _check_below_peak(chosen, peak_flops_per_s)

    def curve_fitter(kept: Sequence[GemmSample]) -> ComputeFit:
        return _fit_curve(kept, dtype, others, peak_flops_per_s, hbm_bytes_per_s)

    curve = curve_fitter(chosen)
    if not (num_cores and peak_flops_per_s and _tile_identifiable(chosen)):
        if not cross_validate:
            return curve
        cv, constant = _cv_errors(chosen, curve_fitter)
        return replace(curve, cv_errors=cv, constant_cv_errors=constant)
    assert peak_flops_per_s is not None

    def tile_fitter(kept: Sequence[GemmSample]) -> ComputeFit:
        return _with_tiles(curve_fitter(kept), kept, peak_flops_per_s, hbm_bytes_per_s, num_cores)

    tiled = _with_tiles(curve, chosen, peak_flops_per_s, hbm_bytes_per_s, num_cores)
    if not cross_validate:
        return tiled if _median_error(tiled) < _median_error(curve) else curve
    cv_curve, constant = _cv_errors(chosen, curve_fitter)
    cv_tiles, _ = _cv_errors(chosen, tile_fitter)
    if np.median(cv_tiles) < np.median(cv_curve):
        return replace(
            tiled, cv_errors=cv_tiles, constant_cv_errors=constant, other_cv_errors=cv_curve
        )
    return replace(curve, cv_errors=cv_curve, constant_cv_errors=constant, other_cv_errors=cv_tiles)


def _median_error(fit: ComputeFit) -> float:
    """Median |relative error| of a fit on its own rows."""
    t = np.asarray(fit.measured_s)
    return float(np.median(np.abs(np.asarray(fit.fitted_s) / t - 1.0)))


def _with_tiles(
    curve: ComputeFit,
    chosen: Sequence[GemmSample],
    peak_flops_per_s: float,
    hbm_bytes_per_s: float | None,
    num_cores: int,
) -> ComputeFit:
    """The tile model fitted to the rows `curve` was fitted to, as a
    ComputeFit (fit_tiles; the constant baseline and the row bookkeeping
    are the curve's)."""
    model, rate, predicted = fit_tiles(
        chosen, peak_flops_per_s, hbm_bytes_per_s, num_cores, _bytes(curve.dtype)
    )
    t = np.asarray(curve.measured_s)
    r = np.log(predicted) - np.log(t)
    sigma_robust = 1.4826 * float(np.median(np.abs(r - np.median(r)))) + 1e-12
    inlier = np.abs(r) <= max(OUTLIER_SIGMAS * sigma_robust, OUTLIER_MIN_REL)
    rel = predicted / t - 1.0
    log_t = np.log(t[inlier])
    ss_tot = float(np.sum((log_t - log_t.mean()) ** 2))
    r2 = 1.0 - float(np.sum(r[inlier] ** 2)) / ss_tot if ss_tot > 0 else None
    note = f"ignored {', '.join(curve.other_dtypes)} rows" if curve.other_dtypes else None
    return replace(
        curve,
        num_outliers=int((~inlier).sum()),
        effective_flops_per_s=rate,
        effective_flops_per_s_stderr=None,
        halves=(0.0, 0.0, 0.0),
        halves_stderr=(None, None, None),
        rms_rel_error=float(np.sqrt(np.mean(rel[inlier] ** 2))),
        max_rel_error=float(np.max(np.abs(rel))),
        r2_log=r2,
        identifiable=("effective_flops_per_s", "launch_s", "k_overhead", "reuse_penalty"),
        note=note,
        fitted_s=tuple(predicted.tolist()),
        inlier=tuple(bool(b) for b in inlier),
        tile=model,
    )


def _fit_curve(
    chosen: Sequence[GemmSample],
    dtype: str,
    others: tuple[str, ...],
    peak_flops_per_s: float | None,
    hbm_bytes_per_s: float | None,
) -> ComputeFit:
    """The efficiency curve fitted to `chosen` (one dtype), bounded by the
    roofline when the peak is given (module docstring)."""
    dims = np.array([[s.m, s.n, s.k] for s in chosen], dtype=float)
    groups = np.array([s.groups for s in chosen], dtype=float)
    t = np.array([s.seconds for s in chosen])
    log_flops = np.log(groups * gemm_flops(dims[:, 0], dims[:, 1], dims[:, 2]))
    free = [len(np.unique(dims[:, j])) > 1 for j in range(3)]
    # halves are fitted in units of each dimension's median so all parameters are O(1)
    unit = np.median(dims, axis=0)
    rate0 = constant_rate_flops_per_s(chosen)
    log_roof = None
    if peak_flops_per_s is not None:
        roof = groups * roofline_gemm_s(
            dims[:, 0], dims[:, 1], dims[:, 2], peak_flops_per_s, hbm_bytes_per_s, _bytes(dtype)
        )
        log_roof = np.log(roof)

    def unpack(z: np.ndarray) -> tuple[float, np.ndarray]:
        halves = np.zeros(3)
        j = 1
        for d in range(3):
            if free[d]:
                halves[d] = z[j] * unit[d]
                j += 1
        return z[0], halves

    def residual(z: np.ndarray, rows: np.ndarray) -> np.ndarray:
        log_rate, halves = unpack(z)
        log_eff = -np.sum(np.log1p(halves[None, :] / dims[rows]), axis=1)
        log_model = log_flops[rows] - log_rate - log_eff
        if log_roof is not None:
            log_model = np.maximum(log_model, log_roof[rows])
        return log_model - np.log(t[rows])

    num_free = sum(free)
    log_peak = np.log(peak_flops_per_s) if peak_flops_per_s is not None else np.inf
    start = min(np.log(rate0) + 0.5, log_peak - 1e-3)
    z0 = np.concatenate([[start], np.full(num_free, 0.1)])
    lower = np.concatenate([[-np.inf], np.zeros(num_free)])
    upper = np.concatenate([[log_peak], np.full(num_free, np.inf)])
    every = np.ones(len(t), dtype=bool)
    robust = least_squares(
        residual, z0, args=(every,), bounds=(lower, upper), loss="soft_l1", f_scale=ROBUST_SCALE
    )
    r = residual(robust.x, every)
    sigma_robust = 1.4826 * float(np.median(np.abs(r - np.median(r)))) + 1e-12
    inlier = np.abs(r) <= max(OUTLIER_SIGMAS * sigma_robust, OUTLIER_MIN_REL)
    if inlier.sum() < len(z0) + 1:
        inlier = every
    final = least_squares(residual, robust.x, args=(inlier,), bounds=(lower, upper))
    r_in = residual(final.x, inlier)
    dof = max(int(inlier.sum()) - len(z0), 1)
    sigma = float(np.sqrt(np.sum(r_in**2) / dof))
    cov = np.linalg.pinv(final.jac.T @ final.jac) * sigma**2
    err = np.sqrt(np.clip(np.diag(cov), 0.0, None))

    log_rate, halves = unpack(final.x)
    rate = float(np.exp(log_rate))
    halves_err: list[float | None] = []
    j = 1
    for d in range(3):
        if free[d]:
            halves_err.append(float(err[j] * unit[d]))
            j += 1
        else:
            halves_err.append(None)
    fitted = np.exp(np.log(t) + residual(final.x, every))
    rel = fitted / t - 1.0
    const_rel = np.exp(log_flops - np.log(rate0)) / t - 1.0
    log_t = np.log(t[inlier])
    ss_tot = float(np.sum((log_t - log_t.mean()) ** 2))
    r2 = 1.0 - float(np.sum(r_in**2)) / ss_tot if ss_tot > 0 else None
    fixed = [_DIMS[d] for d in range(3) if not free[d]]
    note = None
    if fixed:
        note = (
            f"one size of {', '.join(fixed)} measured: its half is fixed at 0 and the rate "
            "absorbs it (the rate is then the rate at that size)"
        )
    if others:
        note = ((note + "; ") if note else "") + f"ignored {', '.join(others)} rows"
    if peak_flops_per_s is not None and final.x[0] >= log_peak - 1e-6:
        note = ((note + "; ") if note else "") + (
            "the unbounded curve implied a rate above the chip's peak and was rejected; "
            f"the rate is held at the peak {peak_flops_per_s / 1e12:.0f} TFLOP/s"
        )
    identifiable = ("effective_flops_per_s", *(f"{_DIMS[d]}_half" for d in range(3) if free[d]))
    return ComputeFit(
        dtype=dtype,
        num_points=len(chosen),
        num_outliers=int((~inlier).sum()),
        effective_flops_per_s=rate,
        effective_flops_per_s_stderr=float(rate * err[0]),
        halves=(float(halves[0]), float(halves[1]), float(halves[2])),
        halves_stderr=(halves_err[0], halves_err[1], halves_err[2]),
        constant_flops_per_s=rate0,
        rms_rel_error=float(np.sqrt(np.mean(rel[inlier] ** 2))),
        max_rel_error=float(np.max(np.abs(rel))),  # every point, outliers included
        constant_rms_rel_error=float(np.sqrt(np.mean(const_rel[inlier] ** 2))),
        r2_log=r2,
        identifiable=identifiable,
        note=note,
        other_dtypes=others,
        measured_s=tuple(t.tolist()),
        fitted_s=tuple(fitted.tolist()),
        inlier=tuple(bool(b) for b in inlier),
        rows=tuple((s.file, s.line) for s in chosen),
        peak_flops_per_s=peak_flops_per_s,
        hbm_bytes_per_s=hbm_bytes_per_s,
        max_dims=(float(dims[:, 0].max()), float(dims[:, 1].max()), float(dims[:, 2].max())),
        min_dims=(float(dims[:, 0].min()), float(dims[:, 1].min()), float(dims[:, 2].min())),
    )
