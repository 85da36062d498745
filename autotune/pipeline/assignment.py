"""A layer-to-chunk assignment with recomputation counts, and the per-chunk
times and memories it implies (the cost model the ILP and the simulator share).
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.problem import Problem, Schedule
from autotune.pipeline.schedule import peak_alive_vectors

Counts = tuple[tuple[tuple[int, ...], ...], ...]


@dataclass(frozen=True)
class Assignment:
    """`counts[c][g][o]`: layers of group g in model chunk c (0..pp*v-1, model
    order; chunk c on stage c mod pp) that use recomputation option o.
    Layers of one group are identical, so counts determine the plan."""

    counts: Counts

    def layers_in_chunk(self, chunk: int) -> int:
        """Body layers of every kind in a chunk."""
        return sum(sum(per_group) for per_group in self.counts[chunk])

    def group_layers(self, chunk: int, group: int) -> int:
        """Layers of one group in a chunk."""
        return sum(self.counts[chunk][group])


def chunk_forward_s(problem: Problem, a: Assignment, chunk: int) -> float:
    """F_c = sum_g x_gc f_g (+ head forward on chunk 0, + tail forward on the
    last chunk); seconds per micro-batch (pipeline.md section 2)."""
    t = sum(g.forward_s * sum(a.counts[chunk][i]) for i, g in enumerate(problem.groups))
    if chunk == 0:
        t += problem.head.forward_s
    if chunk == problem.num_virtual - 1:
        t += problem.tail.forward_s
    return t


def chunk_backward_s(problem: Problem, a: Assignment, chunk: int) -> float:
    """B_c = sum_{g,o} n_gco b_g (1 + coef_o) (+ head / tail backward);
    seconds per micro-batch. Recomputation re-runs part of the forward inside
    the backward, hence the factor (pipeline.md section 2)."""
    t = 0.0
    for i, g in enumerate(problem.groups):
        for o, opt in enumerate(problem.options):
            t += g.backward_s * (1.0 + opt.backward_time_coef) * a.counts[chunk][i][o]
    if chunk == 0:
        t += problem.head.backward_s
    if chunk == problem.num_virtual - 1:
        t += problem.tail.backward_s
    return t


def chunk_activation_bytes(problem: Problem, a: Assignment, chunk: int) -> float:
    """Activation bytes one micro-batch leaves on a chunk: sum n_gco act_go."""
    total = 0.0
    for i, g in enumerate(problem.groups):
        for o, n in enumerate(a.counts[chunk][i]):
            if n:
                act = g.activation_bytes[o]
                assert act is not None, "option not allowed for this kind"
                total += act * n
    return total


def stage_static_bytes(problem: Problem, a: Assignment, stage: int) -> float:
    """Memory a stage holds whatever the schedule: constant + parameters of
    its layers (+ head extra on stage 0, + tail extra on the last stage)."""
    total = problem.constant_bytes
    for chunk in range(stage, problem.num_virtual, problem.num_stages):
        for i, g in enumerate(problem.groups):
            total += g.parameter_bytes * sum(a.counts[chunk][i])
    if stage == 0:
        total += problem.head.memory_bytes
    if stage == problem.num_stages - 1:
        total += problem.tail.memory_bytes
    return total


def alive_vectors(problem: Problem) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per stage, the Pareto-maximal micro-batches-alive vectors over local chunks."""
    return peak_alive_vectors(
        problem.num_stages,
        problem.num_chunks,
        problem.num_micro_batches,
        problem.schedule is Schedule.INTERLEAVED,
    )


def stage_peak_bytes(problem: Problem, a: Assignment, stage: int) -> float:
    """Peak memory of a stage = static + max over alive vectors of
    sum_k alive_k * activation(chunk k) (pipeline.md section 3; the alive
    counts come from replaying the schedule, schedule.py)."""
    acts = [
        chunk_activation_bytes(problem, a, chunk)
        for chunk in range(stage, problem.num_virtual, problem.num_stages)
    ]
    peak_act = max(
        sum(n * act for n, act in zip(vec, acts, strict=True))
        for vec in alive_vectors(problem)[stage]
    )
    return stage_static_bytes(problem, a, stage) + peak_act


def even_layer_split(problem: Problem) -> list[list[int]]:
    """Layers per chunk and group for the even split: chunk c gets
    floor(N / C) layers plus one of the remainder on the last chunks (the
    seed framework's default, where the first stage also holds the
    embedding), cut in model order."""
    total, num = problem.num_layers, problem.num_virtual
    base, extra = divmod(total, num)
    return layers_in_order(problem, [base + (1 if c >= num - extra else 0) for c in range(num)])


def layers_in_order(problem: Problem, per_chunk: list[int]) -> list[list[int]]:
    """Layers per chunk and group when chunk c takes per_chunk[c] body layers,
    cut in model order (kinds in their listed order)."""
    result = []
    remaining = [g.count for g in problem.groups]
    gi = 0
    for want in per_chunk:
        row = [0] * len(problem.groups)
        while want > 0:
            while remaining[gi] == 0:
                gi += 1
            take = min(want, remaining[gi])
            row[gi] += take
            remaining[gi] -= take
            want -= take
        result.append(row)
    return result


def uniform_assignment(problem: Problem, layers: list[list[int]], option: int) -> Assignment:
    """Every layer uses option `option` (None where a kind lacks it is an error)."""
    counts = []
    for row in layers:
        counts.append(
            tuple(tuple(n if o == option else 0 for o in range(len(problem.options))) for n in row)
        )
    return Assignment(tuple(counts))
