"""Valid inequalities for the stage-balancing MILP: the least recomputation
a stage needs to fit its memory cap, as a function of its layer count.

Why: the LP relaxation spreads fractional recomputation over the layers of a
stage so that its memory lands exactly on the cap; an integer plan cannot, so
the relaxation's bound sits below the optimum by about one recomputed layer
per memory-bound stage, and branching has to repair every such stage at
once. A floor `R_s >= phi_s(X_s)` on the stage's recomputation time, with
`phi_s` computed exactly for integer layers, removes most of that slack.

Derivation. Stage s with static memory S_s (constant, head/tail extra) holds
X_s layers; take one Pareto-maximal alive vector a of the stage (schedule.py)
and a_min = min_k a_k. Every layer of kind g with option o costs at least
w_go = p_g + a_min * act_go bytes (its parameters, plus its activation
times the fewest micro-batches alive on any of the stage's chunks) and adds
r_go = b_g * coef_o seconds of recomputation to the backward. Any plan that
fits therefore satisfies sum w <= cap - S_s, so its recomputation time is at
least

    psi_a(t) = min { sum r : t layers, options chosen, sum w <= cap - S_s }

(the kinds' counts and the split over chunks are relaxed, so psi is a lower
bound, exact for one kind on a stage whose chunks hold equally many
micro-batches). phi_s = max_a psi_a is non-decreasing in t (dropping a layer
frees memory and costs nothing). The MILP gets the lower convex envelope of
phi_s over t = 0..t_max as linear cuts, plus X_s <= t_max, the most layers
any plan can fit on the stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

from autotune.pipeline.assignment import alive_vectors
from autotune.pipeline.problem import Problem

# Past this many layers on one stage the exact table is not built (a stage
# that can fit more gets no cuts).
MAX_EXACT_LAYERS = 64


@dataclass(frozen=True)
class StageFloor:
    """Cuts `recompute_s >= intercept + slope * layers` for one stage
    (seconds, layers), and the largest layer count the stage can fit."""

    stage: int
    max_layers: int
    cuts: tuple[tuple[float, float], ...]  # (slope_s_per_layer, intercept_s)


def _items(problem: Problem, a_min: int) -> list[tuple[float, float]]:
    """(recompute seconds, bytes) of one layer for every kind and allowed
    option, Pareto-pruned: no item both slower and heavier than another."""
    raw = []
    for g in problem.groups:
        for o, opt in enumerate(problem.options):
            act = g.activation_bytes[o]
            if act is not None:
                raw.append((g.backward_s * opt.backward_time_coef, g.parameter_bytes + a_min * act))
    raw.sort()
    kept: list[tuple[float, float]] = []
    for r, w in raw:
        if not kept or w < kept[-1][1]:
            kept.append((r, w))
    return kept


def least_recompute_s(items: list[tuple[float, float]], budget_bytes: float, max_t: int):
    """psi(t) for t = 0..max_t (None when t layers cannot fit): the least
    summed recomputation seconds of t items, repeats allowed, whose summed
    bytes stay within budget. Dynamic programme over the items in turn,
    keeping per layer count the Pareto front of (seconds, bytes)."""
    fronts: list[list[tuple[float, float]]] = [[(0.0, 0.0)]] + [[] for _ in range(max_t)]
    for r, w in items:
        new = [list(f) for f in fronts]
        for t in range(max_t + 1):
            for cost, used in fronts[t]:
                for k in range(1, max_t - t + 1):
                    if used + k * w > budget_bytes:
                        break
                    new[t + k].append((cost + k * r, used + k * w))
        fronts = [_pareto(f) for f in new]
    return [min(c for c, _ in f) if f else None for f in fronts]


def _pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    points.sort()
    out: list[tuple[float, float]] = []
    for c, w in points:
        if not out or w < out[-1][1] - 1e-9 * max(1.0, abs(w)):
            out.append((c, w))
    return out


def _lower_envelope(points: list[tuple[int, float]]) -> list[tuple[float, float]]:
    """Lines (slope, intercept) of the lower convex hull of points sorted by
    t, keeping only rising segments (the floor R >= 0 holds anyway)."""
    hull: list[tuple[int, float]] = []
    for p in points:
        while len(hull) >= 2:
            (t1, y1), (t2, y2) = hull[-2], hull[-1]
            if (y2 - y1) * (p[0] - t1) >= (p[1] - y1) * (t2 - t1):
                hull.pop()
            else:
                break
        hull.append(p)
    lines = []
    for (t1, y1), (t2, y2) in pairwise(hull):
        slope = (y2 - y1) / (t2 - t1)
        if slope > 0 and (not lines or slope > lines[-1][0] * (1 + 1e-9)):
            lines.append((slope, y1 - slope * t1))
    return lines


@dataclass(frozen=True)
class StageTable:
    """`phi[t]`: the least recomputation seconds (per micro-batch) of any
    `t` layers that fit the stage (None: `t` layers cannot fit), for
    t = 0..len(phi) - 1; `complete` is False when the table stops at
    MAX_EXACT_LAYERS before the stage's real limit."""

    stage: int
    phi: tuple[float | None, ...]
    complete: bool


@lru_cache(maxsize=8)
def stage_tables(problem: Problem) -> tuple[StageTable, ...]:
    """phi_s(t) of every stage (the derivation above), exact for integer t.
    Cached per problem (frozen, hashable)."""
    pp, num = problem.num_stages, problem.num_virtual
    out = []
    seen: dict[tuple[int, float, int], list[float | None]] = {}
    for s, vectors in enumerate(alive_vectors(problem)):
        static = problem.constant_bytes
        static += (problem.head.memory_bytes if s == 0 else 0.0) + (
            problem.tail.memory_bytes if s == pp - 1 else 0.0
        )
        # A hair of slack so a plan exactly at the cap is never cut off.
        budget = problem.memory_cap_bytes * (1 + 1e-9) - static
        # Layers the other chunks must keep bound this stage's share.
        most = problem.num_layers - problem.min_layers_per_chunk * (num - len(vectors[0]))
        most = max(0, min(most, MAX_EXACT_LAYERS))
        phi: list[float | None] = [0.0] * (most + 1)
        for vec in vectors:
            # Stages with the same fewest alive micro-batches and budget share
            # one table (most interior stages of a long pipeline).
            key = (min(vec), budget, most)
            if key not in seen:
                seen[key] = least_recompute_s(_items(problem, min(vec)), budget, most)
            psi = seen[key]
            phi = [
                None if p is None or q is None else max(p, q) for p, q in zip(phi, psi, strict=True)
            ]
        complete = phi[-1] is None or most < MAX_EXACT_LAYERS
        out.append(StageTable(s, tuple(phi), complete))
    return tuple(out)


@lru_cache(maxsize=8)
def stage_floors(problem: Problem) -> tuple[StageFloor, ...]:
    """Per stage: the recomputation floor cuts and the most layers that fit.

    Cached per problem (frozen, hashable): the balancer solves the same
    problem several times (relaxation, start, main solve, diagnosis)."""
    out = []
    for table in stage_tables(problem):
        s, phi = table.stage, table.phi
        feasible = [t for t, p in enumerate(phi) if p is not None]
        if not feasible:
            out.append(StageFloor(s, -1, ()))
            continue
        t_max = feasible[-1]
        if t_max == MAX_EXACT_LAYERS:
            # The table stops short of the stage's real limit; a rising line
            # could cut off larger counts, so this stage gets no cuts.
            out.append(StageFloor(s, problem.num_layers, ()))
            continue
        cuts = _lower_envelope([(t, phi[t]) for t in feasible])
        out.append(StageFloor(s, t_max, tuple(cuts)))
    return tuple(out)
