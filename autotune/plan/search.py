"""Phase 2: every allowed mesh shape, every valid slice count per GEMM, and
the ranked result (seed 000 section 3.2.2; model.md section 8).

The layers' best slice counts are independent, so a mesh shape's time is a
sum of per-GEMM minima; the search is exhaustive and takes milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from autotune.errors import InputError, NoFeasiblePlanError
from autotune.plan.context import SearchContext, check_calibration, search_context
from autotune.plan.dataflow import Stationary, size_rule, tensor_layouts
from autotune.plan.fit_range import fit_range_warnings
from autotune.plan.layers import FCLayer, fc_layers
from autotune.plan.options import (
    LayerOption,
    OptionKey,
    PricingContext,
    price_layer_options,
)
from autotune.plan.phase1 import Selection, Transpose, select
from autotune.plan.results import (
    DataflowComparison,
    GemmPlan,
    LayerPlan,
    MeshCandidate,
    OneDComparison,
    PlanResult,
)
from autotune.specs.cluster import ClusterSpec
from autotune.specs.plan_input import DataflowPolicy, PlanInput
from cost_models import (
    Axis,
    CollectiveOp,
    MeshShape,
    TimeBreakdown,
    meshslice_estimate,
    transpose_cost,
)
from cost_models.divisors import divisors


def tp_chip_count(inp: PlanInput) -> int:
    """Chips of one tensor-parallel group: `num_chips / (dp * pp)`."""
    t = inp.training
    groups = t.data_parallel * t.pipeline_parallel
    tp, rem = divmod(inp.cluster.num_chips, groups)
    if rem:
        raise InputError(
            f"is not divisible by data_parallel * pipeline_parallel = {groups}",
            file=inp.source_file,
            field="cluster.num_chips",
            value=inp.cluster.num_chips,
            fix="choose parallel degrees whose product divides the chip count",
        )
    return tp


def mesh_shapes(cluster: ClusterSpec, tp_chips: int, file: str | None = None) -> list[MeshShape]:
    """The allowed `Nr x Nc` meshes of `tp_chips` chips: the cluster's list,
    or every factor pair with both sides >= min_axis_size."""
    if cluster.mesh_shapes is not None:
        shapes = [MeshShape(r, c) for r, c in cluster.mesh_shapes if r * c == tp_chips]
        if not shapes:
            listed = ", ".join(f"{r}x{c}" for r, c in cluster.mesh_shapes)
            raise InputError(
                f"has no shape with rows*cols = {tp_chips} tensor-parallel chips "
                f"(listed: {listed})",
                file=file,
                field="cluster.mesh_shapes",
                fix=f"add a shape whose rows*cols is {tp_chips} or change num_chips",
            )
        return shapes
    shapes = [
        MeshShape(r, tp_chips // r)
        for r in divisors(tp_chips)
        if min(r, tp_chips // r) >= cluster.min_axis_size
    ]
    if not shapes:
        raise InputError(
            f"leaves no mesh shape of {tp_chips} chips with both sides >= {cluster.min_axis_size}",
            file=file,
            field="cluster.min_axis_size",
            value=cluster.min_axis_size,
            fix="lower min_axis_size or use a chip count with more factors",
        )
    return shapes


def pricing_context(mesh: MeshShape, ctx: SearchContext) -> PricingContext:
    """What :func:`price_layer_options` needs of a search context placed on `mesh`."""
    return PricingContext(
        mesh=mesh,
        comm=ctx.comm,
        compute=ctx.compute,
        element_bytes=ctx.element_bytes,
        block=ctx.block,
        max_slices=ctx.max_slices,
        overlap_slowdown=ctx.overlap_slowdown,
        scope=ctx.scope,
    )


class MeshEvaluator:
    """Prices layer options on one mesh shape (all at once, plan/options.py)
    and checks the attention core's locality for phase 1."""

    def __init__(
        self,
        inp: PlanInput,
        layers: Sequence[FCLayer],
        mesh: MeshShape,
        ctx: SearchContext,
        options: dict[OptionKey, LayerOption | str] | None = None,
    ) -> None:
        self.inp, self.layers, self.mesh, self.ctx = inp, layers, mesh, ctx
        self._options = options
        self._transposes: dict[Transpose, float] = {}

    @property
    def options(self) -> dict[OptionKey, LayerOption | str]:
        """Every layer option's price or reason (computed on first use)."""
        if self._options is None:
            context = pricing_context(self.mesh, self.ctx)
            self._options = price_layer_options([self.layers], context)[0]
        return self._options

    def prime(self, options: dict[OptionKey, LayerOption | str]) -> None:
        """Use `options` (priced with other meshes' or token counts' in one
        batch) instead of pricing them here."""
        self._options = options

    def option(self, idx: int, st: Stationary, transposed: bool) -> LayerOption | str:
        """The layer's three GEMMs at their best slice counts, or a reason."""
        return self.options[(idx, st, transposed)]

    def layer_cost(self, idx: int, st: Stationary, transposed: bool) -> float | None:
        """Seconds for the layer once, or None when infeasible."""
        opt = self.option(idx, st, transposed)
        return None if isinstance(opt, str) else opt.total_s

    def transpose_s(self, t: Transpose) -> float:
        """Seconds of one transpose of the activation `t` on this mesh
        (infinite when the calibration cannot price a send-recv)."""
        if t not in self._transposes:
            if not all(self.ctx.comm.has(CollectiveOp.SEND_RECV, axis) for axis in Axis):
                self._transposes[t] = math.inf
            else:
                self._transposes[t] = transpose_cost(
                    t.rows, t.cols, self.ctx.element_bytes, self.mesh, self.ctx.comm
                ).total_s
        return self._transposes[t]

    def attention_check(self, state: bool) -> str | None:
        """Why the attention core would need communication with QKV's output
        in layout `state` (True = TRANSPOSED), or None.

        Attention is local when every chip holds whole heads and whole
        sequences (the paper's assumption that non-FC ops add no traffic):
        heads divide over the features' mesh axis, the micro-batch's
        sequences over the tokens' axis.
        """
        if not self.inp.search.attention_locality:
            return None
        tokens_axis = self.mesh.num_cols if state else self.mesh.num_rows
        feature_axis = self.mesh.num_rows if state else self.mesh.num_cols
        model = self.inp.model
        for label, heads in (("num_heads", model.num_heads), ("num_kv_heads", model.kv_heads)):
            if heads % feature_axis:
                return (
                    f"attention: {label}={heads} not divisible by the feature axis ({feature_axis})"
                )
        seqs = self.inp.training.micro_batch_sequences
        if seqs % tokens_axis:
            return f"attention: {seqs} sequences not divisible by the token axis ({tokens_axis})"
        return None


def _select(policy: DataflowPolicy, ev: MeshEvaluator) -> Selection | str:
    return select(policy, ev.layers, ev.layer_cost, ev.transpose_s, ev.attention_check)


def _layer_plans(ev: MeshEvaluator, sel: Selection) -> tuple[LayerPlan, ...]:
    plans = []
    for idx, (layer, (st, transposed)) in enumerate(zip(ev.layers, sel.choices, strict=True)):
        opt = ev.option(idx, st, transposed)
        assert not isinstance(opt, str)
        gemms = []
        for choice in opt.gemms:
            shape = choice.shape
            est = meshslice_estimate(
                shape.dataflow,
                shape.m,
                shape.n,
                shape.k,
                ev.mesh,
                choice.num_slices,
                ev.ctx.element_bytes,
                ev.ctx.comm,
                ev.ctx.compute,
                shape.transposed,
                ev.ctx.overlap_slowdown,
            )
            gemms.append(GemmPlan(shape, choice.num_slices, choice.valid_slice_counts, est))
        plans.append(
            LayerPlan(
                layer,
                st,
                transposed,
                size_rule(layer),
                tensor_layouts(layer, st, transposed),
                tuple(gemms),
            )
        )
    return tuple(plans)


def _stationaries(sel: Selection) -> str:
    return " ".join(st.value + ("ᵀ" if t else "") for st, t in sel.choices)


MeshRow = tuple[MeshShape, MeshEvaluator, Selection | str, Selection | str | None]


def evaluate_meshes(
    inp: PlanInput,
    policy: DataflowPolicy,
    meshes: Sequence[MeshShape],
    ctx: SearchContext | None = None,
    contexts: dict[MeshShape, SearchContext] | None = None,
) -> list[MeshRow]:
    """Phase 1 under `policy` (and, for the comparison, the size rule) on
    each mesh of `meshes`: (mesh, evaluator, selection or reason, size-rule
    selection or reason). `contexts` supplies already placed contexts."""
    ctx = ctx or search_context(inp)
    layers = fc_layers(inp.model, inp.training)
    rows: list[MeshRow] = []
    for mesh in meshes:
        mesh_ctx = (contexts or {}).get(mesh) or ctx.for_mesh(mesh)
        ev = MeshEvaluator(inp, layers, mesh, mesh_ctx)
        sel = _select(policy, ev)
        ref = (
            _select(DataflowPolicy.SIZE_RULE, ev)
            if policy is not DataflowPolicy.SIZE_RULE
            else None
        )
        rows.append((mesh, ev, sel, ref))
    return rows


def plan(inp: PlanInput, policy: DataflowPolicy | None = None) -> PlanResult:
    """Plan the FC layers of `inp`: phase 1 under `policy` (default: the
    spec's), phase 2 over every allowed mesh shape; the fastest wins."""
    policy = policy or inp.search.dataflow
    check_calibration(inp)  # its errors come before any pricing
    ctx = search_context(inp)
    tp = tp_chip_count(inp)
    rows = evaluate_meshes(inp, policy, mesh_shapes(inp.cluster, tp, inp.source_file), ctx)
    feasible = [r for r in rows if isinstance(r[2], Selection)]
    if not feasible:
        reasons = "; ".join(f"{c.mesh}: {c.reason}" for c in _ranked(rows, 1)[:6])
        raise NoFeasiblePlanError(f"no feasible mesh shape for {tp} chips ({reasons})")
    mesh = min(feasible, key=lambda r: (r[2].cost_s, r[0].num_rows))[0]
    return plan_result(inp, policy, rows, mesh, ctx)


def _ranked(rows: Sequence[MeshRow], count: int) -> list[MeshCandidate]:
    return sorted(
        (
            MeshCandidate(mesh, True, sel.cost_s * count, None, _stationaries(sel))
            if isinstance(sel, Selection)
            else MeshCandidate(mesh, False, None, sel, None)
            for mesh, _, sel, _ in rows
        ),
        key=lambda c: (not c.feasible, c.step_fc_time_s or 0.0, c.mesh.num_rows),
    )


def plan_result(
    inp: PlanInput,
    policy: DataflowPolicy,
    rows: Sequence[MeshRow],
    mesh: MeshShape,
    ctx: SearchContext | None = None,
) -> PlanResult:
    """The FC plan on `mesh` (one of `rows`, feasible), with every row as a
    ranked candidate and the size-rule and 1D comparisons."""
    ctx = ctx or search_context(inp)
    warnings = check_calibration(inp)
    layers = fc_layers(inp.model, inp.training)
    count = layers[0].count_per_step
    candidates = _ranked(rows, count)
    _, ev, sel, _ = next(r for r in rows if r[0] == mesh)
    assert isinstance(sel, Selection), "plan_result needs a feasible mesh"
    layer_plans = _layer_plans(ev, sel)
    transpose_step_s = sum(2.0 * ev.transpose_s(t) for t in sel.transposes) * count
    breakdown = TimeBreakdown.zero()
    for lp in layer_plans:
        breakdown = breakdown + lp.breakdown_per_step
    for t in sel.transposes:
        c = transpose_cost(t.rows, t.cols, ctx.element_bytes, mesh, ev.ctx.comm).scaled(2.0 * count)
        breakdown = breakdown + TimeBreakdown(c.total_s, 0.0, c.launch_s, c.sync_s, c.transfer_s)

    return PlanResult(
        inputs=inp,
        policy=policy,
        mesh=mesh,
        tp_chips=mesh.num_chips,
        layers=layer_plans,
        residual_transposed=sel.residual_state,
        transposes=sel.transposes,
        transpose_s_per_step=transpose_step_s,
        breakdown_per_step=breakdown,
        fc_flops_per_step=sum(layer.training_flops for layer in layers) * count,
        peak_flops_per_s=ctx.cluster.peak_flops_per_s(inp.training.dtype.value),
        candidates=tuple(candidates),
        comparison=_comparison(policy, rows, mesh, sel, count),
        warnings=(*warnings, *fit_range_warnings(inp, mesh, layer_plans)),
        placement=ev.ctx.placement,
        one_d=one_d_comparison(candidates),
    )


def one_d_comparison(candidates: Sequence[MeshCandidate]) -> OneDComparison:
    """The fastest feasible 2D mesh (both sides > 1) against the fastest
    feasible 1D one (`1 x P` or `P x 1`), from the ranked candidates."""
    feasible = [c for c in candidates if c.feasible and c.step_fc_time_s is not None]
    two = [c for c in feasible if min(c.mesh.num_rows, c.mesh.num_cols) > 1]
    one = [c for c in feasible if min(c.mesh.num_rows, c.mesh.num_cols) == 1]
    best2 = min(two, key=lambda c: c.step_fc_time_s, default=None)
    best1 = min(one, key=lambda c: c.step_fc_time_s, default=None)
    note = None
    if best1 is None:
        why = [
            f"{c.mesh}: {c.reason}"
            for c in candidates
            if min(c.mesh.num_rows, c.mesh.num_cols) == 1
        ]
        note = "no feasible 1D mesh" + (f" ({'; '.join(why[:2])})" if why else " was allowed")
    elif best2 is None:
        note = "no feasible 2D mesh"
    return OneDComparison(
        two_d_mesh=best2.mesh if best2 else None,
        two_d_step_fc_time_s=best2.step_fc_time_s if best2 else None,
        one_d_mesh=best1.mesh if best1 else None,
        one_d_step_fc_time_s=best1.step_fc_time_s if best1 else None,
        note=note,
    )


def _comparison(policy, rows, mesh, sel, count) -> DataflowComparison | None:
    """Where the size rule's plan differs from the chosen one."""
    if policy is DataflowPolicy.SIZE_RULE:
        return None
    refs = [(m, r) for m, _, _, r in rows if isinstance(r, Selection)]
    if not refs:
        return DataflowComparison(
            policy, None, None, None, (), "the size rule has no feasible mesh shape"
        )
    best_mesh, best_ref = min(refs, key=lambda x: (x[1].cost_s, x[0].num_rows))
    same = next((r for m, r in refs if m == mesh), None)
    layers = next(ev.layers for m, ev, _, _ in rows if m == mesh)
    differing = ()
    if same is not None:
        differing = tuple(
            layer.name
            for layer, a, b in zip(layers, sel.choices, same.choices, strict=True)
            if a != b
        )
    return DataflowComparison(
        policy=policy,
        mesh=best_mesh,
        step_fc_time_s=best_ref.cost_s * count,
        same_mesh_step_fc_time_s=same.cost_s * count if same is not None else None,
        differing_layers=differing,
        reason=None,
    )
