"""Iterated local search over layer layouts: kick, repair, climb, keep the
best.

Why: the one-layer moves of layer_search.py stop in a local optimum, and on
interleaved schedules near the tightest cap those are several percent slower
than plans a few moves away (benchmarks/pipeline_robustness.py): a better
layout often needs two or three layers moved at once, each move alone being
worse. Each round here starts from the best plan so far, moves 2-6 layers
(between neighbouring chunks or between chunks of one stage), repairs the
layout until every stage can fit (layer_search.repair), chooses the
recomputation (search.local_search) and hill-climbs (improve_layers); the
best plan over all rounds is kept.

Two choices make a round pay (docs/pipeline.md, "A plan first, then a
proof", has the measurements):

- the kick is aimed: each moved layer leaves, with even odds, either a
  chunk drawn by its time on the critical path (the simulator's critical
  op counts times the chunk's forward and backward seconds) or a uniformly
  random chunk. Only a shorter critical path shortens the step; the random
  half keeps moves the critical path does not show (memory room) possible;
- the climb after a kick is focused (improve_layers' `focus`): it tries the
  moves out of the chunks the kick (and its repair) changed and their
  neighbours, and follows its kept moves, instead of re-checking every
  chunk. A full check spends most of a round's budget confirming moves far
  from the kick, which rarely changed.

After every EVEN_EVERY rounds in a row without a faster plan, a round
first tries the even cuts of the best plan (even_cuts: one round of the
schedule re-cut to even seconds, repaired, its recomputation chosen and
climbed) and takes the fastest in place of its kick when it is faster: a
kick moves a few layers, while a round cut unevenly needs many one-layer
moves to even out, each worse on its own.
Chains of rounds (iterated_chains) share the budget, and each chain's
plan is climbed once more with the far moves (layer_search._far_moves).

Deterministic: a fixed seed per chain, and budgets counted in rounds and
in longest-path work (search.work_done_s), not by the clock, so the same
problem gives the same plan on every machine; only a run that reaches the
caller's deadline stops early (as the other layer moves do).
"""

from __future__ import annotations

import random

from autotune.pipeline.assignment import Assignment, layers_in_order
from autotune.pipeline.deadline import past
from autotune.pipeline.layer_search import (
    REL_TIE,
    better,
    chunks_around,
    improve_layers,
    repair,
    tie_key,
)
from autotune.pipeline.problem import DEFAULT_SEARCH_ROUNDS, Problem
from autotune.pipeline.search import local_search, plan_step_s, work_done_s
from autotune.pipeline.simulator import chunk_backward_s, chunk_forward_s, simulate

# The rounds' budget. Each round climbs at most CLIMB_MOVES layouts. On
# 16 stages x 2-3 chunks x 16-32 micro-batches a round costs about 0.1-0.3
# s of CPU, and the plan still improves after 100-250 rounds near the
# tightest cap (docs/pipeline.md): the rounds stop after STALL_ROUNDS
# without a faster plan or WORK_BUDGET_S of longest-path work (1.1-1.6
# times that in CPU seconds, 18-26 s on an idle 2-core machine), which
# leaves the default 60 s limit's safety stop (balance.MOVES_SHARE) room
# for a machine about 1.5 times slower.
ROUNDS = DEFAULT_SEARCH_ROUNDS
CLIMB_MOVES = 100
STALL_ROUNDS = 64
WORK_BUDGET_S = 16.0
# Chains of rounds at most (iterated_chains); the work budget is shared.
MAX_CHAINS = 6
# The far climbs after the chains (iterated_chains): their own work
# budget, shared by the chains, and a count of moves per climb.
FAR_BUDGET_S = 5.0
FAR_CLIMB_MOVES = 5000
SEED = 0  # the first chain's; chain k uses seed k
# Rounds in a row without a faster plan after which a chain tries the even
# cuts of its best plan (even_cuts), and again after as many more.
EVEN_EVERY = 8


def _moved(
    problem: Problem, a: Assignment, rng: random.Random, weights: list[float] | None
) -> list[list[int]] | None:
    """Layers per chunk and kind after 2-6 one-layer moves from `a` (to a
    neighbouring chunk or the same stage's next or previous chunk, model
    order kept), repaired so every stage can fit; None if it cannot. Each
    move leaves a uniformly random chunk, or with `weights`, with even odds,
    a chunk drawn by its weight."""
    pp, num = problem.num_stages, problem.num_virtual
    per_chunk = [a.layers_in_chunk(c) for c in range(num)]
    for _ in range(rng.randint(2, 6)):
        if weights is not None and rng.random() < 0.5:
            c = rng.choices(range(num), weights=weights)[0]
        else:
            c = rng.randrange(num)
        target = c + rng.choice((-1, 1, -pp, pp))
        if 0 <= target < num and per_chunk[c] > problem.min_layers_per_chunk:
            per_chunk[c] -= 1
            per_chunk[target] += 1
    return repair(problem, layers_in_order(problem, per_chunk))


def kick(problem: Problem, a: Assignment, rng: random.Random) -> list[list[int]] | None:
    """Layers per chunk and kind after 2-6 random one-layer moves from `a`
    (to a neighbouring chunk or the same stage's next or previous chunk,
    model order kept), repaired so every stage can fit; None if it cannot."""
    return _moved(problem, a, rng, None)


def critical_weights_s(problem: Problem, a: Assignment) -> list[float]:
    """Seconds each chunk contributes to `a`'s critical path: its forward
    ops on the path times its forward seconds plus the same for backward
    (simulator.py's critical op counts)."""
    sim = simulate(problem, a)
    return [
        sim.critical_forward[c] * chunk_forward_s(problem, a, c)
        + sim.critical_backward[c] * chunk_backward_s(problem, a, c)
        for c in range(problem.num_virtual)
    ]


def aimed_kick(
    problem: Problem, a: Assignment, rng: random.Random, weights: list[float] | None = None
) -> list[list[int]] | None:
    """As `kick`, but each move leaves, with even odds, a chunk drawn by its
    seconds on the critical path (`weights`, critical_weights_s of `a`,
    computed when not given) or a uniformly random one."""
    if weights is None:
        weights = critical_weights_s(problem, a)
    return _moved(problem, a, rng, weights if sum(weights) > 0 else None)


def _climbed(
    problem: Problem, layers: list[list[int]] | None, base: Assignment, deadline_s: float | None
) -> Assignment | None:
    """A round's plan from a repaired layout (`layers`, None if the repair
    failed): the recomputation chosen (search.local_search), then a climb of
    at most CLIMB_MOVES focused on the chunks whose layer counts differ from
    `base`'s and their neighbours (improve_layers' `focus`); None if no
    recomputation fits."""
    plan = local_search(problem, layers) if layers is not None else None
    if plan is None:
        return None
    changed = [c for c in range(problem.num_virtual) if sum(layers[c]) != base.layers_in_chunk(c)]
    return improve_layers(
        problem,
        plan,
        max_moves=CLIMB_MOVES,
        deadline_s=deadline_s,
        focus=chunks_around(problem, changed),
    )


def iterated_search(
    problem: Problem,
    start: Assignment,
    rounds: int = ROUNDS,
    seed: int = SEED,
    deadline_s: float | None = None,
    work_budget_s: float = WORK_BUDGET_S,
    stall_rounds: int = STALL_ROUNDS,
) -> Assignment:
    """The best plan over kick-repair-climb rounds from `start` (which
    fits); never worse than `start`. The rounds stop after `rounds`, after
    `stall_rounds` in a row that found no faster plan (every EVEN_EVERY of
    those, the even cuts of the best plan are tried first), or when the rounds
    have spent `work_budget_s` of longest-path work (search.work_done_s, a
    count that does not depend on the machine or its load), whichever comes
    first; `deadline_s` (time.perf_counter()) is a safety stop, the one case
    whose plan depends on the load."""
    rng = random.Random(seed)
    best, best_step = start, plan_step_s(problem, start)
    weights = None  # of `best`, recomputed when it changes
    work_end_s = work_done_s() + work_budget_s
    stalled = 0
    for _ in range(rounds):
        if stalled >= stall_rounds or work_done_s() >= work_end_s:
            break
        if past(deadline_s):
            break
        stalled += 1
        if stalled % EVEN_EVERY == 0:
            plan = _best_even_cut(problem, best, deadline_s)
            if plan is not None:
                step = plan_step_s(problem, plan)
                if better(problem, plan, step, best, best_step):
                    if step < best_step * (1 - REL_TIE):
                        stalled = 0
                    best, best_step, weights = plan, step, None
                    continue
        if weights is None:
            weights = critical_weights_s(problem, best)
        plan = _climbed(problem, aimed_kick(problem, best, rng, weights), best, deadline_s)
        if plan is None:
            continue
        step = plan_step_s(problem, plan)
        if step < best_step * (1 - REL_TIE):
            stalled = 0
        if better(problem, plan, step, best, best_step):
            best, best_step, weights = plan, step, None
    return best


def even_split(times_s: list[float], parts: int, low: int) -> list[int] | None:
    """Counts of `parts` contiguous parts of a sequence of layer seconds,
    each of at least `low` layers: the least longest part (seconds), then
    the least sum of squared part seconds (the most even of those); None if
    the layers are too few. Exact, by dynamic programming over (parts,
    first layer): O(parts * n^2) for n layers. Ties within REL_TIE keep the
    shorter earlier part, so the result is the same on every machine."""
    n = len(times_s)
    prefix_s = [0.0]
    for t in times_s:
        prefix_s.append(prefix_s[-1] + t)

    def less(a: tuple[float, float], b: tuple[float, float]) -> bool:
        if a[0] < b[0] * (1 - REL_TIE):
            return True
        return a[0] <= b[0] * (1 + REL_TIE) and a[1] < b[1] * (1 - REL_TIE)

    # cost[i]: (longest, squares) of times_s[i:] in k parts (None: too
    # few layers); cuts[k - 1][i]: where the first of those parts ends.
    cost: list[tuple[float, float] | None] = [None] * (n + 1)
    for i in range(n + 1):
        if n - i >= low:
            rest_s = prefix_s[n] - prefix_s[i]
            cost[i] = (rest_s, rest_s * rest_s)
    cuts: list[list[int]] = [[n] * (n + 1)]
    for _parts in range(2, parts + 1):
        new: list[tuple[float, float] | None] = [None] * (n + 1)
        cut = [n] * (n + 1)
        for i in range(n + 1):
            for j in range(i + low, n + 1):
                sub = cost[j]
                if sub is None:
                    break  # later starts leave even fewer layers
                part_s = prefix_s[j] - prefix_s[i]
                if new[i] is not None and part_s > new[i][0] * (1 + REL_TIE):
                    break  # a longer first part only makes the longest longer
                key = (max(part_s, sub[0]), part_s * part_s + sub[1])
                if new[i] is None or less(key, new[i]):
                    new[i], cut[i] = key, j
        cost = new
        cuts.append(cut)
    if parts < 1 or cost[0] is None:
        return None
    counts, i = [], 0
    for k in range(parts, 0, -1):
        j = cuts[k - 1][i]
        counts.append(j - i)
        i = j
    return counts


def even_cuts(problem: Problem, a: Assignment) -> list[list[int]]:
    """Layers per chunk of `a` with the inner chunks of one round of the
    schedule (chunk k of every stage but the first and the last) re-cut to
    even seconds (even_split of their layers' forward plus backward
    seconds), for each round in turn and then for every round at once;
    layouts equal to `a`'s or to an earlier one are left out. The first and
    last stages keep theirs: they hold the head and the tail, and the first
    holds the most micro-batches alive.

    Why: a chain can end with a round cut unevenly (two-sizes, 3 chunks, 16
    micro-batches, cap 2% above the tightest: the last round's inner chunks
    hold 3 3 3 2 2 2 1 1 1 2 2 2 2 2 large layers, 535.20 ms). Evening them
    out is many one-layer moves, each of which is worse on its own; that
    round's even cut, repaired and climbed, is 516.19 ms, every round's at
    once 515.59 ms, and the chain goes on from there (docs/pipeline.md,
    "Even cuts")."""
    pp, rounds = problem.num_stages, problem.num_chunks
    if pp < 3:
        return []
    times_s = [g.forward_s + g.backward_s for g in problem.groups for _ in range(g.count)]
    per_chunk = [a.layers_in_chunk(c) for c in range(problem.num_virtual)]
    out: list[list[int]] = []
    for chosen in [[k] for k in range(rounds)] + [list(range(rounds))]:
        new = list(per_chunk)
        for k in chosen:
            lo, hi = k * pp + 1, (k + 1) * pp - 1
            first = sum(new[:lo])
            count = sum(new[lo:hi])
            split = even_split(
                times_s[first : first + count], hi - lo, problem.min_layers_per_chunk
            )
            if split is not None:
                new[lo:hi] = split
        if new != per_chunk and new not in out:
            out.append(new)
    return out


def kind_cuts(problem: Problem, a: Assignment) -> list[list[int]]:
    """Layers per chunk of `a` with a boundary between two kinds (model
    order) moved onto a boundary between rounds of the schedule: for each
    kind boundary and each round k >= 1, the layouts in which the chunks up
    to the last stage's chunk of round k - 1, or up to the first stage's
    chunk of round k, hold exactly the layers before the kind boundary. The
    inner chunks of rounds k - 1 and k (every stage but the first and the
    last, as in even_cuts) are re-cut to even seconds (even_split) on each
    side; the other chunks keep theirs. Layouts whose re-cut chunks cannot
    hold their share, equal to `a`'s or to an earlier one are left out; with
    one kind, or one round, there are none.

    Why: the even split cuts rounds by layer counts, so a round boundary
    can fall inside a kind, and the chains rarely move it: that is many
    layers across both rounds, each move worse on its own. On two-sizes (40
    small then 40 large layers), 2 chunks, 32 micro-batches, cap 2% above
    the tightest, the best climbed start holds small layers in chunks 0-18
    (1076.28 ms) and the chains from it end at 1005.05 ms, with round 0
    ending after 33 small layers. Its cut with round 0 and the first
    stage's round-1 chunk holding the 40 small layers, repaired and climbed,
    is 1008.50 ms, and the chains from there end at 998.81 ms; the best
    plan known (991.81 ms) has the same kind boundary (docs/pipeline.md,
    "Kind cuts")."""
    pp, rounds, low = problem.num_stages, problem.num_chunks, problem.min_layers_per_chunk
    if pp < 3:
        return []
    times_s = [g.forward_s + g.backward_s for g in problem.groups for _ in range(g.count)]
    per_chunk = [a.layers_in_chunk(c) for c in range(problem.num_virtual)]
    kind_ends, total = [], 0
    for g in problem.groups[:-1]:
        total += g.count
        kind_ends.append(total)
    out: list[list[int]] = []
    for kind_end in kind_ends:
        for k in range(1, rounds):
            # Inner chunks of round k - 1 (left) and of round k (right).
            left_lo, left_hi = (k - 1) * pp + 1, k * pp - 1
            right_lo, right_hi = k * pp + 1, (k + 1) * pp - 1
            before = sum(per_chunk[:left_lo])
            between = sum(per_chunk[left_hi:right_lo])
            span = sum(per_chunk[left_lo:right_hi]) - between
            for upto in (left_hi, right_lo - 1):  # last chunk before the kind boundary
                left = kind_end - before - sum(per_chunk[left_hi : upto + 1])
                right = span - left
                if left < (left_hi - left_lo) * low or right < (right_hi - right_lo) * low:
                    continue
                first_right = before + left + between
                left_split = even_split(times_s[before : before + left], left_hi - left_lo, low)
                right_split = even_split(
                    times_s[first_right : first_right + right], right_hi - right_lo, low
                )
                if left_split is None or right_split is None:
                    continue
                new = list(per_chunk)
                new[left_lo:left_hi] = left_split
                new[right_lo:right_hi] = right_split
                if new != per_chunk and new not in out:
                    out.append(new)
    return out


def _cut_plans(
    problem: Problem, a: Assignment, layouts: list[list[int]], deadline_s: float | None
) -> list[Assignment]:
    """Plans from re-cut layouts of `a` (layers per chunk), each repaired to
    fit, its recomputation chosen and climbed as a kick's plan is; those
    that fit, in the layouts' order."""
    plans = []
    for per_chunk in layouts:
        plan = _climbed(
            problem, repair(problem, layers_in_order(problem, per_chunk)), a, deadline_s
        )
        if plan is not None:
            plans.append(plan)
    return plans


def kind_cut_plans(
    problem: Problem, a: Assignment, deadline_s: float | None = None
) -> list[Assignment]:
    """`a`'s kind cuts (kind_cuts), each repaired to fit, its recomputation
    chosen and climbed as a kick's plan is; those that fit, in kind_cuts'
    order."""
    return _cut_plans(problem, a, kind_cuts(problem, a), deadline_s)


def _best_even_cut(problem: Problem, a: Assignment, deadline_s: float | None) -> Assignment | None:
    """The fastest of `a`'s even cuts (even_cuts), each repaired to fit,
    its recomputation chosen and climbed as a kick's plan is; None if none
    fits."""
    plans = _cut_plans(problem, a, even_cuts(problem, a), deadline_s)
    return fastest_first(problem, plans)[0][0] if plans else None


def fastest_first(problem: Problem, plans: list[Assignment]) -> list[tuple[Assignment, float]]:
    """`plans` without repeats, each with its step (plan_step_s, seconds),
    fastest first; equal steps by the tie-break rule (tie_key)."""
    steps = {a: plan_step_s(problem, a) for a in plans}
    return sorted(steps.items(), key=lambda item: (item[1], tie_key(problem, item[0])))


def iterated_chains(
    problem: Problem,
    starts: list[Assignment],
    rounds: int = ROUNDS,
    deadline_s: float | None = None,
    work_budget_s: float = WORK_BUDGET_S,
    max_chains: int = MAX_CHAINS,
    enough_s: float = 0.0,
    far_budget_s: float = FAR_BUDGET_S,
    seed_shift: int = 0,
) -> Assignment:
    """Chains of rounds (iterated_search) while the work budget lasts: the
    first from the best of `starts` (which fit), the next from the others,
    fastest first, then from the best plan so far; chain k uses seed k +
    `seed_shift` and what is left of the budget; no chain starts once the best step is at
    most `enough_s` (the lower bound plus the relative gap). Each chain's
    plan is then climbed with the far moves (improve_layers, `far`) while
    `far_budget_s` of work, shared by the chains, lasts. Returns the best
    plan of all (never worse than any start).

    A chain that stalls leaves budget to the next: on cheap instances one
    chain stalls long before the budget, and a chain from another start or
    seed finds what the first could not. The far climb reaches layouts the
    rounds' moves (neighbouring chunks, the same stage's chunks) reach only
    through worse ones; it is too dear for every round (docs/pipeline.md)."""
    ranked = fastest_first(problem, starts)
    starts = [a for a, _ in ranked]
    best, best_step = ranked[0]
    if rounds == 0:
        return best
    rounds_left_s, far_left_s = work_budget_s, far_budget_s
    for k in range(max_chains):
        if rounds_left_s <= 0 or best_step <= enough_s:
            break
        if past(deadline_s):
            break
        origin = starts[k] if k < len(starts) else best
        w0_s = work_done_s()
        plan = iterated_search(
            problem,
            origin,
            rounds=rounds,
            seed=k + seed_shift,
            deadline_s=deadline_s,
            work_budget_s=rounds_left_s,
        )
        w1_s = work_done_s()
        rounds_left_s -= w1_s - w0_s
        if far_left_s > 0:
            plan = improve_layers(
                problem,
                plan,
                max_moves=FAR_CLIMB_MOVES,
                deadline_s=deadline_s,
                far=True,
                work_end_s=w1_s + far_left_s,
            )
            far_left_s -= work_done_s() - w1_s
        step = plan_step_s(problem, plan)
        if better(problem, plan, step, best, best_step):
            best, best_step = plan, step
    return best
