"""How to search, and the resolved input of one plan."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from autotune.specs.base import MAX_COUNT, Spec
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.chip import ChipSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.model import ModelSpec
from autotune.specs.training import TrainingSpec


class DataflowPolicy(str, Enum):
    """How phase 1 picks each FC layer's dataflow."""

    COST = "cost"  # price every stationary choice and variant, take the cheapest
    SIZE_RULE = "size-rule"  # the paper's rule: keep the largest matrix stationary
    ALWAYS_W = "always-w"  # every layer weight-stationary (the paper's Table 2 baseline)
    # every layer output-stationary: what a framework's default 2D sharding
    # (every tensor's rows on mesh rows, columns on mesh columns) runs
    ALWAYS_Y = "always-y"


class SliceScope(str, Enum):
    """Whether each GEMM gets its own slice count or a layer shares one."""

    GEMM = "gemm"
    LAYER = "layer"


class SearchSpec(Spec):
    """Search knobs (all optional)."""

    dataflow: DataflowPolicy = Field(
        default=DataflowPolicy.COST,
        strict=False,
        description="cost, size-rule, always-w or always-y.",
    )
    slice_count_per: SliceScope = Field(
        default=SliceScope.GEMM,
        strict=False,
        description="gemm: forward/backward GEMMs each get their own S; layer: one S per layer.",
    )
    max_slice_count: int | None = Field(
        default=None,
        gt=0,
        le=MAX_COUNT,
        description="Largest S to consider; omitted means every valid S. Range: 1 to 2^24.",
    )
    attention_locality: bool = Field(
        default=True,
        description=(
            "Require heads to divide over the feature axis and sequences over the token axis, "
            "so attention itself needs no communication (the paper's assumption)."
        ),
    )
    num_runner_ups: int = Field(
        default=4, ge=0, le=1000, description="Other mesh shapes to report. Range: 0 to 1000."
    )


class PlanInput(Spec):
    """Everything one plan is computed from, resolved and validated."""

    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    chip: ChipSpec | None = None
    calibration: CalibrationSpec
    search: SearchSpec
    source_file: str | None = None
    cluster_ref: str | None = None
    calibration_ref: str | None = None
