"""A calibration: fitted collective parameters per operation and mesh axis,
and the compute rate, with the fit quality and source they came from."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from autotune.specs.base import (
    FINITE_CONFIG,
    MAX_BYTES,
    MAX_BYTES_PER_S,
    MAX_DIM,
    MAX_FACTOR,
    MAX_FLOPS_PER_S,
    MAX_SECONDS,
    MIN_BYTES_PER_S,
    MIN_FLOPS_PER_S,
    Spec,
)
from autotune.specs.chip import FigureKind
from cost_models import CollectiveOp

CALIBRATION_SCHEMA = "meshtune.calibration/1"

#: Keys under `collectives.<op>`: a mesh axis (row, col: the link as that
#: axis sees it) or a resource kind (its per-unit-link figures, scaled by
#: how many units an axis gets: torus links, a switched chip's egress,
#: fully connected links, a NIC).
AXIS_KEYS = ("row", "col")
RESOURCE_KEYS = ("torus", "switched", "fully_connected", "scale_out", "dcn")


class CrossValidation(Spec):
    """Prediction errors on measurements the fit did not see (relative,
    |predicted - measured| / measured)."""

    interpolation_median_rel_error: float | None = Field(
        default=None, ge=0, description="Median error, each inner size left out in turn."
    )
    interpolation_p90_rel_error: float | None = Field(
        default=None, ge=0, description="90th percentile of the same errors."
    )
    interpolation_worst_rel_error: float | None = Field(
        default=None, ge=0, description="Worst of the same errors."
    )
    extrapolation_cut_shard_bytes: float | None = Field(
        default=None, gt=0, description="Fitted on pieces up to this size, predicted the larger."
    )
    extrapolation_median_rel_error: float | None = Field(
        default=None, ge=0, description="Median error on the pieces above the cut."
    )
    extrapolation_worst_rel_error: float | None = Field(
        default=None, ge=0, description="Worst error on the pieces above the cut."
    )
    message_cut_bytes: float | None = Field(
        default=None,
        gt=0,
        description="The same split with the cut on the message (the nccl-tests size "
        "column): fitted on messages up to this size, predicted the larger.",
    )
    message_cut_median_rel_error: float | None = Field(
        default=None, ge=0, description="Median error on the messages above that cut."
    )
    message_cut_worst_rel_error: float | None = Field(
        default=None, ge=0, description="Worst error on the messages above that cut."
    )
    note: str | None = Field(
        default=None, description="What could not be cross-validated, and why."
    )


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
    model: str | None = Field(
        default=None, description="linear (one straight line) or regimes (one line per size range)."
    )
    shard_bytes_min: float | None = Field(
        default=None, gt=0, description="Smallest per-chip piece measured, bytes."
    )
    shard_bytes_max: float | None = Field(
        default=None,
        gt=0,
        description="Largest per-chip piece measured, bytes; larger pieces are extrapolated.",
    )
    extrapolation: str | None = Field(
        default=None,
        description="How pieces above shard_bytes_max are predicted (the rate the last "
        "regime continues with, and whether larger pieces will likely run faster).",
    )
    resource: str | None = Field(
        default=None,
        description="What the measured rings crossed: intra_node (one host) or scale_out "
        "(several hosts); null for benchmark CSV rows.",
    )
    cross_validation: CrossValidation | None = Field(
        default=None, description="Errors on measurements left out of the fit."
    )
    outliers: list[str] = Field(
        default_factory=list,
        description="Measurements set aside by the robust fit, as FILE:LINE (relative error).",
    )


class RegimeSpec(Spec):
    """One size regime of a collective: the linear model for per-chip
    pieces above the previous regime's bound up to `max_shard_bytes`."""

    max_shard_bytes: float | None = Field(
        gt=0,
        le=MAX_BYTES,
        description="Largest per-chip piece (bytes) of the regime; null for the last one. "
        "Range: above 0, at most 2^50.",
    )
    launch_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="Launch overhead in this regime, seconds. Range: 0 to 3600.",
    )
    sync_s: float = Field(
        ge=0,
        le=MAX_SECONDS,
        description="Per-step synchronisation latency here, seconds. Range: 0 to 3600.",
    )
    link_bytes_per_s: float = Field(
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Per-step link bandwidth here, bytes/s. Range: 1e6 to 1e15.",
    )


class LinkSpec(Spec):
    """Model `t = launch_s + (P-1) * (sync_s + shard_bytes / link_bytes_per_s)`,
    one straight line, or one line per size regime when `regimes` is given
    (the plain fields then repeat the last, large-message regime)."""

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
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Effective per-step link bandwidth, bytes/s. Range: 1e6 to 1e15.",
    )
    regimes: list[RegimeSpec] | None = Field(
        default=None,
        description="Size regimes in increasing order (NCCL protocol/channel switches); "
        "omitted means one straight line for every size.",
    )
    fit: CollectiveFit | None = Field(default=None, description="Fit quality, when fitted.")

    @model_validator(mode="after")
    def _check_regimes(self) -> LinkSpec:
        if not self.regimes:
            return self
        bounds = [r.max_shard_bytes for r in self.regimes]
        if bounds[-1] is not None or any(b is None for b in bounds[:-1]):
            raise ValueError(
                "regimes: only the last regime has max_shard_bytes null; "
                "fix: write the calibration with `meshtune calibrate`"
            )
        finite = [b for b in bounds if b is not None]
        if finite != sorted(finite) or len(set(finite)) != len(finite):
            raise ValueError(
                "regimes: max_shard_bytes must increase; fix: sort the regimes by size"
            )
        return self


class AttentionBackwardSpec(Spec):
    """A fused attention kernel's measured rate, saturating in the sequence
    length: `rate = flops_per_s * s / (s + seq_half)`
    (cost_models.context_parallel.attention_rate_flops_per_s); as the
    backward's own entry its FLOPs are 2.5 times the forward's."""

    flops_per_s: float = Field(
        ge=MIN_FLOPS_PER_S,
        le=MAX_FLOPS_PER_S,
        description="Asymptotic rate at long sequences, FLOP/s. Range: 1e9 to 1e18.",
    )
    seq_half: float = Field(
        default=0.0,
        ge=0,
        le=2.0**24,
        description="Sequence length at which the rate is half the asymptotic one (0: "
        "constant). Range: 0 to 2^24.",
    )
    measured_seq: list[Annotated[int, Field(ge=1, le=2**24)]] = Field(
        min_length=2,
        max_length=2,
        description="[shortest, longest] sequence measured. Range: 1 to 2^24 tokens.",
    )
    fit: dict[str, float | int | str | None] | None = Field(
        default=None, description="Fit quality, when fitted."
    )


class AttentionSpec(AttentionBackwardSpec):
    """The fused attention kernel's measured rate (FLOPs of the forward
    `4 b nh s^2 d`, halved when causal, per second), saturating in the
    sequence length (the fields it shares with AttentionBackwardSpec), and
    the backward's own rate when measured."""

    dtype: str = Field(description="Element type measured, e.g. bf16.")
    source: str | None = Field(default=None, description="Where the rows came from.")
    backward: AttentionBackwardSpec | None = Field(
        default=None,
        description="The backward kernel's own rate (FLOPs 2.5 forwards), fitted from "
        "attention_backward rows. Omitted: the backward runs at the forward's rate.",
    )


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
    max_dims: list[Annotated[float, Field(ge=1, le=2.0**48)]] | None = Field(
        default=None,
        min_length=3,
        max_length=3,
        description="Largest m, n, k measured; beyond them the efficiency is held at its "
        "value there (a conservative extrapolation). Omitted: the curve applies everywhere. "
        "Range: three values, each 1 to 2^48.",
    )


class TileModelSpec(Spec):
    """The shape-aware GEMM model (cost_models.compute.tiled_gemm_work): tile
    and wave quantisation over the chip's cores, each tile's k overhead and
    reuse penalty, and a fixed time per GEMM kernel."""

    num_cores: int = Field(
        ge=1, le=1_000_000, description="Cores (SMs, CUs) the tiles spread over. Range: 1 to 1e6."
    )
    launch_s: float = Field(
        ge=0, le=1.0, description="Fixed seconds of every GEMM kernel. Range: 0 to 1."
    )
    k_overhead: float = Field(
        ge=0,
        le=MAX_DIM,
        description="Each tile's prologue and epilogue, as elements of k. Range: 0 to 2^24.",
    )
    reuse_penalty: float = Field(
        ge=0,
        le=MAX_DIM,
        description="Cost of a small tile's lower reuse, elements: work times "
        "1 + reuse_penalty * (1/Tm + 1/Tn). Range: 0 to 2^24.",
    )
    tiles: list[
        Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=2, max_length=2)]
    ] = Field(
        min_length=1,
        max_length=64,
        description="Output tile shapes [Tm, Tn] the library chooses among (the cheapest "
        "per GEMM). Range: 1 to 64 shapes, each side 1 to 4096.",
    )


class ComputeSpec(Spec):
    """Local GEMM throughput of one chip."""

    dtype: str = Field(description="Element type the rate was measured for, e.g. bf16.")
    effective_flops_per_s: float = Field(
        ge=MIN_FLOPS_PER_S,
        le=MAX_FLOPS_PER_S,
        description="Large-GEMM rate, FLOP/s. Range: 1e9 to 1e18.",
    )
    efficiency_curve: EfficiencyCurve | None = Field(
        default=None, description="Shape dependence; omitted means a constant rate."
    )
    measured_dims: list[list[Annotated[float, Field(ge=1, le=2.0**48)]]] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="[[smallest m, n, k], [largest m, n, k]] among the GEMMs measured: a plan "
        "pricing GEMMs outside says it extrapolates. Omitted: efficiency_curve.max_dims, if any. "
        "Range: two lists of three values, each 1 to 2^48.",
    )
    tile_model: TileModelSpec | None = Field(
        default=None,
        description="Shape-aware model (tiles, waves, launch): when given, it replaces "
        "efficiency_curve and effective_flops_per_s is the rate of whole waves of tiles.",
    )
    fit: dict[str, float | int | str | None] | None = Field(
        default=None, description="Fit quality of the compute model, when fitted."
    )
    peak_flops_per_s: float | None = Field(
        default=None,
        ge=MIN_FLOPS_PER_S,
        le=MAX_FLOPS_PER_S,
        description="The chip's peak for dtype (roofline ceiling): no GEMM is predicted "
        "faster. Omitted: no ceiling. Range: 1e9 to 1e18.",
    )
    hbm_bytes_per_s: float | None = Field(
        default=None,
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="HBM bandwidth for the memory roofline, bytes/s. Range: 1e6 to 1e15.",
    )
    source: str | None = Field(
        default=None, description="Where the rate comes from when it was not fitted."
    )

    def measured_range(self) -> tuple[list[float] | None, list[float] | None]:
        """(smallest, largest) m, n, k measured: `measured_dims`, else the
        efficiency curve's `max_dims` (no smallest), else (None, None)."""
        if self.measured_dims is not None:
            return list(self.measured_dims[0]), list(self.measured_dims[1])
        curve = self.efficiency_curve
        if curve is not None and curve.max_dims is not None:
            return None, list(curve.max_dims)
        return None, None


class SourceFile(Spec):
    """An input a calibration was fitted from."""

    path: str = Field(description="File as given.")
    sha256: str | None = Field(default=None, description="Content hash.")
    kind: str | None = Field(default=None, description="meshtune-csv or nccl-tests.")
    rows_used: int | None = Field(default=None, ge=0, description="Rows that entered the fit.")
    description: str | None = Field(
        default=None, description="What the file measured, e.g. test, ranks, hosts and GPU."
    )


#: a held-out relative error above this (100,000%) is not an error estimate
MAX_REL_ERROR = 1000.0


class ExpectedError(Spec):
    """Summary of the cross-validated errors of a calibration (relative:
    0.05 is 5%)."""

    collective_median_rel_error: float | None = Field(
        default=None,
        ge=0,
        le=MAX_REL_ERROR,
        description="Median held-out error over the collective fits. Range: 0 to 1000.",
    )
    collective_worst_rel_error: float | None = Field(
        default=None,
        ge=0,
        le=MAX_REL_ERROR,
        description="Worst held-out error over the collective fits. Range: 0 to 1000.",
    )
    compute_median_rel_error: float | None = Field(
        default=None,
        ge=0,
        le=MAX_REL_ERROR,
        description="Median held-out error of the GEMM model. Range: 0 to 1000.",
    )
    compute_worst_rel_error: float | None = Field(
        default=None,
        ge=0,
        le=MAX_REL_ERROR,
        description="Worst held-out error of the GEMM model. Range: 0 to 1000.",
    )
    basis: str = Field(description="How the numbers were obtained.")


#: the most `host_launch_s` may be: one kernel launch, not a layer's or a step's
MAX_HOST_LAUNCH_S = 1e-3


class CalibrationSpec(Spec):
    """A calibration file (written by `meshtune calibrate` or bundled)."""

    schema_: str = Field(alias="schema", description=f"Always {CALIBRATION_SCHEMA}.")
    name: str = Field(description="Calibration name.")
    source: str = Field(description="Where the numbers come from.")
    tool_version: str | None = Field(default=None, description="meshtune version that wrote it.")
    collectives: dict[str, dict[str, LinkSpec]] = Field(
        description="operation -> mesh axis (row, col) or resource kind (torus, switched, "
        "fully_connected, scale_out, dcn: per unit link) -> link parameters."
    )
    figures: FigureKind | None = Field(
        default=None,
        strict=False,
        exclude_if=lambda v: v is None,
        description="nominal (data sheet x a stated efficiency) or fitted (from measurements); "
        "omitted in files written before this field existed.",
    )
    compute: ComputeSpec | None = Field(
        default=None,
        description="Local GEMM throughput; null when the inputs had no GEMM rows and named "
        "no known chip (meshtune plan then uses the cluster's nominal peak, with a warning).",
    )
    attention: AttentionSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The fused attention kernel's rate, fitted from attention rows. Omitted: "
        "the cluster's attention_tflops_per_s, else the GEMM rate (the plan warns).",
    )
    compute_fp8: ComputeSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="FP8 GEMM throughput (dtype fp8), fitted from fp8 gemm rows beside the "
        "compute entry: what the FC layers run at under an FP8 recipe. Omitted: the compute "
        "entry's efficiency at the chip's fp8 peak (the plan warns).",
    )
    overlap_slowdown: float = Field(
        default=1.0,
        ge=1.0,
        le=MAX_FACTOR,
        description="Compute slowdown while communication overlaps it. Range: 1 to 1000.",
    )
    host_launch_s: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        ge=0.0,
        le=MAX_HOST_LAUNCH_S,
        description="Host (CPU and framework) seconds to issue one kernel of the routed "
        "experts' per-expert path (Megatron-LM with Transformer Engine's GroupedLinear); 0 "
        "leaves host time out; `host_launch` rows' median. Omitted: 13.7e-6, a public "
        "profile's median (cost_models.moe.DEFAULT_HOST_LAUNCH_S; the report names it where it "
        "binds). Range: 0 to 1e-3.",
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
    chip: str | None = Field(
        default=None,
        description="Chip preset the calibration describes (named by --cluster or matched "
        "from the device lines of the logs); null when unknown.",
    )
    derived: list[str] = Field(
        default_factory=list,
        description="Entries derived from other measured entries, each with how "
        "(e.g. all_gather.row from all_reduce.row).",
    )
    from_preset: list[str] = Field(
        default_factory=list,
        description="Entries taken from the chip preset because no input measured them.",
    )
    expected_error: ExpectedError | None = Field(
        default=None,
        description="Cross-validated relative error a prediction from this calibration "
        "should expect (shown by meshtune plan next to predicted times).",
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
                if axis not in AXIS_KEYS + RESOURCE_KEYS:
                    raise ValueError(
                        f"collectives.{op} has unknown mesh axis or resource {axis!r}; fix: use "
                        f"one of {', '.join(AXIS_KEYS + RESOURCE_KEYS)}"
                    )
        return self
