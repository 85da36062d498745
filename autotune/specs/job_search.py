"""What the joint parallelism search may choose, and its resolved input.

Every degree is a number the user fixes or `auto` (the search chooses);
constraints narrow what `auto` may pick. Human units in the keys
(`_gb_per_s`, `_us`, `_gib`), converted to base units where they are read.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autotune.specs.base import Spec
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.model import ModelSpec
from autotune.specs.training import DType

Auto = Literal["auto"]


# Activation recomputation modes (Korthikanti et al. 2022), cheapest first.
RECOMPUTE_MODES = ("none", "selective", "full")


class AutoTrainingSpec(Spec):
    """The training step and how the chips divide it: each degree a number
    (fixed) or `auto` (the search chooses)."""

    global_batch_sequences: int = Field(gt=0, description="Sequences per training step.")
    sequence_length: int = Field(gt=0, description="Tokens per sequence.")
    dtype: DType = Field(default=DType.BF16, strict=False, description="bf16, fp16 or fp8.")
    flash_attention: bool = Field(
        default=True,
        description="Fused attention kernel (causal half skipped, no s x s tensors kept); "
        "false prices the unfused core Megatron-LM ran before flash attention.",
    )
    dropout: bool = Field(default=False, description="Dropout after attention and FFN.")
    fp32_gradients: bool = Field(
        default=False, description="Keep and reduce gradients in fp32 (Megatron main grads)."
    )
    overlap_tensor_backward: bool = Field(
        default=False,
        description="1D tensor meshes: a column-parallel layer's backward runs each GEMM's "
        "collective beside the other GEMM (Megatron-LM's asynchronous tensor-parallel "
        "all-reduce); false runs every collective blocking.",
    )
    overlap_data_parallel: bool = Field(
        default=True,
        description="Overlap gradient reduction with the backward pass; false runs it after "
        "the pipeline flush.",
    )
    workspace_gib: float = Field(
        default=1.0,
        ge=0,
        description="Per-chip memory the framework holds besides tensors (runtime context, "
        "GEMM and collective workspaces), GiB.",
    )
    memory_reserve_fraction: float = Field(
        default=0.05, ge=0, lt=1, description="Fraction of HBM kept free for fragmentation."
    )
    data_parallel: int | Auto = Field(default="auto", description="Data-parallel replicas.")
    pipeline_parallel: int | Auto = Field(default="auto", description="Pipeline stages.")
    tensor_mesh: list[int] | Literal["auto", "1d"] = Field(
        default="auto",
        description="[rows, cols] tensor mesh (1D tensor parallelism is [1, N]); auto searches "
        "every shape, 1d only the 1 x N ones.",
    )
    micro_batch_size: int | Auto = Field(default="auto", description="Sequences per micro-batch.")
    interleave: int | Auto = Field(
        default="auto", description="Model chunks per pipeline stage (interleaved 1F1B)."
    )
    recompute: Literal["auto", "none", "selective", "full"] = Field(
        default="auto", description="none, selective, full or auto."
    )
    zero_stage: int | Auto = Field(default="auto", description="ZeRO stage 0-3 or auto.")

    @model_validator(mode="after")
    def _check(self) -> AutoTrainingSpec:
        for name in ("data_parallel", "pipeline_parallel", "micro_batch_size", "interleave"):
            value = getattr(self, name)
            if value != "auto" and value < 1:
                raise ValueError(f"{name} must be >= 1 or auto, got {value}; fix: give a positive")
        if self.zero_stage != "auto" and not 0 <= self.zero_stage <= 3:
            raise ValueError(f"zero_stage must be 0-3 or auto, got {self.zero_stage}")
        mesh = self.tensor_mesh
        if isinstance(mesh, list) and (len(mesh) != 2 or min(mesh) < 1):
            raise ValueError(
                f"tensor_mesh {mesh} must be [rows, cols] with positive sides, auto or 1d; "
                "fix: write e.g. [1, 8]"
            )
        return self


class SearchConstraints(Spec):
    """Limits a user sets on what the search may choose."""

    tensor_parallel_within_node: bool = Field(
        default=True, description="Keep every tensor-parallel group inside one node."
    )
    max_tensor_parallel: int | None = Field(
        default=None, gt=0, description="Largest tensor-parallel group (chips)."
    )
    max_pipeline_stages: int | None = Field(default=None, gt=0, description="Most pipeline stages.")
    max_interleave: int = Field(default=4, gt=0, description="Most model chunks per stage.")
    max_micro_batch_size: int = Field(
        default=16, gt=0, description="Largest micro-batch (sequences)."
    )
    zero_stages: list[int] = Field(default=[0, 1, 2, 3], description="ZeRO stages auto may choose.")
    finalists: int = Field(
        default=3, ge=1, description="Best closed-form candidates balanced by the pipeline ILP."
    )
    top_n: int = Field(default=5, ge=1, description="Alternatives shown beside the winner.")
    ilp_time_limit_s: float = Field(
        default=10.0, gt=0, description="Wall-time limit of one pipeline ILP solve, seconds."
    )


class JobSearchInput(Spec):
    """A resolved search input: model, training with its `auto` degrees,
    cluster with its calibration, and constraints."""

    model: ModelSpec = Field(description="The model.")
    training: AutoTrainingSpec = Field(description="The step and the degrees.")
    cluster: ClusterSpec = Field(description="The cluster (a node preset with -<N>n or a file).")
    calibration: CalibrationSpec = Field(description="The cluster's (or the given) calibration.")
    constraints: SearchConstraints = Field(
        default=SearchConstraints(), description="Limits on what auto may choose."
    )
    source_file: str | None = Field(default=None, description="The plan file.")
    cluster_base: str | None = Field(
        default=None, description="Folder of the cluster file (resolves its chip path)."
    )
