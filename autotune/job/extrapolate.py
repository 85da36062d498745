"""What a chosen plan prices outside its calibration's measured range: the
local GEMMs it runs (FC layers, the unfused attention core, the output
layer) against the GEMM sizes the compute fit measured, the fused attention
kernel against the sequences its rows measured, and the collective
pieces it sends (FC layers on the tensor mesh, pipeline transfers, the
data-parallel gradient reduction, a mixture of experts' all-to-all and
grouped GEMMs) against the piece sizes each collective
fit measured (job/accuracy.py has the records and the comparison)."""

from __future__ import annotations

from collections.abc import Iterable

from autotune.hardware.calibration import axis_entry_key
from autotune.hardware.layout import AxisLayout, Level, ParallelAxis
from autotune.hardware.placement import MeshPlacement, ResourceKind
from autotune.job.accuracy import (
    Extrapolation,
    attention_extrapolations,
    collective_extrapolations,
    gemm_extrapolations,
)
from autotune.job.block import context_block_bytes
from autotune.job.experts import ExpertFigures
from autotune.job.hardware import level_entry
from autotune.plan.results import PlanResult
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.model import ModelSpec
from autotune.specs.training import (
    AttentionKernel,
    ContextComm,
    FcAlgorithm,
    Fp8Recipe,
    TrainingSpec,
)
from cost_models import Axis, MeshShape, collective_calls, local_gemm_dims

Used = dict[tuple[str, str], tuple[float, float, str]]


def _note(used: Used, op: str, key: str, sizes: Iterable[float], who: str) -> None:
    """Widen the (smallest, largest) piece recorded for `op` on `key`."""
    sizes = [float(x) for x in sizes if x > 0]
    if not sizes:
        return
    lo, hi = min(sizes), max(sizes)
    if (op, key) in used:
        plo, phi, pwho = used[(op, key)]
        who = pwho if who in pwho else f"{pwho}, {who}"
        lo, hi = min(lo, plo), max(hi, phi)
    used[(op, key)] = (lo, hi, who)


def _axis_key(calibration: CalibrationSpec, op: str, placement: MeshPlacement | None, axis: Axis):
    """The calibration entry an FC collective on `axis` is priced with
    (hardware/calibration.py axis_entry_key), else the mesh axis's name."""
    entries = calibration.collectives.get(op, {})
    key = axis_entry_key(entries, placement.axis(axis)) if placement is not None else None
    return key or axis.value


def _level_key(calibration: CalibrationSpec, op: str, level: Level) -> tuple[str, str] | None:
    """The (operation, key) a level of an axis is priced with
    (job/hardware.py level_entry), or None for the cluster file's own
    figures."""
    if level.kind is ResourceKind.CLUSTER_FIGURES:
        return None
    found = level_entry(calibration, level, op)
    return (found[0] if found else op), level.kind.value


def plan_extrapolations(
    calibration: CalibrationSpec,
    model: ModelSpec,
    training: TrainingSpec,
    fc: PlanResult,
    axes: Iterable[AxisLayout],
    config: dict[str, int | str],
    stage_weights_bytes: Iterable[float],
    experts: ExpertFigures | None = None,
) -> tuple[Extrapolation, ...]:
    """Every collective and GEMM of the chosen configuration priced beyond
    what `calibration` measured (module docstring)."""
    e = training.dtype.num_bytes
    mesh = MeshShape(int(config["rows"]), int(config["cols"]))
    mbs, zero = int(config["mbs"]), int(config["zero"])
    cp = int(config.get("cp", 1))
    replicas = int(config["dp"]) * cp  # the data x context group
    used: Used = {}
    shapes: dict[str, list[tuple[float, float, float]]] = {"FC layers": []}
    for lp in fc.layers:
        for g in lp.gemms:
            s = g.shape
            shapes["FC layers"].append(
                local_gemm_dims(s.dataflow, s.m, s.n, s.k, fc.mesh, g.num_slices, s.transposed)
            )
            for call in collective_calls(
                s.dataflow, s.m, s.n, s.k, fc.mesh, g.num_slices, e, s.transposed
            ):
                key = _axis_key(calibration, call.op.value, fc.placement, call.axis)
                _note(used, call.op.value, key, [call.shard_bytes], "FC layers")
    tp = mesh.num_chips
    seq, d, heads = training.sequence_length, model.head_dim, model.num_heads
    if training.attention is AttentionKernel.UNFUSED and heads % tp == 0:
        shapes["attention core"] = [(seq, seq, d), (seq, d, seq)]
    if model.vocab_size is not None:
        megatron = training.fc_algorithm is FcAlgorithm.MEGATRON_1D
        n = mbs * seq / (1 if megatron else mesh.num_rows)
        vs = model.vocab_size / (tp if megatron else mesh.num_cols)
        h = model.hidden_size
        shapes["output layer"] = [(n, vs, h), (n, h, vs), (h, vs, n)]
    by_axis = {a.axis: a for a in axes}
    pipeline = by_axis.get(ParallelAxis.PIPELINE)
    if pipeline is not None and pipeline.levels:
        message = mbs * (seq // cp) * model.hidden_size * e / tp
        key = _level_key(calibration, "send_recv", pipeline.levels[-1])
        if key is not None:
            _note(used, key[0], key[1], [message], "pipeline transfers")
    context = by_axis.get(ParallelAxis.CONTEXT)
    if context is not None and context.levels and training.context_parallel_comm is ContextComm.P2P:
        block = context_block_bytes(model, training, tp, mbs, cp)
        key = _level_key(calibration, "send_recv", context.levels[-1])
        if key is not None:
            _note(used, key[0], key[1], [block, 2 * block], "context-parallel exchange")
    expert = by_axis.get(ParallelAxis.EXPERT)
    if experts is not None:
        shapes["expert GEMMs"] = list(experts.expert_gemm_dims)
        pieces = (
            expert.all_to_all_pieces(
                experts.all_to_all_bytes, experts.scale_out_share, experts.scale_up_share
            )
            if expert is not None and experts.all_to_all_bytes
            else []
        )
        for level, piece in pieces:
            key = _level_key(calibration, "all_to_all", level)
            if key is not None and level.size > 1:
                _note(used, key[0], key[1], [float(piece)], "expert all-to-all")
    data = by_axis.get(ParallelAxis.GRADIENT)
    if data is not None and data.levels:
        grad_e = 4 if training.fp32_gradients else e
        totals = [
            grad_e * w * (replicas if zero >= 3 else 1) / e for w in stage_weights_bytes if w > 0
        ]
        divided = 1
        for level in data.levels:
            divided *= level.size
            for op in ("reduce_scatter", "all_gather"):
                key = _level_key(calibration, op, level)
                if key is not None and level.size > 1:
                    _note(used, key[0], key[1], [t / divided for t in totals], "gradient reduction")
    out = collective_extrapolations(calibration, used)
    if training.attention is AttentionKernel.FLASH:
        out += attention_extrapolations(calibration, seq / cp)
    fp8 = training.fp8 is not Fp8Recipe.NONE and calibration.compute_fp8 is not None
    if fp8:
        # the FC layers run on the FP8 GEMM fit; the rest on the dtype's
        fc = {name: shapes.pop(name) for name in ("FC layers", "expert GEMMs") if name in shapes}
        out += gemm_extrapolations(calibration, fc, calibration.compute_fp8)
    out += gemm_extrapolations(calibration, shapes)
    return tuple(out)
