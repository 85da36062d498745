"""A calibration: fitted collective parameters per operation and mesh axis,
and the compute rate, with the fit quality and source they came from."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from autotune.specs.base import (
    FINITE_CONFIG,
    MAX_BYTES_PER_S,
    MAX_DIM,
    MAX_FACTOR,
    MAX_FLOPS_PER_S,
    MAX_SECONDS,
    Spec,
)
from cost_models import CollectiveOp

CALIBRATION_SCHEMA = "meshtune.calibration/1"


class CollectiveFit(Spec):
    """How well a collective's linear model fits its measurements."""

    num_points: int = Field(ge=0, description="Measurements used.")
    ring_sizes: list[int] = Field(description="Distinct ring sizes P among them.")
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    rms_rel_error: float | None = Field(default=None, ge=0, description="RMS relative error.")
    max_rel_error: float | None = Field(default=None, ge=0, description="Largest relative error.")
    launch_s_stderr: float | None = Field(default=None, ge=0, description="1-sigma of launch_s.")
    sync_s_stderr: float | None = Field(default=None, ge=0, description="1-sigma of sync_s.")
    link_bytes_per_s_stderr: float | None = Field(
        default=None, ge=0, description="1-sigma of link_bytes_per_s."
    )
    identifiable: list[str] = Field(
        default_factory=list, description="Parameters (or combinations) the data determines."
    )
    note: str | None = Field(default=None, description="Caveats, e.g. an unseparated launch+sync.")
    num_outliers: int | None = Field(
        default=None, ge=0, description="Measurements the robust fit set aside as outliers."
    )
    combined_latency_s: float | None = Field(
        default=None,
        ge=0,
        description="launch_s + (P-1)*sync_s at the single measured ring size, when only that "
        "combination is determined (launch_s then holds it and sync_s is 0).",
    )
    combined_latency_s_stderr: float | None = Field(
        default=None, ge=0, description="1-sigma of combined_latency_s."
    )


class LinkSpec(Spec):
    """Linear model `t = launch_s + (P-1) * (sync_s + shard_bytes / link_bytes_per_s)`."""

    launch_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="Fixed launch overhead per collective, seconds. Range: 0 to 3600.",
    )
    sync_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="Synchronisation latency per ring step, seconds. Range: 0 to 3600.",
    )
    link_bytes_per_s: float = Field(
        gt=0,
        le=MAX_BYTES_PER_S,
        description="Effective per-step link bandwidth, bytes/s. Range: above 0, at most 1e15.",
    )
    fit: CollectiveFit | None = Field(default=None, description="Fit quality, when fitted.")


class EfficiencyCurve(Spec):
    """`eff = m/(m+m_half) * n/(n+n_half) * k/(k+k_half)` on top of the
    effective rate (see cost_models.compute.saturating_efficiency)."""

    m_half: float = Field(
        ge=0, le=MAX_DIM, description="Rows at which the M factor is one half. Range: 0 to 2^24."
    )
    n_half: float = Field(
        ge=0,
        le=MAX_DIM,
        description="Columns at which the N factor is one half. Range: 0 to 2^24.",
    )
    k_half: float = Field(
        ge=0,
        le=MAX_DIM,
        description="Contraction size at which the K factor is one half. Range: 0 to 2^24.",
    )


class ComputeSpec(Spec):
    """Local GEMM throughput of one chip."""

    dtype: str = Field(description="Element type the rate was measured for, e.g. bf16.")
    effective_flops_per_s: float = Field(
        gt=0,
        le=MAX_FLOPS_PER_S,
        description="Large-GEMM rate, FLOP/s. Range: above 0, at most 1e18.",
    )
    efficiency_curve: EfficiencyCurve | None = Field(
        default=None, description="Shape dependence; omitted means a constant rate."
    )
    fit: dict[str, float | int | str | None] | None = Field(
        default=None, description="Fit quality of the compute model, when fitted."
    )


class SourceFile(Spec):
    """An input a calibration was fitted from."""

    path: str = Field(description="File as given.")
    sha256: str | None = Field(default=None, description="Content hash.")
    kind: str | None = Field(default=None, description="meshtune-csv or nccl-tests.")
    rows_used: int | None = Field(default=None, ge=0, description="Rows that entered the fit.")
    description: str | None = Field(
        default=None, description="What the file measured, e.g. test, ranks, hosts and GPU."
    )


class CalibrationSpec(Spec):
    """A calibration file (written by `meshtune calibrate` or bundled)."""

    schema_: str = Field(alias="schema", description=f"Always {CALIBRATION_SCHEMA}.")
    name: str = Field(description="Calibration name.")
    source: str = Field(description="Where the numbers come from.")
    tool_version: str | None = Field(default=None, description="meshtune version that wrote it.")
    collectives: dict[str, dict[str, LinkSpec]] = Field(
        description="operation -> mesh axis (row, col) -> link parameters."
    )
    compute: ComputeSpec = Field(description="Local GEMM throughput.")
    overlap_slowdown: float = Field(
        default=1.0,
        ge=1.0,
        le=MAX_FACTOR,
        description="Compute slowdown while communication overlaps it. Range: 1 to 1000.",
    )
    inputs: list[SourceFile] = Field(default_factory=list, description="Files fitted from.")
    base_calibration: str | None = Field(
        default=None,
        description="Calibration whose entries were kept for pairs the measurements do not cover.",
    )
    kept_from_base: list[str] = Field(
        default_factory=list,
        description="Entries copied unchanged from base_calibration (e.g. send_recv.row, compute).",
    )

    model_config = ConfigDict(**FINITE_CONFIG, populate_by_name=True)

    @model_validator(mode="after")
    def _check(self) -> CalibrationSpec:
        if self.schema_ != CALIBRATION_SCHEMA:
            raise ValueError(
                f"schema must be {CALIBRATION_SCHEMA!r}, got {self.schema_!r}; "
                "fix: write the file with `meshtune calibrate`"
            )
        known_ops = {op.value for op in CollectiveOp}
        for op, axes in self.collectives.items():
            if op not in known_ops:
                raise ValueError(
                    f"unknown collective {op!r}; fix: use one of {', '.join(sorted(known_ops))}"
                )
            for axis in axes:
                if axis not in ("row", "col"):
                    raise ValueError(
                        f"collectives.{op} has unknown mesh axis {axis!r}; fix: use row or col"
                    )
        return self
