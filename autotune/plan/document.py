"""The FC parts of the Plan document from an FC plan result (no arithmetic
beyond unit-free copying: every number comes from the result)."""

from __future__ import annotations

from autotune.loading import calibration_file, sha256_of
from autotune.plan.results import GemmPlan, LayerPlan, PlanResult
from autotune.plan.schema import (
    AxisDoc,
    BreakdownDoc,
    CalibrationRefDoc,
    CandidateDoc,
    CollectiveDoc,
    ComparisonDoc,
    FcDoc,
    GemmDoc,
    LayerDoc,
    MeshDoc,
    OneDDoc,
    PhysicalGemmDoc,
    TensorDoc,
    TransposeDoc,
)
from autotune.specs.calibration import CalibrationSpec
from cost_models import TimeBreakdown


def _breakdown(b: TimeBreakdown) -> BreakdownDoc:
    return BreakdownDoc(
        total_s=b.total_s,
        compute_s=b.compute_s,
        launch_s=b.launch_s,
        sync_s=b.sync_s,
        transfer_s=b.transfer_s,
        exposed_comm_s=b.exposed_comm_s,
    )


def _gemm(g: GemmPlan) -> GemmDoc:
    s = g.shape
    e = g.estimate
    return GemmDoc(
        gemm_pass=s.gemm_pass.value,
        expression=s.expression,
        dataflow=s.dataflow.value,
        transposed=s.transposed,
        m=s.m,
        n=s.n,
        k=s.k,
        executed_as=PhysicalGemmDoc(
            dataflow=s.physical_dataflow.value, m=s.physical_m, n=s.physical_n, k=s.physical_k
        ),
        num_slices=g.num_slices,
        valid_slice_counts=list(g.valid_slice_counts),
        time_s=e.total_s,
        prologue_s=e.prologue_s,
        steady_s=e.steady_s,
        epilogue_s=e.epilogue_s,
        breakdown=_breakdown(e.breakdown),
        collectives=[
            CollectiveDoc(
                op=c.op.value,
                axis=c.axis.value,
                ring_size=c.ring_size,
                shard_bytes=c.shard_bytes,
                count=c.count,
                bytes_sent_per_chip=c.bytes_sent_per_chip,
            )
            for c in e.calls
        ],
    )


def _layer(lp: LayerPlan) -> LayerDoc:
    per_step = lp.breakdown_per_step
    return LayerDoc(
        name=lp.layer.name,
        in_features=lp.layer.in_features,
        out_features=lp.layer.out_features,
        tokens=lp.layer.tokens,
        count_per_step=lp.layer.count_per_step,
        stationary=lp.stationary.value,
        transposed=lp.transposed,
        size_rule_stationary=lp.size_rule_stationary.value,
        time_per_step_s=per_step.total_s,
        exposed_comm_per_step_s=per_step.exposed_comm_s,
        tensors=[
            TensorDoc(
                name=t.name,
                shape=list(t.shape),
                dims=list(t.dims),
                partition_spec=list(t.partition_spec),
                placements=list(t.placements),
                stored_transposed=t.stored_transposed,
            )
            for t in lp.tensors
        ],
        gemms=[_gemm(g) for g in lp.gemms],
    )


def calibration_ref(calibration: CalibrationSpec, path: str | None) -> CalibrationRefDoc:
    """Which calibration a plan used: its name, source, file and digest."""
    cal = calibration
    file = calibration_file(path) if path else None
    digest = sha256_of(file) if file is not None else None
    expected = cal.expected_error.model_dump(mode="json") if cal.expected_error else None
    return CalibrationRefDoc(
        name=cal.name, source=cal.source, path=path, sha256=digest, expected_error=expected
    )


def mesh_doc(result: PlanResult) -> MeshDoc:
    """The tensor mesh of an FC plan."""
    return MeshDoc(
        num_rows=result.mesh.num_rows,
        num_cols=result.mesh.num_cols,
        num_chips=result.mesh.num_chips,
        axis_names=["row", "col"],
        block_size=result.inputs.cluster.block_size,
        residual_stream_transposed=result.residual_transposed,
    )


def layer_docs(result: PlanResult) -> list[LayerDoc]:
    """Every FC layer of an FC plan."""
    return [_layer(lp) for lp in result.layers]


def fc_doc(result: PlanResult) -> FcDoc:
    """The FC section: totals, transposes, ranked meshes, comparisons."""
    cmp = result.comparison
    comparison = None
    if cmp is not None:
        note = cmp.reason
        if note is None and cmp.same_mesh_step_fc_time_s is None:
            note = "the size rule has no feasible plan on the chosen mesh"
        comparison = ComparisonDoc(
            size_rule_mesh=[cmp.mesh.num_rows, cmp.mesh.num_cols] if cmp.mesh else None,
            size_rule_step_fc_time_s=cmp.step_fc_time_s,
            size_rule_same_mesh_step_fc_time_s=cmp.same_mesh_step_fc_time_s,
            differing_layers=list(cmp.differing_layers),
            note=note,
        )
    return FcDoc(
        step_fc_time_s=result.step_fc_time_s,
        fc_flops_per_step=result.fc_flops_per_step,
        flop_utilization=result.flop_utilization,
        peak_flops_per_s=result.peak_flops_per_s,
        transposes_per_block=len(result.transposes),
        transpose_s_per_step=result.transpose_s_per_step,
        breakdown=_breakdown(result.breakdown_per_step),
        transposes=[
            TransposeDoc(where=t.where, rows=t.rows, cols=t.cols) for t in result.transposes
        ],
        mesh_candidates=[
            CandidateDoc(
                num_rows=c.mesh.num_rows,
                num_cols=c.mesh.num_cols,
                feasible=c.feasible,
                step_fc_time_s=c.step_fc_time_s,
                stationaries=c.stationaries,
                reason=c.reason,
            )
            for c in result.candidates
        ],
        dataflow_comparison=comparison,
        one_d_comparison=_one_d(result),
        mesh_axes=_axes(result),
    )


def _axes(result: PlanResult) -> list[AxisDoc]:
    p = result.placement
    if p is None:
        return []
    return [
        AxisDoc(
            axis=a.axis.value,
            size=a.size,
            kind=a.kind.value,
            resource=a.resource,
            link_multiplier=a.link_multiplier,
            nominal_bytes_per_s=a.nominal_bytes_per_s,
            spans_nodes=a.spans_nodes,
            description=a.description,
        )
        for a in (p.row, p.col)
    ]


def _one_d(result: PlanResult) -> OneDDoc | None:
    o = result.one_d
    if o is None:
        return None

    def shape(m):
        return None if m is None else [m.num_rows, m.num_cols]

    return OneDDoc(
        two_d_mesh=shape(o.two_d_mesh),
        two_d_step_fc_time_s=o.two_d_step_fc_time_s,
        one_d_mesh=shape(o.one_d_mesh),
        one_d_step_fc_time_s=o.one_d_step_fc_time_s,
        two_d_speedup=o.two_d_speedup,
        note=o.note,
    )
