"""The cost-model inputs of a plan: the calibration's links placed on the
cluster's resources for each mesh shape, and the chip's roofline."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.errors import InputError
from autotune.hardware.calibration import (
    check_links_within_nominal,
    comm_model,
    comm_model_for,
    compute_model_for,
    fallback_kinds,
    fp8_compute_model,
)
from autotune.hardware.cluster import Cluster
from autotune.hardware.placement import MeshPlacement, place_mesh
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.chip import FigureKind
from autotune.specs.plan_input import PlanInput, SliceScope
from autotune.specs.training import Fp8Recipe
from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, MeshShape


@dataclass(frozen=True)
class SearchContext:
    """Everything the per-GEMM cost needs, in base units. `comm` is the
    link model of the mesh set by :meth:`for_mesh` (the calibration's
    per-axis links before that)."""

    comm: CommModel
    compute: ComputeModel
    element_bytes: int
    block: int
    overlap_slowdown: float
    max_slices: int | None
    scope: SliceScope
    cluster: Cluster
    calibration: CalibrationSpec
    calibration_ref: str | None = None
    placement: MeshPlacement | None = None
    #: the cluster's own (nominal) calibration: links the calibration lacks
    fallback_calibration: CalibrationSpec | None = None

    def for_mesh(self, mesh: MeshShape) -> SearchContext:
        """The context with the links and resources of `mesh` placed on
        the cluster; InputError when the calibration cannot price MeshSlice
        (all-gather and reduce-scatter) on an axis of more than one chip."""
        placement = place_mesh(self.cluster, mesh)
        comm = comm_model_for(self.calibration, placement, self.fallback_calibration)
        for op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
            for axis in Axis:
                p = placement.axis(axis)
                if p.size > 1 and not comm.has(op, axis):
                    keys = [axis.value] if p.kind.value == "axis" else [p.kind.value, axis.value]
                    raise InputError(
                        f"has no {op.value} parameters for {' or '.join(keys)}, which the "
                        f"{axis.value} axis of mesh {mesh} ({p.description}) needs",
                        file=self.calibration_ref or self.calibration.name,
                        field=f"collectives.{op.value}.{keys[0]}",
                        fix=f"measure {op.value} on that resource and rerun `meshtune calibrate`, "
                        "or use a calibration made for this cluster",
                    )
        return replace(self, comm=comm, placement=placement)


def plan_cluster(inp: PlanInput) -> Cluster:
    """The plan's cluster resolved with its chip."""
    return Cluster(inp.cluster, inp.chip)


def cluster_calibration(inp: PlanInput) -> tuple[CalibrationSpec | None, str]:
    """The cluster's own calibration (its `calibration:` key) when the plan
    uses another one, to price the resources that one lacks; None when it
    is the same, or cannot be loaded (the plan then stops on a missing
    link, naming it)."""
    from autotune.loading import load_calibration

    ref = inp.cluster.calibration
    if ref == inp.calibration_ref or ref == inp.calibration.name:
        return None, ref
    try:
        return load_calibration(ref)[0], ref
    except InputError:
        return None, ref


def fc_compute_model(inp: PlanInput, cluster: Cluster, where: str | None) -> ComputeModel:
    """The FC layers' GEMM model: FP8 under an FP8 recipe
    (hardware/calibration.fp8_compute_model), else the training dtype's."""
    if inp.training.fp8 is not Fp8Recipe.NONE:
        return fp8_compute_model(inp.calibration, cluster, inp.training.dtype.value, where)[0]
    return compute_model_for(
        inp.calibration, cluster, inp.training.dtype.value, inp.training.dtype.num_bytes, where
    )


def search_context(inp: PlanInput) -> SearchContext:
    """Cost-model inputs of a plan (the cluster's overlap slowdown, when
    given, overrides the calibration's); the compute model is the chip's
    roofline, refused when the calibration implies more than peak."""
    slowdown = inp.cluster.overlap_slowdown
    cluster = plan_cluster(inp)
    where = inp.calibration_ref or inp.calibration.name
    check_links_within_nominal(inp.calibration, cluster, where)
    return SearchContext(
        comm=comm_model(inp.calibration),
        compute=fc_compute_model(inp, cluster, where),
        element_bytes=inp.training.dtype.num_bytes,
        block=inp.cluster.block_size,
        overlap_slowdown=slowdown if slowdown is not None else inp.calibration.overlap_slowdown,
        max_slices=inp.search.max_slice_count,
        scope=inp.search.slice_count_per,
        cluster=cluster,
        calibration=inp.calibration,
        calibration_ref=inp.calibration_ref,
        fallback_calibration=cluster_calibration(inp)[0],
    )


def check_calibration(inp: PlanInput) -> tuple[str, ...]:
    """Warnings for calibration gaps that do not stop a plan (missing
    all-gather or reduce-scatter links stop it in SearchContext.for_mesh)."""
    comm = comm_model(inp.calibration)
    cal_keys = {key for entries in inp.calibration.collectives.values() for key in entries}
    warnings = []
    send_recv = inp.calibration.collectives.get(CollectiveOp.SEND_RECV.value, {})
    if not (
        all(comm.has(CollectiveOp.SEND_RECV, axis) for axis in Axis)
        or (send_recv and cal_keys - {"row", "col"})
    ):
        warnings.append(
            f"calibration {inp.calibration.name} has no send_recv parameters on both axes: "
            "dataflow choices that need a transpose are not considered"
        )
    fallback, fallback_ref = cluster_calibration(inp)
    for kind, ops in fallback_kinds(inp.calibration, plan_cluster(inp), fallback).items():
        warnings.append(
            f"calibration {inp.calibration.name} has no {kind} links ({', '.join(ops)}): "
            f"mesh axes on {kind} use cluster {inp.cluster.name}'s calibration {fallback_ref} "
            f"({fallback.figures.value if fallback and fallback.figures else 'its'} figures) "
            f"for them; calibrate {kind} (nccl-tests on that resource) to measure it"
        )
    if inp.calibration.figures is FigureKind.NOMINAL:
        warnings.append(
            f"calibration {inp.calibration.name} is nominal (data sheet x stated efficiency, "
            "nothing measured): fit one from your nccl-tests logs and GEMM benchmarks with "
            "`meshtune calibrate` before trusting absolute times"
        )
    dtype = inp.training.dtype.value
    if inp.training.fp8 is not Fp8Recipe.NONE:
        note = fp8_compute_model(inp.calibration, plan_cluster(inp), dtype)[1]
        if note is not None:
            warnings.append(note)
    if inp.calibration.compute is None:
        peak = plan_cluster(inp).peak_flops_per_s(dtype)
        if peak is None:
            raise InputError(
                f"has no compute entry and cluster {inp.cluster.name} gives no "
                f"peak_tflops_per_s for {dtype}",
                file=inp.calibration_ref or inp.calibration.name,
                field="compute",
                fix="recalibrate with GEMM rows or --chip, or give the cluster's peak",
            )
        warnings.append(
            f"calibration {inp.calibration.name} has no compute entry: compute times use "
            f"cluster {inp.cluster.name}'s nominal {dtype} peak {peak / 1e12:.0f} TFLOP/s"
        )
    elif inp.calibration.compute.dtype != dtype:
        warnings.append(
            f"the calibration's compute rate was measured for {inp.calibration.compute.dtype} "
            f"but training uses {dtype}: compute times assume the measured rate"
        )
    if plan_cluster(inp).peak_flops_per_s(dtype) is None:
        warnings.append(
            f"cluster {inp.cluster.name} gives no peak_tflops_per_s for {dtype}: "
            "FLOP utilization is not reported"
        )
    return tuple(warnings)
