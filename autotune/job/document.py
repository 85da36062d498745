"""The `job` section from a job result (copies, no arithmetic beyond shares)."""

from __future__ import annotations

from autotune.job.result import JobResult
from autotune.plan.job_schema import JobDoc, LayerTimesDoc, StageMemoryDoc, TimePartDoc


def job_document(job: JobResult) -> JobDoc:
    """The job result as its JSON section."""
    lt = job.layer
    return JobDoc(
        chips=job.chips,
        tensor_parallel=job.tensor_parallel,
        data_parallel=job.data_parallel,
        pipeline_parallel=job.pipeline_parallel,
        interleave=job.interleave,
        micro_batches=job.micro_batches,
        micro_batch_sequences=job.micro_batch_sequences,
        recompute=job.recompute,
        zero_stage=job.zero_stage,
        fc_algorithm=job.fc_algorithm,
        attention=job.attention,
        step_s=job.step_s,
        tokens_per_s=job.tokens_per_s,
        model_flops_per_step=job.model_flops_per_step,
        hardware_flops_per_step=job.hardware_flops_per_step,
        mfu=job.mfu,
        hfu=job.hfu,
        bubble_fraction=job.bubble_fraction,
        breakdown_stage=job.busiest_stage,
        breakdown=[
            TimePartDoc(name=p.name, time_s=p.seconds, share=p.seconds / job.step_s)
            for p in job.breakdown
        ],
        data_parallel_comm_s=job.data_parallel_comm_s,
        data_parallel_exposed_s=job.data_parallel_exposed_s,
        layer=LayerTimesDoc(
            fc_forward_s=lt.fc_forward_s,
            fc_backward_s=lt.fc_backward_s,
            fc_exposed_comm_s=lt.fc_exposed_comm_s,
            attention_forward_s=lt.attention_forward_s,
            attention_backward_s=lt.attention_backward_s,
            elementwise_forward_s=lt.elementwise_forward_s,
            elementwise_backward_s=lt.elementwise_backward_s,
            recompute_s=lt.recompute_s,
        ),
        memory=[
            StageMemoryDoc(
                stage=m.stage,
                layers=m.layers,
                weights_bytes=m.weights,
                gradients_bytes=m.gradients,
                optimizer_bytes=m.optimizer,
                activations_bytes=m.activations,
                buffers_bytes=m.buffers,
                workspace_bytes=m.workspace,
                reserve_bytes=m.reserve,
                total_bytes=m.total,
                capacity_bytes=m.capacity,
                headroom_bytes=m.headroom,
            )
            for m in job.memory
        ],
        warnings=list(job.warnings),
    )
