"""The sharding-config JSON (`meshtune.plan/2`): a pydantic model that both
writes and validates it. Base units, unit-suffixed keys, stable key order.

Version 2 adds the `job` section (the whole training step and its memory);
every key of version 1 keeps its meaning."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune import __version__
from autotune.plan.job_schema import JobDoc

PLAN_SCHEMA = "meshtune.plan/2"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class BreakdownDoc(_Doc):
    """Where time goes, seconds."""

    total_s: float = Field(description="Critical-path time.")
    compute_s: float = Field(description="Local GEMM time.")
    launch_s: float = Field(description="Collective launch overheads (hidden or not).")
    sync_s: float = Field(description="Per-step synchronisation (hidden or not).")
    transfer_s: float = Field(description="Bytes over links (hidden or not).")
    exposed_comm_s: float = Field(description="total_s - compute_s: communication not hidden.")


class TensorDoc(_Doc):
    """How one logical tensor is sharded."""

    name: Literal["input", "weight", "output"] = Field(description="X, W or Y of Y = X @ W.")
    shape: list[int] = Field(description="Logical 2D shape.")
    dims: list[str] = Field(description="Names of the two dims.")
    partition_spec: list[str] = Field(
        description="Mesh axis per tensor dim, as jax.sharding.PartitionSpec(*partition_spec)."
    )
    placements: list[str] = Field(
        description="PyTorch DTensor placements for DeviceMesh dims (row, col)."
    )
    stored_transposed: bool = Field(description="True when the tensor's dim 0 is on the col axis.")


class CollectiveDoc(_Doc):
    """One collective a chip issues for a GEMM (all iterations)."""

    op: str
    axis: Literal["row", "col"]
    ring_size: int
    shard_bytes: float
    count: int
    bytes_sent_per_chip: float


class PhysicalGemmDoc(_Doc):
    """The GEMM as it executes on the untransposed mesh."""

    dataflow: Literal["OS", "LS", "RS"]
    m: int
    n: int
    k: int


class GemmDoc(_Doc):
    """One GEMM of a layer."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

    gemm_pass: Literal["forward", "backward_data", "backward_weight"] = Field(alias="pass")
    expression: str = Field(description="The GEMM in Table 1 notation.")
    dataflow: Literal["OS", "LS", "RS"]
    transposed: bool = Field(
        description="Transposed variant: plain schedule on the transposed mesh."
    )
    m: int = Field(description="Output rows.")
    n: int = Field(description="Output columns.")
    k: int = Field(description="Contraction size.")
    executed_as: PhysicalGemmDoc
    num_slices: int = Field(description="MeshSlice slice count S.")
    valid_slice_counts: list[int]
    time_s: float = Field(description="Predicted time of one execution.")
    prologue_s: float
    steady_s: float
    epilogue_s: float
    breakdown: BreakdownDoc
    collectives: list[CollectiveDoc]


class LayerDoc(_Doc):
    """One FC layer."""

    name: str
    in_features: int
    out_features: int
    tokens: int
    count_per_step: int = Field(description="Executions per step on one chip.")
    stationary: Literal["X", "W", "Y"]
    transposed: bool
    size_rule_stationary: Literal["X", "W", "Y"]
    time_per_step_s: float
    exposed_comm_per_step_s: float
    tensors: list[TensorDoc]
    gemms: list[GemmDoc]


class TransposeDoc(_Doc):
    """A transpose the dataflow choice forces (per block, forward and backward)."""

    where: str
    rows: int
    cols: int


class MeshDoc(_Doc):
    """The chosen logical mesh."""

    num_rows: int
    num_cols: int
    num_chips: int
    axis_names: list[str] = Field(description="Names used in partition specs: [row, col].")
    block_size: int = Field(description="Slicing block b.")
    residual_stream_transposed: bool


class CandidateDoc(_Doc):
    """A mesh shape the search considered (ranked)."""

    num_rows: int
    num_cols: int
    feasible: bool
    step_fc_time_s: float | None
    stationaries: str | None
    reason: str | None


class ComparisonDoc(_Doc):
    """The paper's size rule next to the chosen dataflow policy."""

    size_rule_mesh: list[int] | None
    size_rule_step_fc_time_s: float | None
    size_rule_same_mesh_step_fc_time_s: float | None
    differing_layers: list[str]
    note: str | None


class AxisDoc(_Doc):
    """The physical resource one mesh axis runs on."""

    axis: Literal["row", "col"] = Field(description="Mesh axis.")
    size: int = Field(description="Chips along it.")
    kind: str = Field(description="torus, switched, fully_connected, scale_out or axis.")
    resource: str = Field(description="Resource name; axes naming the same one share it.")
    link_multiplier: float = Field(description="Calibrated unit links the axis gets.")
    nominal_bytes_per_s: float | None = Field(description="Data-sheet bandwidth it gets.")
    spans_nodes: bool = Field(description="Whether it crosses nodes (bounded by the NIC).")
    description: str = Field(description="In words.")


class OneDDoc(_Doc):
    """The best 2D mesh against the best 1D (1 x P or P x 1) mesh."""

    two_d_mesh: list[int] | None
    two_d_step_fc_time_s: float | None
    one_d_mesh: list[int] | None
    one_d_step_fc_time_s: float | None
    two_d_speedup: float | None = Field(description="1D time / 2D time (> 1: 2D is faster).")
    note: str | None


class SummaryDoc(_Doc):
    """Totals per training step (busiest pipeline stage)."""

    step_fc_time_s: float
    fc_flops_per_step: float
    flop_utilization: float | None
    peak_flops_per_s: float | None
    transposes_per_block: int
    transpose_s_per_step: float
    breakdown: BreakdownDoc
    warnings: list[str] = Field(description="Caveats about the inputs that affect the numbers.")


class CalibrationRefDoc(_Doc):
    """Which calibration the plan used."""

    name: str
    source: str
    path: str | None
    sha256: str | None
    #: the calibration's held-out relative errors (absent when it records none)
    expected_error: dict | None = None


class InputsDoc(_Doc):
    """What the plan was computed from."""

    plan_file: str | None
    model: dict
    training: dict
    cluster: dict
    cluster_ref: str | None
    calibration: CalibrationRefDoc
    search: dict
    dataflow_policy: Literal["cost", "size-rule", "always-w", "always-y"]


class PlanDocument(_Doc):
    """The whole sharding config."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )

    schema_: Literal["meshtune.plan/2"] = Field(alias="schema")
    tool_version: str = Field(default=__version__)
    mesh: MeshDoc
    summary: SummaryDoc
    layers: list[LayerDoc]
    transposes: list[TransposeDoc]
    mesh_candidates: list[CandidateDoc]
    dataflow_comparison: ComparisonDoc | None
    mesh_axes: list[AxisDoc] = Field(description="The resource under each mesh axis.")
    one_d_comparison: OneDDoc | None
    job: JobDoc = Field(description="The whole training step: time, utilisation, memory.")
    inputs: InputsDoc


def plan_json_schema() -> dict:
    """The JSON Schema of the plan document."""
    return PlanDocument.model_json_schema(by_alias=True)
