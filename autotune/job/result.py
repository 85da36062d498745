"""Frozen results of the whole-step model (base units: seconds, bytes, FLOPs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimePart:
    """One line of where the step's time goes on the busiest stage."""

    name: str
    seconds: float


@dataclass(frozen=True)
class StageMemory:
    """Peak memory of one pipeline stage on one chip, bytes."""

    stage: int
    layers: int
    weights: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    workspace: float
    reserve: float
    capacity: float

    @property
    def total(self) -> float:
        """Everything the stage needs, the reserve included."""
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.buffers
            + self.workspace
            + self.reserve
        )

    @property
    def headroom(self) -> float:
        """Capacity minus the total (negative: does not fit)."""
        return self.capacity - self.total


@dataclass(frozen=True)
class LayerTimes:
    """One block, one micro-batch, one chip: forward and backward seconds by part."""

    fc_forward_s: float
    fc_backward_s: float
    fc_exposed_comm_s: float
    attention_forward_s: float
    attention_backward_s: float
    elementwise_forward_s: float
    elementwise_backward_s: float
    recompute_s: float

    @property
    def forward_s(self) -> float:
        """FC + attention core + memory-bound ops, forward."""
        return self.fc_forward_s + self.attention_forward_s + self.elementwise_forward_s

    @property
    def backward_s(self) -> float:
        """The same backward, with the recomputed forward work."""
        return (
            self.fc_backward_s
            + self.attention_backward_s
            + self.elementwise_backward_s
            + self.recompute_s
        )


@dataclass(frozen=True)
class JobResult:
    """The whole training step: time, throughput, utilisation, memory."""

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
    tokens_per_step: int
    model_flops_per_step: float
    hardware_flops_per_step: float
    peak_flops_per_s: float | None
    layer: LayerTimes
    breakdown: tuple[TimePart, ...]
    busiest_stage: int
    bubble_fraction: float
    data_parallel_comm_s: float
    data_parallel_exposed_s: float
    memory: tuple[StageMemory, ...]
    warnings: tuple[str, ...] = ()

    @property
    def tokens_per_s(self) -> float:
        """Tokens the whole cluster trains per second."""
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float | None:
        """Model FLOPs / (step time * chips * peak)."""
        if not self.peak_flops_per_s:
            return None
        return self.model_flops_per_step / (self.step_s * self.chips * self.peak_flops_per_s)

    @property
    def hfu(self) -> float | None:
        """Executed FLOPs (recomputation included) / (step time * chips * peak)."""
        if not self.peak_flops_per_s:
            return None
        return self.hardware_flops_per_step / (self.step_s * self.chips * self.peak_flops_per_s)

    @property
    def fits(self) -> bool:
        """Every stage within its chip's memory."""
        return all(m.headroom >= 0 for m in self.memory)
