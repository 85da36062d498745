"""Replay 1F1B / interleaved 1F1B block by block for an assignment.

Semantics: every stage runs its ops in the schedule's order (schedule.py); an
op starts when its stage is free and its input is ready: forward (c, j)
after forward (c-1, j); backward (c, j) after backward (c+1, j), or after
forward (c, j) on the last chunk. Point-to-point transfers take no time and
ops never overlap on a stage. The makespan is the longest path through this
dependency graph; its ops are recorded as the critical path.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.assignment import (
    Assignment,
    chunk_backward_s,
    chunk_forward_s,
    stage_peak_bytes,
)
from autotune.pipeline.problem import Problem, Schedule
from autotune.pipeline.schedule import stage_orders


@dataclass(frozen=True)
class Block:
    """One op on the timeline."""

    stage: int
    forward: bool
    chunk: int
    micro_batch: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class BubbleParts:
    """Bubble as a fraction of useful work W0 (no recomputation):
    total = (pp * makespan - W0) / W0 = ideal + imbalance + recompute with
    ideal = (pp - 1) / (v m), recompute = (W - W0) / W0 (the extra backward
    work), imbalance = the rest (seed 004's "real = ideal + imba + recompute")."""

    total: float
    ideal: float
    imbalance: float
    recompute: float


@dataclass(frozen=True)
class Simulation:
    """What the replay found."""

    makespan_s: float
    blocks: tuple[Block, ...]
    stage_peak_bytes: tuple[float, ...]
    stage_busy_s: tuple[float, ...]
    bubble: BubbleParts
    critical_forward: tuple[int, ...]
    critical_backward: tuple[int, ...]

    def critical_length_s(self, forward_s: list[float], backward_s: list[float]) -> float:
        """Length of the recorded critical path under other chunk times."""
        return sum(n * t for n, t in zip(self.critical_forward, forward_s, strict=True)) + sum(
            n * t for n, t in zip(self.critical_backward, backward_s, strict=True)
        )


def bubble_parts(
    num_stages: int,
    num_chunks: int,
    num_micro_batches: int,
    makespan_s: float,
    work_s: float,
    useful_work_s: float,
) -> BubbleParts:
    """Split (pp T - W0) / W0 into ideal (pp-1)/(v m), recompute (W - W0)/W0
    and imbalance (the remainder); W, W0 are the summed busy seconds of all
    stages with and without recomputation."""
    if useful_work_s <= 0:
        return BubbleParts(0.0, 0.0, 0.0, 0.0)
    total = (num_stages * makespan_s - useful_work_s) / useful_work_s
    ideal = (num_stages - 1) / (num_chunks * num_micro_batches)
    recompute = (work_s - useful_work_s) / useful_work_s
    return BubbleParts(total, ideal, total - ideal - recompute, recompute)


def simulate(problem: Problem, a: Assignment) -> Simulation:
    """Replay the schedule for `a`: makespan, blocks, per-stage peak memory,
    bubble parts and the critical path's op counts per model chunk."""
    pp, v, m = problem.num_stages, problem.num_chunks, problem.num_micro_batches
    num = problem.num_virtual
    fwd = [chunk_forward_s(problem, a, c) for c in range(num)]
    bwd = [chunk_backward_s(problem, a, c) for c in range(num)]
    orders = stage_orders(pp, v, m, problem.schedule is Schedule.INTERLEAVED)

    end: dict[tuple[bool, int, int], float] = {}
    pred: dict[tuple[bool, int, int], tuple[bool, int, int] | None] = {}
    pos = [0] * pp
    free_at = [0.0] * pp
    last: list[tuple[bool, int, int] | None] = [None] * pp
    blocks: list[Block] = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(pp):
            order = orders[s]
            while pos[s] < len(order):
                forward, local, j = order[pos[s]]
                c = local * pp + s
                if forward:
                    dep = (True, c - 1, j) if c > 0 else None
                else:
                    dep = (False, c + 1, j) if c < num - 1 else (True, c, j)
                if dep is not None and dep not in end:
                    break
                dep_end = end[dep] if dep is not None else 0.0
                key = (forward, c, j)
                if last[s] is not None and free_at[s] >= dep_end:
                    start, pred[key] = free_at[s], last[s]
                else:
                    start, pred[key] = dep_end, dep
                finish = start + (fwd[c] if forward else bwd[c])
                end[key] = finish
                blocks.append(Block(s, forward, c, j, start, finish))
                free_at[s], last[s] = finish, key
                pos[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocked: an op waits on one that never runs")

    tail_key = max(end, key=end.__getitem__)
    makespan = end[tail_key]
    n_f, n_b = [0] * num, [0] * num
    node: tuple[bool, int, int] | None = tail_key
    while node is not None:
        (n_f if node[0] else n_b)[node[1]] += 1
        node = pred[node]

    busy = tuple(m * sum(fwd[c] + bwd[c] for c in range(s, num, pp)) for s in range(pp))
    useful = m * sum(fwd) + m * sum(_backward_without_recompute(problem, a, c) for c in range(num))
    return Simulation(
        makespan_s=makespan,
        blocks=tuple(blocks),
        stage_peak_bytes=tuple(stage_peak_bytes(problem, a, s) for s in range(pp)),
        stage_busy_s=busy,
        bubble=bubble_parts(pp, v, m, makespan, sum(busy), useful),
        critical_forward=tuple(n_f),
        critical_backward=tuple(n_b),
    )


def _backward_without_recompute(problem: Problem, a: Assignment, chunk: int) -> float:
    t = sum(g.backward_s * sum(a.counts[chunk][i]) for i, g in enumerate(problem.groups))
    if chunk == 0:
        t += problem.head.backward_s
    if chunk == problem.num_virtual - 1:
        t += problem.tail.backward_s
    return t
