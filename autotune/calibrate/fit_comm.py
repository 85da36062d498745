"""Fit the ring-collective model to measured times: one straight line, or
one line per size regime (autotune.calibrate.regimes) when leave-one-size-out
validation prefers regimes; and cross-validate it (autotune.calibrate.crossval).

Model (model.md section 4; seed 000 equation 5), per operation and mesh axis::

    t = launch_s + (P - 1) * (sync_s + shard_bytes / link_bytes_per_s)

The straight-line fit:

It is linear in `(launch_s, sync_s, 1 / link_bytes_per_s)` with regressors
`(1, P - 1, (P - 1) * shard_bytes)`. meshtune fits it on relative residuals
`(t_model - t) / t` (latency-bound and bandwidth-bound points count alike)
with scipy.optimize.least_squares, non-negative bounds and a soft-L1 loss,
drops points whose residual exceeds a robust threshold, and refits the
inliers with a plain loss. Parameter uncertainty is the Gauss-Newton
covariance `sigma^2 (J^T J)^-1` of the inlier fit.

Identifiability: one ring size makes the regressors `1` and `P - 1`
collinear, so only `launch_s + (P - 1) * sync_s` is determined; one shard
size per ring makes `P - 1` and `(P - 1) * shard_bytes` collinear. The fit
detects this from the rank of the design matrix, fits only the combinations
the data determines, and says so instead of inventing a split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from autotune.calibrate import regimes as regimes_mod
from autotune.calibrate.crossval import CrossValidationResult
from autotune.calibrate.crossval import cross_validate as cross_validate_fit
from autotune.calibrate.samples import CollectiveSample
from cost_models import Axis, CollectiveOp

#: soft-L1 transition, relative error (a measured time off by more is treated as noisy)
ROBUST_SCALE = 0.05
#: inlier threshold: residual beyond this many robust sigmas (and beyond 15%) is an outlier
OUTLIER_SIGMAS = 4.0
OUTLIER_MIN_REL = 0.15


@dataclass(frozen=True)
class CommFit:
    """A fitted (or unfittable) collective model of one op on one axis."""

    op: CollectiveOp
    axis: Axis
    num_points: int
    num_outliers: int
    ring_sizes: tuple[int, ...]
    shard_bytes_range: tuple[float, float]
    launch_s: float
    sync_s: float
    link_bytes_per_s: float | None
    launch_s_stderr: float | None
    sync_s_stderr: float | None
    link_bytes_per_s_stderr: float | None
    combined_latency_s: float | None  # launch + (P-1)*sync at the one ring size
    combined_latency_stderr_s: float | None
    r2: float | None
    rms_rel_error: float
    max_rel_error: float
    identifiable: tuple[str, ...]
    note: str | None
    usable: bool  # False: no bandwidth could be determined, so no LinkSpec
    measured_s: tuple[float, ...]
    fitted_s: tuple[float, ...]
    rel_errors: tuple[float, ...]
    inlier: tuple[bool, ...]
    rows: tuple[tuple[str, int], ...]
    model: str = "linear"  # or "regimes"
    #: (max_shard_bytes, launch_s, sync_s, link_bytes_per_s) per regime, last bound inf
    regimes: tuple[tuple[float, float, float, float], ...] = ()
    cv: CrossValidationResult | None = None
    #: hosts the measured ranks ran on (None: not stated or mixed)
    num_hosts: int | None = None
    resource: str | None = None
    #: how pieces above the largest measured one are predicted (regimes only)
    extrapolation: str | None = None
    #: pieces beyond the measured range will likely run faster than predicted
    still_climbing: bool = False

    @property
    def outliers(self) -> tuple[tuple[str, int, float], ...]:
        """(file, line, relative error) of the points the robust fit set aside."""
        return tuple(
            (f, ln, e)
            for (f, ln), e, ok in zip(self.rows, self.rel_errors, self.inlier, strict=True)
            if not ok
        )


def ring_model_s(
    launch_s: float, sync_s: float, inv_bw: float, ring_size: np.ndarray, shard_bytes: np.ndarray
) -> np.ndarray:
    """`launch_s + (P - 1) * (sync_s + shard_bytes * inv_bw)` (model.md
    section 4), seconds; `inv_bw` in seconds per byte."""
    steps = np.asarray(ring_size, dtype=float) - 1.0
    return launch_s + steps * (sync_s + np.asarray(shard_bytes, dtype=float) * inv_bw)


def _robust_linear_fit(
    x: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Non-negative relative-residual fit of `t ~ x @ beta`. Returns beta,
    its 1-sigma, the inlier mask and sigma."""
    a = x / t[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    a_n = a / scale

    def residual(z: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return a_n[rows] @ z - 1.0

    # start from the unconstrained least-squares solution, clipped to the bounds
    z0 = np.clip(np.linalg.lstsq(a_n, np.ones(len(t)), rcond=None)[0], 0.0, None) + 1e-6
    every = np.ones(len(t), dtype=bool)
    robust = least_squares(
        residual,
        z0,
        args=(every,),
        bounds=(0.0, np.inf),
        loss="soft_l1",
        f_scale=ROBUST_SCALE,
        x_scale=1.0,
    )
    r = residual(robust.x, every)
    sigma_robust = 1.4826 * float(np.median(np.abs(r - np.median(r)))) + 1e-12
    inlier = np.abs(r) <= max(OUTLIER_SIGMAS * sigma_robust, OUTLIER_MIN_REL)
    if inlier.sum() < x.shape[1] + 1:
        inlier = every
    final = least_squares(
        residual, robust.x, args=(inlier,), bounds=(0.0, np.inf), loss="linear", x_scale=1.0
    )
    r_in = residual(final.x, inlier)
    dof = max(int(inlier.sum()) - x.shape[1], 1)
    sigma = float(np.sqrt(np.sum(r_in**2) / dof))
    jac = a_n[inlier]
    cov = np.linalg.pinv(jac.T @ jac) * sigma**2
    stderr = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    return final.x / scale, stderr / scale, inlier, sigma


def _rank(x: np.ndarray, t: np.ndarray) -> int:
    a = x / t[:, None]
    a = a / np.where(np.linalg.norm(a, axis=0) == 0, 1.0, np.linalg.norm(a, axis=0))
    sv = np.linalg.svd(a, compute_uv=False)
    return int(np.sum(sv > 1e-8 * sv[0]))


def _fit_linear(samples: Sequence[CollectiveSample]) -> CommFit:
    """Fit the straight-line model to one operation on one mesh axis (all
    samples of one op and axis, pooled over files and ring sizes)."""
    op, axis = samples[0].op, samples[0].axis
    ring = np.array([s.ring_size for s in samples], dtype=float)
    shard = np.array([s.shard_bytes for s in samples], dtype=float)
    t = np.array([s.seconds for s in samples], dtype=float)
    steps = ring - 1.0
    rings = tuple(sorted({s.ring_size for s in samples}))
    one_ring = len(rings) == 1
    # one shard size on every ring: the per-step latency and bandwidth mix
    one_shard = all(len({s.shard_bytes for s in samples if s.ring_size == p}) == 1 for p in rings)

    launch = sync = inv_bw = 0.0
    launch_err = sync_err = bw_err = None
    combined = combined_err = None
    note = None
    usable = True
    if one_shard:
        # t = launch + (P-1) * (sync + shard/bw): sync and bandwidth cannot be told apart
        x = np.column_stack([np.ones_like(t), steps])
        names = ["launch_s", "sync_s + shard_bytes/link_bytes_per_s"]
        if one_ring:
            x = x[:, 1:]
            names = ["launch_s + (P-1)*(sync_s + shard_bytes/link_bytes_per_s)"]
        beta, err, inlier, _ = _robust_linear_fit(x, t)
        fitted = x @ beta
        usable = False
        note = (
            "one shard size per ring size: the per-step latency and the bandwidth "
            "cannot be separated; measure several shard sizes (8 KB to 512 MB)"
        )
        identifiable = tuple(names)
    elif one_ring:
        x = np.column_stack([np.ones_like(t), steps * shard])
        beta, err, inlier, _ = _robust_linear_fit(x, t)
        combined, inv_bw = float(beta[0]), float(beta[1])
        combined_err, inv_err = float(err[0]), float(err[1])
        p = rings[0]
        launch, sync = combined, 0.0
        note = (
            f"one ring size (P={p}): only launch_s + (P-1)*sync_s = {combined:.4g} s is "
            f"determined; stored as launch_s with sync_s = 0 (exact at P={p}, an "
            "extrapolation elsewhere); measure a second ring size to separate them"
        )
        identifiable = (f"launch_s + {p - 1}*sync_s", "link_bytes_per_s")
        fitted = x @ beta
        bw_err = inv_err
    else:
        x = np.column_stack([np.ones_like(t), steps, steps * shard])
        if _rank(x, t) < 3:
            note = "the design matrix is rank-deficient; the split below is not reliable"
        beta, err, inlier, _ = _robust_linear_fit(x, t)
        launch, sync, inv_bw = (float(b) for b in beta)
        launch_err, sync_err, bw_err = (float(e) for e in err)
        identifiable = ("launch_s", "sync_s", "link_bytes_per_s")
        fitted = x @ beta

    bw = None
    bw_stderr = None
    if usable:
        if inv_bw <= 0.0:
            usable = False
            note = ((note + "; ") if note else "") + (
                "the transfer term fitted to zero (shards too small to see the bandwidth); "
                "measure larger shards"
            )
            identifiable = tuple(i for i in identifiable if i != "link_bytes_per_s")
        else:
            bw = 1.0 / inv_bw
            bw_stderr = float(bw_err) / inv_bw**2 if bw_err is not None else None

    rel = (fitted - t) / t
    t_in = t[inlier]
    ss_res = float(np.sum((fitted[inlier] - t_in) ** 2))
    ss_tot = float(np.sum((t_in - t_in.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else None
    return CommFit(
        op=op,
        axis=axis,
        num_points=len(samples),
        num_outliers=int((~inlier).sum()),
        ring_sizes=rings,
        shard_bytes_range=(float(shard.min()), float(shard.max())),
        launch_s=launch,
        sync_s=sync,
        link_bytes_per_s=bw,
        launch_s_stderr=launch_err,
        sync_s_stderr=sync_err,
        link_bytes_per_s_stderr=bw_stderr,
        combined_latency_s=combined,
        combined_latency_stderr_s=combined_err,
        r2=r2,
        # every point, outliers included: a worst error that hides points is no worst error
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        max_rel_error=float(np.max(np.abs(rel))),
        identifiable=identifiable,
        note=note,
        usable=usable,
        measured_s=tuple(t.tolist()),
        fitted_s=tuple(fitted.tolist()),
        rel_errors=tuple(rel.tolist()),
        inlier=tuple(bool(b) for b in inlier),
        rows=tuple((s.file, s.line) for s in samples),
    )


def _linear_fitter(samples: Sequence[CollectiveSample]):
    """A refitting function for crossval.cross_validate: the straight line."""

    def fit(mask: np.ndarray):
        subset = [s for s, keep in zip(samples, mask, strict=True) if keep]
        if len({s.shard_bytes for s in subset}) < 2:
            return None
        found = _fit_linear(subset)
        if not found.usable or found.link_bytes_per_s is None:
            return None
        launch, sync, inv_bw = found.launch_s, found.sync_s, 1.0 / found.link_bytes_per_s
        return lambda ring, shard: ring_model_s(launch, sync, inv_bw, ring, shard)

    return fit


def message_bytes(samples: Sequence[CollectiveSample]) -> np.ndarray:
    """The message size of each sample as nccl-tests prints it (`size`):
    P pieces for all-gather, reduce-scatter and all-to-all, P/2 pieces for
    all-reduce (its piece is 2*size/P, autotune.calibrate.nccl_tests), the
    piece itself for send-recv and the rest."""
    per_op = {
        CollectiveOp.ALL_GATHER: 1.0,
        CollectiveOp.REDUCE_SCATTER: 1.0,
        CollectiveOp.ALL_TO_ALL: 1.0,
        CollectiveOp.ALL_REDUCE: 0.5,
    }
    return np.array(
        [
            s.shard_bytes * s.ring_size * per_op[s.op] if s.op in per_op else s.shard_bytes
            for s in samples
        ],
        dtype=float,
    )


def _outliers(rel: np.ndarray) -> np.ndarray:
    """Inlier mask: within max(OUTLIER_SIGMAS robust sigmas, OUTLIER_MIN_REL)."""
    sigma = 1.4826 * float(np.median(np.abs(rel - np.median(rel)))) + 1e-12
    return np.abs(rel) <= max(OUTLIER_SIGMAS * sigma, OUTLIER_MIN_REL)


def fit_collective(
    samples: Sequence[CollectiveSample], model: str = "auto", cross_validate: bool = False
) -> CommFit:
    """Fit one operation on one mesh axis: `linear` (one straight line),
    `regimes` (one line per size range) or `auto` (regimes when
    leave-one-size-out validation prefers more than one; see
    autotune.calibrate.regimes), and measure the held-out error."""
    linear = _fit_linear(samples)
    ring = np.array([s.ring_size for s in samples], dtype=float)
    shard = np.array([s.shard_bytes for s in samples], dtype=float)
    t = np.array([s.seconds for s in samples], dtype=float)
    num_sizes = len(np.unique(shard))
    count = 1
    held_out = None  # leave-one-size-out errors of the chosen count, reused below
    if model != "linear" and linear.usable and num_sizes >= 2 * regimes_mod.MIN_SIZES:
        count, held_out = regimes_mod.choose_regime_count(ring, shard, t)
        if model == "regimes" and count < 2:
            count, held_out = 2, None
    if count == 1:
        cv = (
            cross_validate_fit(
                ring, shard, t, _linear_fitter(samples), message=message_bytes(samples)
            )
            if cross_validate
            else None
        )
        return replace(linear, cv=cv)
    found = regimes_mod.fit_regimes(ring, shard, t, count)
    assert found is not None  # count <= feasible: choose_regime_count only returns those
    found = regimes_mod.with_top_regime(found, ring, shard, t)
    fitted = found.predict(ring, shard)
    rel = (fitted - t) / t
    inlier = _outliers(rel)
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - float(np.sum((fitted - t) ** 2)) / ss_tot if ss_tot > 0 else None
    bounds = (*found.bounds, math.inf)
    regimes = tuple(
        (b, launch, sync, 1.0 / inv_bw if inv_bw > 0 else math.inf)
        for b, (launch, sync, inv_bw) in zip(bounds, found.coefs, strict=True)
    )
    if any(math.isinf(r[3]) for r in regimes):
        # a regime whose transfer term fitted to zero has no bandwidth: keep the line
        cv = (
            cross_validate_fit(
                ring, shard, t, _linear_fitter(samples), message=message_bytes(samples)
            )
            if cross_validate
            else None
        )
        return replace(linear, cv=cv)
    one_ring = len(linear.ring_sizes) == 1
    note = (
        f"one ring size (P={linear.ring_sizes[0]}): each regime's launch_s holds "
        "launch_s + (P-1)*sync_s (sync_s = 0; exact at this P, an extrapolation "
        "elsewhere); measure a second ring size to separate them"
        if one_ring
        else None
    )
    top = regimes[-1]
    cv = (
        cross_validate_fit(
            ring,
            shard,
            t,
            regimes_mod.regime_fitter(ring, shard, t, count),
            held_out,
            message=message_bytes(samples),
        )
        if cross_validate
        else None
    )
    return replace(
        linear,
        model="regimes",
        regimes=regimes,
        launch_s=top[1],
        sync_s=top[2],
        link_bytes_per_s=top[3],
        launch_s_stderr=None,
        sync_s_stderr=None,
        link_bytes_per_s_stderr=None,
        combined_latency_s=None,
        combined_latency_stderr_s=None,
        r2=r2,
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        max_rel_error=float(np.max(np.abs(rel))),
        num_outliers=int((~inlier).sum()),
        identifiable=(
            ("launch_s + (P-1)*sync_s per regime", "link_bytes_per_s per regime")
            if one_ring
            else ("launch_s, sync_s, link_bytes_per_s per regime",)
        ),
        note=note,
        fitted_s=tuple(fitted.tolist()),
        rel_errors=tuple(rel.tolist()),
        inlier=tuple(bool(b) for b in inlier),
        cv=cv,
        extrapolation=found.extrapolation or None,
        still_climbing=found.still_climbing,
    )


def fit_all(
    samples: Sequence[CollectiveSample],
    model: str = "auto",
    resources: dict[str, str | None] | None = None,
    hosts: dict[str, int | None] | None = None,
) -> list[CommFit]:
    """One fit per (operation, mesh axis, resource) present, in a stable
    order; `resources` maps an input file to what its rings crossed
    (intra_node, scale_out): logs of one operation that measured different
    resources (one host and several) are fitted apart, each written under
    its own key. `hosts` maps a file to how many hosts its ranks ran on.
    Axes fed the same measurements share one fit."""
    where = resources or {}
    groups: dict[tuple[CollectiveOp, Axis, str], list[CollectiveSample]] = {}
    for s in samples:
        groups.setdefault((s.op, s.axis, where.get(s.file) or ""), []).append(s)
    order = list(CollectiveOp)
    keys = sorted(groups, key=lambda k: (order.index(k[0]), k[2], k[1].value != "row"))
    done: dict[tuple, CommFit] = {}
    fits = []
    for key in keys:
        op, axis, _ = key
        group = groups[key]
        data = (op, tuple((s.ring_size, s.shard_bytes, s.seconds, s.file, s.line) for s in group))
        if data not in done:
            done[data] = fit_collective(group, model, cross_validate=True)
        kinds = {(resources or {}).get(s.file) for s in group}
        resource = kinds.pop() if len(kinds) == 1 else "mixed"
        counts = {(hosts or {}).get(s.file) for s in group}
        num_hosts = counts.pop() if len(counts) == 1 else None
        fits.append(replace(done[data], axis=axis, resource=resource, num_hosts=num_hosts))
    return fits
