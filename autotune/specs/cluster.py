"""The hardware: chips, the mesh shapes they can be wired as, and which
calibration describes their links and compute."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import MAX_CHIPS, MAX_DIM, MAX_FACTOR, MAX_GIB, MAX_TFLOPS_PER_S, Spec


class Topology(str, Enum):
    """How the chips are wired: every mesh row and column a ring (torus)."""

    TORUS = "torus"


class ClusterSpec(Spec):
    """A cluster description (human units in its keys, converted on use)."""

    name: str = Field(description="Cluster name shown in reports.")
    num_chips: int = Field(
        gt=0, le=MAX_CHIPS, description="Chips in the cluster. Range: 1 to 2^24."
    )
    topology: Topology = Field(
        default=Topology.TORUS,
        strict=False,
        description="torus: every mesh row and column is a ring.",
    )
    peak_tflops_per_s: dict[str, float] = Field(
        description="Per-chip peak dense TFLOP/s by dtype, e.g. {bf16: 275}. "
        "Range: each above 0 and at most 1,000,000."
    )
    hbm_gib: float | None = Field(
        default=None,
        gt=0,
        le=MAX_GIB,
        description="Per-chip memory in GiB. Range: above 0, at most 2^20 (1 PiB).",
    )
    block_size: int = Field(
        default=8,
        gt=0,
        le=MAX_DIM,
        description="MeshSlice slicing block b (8 on TPU v4: 128x8 tiles). Range: 1 to 2^24.",
    )
    mesh_shapes: list[list[int]] | None = Field(
        default=None,
        description="Allowed [rows, cols] meshes; omitted means every factor pair. "
        "Range: each side 1 to 2^24.",
    )
    min_axis_size: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Smallest allowed mesh side when mesh_shapes is omitted. Range: 1 to 2^24.",
    )
    calibration: str = Field(
        default="tpu-v4", description="Calibration preset name or path to a calibration JSON."
    )
    overlap_slowdown: float | None = Field(
        default=None,
        ge=1.0,
        le=MAX_FACTOR,
        description="Compute slowdown while communication overlaps it; overrides the "
        "calibration. Range: 1 to 1000.",
    )
    source: str | None = Field(default=None, description="Where these figures come from.")

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        for dtype, value in self.peak_tflops_per_s.items():
            if not 0 < value <= MAX_TFLOPS_PER_S:
                raise ValueError(
                    f"peak_tflops_per_s.{dtype} must be > 0 and <= {MAX_TFLOPS_PER_S:g}, "
                    f"got {value}; fix: give the chip's peak in TFLOP/s"
                )
        for shape in self.mesh_shapes or []:
            if len(shape) != 2 or not (1 <= shape[0] <= MAX_CHIPS and 1 <= shape[1] <= MAX_CHIPS):
                raise ValueError(
                    f"mesh_shapes entry {shape} must be [rows, cols] with sides 1 to 2^24; "
                    "fix: write each shape as a two-number list such as [16, 16]"
                )
        return self

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Peak FLOP/s of one chip for `dtype` (base units), or None if unknown."""
        value = self.peak_tflops_per_s.get(dtype)
        return None if value is None else value * 1e12
