"""The training shape: batch, sequence, precision, and the other parallelisms
that divide the work before tensor parallelism sees it."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import MAX_CHIPS, MAX_COUNT, Spec


class DType(str, Enum):
    """Element type of activations and weights in the GEMMs."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8 = "fp8"

    @property
    def num_bytes(self) -> int:
        """Bytes per element."""
        return {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}[self.value]


class TrainingSpec(Spec):
    """Per-step work of one tensor-parallel group."""

    global_batch_sequences: int = Field(
        gt=0, le=MAX_COUNT, description="Sequences per training step. Range: 1 to 2^24."
    )
    sequence_length: int = Field(
        gt=0, le=MAX_COUNT, description="Tokens per sequence. Range: 1 to 2^24."
    )
    dtype: DType = Field(default=DType.BF16, strict=False, description="bf16, fp16, fp32 or fp8.")
    data_parallel: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Data-parallel replicas. Range: 1 to 2^24."
    )
    pipeline_parallel: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Pipeline stages. Range: 1 to 2^24."
    )
    micro_batches: int = Field(
        default=1,
        gt=0,
        le=MAX_COUNT,
        description="Micro-batches per step and replica (pipeline). Range: 1 to 2^24.",
    )

    @model_validator(mode="after")
    def _check_split(self) -> TrainingSpec:
        per_replica, rem = divmod(self.global_batch_sequences, self.data_parallel)
        if rem:
            raise ValueError(
                f"global_batch_sequences ({self.global_batch_sequences}) is not divisible by "
                f"data_parallel ({self.data_parallel}); fix: use a batch that is a multiple of it"
            )
        if per_replica % self.micro_batches:
            raise ValueError(
                f"sequences per replica ({per_replica}) are not divisible by micro_batches "
                f"({self.micro_batches}); fix: choose micro_batches that divides them"
            )
        return self

    @property
    def micro_batch_sequences(self) -> int:
        """Sequences in one micro-batch of one replica."""
        return self.global_batch_sequences // self.data_parallel // self.micro_batches

    @property
    def tokens_per_micro_batch(self) -> int:
        """`T`: the token (row) dimension of every FC GEMM."""
        return self.micro_batch_sequences * self.sequence_length
