"""The `meshtune.plan/3` document of a Plan (copies and unit-free shares
only: every number comes from the plan)."""

from __future__ import annotations

from autotune.hardware.layout import Layout, ParallelAxis
from autotune.job.candidates import TIE_BREAK_RULE
from autotune.job.model import PARTS
from autotune.job.plan import Alternative, Plan
from autotune.plan.document import calibration_ref, fc_doc, layer_docs, mesh_doc
from autotune.plan.schema import (
    PLAN_SCHEMA,
    AlternativeDoc,
    AxisLayoutDoc,
    BetterDoc,
    ConfigSummaryDoc,
    ConfigurationDoc,
    ExtrapolationDoc,
    LayerTimesDoc,
    LayoutDoc,
    LevelDoc,
    PipelineDoc,
    PlanDocument,
    PredictionsDoc,
    ProvenanceDoc,
    RefusedDoc,
    SearchDoc,
    StageDoc,
    StageMemoryDoc,
    TimePartDoc,
)
from autotune.specs.job import RECOMPUTE_MODES

MAX_REFUSED = 50


def _summary(config: dict[str, int | str], recompute: str, batch: int) -> ConfigSummaryDoc:
    dp, mbs = int(config["dp"]), int(config["mbs"])
    return ConfigSummaryDoc(
        tensor_mesh=[int(config["rows"]), int(config["cols"])],
        context_parallel=int(config.get("cp", 1)),
        expert_parallel=int(config.get("ep", 1)),
        expert_tensor_parallel=int(config.get("etp", 1)),
        pipeline_parallel=int(config["pp"]),
        interleave=int(config["v"]),
        data_parallel=dp,
        zero_stage=int(config["zero"]),
        micro_batch_size=mbs,
        micro_batches=batch // (dp * mbs),
        recompute=recompute,
    )


def _alternative(a: Alternative, batch: int) -> AlternativeDoc:
    return AlternativeDoc(
        configuration=_summary(a.config, a.recompute, batch),
        step_s=a.step_s,
        slower_by_s=a.slower_by_s,
        loses_to=a.loses_to,
        loses_s=a.loses_s,
        peak_memory_bytes=a.peak_bytes,
        fits=a.fits,
        within_error_band=a.within_band,
    )


def layout_doc(layout: Layout) -> LayoutDoc:
    """Every parallel axis with its levels."""
    return LayoutDoc(
        rank_order=[a.value for a in layout.rank_order],
        axes=[
            AxisLayoutDoc(
                axis=a.axis.value,
                size=a.size,
                stride=a.stride,
                spans_nodes=a.spans_nodes,
                dcn_size=a.dcn_size,
                levels=[
                    LevelDoc(
                        size=lv.size,
                        kind=lv.kind.value,
                        resource=lv.resource,
                        link_multiplier=lv.link_multiplier,
                        nominal_bytes_per_s=lv.nominal_bytes_per_s,
                        description=lv.description,
                    )
                    for lv in a.levels
                ],
                description=a.description,
            )
            for a in layout.axes
            if a.axis is not ParallelAxis.GRADIENT or layout.axis(ParallelAxis.CONTEXT).size > 1
        ],
    )


def to_document(plan: Plan) -> PlanDocument:
    """The plan as its validated document."""
    inp, t = plan.inp, plan.inp.training
    c, st, hw = plan.config, plan.stages, plan.hw
    batch = t.global_batch_sequences
    pp, v = int(c["pp"]), int(c["v"])
    m = plan.micro_batches
    b = plan.block
    outcome = plan.outcome
    cal = inp.calibration
    expected = cal.expected_error.model_dump(mode="json") if cal.expected_error else None
    return PlanDocument(
        schema_=PLAN_SCHEMA,
        configuration=ConfigurationDoc(
            num_chips=plan.num_chips,
            tensor_parallel=int(c["rows"]) * int(c["cols"]),
            tensor_mesh=[int(c["rows"]), int(c["cols"])],
            fc_algorithm=t.fc_algorithm.value,
            sequence_parallel=plan.training.fc_algorithm.value == "meshslice"
            or t.sequence_parallel,
            context_parallel=int(c.get("cp", 1)),
            context_parallel_comm=t.context_parallel_comm.value,
            expert_parallel=int(c.get("ep", 1)),
            expert_tensor_parallel=int(c.get("etp", 1)),
            expert_dispatcher=t.expert_dispatcher.value,
            overlap_expert_comm=t.overlap_expert_comm,
            pipeline_parallel=pp,
            interleave=v,
            data_parallel=int(c["dp"]),
            zero_stage=int(c["zero"]),
            micro_batch_size=int(c["mbs"]),
            micro_batches=m,
            recompute=plan.recompute,
            layer_split=_layer_split(plan),
            attention=t.attention.value,
            dtype=t.dtype.value,
            fp8=t.fp8.value,
            fp8_param_gather=t.fp8_param_gather,
            global_batch_sequences=batch,
            sequence_length=t.sequence_length,
            pinned=list(t.pinned_degrees),
        ),
        layout=layout_doc(plan.layout),
        mesh=mesh_doc(plan.fc),
        layers=layer_docs(plan.fc),
        fc=fc_doc(plan.fc),
        pipeline=PipelineDoc(
            schedule="interleaved" if v > 1 else "1f1b",
            num_micro_batches=m,
            layer_split=_layer_split(plan),
            stages=[
                StageDoc(
                    stage=s,
                    layers=int(st.layers[s].sum()),
                    layers_per_chunk=[int(x) for x in st.layers[s]],
                    recompute={
                        RECOMPUTE_MODES[i]: int(st.recompute_counts[s][i])
                        for i in range(3)
                        if st.recompute_counts[s][i] > 0
                    },
                )
                for s in range(pp)
            ],
            even_split_step_s=plan.even_split_step_s,
            balancer_status=plan.balanced.status if plan.balanced is not None else None,
        ),
        predictions=PredictionsDoc(
            step_s=plan.step_s,
            tokens_per_s=plan.tokens_per_s,
            model_flops_per_step=plan.model_flops_per_step,
            hardware_flops_per_step=plan.hardware_flops_per_step,
            mfu=plan.mfu,
            hfu=plan.hfu,
            bubble_fraction=plan.bubble_fraction,
            breakdown_stage=plan.busiest_stage,
            breakdown=[
                TimePartDoc(
                    name=label, key=key, time_s=plan.parts[key], share=plan.parts[key] / plan.step_s
                )
                for key, label in PARTS.items()
            ],
            layer=LayerTimesDoc(
                fc_forward_s=b.fc.forward_s,
                fc_backward_s=b.fc.backward_s,
                fc_exposed_comm_s=b.fc.exposed_comm_s,
                attention_forward_s=b.attention_forward_s,
                attention_backward_s=b.attention_backward_s,
                elementwise_forward_s=b.elementwise_forward_s,
                elementwise_backward_s=b.elementwise_backward_s,
                recompute_s=dict(zip(RECOMPUTE_MODES, b.recompute_s, strict=True)),
                activation_bytes=dict(zip(RECOMPUTE_MODES, b.activation_bytes, strict=True)),
            ),
            memory=[
                StageMemoryDoc(
                    stage=s,
                    weights_bytes=float(st.weights_bytes[s]),
                    gradients_bytes=float(st.gradients_bytes[s]),
                    optimizer_bytes=float(st.optimizer_bytes[s]),
                    activations_bytes=float(st.activation_bytes[s]),
                    buffers_bytes=float(st.buffer_bytes[s]),
                    workspace_bytes=hw.workspace_bytes,
                    reserve_bytes=hw.reserve_bytes,
                    total_bytes=float(st.total_bytes[s]),
                    capacity_bytes=hw.hbm_bytes,
                    headroom_bytes=hw.hbm_bytes - float(st.total_bytes[s]),
                    busy_s=float(st.busy_s[s]),
                    data_parallel_comm_s=float(st.dp_comm_s[s]),
                    data_parallel_exposed_s=float(st.dp_exposed_s[s]),
                    optimizer_s=float(st.optimizer_s[s]),
                )
                for s in range(pp)
            ],
            peak_memory_bytes=plan.peak_bytes,
            usable_memory_bytes=plan.usable_bytes,
            fits=plan.fits,
            expected_error=expected,
            step_band_rel_error=plan.band_rel,
            step_band_s=None
            if plan.band_rel is None
            else [plan.step_s * (1 - plan.band_rel), plan.step_s * (1 + plan.band_rel)],
        ),
        alternatives=[_alternative(a, batch) for a in plan.alternatives],
        tied_with_chosen=[_alternative(a, batch) for a in plan.tied],
        faster_but_out_of_memory=[_alternative(a, batch) for a in plan.faster_but_out_of_memory],
        extrapolations=[
            ExtrapolationDoc(
                kind=x.kind,
                what=x.what,
                dimension=x.dimension,
                measured=list(x.measured),
                priced=list(x.priced),
                factor=x.factor,
                used_by=x.used_by,
            )
            for x in plan.extrapolations
        ],
        better_configuration=None
        if plan.better is None
        else BetterDoc(
            configuration=_summary(plan.better.config, plan.better.recompute, batch),
            step_s=plan.better.step_s,
            speedup=plan.better.speedup,
            peak_memory_bytes=plan.better.peak_bytes,
        ),
        search=SearchDoc(
            candidates=outcome.num_candidates,
            pruned_by_memory_bound=outcome.num_pruned_by_memory_bound,
            refused_by_fc_planner=outcome.num_refused_by_fc,
            priced=outcome.num_priced,
            pruned_by_step_bound=outcome.num_pruned_by_step_bound,
            fit=outcome.num_fit,
            balanced_by_ilp=outcome.num_balanced,
            ilp_unproved=outcome.num_balancer_unproved,
            proved_best=outcome.proved,
            elapsed_s=outcome.elapsed_s,
            tie_break=TIE_BREAK_RULE,
            refused=[
                RefusedDoc(degree=d, value=val, reason=r)
                for d, val, r in outcome.refusals.lines()[:MAX_REFUSED]
            ],
        ),
        provenance=ProvenanceDoc(
            plan_file=inp.source_file,
            model=inp.model.model_dump(mode="json"),
            training=t.model_dump(mode="json", exclude_none=True),
            cluster=inp.cluster.document(),
            cluster_ref=inp.cluster_ref,
            calibration=calibration_ref(cal, inp.calibration_ref),
            search=inp.search.model_dump(mode="json"),
            constraints=inp.constraints.model_dump(mode="json"),
            dataflow_policy=inp.search.dataflow.value,
        ),
        warnings=list(plan.warnings),
    )


def to_json(plan: Plan) -> str:
    """The document as JSON text (2-space indent, trailing newline)."""
    doc = to_document(plan)
    # calibrations without held-out errors leave the key out
    exclude = (
        {"provenance": {"calibration": {"expected_error"}}}
        if doc.provenance.calibration.expected_error is None
        else None
    )
    return doc.model_dump_json(indent=2, by_alias=True, exclude=exclude) + "\n"


def _layer_split(plan: Plan) -> str:
    """How the plan's layers were cut: a pinned Megatron-LM layout, the
    pipeline balancer's plan or the even split."""
    if plan.inp.training.pipeline_layout is not None:
        return "layout"
    return "balanced" if plan.balanced is not None else "even"
