"""The one place the whole-step model talks to the pipeline package: build
its problem from per-layer times and memories, replay the schedule, and
read back the makespan, the bubble and the per-stage peaks."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.assignment import (
    chunk_activation_bytes,
    chunk_backward_s,
    chunk_forward_s,
    even_layer_split,
    stage_static_bytes,
    uniform_assignment,
)
from autotune.pipeline.fast_replay import fast_replay
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule


@dataclass(frozen=True)
class StageWork:
    """Per micro-batch seconds and bytes of the pieces a pipeline holds."""

    num_stages: int
    num_chunks: int
    num_micro_batches: int
    num_layers: int
    layer_forward_s: float
    layer_backward_s: float
    layer_static_bytes: float
    layer_activation_bytes: float
    head_forward_s: float
    head_backward_s: float
    head_bytes: float
    tail_forward_s: float
    tail_backward_s: float
    tail_bytes: float
    constant_bytes: float


@dataclass(frozen=True)
class PipelineReplay:
    """What the schedule replay found (seconds, bytes)."""

    makespan_s: float
    stage_busy_s: tuple[float, ...]
    stage_peak_bytes: tuple[float, ...]
    stage_static_bytes: tuple[float, ...]
    layers_per_stage: tuple[int, ...]
    bubble_fraction: float


def _upper_bound_bytes(work: StageWork) -> float:
    """More bytes than any stage can hold: every layer's static and
    activation bytes for every micro-batch, the ends and the constant."""
    per_layer = work.layer_static_bytes + work.layer_activation_bytes * work.num_micro_batches
    return (
        work.constant_bytes + work.head_bytes + work.tail_bytes + work.num_layers * per_layer + 1.0
    )


def replay(work: StageWork) -> PipelineReplay:
    """Even layer split (Megatron-LM's), every layer alike, replayed under
    1F1B (one chunk) or interleaved 1F1B: the simulator's makespan and
    per-stage peak memory (its vectorised replay, `fast_replay`, equal to
    `simulate` by tests/test_job_replay.py), and per-stage busy time."""
    problem = Problem(
        num_stages=work.num_stages,
        num_chunks=work.num_chunks,
        num_micro_batches=work.num_micro_batches,
        schedule=Schedule.INTERLEAVED if work.num_chunks > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=1,
        options=(RecomputeOption("none", 0.0),),
        groups=(
            LayerGroup(
                kind="block",
                count=work.num_layers,
                forward_s=work.layer_forward_s,
                backward_s=work.layer_backward_s,
                parameter_bytes=work.layer_static_bytes,
                activation_bytes=(work.layer_activation_bytes,),
            ),
        ),
        head=EndBlock(work.head_forward_s, work.head_backward_s, work.head_bytes),
        tail=EndBlock(work.tail_forward_s, work.tail_backward_s, work.tail_bytes),
        constant_bytes=work.constant_bytes,
        # the replay checks no cap: one that the whole model cannot exceed
        memory_cap_bytes=_upper_bound_bytes(work),
    )
    layers = even_layer_split(problem)
    a = uniform_assignment(problem, layers, 0)
    pp, num, m = work.num_stages, problem.num_virtual, work.num_micro_batches
    fwd = [chunk_forward_s(problem, a, c) for c in range(num)]
    bwd = [chunk_backward_s(problem, a, c) for c in range(num)]
    fast = fast_replay(
        pp,
        work.num_chunks,
        m,
        problem.schedule is Schedule.INTERLEAVED,
        fwd,
        bwd,
        [chunk_activation_bytes(problem, a, c) for c in range(num)],
    )
    per_stage = tuple(sum(a.layers_in_chunk(c) for c in range(s, num, pp)) for s in range(pp))
    static = tuple(stage_static_bytes(problem, a, s) for s in range(pp))
    busy = tuple(m * sum(fwd[c] + bwd[c] for c in range(s, num, pp)) for s in range(pp))
    useful = sum(busy)
    return PipelineReplay(
        makespan_s=fast.makespan_s,
        stage_busy_s=busy,
        stage_peak_bytes=tuple(
            s + p for s, p in zip(static, fast.stage_peak_activation_bytes, strict=True)
        ),
        stage_static_bytes=static,
        layers_per_stage=per_stage,
        bubble_fraction=(pp * fast.makespan_s - useful) / useful if useful > 0 else 0.0,
    )
