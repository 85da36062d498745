"""The `job` section of the plan JSON (`meshtune.plan/2`): the whole step,
where its time goes and the memory of every pipeline stage. Base units."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

JOB_SECTION_VERSION = 1


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimePartDoc(_Doc):
    """One line of where the step's time goes (busiest stage)."""

    name: str
    time_s: float
    share: float = Field(description="time_s / step_s.")


class LayerTimesDoc(_Doc):
    """One block, one micro-batch, one chip, seconds."""

    fc_forward_s: float
    fc_backward_s: float
    fc_exposed_comm_s: float
    attention_forward_s: float
    attention_backward_s: float
    elementwise_forward_s: float
    elementwise_backward_s: float
    recompute_s: float


class StageMemoryDoc(_Doc):
    """Peak memory of one pipeline stage on one chip, bytes."""

    stage: int
    layers: int
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    buffers_bytes: float = Field(
        description="Gathered-slice buffers, ZeRO-3 gathered weights, logits."
    )
    workspace_bytes: float
    reserve_bytes: float = Field(description="Kept free for allocator fragmentation.")
    total_bytes: float
    capacity_bytes: float
    headroom_bytes: float


class JobDoc(_Doc):
    """The whole training step."""

    version: int = Field(default=JOB_SECTION_VERSION, description="Version of this section.")
    chips: int
    tensor_parallel: int
    data_parallel: int
    pipeline_parallel: int
    interleave: int
    micro_batches: int
    micro_batch_sequences: int
    recompute: str
    zero_stage: int
    fc_algorithm: str
    attention: str
    step_s: float
    tokens_per_s: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    mfu: float | None
    hfu: float | None
    bubble_fraction: float = Field(description="(pp * makespan - busy) / busy over all stages.")
    breakdown_stage: int = Field(description="The stage whose time the breakdown follows.")
    breakdown: list[TimePartDoc]
    data_parallel_comm_s: float
    data_parallel_exposed_s: float
    layer: LayerTimesDoc
    memory: list[StageMemoryDoc]
    warnings: list[str]
