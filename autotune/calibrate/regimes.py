"""Fit the size-regime collective model: one straight line per range of
per-chip piece sizes (cost_models.types.LinkRegime), ranges chosen from the
data.

Why regimes: NCCL and RCCL pick a protocol (LL, LL128, Simple) and a
channel count per message size (NCCL src/graph/tuning.cc), each with its
own latency and bandwidth, so a measured curve is a chain of straight lines
with jumps where the library switches. One line over every size is biased at
both ends (docs/calibrate.md).

Within a regime the model is the ring formula of model.md section 4,
`t = launch + (P-1) * (sync + shard / bw)`, linear in
`(launch, sync, 1/bw)`; with one ring size only `launch + (P-1) * sync` is
determined and is stored as launch with sync 0 (exact at that P).

Fitting: the distinct piece sizes are sorted; a segmentation cuts them into
K contiguous ranges of at least MIN_SIZES sizes, the last of them the
TOP_SIZES largest (the regime that predicts beyond them); each range is fitted by
non-negative least squares on relative residuals `(t_fit - t) / t`, so
microsecond and second points count alike; dynamic programming finds the
segmentation with the least total truncated squared relative error (a point
off by more than TRUNCATE counts as TRUNCATE, so one spike cannot move a
boundary). The boundary between two ranges is the geometric mean of the
sizes on either side. K is chosen by leave-one-size-out cross-validation
(:func:`choose_regime_count`).

Beyond the largest measured size (:func:`with_top_regime`) one more regime
continues the curve from its largest point. NCCL and RCCL raise their
chunk size and channel count with the message, so the time per byte keeps
falling until the library settles on its largest configuration; from there
on the curve is a straight line whose slope is the marginal cost of a byte.
When the top of the measured range is that straight line (the average
bandwidth grew by at most TOP_GROWTH_MAX over the last doubling), the
extrapolation uses the marginal rate between the two largest sizes; while
the bandwidth still climbs steeply (or a protocol switch sits between the
two largest sizes, which makes their difference no rate at all), it uses
the line through the TOP_SIZES largest sizes, which is slower than the
plateau to come: a conservative prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import nnls

#: fewest distinct sizes in one regime (a line plus one degree of freedom)
MIN_SIZES = 3
#: the large-message regime, which also predicts beyond the largest size
#: measured, spans this many of the largest sizes: its slope is the marginal
#: bandwidth at the top of the measured range (older, smaller sizes would
#: drag in the lower bandwidth of a curve that is still rising)
TOP_SIZES = 3
#: largest growth of the average bandwidth per doubling of the size, between
#: the two largest sizes, at which the curve counts as settled and their
#: marginal rate is trusted for the extrapolation (see with_top_regime)
TOP_GROWTH_MAX = 0.25
#: most regimes tried
MAX_REGIMES = 6
#: relative error beyond which a point's squared error stops growing in the segmentation
TRUNCATE = 0.3
#: regimes must cut the line's cross-validated median error by this fraction to be chosen
MIN_GAIN = 0.3
#: and each further regime must cut the best so far by this fraction
MIN_EXTRA_GAIN = 0.05
#: and every cut must be worth at least this much absolute error (a line that
#: already fits to rounding error stays a line)
MIN_ABS_GAIN = 0.002


@dataclass(frozen=True)
class RegimeFit:
    """K regimes: `bounds[r]` is the largest piece of regime r (the last is
    unbounded); `coefs[r]` = (launch_s, sync_s, seconds per byte)."""

    bounds: tuple[float, ...]
    coefs: tuple[tuple[float, float, float], ...]
    #: how the last regime predicts beyond the largest measured size ("" when
    #: the last fitted regime does)
    extrapolation: str = ""
    #: the bandwidth was still climbing at the top of the measured range, so
    #: pieces beyond it will likely run faster than predicted
    still_climbing: bool = False

    def regime_of(self, shard_bytes: np.ndarray) -> np.ndarray:
        """Regime index of each piece."""
        return np.searchsorted(np.asarray(self.bounds), np.asarray(shard_bytes), side="left")

    def predict(self, ring_size: np.ndarray, shard_bytes: np.ndarray) -> np.ndarray:
        """Seconds: `launch_r + (P-1) * (sync_r + shard * inv_bw_r)` per point."""
        coefs = np.asarray(self.coefs)[self.regime_of(shard_bytes)]
        steps = np.asarray(ring_size, dtype=float) - 1.0
        return coefs[:, 0] + steps * (coefs[:, 1] + np.asarray(shard_bytes) * coefs[:, 2])


def _design(ring: np.ndarray, shard: np.ndarray, split_sync: bool) -> np.ndarray:
    steps = ring - 1.0
    if split_sync:
        return np.column_stack([np.ones_like(shard), steps, steps * shard])
    return np.column_stack([np.ones_like(shard), steps * shard])


def _line(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray, split_sync: bool
) -> tuple[tuple[float, float, float], np.ndarray]:
    """Non-negative relative-residual fit of one regime; returns
    (launch, sync, inv_bw) and the relative residuals."""
    x = _design(ring, shard, split_sync)
    a = x / t[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    z, _ = nnls(a / scale, np.ones(len(t)))
    beta = z / scale
    rel = (x @ beta - t) / t
    if split_sync:
        return (float(beta[0]), float(beta[1]), float(beta[2])), rel
    return (float(beta[0]), 0.0, float(beta[1])), rel


def _segment_costs(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Distinct sizes, each point's size index, and the truncated error of
    one line over distinct sizes i..j for every i <= j."""
    split_sync = len(np.unique(ring)) > 1
    sizes = np.unique(shard)
    m = len(sizes)
    order = np.argsort(shard, kind="stable")
    ring, shard, t = ring[order], shard[order], t[order]
    where = np.searchsorted(sizes, shard)
    first = np.searchsorted(where, np.arange(m), side="left")
    last = np.searchsorted(where, np.arange(m), side="right")
    # relative design rows a = x / t: a line's relative residuals are a @ beta - 1;
    # per-column scaling keeps the normal equations well conditioned
    a = _design(ring, shard, split_sync) / t[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a = a / scale
    gram = np.concatenate([np.zeros((1, a.shape[1], a.shape[1])), np.cumsum(
        a[:, :, None] * a[:, None, :], axis=0)])  # fmt: skip
    rhs = np.concatenate([np.zeros((1, a.shape[1])), np.cumsum(a, axis=0)])
    cost = np.full((m, m), np.inf)
    for i in range(m):
        lo = first[i]
        for j in range(i + MIN_SIZES - 1, m):
            hi = last[j]
            beta = None
            try:
                beta = np.linalg.solve(gram[hi] - gram[lo], rhs[hi] - rhs[lo])
            except np.linalg.LinAlgError:
                pass
            if beta is None or np.any(beta < 0):
                beta, _ = nnls(a[lo:hi], np.ones(hi - lo))  # the bound binds
            rel = a[lo:hi] @ beta - 1.0
            cost[i, j] = float(np.sum(np.minimum(rel**2, TRUNCATE**2)))
    return sizes, np.searchsorted(sizes, shard[np.argsort(order)]), cost, split_sync


def _segment(cost: np.ndarray, num_regimes: int) -> list[int] | None:
    """First size index of each regime in the least-cost segmentation."""
    m = cost.shape[0]
    if num_regimes < 1 or m < num_regimes * MIN_SIZES:
        return None
    best = np.full((num_regimes + 1, m + 1), np.inf)
    back = np.zeros((num_regimes + 1, m + 1), dtype=int)
    best[0, 0] = 0.0
    for k in range(1, num_regimes + 1):
        for j in range(k * MIN_SIZES, m + 1):
            for i in range((k - 1) * MIN_SIZES, j - MIN_SIZES + 1):
                value = best[k - 1, i] + cost[i, j - 1]
                if value < best[k, j]:
                    best[k, j], back[k, j] = value, i
    starts, j = [], m
    for k in range(num_regimes, 0, -1):
        j = int(back[k, j])
        starts.append(j)
    return starts[::-1]


def _build(
    ring: np.ndarray,
    shard: np.ndarray,
    t: np.ndarray,
    sizes: np.ndarray,
    where: np.ndarray,
    starts: list[int],
    split_sync: bool,
) -> RegimeFit:
    ends = [*starts[1:], len(sizes)]
    coefs, bounds = [], []
    for r, (i, j) in enumerate(zip(starts, ends, strict=True)):
        rows = (where >= i) & (where <= j - 1)
        line, _ = _line(ring[rows], shard[rows], t[rows], split_sync)
        coefs.append(line)
        if r < len(starts) - 1:
            bounds.append(float(np.sqrt(sizes[j - 1] * sizes[j])))
    return RegimeFit(bounds=tuple(bounds), coefs=tuple(coefs))


def fit_regimes(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray, num_regimes: int
) -> RegimeFit | None:
    """The best segmentation into `num_regimes` ranges (None when there are
    too few distinct sizes for that many)."""
    sizes, where, cost, split_sync = _segment_costs(ring, shard, t)
    starts = _segment(cost, num_regimes)
    if starts is None:
        return None
    return _build(ring, shard, t, sizes, where, starts, split_sync)


def leave_size_out_errors(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray, counts: tuple[int, ...]
) -> dict[int, np.ndarray]:
    """For each regime count in `counts`: |relative error| of every point
    of every inner size (neither the smallest nor the largest), predicted by
    a fit without that size. A count with too few sizes is left out."""
    sizes = np.unique(shard)
    errors: dict[int, list[float]] = {k: [] for k in counts}
    for size in sizes[1:-1]:
        held = shard == size
        r, s, tt = ring[~held], shard[~held], t[~held]
        if counts == (1,):  # one line: no segmentation to search
            if len(np.unique(s)) < MIN_SIZES:
                return {}
            line, _ = _line(r, s, tt, len(np.unique(r)) > 1)
            fit = RegimeFit(bounds=(), coefs=(line,))
            errors[1].extend(np.abs(fit.predict(ring[held], shard[held]) / t[held] - 1.0))
            continue
        fold_sizes, where, cost, split_sync = _segment_costs(r, s, tt)
        for k in counts:
            starts = _segment(cost, k)
            if starts is None:
                errors.pop(k, None)
                continue
            if k not in errors:
                continue
            fit = _build(r, s, tt, fold_sizes, where, starts, split_sync)
            errors[k].extend(np.abs(fit.predict(ring[held], shard[held]) / t[held] - 1.0))
    return {k: np.asarray(v) for k, v in errors.items() if v}


def choose_regime_count(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray
) -> tuple[int, np.ndarray]:
    """K with the least median leave-one-size-out error, and that K's
    errors. Regimes must beat the straight line by MIN_GAIN (relative), so
    a straight-line curve with noise keeps one regime; each further regime
    must beat the best so far by MIN_EXTRA_GAIN."""
    line_only = leave_size_out_errors(ring, shard, t, (1,))
    if 1 not in line_only:
        return 1, np.array([])
    line_err = float(np.median(line_only[1]))
    if line_err <= MIN_ABS_GAIN:
        return 1, line_only[1]  # the line already predicts to rounding error
    by_count = leave_size_out_errors(ring, shard, t, tuple(range(1, MAX_REGIMES + 1)))
    chosen, chosen_err = 1, line_err
    for k in sorted(by_count):
        err = float(np.median(by_count[k]))
        # regimes must beat the line clearly; then each extra regime must still help
        gain = MIN_GAIN if chosen == 1 else MIN_EXTRA_GAIN
        if k > 1 and err < chosen_err * (1.0 - gain) and chosen_err - err > MIN_ABS_GAIN:
            chosen, chosen_err = k, err
    return chosen, by_count[chosen]


def _marginal_line(
    ring: np.ndarray, shard: np.ndarray, t: np.ndarray
) -> tuple[tuple[float, float, float], float] | None:
    """The line through the two largest sizes (one ring size only): its
    (launch, 0, seconds per byte) and the growth of the average bandwidth
    per doubling of the size between them. None when it is no rate (more
    than one ring size, a time that does not grow, a negative launch)."""
    if len(np.unique(ring)) != 1:
        return None
    sizes = np.unique(shard)
    if len(sizes) < 2:
        return None
    small, large = sizes[-2], sizes[-1]
    t_small = float(np.median(t[shard == small]))
    t_large = float(np.median(t[shard == large]))
    steps = float(ring[0]) - 1.0
    inv_bw = (t_large - t_small) / (steps * (large - small))
    launch = t_large - steps * large * inv_bw
    if inv_bw <= 0.0 or launch < 0.0:
        return None
    growth = (large / t_large) / (small / t_small)
    per_doubling = growth ** (1.0 / np.log2(large / small)) - 1.0
    return (launch, 0.0, inv_bw), float(per_doubling)


def with_top_regime(
    fit: RegimeFit, ring: np.ndarray, shard: np.ndarray, t: np.ndarray
) -> RegimeFit:
    """`fit` plus a regime for pieces above the largest measured one, which
    continues from the top of the measured range (module docstring): the
    marginal rate of the two largest sizes when the average bandwidth grew
    by at most TOP_GROWTH_MAX over the last doubling and that rate is faster
    than the fitted one (bandwidth does not fall with size), else the line
    through the TOP_SIZES largest sizes (when the last regime spans more
    sizes than that; otherwise the last regime itself). Inside the measured
    range nothing changes; `extrapolation` says which was used."""
    sizes = np.unique(shard)
    last_sizes = sizes[sizes > fit.bounds[-1]] if fit.bounds else sizes
    top_line = fit.coefs[-1]
    basis = f"the last regime's line ({len(last_sizes)} sizes)"
    if len(last_sizes) > TOP_SIZES:
        top = shard >= sizes[-TOP_SIZES]
        top_line, _ = _line(ring[top], shard[top], t[top], len(np.unique(ring[top])) > 1)
        basis = f"the line through the {TOP_SIZES} largest sizes"
    marginal = _marginal_line(ring, shard, t)
    climbing = False
    if marginal is not None:
        line, growth = marginal
        if growth <= TOP_GROWTH_MAX and line[2] < top_line[2]:
            top_line = line
            basis = (
                "the marginal rate of the two largest sizes (average bandwidth "
                f"{growth:+.0%} over the last doubling)"
            )
        elif growth > TOP_GROWTH_MAX:
            climbing = True
            basis += (
                f": the average bandwidth still grew {growth:+.0%} over the last "
                "doubling, so larger sizes will likely run faster than predicted"
            )
    if top_line == fit.coefs[-1] and len(last_sizes) <= TOP_SIZES:
        return replace(fit, extrapolation=basis, still_climbing=climbing)
    return RegimeFit(
        bounds=(*fit.bounds, float(sizes[-1])),
        coefs=(*fit.coefs, top_line),
        extrapolation=basis,
        still_climbing=climbing,
    )


def regime_fitter(ring: np.ndarray, shard: np.ndarray, t: np.ndarray, num_regimes: int):
    """A refitting function for crossval.cross_validate: the regime model
    with `num_regimes` regimes (fewer when the subset has too few sizes)."""

    def fit(mask: np.ndarray):
        for k in range(num_regimes, 0, -1):
            found = fit_regimes(ring[mask], shard[mask], t[mask], k)
            if found is not None:
                return with_top_regime(found, ring[mask], shard[mask], t[mask]).predict
        return None

    return fit
