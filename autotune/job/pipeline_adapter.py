"""The one place the whole-step model talks to the pipeline package: build
its problem from per-layer times and memories, replay the schedule, and
read back the makespan, the bubble and the per-stage peaks."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.assignment import (
    even_layer_split,
    stage_static_bytes,
    uniform_assignment,
)
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule
from autotune.pipeline.simulator import simulate


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
    """Even layer split (Megatron-LM's), every layer alike, replayed op by
    op under 1F1B (one chunk) or interleaved 1F1B (the simulator's
    makespan, per-stage busy time and peak memory)."""
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
    sim = simulate(problem, a)
    pp = work.num_stages
    per_stage = tuple(
        sum(a.layers_in_chunk(c) for c in range(s, problem.num_virtual, pp)) for s in range(pp)
    )
    useful = sum(sim.stage_busy_s)
    return PipelineReplay(
        makespan_s=sim.makespan_s,
        stage_busy_s=sim.stage_busy_s,
        stage_peak_bytes=sim.stage_peak_bytes,
        stage_static_bytes=tuple(stage_static_bytes(problem, a, s) for s in range(pp)),
        layers_per_stage=per_stage,
        bubble_fraction=(pp * sim.makespan_s - useful) / useful if useful > 0 else 0.0,
    )
