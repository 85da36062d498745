"""A feasible plan first, then a better one: repair, layer moves, polish.

Why: the MILP is only as fast as the plan it starts from, and when no even
split fits the cap it used to start from nothing. Three deterministic steps,
each bounded by a count of moves or of work (not by the clock, so the same problem gives
the same plan on any machine):

- `repair`: while some stage cannot fit even with every layer on its most
  memory-saving option, move one layer off the worst stage to a neighbouring
  chunk (model order is kept: the last layer of chunk c to chunk c+1, or the
  first to c-1), choosing the move that leaves the receiving stage the most
  room. Then the recomputation search (search.py) picks the options.
- `improve_layers`: hill-climbing over the same one-layer boundary moves
  and moves between a stage's chunks (or, `far`, to any chunk); after a
  move only the stages whose layers changed re-choose their recomputation
  (every other stage keeps its choice), and a move is kept when the
  simulated step drops (ties: the rule below).
- `polish`: with the layers fixed, each stage in turn takes the candidate
  with the least recomputation that does not lengthen the step.

Tie-break rule for plans with the same step time (within 1e-9 relative):
least total recomputation seconds, then the most even layers (least sum of
squared layers per stage), then the smaller counts in model order.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy

from autotune.pipeline.assignment import Assignment, alive_vectors, layers_in_order
from autotune.pipeline.deadline import past
from autotune.pipeline.problem import Problem, Schedule
from autotune.pipeline.search import (
    _stage_candidates,
    local_search,
    makespans_s,
    plan_step_s,
    schedule_graph,
    steps_and_finishes_s,
    work_done_s,
)

MAX_REPAIR_MOVES = 2000
MAX_LAYER_MOVES = 300
REL_TIE = 1e-9
# A plateau move (improve_layers) must lower the sum of the stages'
# finishes by more than this fraction: above the longest path's rounding,
# small enough to take any real shortening of a late stage.
PLATEAU_REL = 1e-6


def tie_key(problem: Problem, a: Assignment) -> tuple:
    """Sort key of the tie-break rule among equally fast plans (smaller is
    better): total recomputation seconds per micro-batch, the sum of squared
    layers per stage, then the counts in model order."""
    recompute = sum(
        g.backward_s * problem.options[o].backward_time_coef * n
        for c in range(problem.num_virtual)
        for gi, g in enumerate(problem.groups)
        for o, n in enumerate(a.counts[c][gi])
    )
    pp = problem.num_stages
    per_stage = [
        sum(a.layers_in_chunk(c) for c in range(s, problem.num_virtual, pp)) for s in range(pp)
    ]
    return (round(recompute, 12), sum(x * x for x in per_stage), a.counts)


def better(
    problem: Problem, a: Assignment, a_step: float, b: Assignment | None, b_step: float
) -> bool:
    """True when plan a beats plan b (None = no plan): a shorter step beyond
    the tie tolerance, else the tie-break rule."""
    if b is None:
        return True
    if a_step < b_step * (1 - REL_TIE):
        return True
    if a_step > b_step * (1 + REL_TIE):
        return False
    return tie_key(problem, a) < tie_key(problem, b)


def _least_act(problem: Problem) -> list[float]:
    return [min(a for a in g.activation_bytes if a is not None) for g in problem.groups]


def _static(problem: Problem, layers: list[list[int]], stage: int) -> float:
    pp = problem.num_stages
    total = problem.constant_bytes
    total += problem.head.memory_bytes if stage == 0 else 0.0
    total += problem.tail.memory_bytes if stage == pp - 1 else 0.0
    for c in range(stage, problem.num_virtual, pp):
        total += sum(g.parameter_bytes * layers[c][i] for i, g in enumerate(problem.groups))
    return total


def least_peak_bytes(problem: Problem, layers: list[list[int]], stage: int) -> float:
    """A stage's peak memory with every layer on its most memory-saving
    option: below the cap for some choice of options iff this is."""
    least = _least_act(problem)
    pp = problem.num_stages
    acts = [
        sum(least[i] * layers[c][i] for i in range(len(problem.groups)))
        for c in range(stage, problem.num_virtual, pp)
    ]
    peak = max(
        sum(k * a for k, a in zip(vec, acts, strict=True)) for vec in alive_vectors(problem)[stage]
    )
    return _static(problem, layers, stage) + peak


def _moves(problem: Problem, layers: list[list[int]], chunk: int):
    """Layouts with one layer moved out of `chunk` to a neighbour chunk."""
    low = problem.min_layers_per_chunk
    if sum(layers[chunk]) <= low:
        return
    if chunk + 1 < problem.num_virtual:
        g = max(i for i, n in enumerate(layers[chunk]) if n)
        new = [list(r) for r in layers]
        new[chunk][g] -= 1
        new[chunk + 1][g] += 1
        yield chunk + 1, new
    if chunk > 0:
        g = min(i for i, n in enumerate(layers[chunk]) if n)
        new = [list(r) for r in layers]
        new[chunk][g] -= 1
        new[chunk - 1][g] += 1
        yield chunk - 1, new


def _stage_moves(problem: Problem, layers: list[list[int]], chunk: int):
    """Layouts with one layer moved out of `chunk` to the same stage's next
    or previous chunk (c + pp, c - pp). Model order is kept by shifting every
    chunk boundary in between by one layer: the chunks between keep their
    counts (with several kinds, their kinds may shift), so mostly one stage
    changes. Such a move trades a layer between a stage's chunks, which hold
    different numbers of micro-batches alive and sit at different places on
    the critical path; the boundary moves reach it only through a chain of
    moves across every stage in between, each of which may be worse."""
    pp, num = problem.num_stages, problem.num_virtual
    yield from _transfers(
        problem, layers, chunk, [t for t in (chunk + pp, chunk - pp) if 0 <= t < num]
    )


def _far_moves(problem: Problem, layers: list[list[int]], chunk: int):
    """Layouts with one layer moved out of `chunk` to any chunk that is not
    its neighbour (those are `_moves`), the chunks in between keeping their
    counts as in `_stage_moves`, which these include: the one-layer moves of
    the layer counts themselves. Targets on the stages with the least
    forward and backward seconds per micro-batch come first, then the
    nearest, then the lower (the climb keeps the first move that pays).

    Why: a layout a few percent faster can be one such move away and many
    boundary moves away, each of them worse (dense-moe-mtp, 2 chunks, 16
    micro-batches, cap 5% above the tightest: from 505.58 ms, the rounds'
    best, this climb reaches 491.48 ms; docs/pipeline.md)."""
    pp, num = problem.num_stages, problem.num_virtual
    load_s = [0.0] * pp
    for c in range(num):
        load_s[c % pp] += sum(
            (g.forward_s + g.backward_s) * layers[c][i] for i, g in enumerate(problem.groups)
        )
    targets = sorted(
        (t for t in range(num) if abs(t - chunk) > 1),
        key=lambda t: (load_s[t % pp], abs(t - chunk), t),
    )
    yield from _transfers(problem, layers, chunk, targets)


def _transfers(problem: Problem, layers: list[list[int]], chunk: int, targets):
    """For each target chunk in order: the layout with one layer less in
    `chunk` and one more in the target, every other chunk keeping its count
    (model order kept: layers_in_order)."""
    if sum(layers[chunk]) <= problem.min_layers_per_chunk:
        return
    per_chunk = [sum(r) for r in layers]
    for target in targets:
        new = list(per_chunk)
        new[chunk] -= 1
        new[target] += 1
        yield target, layers_in_order(problem, new)


def repair(problem: Problem, layers: list[list[int]]) -> list[list[int]] | None:
    """Layer counts every stage can fit (each on its least-memory options),
    reached from `layers` by one-layer moves; None when the moves stall."""
    pp, cap = problem.num_stages, problem.memory_cap_bytes * (1 + 1e-9)
    layers = [list(r) for r in layers]
    seen = {tuple(map(tuple, layers))}
    for _ in range(MAX_REPAIR_MOVES):
        peaks = [least_peak_bytes(problem, layers, s) for s in range(pp)]
        worst = max(range(pp), key=lambda s: (peaks[s] - cap, -s))
        if peaks[worst] <= cap:
            return layers
        best = None
        for c in range(worst, problem.num_virtual, pp):
            for target, new in _moves(problem, layers, c):
                key = tuple(map(tuple, new))
                if key in seen:
                    continue
                t = target % pp
                room = cap - least_peak_bytes(problem, new, t)
                score = (min(room, cap - least_peak_bytes(problem, new, worst)), room, -target)
                if best is None or score > best[0]:
                    best = (score, new, key)
        if best is None:
            return None
        layers = best[1]
        seen.add(best[2])
    return None


@dataclass
class _State:
    layers: list[list[int]]
    cands: list
    choice: list[int]


class _Evaluator:
    """Per-stage recomputation candidates (cached by the stage's layers) and
    the vectorised step time of a layout with given choices."""

    def __init__(self, problem: Problem):
        self.p = problem
        self.graph = schedule_graph(
            problem.num_stages,
            problem.num_chunks,
            problem.num_micro_batches,
            problem.schedule is Schedule.INTERLEAVED,
        )
        self.cache: dict = {}

    def candidates(self, layers: list[list[int]], stage: int):
        pp = self.p.num_stages
        key = (stage, tuple(tuple(layers[c]) for c in range(stage, self.p.num_virtual, pp)))
        if key not in self.cache:
            self.cache[key] = _stage_candidates(self.p, layers, stage)
        return self.cache[key]

    def durations(self, layers, cands, choice) -> numpy.ndarray:
        p, num, pp = self.p, self.p.num_virtual, self.p.num_stages
        d = numpy.zeros(2 * num)
        for c in range(num):
            for g, grp in enumerate(p.groups):
                d[c] += grp.forward_s * layers[c][g]
                d[num + c] += grp.backward_s * layers[c][g]
        d[0] += p.head.forward_s
        d[num] += p.head.backward_s
        d[num - 1] += p.tail.forward_s
        d[2 * num - 1] += p.tail.backward_s
        for s in range(pp):
            r = cands[s][0][choice[s]]
            for k, c in enumerate(range(s, num, pp)):
                d[num + c] += r[k]
        return d

    def reoptimise(self, layers, cands, choice, stages) -> tuple[list[int], float, float]:
        """Each stage in `stages` takes its best candidate (others held),
        twice over; returns the choice, its step time and its sum of stage
        finishes (search.steps_and_finishes_s)."""
        num, pp = self.p.num_virtual, self.p.num_stages
        choice = list(choice)
        base = self.durations(layers, cands, choice)
        stages = list(stages)
        step = finishes = None
        # A second pass can only change something when the first did and
        # another stage moved since (the candidates' row of the current
        # choice equals `base`, so its step is the current step).
        for _ in range(2 if len(stages) > 1 else 1):
            changed = False
            for s in stages:
                r = cands[s][0]
                if len(r) == 1:  # no choice: the stage keeps its one candidate
                    continue
                trial = numpy.repeat(base[None, :], len(r), axis=0)
                for k, c in enumerate(range(s, num, pp)):
                    trial[:, num + c] += r[:, k] - r[choice[s], k]
                steps, sums = steps_and_finishes_s(self.graph, trial)
                best = int(numpy.argmin(steps + 1e-12 * r.sum(axis=1)))
                step, finishes = float(steps[choice[s]]), float(sums[choice[s]])
                if steps[best] < steps[choice[s]] * (1 - REL_TIE) or (
                    steps[best] <= steps[choice[s]] * (1 + REL_TIE)
                    and r[best].sum() < r[choice[s]].sum()
                ):
                    choice[s] = best
                    base = trial[best]
                    step, finishes = float(steps[best]), float(sums[best])
                    changed = True
            if not changed:
                break
        if step is None:
            steps, sums = steps_and_finishes_s(self.graph, base[None, :])
            step, finishes = float(steps[0]), float(sums[0])
        return choice, step, finishes

    def plan(self, cands, choice) -> Assignment:
        pp, num = self.p.num_stages, self.p.num_virtual
        counts: list = [None] * num
        for s in range(pp):
            for k, c in enumerate(range(s, num, pp)):
                counts[c] = cands[s][1][choice[s]][k]
        return Assignment(tuple(counts))


def _choice_of(ev: _Evaluator, layers, a: Assignment) -> tuple[list, list[int]] | None:
    """Candidates of every stage and the index of `a`'s choice in each."""
    pp, num = ev.p.num_stages, ev.p.num_virtual
    cands, choice = [], []
    for s in range(pp):
        found = ev.candidates(layers, s)
        if found is None:
            return None
        mine = tuple(a.counts[c] for c in range(s, num, pp))
        try:
            choice.append(found[1].index(mine))
        except ValueError:
            choice.append(0)
        cands.append(found)
    return cands, choice


def improve_layers(
    problem: Problem,
    start: Assignment,
    max_moves: int = MAX_LAYER_MOVES,
    deadline_s: float | None = None,
    focus: Iterable[int] | None = None,
    far: bool = False,
    work_end_s: float | None = None,
    plateau: bool = True,
) -> Assignment:
    """Hill-climb over one-layer moves from `start` (which fits): across a
    chunk boundary and to the same stage's other chunks (`_stage_moves`),
    or with `far` to any chunk (`_far_moves`). At most `max_moves` layouts
    are evaluated, none once the longest-path work (search.work_done_s)
    reaches `work_end_s`, and none after `deadline_s` (time.perf_counter();
    the wall-clock limit, which only a run that hits it makes
    load-dependent); never worse than `start` (each plateau move may lengthen
    the step by the tie tolerance, REL_TIE, at most).

    `focus` (chunks): only moves out of these chunks are tried, and a kept
    move adds the chunks around its source and target (neighbours and the
    same stage's other chunks); the climb ends when no chunk is left to
    try. After a kick that changed a few chunks, this checks the moves the
    kick can have made worth trying, not all of them again (a full check
    costs about 3 moves per chunk; perturb.py).

    `plateau`: when none of a chunk's moves shortens the step, the first
    that keeps it (within REL_TIE) and lowers the sum of the stages'
    finishes (search.steps_and_finishes_s, by more than PLATEAU_REL) is
    kept. The step is a maximum over stages: where several stages are
    equally late, moving a layer off one of them leaves the step as it is,
    so a climb on the step alone stops there; the second measure lets it
    take the moves that shorten the late stages one at a time
    (docs/pipeline.md, "Plateau moves"). It strictly falls at each such
    move, so the climb cannot cycle."""
    ev = _Evaluator(problem)
    pp, num = problem.num_stages, problem.num_virtual
    layers = [[start.group_layers(c, g) for g in range(len(problem.groups))] for c in range(num)]
    found = _choice_of(ev, layers, start)
    if found is None:
        return start
    cands, choice = found
    choice, step, finishes = ev.reoptimise(layers, cands, choice, range(pp))
    best = ev.plan(cands, choice)
    best_step = step
    start_step = plan_step_s(problem, start)
    if not better(problem, best, best_step, start, start_step):
        best, best_step = start, start_step
        found = _choice_of(ev, layers, start)
        cands, choice = found
        finishes = float(
            steps_and_finishes_s(ev.graph, ev.durations(layers, cands, choice)[None, :])[1][0]
        )
    # Chunks are visited cyclically from where the last kept move was made,
    # and the climb ends after a full cycle without a kept move (or the
    # budget): no evaluation is spent re-checking moves that just failed.
    evaluated, since_kept, c = 0, 0, 0
    queue = None if focus is None else deque(sorted(set(focus)))
    others = _far_moves if far else _stage_moves

    def out_of_moves() -> bool:
        return (
            evaluated >= max_moves
            or (work_end_s is not None and work_done_s() >= work_end_s)
            or past(deadline_s)
        )

    while since_kept < num if queue is None else queue:
        if out_of_moves():
            break
        if queue is not None:
            c = queue.popleft()
        kept = None
        level = None  # the first move that keeps the step and lowers the finishes
        for target, new in itertools.chain(_moves(problem, layers, c), others(problem, layers, c)):
            # A far pass over one chunk is up to 2 moves per chunk, so its
            # budget is checked per move (a boundary pass, at most 4 moves,
            # is checked per chunk only, as it always was).
            if far and out_of_moves():
                break
            evaluated += 1
            stages = [s for s in range(pp) if any(new[k] != layers[k] for k in range(s, num, pp))]
            new_cands = list(cands)
            for s in stages:
                new_cands[s] = ev.candidates(new, s)
            if any(new_cands[s] is None for s in stages):
                continue
            new_choice = [0 if s in stages else choice[s] for s in range(pp)]
            new_choice, step, sums = ev.reoptimise(new, new_cands, new_choice, stages)
            move = (target, new, new_cands, new_choice, step, sums)
            if step < best_step * (1 - REL_TIE):
                kept = move
                break
            if (
                plateau
                and level is None
                and step <= best_step * (1 + REL_TIE)
                and sums < finishes * (1 - PLATEAU_REL)
            ):
                level = move
        kept = kept or level
        if kept is not None:
            target, layers, cands, choice, best_step, finishes = kept
            # The longest path just computed is the simulator's step
            # (same rules, vectorised): no replay needed per kept move.
            best = ev.plan(cands, choice)
            if queue is not None:
                for x in chunks_around(problem, (c, target)):
                    if x not in queue:
                        queue.append(x)
        since_kept = 0 if kept is not None else since_kept + 1
        if kept is None:
            c = (c + 1) % num
    return best


def chunks_around(problem: Problem, chunks) -> list[int]:
    """The chunks whose moves a change to `chunks` can affect most: each
    one, its neighbours and the same stage's other chunks (sorted)."""
    pp, num = problem.num_stages, problem.num_virtual
    out = set()
    for c in chunks:
        out.update(x for x in (c - 1, c, c + 1) if 0 <= x < num)
        out.update(range(c % pp, num, pp))
    return sorted(out)


def polish(problem: Problem, a: Assignment) -> Assignment:
    """Least recomputation for `a`'s layers without a longer step: each
    stage, in order, takes its candidate with the least total recomputation
    whose step is no longer than the current one."""
    ev = _Evaluator(problem)
    pp, num = problem.num_stages, problem.num_virtual
    layers = [[a.group_layers(c, g) for g in range(len(problem.groups))] for c in range(num)]
    found = _choice_of(ev, layers, a)
    if found is None:
        return a
    cands, choice = found
    if ev.plan(cands, choice) != a:
        return a
    base = ev.durations(layers, cands, choice)
    step = float(makespans_s(ev.graph, base[None, :])[0])
    for s in range(pp):
        r = cands[s][0]
        trial = numpy.repeat(base[None, :], len(r), axis=0)
        for k, c in enumerate(range(s, num, pp)):
            trial[:, num + c] += r[:, k] - r[choice[s], k]
        steps = makespans_s(ev.graph, trial)
        ok = numpy.flatnonzero(steps <= step * (1 + 1e-12))
        best = int(ok[numpy.argmin(r[ok].sum(axis=1))])
        if r[best].sum() < r[choice[s]].sum() * (1 - 1e-12):
            choice[s] = best
            base = trial[best]
            step = float(steps[best])
    return ev.plan(cands, choice)


def feasible_start(problem: Problem, layers: list[list[int]]) -> Assignment | None:
    """Repair `layers` until every stage can fit, then choose recomputation
    (search.py); None when the repair stalls."""
    fixed = repair(problem, layers)
    if fixed is None:
        return None
    return local_search(problem, fixed)
