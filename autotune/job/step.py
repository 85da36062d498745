"""The whole training step of one plan: per-layer times and memories, the
pipeline schedule replayed, data-parallel collectives with ZeRO, the
optimizer step; step time, throughput, utilisation and memory per stage."""

from __future__ import annotations

from autotune.errors import InputError, NoFeasiblePlanError
from autotune.job.block import (
    Ends,
    StepShape,
    ends,
    layer_activation_bytes,
    layer_params_per_chip,
    layer_times,
    step_shape,
)
from autotune.job.fc import megatron_fc, meshslice_fc
from autotune.job.hardware import GIB, JobHardware, job_hardware
from autotune.job.pipeline_adapter import PipelineReplay, StageWork, replay
from autotune.job.result import JobResult, LayerTimes, StageMemory, TimePart
from autotune.plan.layers import fc_layers
from autotune.plan.results import PlanResult
from autotune.specs.model import FfnKind
from autotune.specs.plan_input import PlanInput
from autotune.specs.training import FcAlgorithm
from cost_models import LinkParams, ring_collective_s
from cost_models.data_parallel import (
    data_parallel_traffic,
    exposed_overlap_s,
    model_state_bytes,
)
from cost_models.elementwise import adam_step_bytes_per_param
from cost_models.transformer_flops import model_flops_per_token, recompute_flops_per_token

BUCKET_BYTES = 25 * 2**20
"""Gradient bucket size: PyTorch DDP's default `bucket_cap_mb=25`
(torch.nn.parallel.DistributedDataParallel documentation); the last bucket
cannot overlap the backward pass."""


def _check_layers(inp: PlanInput) -> None:
    t = inp.training
    chunks = t.pipeline_parallel * t.interleave
    if inp.model.num_layers < chunks:
        raise InputError(
            f"gives {chunks} pipeline chunks but the model has {inp.model.num_layers} blocks",
            file=inp.source_file,
            field="training.pipeline_parallel",
            value=t.pipeline_parallel,
            fix="use fewer stages or a smaller interleave",
        )


def _ring_s(link: LinkParams, size: int, shard: float) -> float:
    return float(ring_collective_s(link, size, shard)) if size > 1 else 0.0


def _data_parallel_s(
    inp: PlanInput,
    hw: JobHardware,
    sh: StepShape,
    params: float,
    forward_s: float,
    backward_s: float,
) -> tuple[float, float]:
    """(all DP collective seconds, the part not hidden) for one stage.

    Overlap windows (derivation): gradients are final during the last
    micro-batch's backward, so their reduction hides behind it; gathered
    ZeRO-1/2 weights are needed by the next step's first forward; ZeRO-3
    gathers run ahead of every micro-batch's compute. `forward_s` and
    `backward_s` are one micro-batch's times on the stage.
    """
    t = inp.training
    d = t.data_parallel
    if d == 1 or hw.data_parallel is None:
        return 0.0, 0.0
    link = hw.data_parallel
    traffic = data_parallel_traffic(
        params, t.zero_stage, d, t.num_micro_batches, sh.element_bytes, sh.grad_bytes
    )
    rs = traffic.grad_reduce_scatters * _ring_s(link, d, traffic.shard_bytes_grad)
    ag = traffic.param_all_gathers * _ring_s(link, d, traffic.shard_bytes_param)
    bucket = _ring_s(link, d, BUCKET_BYTES / d)
    total = rs + ag
    if not t.overlap_data_parallel:
        return total, total
    if t.zero_stage == 0:
        return total, exposed_overlap_s(total, backward_s, 2 * bucket)
    if t.zero_stage in (1, 2):
        return total, exposed_overlap_s(rs, backward_s, bucket) + exposed_overlap_s(
            ag, forward_s, bucket
        )
    window = t.num_micro_batches * (forward_s + backward_s)
    return total, exposed_overlap_s(total, window, bucket)


def _stage_params(lt_params: float, layers: int, stage: int, pp: int, e: Ends) -> float:
    p = lt_params * layers
    if stage == 0:
        p += e.head_params
    if stage == pp - 1:
        p += e.tail_params
    return p


def _memory(
    inp: PlanInput,
    hw: JobHardware,
    sh: StepShape,
    rep: PipelineReplay,
    layer_params: float,
    e: Ends,
    buffers: float,
) -> tuple[StageMemory, ...]:
    t = inp.training
    pp = t.pipeline_parallel
    out = []
    for s in range(pp):
        params = _stage_params(layer_params, rep.layers_per_stage[s], s, pp, e)
        state = model_state_bytes(
            params, t.zero_stage, t.data_parallel, sh.element_bytes, sh.grad_bytes
        )
        activations = rep.stage_peak_bytes[s] - rep.stage_static_bytes[s]
        transient = e.tail_transient_bytes if s == pp - 1 else 0.0
        out.append(
            StageMemory(
                stage=s,
                layers=rep.layers_per_stage[s],
                weights=state.weights,
                gradients=state.gradients,
                optimizer=state.optimizer,
                activations=activations,
                buffers=buffers + transient,
                workspace=t.workspace_gib * GIB,
                reserve=t.memory_reserve_fraction * hw.hbm_bytes,
                capacity=hw.hbm_bytes,
            )
        )
    return tuple(out)


def _flops(inp: PlanInput) -> tuple[float, float]:
    m, t = inp.model, inp.training
    args = (m.hidden_size, m.num_heads, m.kv_heads, m.head_dim, m.ffn_size)
    gated = m.ffn_kind is FfnKind.SWIGLU
    per_token = model_flops_per_token(
        m.num_layers, *args, gated, m.vocab_size or 0, t.sequence_length
    )
    extra = recompute_flops_per_token(
        t.recompute.value,
        m.num_layers,
        *args,
        gated,
        t.sequence_length,
        t.attention.value == "flash",
    )
    tokens = t.global_batch_sequences * t.sequence_length
    return per_token * tokens, (per_token + extra) * tokens


def plan_job(inp: PlanInput, result: PlanResult, check_memory: bool = True) -> JobResult:
    """Price the whole step of `inp` with the FC plan `result`; raises
    NoFeasiblePlanError naming the stage and the shortfall when a stage does
    not fit (unless `check_memory` is False)."""
    _check_layers(inp)
    hw, warnings = job_hardware(inp, result.mesh)
    m, t = inp.model, inp.training
    tp, pp, v = result.tp_chips, t.pipeline_parallel, t.interleave
    meshslice = t.fc_algorithm is FcAlgorithm.MESHSLICE
    sh = step_shape(t, tp, result.mesh.num_rows, result.mesh.num_cols, meshslice)
    if meshslice:
        fc = meshslice_fc(result)
    else:
        fc = megatron_fc(
            fc_layers(m, t),
            tp,
            hw,
            sh.element_bytes,
            overlap_backward=t.overlap_tensor_backward,
        )
    lt = layer_times(m, t, fc, hw, sh)
    e = ends(m, t, hw, sh)
    if m.vocab_size is None:
        warnings += (
            "the model gives no vocab_size: embedding, output layer and loss are left out",
        )

    p2p_s = 0.0
    if pp > 1 and hw.pipeline is not None:
        p2p_s = _ring_s(hw.pipeline, 2, sh.tokens * m.hidden_size * sh.element_bytes / tp)
    layers_per_chunk = m.num_layers / (pp * v)
    lp = layer_params_per_chip(m, tp)
    state_per_layer = model_state_bytes(
        lp, t.zero_stage, t.data_parallel, sh.element_bytes, sh.grad_bytes
    ).total
    zero3_gathered = 2 * lp * sh.element_bytes if t.zero_stage == 3 else 0.0
    buffers = fc.buffer_bytes + zero3_gathered
    work = StageWork(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=t.num_micro_batches,
        num_layers=m.num_layers,
        layer_forward_s=lt.forward_s + p2p_s / layers_per_chunk,
        layer_backward_s=lt.backward_s + p2p_s / layers_per_chunk,
        layer_static_bytes=state_per_layer,
        layer_activation_bytes=layer_activation_bytes(m, t, sh),
        head_forward_s=e.head_forward_s,
        head_backward_s=e.head_backward_s,
        head_bytes=model_state_bytes(
            e.head_params, t.zero_stage, t.data_parallel, sh.element_bytes, sh.grad_bytes
        ).total,
        tail_forward_s=e.tail_forward_s,
        tail_backward_s=e.tail_backward_s,
        tail_bytes=model_state_bytes(
            e.tail_params, t.zero_stage, t.data_parallel, sh.element_bytes, sh.grad_bytes
        ).total
        + e.tail_transient_bytes,
        constant_bytes=buffers + t.workspace_gib * GIB,
    )
    rep = replay(work)
    memory = _memory(inp, hw, sh, rep, lp, e, buffers)

    tail_s, dp_comm, dp_exposed = [], [], []
    for s in range(pp):
        layers = rep.layers_per_stage[s]
        params = _stage_params(lp, layers, s, pp, e)
        fwd = layers * lt.forward_s + (e.head_forward_s if s == 0 else 0.0)
        bwd = layers * lt.backward_s + (e.tail_backward_s if s == pp - 1 else 0.0)
        comm, exposed = _data_parallel_s(inp, hw, sh, params, fwd, bwd)
        owned = params / (t.data_parallel if t.zero_stage >= 1 else 1)
        opt = owned * adam_step_bytes_per_param(sh.element_bytes, sh.grad_bytes)
        opt_s = opt / hw.hbm_bytes_per_s
        dp_comm.append(comm)
        dp_exposed.append(exposed)
        tail_s.append(exposed + opt_s)
    stage = max(range(pp), key=lambda s: (tail_s[s], rep.stage_busy_s[s]))
    step_s = rep.makespan_s + tail_s[stage]

    breakdown = _breakdown(
        lt, e, rep, stage, pp, t.num_micro_batches, dp_exposed[stage], tail_s[stage]
    )
    model_flops, hw_flops = _flops(inp)
    res = JobResult(
        chips=inp.cluster.num_chips,
        tensor_parallel=tp,
        data_parallel=t.data_parallel,
        pipeline_parallel=pp,
        interleave=v,
        micro_batches=t.num_micro_batches,
        micro_batch_sequences=t.micro_batch_sequences,
        recompute=t.recompute.value,
        zero_stage=t.zero_stage,
        fc_algorithm=t.fc_algorithm.value,
        attention=t.attention.value,
        step_s=step_s,
        tokens_per_step=t.global_batch_sequences * t.sequence_length,
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops,
        peak_flops_per_s=hw.peak_flops_per_s,
        layer=lt,
        breakdown=breakdown,
        busiest_stage=stage,
        bubble_fraction=rep.bubble_fraction,
        data_parallel_comm_s=dp_comm[stage],
        data_parallel_exposed_s=dp_exposed[stage],
        memory=memory,
        warnings=tuple(warnings),
    )
    if check_memory and not res.fits:
        raise NoFeasiblePlanError(out_of_memory_message(res))
    return res


def out_of_memory_message(res: JobResult) -> str:
    """One line naming the stage that misses by the most and by how much."""
    worst = min(res.memory, key=lambda s: s.headroom)
    return (
        f"out of memory: pipeline stage {worst.stage} needs {worst.total / GIB:.1f} GiB "
        f"(weights {worst.weights / GIB:.1f}, gradients {worst.gradients / GIB:.1f}, "
        f"optimizer {worst.optimizer / GIB:.1f}, activations {worst.activations / GIB:.1f}, "
        f"buffers {worst.buffers / GIB:.1f}, workspace {worst.workspace / GIB:.1f}, "
        f"reserve {worst.reserve / GIB:.1f}) of {worst.capacity / GIB:.1f} GiB, "
        f"short by {-worst.headroom / GIB:.1f} GiB; fix: more recomputation, a higher ZeRO "
        "stage, more pipeline stages or a smaller micro-batch"
    )


def _breakdown(
    lt: LayerTimes,
    e: Ends,
    rep: PipelineReplay,
    stage: int,
    pp: int,
    m: int,
    dp_exposed_s: float,
    tail_s: float,
) -> tuple[TimePart, ...]:
    n = rep.layers_per_stage[stage] * m
    ends_s = 0.0
    if stage == 0:
        ends_s += m * (e.head_forward_s + e.head_backward_s)
    if stage == pp - 1:
        ends_s += m * (e.tail_forward_s + e.tail_backward_s)
    fc_total = lt.fc_forward_s + lt.fc_backward_s
    busy = rep.stage_busy_s[stage]
    parts = [
        TimePart("FC compute", n * (fc_total - lt.fc_exposed_comm_s)),
        TimePart("FC exposed communication", n * lt.fc_exposed_comm_s),
        TimePart("attention core", n * (lt.attention_forward_s + lt.attention_backward_s)),
        TimePart("memory-bound ops", n * (lt.elementwise_forward_s + lt.elementwise_backward_s)),
        TimePart("recomputation", n * lt.recompute_s),
        TimePart("embedding, output layer, loss", ends_s),
        TimePart("pipeline send/recv", busy - ends_s - n * (lt.forward_s + lt.backward_s)),
        TimePart("pipeline bubble", rep.makespan_s - busy),
        TimePart("data-parallel exposed", dp_exposed_s),
        TimePart("optimizer step", tail_s - dp_exposed_s),
    ]
    return tuple(parts)
