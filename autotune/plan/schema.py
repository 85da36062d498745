"""The Plan document (`meshtune.plan/3`): a pydantic model that both writes
and validates it, and whose JSON Schema ships in the package
(`autotune/schemas/plan-3.schema.json`). Base units, unit-suffixed keys,
stable key order.

Version 3 is the one document of every plan, pinned or searched: the
configuration in full (degrees, every parallel axis on its resources, the
tensor mesh's per-layer dataflows and slice counts, pipeline stages with
their layers and recomputation), the predictions (the step and where it
goes, memory per stage, MFU), the alternatives with what each loses to, the
search's figures and provenance. The tensor mesh (`mesh`) and its layers
(`layers`) keep the keys of versions 1 and 2, which `meshtune verify`
executes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune import __version__

PLAN_SCHEMA = "meshtune.plan/3"
#: schemas of earlier versions, and of the search summary it replaced
OLD_SCHEMAS = ("meshtune.plan/1", "meshtune.plan/2", "meshtune.job-search/1")

# Every number of the document carries a range, so that a document read back
# (`export`, `verify`) cannot bring an absurd value into arithmetic: counts
# and sizes are whole numbers from 0 to 2^53 (exact in a double); quantities
# (seconds, bytes, FLOPs, ratios) are finite and at most 1e30 in magnitude,
# far above any training step's. Degrees and mesh sides are narrower
# (`Degree`).
MAX_COUNT = 2**53
MAX_MAGNITUDE = 1e30
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Real = Annotated[float, Field(ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
Degree = Annotated[int, Field(ge=1, le=2**24)]


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class BreakdownDoc(_Doc):
    """Where time goes, seconds."""

    total_s: Real = Field(description="Critical-path time.")
    compute_s: Real = Field(description="Local GEMM time.")
    launch_s: Real = Field(description="Collective launch overheads (hidden or not).")
    sync_s: Real = Field(description="Per-step synchronisation (hidden or not).")
    transfer_s: Real = Field(description="Bytes over links (hidden or not).")
    exposed_comm_s: Real = Field(description="total_s - compute_s: communication not hidden.")


class TensorDoc(_Doc):
    """How one logical tensor is sharded."""

    name: Literal["input", "weight", "output"] = Field(description="X, W or Y of Y = X @ W.")
    shape: list[Count] = Field(description="Logical 2D shape.")
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
    ring_size: Count
    shard_bytes: Real
    count: Count
    bytes_sent_per_chip: Real


class PhysicalGemmDoc(_Doc):
    """The GEMM as it executes on the untransposed mesh."""

    dataflow: Literal["OS", "LS", "RS"]
    m: Count
    n: Count
    k: Count


class GemmDoc(_Doc):
    """One GEMM of a layer."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False, defer_build=True
    )

    gemm_pass: Literal["forward", "backward_data", "backward_weight"] = Field(alias="pass")
    expression: str = Field(description="The GEMM in Table 1 notation.")
    dataflow: Literal["OS", "LS", "RS"]
    transposed: bool = Field(
        description="Transposed variant: plain schedule on the transposed mesh."
    )
    m: Count = Field(description="Output rows.")
    n: Count = Field(description="Output columns.")
    k: Count = Field(description="Contraction size.")
    executed_as: PhysicalGemmDoc
    num_slices: Count = Field(description="MeshSlice slice count S.")
    valid_slice_counts: list[Count]
    time_s: Real = Field(description="Predicted time of one execution.")
    prologue_s: Real
    steady_s: Real
    epilogue_s: Real
    breakdown: BreakdownDoc
    collectives: list[CollectiveDoc]


class LayerDoc(_Doc):
    """One FC layer."""

    name: str
    in_features: Count
    out_features: Count
    tokens: Count
    count_per_step: Count = Field(description="Executions per step on one chip.")
    stationary: Literal["X", "W", "Y"]
    transposed: bool
    size_rule_stationary: Literal["X", "W", "Y"]
    time_per_step_s: Real
    exposed_comm_per_step_s: Real
    tensors: list[TensorDoc]
    gemms: list[GemmDoc]


class TransposeDoc(_Doc):
    """A transpose the dataflow choice forces (per block, forward and backward)."""

    where: str
    rows: Count
    cols: Count


class MeshDoc(_Doc):
    """The chosen logical mesh."""

    num_rows: Degree
    num_cols: Degree
    num_chips: Degree
    axis_names: list[str] = Field(description="Names used in partition specs: [row, col].")
    block_size: Degree = Field(description="Slicing block b.")
    residual_stream_transposed: bool


class CandidateDoc(_Doc):
    """A mesh shape the search considered (ranked)."""

    num_rows: Count
    num_cols: Count
    feasible: bool
    step_fc_time_s: Real | None
    stationaries: str | None
    reason: str | None


class ComparisonDoc(_Doc):
    """The paper's size rule next to the chosen dataflow policy."""

    size_rule_mesh: list[Count] | None
    size_rule_step_fc_time_s: Real | None
    size_rule_same_mesh_step_fc_time_s: Real | None
    differing_layers: list[str]
    note: str | None


class AxisDoc(_Doc):
    """The physical resource one mesh axis runs on."""

    axis: Literal["row", "col"] = Field(description="Mesh axis.")
    size: Count = Field(description="Chips along it.")
    kind: str = Field(description="torus, switched, fully_connected, scale_out or axis.")
    resource: str = Field(description="Resource name; axes naming the same one share it.")
    link_multiplier: Real = Field(description="Calibrated unit links the axis gets.")
    nominal_bytes_per_s: Real | None = Field(description="Data-sheet bandwidth it gets.")
    spans_nodes: bool = Field(description="Whether it crosses nodes (bounded by the NIC).")
    description: str = Field(description="In words.")


class OneDDoc(_Doc):
    """The best 2D mesh against the best 1D (1 x P or P x 1) mesh."""

    two_d_mesh: list[Count] | None
    two_d_step_fc_time_s: Real | None
    one_d_mesh: list[Count] | None
    one_d_step_fc_time_s: Real | None
    two_d_speedup: Real | None = Field(description="1D time / 2D time (> 1: 2D is faster).")
    note: str | None


class FcDoc(_Doc):
    """The FC layers on the tensor mesh: totals per step (busiest stage), the
    transposes the dataflows force, every mesh of this tensor-parallel size
    ranked by FC time, and the size-rule and 1D comparisons."""

    step_fc_time_s: Real
    fc_flops_per_step: Real
    flop_utilization: Real | None
    peak_flops_per_s: Real | None
    transposes_per_block: Count
    transpose_s_per_step: Real
    breakdown: BreakdownDoc
    transposes: list[TransposeDoc]
    mesh_candidates: list[CandidateDoc]
    dataflow_comparison: ComparisonDoc | None
    one_d_comparison: OneDDoc | None
    mesh_axes: list[AxisDoc] = Field(description="The resource under each mesh axis.")


class ConfigurationDoc(_Doc):
    """The chosen configuration: every parallel degree and the step's shape."""

    num_chips: Degree = Field(
        description="Chips of the cluster: tensor x context x pipeline x data."
    )
    tensor_parallel: Degree = Field(description="Chips of one tensor-parallel group.")
    tensor_mesh: list[Count] = Field(description="[rows, cols] of the tensor mesh (1D: [1, N]).")
    fc_algorithm: Literal["meshslice", "megatron-1d"]
    sequence_parallel: bool = Field(description="Activations outside the FC layers split.")
    context_parallel: Degree = Field(
        default=1, description="Chips each sequence is split over (context parallelism)."
    )
    context_parallel_comm: Literal["p2p", "all_gather", "a2a"] = Field(
        default="p2p",
        description="The context group's key/value exchange: p2p (ring attention), "
        "all_gather, a2a (Ulysses).",
    )
    expert_parallel: Degree = Field(
        default=1,
        description="Chips a mixture of experts' routed experts are spread over (1: dense, or "
        "every chip holds every expert).",
    )
    expert_tensor_parallel: Degree = Field(
        default=1,
        description="Chips each routed expert's weights are split over (expert tensor "
        "parallelism; 1: each expert whole on its chip).",
    )
    expert_dispatcher: Literal["alltoall", "deepep", "hybridep", "allgather"] = Field(
        default="alltoall",
        description="The token dispatcher priced: alltoall (every copy sent), deepep or "
        "hybridep (a token sent once to each other node holding one of its experts), "
        "allgather (every token of the expert group gathered on every rank).",
    )
    overlap_expert_comm: bool = Field(
        default=False,
        description="The expert all-to-alls hidden behind another micro-batch's computation "
        "(Megatron-LM's --overlap-moe-expert-parallel-comm).",
    )
    pipeline_parallel: Degree
    interleave: Degree = Field(description="Model chunks per stage (1: plain 1F1B).")
    data_parallel: Degree
    zero_stage: Count
    micro_batch_size: Degree = Field(description="Sequences per micro-batch.")
    micro_batches: Degree = Field(description="Micro-batches per step and replica.")
    recompute: str = Field(description="none, selective, full, or per-stage (see pipeline).")
    layer_split: Literal["even", "balanced", "layout"] = Field(
        description="even: Megatron-LM's even split; balanced: the pipeline balancer's; "
        "layout: the file's training.pipeline_layout."
    )
    attention: Literal["flash", "unfused"]
    dtype: str
    fp8: Literal["none", "delayed", "current", "mxfp8", "blockwise"] = Field(
        default="none", description="The FC GEMMs' FP8 recipe (none: dtype throughout)."
    )
    fp8_param_gather: bool = Field(
        default=False, description="ZeRO's weight gathers move FP8 weights (1 byte each)."
    )
    global_batch_sequences: Degree
    sequence_length: Degree
    pinned: list[str] = Field(description="Degrees the plan file pinned.")


class LevelDoc(_Doc):
    """One resource a parallel axis's groups cross."""

    size: Count = Field(description="Chips of a group on this resource.")
    kind: str = Field(
        description="Calibration key of its links: torus, switched, fully_connected, "
        "scale_out, dcn, axis (per-axis calibrated rings) or cluster (the cluster file's "
        "own figures)."
    )
    resource: str = Field(description="Resource name; axes naming the same one share it.")
    link_multiplier: Real = Field(description="Unit links the group drives at once.")
    nominal_bytes_per_s: Real | None = Field(description="Data-sheet bandwidth it gets.")
    description: str


class AxisLayoutDoc(_Doc):
    """One parallel axis on the hardware."""

    axis: Literal[
        "tensor_col",
        "tensor_row",
        "context",
        "data",
        "pipeline",
        "gradient",
        "expert",
        "expert_data",
        "expert_tensor",
    ] = Field(
        description="The parallel axis; gradient is the data x context group gradients are "
        "reduced over (listed only with context parallelism); expert and expert_data the "
        "groups a mixture of experts' tokens are exchanged and its expert gradients reduced "
        "over (listed only for MoE models)."
    )
    size: Count
    stride: Count = Field(description="Rank distance between neighbours of a group.")
    spans_nodes: bool = Field(description="Whether groups cross nodes (NICs) or slices (DCN).")
    dcn_size: Count = Field(description="Chips of a group in different slices (1: none).")
    levels: list[LevelDoc] = Field(description="Resources crossed, innermost first.")
    description: str


class LayoutDoc(_Doc):
    """Every parallel axis on its resources."""

    rank_order: list[str] = Field(description="Axes from innermost (consecutive ranks) out.")
    axes: list[AxisLayoutDoc]


class StageDoc(_Doc):
    """One pipeline stage: its layers per model chunk and their recomputation."""

    stage: Count
    layers: Count
    layers_per_chunk: list[Count] = Field(description="Blocks of each local chunk, in order.")
    recompute: dict[str, Count] = Field(description="Blocks per recomputation mode.")


class PipelineDoc(_Doc):
    """How the layers are cut into stages and scheduled."""

    schedule: Literal["1f1b", "interleaved"]
    num_micro_batches: Count
    layer_split: Literal["even", "balanced", "layout"]
    stages: list[StageDoc]
    even_split_step_s: Real | None = Field(
        description="The same configuration's step with the even split (balanced plans)."
    )
    balancer_status: str | None = Field(description="The pipeline ILP's solver status.")


class TimePartDoc(_Doc):
    """One part of the step (the stage where exposed data-parallel traffic
    and the optimizer step are largest)."""

    name: str
    key: str = Field(description="Stable key of the part.")
    time_s: Real
    share: Real = Field(description="time_s / step_s.")


class LayerTimesDoc(_Doc):
    """One block, one micro-batch, one chip, seconds."""

    fc_forward_s: Real
    fc_backward_s: Real
    fc_exposed_comm_s: Real
    attention_forward_s: Real
    attention_backward_s: Real
    elementwise_forward_s: Real
    elementwise_backward_s: Real
    recompute_s: dict[str, Real] = Field(description="Extra backward seconds per mode.")
    activation_bytes: dict[str, Real] = Field(description="Bytes kept per mode.")


class StageMemoryDoc(_Doc):
    """Peak memory of one pipeline stage on one chip, bytes."""

    stage: Count
    weights_bytes: Real
    gradients_bytes: Real
    optimizer_bytes: Real
    activations_bytes: Real
    buffers_bytes: Real = Field(
        description="Gathered FC slices, ZeRO-3's gathered block, a recomputed block, logits."
    )
    workspace_bytes: Real
    reserve_bytes: Real = Field(description="Kept free for allocator fragmentation.")
    total_bytes: Real
    capacity_bytes: Real
    headroom_bytes: Real
    busy_s: Real = Field(description="Seconds of work on the stage per step.")
    data_parallel_comm_s: Real
    data_parallel_exposed_s: Real
    optimizer_s: Real


class PredictionsDoc(_Doc):
    """The whole training step of the chosen configuration."""

    step_s: Real
    tokens_per_s: Real
    model_flops_per_step: Real
    hardware_flops_per_step: Real
    mfu: Real | None
    hfu: Real | None
    bubble_fraction: Real = Field(description="(pp * makespan - busy) / busy over all stages.")
    breakdown_stage: Count = Field(description="The stage whose time the breakdown follows.")
    breakdown: list[TimePartDoc] = Field(description="Parts of the step; they add up to it.")
    layer: LayerTimesDoc
    memory: list[StageMemoryDoc]
    peak_memory_bytes: Real
    usable_memory_bytes: Real = Field(description="HBM less the reserve and the workspace.")
    fits: bool
    expected_error: dict | None = Field(
        description="The calibration's held-out relative errors (null when it records none)."
    )
    step_band_rel_error: Real | None = Field(
        default=None,
        description="The step's relative error band: each part's seconds times the held-out "
        "error of the model that prices it (collectives or compute), summed, over the step "
        "(autotune/job/accuracy.py); null when the calibration records no held-out error.",
    )
    step_band_s: list[Real] | None = Field(
        default=None, description="[low, high] seconds: step_s times (1 -/+ the band)."
    )


class ConfigSummaryDoc(_Doc):
    """A configuration in one line's worth of keys."""

    tensor_mesh: list[Count]
    context_parallel: Degree = 1
    expert_parallel: Degree = 1
    expert_tensor_parallel: Degree = 1
    pipeline_parallel: Degree
    interleave: Degree
    data_parallel: Degree
    zero_stage: Count
    micro_batch_size: Degree
    micro_batches: Degree
    recompute: str


class AlternativeDoc(_Doc):
    """Another configuration and what it loses to."""

    configuration: ConfigSummaryDoc
    step_s: Real
    slower_by_s: Real
    loses_to: str = Field(description="The part in which it exceeds the chosen one most.")
    loses_s: Real
    peak_memory_bytes: Real
    fits: bool
    within_error_band: bool = Field(
        default=False,
        description="Its step is within the chosen plan's error band "
        "(predictions.step_band_rel_error): the model cannot tell the two apart; benchmark both.",
    )


class ExtrapolationDoc(_Doc):
    """A part of the plan priced outside what its calibration measured."""

    kind: str = Field(description="collective, gemm or attention.")
    what: str = Field(
        description="The calibration entry, e.g. all_gather.switched, gemm bf16, attention bf16."
    )
    dimension: str = Field(
        description="piece bytes (collectives), m, n or k (GEMMs), or sequence (the fused "
        "attention kernel's tokens per chip)."
    )
    measured: list[Real] = Field(description="[smallest, largest] the calibration measured.")
    priced: list[Real] = Field(description="[smallest, largest] this plan prices.")
    factor: Real = Field(description="How far beyond the measured range (> 1).")
    used_by: str = Field(description="Which part of the step prices it.")


class BetterDoc(_Doc):
    """A configuration faster than a pinned plan (the free search's best)."""

    configuration: ConfigSummaryDoc
    step_s: Real
    speedup: Real = Field(description="Pinned step / this step.")
    peak_memory_bytes: Real


class RefusedDoc(_Doc):
    """A degree value the search refused, and why."""

    degree: str
    value: str
    reason: str


class SearchDoc(_Doc):
    """The search's own figures."""

    candidates: Count
    pruned_by_memory_bound: Count
    refused_by_fc_planner: Count
    priced: Count = Field(description="Priced exactly by the step model.")
    pruned_by_step_bound: Count = Field(
        description="Left unpriced: their step lower bound could not beat the kept ones."
    )
    fit: Count
    balanced_by_ilp: Count
    ilp_unproved: Count = Field(description="Balancer solves that proved no plan in time.")
    proved_best: bool = Field(description="No configuration left could beat the chosen one.")
    elapsed_s: Real
    tie_break: str
    refused: list[RefusedDoc] = Field(description="Refused degree values (first 50).")


class CalibrationRefDoc(_Doc):
    """Which calibration the plan used."""

    name: str
    source: str
    path: str | None
    sha256: str | None
    #: the calibration's held-out relative errors (absent when it records none)
    expected_error: dict | None = None


class ProvenanceDoc(_Doc):
    """What the plan was computed from."""

    plan_file: str | None
    model: dict
    training: dict = Field(description="The training section as given (pins and auto).")
    cluster: dict
    cluster_ref: str | None
    calibration: CalibrationRefDoc
    search: dict
    constraints: dict
    dataflow_policy: Literal["cost", "size-rule", "always-w", "always-y"]


class PlanDocument(_Doc):
    """The whole plan."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False, defer_build=True
    )

    schema_: Literal["meshtune.plan/3"] = Field(alias="schema")
    tool_version: str = Field(default=__version__)
    configuration: ConfigurationDoc
    layout: LayoutDoc
    mesh: MeshDoc = Field(description="The tensor mesh the FC layers run on.")
    layers: list[LayerDoc] = Field(description="FC layers: dataflows, slice counts, GEMMs.")
    fc: FcDoc
    pipeline: PipelineDoc
    predictions: PredictionsDoc
    alternatives: list[AlternativeDoc]
    tied_with_chosen: list[AlternativeDoc]
    faster_but_out_of_memory: list[AlternativeDoc]
    extrapolations: list[ExtrapolationDoc] = Field(
        default_factory=list,
        description="Collectives and GEMMs priced beyond the calibration's measured range: "
        "benchmark them, or calibrate from measurements that reach them.",
    )
    better_configuration: BetterDoc | None = Field(
        description="For a file that pins degrees: a configuration over 10% faster that fits."
    )
    search: SearchDoc
    provenance: ProvenanceDoc
    warnings: list[str] = Field(description="Caveats about the inputs that affect the numbers.")


def plan_json_schema() -> dict:
    """The JSON Schema of the plan document."""
    return PlanDocument.model_json_schema(by_alias=True)
