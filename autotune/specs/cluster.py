"""The hardware: chips, the mesh shapes they can be wired as, and which
calibration describes their links and compute."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import Spec


class Topology(str, Enum):
    """How the chips are wired: every mesh row and column a ring (torus)."""

    TORUS = "torus"


class ClusterSpec(Spec):
    """A cluster description (human units in its keys, converted on use)."""

    name: str = Field(description="Cluster name shown in reports.")
    num_chips: int = Field(gt=0, description="Chips in the cluster.")
    topology: Topology = Field(
        default=Topology.TORUS,
        strict=False,
        description="torus: every mesh row and column is a ring.",
    )
    peak_tflops_per_s: dict[str, float] = Field(
        description="Per-chip peak dense TFLOP/s by dtype, e.g. {bf16: 275}."
    )
    hbm_gib: float | None = Field(default=None, gt=0, description="Per-chip memory in GiB.")
    block_size: int = Field(
        default=8, gt=0, description="MeshSlice slicing block b (8 on TPU v4: 128x8 tiles)."
    )
    mesh_shapes: list[list[int]] | None = Field(
        default=None,
        description="Allowed [rows, cols] meshes; omitted means every factor pair.",
    )
    min_axis_size: int = Field(
        default=1, gt=0, description="Smallest allowed mesh side when mesh_shapes is omitted."
    )
    calibration: str = Field(
        default="tpu-v4", description="Calibration preset name or path to a calibration JSON."
    )
    overlap_slowdown: float | None = Field(
        default=None,
        ge=1.0,
        description="Compute slowdown while communication overlaps it; overrides the calibration.",
    )
    source: str | None = Field(default=None, description="Where these figures come from.")
    hbm_gb_per_s: float | None = Field(
        default=None, gt=0, description="Per-chip HBM bandwidth, GB/s (memory-bound ops)."
    )
    attention_tflops_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Sustained fused-attention rate per chip, TFLOP/s; omitted means the "
        "calibration's GEMM rate.",
    )
    data_parallel_gb_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Per-chip, per-direction bandwidth of the network tier data-parallel "
        "collectives cross, GB/s.",
    )
    pipeline_gb_per_s: float | None = Field(
        default=None,
        gt=0,
        description="Per-chip, per-direction bandwidth between pipeline stages, GB/s.",
    )
    network_latency_us: float | None = Field(
        default=None,
        ge=0,
        description="Per-step latency of data-parallel and pipeline transfers, microseconds.",
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        for dtype, value in self.peak_tflops_per_s.items():
            if value <= 0:
                raise ValueError(
                    f"peak_tflops_per_s.{dtype} must be > 0, got {value}; fix: give the chip's peak"
                )
        for shape in self.mesh_shapes or []:
            if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
                raise ValueError(
                    f"mesh_shapes entry {shape} must be [rows, cols] with positive sides; "
                    "fix: write each shape as a two-number list such as [16, 16]"
                )
        return self

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Peak FLOP/s of one chip for `dtype` (base units), or None if unknown."""
        value = self.peak_tflops_per_s.get(dtype)
        return None if value is None else value * 1e12
