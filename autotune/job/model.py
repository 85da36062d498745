"""The whole training step of many configurations at once: one cost model,
evaluated on arrays (architecture.md "pricing: one cost model, vectorised
over candidates").

A candidate is a tensor mesh (rows x cols), context-parallel chips `cp`,
pipeline stages `pp`, data-parallel replicas `dp`, micro-batch size `b`,
model chunks per stage `v`, a recomputation mode and a ZeRO stage. Its
step, per chip:

- per block and micro-batch: job/block.py (FC layers from job/fc.py,
  attention core, memory-bound ops, the context-parallel key/value exchange
  the attention does not hide, recomputation, activations kept), at
  `b s / cp` tokens per chip; a mixture of experts' MoE blocks add their
  routed part (job/experts.py: router, all-to-alls over the expert axis,
  grouped GEMMs, permutation) and its dense blocks their wider FFN, counted
  per chunk from where the MoE blocks fall (`kind_counts`), and
  multi-token-prediction modules run as MoE blocks of the last chunk (with
  `overlap_expert_comm`, a MoE block's all-to-alls hidden behind another
  micro-batch's computation where the schedule merges their passes:
  `expert_overlap`); and
  the ends (embedding on the first chunk; final norm, logits and loss on the
  last), looked up per (mesh, micro-batch) key;
- pipeline: the layers cut into `pp v` chunks (the even split, Megatron-LM's:
  extra layers on the last chunks; or a balanced assignment from the
  pipeline balancer), each chunk's forward `F_c` and backward `B_c` per
  micro-batch (its blocks, its recomputation, the ends, and one send-recv of
  the `T h / t` activation to the next stage in each pass), and the 1F1B or
  interleaved schedule replayed as the longest path of its dependency graph
  (pipeline/search.py `makespans_s`, the simulator's rules; one stage is
  `m (F + B)`);
- memory per stage: weights (with an FP8 recipe's weight copies),
  gradients and Adam state of its parameters by ZeRO stage over the data x
  context group `dp cp` (cost_models.data_parallel; routed-expert weights
  over their expert-data group `t cp dp / (ep etp)`), the activations of the
  micro-batches the schedule keeps alive (pipeline/schedule.py
  `peak_alive_vectors`), the FC layers' gathered buffers, ZeRO-3's gathered
  block, a full-recomputation stage's one recomputed block, the key/value
  blocks of the context exchange, the last stage's logits, the workspace and
  the allocator reserve;
- data parallelism per stage: ZeRO 0 all-reduces the gradients, ZeRO 1-2
  reduce-scatter them and all-gather the weights, ZeRO 3 gathers the weights
  before every micro-batch's forward and backward and reduce-scatters its
  gradients (cost_models.data_parallel), each over the data x context
  (gradient) axis's levels
  (HardwareView.hierarchical_ring_s); with overlap, hidden behind the stage's
  backward (ZeRO 1-2: the gathers behind the next forward; ZeRO 3: behind
  all its micro-batches) except the last 25 MB bucket
  (cost_models.data_parallel.exposed_overlap_s);
- optimizer per stage: Adam over the locally owned parameters, HBM bound,
  and an FP8 recipe's weight copies refreshed from the updated weights;
- the step: the replayed makespan plus the exposed data-parallel traffic and
  optimizer step of the stage where they are largest.

Every part of the step is reported for that stage (PARTS); they add up to
the step exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autotune.hardware.layout import AxisLayout, Layout, ParallelAxis
from autotune.job.block import BlockFigures, EndFigures
from autotune.job.experts import ExpertFigures
from autotune.job.hardware import HardwareView
from autotune.pipeline.schedule import peak_alive_vectors
from autotune.pipeline.search import makespans_s, schedule_graph
from autotune.specs.job import RECOMPUTE_MODES, TrainingInput
from autotune.specs.pipeline_layout import layout_blocks, mtp_stage
from autotune.specs.training import FcAlgorithm, Fp8Recipe
from cost_models.data_parallel import OPTIMIZER_BYTES_PER_PARAM
from cost_models.elementwise import adam_step_bytes_per_param
from cost_models.fp8 import fp8_weight_copy_bytes_per_param
from cost_models.moe import merged_layer_pair_s

BUCKET_BYTES = 25 * 2**20
"""Gradient bucket size: PyTorch DDP's default `bucket_cap_mb=25`
(torch.nn.parallel.DistributedDataParallel documentation); the last bucket
cannot overlap the backward pass."""

#: the parts of a step, in report order, with their labels
PARTS: dict[str, str] = {
    "fc_compute_s": "FC compute",
    "tp_comm_s": "FC exposed communication",
    "attention_s": "attention core",
    "expert_s": "routed experts (MoE)",
    "ep_comm_s": "expert all-to-all",
    "cp_comm_s": "context-parallel exposed",
    "elementwise_s": "memory-bound ops",
    "recompute_s": "recomputation",
    "ends_s": "embedding, output layer, loss",
    "pp_comm_s": "pipeline send/recv",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "data-parallel exposed",
    "optimizer_s": "optimizer step",
}

COLUMNS = ("rows", "cols", "pp", "dp", "mbs", "v", "recompute", "zero", "cp", "ep", "etp")


@dataclass(frozen=True)
class Candidates:
    """One row per configuration; `recompute` indexes RECOMPUTE_MODES."""

    rows: np.ndarray
    cols: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    mbs: np.ndarray
    v: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray
    cp: np.ndarray  # context-parallel chips per sequence
    ep: np.ndarray  # expert-parallel chips (MoE models; 1 otherwise)
    etp: np.ndarray  # expert-tensor chips splitting each expert (MoE models; 1 otherwise)

    def __len__(self) -> int:
        return int(self.rows.size)

    @property
    def tp(self) -> np.ndarray:
        """Tensor-parallel chips `rows * cols`."""
        return self.rows * self.cols

    @property
    def replicas(self) -> np.ndarray:
        """Chips holding the same weights: the data x context group `dp cp`
        (gradients are reduced and ZeRO shards over it)."""
        return self.dp * self.cp

    @property
    def expert_replicas(self) -> np.ndarray:
        """Chips holding the same routed-expert shard: the expert-data group
        `t cp dp / (ep etp)` (expert gradients are reduced and ZeRO shards
        over it; cost_models.moe.expert_data_parallel)."""
        return (self.tp * self.cp * self.dp).astype(float) / (self.ep * self.etp)

    def take(self, index: np.ndarray) -> Candidates:
        """The rows at `index` (a boolean mask or integer positions)."""
        return Candidates(*(getattr(self, c)[index] for c in COLUMNS))

    def row(self, i: int) -> dict[str, int | str]:
        """One candidate as plain values (`recompute` by name)."""
        out: dict[str, int | str] = {c: int(getattr(self, c)[i]) for c in COLUMNS}
        out["recompute"] = RECOMPUTE_MODES[int(self.recompute[i])]
        return out

    @staticmethod
    def of(rows: list[dict[str, int]]) -> Candidates:
        """Candidates from plain rows (`recompute` as its index; `cp` and
        `ep`, `etp` 1 when left out)."""
        return Candidates(
            *(
                np.asarray(
                    [r.get(c, 1) if c in ("cp", "ep", "etp") else r[c] for r in rows],
                    dtype=np.int64,
                )
                for c in COLUMNS
            )
        )

    def figure_keys(self) -> list[tuple[int, int, int, int]]:
        """Per candidate the key of its block and end figures:
        (rows, cols, micro-batch, context-parallel chips)."""
        return list(
            zip(
                self.rows.tolist(),
                self.cols.tolist(),
                self.mbs.tolist(),
                self.cp.tolist(),
                strict=True,
            )
        )

    def expert_keys(self) -> list[tuple[int, ...]]:
        """Per candidate the key of its expert figures:
        (rows, cols, mbs, cp, dp, pp, ep, etp)."""
        return list(
            zip(
                *(
                    getattr(self, k).tolist()
                    for k in ("rows", "cols", "mbs", "cp", "dp", "pp", "ep", "etp")
                ),
                strict=True,
            )
        )

    def layout_keys(self) -> list[tuple[int, int, int, int, int]]:
        """Per candidate the key of its layout: (rows, cols, dp, pp, cp)."""
        return list(
            zip(
                self.rows.tolist(),
                self.cols.tolist(),
                self.dp.tolist(),
                self.pp.tolist(),
                self.cp.tolist(),
                strict=True,
            )
        )


@dataclass(frozen=True)
class KeyFigures:
    """Everything the model reads per (rows, cols, micro-batch, cp) key, and
    the layout per (rows, cols, dp, pp, cp): looked up by the arrays below."""

    blocks: dict[tuple[int, int, int, int], BlockFigures]
    ends: dict[tuple[int, int, int, int], EndFigures]
    layouts: dict[tuple[int, int, int, int, int], Layout]
    #: a mixture of experts: the routed part per (rows, cols, mbs, cp, dp,
    #: pp, ep, etp), the expert-data axis per (rows, cols, dp, pp, cp, ep,
    #: etp), and
    #: per block (model order) whether it is a MoE block
    experts: dict[tuple[int, ...], ExpertFigures] = field(default_factory=dict)
    expert_data_axes: dict[tuple[int, ...], AxisLayout] = field(default_factory=dict)
    moe_flags: tuple[bool, ...] = ()
    #: multi-token-prediction blocks, run after the last block (last chunk)
    mtp_layers: int = 0

    def like(self) -> KeyFigures:
        """Empty figures for the same model (its MoE blocks), sharing the layouts."""
        return KeyFigures(
            {}, {}, self.layouts, {}, self.expert_data_axes, self.moe_flags, self.mtp_layers
        )


@dataclass(frozen=True)
class StageDetail:
    """Per stage of one candidate (bytes, seconds): what the report and the
    Plan show."""

    layers: np.ndarray  # (pp, v) layers per stage and local chunk
    recompute_counts: np.ndarray  # (pp, 3) layers per mode
    weights_bytes: np.ndarray
    gradients_bytes: np.ndarray
    optimizer_bytes: np.ndarray
    activation_bytes: np.ndarray
    buffer_bytes: np.ndarray
    total_bytes: np.ndarray
    busy_s: np.ndarray
    dp_comm_s: np.ndarray
    dp_exposed_s: np.ndarray
    optimizer_s: np.ndarray


@dataclass(frozen=True)
class Priced:
    """The step model's results for each candidate (base units)."""

    step_s: np.ndarray
    makespan_s: np.ndarray
    parts: dict[str, np.ndarray]
    peak_bytes: np.ndarray  # the fullest stage's total, reserve and workspace included
    capacity_bytes: float
    busiest_stage: np.ndarray
    bubble_fraction: np.ndarray
    recompute_flops_share: np.ndarray  # (n, 3): the layers' share in each mode
    detail: list[StageDetail | None] = field(default_factory=list)

    @property
    def fits(self) -> np.ndarray:
        """Whether every stage fits in the chip's memory."""
        return self.peak_bytes <= self.capacity_bytes


def even_split(num_layers: int, pp: int, v: int) -> np.ndarray:
    """Layers per model chunk (`pp v` chunks in model order) under the even
    split: `floor(L / (pp v))` each, one more on the last `L mod (pp v)`
    chunks (pipeline/assignment.py `even_layer_split`)."""
    num = pp * v
    base, extra = divmod(num_layers, num)
    return np.array([base + (1 if c >= num - extra else 0) for c in range(num)], dtype=np.int64)


def gather_figures(c: Candidates, figs: KeyFigures) -> dict[str, np.ndarray]:
    """Per-candidate arrays of the per-key figures."""
    keys = c.figure_keys()
    uniq = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    idx = np.array([uniq[k] for k in keys], dtype=np.int64)
    blocks = [figs.blocks[k] for k in uniq]
    ends = [figs.ends[k] for k in uniq]

    def col(values: list[float]) -> np.ndarray:
        return np.asarray(values, dtype=float)[idx]

    return {
        "fc_f": col([b.fc.forward_s for b in blocks]),
        "fc_b": col([b.fc.backward_s for b in blocks]),
        "fc_x": col([b.fc.exposed_comm_s for b in blocks]),
        "fc_buf": col([b.fc.buffer_bytes for b in blocks]),
        "cp_f": col([b.context_forward_s for b in blocks]),
        "cp_b": col([b.context_backward_s for b in blocks]),
        "cp_buf": col([b.context_buffer_bytes for b in blocks]),
        "attn_f": col([b.attention_forward_s for b in blocks]),
        "attn_b": col([b.attention_backward_s for b in blocks]),
        "ew_f": col([b.elementwise_forward_s for b in blocks]),
        "ew_b": col([b.elementwise_backward_s for b in blocks]),
        "rec": np.asarray([b.recompute_s for b in blocks], dtype=float).reshape(-1, 3)[idx],
        "act": np.asarray([b.activation_bytes for b in blocks], dtype=float).reshape(-1, 3)[idx],
        "params": col([b.params_per_chip for b in blocks]),
        "head_f": col([e.head_forward_s for e in ends]),
        "head_b": col([e.head_backward_s for e in ends]),
        "head_p": col([e.head_params for e in ends]),
        "tail_f": col([e.tail_forward_s for e in ends]),
        "tail_b": col([e.tail_backward_s for e in ends]),
        "tail_p": col([e.tail_params for e in ends]),
        "tail_x": col([e.tail_transient_bytes for e in ends]),
        "mtp_f": col([e.mtp_projection_forward_s for e in ends]),
        "mtp_b": col([e.mtp_projection_backward_s for e in ends]),
        "mtp_p": col([e.mtp_projection_params for e in ends]),
        **_gather_experts(c, figs),
    }


_NO_EXPERTS = ExpertFigures(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, (0.0,) * 3, (0.0,) * 3, 0.0, 1.0, 0.0)


def _gather_experts(c: Candidates, figs: KeyFigures) -> dict[str, np.ndarray]:
    """Per-candidate arrays of the expert figures (zeros for a dense model)."""
    if figs.experts:
        keys = c.expert_keys()
        uniq = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        idx = np.array([uniq[k] for k in keys], dtype=np.int64)
        xs = [figs.experts[k] for k in uniq]
    else:
        idx = np.zeros(len(c), dtype=np.int64)
        xs = [_NO_EXPERTS]

    def col(values: list) -> np.ndarray:
        arr = np.asarray(values, dtype=float)
        return arr[idx] if arr.ndim == 1 else arr.reshape(len(xs), -1)[idx]

    return {
        "x_f": col([x.forward_s for x in xs]),
        "x_b": col([x.backward_s for x in xs]),
        "x_a2a": col([x.all_to_all_forward_s + x.all_to_all_backward_s for x in xs]),
        "x_a2a_f": col([x.all_to_all_forward_s for x in xs]),
        "x_sm": col([x.comm_sm_share for x in xs]),
        "x_mlp_f": col([x.mlp_forward_s for x in xs]),
        "x_mlp_b": col([x.mlp_backward_s for x in xs]),
        "x_params": col([x.expert_params for x in xs]),
        "x_router": col([x.router_params for x in xs]),
        "x_buf": col([x.buffer_bytes for x in xs]),
        "x_act": col([x.activation_bytes for x in xs]),
        "x_rec": col([x.recompute_s for x in xs]),
        "xd_f": col([x.dense_forward_s for x in xs]),
        "xd_b": col([x.dense_backward_s for x in xs]),
        "xd_params": col([x.dense_params for x in xs]),
        "xd_act": col([x.dense_activation_bytes for x in xs]),
    }


def kind_counts(layers: np.ndarray, moe_flags: tuple[bool, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(MoE blocks, dense blocks of a MoE model) per model chunk, for
    `layers` blocks per chunk in model order (`(..., chunks)`): the chunk
    holding blocks `[a, b)` has `sum(flags[a:b])` MoE blocks. Both zero for
    a dense model (its blocks are the planned block alone)."""
    if not moe_flags:
        zero = np.zeros_like(layers, dtype=float)
        return zero, zero
    whole = np.rint(layers).astype(np.int64)
    ends = np.cumsum(whole, axis=-1)
    starts = ends - whole
    prefix = np.concatenate([[0], np.cumsum(np.asarray(moe_flags, dtype=np.int64))])
    moe = (prefix[ends] - prefix[starts]).astype(float)
    return moe, whole - moe


def merged_fraction(pp: int | np.ndarray, v: int | np.ndarray, m: np.ndarray | int) -> np.ndarray:
    """Share of a stage's micro-batch passes that run merged with another
    micro-batch's opposite pass when the expert all-to-alls are overlapped
    (Megatron-LM's `--overlap-moe-expert-parallel-comm`: "overlap EP A2A
    communications with independent computations of different
    micro-batches in 1f1b phase of pipelining or non-pipelining schedule",
    megatron/core/model_parallel_config.py at d98e8a64). A stage runs `m v`
    forwards; the warm-up forwards and as many cool-down backwards run
    alone: one without pipelining (the first forward; the last backward),
    `2 (pp - s - 1) + (v - 1) pp` on stage `s` of the interleaved schedule
    (Megatron-Core's warm-up count), `(pp - 1) + (v - 1) pp` in the stages'
    mean. So the share is `max(0, m v - w) / (m v)`. Vectorised."""
    pp_f, v_f = np.asarray(pp, dtype=float), np.asarray(v, dtype=float)
    passes = np.asarray(m, dtype=float) * v_f
    warmup = np.where(pp_f == 1, 1.0, (pp_f - 1) + (v_f - 1) * pp_f)
    return np.maximum(passes - warmup, 0.0) / passes


def expert_overlap(
    g: dict[str, np.ndarray], f_blk: np.ndarray, b_blk: np.ndarray, merged: np.ndarray
) -> dict[str, np.ndarray]:
    """`g` with a MoE block's all-to-all seconds hidden where its passes run
    merged (merged_fraction): a merged forward and backward of two
    micro-batches run as Megatron-Core's EP overlap schedules them
    (cost_models.moe.merged_layer_pair_s: each dispatch and combine beside
    one module of the other pass, the computation slowed by the cores the
    dispatcher's kernels hold, `x_sm`), so of the pair's all-to-alls `C`
    (forward `C_f = x_a2a_f`, backward `C_b`) and computation `W` (the
    block's attention, FFN, router and permutation `A`, the experts' GEMMs
    `M = x_mlp`) what the pair saves over running them one after the other
    is hidden, split evenly between the passes; unmerged passes keep
    theirs::

        hidden = merged * (C + W - t_pair)

    Seconds per block and micro-batch."""
    comm = g["x_a2a"]
    comm_f = g.get("x_a2a_f", comm / 2.0)
    comm_b = comm - comm_f
    mlp_f = g.get("x_mlp_f", 0.0)
    mlp_b = g.get("x_mlp_b", 0.0)
    attn_f = f_blk + g["x_f"] - comm_f - mlp_f
    attn_b = b_blk + g["x_b"] - comm_b - mlp_b
    pair = merged_layer_pair_s(attn_f, attn_b, mlp_f, mlp_b, comm_f, comm_b, g.get("x_sm", 0.0))
    compute = attn_f + attn_b + mlp_f + mlp_b
    hidden = merged * (comm + compute - pair)
    return {
        **g,
        "x_f": g["x_f"] - hidden / 2,
        "x_b": g["x_b"] - hidden / 2,
        "x_a2a": comm - hidden,
    }


def hide_expert_comm(
    training: TrainingInput,
    g: dict,
    f_blk: np.ndarray | float,
    b_blk: np.ndarray | float,
    pp: int | np.ndarray,
    v: int | np.ndarray,
    m: np.ndarray | int,
) -> dict:
    """`g` as the step prices it: with `overlap_expert_comm`, a MoE block's
    all-to-alls hidden over the schedule's merged passes (expert_overlap of
    merged_fraction); else `g` itself. The one place the step model, the
    search's lower bound and the pipeline balancer's figures take it from."""
    if not training.overlap_expert_comm:
        return g
    return expert_overlap(g, f_blk, b_blk, merged_fraction(pp, v, m))


def block_seconds(a: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-block forward and backward seconds (no recomputation)."""
    return (
        a["fc_f"] + a["attn_f"] + a["ew_f"] + a["cp_f"],
        a["fc_b"] + a["attn_b"] + a["ew_b"] + a["cp_b"],
    )


def pipeline_send_s(
    c: Candidates, figs: KeyFigures, hw: HardwareView, training: TrainingInput, hidden: int
) -> np.ndarray:
    """Seconds of one stage-to-stage send of a micro-batch's activation (or
    its gradient) per candidate: a send-recv on the pipeline axis's
    outermost link; zero without pipeline stages. Each chip sends `T h / t`
    (split over the `t` tensor-parallel chips: MeshSlice always,
    megatron-1d with sequence parallelism or the scatter-gather
    optimisation), else the whole `T h` (`pipeline_scatter_gather` false
    without sequence parallelism: every chip sends the activation it holds
    whole)."""
    out = np.zeros(len(c))
    e = training.dtype.num_bytes
    whole = (
        training.fc_algorithm is FcAlgorithm.MEGATRON_1D
        and not training.sequence_parallel
        and not training.pipeline_scatter_gather
    )
    for key, members in _by(c, ("rows", "cols", "dp", "pp", "cp")).items():
        rows, cols, _dp, pp, cp = key
        if pp == 1:
            continue
        axis = figs.layouts[key].axis(ParallelAxis.PIPELINE)
        tokens = c.mbs[members] * (training.sequence_length // cp)
        share = 1 if whole else rows * cols
        out[members] = hw.send_s(axis, tokens * hidden * e / share)
    return out


def _groups(*columns: np.ndarray) -> dict[tuple[int, ...], np.ndarray]:
    """Positions grouped by the values of the integer `columns`: groups in
    the order of their first position, positions ascending in each."""
    if not columns or len(columns[0]) == 0:
        return {}
    stacked = np.stack([np.asarray(col, dtype=np.int64) for col in columns], axis=1)
    uniq, first, inverse = np.unique(stacked, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    members = np.argsort(inverse, kind="stable")
    parts = np.split(members, np.cumsum(np.bincount(inverse, minlength=len(uniq)))[:-1])
    return {
        tuple(int(x) for x in uniq[g]): parts[g].astype(np.int64)
        for g in np.argsort(first, kind="stable")
    }


def _by(c: Candidates, columns: tuple[str, ...]) -> dict[tuple[int, ...], np.ndarray]:
    """Positions of the candidates grouped by the values of `columns`."""
    return _groups(*(getattr(c, col) for col in columns))


def price(
    c: Candidates,
    figs: KeyFigures,
    hw: HardwareView,
    training: TrainingInput,
    num_layers: int,
    hidden: int,
    *,
    assignments: list[np.ndarray] | None = None,
    detail: bool = False,
    exact: bool = True,
) -> Priced:
    """The step of every candidate (module docstring). `assignments`, when
    given, is per candidate a `(pp v, 3)` array of layers per model chunk
    and recomputation mode (a balanced plan); otherwise the even split with
    the candidate's one mode. `detail` keeps each candidate's StageDetail.
    With `exact` False, steps are lower bounds (chain_bound_s for the
    replay, exposed data-parallel traffic bounded as in _data_parallel:
    valid for any figures at or below the true ones, job/bounds.py) and
    memory is not computed."""
    n = len(c)
    a = gather_figures(c, figs)
    p2p = pipeline_send_s(c, figs, hw, training, hidden)
    batch = training.global_batch_sequences
    m_all = batch // (c.dp * c.mbs)
    step = np.empty(n)
    makespan = np.empty(n)
    peak = np.empty(n)
    busiest = np.empty(n, dtype=np.int64)
    bubble_frac = np.empty(n)
    shares = np.empty((n, 3))
    parts = {k: np.empty(n) for k in PARTS}
    details: list[StageDetail | None] = [None] * n
    # exact: one schedule graph per (pp, v, m); bounds: arrays of m
    arrays = (c.pp, c.v, m_all) if exact else (c.pp, c.v)
    for key, members in _groups(*arrays).items():
        pp, v = key[0], key[1]
        m = m_all[members]
        if assignments is None:
            layers = split_layers(training, num_layers, pp, v, figs.mtp_layers)
            counts = _uniform_counts(layers, c.recompute[members])
        else:
            counts = np.stack([assignments[i] for i in members]).astype(float)
        out = _price_group(members, c, a, p2p, counts, pp, v, m, hw, training, figs, detail, exact)
        step[members] = out["step"]
        makespan[members] = out["makespan"]
        peak[members] = out["peak"]
        busiest[members] = out["busiest"]
        bubble_frac[members] = out["bubble_fraction"]
        shares[members] = out["shares"]
        for k in PARTS:
            parts[k][members] = out["parts"][k]
        if detail:
            for i, d in zip(members, out["detail"], strict=True):
                details[i] = d
    return Priced(
        step_s=step,
        makespan_s=makespan,
        parts=parts,
        peak_bytes=peak,
        capacity_bytes=hw.hbm_bytes,
        busiest_stage=busiest,
        bubble_fraction=bubble_frac,
        recompute_flops_share=shares,
        detail=details,
    )


def split_layers(
    training: TrainingInput, num_layers: int, pp: int, v: int, mtp_layers: int
) -> np.ndarray:
    """Transformer blocks per model chunk (`pp v` chunks in model order)
    when the layers are not balanced: the pinned Megatron-LM layout's
    (specs.pipeline_layout; the loader checked it against the model, and
    the search runs only its `pp` and `v`), else the even split."""
    layout = training.pipeline_layout
    if layout is None:
        return even_split(num_layers, pp, v)
    blocks = np.asarray(layout_blocks(layout, num_layers, mtp_layers), dtype=np.int64)
    assert len(blocks) == pp * v, (layout, pp, v)
    return blocks


def mtp_chunk(training: TrainingInput, pp: int, v: int) -> int:
    """The model chunk running the multi-token-prediction blocks: the
    pinned layout's `m` stage (specs.pipeline_layout.mtp_stage; the loader
    checked it), else the last chunk, with the loss."""
    layout = training.pipeline_layout
    at = mtp_stage(layout, pp) if layout is not None else None
    return pp * v - 1 if at is None else at


def _uniform_counts(layers: np.ndarray, modes: np.ndarray) -> np.ndarray:
    """(K, pp v, 3): the split `layers` with each candidate's one mode."""
    counts = np.zeros((len(modes), len(layers), 3))
    counts[np.arange(len(modes)), :, modes] = layers.astype(float)
    return counts


def _price_group(
    members: np.ndarray,
    c: Candidates,
    a: dict[str, np.ndarray],
    p2p_all: np.ndarray,
    counts: np.ndarray,
    pp: int,
    v: int,
    m_arr: np.ndarray,
    hw: HardwareView,
    training: TrainingInput,
    figs: KeyFigures,
    detail: bool,
    exact: bool = True,
) -> dict:
    """The step of candidates sharing (pp, v) and, when `exact`, the
    micro-batch count `m` (one schedule graph). With `exact` False the
    makespan is :func:`chain_bound_s` instead of the replay, exposed
    data-parallel traffic is bounded (_data_parallel) and memory is not
    computed (`peak` is 0): a lower bound of the exact step, cheap."""
    g = {k: x[members] for k, x in a.items()}
    k_count = len(members)
    p2p = p2p_all[members] if pp > 1 else np.zeros(k_count)
    zero = c.zero[members]
    e = training.dtype.num_bytes
    grad_e = 4 if training.fp32_gradients else e
    fp8 = training.fp8 is not Fp8Recipe.NONE
    fp8_copy_bytes = fp8_weight_copy_bytes_per_param(training.fp8.value) if fp8 else 0.0
    f_blk, b_blk = block_seconds(g)
    g = hide_expert_comm(training, g, f_blk, b_blk, pp, v, m_arr)
    last = pp * v - 1
    at = mtp_chunk(training, pp, v) if figs.mtp_layers else last
    if figs.mtp_layers:
        # multi-token-prediction modules: blocks after the last, not recomputed
        counts = counts.copy()
        counts[:, at, 0] += figs.mtp_layers
    layers = counts.sum(axis=2)  # (K, num)
    # a mixture of experts: MoE and dense blocks per chunk, each mode's share
    flags = figs.moe_flags + (True,) * figs.mtp_layers if figs.moe_flags else ()
    moe_n, dense_n = kind_counts(layers, flags)
    share = counts / np.maximum(layers, 1.0)[:, :, None]
    # per chunk and micro-batch: blocks, recomputation, ends, send-recv
    fwd = layers * f_blk[:, None]
    bwd = layers * b_blk[:, None] + (counts * g["rec"][:, None, :]).sum(axis=2)
    fwd += moe_n * g["x_f"][:, None] + dense_n * g["xd_f"][:, None]
    bwd += moe_n * g["x_b"][:, None] + dense_n * g["xd_b"][:, None]
    moe_rec = moe_n * (share * g["x_rec"][:, None, :]).sum(axis=2)
    dense_rec = dense_n * share[:, :, 2] * g["xd_f"][:, None]
    bwd += moe_rec + dense_rec
    fwd[:, 0] += g["head_f"]
    bwd[:, 0] += g["head_b"]
    fwd[:, -1] += g["tail_f"]
    bwd[:, -1] += g["tail_b"]
    # standalone MTP blocks (a layout's `m` stage before the loss's): their
    # projections run with them, and every send from there to the loss's
    # stage carries their hidden states besides the main ones
    # (specs.pipeline_layout); the send-recv of each chunk is charged to it
    extra_p2p = np.zeros_like(fwd)
    if at != last:
        fwd[:, at] += g["mtp_f"]
        bwd[:, at] += g["mtp_b"]
        fwd[:, -1] -= g["mtp_f"]
        bwd[:, -1] -= g["mtp_b"]
        extra_p2p[:, at:last] = figs.mtp_layers * p2p[:, None]
    act = (counts * g["act"][:, None, :]).sum(axis=2)
    act += moe_n * (share * g["x_act"][:, None, :]).sum(axis=2)
    act += dense_n * (share * g["xd_act"][:, None, :]).sum(axis=2)
    m = m_arr.astype(float)
    sends = p2p[:, None] + extra_p2p
    if pp == 1:
        makespan = m * (fwd[:, 0] + bwd[:, 0])
    elif not exact:
        makespan = chain_bound_s(fwd + sends, bwd + sends, pp, m)
    else:
        graph = schedule_graph(pp, v, int(m_arr[0]), v > 1)
        durations = np.concatenate([fwd + sends, bwd + sends], axis=1)
        makespan = makespans_s(graph, durations)

    def per_stage(x: np.ndarray) -> np.ndarray:
        # chunk c = j pp + s runs on stage s: sum the v rounds
        return x.reshape(k_count, v, pp, *x.shape[2:]).sum(axis=1)

    stage_layers = per_stage(layers)  # (K, pp)
    stage_moe = per_stage(moe_n)
    stage_dense = per_stage(dense_n)
    stage_fwd = per_stage(fwd)  # one micro-batch's compute on the stage, no send-recv
    stage_bwd = per_stage(bwd)
    chunks_per_stage = float(v)
    stage_extra_p2p = per_stage(extra_p2p)
    busy = m[:, None] * (
        stage_fwd + stage_bwd + (2 * chunks_per_stage * p2p)[:, None] + 2 * stage_extra_p2p
    )
    stage_mode = per_stage(counts)  # (K, pp, 3)

    # memory: parameters and their state, activations alive, buffers; a
    # MoE model's routed experts are sharded over their own expert-data group
    block_p = stage_layers * g["params"][:, None]
    block_p += stage_moe * g["x_router"][:, None] + stage_dense * g["xd_params"][:, None]
    params = block_p.copy()
    params[:, 0] += g["head_p"]
    params[:, -1] += g["tail_p"]
    if at != last:
        params[:, at % pp] += g["mtp_p"]
        params[:, -1] -= g["mtp_p"]
    expert_p = stage_moe * g["x_params"][:, None]
    d = c.replicas[members].astype(float)
    d_x = c.expert_replicas[members]
    weights = e * params / np.where(zero >= 3, d, 1.0)[:, None]
    weights += e * expert_p / np.where(zero >= 3, d_x, 1.0)[:, None]
    # an FP8 recipe's row-wise and column-wise weight copies (blocks only)
    weights += block_p * fp8_copy_bytes / np.where(zero >= 3, d, 1.0)[:, None]
    weights += expert_p * fp8_copy_bytes / np.where(zero >= 3, d_x, 1.0)[:, None]
    grads = grad_e * params / np.where(zero >= 2, d, 1.0)[:, None]
    grads += grad_e * expert_p / np.where(zero >= 2, d_x, 1.0)[:, None]
    optim = OPTIMIZER_BYTES_PER_PARAM * params / np.where(zero >= 1, d, 1.0)[:, None]
    optim += OPTIMIZER_BYTES_PER_PARAM * expert_p / np.where(zero >= 1, d_x, 1.0)[:, None]
    alive = _peak_activations(act, pp, v, int(m_arr[0])) if exact else np.zeros((k_count, pp))
    buffers = np.repeat((g["fc_buf"] + g["cp_buf"])[:, None], pp, axis=1)
    buffers += np.where(zero == 3, 2 * g["params"] * e, 0.0)[:, None]
    buffers[:, -1] += g["tail_x"]
    full_used = stage_mode[:, :, 2] > 0
    buffers += np.where(full_used, g["act"][:, 0][:, None], 0.0)
    # the dispatched tokens of one MoE block, and its recomputed activations
    has_moe = stage_moe > 0
    buffers += np.where(has_moe, g["x_buf"][:, None], 0.0)
    buffers += np.where(full_used & has_moe, g["x_act"][:, 0][:, None], 0.0)
    total = weights + grads + optim + alive + buffers + hw.workspace_bytes + hw.reserve_bytes

    # data parallelism and the optimizer, per stage
    dp_comm, dp_exposed, dp_floor = _data_parallel(
        members, c, figs, hw, training, params, stage_fwd, stage_bwd, m, zero, e, grad_e, expert_p
    )
    owned = params / np.where(zero >= 1, d, 1.0)[:, None]
    owned += expert_p / np.where(zero >= 1, d_x, 1.0)[:, None]
    opt_s = owned * adam_step_bytes_per_param(e, grad_e) / hw.hbm_bytes_per_s
    if fp8:
        # the FP8 weight copies are refreshed from the updated weights once
        # per step: read e, write the copies (every block weight on the chip)
        block_params = block_p + expert_p
        opt_s = opt_s + block_params * (e + fp8_copy_bytes) / hw.hbm_bytes_per_s
    if not exact:
        # the exposed part shrinks as the windows grow, so lower-bound
        # windows would overstate it; instead (_data_parallel) every window
        # is at most the makespan, so makespan + exposed >= the stage's
        # collectives, and the first bucket is exposed whatever the windows
        dp_exposed = np.maximum(dp_floor, dp_comm - makespan[:, None])
    tail = dp_exposed + opt_s
    top = tail == tail.max(axis=1, keepdims=True)
    stage = np.argmax(np.where(top, busy, -np.inf), axis=1)
    rows = np.arange(k_count)
    step = makespan + tail[rows, stage]

    # the parts of the step on that stage
    n_st = stage_layers[rows, stage]
    moe_st = stage_moe[rows, stage]
    dense_st = stage_dense[rows, stage]
    mode_st = stage_mode[rows, stage]
    # the stage's recomputation of its MoE and dense-FFN blocks
    moe_rec_st = per_stage(moe_rec + dense_rec)[rows, stage]
    ends = np.where(stage == 0, g["head_f"] + g["head_b"], 0.0) + np.where(
        stage == pp - 1, g["tail_f"] + g["tail_b"], 0.0
    )
    if at != last:
        projections = g["mtp_f"] + g["mtp_b"]
        ends += np.where(stage == at % pp, projections, 0.0)
        ends -= np.where(stage == pp - 1, projections, 0.0)
    parts = {
        "fc_compute_s": m * n_st * (g["fc_f"] + g["fc_b"] - g["fc_x"]),
        "tp_comm_s": m * n_st * g["fc_x"],
        "attention_s": m * n_st * (g["attn_f"] + g["attn_b"]),
        "expert_s": m * moe_st * (g["x_f"] + g["x_b"] - g["x_a2a"])
        + m * dense_st * (g["xd_f"] + g["xd_b"]),
        "ep_comm_s": m * moe_st * g["x_a2a"],
        "cp_comm_s": m * n_st * (g["cp_f"] + g["cp_b"]),
        "elementwise_s": m * n_st * (g["ew_f"] + g["ew_b"]),
        "recompute_s": m * ((mode_st * g["rec"]).sum(axis=1) + moe_rec_st),
        "ends_s": m * ends,
        "pp_comm_s": m * 2 * (chunks_per_stage * p2p + stage_extra_p2p[rows, stage]),
        "bubble_s": makespan - busy[rows, stage],
        "dp_comm_s": dp_exposed[rows, stage],
        "optimizer_s": opt_s[rows, stage],
    }
    useful = busy.sum(axis=1)
    out = {
        "step": step,
        "makespan": makespan,
        "peak": total.max(axis=1),
        "busiest": stage,
        "bubble_fraction": np.where(useful > 0, (pp * makespan - useful) / useful, 0.0),
        "shares": counts.sum(axis=1) / np.maximum(layers.sum(axis=1), 1)[:, None],
        "parts": parts,
    }
    if detail:
        # the model's blocks (multi-token-prediction modules run on their
        # chunk besides them: the last, or a layout's standalone `m` stage)
        model_layers, model_modes = layers.copy(), stage_mode.copy()
        model_layers[:, at] -= figs.mtp_layers
        model_modes[:, at % pp, 0] -= figs.mtp_layers
        out["detail"] = [
            StageDetail(
                layers=model_layers[k].reshape(v, pp).T.copy(),
                recompute_counts=model_modes[k],
                weights_bytes=weights[k],
                gradients_bytes=grads[k],
                optimizer_bytes=optim[k],
                activation_bytes=alive[k],
                buffer_bytes=buffers[k],
                total_bytes=total[k],
                busy_s=busy[k],
                dp_comm_s=dp_comm[k],
                dp_exposed_s=dp_exposed[k],
                optimizer_s=opt_s[k],
            )
            for k in range(k_count)
        ]
    return out


def chain_bound_s(fwd: np.ndarray, bwd: np.ndarray, pp: int, m: np.ndarray | int) -> np.ndarray:
    """A lower bound of the replayed makespan for per-chunk forward and
    backward seconds `fwd`, `bwd` (K x pp v, chunk c on stage c mod pp):
    stage `b` cannot start before micro-batch 1 has run forward through the
    first chunks of the stages before it, does `m` micro-batches of work on
    its own chunks, and after its last backward micro-batch `m` still runs
    back through those chunks, so

        makespan >= max_b  sum_{c < b} (F_c + B_c) + m sum_{c on b} (F_c + B_c)

    (1F1B: exact for equal stages, `(m + pp - 1) W`; interleaved: the
    chunks before `b` are the first round's)."""
    work = fwd + bwd
    num = work.shape[1]
    stage_work = work.reshape(work.shape[0], num // pp, pp).sum(axis=1)  # (K, pp)
    first = work[:, :pp]
    before = np.cumsum(first, axis=1) - first
    return (before + np.asarray(m, dtype=float).reshape(-1, 1) * stage_work).max(axis=1)


def _peak_activations(act: np.ndarray, pp: int, v: int, m: int) -> np.ndarray:
    """(K, pp): each stage's activation peak, `max over the schedule's
    Pareto-maximal alive vectors of sum_k alive_k * act(local chunk k)`
    (pipeline/schedule.py)."""
    if pp == 1:
        return act[:, :1].copy()
    vectors = peak_alive_vectors(pp, v, m, v > 1)
    out = np.empty((act.shape[0], pp))
    local = act.reshape(act.shape[0], v, pp)  # chunk c = j pp + s
    for s in range(pp):
        vec = np.asarray(vectors[s], dtype=float)  # (n_vec, v)
        out[:, s] = (local[:, :, s] @ vec.T).max(axis=1)
    return out


def _data_parallel(
    members: np.ndarray,
    c: Candidates,
    figs: KeyFigures,
    hw: HardwareView,
    training: TrainingInput,
    params: np.ndarray,
    stage_fwd: np.ndarray,
    stage_bwd: np.ndarray,
    m_all: np.ndarray,
    zero: np.ndarray,
    e: int,
    grad_e: int,
    expert_params: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(all data-parallel collective seconds, the part not hidden, the part
    no window hides), per candidate and stage (module docstring). A MoE
    model's routed-expert weights (`expert_params` per stage) are reduced
    the same way over their expert-data axis, after the others.

    Every window is one stage's forward and/or backward work (at most its
    busy time, so at most the makespan), and the exposed part is at least
    the collectives minus the window and at least the first bucket: so
    `makespan + exposed >= max(comm, makespan + floor)` for any windows,
    which is what price(exact=False) uses."""
    gather_e = param_gather_bytes(training)
    rs = np.zeros_like(params)
    ag = np.zeros_like(params)
    bucket = np.zeros(len(members))
    sub = Candidates(*(getattr(c, col)[members] for col in COLUMNS))
    z = zero[:, None]
    m = m_all[:, None]

    def add(local: np.ndarray, axis: AxisLayout, p: np.ndarray) -> None:
        grad_rs = hw.hierarchical_ring_s(axis, "reduce_scatter", grad_e * p)
        grad_ag = hw.hierarchical_ring_s(axis, "all_gather", grad_e * p)
        param_ag = hw.hierarchical_ring_s(axis, "all_gather", gather_e * p)
        one_rs, one_ag = _zero_collectives(z[local], m[local], grad_rs, grad_ag, param_ag)
        rs[local] += one_rs
        ag[local] += one_ag
        if not bucket[local].any():
            bucket[local] = float(
                hw.hierarchical_ring_s(axis, "reduce_scatter", float(BUCKET_BYTES))
            )

    for key, local in _by(sub, ("rows", "cols", "dp", "pp", "cp")).items():
        if key[2] * key[4] > 1:
            add(local, figs.layouts[key].axis(ParallelAxis.GRADIENT), params[local])
    if expert_params is not None and figs.expert_data_axes:
        for key, local in _by(sub, ("rows", "cols", "dp", "pp", "cp", "ep", "etp")).items():
            axis = figs.expert_data_axes[key]
            if axis.size > 1:
                add(local, axis, expert_params[local])
    total = rs + ag
    b = bucket[:, None]
    if not training.overlap_data_parallel:
        return total, total, total
    z0 = _exposed(total, stage_bwd, 2 * b)
    z12 = _exposed(rs, stage_bwd, b) + _exposed(ag, stage_fwd, b)
    z3 = _exposed(total, m * (stage_fwd + stage_bwd), b)
    exposed = np.where(z == 0, z0, np.where(z == 3, z3, z12))
    least = np.where(
        z == 0,
        np.minimum(2 * b, total),
        np.where(z == 3, np.minimum(b, total), np.minimum(b, rs) + np.minimum(b, ag)),
    )
    return total, exposed, least


def param_gather_bytes(training: TrainingInput) -> float:
    """Bytes per parameter of a weight all-gather (ZeRO 1-3): the dtype's,
    or 1 when an FP8 recipe gathers the weights in FP8
    (`fp8_param_gather`)."""
    if training.fp8 is not Fp8Recipe.NONE and training.fp8_param_gather:
        return 1.0
    return float(training.dtype.num_bytes)


def _zero_collectives(
    zero: np.ndarray, m: np.ndarray, grad_rs: np.ndarray, grad_ag: np.ndarray, param_ag: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(reduce-scatter, all-gather) seconds of a step per ZeRO stage, from
    one gradient reduce-scatter, gradient all-gather and weight all-gather:
    ZeRO 0 all-reduces the gradient (reduce-scatter + all-gather); 1-2
    reduce-scatter the gradient and all-gather the updated weights; 3, per
    micro-batch, a gradient reduce-scatter and two weight gathers (forward
    and backward)."""
    rs = np.where(zero == 3, m * grad_rs, grad_rs)
    ag = np.where(zero == 0, grad_ag, np.where(zero == 3, 2 * m * param_ag, param_ag))
    return rs, ag


def data_parallel_floor_s(
    c: Candidates,
    layouts: dict[tuple[int, int, int, int, int], Layout],
    hw: HardwareView,
    training: TrainingInput,
    params: np.ndarray,
) -> np.ndarray:
    """Seconds the data-parallel collectives of a stage holding `params`
    parameters per chip take at least, per candidate: the collectives of
    _data_parallel with every level's latency left out and its bytes at the
    fastest bandwidth of its size regimes
    (HardwareView.hierarchical_transfer_floor_s). Linear in `params`, so the
    stage holding the most parameters takes at least this for the average
    stage's; and `makespan + exposed >= collectives` on every stage
    (_data_parallel), so the step is at least this plus that stage's
    optimizer step whatever the layer split (bounds.step_lower_bound)."""
    e = training.dtype.num_bytes
    grad_e = 4 if training.fp32_gradients else e
    m_all = (training.global_batch_sequences // (c.dp * c.mbs)).astype(float)
    out = np.zeros(len(c))
    for key, local in _by(c, ("rows", "cols", "dp", "pp", "cp")).items():
        if key[2] * key[4] == 1:
            continue
        axis = layouts[key].axis(ParallelAxis.GRADIENT)
        p = params[local]
        grad_rs = hw.hierarchical_transfer_floor_s(axis, "reduce_scatter", grad_e * p)
        grad_ag = hw.hierarchical_transfer_floor_s(axis, "all_gather", grad_e * p)
        param_ag = hw.hierarchical_transfer_floor_s(
            axis, "all_gather", param_gather_bytes(training) * p
        )
        rs, ag = _zero_collectives(c.zero[local], m_all[local], grad_rs, grad_ag, param_ag)
        out[local] = rs + ag
    return out


def _exposed(comm_s: np.ndarray, window_s: np.ndarray, bucket_s: float | np.ndarray) -> np.ndarray:
    """cost_models.data_parallel.exposed_overlap_s on arrays:
    `max(comm - window, min(bucket, comm), 0)`."""
    return np.maximum(np.maximum(comm_s - window_s, np.minimum(bucket_s, comm_s)), 0.0)
