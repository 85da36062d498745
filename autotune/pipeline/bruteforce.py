"""Exhaustive reference for small problems: every contiguous cut of the
layers into chunks, every split of each chunk's layers of each kind over the
allowed recomputation options; the simulated makespan of each plan that fits.
Only for tests (grows exponentially)."""

from __future__ import annotations

from itertools import product

from autotune.pipeline.assignment import Assignment
from autotune.pipeline.problem import Problem
from autotune.pipeline.simulator import simulate


def _cuts(total: int, parts: int, minimum: int):
    """Compositions of `total` into `parts` integers >= minimum."""
    if parts == 1:
        if total >= minimum:
            yield (total,)
        return
    for first in range(minimum, total - minimum * (parts - 1) + 1):
        for rest in _cuts(total - first, parts - 1, minimum):
            yield (first, *rest)


def _splits(count: int, allowed: list[int], num_options: int):
    """Every way to give `count` identical layers an option from `allowed`."""
    if not allowed:
        return
    for head in _cuts_any(count, len(allowed)):
        row = [0] * num_options
        for o, k in zip(allowed, head, strict=True):
            row[o] = k
        yield tuple(row)


def _cuts_any(total: int, parts: int):
    yield from _cuts(total, parts, 0)


def layers_by_group(problem: Problem, per_chunk: tuple[int, ...]) -> list[list[int]]:
    """Layers of each group in each chunk for a cut in model order."""
    remaining = [g.count for g in problem.groups]
    gi, rows = 0, []
    for want in per_chunk:
        row = [0] * len(problem.groups)
        while want:
            while remaining[gi] == 0:
                gi += 1
            take = min(want, remaining[gi])
            row[gi] += take
            remaining[gi] -= take
            want -= take
        rows.append(row)
    return rows


def brute_force(problem: Problem) -> tuple[float, Assignment] | None:
    """The smallest simulated makespan over all plans that fit the cap."""
    num_opts = len(problem.options)
    best: tuple[float, Assignment] | None = None
    for per_chunk in _cuts(problem.num_layers, problem.num_virtual, problem.min_layers_per_chunk):
        rows = layers_by_group(problem, per_chunk)
        choices = []
        for row in rows:
            per_group = []
            for g, n in enumerate(row):
                allowed = [
                    o for o in range(num_opts) if problem.groups[g].activation_bytes[o] is not None
                ]
                per_group.append(list(_splits(n, allowed, num_opts)))
            choices.append(list(product(*per_group)))
        for combo in product(*choices):
            a = Assignment(tuple(combo))
            sim = simulate(problem, a)
            if any(m > problem.memory_cap_bytes * (1 + 1e-12) for m in sim.stage_peak_bytes):
                continue
            if best is None or sim.makespan_s < best[0]:
                best = (sim.makespan_s, a)
    return best
