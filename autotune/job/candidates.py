"""Every configuration the model, the cluster and the user's pins allow, as
columns of arrays, and why the others are refused.

A candidate is (tensor mesh rows x cols, context-parallel chips cp,
pipeline stages pp, data-parallel replicas dp, micro-batch size b, model
chunks per stage v, recomputation, ZeRO stage) with
`rows * cols * cp * pp * dp` equal to the chip count. Rules that
make a configuration impossible (not merely slow), each one reported with
the degree it refuses:

- tensor mesh: `rows * cols` divides the chip count; the cluster's
  `mesh_shapes` list or `min_axis_size`; `constraints.max_tensor_parallel`;
  on nodes, `constraints.tensor_parallel_within_node` keeps the group inside
  a node; megatron-1d and `tensor_mesh: 1d` take only `1 x N`; Megatron 1D
  needs `num_heads` divisible by N (key/value heads divisible, or dividing N
  and replicated). Whether a MeshSlice mesh can shard the block (every GEMM
  even over the mesh; heads and sequences local to the attention core) is
  the FC planner's call, per mesh and micro-batch (job/fc.py);
- context parallelism (cp > 1): divides the chips left by the tensor group,
  never at a micro-batch `cp` divides while data parallelism is searched
  (the same configuration with `cp` times the replicas at `1 / cp` of the
  micro-batch costs no more: `_dominated_by_data_parallelism`),
  a fused attention kernel and `2 cp` dividing the sequence
  (specs/training.context_parallel_rule), `constraints.max_context_parallel`;
  a2a (Ulysses) also needs the query and key/value heads of each tensor
  chip divisible by cp (Megatron-LM and Transformer Engine assert both);
  where the layers run in Transformer Engine (Megatron-LM, or no trainer
  on GPU nodes) a sliding window needs all_gather or a2a and MLA p2p
  (job/trainers.py `context_attention_refusal`);
- expert parallelism (a mixture of experts; 1 for a dense model): `ep`
  divides the routed experts and `etp ep` the `t cp dp` chips of a stage
  (Megatron-Core's parallel folding: the experts regroup the stage's
  chips), `constraints.max_expert_parallel`, and its groups lay out
  (hardware/layout.expert_axes); expert tensor parallelism `etp` (each
  expert's width split) divides the expert FFN width; 1 when left out,
  searched among the divisors of the tensor chips `t` when `auto` (any
  count when pinned);
- pipeline: at most one chunk per layer, `constraints.max_pipeline_stages`;
- data parallelism: divides the global batch;
- micro-batch: divides each replica's sequences, at most
  `constraints.max_micro_batch_size` unless pinned;
- interleaving (v > 1): pipeline stages, `pp v` chunks of at least one layer,
  and the micro-batch count a multiple of `pp` (Megatron-LM's rule);
- ZeRO above 0 only with data (or context) parallelism: it shards over the
  data x context group;
- `overlap_expert_comm` (a mixture of experts): no full recomputation,
  interleaving when pipelined and expert parallelism above 1, as
  Megatron-Core asserts for its overlap;
- the layout: every axis must lay out on the hardware (hardware/layout.py:
  the tensor mesh inside one slice of a torus, the rest on whole torus
  dimensions or across slices).

Constraints narrow what the search picks: a size the file pins (or fixes by
pinning the others: data and pipeline parallelism pinned fix the tensor
group) is kept even beyond them.

Rows are in the canonical order of :func:`canonical_order`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.job.hardware import HardwareView
from autotune.job.model import COLUMNS, Candidates
from autotune.job.trainers import (
    context_attention_refusal,
    expert_tensor_refusal,
    mesh_refusal,
    recompute_refusal,
    runs_transformer_engine,
    zero_refusal,
)
from autotune.specs.cluster import Topology
from autotune.specs.job import RECOMPUTE_MODES, Constraints, JobInput, Trainer
from autotune.specs.training import (
    AttentionKernel,
    ContextComm,
    FcAlgorithm,
    context_parallel_rule,
)
from cost_models import MeshShape
from cost_models.divisors import divisors


@dataclass
class Refusals:
    """Why degrees were refused: (degree, value) -> the first reason seen,
    in the order seen."""

    reasons: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, degree: str, value: object, reason: str) -> None:
        """Record a refusal (the first reason for a value wins)."""
        self.reasons.setdefault((degree, str(value)), reason)

    def lines(self) -> list[tuple[str, str, str]]:
        """(degree, value, reason) in the order recorded."""
        return [(d, v, r) for (d, v), r in self.reasons.items()]


#: why Megatron-Core's expert all-to-all overlap refuses a configuration
#: (megatron/core/transformer/transformer_config.py at d98e8a64)
OVERLAP_REFUSES_FULL = "overlap_expert_comm runs without full recomputation (Megatron-Core)"
OVERLAP_NEEDS_INTERLEAVE = (
    "overlap_expert_comm needs interleaved stages (interleave > 1) when pipelined (Megatron-Core)"
)
OVERLAP_NEEDS_EXPERTS = "overlap_expert_comm needs expert parallelism above 1 (Megatron-Core)"


def _overlapped(inp: JobInput) -> bool:
    """Whether the expert all-to-alls are overlapped (a MoE model only)."""
    return inp.training.overlap_expert_comm and inp.model.moe is not None


def _pinned_ok(pin: object, value: object) -> bool:
    return pin is None or pin == value


def tensor_meshes(inp: JobInput, hw: HardwareView, refusals: Refusals) -> list[MeshShape]:
    """Allowed `rows x cols` tensor meshes (module docstring), ascending by
    chip count then rows."""
    t, lim, model = inp.training, inp.constraints, inp.model
    cluster = hw.cluster
    spec = cluster.spec
    node = cluster.chips_per_node
    megatron = t.fc_algorithm is FcAlgorithm.MEGATRON_1D
    pinned_tp = t.pinned("tensor_parallel")
    pinned_mesh = t.pinned("tensor_mesh")
    pinned_dp, pinned_pp = t.pinned("data_parallel"), t.pinned("pipeline_parallel")
    # data and pipeline parallelism pinned fix the tensor group up to the
    # context degrees that can run
    fixed: set[int] | None = None
    if pinned_tp is None and pinned_mesh is None and pinned_dp and pinned_pp:
        rest = hw.num_chips // (pinned_dp * pinned_pp)
        cps = context_degrees(inp, hw, inp.constraints, Refusals())
        fixed = {rest // cp for cp in cps if rest % cp == 0}
    # constraints narrow what the search picks; a size the file pins is kept
    constrained = pinned_tp is None and pinned_mesh is None and fixed is None
    out = []
    for tp in divisors(hw.num_chips):
        if not _pinned_ok(pinned_tp, tp) or (fixed is not None and tp not in fixed):
            continue
        if pinned_mesh is not None and pinned_mesh[0] * pinned_mesh[1] != tp:
            continue
        if constrained and lim.max_tensor_parallel is not None and tp > lim.max_tensor_parallel:
            refusals.add("tensor_parallel", tp, "above constraints.max_tensor_parallel")
            continue
        if constrained and node is not None and lim.tensor_parallel_within_node and node % tp:
            refusals.add(
                "tensor_parallel",
                tp,
                f"a tensor group of {tp} does not fit in a {node}-chip node "
                "(constraints.tensor_parallel_within_node)",
            )
            continue
        for rows in divisors(tp):
            cols = tp // rows
            shape = f"{rows}x{cols}"
            if pinned_mesh is not None and [rows, cols] != list(pinned_mesh):
                continue
            if (megatron or t.tensor_mesh == "1d") and rows != 1:
                continue
            why = mesh_refusal(lim.trainer, rows, cols)
            if why is not None:
                refusals.add("tensor_mesh", shape, why)
                continue
            if spec.mesh_shapes is not None and [rows, cols] not in spec.mesh_shapes:
                refusals.add("tensor_mesh", shape, "not in the cluster's mesh_shapes")
                continue
            if spec.mesh_shapes is None and min(rows, cols) < spec.min_axis_size:
                refusals.add(
                    "tensor_mesh",
                    shape,
                    f"a side below the cluster's min_axis_size {spec.min_axis_size}",
                )
                continue
            kv = model.kv_heads
            if megatron and (model.num_heads % cols or (kv % cols and cols % kv)):
                refusals.add(
                    "tensor_mesh",
                    shape,
                    f"Megatron 1D tensor parallelism splits the {model.num_heads} heads "
                    f"({model.kv_heads} key/value heads) over {cols} chips",
                )
                continue
            out.append(MeshShape(rows, cols))
    return out


def context_degrees(
    inp: JobInput, hw: HardwareView, lim: Constraints, refusals: Refusals
) -> list[int]:
    """The context-parallel degrees the sequence, the attention kernel, the
    cluster and the pins allow whatever the tensor mesh (module
    docstring). A reason that holds for every degree above 1 (an unfused
    attention core; a cluster given only per-axis link figures, none for a
    context group) is recorded once, as `above 1`."""
    t = inp.training
    pinned = t.pinned("context_parallel")
    spec = hw.cluster.spec
    allowed = [cp for cp in divisors(hw.num_chips) if _pinned_ok(pinned, cp)]
    every = None
    if t.attention is AttentionKernel.UNFUSED:
        every = "context parallelism runs the attention core as a fused kernel (attention: flash)"
    elif hw.cluster.topology is Topology.TORUS and spec.torus is None:
        every = (
            f"cluster {spec.name} gives per-axis link figures only, none for a context-parallel "
            "group"
        )
    elif runs_transformer_engine(lim.trainer, hw.cluster.chips_per_node is not None):
        every = context_attention_refusal(inp.model, t.context_parallel_comm)
    if every is not None and any(cp > 1 for cp in allowed):
        refusals.add("context_parallel", "above 1" if pinned is None else pinned, every)
        return [cp for cp in allowed if cp == 1]
    out = []
    for cp in allowed:
        rule = None if cp == 1 else context_parallel_rule(t, cp)
        why = None if rule is None else rule[0]
        limited = pinned is None and lim.max_context_parallel is not None
        if why is None and limited and cp > lim.max_context_parallel:
            why = "above constraints.max_context_parallel"
        if why is not None:
            refusals.add("context_parallel", cp, why)
            continue
        out.append(cp)
    return out


def context_refusal(inp: JobInput, tp: int, cp: int) -> str | None:
    """Why `cp` context-parallel chips next to a tensor group of `tp` cannot
    run the model's heads (module docstring), or None."""
    t, model = inp.training, inp.model
    if cp == 1:
        return None
    if t.context_parallel_comm is ContextComm.A2A:
        megatron = t.fc_algorithm is FcAlgorithm.MEGATRON_1D
        kv = max(model.kv_heads // tp, 1) if megatron else model.kv_heads / tp
        if model.num_heads % (tp * cp) or kv % cp:
            return (
                f"Ulysses (a2a) context parallelism {cp} splits each tensor chip's heads "
                f"({model.num_heads} query, {model.kv_heads} key/value over {tp}) {cp} ways"
            )
    return None


def enumerate_candidates(
    inp: JobInput, hw: HardwareView, refusals: Refusals, lim: Constraints | None = None
) -> Candidates:
    """Every allowed configuration (module docstring), canonical order."""
    t = inp.training
    lim = lim or inp.constraints
    chips = hw.num_chips
    pinned_rc = t.pinned("recompute")
    modes = [RECOMPUTE_MODES.index(pinned_rc)] if pinned_rc else list(range(3))
    if _overlapped(inp) and RECOMPUTE_MODES.index("full") in modes:
        modes.remove(RECOMPUTE_MODES.index("full"))
        refusals.add("recompute", "full", OVERLAP_REFUSES_FULL)
    for mode in list(modes):
        why = recompute_refusal(lim.trainer, RECOMPUTE_MODES[mode])
        if why is not None:
            modes.remove(mode)
            refusals.add("recompute", RECOMPUTE_MODES[mode], why)
    degrees = ("data_parallel", "pipeline_parallel", "tensor_parallel", "context_parallel")
    for degree in degrees:
        value = t.pinned(degree)
        if value is not None and chips % value:
            refusals.add(degree, value, f"does not divide the cluster's {chips} chips")
    values = [t.pinned(d) for d in degrees]
    if (
        all(v is not None for v in values)
        and values[0] * values[1] * values[2] * values[3] != chips
    ):
        dp, pp, tp, cp = values
        refusals.add(
            "data_parallel",
            dp,
            f"data x pipeline x tensor x context parallelism {dp} x {pp} x {tp} x {cp} = "
            f"{dp * pp * tp * cp} chips, not the cluster's {chips}",
        )
    rows_out: list[tuple[int, ...]] = []
    meshes = tensor_meshes(inp, hw, refusals)
    cps = context_degrees(inp, hw, lim, refusals)
    for mesh in meshes:
        tp = mesh.num_chips
        for cp in cps:
            if (chips // tp) % cp:
                continue
            why = context_refusal(inp, tp, cp)
            if why is None and cp > 1:
                # the context group sits next to the tensor mesh: whether
                # it lays out does not depend on the outer axes
                probe = hw.layout(mesh, 1, 1, cp)
                why = probe if isinstance(probe, str) else None
            if why is not None:
                refusals.add("context_parallel", cp, why)
                continue
            rows_out += _outer_rows(inp, hw, refusals, lim, mesh, cp, modes)
    if not rows_out:
        empty = np.zeros(0, dtype=np.int64)
        return Candidates(*(empty for _ in COLUMNS))
    arrays = np.asarray(rows_out, dtype=np.int64)
    c = Candidates(*(arrays[:, i] for i in range(len(COLUMNS))))
    return c.take(canonical_order(c))


def _outer_rows(
    inp: JobInput,
    hw: HardwareView,
    refusals: Refusals,
    lim: Constraints,
    mesh: MeshShape,
    cp: int,
    modes: list[int],
) -> list[tuple[int, ...]]:
    """The candidates of one tensor mesh and context degree: every pipeline
    depth, data-parallel width, micro-batch, interleaving, recomputation and
    ZeRO stage the rules allow (module docstring)."""
    t, model = inp.training, inp.model
    batch, layers = t.global_batch_sequences, model.num_layers
    chips = hw.num_chips
    pinned_zero = t.pinned("zero_stage")
    pinned_pp, pinned_dp = t.pinned("pipeline_parallel"), t.pinned("data_parallel")
    pinned_mbs, pinned_v = t.pinned("micro_batch_size"), t.pinned("interleave")
    tp = mesh.num_chips
    rows_out: list[tuple[int, ...]] = []
    for pp in divisors(chips // (tp * cp)):
        if not _pinned_ok(pinned_pp, pp):
            continue
        if pp > layers:
            refusals.add("pipeline_parallel", pp, f"more stages than the {layers} layers")
            continue
        limited = pinned_pp is None and lim.max_pipeline_stages is not None
        if limited and pp > lim.max_pipeline_stages:
            refusals.add("pipeline_parallel", pp, "above constraints.max_pipeline_stages")
            continue
        dp = chips // (tp * cp * pp)
        if not _pinned_ok(pinned_dp, dp):
            continue
        if batch % dp:
            refusals.add(
                "data_parallel", dp, f"does not divide the global batch of {batch} sequences"
            )
            continue
        layout = hw.layout(mesh, dp, pp, cp)
        if isinstance(layout, str):
            context = f" x cp {cp}" if cp > 1 else ""
            refusals.add("layout", f"{mesh}{context} x dp {dp} x pp {pp}", layout)
            continue
        eps = expert_degrees(inp, hw, lim, refusals, mesh, dp, pp, cp)
        if not eps:
            continue
        per_replica = batch // dp
        sizes = _micro_batch_sizes(per_replica, pinned_mbs, t.micro_batches, lim, refusals)
        for mbs in sizes:
            if cp > 1 and _dominated_by_data_parallelism(inp, hw, mesh, cp, mbs):
                continue
            m = per_replica // mbs
            vs = list(range(1, lim.max_interleave + 1)) if pp > 1 else [1]
            if pinned_v is not None:
                vs = [pinned_v] if pp > 1 or pinned_v == 1 else []
                if not vs:
                    refusals.add("interleave", pinned_v, "needs pipeline stages")
            for v in vs:
                if v == 1 and pp > 1 and _overlapped(inp):
                    refusals.add("interleave", v, OVERLAP_NEEDS_INTERLEAVE)
                    continue
                if pp * v > layers and t.pipeline_layout is None:
                    # (a pinned layout may hold chunks of the ends alone)
                    refusals.add("interleave", v, f"{pp} x {v} chunks exceed the {layers} layers")
                    continue
                if v > 1 and m % pp:
                    refusals.add(
                        "interleave",
                        v,
                        f"interleaving needs the micro-batches ({m}) to be a multiple of "
                        f"the {pp} stages",
                    )
                    continue
                zeros = _zero_stages(dp * cp, pinned_zero, lim, refusals)
                for z in list(zeros):
                    why = zero_refusal(lim.trainer, z, dp, pp, cp)
                    if why is not None:
                        refusals.add("zero_stage", z, why)
                        zeros.remove(z)
                for ep, etp in eps:
                    for rc in modes:
                        for z in zeros:
                            rows_out.append(
                                (mesh.num_rows, mesh.num_cols, pp, dp, mbs, v, rc, z, cp, ep, etp)
                            )
    return rows_out


def expert_degrees(
    inp: JobInput,
    hw: HardwareView,
    lim: Constraints,
    refusals: Refusals,
    mesh: MeshShape,
    dp: int,
    pp: int,
    cp: int,
) -> list[tuple[int, int]]:
    """The (expert-parallel, expert-tensor) degrees of one configuration
    (module docstring): [(1, 1)] for a dense model."""
    moe = inp.model.moe
    pinned = inp.training.pinned("expert_parallel")
    pinned_etp = inp.training.pinned("expert_tensor_parallel")
    if moe is None:
        if pinned not in (None, 1):
            refusals.add("expert_parallel", pinned, "the model has no routed experts")
            return []
        if pinned_etp not in (None, 1):
            refusals.add("expert_tensor_parallel", pinned_etp, "the model has no routed experts")
            return []
        return [(1, 1)]
    stage = mesh.num_chips * cp * dp
    # each expert whole on its rank unless pinned; `auto` searches splits
    # over chips of the attention's tensor group
    etps = [pinned_etp] if pinned_etp is not None else [1]
    if inp.training.expert_tensor_parallel == "auto":
        etps = divisors(mesh.num_chips)
    if lim.trainer is Trainer.MAXTEXT and pinned_etp is None:
        etps = [mesh.num_chips]  # MaxText splits every expert as its dense layers
    out = []
    for etp in etps:
        why_not = expert_tensor_refusal(lim.trainer, etp, mesh.num_chips)
        if why_not is not None:
            refusals.add("expert_tensor_parallel", etp, why_not)
            continue
        if moe.expert_ffn_size % etp:
            refusals.add(
                "expert_tensor_parallel",
                etp,
                f"does not divide the expert FFN width {moe.expert_ffn_size}",
            )
            continue
        if stage % etp:
            refusals.add(
                "expert_tensor_parallel",
                etp,
                f"does not divide a stage's {stage} chips (tensor x context x data)",
            )
            continue
        for ep in divisors(stage // etp):
            if not _pinned_ok(pinned, ep):
                continue
            why = None
            if ep == 1 and _overlapped(inp):
                why = OVERLAP_NEEDS_EXPERTS
            elif moe.num_experts % ep:
                why = f"does not divide the {moe.num_experts} routed experts"
            elif (
                pinned is None
                and lim.max_expert_parallel is not None
                and ep > lim.max_expert_parallel
            ):
                why = "above constraints.max_expert_parallel"
            else:
                axes = hw.expert_axes(mesh, dp, pp, cp, ep, etp)
                why = axes if isinstance(axes, str) else None
            if why is not None:
                refusals.add("expert_parallel", ep, why)
                continue
            out.append((ep, etp))
    if pinned is not None and stage % pinned:
        refusals.add(
            "expert_parallel",
            pinned,
            f"does not divide a stage's {stage} chips (tensor x context x data)",
        )
    return out


def _dominated_by_data_parallelism(
    inp: JobInput, hw: HardwareView, mesh: MeshShape, cp: int, mbs: int
) -> bool:
    """Whether `cp` context chips at micro-batch `mbs` cost at least what
    `cp` times the data-parallel replicas at micro-batch `mbs / cp` cost
    (and so never win): when `cp` divides `mbs` the two run the same
    tokens per chip and micro-batch, the same micro-batch count, the same
    FC GEMMs, attention FLOPs, memory and ZeRO group on the same chips,
    and context parallelism adds its key/value exchange and runs the
    attention kernel on shorter blocks (job/block.py). Only when data
    parallelism and the micro-batch are searched, on nodes, and, under
    MeshSlice, when its attention check (plan/search.py
    MeshEvaluator.attention_check: sequences divisible by a mesh axis)
    answers alike for both micro-batches, so both get the same FC plan
    (tests/test_context_parallel.py prices both sides)."""
    if mbs % cp or inp.training.pinned("data_parallel") is not None:
        return False
    # on a torus the context group is placed before the pipeline stages and
    # the data axis after them: moving its chips to the data axis moves the
    # pipeline too, so the two are not the same chips there
    if hw.cluster.topology is Topology.TORUS:
        return False
    if inp.training.pinned("micro_batch_size") is not None or inp.training.micro_batches:
        return False
    if inp.training.fc_algorithm is FcAlgorithm.MEGATRON_1D:
        return True
    # MeshSlice's attention check (plan/search.py) reads the sequences per
    # micro-batch on each mesh axis: the two plans are the same only when
    # it reads both sizes alike
    smaller = mbs // cp
    return all(
        (mbs % axis == 0) == (smaller % axis == 0) for axis in (mesh.num_rows, mesh.num_cols)
    )


def _micro_batch_sizes(
    per_replica: int,
    pinned: int | None,
    micro_batches: int | None,
    lim: Constraints,
    refusals: Refusals,
) -> list[int]:
    if micro_batches is not None:
        if per_replica % micro_batches:
            refusals.add(
                "micro_batches",
                micro_batches,
                f"does not divide the {per_replica} sequences of a replica",
            )
            return []
        return [per_replica // micro_batches]
    if pinned is not None:
        if per_replica % pinned:
            refusals.add(
                "micro_batch_size",
                pinned,
                f"does not divide the {per_replica} sequences of a replica",
            )
            return []
        return [pinned]
    return [b for b in divisors(per_replica) if b <= lim.max_micro_batch_size]


def _zero_stages(dp: int, pinned: int | None, lim: Constraints, refusals: Refusals) -> list[int]:
    if dp == 1:
        if pinned not in (None, 0):
            refusals.add("zero_stage", pinned, "shards over data-parallel replicas; dp is 1")
            return []
        return [0]
    if pinned is not None:
        return [pinned]
    return sorted(set(lim.zero_stages))


def canonical_order(c: Candidates) -> np.ndarray:
    """The tie-break order: fewer tensor chips, then fewer context chips,
    fewer pipeline stages,
    fewer rows, smaller ZeRO stage, less recomputation, less interleaving,
    larger micro-batch, fewer expert-parallel chips, fewer expert-tensor
    chips. Among equal step
    times the earliest row wins, so the plan prefers the simplest configuration and never depends on
    enumeration or solver timing."""
    keys = (c.etp, c.ep, -c.mbs, c.v, c.recompute, c.zero, c.rows, c.pp, c.cp, c.tp)
    return np.lexsort(keys)


TIE_BREAK_RULE = (
    "equal step times (within a relative 1e-9) go to fewer tensor chips, then fewer context "
    "chips, fewer pipeline stages, fewer mesh rows, lower ZeRO stage, less recomputation, less "
    "interleaving, larger micro-batch, fewer expert-parallel chips, fewer expert-tensor chips"
)
