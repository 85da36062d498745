"""Per-stage split floors: for every way a stage may split its layers over its
chunks, the least recomputation it needs to fit its memory cap, seen from a
few weightings of its chunks.

Why: the LP relaxation mixes layer counts and recomputation fractionally
inside a stage so that its memory lands exactly on the cap, and shifts the
recomputation to chunks off the critical path. The floors in bounds.py bound
a stage's total recomputation by its layer count but not how it spreads over
the chunks. Here the MILP gets one binary `y[s, sigma]` per stage s and split
sigma (layers per local chunk), with

    sum_sigma y[s, sigma] = 1
    X_{c_k} = sum_sigma sigma_k y[s, sigma]                 (each local chunk k)
    sum_k w_k R_{c_k} >= sum_sigma phi_sigma(w) y[s, sigma]  (each weighting w)

where X_c, R_c are a chunk's layers and recomputation seconds and

    phi_sigma(w) = min { sum_k w_k R_k : sigma_k layers on chunk k, options
                         chosen, the stage fits its cap }.

Exactly one split is chosen in any plan, so the rows hold for every plan
that fits: they cut off fractional points only. Branching on y fixes a
whole stage's layout at once, which is what closes the optimality gap (the
measurements are in docs/pipeline.md).

phi is a lower bound, exact for one kind of layer on a stage with one
Pareto-maximal alive vector (every stage of the benchmark). With several
kinds every layer may be of any kind; with several alive vectors each is
checked on its own (each is a necessary condition) and the largest of those
bounds is kept. Both are relaxations, so the rows stay valid.

Interleaved schedules only (v > 1); see stage_splits. Given a step time to
beat (the cutoff), only the splits that a faster plan could use are
enumerated (stage_step_floor_s: a stage's chain of ops plus the fill before
it and the drain after it), so with these rows the MILP holds only plans
faster than that step; it is always used together with the cutoff. A stage
with more splits than MAX_SPLITS_PER_STAGE gets no rows (they are optional).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy

from autotune.pipeline.assignment import alive_vectors
from autotune.pipeline.bounds import stage_floors
from autotune.pipeline.problem import Problem

MAX_SPLITS_PER_STAGE = 400
# A stage whose (recompute, bytes) front for some chunk and layer count is
# larger than this gets no rows (the exact fronts would be slow to combine).
MAX_FRONT = 4096


@dataclass(frozen=True)
class StageSplits:
    """Splits of one stage and their floors: `phi_s[i][j]` is the least
    recomputation seconds weighted by `weights[j]` with split `splits[i]`."""

    stage: int
    splits: tuple[tuple[int, ...], ...]
    weights: tuple[tuple[float, ...], ...]
    phi_s: tuple[tuple[float, ...], ...]


def weightings(num_chunks: int) -> tuple[tuple[float, ...], ...]:
    """Each chunk alone, all together, every pair, and each chunk doubled:
    the directions in which the floor rows support a stage's hull."""
    out: list[tuple[float, ...]] = []
    for k in range(num_chunks):
        out.append(tuple(1.0 if i == k else 0.0 for i in range(num_chunks)))
    if num_chunks > 1:
        out.append(tuple(1.0 for _ in range(num_chunks)))
    if num_chunks > 2:
        for a, b in itertools.combinations(range(num_chunks), 2):
            out.append(tuple(1.0 if i in (a, b) else 0.0 for i in range(num_chunks)))
        for k in range(num_chunks):
            out.append(tuple(2.0 if i == k else 1.0 for i in range(num_chunks)))
    return tuple(out)


def _items(problem: Problem, alive: int) -> list[tuple[float, float]]:
    """(recompute seconds, bytes on the stage) of one layer of any kind and
    allowed option, on a chunk with `alive` micro-batches alive."""
    raw = set()
    for g in problem.groups:
        for o, opt in enumerate(problem.options):
            act = g.activation_bytes[o]
            if act is not None:
                raw.add((g.backward_s * opt.backward_time_coef, g.parameter_bytes + alive * act))
    return sorted(raw)


def _pareto(r: numpy.ndarray, w: numpy.ndarray) -> tuple[numpy.ndarray, numpy.ndarray]:
    """Points not dominated in (r, w), sorted by r ascending (w descending)."""
    order = numpy.lexsort((w, r))
    r, w = r[order], w[order]
    best = numpy.minimum.accumulate(w)
    keep = numpy.ones(len(r), dtype=bool)
    keep[1:] = w[1:] < best[:-1] * (1 - 1e-12) - 1e-300
    return r[keep], w[keep]


@lru_cache(maxsize=256)
def _chunk_fronts(
    items: tuple[tuple[float, float], ...], max_layers: int
) -> tuple[tuple[numpy.ndarray, numpy.ndarray], ...]:
    """For t = 0..max_layers, the Pareto front of (summed recompute seconds,
    summed bytes) over multisets of t items (a dynamic programme over t)."""
    fronts = [(numpy.zeros(1), numpy.zeros(1))]
    for _ in range(max_layers):
        pr, pw = fronts[-1]
        r = numpy.concatenate([pr + ir for ir, _ in items])
        w = numpy.concatenate([pw + iw for _, iw in items])
        fronts.append(_pareto(r, w))
    return tuple(fronts)


def _last_chunk_min(
    cost: numpy.ndarray, used: numpy.ndarray, front, weight: float, budget: float
) -> float | None:
    """min_i cost_i + weight * r over the last chunk's front points whose
    bytes fit in budget - used_i. The front is sorted by r ascending and
    bytes descending, so the points that fit are a suffix and its first
    point has the least r."""
    r, w = front
    ascending = w[::-1]
    first_fit = len(w) - numpy.searchsorted(ascending, budget - used, side="right")
    ok = first_fit < len(w)
    if not ok.any():
        return None
    return float((cost[ok] + weight * r[first_fit[ok]]).min())


def _signature_floors(
    fronts, splits: list[tuple[int, ...]], weights, budget: float
) -> dict[tuple[int, ...], list[float] | None]:
    """phi for every split and weighting on one alive vector (`fronts[k][t]`
    is chunk k's front for t layers): a Pareto DP over the chunks, with the
    fronts of split prefixes cached per weighting."""
    out: dict[tuple[int, ...], list[float] | None] = {split: [] for split in splits}
    for weight in weights:
        prefixes: dict[tuple[int, ...], tuple[numpy.ndarray, numpy.ndarray] | None] = {
            (): (numpy.zeros(1), numpy.zeros(1))
        }

        def prefix(key, weight=weight, prefixes=prefixes):
            if key not in prefixes:
                before = prefix(key[:-1])
                if before is None:
                    prefixes[key] = None
                else:
                    r, w = fronts[len(key) - 1][key[-1]]
                    cost = (before[0][:, None] + weight[len(key) - 1] * r[None, :]).ravel()
                    used = (before[1][:, None] + w[None, :]).ravel()
                    fit = used <= budget
                    prefixes[key] = _pareto(cost[fit], used[fit]) if fit.any() else None
            return prefixes[key]

        for split in splits:
            row = out[split]
            if row is None:
                continue
            head = prefix(split[:-1])
            value = (
                None
                if head is None
                else _last_chunk_min(*head, fronts[-1][split[-1]], weight[-1], budget)
            )
            if value is None:
                out[split] = None
            else:
                row.append(value)
    return out


def _compositions(num_parts: int, low: int, total_max: int):
    """Tuples of num_parts integers >= low with sum <= total_max."""
    if num_parts == 0:
        yield ()
        return
    for first in range(low, total_max - low * (num_parts - 1) + 1):
        for rest in _compositions(num_parts - 1, low, total_max - first):
            yield (first, *rest)


def _stage_table(problem: Problem, vectors, splits, weights, budget: float, limit: int):
    """(kept splits, phi rows) for a stage with these alive vectors and this
    memory budget; (None, None) when a front is too large to be exact."""
    rows: dict[tuple[int, ...], list[float] | None] = {
        split: [0.0] * len(weights) for split in splits
    }
    for vec in vectors:
        fronts = [_chunk_fronts(tuple(_items(problem, a)), limit) for a in vec]
        if any(len(f[t][0]) > MAX_FRONT for f in fronts for t in range(limit + 1)):
            return None, None
        table = _signature_floors(fronts, splits, weights, budget)
        for split, values in table.items():
            if values is None or rows[split] is None:
                rows[split] = None
            else:
                rows[split] = [max(a, b) for a, b in zip(rows[split], values, strict=True)]
    kept = [split for split in splits if rows[split] is not None]
    return tuple(kept), tuple(tuple(rows[split]) for split in kept)


def stage_step_floor_s(problem: Problem, stage: int, layers: int, recompute_s: float) -> float:
    """A lower bound on the step of any plan whose stage `stage` holds
    `layers` body layers with `recompute_s` recomputation seconds per
    micro-batch. The stage's ops form one chain of the schedule; before its
    first op (forward of chunk `stage`, micro-batch 0) run the forwards of
    chunks 0..stage-1 of that micro-batch, and after its last (backward of
    chunk `stage`, last micro-batch) the backwards of chunks stage-1..0, so

        step >= sum_{c<stage} (F_c + B_c) + m * sum_{c on stage} (F_c + B_c)

    with every chunk holding at least min_layers_per_chunk layers of the
    cheapest kind, the head on chunk 0 and the tail on the last chunk."""
    per_layer = min(g.forward_s + g.backward_s for g in problem.groups)
    head = problem.head.forward_s + problem.head.backward_s
    tail = problem.tail.forward_s + problem.tail.backward_s
    fill = stage * problem.min_layers_per_chunk * per_layer + (head if stage > 0 else 0.0)
    busy = layers * per_layer + recompute_s
    busy += (head if stage == 0 else 0.0) + (tail if stage == problem.num_stages - 1 else 0.0)
    return fill + problem.num_micro_batches * busy


@lru_cache(maxsize=8)
def stage_splits(problem: Problem, max_step_s: float | None = None) -> tuple[StageSplits, ...]:
    """Split floors of every stage that has at most MAX_SPLITS_PER_STAGE
    memory-feasible splits. With `max_step_s`, only splits that some plan
    faster than it could use are kept (stage_step_floor_s); the MILP may
    then return only plans faster than `max_step_s`. Stages with more splits
    are left out (their rows are optional)."""
    pp, num = problem.num_stages, problem.num_virtual
    v = problem.num_chunks
    if v == 1:
        # One chunk per stage: a split is just the stage's layer count, the
        # rows carry no more than bounds.py's floors, and the extra binaries
        # made the DeepSeek-V3-like example 2-4 times slower (docs/pipeline.md).
        return ()
    low = problem.min_layers_per_chunk
    weights = weightings(v)
    ones = weights.index(tuple(1.0 for _ in range(v)))
    out = []
    cache: dict = {}
    for s, (floor, vectors) in enumerate(
        zip(stage_floors(problem), alive_vectors(problem), strict=True)
    ):
        limit = floor.max_layers
        if max_step_s is not None:
            while limit >= 0 and stage_step_floor_s(problem, s, limit, 0.0) >= max_step_s:
                limit -= 1
        if limit < low * v:
            continue
        # Generate one more than allowed at most: the full list can run to
        # hundreds of thousands when a stage may hold many layers.
        splits = list(itertools.islice(_compositions(v, low, limit), MAX_SPLITS_PER_STAGE + 1))
        if len(splits) > MAX_SPLITS_PER_STAGE:
            continue
        static = problem.constant_bytes
        static += (problem.head.memory_bytes if s == 0 else 0.0) + (
            problem.tail.memory_bytes if s == pp - 1 else 0.0
        )
        budget = problem.memory_cap_bytes * (1 + 1e-9) - static
        key = (tuple(vectors), budget, limit)
        if key not in cache:
            cache[key] = _stage_table(problem, vectors, splits, weights, budget, limit)
        kept, phis = cache[key]
        if kept is None:
            continue
        if max_step_s is not None:
            pairs = [
                (split, phi)
                for split, phi in zip(kept, phis, strict=True)
                if stage_step_floor_s(problem, s, sum(split), phi[ones]) < max_step_s
            ]
            kept, phis = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
        if kept:
            out.append(StageSplits(s, tuple(kept), weights, tuple(phis)))
    assert all(st.stage < pp for st in out) and num == pp * v
    return tuple(out)
