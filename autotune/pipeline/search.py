"""A fast upper bound: local search over recomputation with the layer counts
fixed.

Why: the MILP proves a bound fastest when it is given a cutoff close to the
optimum (ilp.py, `cutoff_s`), and the plan that supplies it must come in well
under a second, before the MILP that finds the optimum has finished.

With every chunk's layers per kind fixed, a stage's choice is one vector of
recomputation seconds per local chunk; the step time is non-decreasing in
each, so only Pareto-minimal vectors that fit the stage's memory matter.
The search starts every stage on its least total recomputation and then,
stage by stage, switches to whichever of the stage's vectors scores best with
the others held, until a whole sweep changes nothing. The score is the step
plus a small weight on summed end times (`_scores`); with a maximum as the
objective most single moves tie, and the secondary term is what moves the
search across those plateaus. Two such terms alternate; the plan with the
shortest step over all phases is returned.
All of a stage's candidates are scored at once by one longest-path pass over
the schedule graph, vectorised over the candidates (`makespans_s`).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy

from autotune.pipeline.assignment import (
    Assignment,
    alive_vectors,
    chunk_backward_s,
    chunk_forward_s,
)
from autotune.pipeline.problem import Problem, Schedule
from autotune.pipeline.schedule import stage_orders

# Candidate vectors scored per stage and move (the ones with the least total
# recomputation are kept; a heuristic, so any subset is sound).
MAX_CANDIDATES = 768
MAX_SWEEPS = 12
TIE_WEIGHT = 1e-6
PHASES = 4


@dataclass(frozen=True)
class Graph:
    """The schedule's dependency graph, its ops numbered in level order (the
    ops of one level are a contiguous slice, so a longest-path pass reads
    and writes slices): op i takes duration column `kind[i]` (c for F_c,
    num + c for B_c) and waits for `pred1[i]`, `pred2[i]` (index `num_ops`
    means none; both are earlier in the order)."""

    pred1: numpy.ndarray
    pred2: numpy.ndarray
    kind: numpy.ndarray
    num_ops: int
    last_ops: numpy.ndarray
    # Per level: (first op, one past the last, its ops' pred1 then pred2 in
    # one array, their kinds), indexed once per graph rather than on every
    # longest-path pass.
    steps: tuple[tuple[int, int, numpy.ndarray, numpy.ndarray], ...]
    # The same as plain lists, for the one-plan pass (`_end_times_one`).
    lists: tuple[list[int], list[int], list[int]]


@lru_cache(maxsize=16)
def schedule_graph(
    num_stages: int, num_chunks: int, num_micro_batches: int, interleaved: bool
) -> Graph:
    """The simulator's rules as arrays: an op waits for its stage
    predecessor and its input (forward of the previous chunk, backward of the
    next chunk, or the forward of the last chunk). Levels by Kahn's
    algorithm in topological waves (each wave: every op whose predecessors
    have all been placed); RuntimeError if an op can never run."""
    pp, num, m = num_stages, num_stages * num_chunks, num_micro_batches
    ops = numpy.array(stage_orders(pp, num_chunks, m, interleaved), dtype=numpy.int64)
    per_stage = ops.shape[1]
    total = pp * per_stage  # op ids: stage by stage, each in its run order
    ids = numpy.arange(total)
    is_fwd = ops[:, :, 0].reshape(total).astype(bool)
    chunk = ops[:, :, 1].reshape(total) * pp + numpy.repeat(numpy.arange(pp), per_stage)
    micro = ops[:, :, 2].reshape(total)
    where = numpy.empty((2, num, m), dtype=numpy.int64)  # [is_forward, chunk, micro-batch]
    where[is_fwd.astype(numpy.int64), chunk, micro] = ids
    pred1 = numpy.where(ids % per_stage == 0, total, ids - 1)
    pred2 = numpy.full(total, total)
    f = is_fwd & (chunk > 0)
    pred2[f] = where[1, chunk[f] - 1, micro[f]]
    b = ~is_fwd & (chunk < num - 1)
    pred2[b] = where[0, chunk[b] + 1, micro[b]]
    b = ~is_fwd & (chunk == num - 1)
    pred2[b] = where[1, chunk[b], micro[b]]
    kind = numpy.where(is_fwd, chunk, num + chunk)
    # Kahn's waves: the depth of an op is one more than its deeper predecessor.
    succ1 = numpy.append(numpy.where(ids % per_stage == per_stage - 1, total, ids + 1), total)
    succ2 = numpy.full(total + 1, total)
    has2 = pred2 < total
    succ2[pred2[has2]] = ids[has2]
    waiting = numpy.append((pred1 < total).astype(numpy.int64) + has2, -1)
    depth = numpy.zeros(total + 1, dtype=numpy.int64)
    wave = numpy.nonzero(waiting[:total] == 0)[0]
    placed, level = 0, 0
    while wave.size:
        depth[wave] = level
        placed += wave.size
        level += 1
        nxt = numpy.concatenate((succ1[wave], succ2[wave]))
        nxt = nxt[nxt < total]
        numpy.subtract.at(waiting, nxt, 1)
        wave = numpy.unique(nxt[waiting[nxt] == 0])
    if placed != total:
        raise RuntimeError("schedule deadlocked: an op waits on one that never runs")
    last = ids[per_stage - 1 :: per_stage]
    # Renumber in level order (stable within a level).
    order_of = numpy.argsort(depth[:total], kind="stable")
    new_of = numpy.empty(total + 1, dtype=numpy.int64)
    new_of[order_of] = numpy.arange(total)
    new_of[total] = total
    pred1, pred2 = new_of[pred1[order_of]], new_of[pred2[order_of]]
    kind, last = kind[order_of], new_of[last]
    bounds = numpy.searchsorted(depth[:total][order_of], numpy.arange(level + 1))
    steps = tuple(
        (int(a), int(b), numpy.concatenate([pred1[a:b], pred2[a:b]]), kind[a:b])
        for a, b in itertools.pairwise(bounds)
    )
    lists = (pred1.tolist(), pred2.tolist(), kind.tolist())
    return Graph(pred1, pred2, kind, total, last, steps, lists)


def _end_times_one(graph: Graph, durations_s: numpy.ndarray) -> numpy.ndarray:
    """_end_times for one plan: a plain loop over the ops, several times
    faster than the per-level array pass when there is one column; the same
    maxima and additions, so the same floats."""
    first, second, kind = graph.lists
    dur = durations_s[0].tolist()
    end = [0.0] * (graph.num_ops + 1)
    for i in range(graph.num_ops):
        x, y = end[first[i]], end[second[i]]
        end[i] = (x if x > y else y) + dur[kind[i]]
    return numpy.array(end)[:, None]


class _Work(threading.local):
    """Longest-path work done by this thread, in reference seconds."""

    done_s = 0.0


_WORK = _Work()
# The cost model of one longest-path pass, in seconds, least squares over
# 5 schedule shapes (64 to 3072 ops) x K = 2-768 on a 2-core x86 machine
# (within about 40%): a call, a level, an op-column; a one-plan pass per op.
# It only has to grow with the real cost: it makes a budget of work that is
# the same on every machine and under any load (perturb.py).
CALL_S, LEVEL_S, OP_COLUMN_S, ONE_PLAN_OP_S = 1.5e-4, 4.9e-6, 3.9e-9, 1.6e-7
# Up to this many columns, one plain loop per column is faster than the
# array pass: with two columns on the family's graphs (1,024-3,072 ops)
# 0.30 / 0.44 / 0.63 / 0.92 ms against 0.46 / 0.61 / 0.81 / 1.22 ms on an
# idle 2-core machine; at three they are about even
# (benchmarks/longest_path.py). Two columns are about half of the climbs'
# passes.
LOOP_COLUMNS = 2


def work_done_s() -> float:
    """Longest-path work this thread has done so far, in reference seconds
    (CALL_S ... ONE_PLAN_OP_S): a clock that does not depend on the load."""
    return _WORK.done_s


def end_times_by_column(graph: Graph, durations_s: numpy.ndarray) -> numpy.ndarray:
    """The end times of `_end_times` (one row per op and the "no
    predecessor" row, one column per plan), as one plain loop per plan
    (`_end_times_one`); no work is counted here."""
    columns = durations_s.shape[0]
    return numpy.hstack([_end_times_one(graph, durations_s[k : k + 1]) for k in range(columns)])


def _end_times(graph: Graph, durations_s: numpy.ndarray) -> numpy.ndarray:
    """End time of every op (rows; the last row is the 'no predecessor'
    zero) for each row of `durations_s` (K x 2 num: F_c then B_c): per
    level, end = max(end of pred1, end of pred2) + duration."""
    columns = durations_s.shape[0]
    if columns == 1:
        _WORK.done_s += ONE_PLAN_OP_S * graph.num_ops
        return _end_times_one(graph, durations_s)
    _WORK.done_s += CALL_S + LEVEL_S * len(graph.steps) + OP_COLUMN_S * graph.num_ops * columns
    if columns <= LOOP_COLUMNS:
        # The same floats, faster: see LOOP_COLUMNS. The work counted stays
        # the array pass's, so budgets end where they did.
        return end_times_by_column(graph, durations_s)
    end = numpy.zeros((graph.num_ops + 1, columns))
    dur = numpy.ascontiguousarray(durations_s.T)
    for a, b, preds, kind in graph.steps:
        both = end[preds]
        span = end[a:b]
        numpy.maximum(both[: b - a], both[b - a :], out=span)
        span += dur[kind]
    return end


def makespans_s(graph: Graph, durations_s: numpy.ndarray) -> numpy.ndarray:
    """Longest path for each row of `durations_s` (K x 2 num: F_c then B_c):
    the simulated step time of K plans at once."""
    return _end_times(graph, durations_s)[graph.last_ops].max(axis=0)


def steps_and_finishes_s(
    graph: Graph, durations_s: numpy.ndarray
) -> tuple[numpy.ndarray, numpy.ndarray]:
    """For each row of `durations_s` (as makespans_s), from one longest-path
    pass: the step (the latest stage's finish) and the sum over stages of
    each stage's finish, seconds. The sum is layer_search's second measure
    on a plateau of equal steps."""
    finish = _end_times(graph, durations_s)[graph.last_ops]
    return finish.max(axis=0), finish.sum(axis=0)


def plan_step_s(problem: Problem, a: Assignment) -> float:
    """The simulated step time of `a` (simulator.py's makespan, seconds) as
    the schedule graph's longest path over its chunk times F_c, B_c
    (assignment.py), without the replay's blocks and memory."""
    num = problem.num_virtual
    durations = numpy.array(
        [
            [chunk_forward_s(problem, a, c) for c in range(num)]
            + [chunk_backward_s(problem, a, c) for c in range(num)]
        ]
    )
    graph = schedule_graph(
        problem.num_stages,
        problem.num_chunks,
        problem.num_micro_batches,
        problem.schedule is Schedule.INTERLEAVED,
    )
    return float(makespans_s(graph, durations)[0])


def _scores(graph: Graph, durations_s: numpy.ndarray, by_ops: bool) -> numpy.ndarray:
    """Step time plus TIE_WEIGHT times the summed end times of every op
    (`by_ops`) or of every stage's last op: among plans with (nearly) the
    same step, prefer the one that leaves more slack elsewhere for later
    moves. The two criteria escape different plateaus, so the search
    alternates them and keeps the plan with the shortest step."""
    end = _end_times(graph, durations_s)
    finish = end[graph.last_ops]
    ties = end[:-1].sum(axis=0) if by_ops else finish.sum(axis=0)
    return finish.max(axis=0) + TIE_WEIGHT * ties


def _chunk_front(problem: Problem, per_group: tuple[int, ...]):
    """Pareto-minimal (recompute seconds, activation bytes, option counts
    [g][o]) for a chunk holding `per_group` layers of each kind."""
    points = [(0.0, 0.0, tuple(tuple(0 for _ in problem.options) for _ in problem.groups))]
    for g, count in enumerate(per_group):
        if count == 0:
            continue
        grp = problem.groups[g]
        allowed = [o for o, a in enumerate(grp.activation_bytes) if a is not None]
        mine = []
        for combo in itertools.combinations_with_replacement(allowed, count):
            r = sum(grp.backward_s * problem.options[o].backward_time_coef for o in combo)
            a = sum(grp.activation_bytes[o] for o in combo)
            counts = tuple(combo.count(o) for o in range(len(problem.options)))
            mine.append((r, a, counts))
        mine = _pareto2(mine)
        merged = []
        for r0, a0, c0 in points:
            for r1, a1, c1 in mine:
                new = list(c0)
                new[g] = c1
                merged.append((r0 + r1, a0 + a1, tuple(new)))
        points = _pareto2(merged)
    return points


def _pareto2(points):
    points.sort(key=lambda p: (p[0], p[1]))
    out = []
    for p in points:
        if not out or p[1] < out[-1][1] * (1 - 1e-12):
            out.append(p)
    return out


def _stage_candidates(problem: Problem, layers: list[list[int]], stage: int):
    """Memory-feasible, Pareto-minimal per-chunk recomputation choices of a
    stage: (recompute seconds per local chunk [K x v], counts per chunk).
    Cached: the quick start, the start from the relaxation, the layer moves
    and the polish ask for the same stages' layouts again and again."""
    pp, num = problem.num_stages, problem.num_virtual
    own = tuple(tuple(layers[c]) for c in range(stage, num, pp))
    return _candidates_of(problem, stage, own)


@lru_cache(maxsize=4096)
def _candidates_of(problem: Problem, stage: int, own: tuple[tuple[int, ...], ...]):
    """_stage_candidates for the stage's own layers (`own[k][g]`, local
    chunk k); callers only read the result."""
    pp, num = problem.num_stages, problem.num_virtual
    chunks = list(range(stage, num, pp))
    layers = {c: own[k] for k, c in enumerate(chunks)}
    fronts = [_chunk_front(problem, tuple(layers[c])) for c in chunks]
    static = problem.constant_bytes + sum(
        problem.groups[g].parameter_bytes * layers[c][g]
        for c in chunks
        for g in range(len(problem.groups))
    )
    static += (problem.head.memory_bytes if stage == 0 else 0.0) + (
        problem.tail.memory_bytes if stage == pp - 1 else 0.0
    )
    budget = problem.memory_cap_bytes * (1 + 1e-9) - static
    vecs = numpy.array(alive_vectors(problem)[stage], dtype=float)
    sizes = [len(f) for f in fronts]
    grid = numpy.array(list(itertools.product(*[range(n) for n in sizes])), dtype=numpy.int64)
    r = numpy.stack([numpy.array([p[0] for p in f])[grid[:, k]] for k, f in enumerate(fronts)], 1)
    a = numpy.stack([numpy.array([p[1] for p in f])[grid[:, k]] for k, f in enumerate(fronts)], 1)
    fits = (a @ vecs.T).max(axis=1) <= budget
    r, grid = r[fits], grid[fits]
    if len(r) == 0:
        return None
    order = numpy.argsort(r.sum(axis=1), kind="stable")
    r, grid = r[order], grid[order]
    keep: list[int] = []
    kept = numpy.empty_like(r)  # r[keep], grown in place
    for i in range(len(r)):
        if keep and (kept[: len(keep)] <= r[i] + 1e-15).all(axis=1).any():
            continue
        kept[len(keep)] = r[i]
        keep.append(i)
        if len(keep) >= MAX_CANDIDATES:
            break
    r, grid = r[keep], grid[keep]
    counts = [tuple(fronts[k][grid[i, k]][2] for k in range(len(chunks))) for i in range(len(r))]
    r.flags.writeable = False  # shared through the cache
    return r, counts


def _all_candidates(problem: Problem, layers: list[list[int]]):
    cands = []
    for s in range(problem.num_stages):
        found = _stage_candidates(problem, layers, s)
        if found is None:
            return None
        cands.append(found)
    return cands


def _plan(problem: Problem, cands, choice: list[int]) -> Assignment:
    pp, num = problem.num_stages, problem.num_virtual
    counts = [None] * num
    for s in range(pp):
        for k, c in enumerate(range(s, num, pp)):
            counts[c] = cands[s][1][choice[s]][k]
    return Assignment(tuple(counts))


def least_recompute_plan(problem: Problem, layers: list[list[int]]) -> Assignment | None:
    """Every stage on its least total recomputation that fits (the local
    search's start); None when some stage cannot fit at all."""
    cands = _all_candidates(problem, layers)
    return None if cands is None else _plan(problem, cands, [0] * problem.num_stages)


def local_search(problem: Problem, layers: list[list[int]]) -> Assignment | None:
    """Recomputation for fixed layers per chunk and kind (`layers[c][g]`),
    improved stage by stage from least_recompute_plan; never slower than
    that start. None when some stage cannot fit at all."""
    pp, num = problem.num_stages, problem.num_virtual
    graph = schedule_graph(
        pp, problem.num_chunks, problem.num_micro_batches, problem.schedule is Schedule.INTERLEAVED
    )
    cands = _all_candidates(problem, layers)
    if cands is None:
        return None
    base = numpy.zeros(2 * num)
    for c in range(num):
        for g, grp in enumerate(problem.groups):
            base[c] += grp.forward_s * layers[c][g]
            base[num + c] += grp.backward_s * layers[c][g]
    base[0] += problem.head.forward_s
    base[num] += problem.head.backward_s
    base[num - 1] += problem.tail.forward_s
    base[2 * num - 1] += problem.tail.backward_s
    choice = [0] * pp  # least total recomputation first
    durations = base.copy()
    for s in range(pp):
        for k, c in enumerate(range(s, num, pp)):
            durations[num + c] = base[num + c] + cands[s][0][0, k]

    def descend(choice, durations, by_ops):
        score = _scores(graph, durations[None, :], by_ops)[0]
        for _ in range(MAX_SWEEPS):
            improved = False
            for s in range(pp):
                r = cands[s][0]
                trial = numpy.repeat(durations[None, :], len(r), axis=0)
                for k, c in enumerate(range(s, num, pp)):
                    trial[:, num + c] = base[num + c] + r[:, k]
                scores = _scores(graph, trial, by_ops)
                i = int(numpy.argmin(scores))
                if scores[i] < score - 1e-15:
                    score, durations = scores[i], trial[i]
                    choice = [*choice[:s], i, *choice[s + 1 :]]
                    improved = True
            if not improved:
                break
        return choice, durations

    best_step = makespans_s(graph, durations[None, :])[0]
    best_choice = choice
    for phase in range(PHASES):
        choice, durations = descend(choice, durations, by_ops=phase % 2 == 0)
        step = makespans_s(graph, durations[None, :])[0]
        if step < best_step * (1 - 1e-12):
            best_step, best_choice = step, choice
        elif phase > 0:
            break
    return _plan(problem, cands, best_choice)
