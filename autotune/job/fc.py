"""FC-layer time per block and micro-batch on one chip: MeshSlice from the
planned layers, or Megatron 1D tensor parallelism (with sequence
parallelism) as the alternative."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.errors import NoFeasiblePlanError
from autotune.job.hardware import JobHardware
from autotune.plan.dataflow import GemmPass, Stationary, table1
from autotune.plan.layers import ATTN_OUT, FFN_DOWN, FCLayer
from autotune.plan.results import PlanResult
from cost_models import CommModel, ComputeModel, GemmEstimate, MeshShape
from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.common import InfeasibleError
from cost_models.concurrency import overlapped_pair_saving_s


@dataclass(frozen=True)
class FcTimes:
    """One block's FC layers for one micro-batch (seconds, bytes)."""

    forward_s: float
    backward_s: float
    exposed_comm_s: float
    buffer_bytes: float


def _gathered_bytes(est: GemmEstimate) -> float:
    """Bytes one iteration's collectives gather into (or reduce out of)."""
    return sum(c.shard_bytes * c.ring_size for c in est.calls)


def _sum(estimates: Sequence[tuple[GemmPass, GemmEstimate]], copies: int) -> FcTimes:
    fwd = sum(e.total_s for p, e in estimates if p is GemmPass.FORWARD)
    bwd = sum(e.total_s for p, e in estimates if p is not GemmPass.FORWARD)
    exposed = sum(e.breakdown.exposed_comm_s for _, e in estimates)
    buffers = max((copies * _gathered_bytes(e) for _, e in estimates), default=0.0)
    return FcTimes(fwd, bwd, exposed, buffers)


def meshslice_fc(result: PlanResult) -> FcTimes:
    """The planned MeshSlice layers (plus the transposes their dataflows
    force, half in each pass). Gathered slices are double-buffered: the next
    slice arrives while the current one is multiplied."""
    pairs = [(g.shape.gemm_pass, g.estimate) for lp in result.layers for g in lp.gemms]
    times = _sum(pairs, copies=2)
    count = result.layers[0].layer.count_per_step
    transpose_s = result.transpose_s_per_step / count
    return FcTimes(
        times.forward_s + transpose_s / 2,
        times.backward_s + transpose_s / 2,
        times.exposed_comm_s + transpose_s,
        times.buffer_bytes,
    )


def megatron_estimates(
    layers: Sequence[FCLayer], tp: int, comm: CommModel, gemm: ComputeModel, element_bytes: int
) -> list[tuple[GemmPass, GemmEstimate]]:
    """Each layer's forward, backward-data and backward-weight GEMM under
    Megatron 1D TP with sequence parallelism on the `1 x tp` mesh: the
    Collective 2D GEMM on it (as cost_models.baselines.one_d prices it, but
    with the links `comm` places on the cluster: NVSwitch on a GPU node),
    column-parallel layers (QKV, FFN gate/up) keeping Y stationary,
    row-parallel ones (attention output, FFN down) X stationary. Raises
    InfeasibleError when a layer does not split evenly over `tp`."""
    pairs = []
    for layer in layers:
        st = Stationary.X if layer.name in (ATTN_OUT, FFN_DOWN) else Stationary.Y
        for shape in table1(layer, st, False):
            try:
                est = collective_gemm(
                    shape.dataflow,
                    shape.m,
                    shape.n,
                    shape.k,
                    MeshShape(1, tp),
                    element_bytes,
                    comm,
                    gemm,
                    shape.transposed,
                )
            except InfeasibleError as exc:
                raise InfeasibleError(f"{layer.name} {shape.gemm_pass.value}: {exc}") from None
            pairs.append((shape.gemm_pass, est))
    return pairs


def megatron_backward_overlap_s(
    layers: Sequence[FCLayer],
    pairs: Sequence[tuple[GemmPass, GemmEstimate]],
    overlap_slowdown: float,
) -> float:
    """Seconds Megatron-LM's asynchronous tensor-parallel all-reduce saves in
    the backward of `pairs` (:func:`megatron_estimates` of `layers`): in a
    column-parallel layer (QKV, FFN gate/up) each backward GEMM's collective
    runs beside the other backward GEMM
    (cost_models.concurrency.overlapped_pair_saving_s); a row-parallel
    layer's backward first gathers the output gradient both GEMMs need, so
    it saves nothing."""
    if len(pairs) != 3 * len(layers):
        raise ValueError("pairs must hold three GEMMs per layer (megatron_estimates)")
    saving_s = 0.0
    for i, layer in enumerate(layers):
        if layer.name in (ATTN_OUT, FFN_DOWN):
            continue
        by_pass = {p: est.breakdown for p, est in pairs[3 * i : 3 * i + 3]}
        d, w = by_pass[GemmPass.BACKWARD_DATA], by_pass[GemmPass.BACKWARD_WEIGHT]
        saving_s += overlapped_pair_saving_s(
            d.exposed_comm_s, d.compute_s, w.exposed_comm_s, w.compute_s, overlap_slowdown
        )
    return saving_s


def megatron_fc(
    layers: Sequence[FCLayer],
    tp: int,
    hw: JobHardware,
    element_bytes: int,
    overlap_backward: bool = False,
) -> FcTimes:
    """Megatron 1D TP with sequence parallelism (:func:`megatron_estimates`
    on the links of `hw.comm`). Blocking collectives, except with
    `overlap_backward` (:func:`megatron_backward_overlap_s`, compute beside
    a collective slowed by `hw.overlap_slowdown`); the gathered input is one
    buffer."""
    try:
        pairs = megatron_estimates(layers, tp, hw.comm, hw.gemm, element_bytes)
    except InfeasibleError as exc:
        raise NoFeasiblePlanError(f"megatron-1d on {tp} chips: {exc}") from None
    times = _sum(pairs, copies=1)
    if not overlap_backward:
        return times
    saving_s = megatron_backward_overlap_s(layers, pairs, hw.overlap_slowdown)
    return FcTimes(
        times.forward_s,
        times.backward_s - saving_s,
        times.exposed_comm_s - saving_s,
        times.buffer_bytes,
    )
