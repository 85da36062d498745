"""Iterated local search over layer layouts: kick, repair, climb, keep the
best.

Why: the one-layer moves of layer_search.py stop in a local optimum, and on
interleaved schedules near the tightest cap those are several percent slower
than plans a few moves away (benchmarks/pipeline_robustness.py): a better
layout often needs two or three layers moved at once, each move alone being
worse. Each round here starts from the best plan so far, moves 2-6 random
layers (between neighbouring chunks or between chunks of one stage), repairs
the layout until every stage can fit (layer_search.repair), chooses the
recomputation (search.local_search) and hill-climbs (improve_layers); the
best plan over all rounds is kept.

Deterministic: a fixed seed and a fixed number of rounds (no clock), so the
same problem gives the same plan on every machine; only a run that reaches
the caller's deadline stops early (as the other layer moves do).
"""

from __future__ import annotations

import random
import time

from autotune.pipeline.assignment import Assignment, layers_in_order
from autotune.pipeline.layer_search import better, improve_layers, repair
from autotune.pipeline.problem import DEFAULT_SEARCH_ROUNDS, Problem
from autotune.pipeline.search import local_search
from autotune.pipeline.simulator import simulate

# Rounds and the climb's budget per round: about 1-2 s per round on 16 stages
# x 3 chunks x 16 micro-batches (2-core machine), so the rounds fit well in
# half of the default 60 s limit.
ROUNDS = DEFAULT_SEARCH_ROUNDS
CLIMB_MOVES = 200
SEED = 0


def kick(problem: Problem, a: Assignment, rng: random.Random) -> list[list[int]] | None:
    """Layers per chunk and kind after 2-6 random one-layer moves from `a`
    (to a neighbouring chunk or the same stage's next or previous chunk,
    model order kept), repaired so every stage can fit; None if it cannot."""
    pp, num = problem.num_stages, problem.num_virtual
    per_chunk = [a.layers_in_chunk(c) for c in range(num)]
    for _ in range(rng.randint(2, 6)):
        c = rng.randrange(num)
        target = c + rng.choice((-1, 1, -pp, pp))
        if 0 <= target < num and per_chunk[c] > problem.min_layers_per_chunk:
            per_chunk[c] -= 1
            per_chunk[target] += 1
    return repair(problem, layers_in_order(problem, per_chunk))


def iterated_search(
    problem: Problem,
    start: Assignment,
    rounds: int = ROUNDS,
    seed: int = SEED,
    deadline_s: float | None = None,
) -> Assignment:
    """The best plan over `rounds` kick-repair-climb rounds from `start`
    (which fits); never worse than `start`. `deadline_s`
    (time.perf_counter()) stops it early."""
    rng = random.Random(seed)
    best, best_step = start, simulate(problem, start).makespan_s
    for _ in range(rounds):
        if deadline_s is not None and time.perf_counter() > deadline_s:
            break
        layers = kick(problem, best, rng)
        plan = local_search(problem, layers) if layers is not None else None
        if plan is None:
            continue
        plan = improve_layers(problem, plan, max_moves=CLIMB_MOVES, deadline_s=deadline_s)
        step = simulate(problem, plan).makespan_s
        if better(problem, plan, step, best, best_step):
            best, best_step = plan, step
    return best
