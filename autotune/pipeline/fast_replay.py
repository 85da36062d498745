"""The simulator's makespan and per-stage activation peak, vectorised.

Why: the op-by-op replay (simulator.py) costs about a second at 64 stages and
512 micro-batches, and the whole-step model replays one such schedule per
plan. This replay applies exactly the simulator's rules (an op starts when
its stage is free and its input is ready, schedule.py's per-stage order) as a
longest path over the schedule's dependency graph (search.schedule_graph,
the one the balancer's searches use): the end times are the same maxima and
sums the simulator computes, in the same floating-point order.

It returns no blocks and no critical path; use `simulate` for those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy

from autotune.pipeline.schedule import stage_orders
from autotune.pipeline.search import makespans_s, schedule_graph


@dataclass(frozen=True)
class FastReplay:
    """Makespan (seconds) and, per stage, the peak activation bytes the
    schedule keeps alive (max over the moments after each forward of
    sum_k alive_k * activation of local chunk k)."""

    makespan_s: float
    stage_peak_activation_bytes: tuple[float, ...]


def fast_replay(
    num_stages: int,
    num_chunks: int,
    num_micro_batches: int,
    interleaved: bool,
    chunk_forward_s: list[float],
    chunk_backward_s: list[float],
    chunk_activation_bytes: list[float],
) -> FastReplay:
    """Replay 1F1B (or interleaved 1F1B) with the given per-model-chunk
    forward and backward seconds per micro-batch and activation bytes per
    micro-batch (model chunk c runs on stage c mod pp)."""
    pp, m = num_stages, num_micro_batches
    num = pp * num_chunks
    if not (len(chunk_forward_s) == len(chunk_backward_s) == len(chunk_activation_bytes) == num):
        raise ValueError(f"need {num} per-chunk times and bytes")
    graph = schedule_graph(pp, num_chunks, m, interleaved)
    durations = numpy.array([list(chunk_forward_s) + list(chunk_backward_s)], dtype=float)
    makespan_s = float(makespans_s(graph, durations)[0])

    ops = numpy.array(stage_orders(pp, num_chunks, m, interleaved), dtype=numpy.int64)
    per_stage = ops.shape[1]
    is_fwd = ops[:, :, 0].astype(bool)
    act = numpy.asarray(chunk_activation_bytes, dtype=float)
    sign = numpy.where(is_fwd, 1.0, -1.0)
    local = ops[:, :, 1]
    steps = numpy.zeros((pp, per_stage, num_chunks))
    numpy.put_along_axis(steps, local[:, :, None], sign[:, :, None], axis=2)
    alive = numpy.cumsum(steps, axis=1)
    act_local = act.reshape(num_chunks, pp).T  # [stage, local chunk]
    held = numpy.einsum("skv,sv->sk", alive, act_local)
    held = numpy.where(is_fwd, held, -numpy.inf)
    return FastReplay(makespan_s, tuple(float(x) for x in held.max(axis=1)))
