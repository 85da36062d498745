"""`meshtune compare`: MeshSlice against the algorithms users run today, over
a sweep of chip counts (seed 000 section 5.1, figures 9, 10 and 12; Table 2).

For every chip count the planner runs twice (the cost policy: MeshSlice's
plan; always-w: what phase 1 buys). The 2D baselines (Collective, SUMMA,
Cannon, Wang et al.) run the SAME per-layer dataflows as MeshSlice's plan,
each on its own best mesh shape among the cluster's allowed shapes (the
algorithms differ in how they run a dataflow, not in which). 1D TP runs
Megatron's fixed column/row-parallel split on a ring of all chips, FSDP its
weight-gathering schedule on the same ring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from autotune.errors import InputError, NoFeasiblePlanError
from autotune.hardware.cluster import Cluster
from autotune.plan.dataflow import Stationary, output_state, table1
from autotune.plan.layers import ATTN_OUT, FFN_DOWN, QKV, FCLayer, fc_layers
from autotune.plan.results import PlanResult
from autotune.plan.search import MeshEvaluator, SearchContext, mesh_shapes, plan, search_context
from autotune.specs.cluster import Topology
from autotune.specs.plan_input import DataflowPolicy, PlanInput
from cost_models import Axis, CommModel, MeshShape, TimeBreakdown, transpose_cost
from cost_models.baselines.cannon import cannon_gemm
from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.common import InfeasibleError
from cost_models.baselines.fsdp import fsdp_gemm
from cost_models.baselines.one_d import one_d_tp_gemm
from cost_models.baselines.summa import summa_gemm, summa_packet_counts
from cost_models.baselines.wang import wang_gemm

DEFAULT_CHIP_COUNTS = (16, 32, 64, 128, 256)

# The paper's published figures at 256 TPU v4 chips (seed 000 section 5).
PAPER_MESHSLICE_OVER_WANG = {"gpt3-175b": 0.138, "megatron-nlg-530b": 0.260}
PAPER_PHASE1_GAIN = {"gpt3-175b": 0.212, "megatron-nlg-530b": 0.051}


class Algorithm(str, Enum):
    """The algorithms `meshtune compare` prices."""

    MESHSLICE = "meshslice"
    COLLECTIVE = "collective"
    WANG = "wang"
    SUMMA = "summa"
    CANNON = "cannon"
    ONE_D_TP = "1d-tp"
    FSDP = "fsdp"


TWO_D_BASELINES = (Algorithm.COLLECTIVE, Algorithm.WANG, Algorithm.SUMMA, Algorithm.CANNON)


@dataclass(frozen=True)
class AlgorithmResult:
    """One algorithm at one chip count, on its best mesh shape."""

    algorithm: Algorithm
    feasible: bool
    reason: str | None
    mesh: MeshShape | None
    step_fc_time_s: float | None
    breakdown: TimeBreakdown | None
    flop_utilization: float | None
    meshslice_gain: float | None  # this time / MeshSlice's time - 1
    settings: str | None  # slice counts (MeshSlice), packet counts (SUMMA)
    num_meshes_tried: int


@dataclass(frozen=True)
class Phase1Gain:
    """MeshSlice with the chosen dataflows against every layer W-stationary
    (the paper's named default; Table 2) and every layer Y-stationary (what
    a framework's default 2D sharding runs; its gains are the closer match to
    the paper's Table 2 numbers)."""

    always_w_mesh: MeshShape | None
    always_w_step_fc_time_s: float | None
    chosen_step_fc_time_s: float
    gain: float | None  # always-w time / chosen time - 1
    reason: str | None
    always_y_mesh: MeshShape | None = None
    always_y_step_fc_time_s: float | None = None
    gain_over_always_y: float | None = None  # always-y time / chosen time - 1


@dataclass(frozen=True)
class ComparePoint:
    """Every algorithm at one chip count."""

    num_chips: int
    batch_sequences: int
    tokens: int
    fc_flops_per_step: float
    stationaries: str
    algorithms: tuple[AlgorithmResult, ...]
    phase1: Phase1Gain

    def result(self, algorithm: Algorithm) -> AlgorithmResult:
        """The entry of `algorithm`."""
        return next(a for a in self.algorithms if a.algorithm is algorithm)


@dataclass(frozen=True)
class CompareResult:
    """The whole sweep."""

    model_name: str
    cluster_name: str
    calibration_name: str
    scaling: str  # "weak" (batch = chips / 2) or "strong" (fixed batch)
    sequence_length: int
    peak_flops_per_s: float | None
    points: tuple[ComparePoint, ...]


def point_input(inp: PlanInput, num_chips: int, batch_sequences: int) -> PlanInput:
    """`inp` on `num_chips` chips, all of them one tensor-parallel group
    (no data or pipeline parallelism, one micro-batch, as in the paper's
    evaluation), training `batch_sequences` sequences per step."""
    cluster = inp.cluster
    if num_chips != cluster.num_chips:
        cluster = cluster.model_copy(update={"num_chips": num_chips, "mesh_shapes": None})
    training = inp.training.model_copy(
        update={
            "global_batch_sequences": batch_sequences,
            "data_parallel": 1,
            "pipeline_parallel": 1,
            "micro_batches": 1,
        }
    )
    return inp.model_copy(update={"cluster": cluster, "training": training})


GemmFn = Callable[..., object]


def _two_d_fn(algorithm: Algorithm, ctx: SearchContext) -> Callable:
    """(dataflow, m, n, k, mesh, transposed) -> GemmEstimate for a 2D baseline."""
    e, comm, comp, slow = ctx.element_bytes, ctx.comm, ctx.compute, ctx.overlap_slowdown
    if algorithm is Algorithm.COLLECTIVE:
        return lambda df, m, n, k, mesh, t: collective_gemm(df, m, n, k, mesh, e, comm, comp, t)
    if algorithm is Algorithm.WANG:
        return lambda df, m, n, k, mesh, t: wang_gemm(
            df, m, n, k, mesh, e, comm, comp, t, overlap_slowdown=slow
        )
    if algorithm is Algorithm.SUMMA:
        return lambda df, m, n, k, mesh, t: summa_gemm(
            df, m, n, k, mesh, e, comm, comp, t, overlap_slowdown=slow
        )
    return lambda df, m, n, k, mesh, t: cannon_gemm(
        df, m, n, k, mesh, e, comm, comp, t, overlap_slowdown=slow
    )


def _layers_time(
    fn: Callable,
    layers: Sequence[FCLayer],
    choices: Sequence[tuple[Stationary, bool]],
    mesh: MeshShape,
) -> TimeBreakdown:
    """One block instance of every layer (3 GEMMs each) on `mesh`."""
    total = TimeBreakdown.zero()
    for layer, (st, transposed) in zip(layers, choices, strict=True):
        for shape in table1(layer, st, transposed):
            est = fn(shape.dataflow, shape.m, shape.n, shape.k, mesh, shape.transposed)
            total = total + est.breakdown
    return total


def _utilization(flops: float, time_s: float, chips: int, peak: float | None) -> float | None:
    return None if not peak or time_s <= 0 else flops / (time_s * chips * peak)


def _summa_settings(inp, ctx, layers, choices, mesh) -> str:
    """SUMMA's best packet counts per layer, `row/col` per GEMM."""
    parts = []
    for layer, (st, transposed) in zip(layers, choices, strict=True):
        per_gemm = []
        for shape in table1(layer, st, transposed):
            d = summa_packet_counts(
                shape.dataflow,
                shape.m,
                shape.n,
                shape.k,
                mesh,
                ctx.element_bytes,
                ctx.comm,
                shape.transposed,
            )
            per_gemm.append("/".join(f"{ax.value[0]}{v}" for ax, v in sorted(d.items())) or "-")
        parts.append(f"{layer.name} D={','.join(per_gemm)}")
    return "; ".join(parts)


def _two_d_baseline(
    algorithm: Algorithm,
    inp: PlanInput,
    ms: PlanResult,
    ctx: SearchContext,
    layers: Sequence[FCLayer],
    flops: float,
    peak: float | None,
) -> AlgorithmResult:
    """A 2D baseline with MeshSlice's dataflows on its best allowed mesh."""
    choices = [(lp.stationary, lp.transposed) for lp in ms.layers]
    qkv = next(lp for lp in ms.layers if lp.layer.name == QKV)
    attention_state = output_state(qkv.stationary, qkv.transposed)
    count = layers[0].count_per_step
    best: tuple[float, MeshShape, TimeBreakdown] | None = None
    reasons: list[str] = []
    meshes = mesh_shapes(inp.cluster, ms.tp_chips, inp.source_file)
    for mesh in meshes:
        mesh_ctx = ctx.for_mesh(mesh)
        fn = _two_d_fn(algorithm, mesh_ctx)
        why = MeshEvaluator(inp, layers, mesh, mesh_ctx).attention_check(attention_state)
        if why is not None:
            reasons.append(f"{mesh}: {why}")
            continue
        try:
            block = _layers_time(fn, layers, choices, mesh)
        except InfeasibleError as exc:
            reasons.append(f"{mesh}: {exc.reason}")
            continue
        for t in ms.transposes:
            c = transpose_cost(t.rows, t.cols, ctx.element_bytes, mesh, mesh_ctx.comm).scaled(2.0)
            block = block + TimeBreakdown(c.total_s, 0.0, c.launch_s, c.sync_s, c.transfer_s)
        step = block.scaled(count)
        if best is None or step.total_s < best[0]:
            best = (step.total_s, mesh, step)
    if best is None:
        return AlgorithmResult(
            algorithm,
            False,
            "; ".join(reasons[:3]),
            None,
            None,
            None,
            None,
            None,
            None,
            len(meshes),
        )
    time_s, mesh, step = best
    settings = (
        _summa_settings(inp, ctx.for_mesh(mesh), layers, choices, mesh)
        if algorithm is Algorithm.SUMMA
        else None
    )
    return AlgorithmResult(
        algorithm,
        True,
        None,
        mesh,
        time_s,
        step,
        _utilization(flops, time_s, ms.tp_chips, peak),
        time_s / ms.step_fc_time_s - 1.0,
        settings,
        len(meshes),
    )


def _one_d_comm(ctx: SearchContext, mesh: MeshShape) -> CommModel:
    """Links of a ring through every tensor-parallel chip. On a torus
    calibrated per mesh axis: the calibration as is (the 1D formulas take
    one axis's worth of its links). On a cluster with a known topology: the
    resource the `1 x P` (or `P x 1`) mesh's long axis is placed on, for
    both axes, so 1D is priced by the same placement as 2D."""
    if ctx.cluster.topology is Topology.TORUS and ctx.cluster.spec.torus is None:
        return ctx.comm
    placed = ctx.for_mesh(mesh).comm
    axis = Axis.COL if mesh.num_rows == 1 else Axis.ROW
    params = {(op, ax): link for (op, a), link in placed.params.items() if a is axis for ax in Axis}
    return CommModel(params)


def megatron_stationary(layer: FCLayer) -> Stationary:
    """Megatron's split (seed 001): layers that read the block's input are
    column-parallel (W split by output features: Table 1's Y-stationary
    row), attention output and FFN down are row-parallel (W split by input
    features: X-stationary), so one all-gather / reduce-scatter pair
    replaces seed 001's f/g all-reduces."""
    return Stationary.X if layer.name in (ATTN_OUT, FFN_DOWN) else Stationary.Y


def _one_d_baseline(
    algorithm: Algorithm,
    ms: PlanResult,
    ctx: SearchContext,
    layers: Sequence[FCLayer],
    flops: float,
    peak: float | None,
) -> AlgorithmResult:
    """1D TP (Megatron) or FSDP on a ring of all tensor-parallel chips."""
    chips = ms.tp_chips
    e, comp = ctx.element_bytes, ctx.compute
    mesh = MeshShape(1, chips) if algorithm is Algorithm.ONE_D_TP else MeshShape(chips, 1)
    comm = _one_d_comm(ctx, mesh)
    if algorithm is Algorithm.ONE_D_TP:
        choices = [(megatron_stationary(layer), False) for layer in layers]

        def fn(df, m, n, k, _mesh, t):
            return one_d_tp_gemm(df, m, n, k, chips, e, comm, comp, t)
    else:
        choices = [(Stationary.Y, False) for _ in layers]

        def fn(df, m, n, k, _mesh, t):
            return fsdp_gemm(df, m, n, k, chips, e, comm, comp, t, ctx.overlap_slowdown)

    try:
        step = _layers_time(fn, layers, choices, mesh).scaled(layers[0].count_per_step)
    except InfeasibleError as exc:
        return AlgorithmResult(algorithm, False, exc.reason, None, None, None, None, None, None, 1)
    return AlgorithmResult(
        algorithm,
        True,
        None,
        mesh,
        step.total_s,
        step,
        _utilization(flops, step.total_s, chips, peak),
        step.total_s / ms.step_fc_time_s - 1.0,
        None,
        1,
    )


def _meshslice_result(ms: PlanResult) -> AlgorithmResult:
    settings = "; ".join(
        f"{lp.layer.name} S={','.join(str(g.num_slices) for g in lp.gemms)}" for lp in ms.layers
    )
    return AlgorithmResult(
        Algorithm.MESHSLICE,
        True,
        None,
        ms.mesh,
        ms.step_fc_time_s,
        ms.breakdown_per_step,
        ms.flop_utilization,
        0.0,
        settings,
        len(ms.candidates),
    )


def _phase1(inp: PlanInput, ms: PlanResult) -> Phase1Gain:
    try:
        y = plan(inp, DataflowPolicy.ALWAYS_Y)
        y_fields = {
            "always_y_mesh": y.mesh,
            "always_y_step_fc_time_s": y.step_fc_time_s,
            "gain_over_always_y": y.step_fc_time_s / ms.step_fc_time_s - 1.0,
        }
    except NoFeasiblePlanError:
        y_fields = {}
    try:
        w = plan(inp, DataflowPolicy.ALWAYS_W)
    except NoFeasiblePlanError as exc:
        return Phase1Gain(None, None, ms.step_fc_time_s, None, str(exc), **y_fields)
    return Phase1Gain(
        w.mesh,
        w.step_fc_time_s,
        ms.step_fc_time_s,
        w.step_fc_time_s / ms.step_fc_time_s - 1.0,
        None,
        **y_fields,
    )


def compare_point(inp: PlanInput, num_chips: int, batch_sequences: int) -> ComparePoint:
    """Every algorithm for `inp` on `num_chips` chips and `batch_sequences`
    sequences per step; raises NoFeasiblePlanError when MeshSlice itself has
    no feasible plan (nothing to compare against)."""
    pinp = point_input(inp, num_chips, batch_sequences)
    ms = plan(pinp, DataflowPolicy.COST)
    ctx = search_context(pinp)
    layers = fc_layers(pinp.model, pinp.training)
    flops = ms.fc_flops_per_step
    peak = ms.peak_flops_per_s
    results = [_meshslice_result(ms)]
    for algorithm in TWO_D_BASELINES:
        results.append(_two_d_baseline(algorithm, pinp, ms, ctx, layers, flops, peak))
    for algorithm in (Algorithm.ONE_D_TP, Algorithm.FSDP):
        results.append(_one_d_baseline(algorithm, ms, ctx, layers, flops, peak))
    stationaries = " ".join(
        lp.stationary.value + ("ᵀ" if lp.transposed else "") for lp in ms.layers
    )
    return ComparePoint(
        num_chips=num_chips,
        batch_sequences=batch_sequences,
        tokens=pinp.training.tokens_per_micro_batch,
        fc_flops_per_step=flops,
        stationaries=stationaries,
        algorithms=tuple(results),
        phase1=_phase1(pinp, ms),
    )


def compare(
    inp: PlanInput,
    chip_counts: Sequence[int] = DEFAULT_CHIP_COUNTS,
    batch_sequences: int | None = None,
) -> CompareResult:
    """The sweep: weak scaling (batch = chips / 2 sequences, seed 000 section
    5.1) unless `batch_sequences` fixes the batch (strong scaling)."""
    points = []
    for chips in chip_counts:
        if chips < 1:
            raise InputError(
                "must be positive",
                field="--chips",
                value=chips,
                fix="give chip counts such as 16,32,64,128,256",
            )
        if batch_sequences is None:
            if chips % 2:
                raise InputError(
                    "is odd, so weak scaling's batch = chips / 2 is not whole",
                    field="--chips",
                    value=chips,
                    fix="use even chip counts or pass --batch",
                )
            batch = chips // 2
        else:
            batch = batch_sequences
        points.append(compare_point(inp, chips, batch))
    return CompareResult(
        model_name=inp.model.name,
        cluster_name=inp.cluster.name,
        calibration_name=inp.calibration.name,
        scaling="weak" if batch_sequences is None else "strong",
        sequence_length=inp.training.sequence_length,
        peak_flops_per_s=Cluster(inp.cluster, inp.chip).peak_flops_per_s(inp.training.dtype.value),
        points=tuple(points),
    )
