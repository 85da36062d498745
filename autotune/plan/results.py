"""Frozen result types of a plan (rendered as a table or as JSON)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.hardware.placement import MeshPlacement
from autotune.plan.dataflow import GemmShape, Stationary, TensorLayout
from autotune.plan.layers import FCLayer
from autotune.plan.phase1 import Transpose
from autotune.specs.plan_input import DataflowPolicy, PlanInput
from cost_models import GemmEstimate, MeshShape, TimeBreakdown


@dataclass(frozen=True)
class GemmPlan:
    """One GEMM of a layer: its dataflow, slice count and predicted time."""

    shape: GemmShape
    num_slices: int
    valid_slice_counts: tuple[int, ...]
    estimate: GemmEstimate


@dataclass(frozen=True)
class LayerPlan:
    """One FC layer's dataflow choice, sharding and GEMMs."""

    layer: FCLayer
    stationary: Stationary
    transposed: bool
    size_rule_stationary: Stationary
    tensors: tuple[TensorLayout, ...]
    gemms: tuple[GemmPlan, ...]

    @property
    def time_per_instance_s(self) -> float:
        """Seconds for its three GEMMs, once."""
        return sum(g.estimate.total_s for g in self.gemms)

    @property
    def breakdown_per_step(self) -> TimeBreakdown:
        """Its three GEMMs times `count_per_step`."""
        total = TimeBreakdown.zero()
        for g in self.gemms:
            total = total + g.estimate.breakdown
        return total.scaled(self.layer.count_per_step)


@dataclass(frozen=True)
class MeshCandidate:
    """One mesh shape the search considered."""

    mesh: MeshShape
    feasible: bool
    step_fc_time_s: float | None
    reason: str | None
    stationaries: str | None  # e.g. "Y X Y X" in layer order


@dataclass(frozen=True)
class DataflowComparison:
    """The size rule's plan next to the chosen policy's, where they differ."""

    policy: DataflowPolicy
    mesh: MeshShape | None
    step_fc_time_s: float | None
    same_mesh_step_fc_time_s: float | None
    differing_layers: tuple[str, ...]
    reason: str | None


@dataclass(frozen=True)
class OneDComparison:
    """The best 2D mesh against the best 1D one (`1 x P` or `P x 1`, i.e.
    Megatron-style 1D tensor parallelism or a 1D collective matmul), both
    priced by the same placement and cost model."""

    two_d_mesh: MeshShape | None
    two_d_step_fc_time_s: float | None
    one_d_mesh: MeshShape | None
    one_d_step_fc_time_s: float | None
    note: str | None

    @property
    def two_d_speedup(self) -> float | None:
        """1D time / 2D time (> 1: 2D is faster), when both are feasible."""
        if self.two_d_step_fc_time_s and self.one_d_step_fc_time_s:
            return self.one_d_step_fc_time_s / self.two_d_step_fc_time_s
        return None


@dataclass(frozen=True)
class PlanResult:
    """The chosen plan and the evidence behind it."""

    inputs: PlanInput
    policy: DataflowPolicy
    mesh: MeshShape
    tp_chips: int
    layers: tuple[LayerPlan, ...]
    residual_transposed: bool
    transposes: tuple[Transpose, ...]
    transpose_s_per_step: float
    breakdown_per_step: TimeBreakdown
    fc_flops_per_step: float
    peak_flops_per_s: float | None
    candidates: tuple[MeshCandidate, ...]
    comparison: DataflowComparison | None
    warnings: tuple[str, ...] = ()
    placement: MeshPlacement | None = None
    one_d: OneDComparison | None = None

    @property
    def step_fc_time_s(self) -> float:
        """FC-layer seconds per training step on the busiest stage."""
        return self.breakdown_per_step.total_s

    @property
    def flop_utilization(self) -> float | None:
        """FC FLOPs / (time * chips * peak), or None without a peak rate."""
        if not self.peak_flops_per_s:
            return None
        return self.fc_flops_per_step / (
            self.step_fc_time_s * self.tp_chips * self.peak_flops_per_s
        )


def breakdown_shares(b: TimeBreakdown) -> dict[str, float | None]:
    """Each part of a breakdown as a fraction of its critical-path total
    (launch/sync/transfer count hidden time too, so they may add past 1)."""
    if b.total_s <= 0:
        return {k: None for k in ("compute", "exposed", "launch", "sync", "transfer")}
    return {
        "compute": b.compute_s / b.total_s,
        "exposed": b.exposed_comm_s / b.total_s,
        "launch": b.launch_s / b.total_s,
        "sync": b.sync_s / b.total_s,
        "transfer": b.transfer_s / b.total_s,
    }
