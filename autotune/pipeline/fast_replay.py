"""The simulator's makespan and per-stage activation peak, vectorised.

Why: the op-by-op replay (simulator.py) costs about a second at 64 stages and
512 micro-batches, and the whole-step model replays one such schedule per
plan. This replay applies exactly the simulator's rules (an op starts when
its stage is free and its input is ready, schedule.py's per-stage order) as a
longest path over the schedule's dependency graph, processed in
topological waves (Kahn's algorithm) with numpy: each wave is every op whose
predecessors have all finished, so the end times are the same maxima and
sums the simulator computes, in the same floating-point order.

It returns no blocks and no critical path; use `simulate` for those.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy

from autotune.pipeline.schedule import stage_orders


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
    ops = numpy.array(stage_orders(pp, num_chunks, m, interleaved), dtype=numpy.int64)
    per_stage = ops.shape[1]
    n = pp * per_stage
    is_fwd = ops[:, :, 0].reshape(n).astype(bool)
    stage = numpy.repeat(numpy.arange(pp), per_stage)
    chunk = ops[:, :, 1].reshape(n) * pp + stage
    micro = ops[:, :, 2].reshape(n)
    ids = numpy.arange(n)
    where = numpy.empty((2, num, m), dtype=numpy.int64)  # [is_forward, chunk, micro-batch]
    where[is_fwd.astype(numpy.int64), chunk, micro] = ids

    first_in_stage = ids % per_stage == 0
    pred1 = numpy.where(first_in_stage, n, ids - 1)
    pred2 = numpy.full(n, n)
    f = is_fwd & (chunk > 0)
    pred2[f] = where[1, chunk[f] - 1, micro[f]]
    b = ~is_fwd & (chunk < num - 1)
    pred2[b] = where[0, chunk[b] + 1, micro[b]]
    b = ~is_fwd & (chunk == num - 1)
    pred2[b] = where[1, chunk[b], micro[b]]

    succ1 = numpy.where(ids % per_stage == per_stage - 1, n, ids + 1)
    succ1 = numpy.append(succ1, n)
    succ2 = numpy.full(n + 1, n)
    has2 = pred2 < n
    succ2[pred2[has2]] = ids[has2]
    waiting = (pred1 < n).astype(numpy.int64) + has2
    waiting = numpy.append(waiting, -1)  # the sentinel never becomes ready

    fwd = numpy.asarray(chunk_forward_s, dtype=float)
    bwd = numpy.asarray(chunk_backward_s, dtype=float)
    duration = numpy.where(is_fwd, fwd[chunk], bwd[chunk])
    end = numpy.zeros(n + 1)
    wave = numpy.nonzero(waiting[:n] == 0)[0]
    done = 0
    while wave.size:
        end[wave] = numpy.maximum(end[pred1[wave]], end[pred2[wave]]) + duration[wave]
        done += wave.size
        nxt = numpy.concatenate((succ1[wave], succ2[wave]))
        nxt = nxt[nxt < n]
        numpy.subtract.at(waiting, nxt, 1)
        wave = numpy.unique(nxt[waiting[nxt] == 0])
    if done != n:
        raise RuntimeError("schedule deadlocked: an op waits on one that never runs")

    act = numpy.asarray(chunk_activation_bytes, dtype=float)
    sign = numpy.where(is_fwd, 1.0, -1.0).reshape(pp, per_stage)
    local = ops[:, :, 1]
    steps = numpy.zeros((pp, per_stage, num_chunks))
    numpy.put_along_axis(steps, local[:, :, None], sign[:, :, None], axis=2)
    alive = numpy.cumsum(steps, axis=1)
    act_local = act.reshape(num_chunks, pp).T  # [stage, local chunk]
    held = numpy.einsum("skv,sv->sk", alive, act_local)
    held = numpy.where(is_fwd.reshape(pp, per_stage), held, -numpy.inf)
    return FastReplay(float(end[:n].max()), tuple(float(x) for x in held.max(axis=1)))
