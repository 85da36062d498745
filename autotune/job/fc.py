"""One transformer block's FC layers for one micro-batch on one chip, per
tensor mesh and micro-batch size: the MeshSlice plan (phase 1's dataflow
choice under the plan's policy, each GEMM at its best slice count, the
transposes it forces) or Megatron-LM's 1D tensor parallelism (blocking
collectives with sequence parallelism).

The search prices thousands of candidates but only a few hundred distinct
(mesh, micro-batch) pairs, so :class:`FcTable` prices every micro-batch size
of a mesh at once (plan/options.py) and keeps the result; the chosen
configuration's FC plan (plan/search.py `plan_result`) is built from the
same selection, so its per-block times are these (tests/test_job_model.py
checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.errors import InputError
from autotune.job.hardware import HardwareView, base_training
from autotune.plan.context import SearchContext
from autotune.plan.dataflow import GemmPass, Stationary, size_rule, table1, tensor_layouts
from autotune.plan.layers import ATTN_OUT, FFN_DOWN, FCLayer, block_fc_layers, fc_layers
from autotune.plan.options import price_layer_options
from autotune.plan.phase1 import Selection, select
from autotune.plan.results import GemmPlan, LayerPlan, MeshCandidate, PlanResult
from autotune.plan.search import MeshEvaluator, pricing_context
from autotune.specs.job import JobInput
from autotune.specs.plan_input import DataflowPolicy, PlanInput
from autotune.specs.training import FcAlgorithm
from cost_models import (
    CommModel,
    ComputeModel,
    GemmEstimate,
    MeshShape,
    TimeBreakdown,
    collective_calls,
)
from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.common import InfeasibleError
from cost_models.concurrency import overlapped_pair_saving_s


@dataclass(frozen=True)
class FcBlock:
    """One block's FC layers for one micro-batch (seconds, bytes): forward
    and backward (data + weight) totals, the communication compute did not
    hide, and the largest gathered buffer (double-buffered for MeshSlice)."""

    forward_s: float
    backward_s: float
    exposed_comm_s: float
    buffer_bytes: float


#: a FC table entry: the block's times, or why the mesh cannot run it
FcEntry = FcBlock | str


def meshslice_block(ev: MeshEvaluator, sel: Selection) -> FcBlock:
    """The selected layer options of `ev`: each GEMM's time in its pass,
    the exposed part `total - compute` of each, the transposes the choice
    forces (forward and backward, half in each pass, all exposed), and the
    largest gathered buffer of any GEMM, twice (the next slice arrives while
    the current one is multiplied)."""
    forward = backward = exposed = 0.0
    buffers = 0.0
    for idx, (st, transposed) in enumerate(sel.choices):
        opt = ev.option(idx, st, transposed)
        assert not isinstance(opt, str)
        for g in opt.gemms:
            if g.shape.gemm_pass is GemmPass.FORWARD:
                forward += g.total_s
            else:
                backward += g.total_s
            exposed += max(g.total_s - g.compute_s, 0.0)
            calls = collective_calls(
                g.shape.dataflow,
                g.shape.m,
                g.shape.n,
                g.shape.k,
                ev.mesh,
                g.num_slices,
                ev.ctx.element_bytes,
                g.shape.transposed,
            )
            buffers = max(buffers, 2 * sum(c.shard_bytes * c.ring_size for c in calls))
    transpose_s = sum(2.0 * ev.transpose_s(t) for t in sel.transposes)
    return FcBlock(
        forward + transpose_s / 2, backward + transpose_s / 2, exposed + transpose_s, buffers
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
        for shape in table1(layer, megatron_stationary(layer), False):
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


def megatron_stationary(layer: FCLayer) -> Stationary:
    """Megatron's column-parallel layers keep Y stationary, row-parallel ones X."""
    return Stationary.X if layer.name in (ATTN_OUT, FFN_DOWN) else Stationary.Y


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


def megatron_block(
    layers: Sequence[FCLayer],
    tp: int,
    comm: CommModel,
    gemm: ComputeModel,
    element_bytes: int,
    overlap_backward: bool,
    overlap_slowdown: float,
) -> FcEntry:
    """Megatron 1D TP with sequence parallelism (:func:`megatron_estimates`).
    Blocking collectives, except with `overlap_backward`
    (:func:`megatron_backward_overlap_s`); the gathered input is one buffer.
    A layer that does not split over `tp` gives the reason instead."""
    try:
        pairs = megatron_estimates(layers, tp, comm, gemm, element_bytes)
    except InfeasibleError as exc:
        return f"megatron-1d on {tp} chips: {exc}"
    forward = sum(e.total_s for p, e in pairs if p is GemmPass.FORWARD)
    backward = sum(e.total_s for p, e in pairs if p is not GemmPass.FORWARD)
    exposed = sum(e.breakdown.exposed_comm_s for _, e in pairs)
    buffers = max((sum(c.shard_bytes * c.ring_size for c in e.calls) for _, e in pairs), default=0)
    saving_s = 0.0
    if overlap_backward:
        saving_s = megatron_backward_overlap_s(layers, pairs, overlap_slowdown)
    return FcBlock(forward, backward - saving_s, exposed - saving_s, float(buffers))


class FcTable:
    """FC block times per (rows, cols, micro-batch sequences, context-parallel
    chips) for one job, computed a mesh at a time and kept (a
    context-parallel chip's FC layers see `1 / cp` of each sequence)."""

    def __init__(self, inp: JobInput, hw: HardwareView, policy: DataflowPolicy) -> None:
        self.inp, self.hw, self.policy = inp, hw, policy
        self._entries: dict[tuple[int, int, int, int], FcEntry] = {}
        self._evaluators: dict[tuple[int, int, int, int], MeshEvaluator] = {}
        self._megatron = inp.training.fc_algorithm is FcAlgorithm.MEGATRON_1D
        #: the calibration gaps that kept a mesh from being priced, in order
        self.errors: list[InputError] = []

    def evaluator(self, rows: int, cols: int, mbs: int, cp: int = 1) -> MeshEvaluator:
        """The MeshSlice evaluator of one key (after :meth:`entries` priced it)."""
        return self._evaluators[(rows, cols, mbs, cp)]

    def entries(
        self, keys: Sequence[tuple[int, int, int, int]]
    ) -> dict[tuple[int, int, int, int], FcEntry]:
        """The entry of every (rows, cols, micro-batch, cp) key (priced on
        first request)."""
        todo: dict[tuple[int, int, int], list[int]] = {}
        for rows, cols, mbs, cp in keys:
            if (rows, cols, mbs, cp) not in self._entries:
                todo.setdefault((rows, cols, cp), []).append(mbs)
        for (rows, cols, cp), sizes in todo.items():
            self._price_mesh(MeshShape(rows, cols), sorted(set(sizes)), cp)
        return {k: self._entries[k] for k in keys}

    def _price_mesh(self, mesh: MeshShape, sizes: list[int], cp: int) -> None:
        s = self.inp.training.sequence_length // cp
        try:
            ctx = self.hw.tensor_context(mesh)
        except InputError as exc:
            if exc.one_line() not in [e.one_line() for e in self.errors]:
                self.errors.append(exc)
            for mbs in sizes:
                self._entries[(mesh.num_rows, mesh.num_cols, mbs, cp)] = exc.one_line()
            return
        lists = [block_fc_layers(self.inp.model, mbs * s) for mbs in sizes]
        e = self.inp.training.dtype.num_bytes
        if self._megatron:
            for mbs, layers in zip(sizes, lists, strict=True):
                self._entries[(1, mesh.num_cols, mbs, cp)] = megatron_block(
                    layers,
                    mesh.num_chips,
                    ctx.comm,
                    ctx.compute,
                    e,
                    self.inp.training.overlap_tensor_backward,
                    ctx.overlap_slowdown,
                )
            return
        base = base_training(self.inp)
        evaluators = []
        for mbs, layers in zip(sizes, lists, strict=True):
            update = {"global_batch_sequences": mbs, "micro_batch_size": mbs}
            update["context_parallel"] = cp
            training = base.model_copy(update=update)
            ev = MeshEvaluator(self.inp.plan_input(training), layers, mesh, ctx)
            key = (mesh.num_rows, mesh.num_cols, mbs, cp)
            # phase 1 cannot place the attention core in either layout: no
            # dataflow choice runs, so none is priced
            why = ev.attention_check(False)
            if why is not None and ev.attention_check(True) is not None:
                self._entries[key] = why
            else:
                evaluators.append((key, ev))
        if not evaluators:
            return
        options = price_layer_options(
            [ev.layers for _, ev in evaluators], pricing_context(mesh, ctx)
        )
        for (key, ev), opts in zip(evaluators, options, strict=True):
            ev.prime(opts)
            sel = select(self.policy, ev.layers, ev.layer_cost, ev.transpose_s, ev.attention_check)
            self._evaluators[key] = ev
            self._entries[key] = meshslice_block(ev, sel) if isinstance(sel, Selection) else sel


def megatron_plan_result(inp: PlanInput, mesh: MeshShape, ctx: SearchContext) -> PlanResult:
    """The FC section of a megatron-1d plan: each layer's three GEMMs as
    Megatron runs them on the `1 x N` mesh (:func:`megatron_estimates`,
    blocking, one slice), in the form the MeshSlice plan takes, so the
    report, the document, `export` and `verify` read both alike."""
    layers = fc_layers(inp.model, inp.training)
    e = inp.training.dtype.num_bytes
    pairs = megatron_estimates(layers, mesh.num_chips, ctx.comm, ctx.compute, e)
    count = layers[0].count_per_step
    plans = []
    breakdown = TimeBreakdown.zero()
    for i, layer in enumerate(layers):
        st = megatron_stationary(layer)
        gemms = tuple(
            GemmPlan(shape, 1, (1,), est)
            for shape, (_, est) in zip(
                table1(layer, st, False), pairs[3 * i : 3 * i + 3], strict=True
            )
        )
        plan = LayerPlan(
            layer, st, False, size_rule(layer), tensor_layouts(layer, st, False), gemms
        )
        breakdown = breakdown + plan.breakdown_per_step
        plans.append(plan)
    candidate = MeshCandidate(
        mesh, True, breakdown.total_s, None, " ".join(p.stationary.value for p in plans)
    )
    return PlanResult(
        inputs=inp,
        policy=inp.search.dataflow,
        mesh=mesh,
        tp_chips=mesh.num_chips,
        layers=tuple(plans),
        residual_transposed=False,
        transposes=(),
        transpose_s_per_step=0.0,
        breakdown_per_step=breakdown,
        fc_flops_per_step=sum(layer.training_flops for layer in layers) * count,
        peak_flops_per_s=ctx.cluster.peak_flops_per_s(inp.training.dtype.value),
        candidates=(candidate,),
        comparison=None,
        warnings=(),
        placement=ctx.placement,
        one_d=None,
    )
