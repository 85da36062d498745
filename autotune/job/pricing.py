"""Closed-form step time and memory of every candidate at once (numpy).

Per block and micro-batch on one chip (tokens `T = b * s`, tensor chips `t`):

- FC layers: :func:`autotune.job.fc_pricing.fc_times` (cached per mesh and T);
- attention core: `4 T s a d / t` FLOPs forward (`QK^T` and `AV`), halved by
  a causal flash kernel, at the attention efficiency; backward 2x forward
  (2.5x for flash, which recomputes `QK^T`); the unfused core also moves its
  `b a s^2 / t` scores over HBM (scale-mask-softmax read and write, dropout
  read, write and mask: 5 passes of 2-byte elements, the 5as/h term of
  Korthikanti et al. 2022 eq. 2 read as bytes);
- memory-bound ops: two norms (read, write: 4h), two residual adds (6h),
  bias and dropouts (5h when dropout is on), the FFN activation (read and
  write the inner width: 2f for GELU, 3f for SwiGLU) over HBM, per token,
  times the element bytes, divided over t; backward moves twice as much;
- recomputation adds to the backward: selective the attention core's
  forward, full the block's whole forward;
- head (first stage): embedding lookup, `T h` elements written; tail (last
  stage): output GEMM `2 T h V / t` FLOPs forward (2x backward) and the loss
  over the `T V / t` fp32 logits (3 passes);
- pipeline: each stage sends its `T h / t` activation forward and its
  gradient back, per chunk and micro-batch, on the critical path;
- 1F1B step over the stage times `W_s` (pipeline.md section 2, extended to
  `v` chunks): `m * max_s W_s + (sum_s W_s - max_s W_s) / v`;
- data parallel over the replicas' network tier: ZeRO 0 all-reduces the
  gradients (`2 (dp-1)/dp` of their bytes), ZeRO 1-2 reduce-scatter them and
  all-gather the parameters, ZeRO 3 also gathers the parameters before every
  micro-batch's forward and backward, block by block (one ring latency per
  block; hidden behind that micro-batch's compute when shorter). With
  overlap, gradient traffic hides behind the last micro-batch's backward
  except the last layer's bucket;
- optimizer: Adam over the local shard, `26 + g` bytes per parameter over
  HBM (read fp32 master, moments and the `g`-byte gradient, write them and
  the bf16 weight).

Memory per chip, first and last stage (the largest): parameters (2 bytes),
gradients (`g`), fp32 master and Adam moments (12), divided by ZeRO stage;
activations per block and micro-batch (Korthikanti et al. 2022 section 4.1:
`sbh(34 + 5as/h)` for GPT-3, rebuilt term by term for GQA, SwiGLU, flash and
no dropout, all divided over t), times the micro-batches alive on the first
stage (`min(pp, m)`, times `1 + (pp-1)/(pp v)` when interleaved, section
4.2.3); full recomputation keeps only each block's input and one block's
activations during its backward; the last stage keeps the fp32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.job.candidates import Candidates
from autotune.job.cluster_view import JobHardware
from autotune.job.fc_pricing import fc_gemms, fc_times
from autotune.specs.job_search import AutoTrainingSpec
from autotune.specs.model import FfnKind, ModelSpec

COMPONENTS = (
    "compute_s",
    "tp_comm_s",
    "recompute_s",
    "pp_comm_s",
    "bubble_s",
    "dp_comm_s",
    "optimizer_s",
)


@dataclass(frozen=True)
class Priced:
    """Step time, its components and per-chip memory of each candidate."""

    step_s: np.ndarray
    components: dict[str, np.ndarray]
    first_stage_bytes: np.ndarray
    last_stage_bytes: np.ndarray
    usable_bytes: float

    @property
    def peak_bytes(self) -> np.ndarray:
        """The larger of the first and last stage's memory."""
        return np.maximum(self.first_stage_bytes, self.last_stage_bytes)

    @property
    def fits(self) -> np.ndarray:
        """Whether both stages fit in the chip's usable memory."""
        return self.peak_bytes <= self.usable_bytes


@dataclass(frozen=True)
class BlockFigures:
    """Per-block and per-micro-batch figures of each candidate on one chip:
    forward and backward seconds without recomputation, the recomputation
    extra per mode, exposed tensor communication, activation bytes per mode,
    parameter count per block."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    tp_comm_s: np.ndarray
    recompute_extra_s: np.ndarray  # shape (n, 3): none, selective, full
    activation_bytes: np.ndarray  # shape (n, 3)
    block_params: float


def block_params(model: ModelSpec) -> float:
    """Parameters of one block: FC weights and two norms' scales."""
    return float(sum(i * o for i, o in fc_gemms(model)) + 2 * model.hidden_size)


def block_figures(
    model: ModelSpec, hw: JobHardware, train: AutoTrainingSpec, c: Candidates
) -> BlockFigures:
    """Per-block times and activations (module docstring), vectorised."""
    el = train.dtype.num_bytes
    s, h, a, d = train.sequence_length, model.hidden_size, model.num_heads, model.head_dim
    f = model.ffn_size
    t = c.tp.astype(float)
    tokens = (c.mbs * s).astype(float)
    fwd = np.empty(len(c))
    bwd = np.empty(len(c))
    comm = np.empty(len(c))
    keys = np.stack([c.rows, c.cols, c.mbs], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    per_key = [fc_times(model, hw, int(r), int(k), int(b) * s, el) for r, k, b in uniq]
    fwd = np.array([x.forward_s for x in per_key])[inverse]
    bwd = np.array([x.backward_s for x in per_key])[inverse]
    comm = np.array([x.forward_comm_s + x.backward_comm_s for x in per_key])[inverse]

    flash = train.flash_attention
    attn_flops = 4.0 * tokens * s * a * d / t * (0.5 if flash else 1.0)
    attn_f = attn_flops / (hw.peak_flops_per_s * hw.attention_efficiency)
    scores_s = 0.0 if flash else 5 * 2.0 * c.mbs * a * s * s / t / hw.hbm_bytes_per_s
    attn_f = attn_f + scores_s
    attn_b = attn_f * (2.5 if flash else 2.0)
    act_width = 2 * f if model.ffn_kind is FfnKind.GELU else 3 * f
    mem_tokens = (4 * h + 6 * h + (5 * h if train.dropout else 0) + act_width) * el
    elem_f = tokens * mem_tokens / t / hw.hbm_bytes_per_s
    forward_s = fwd + attn_f + elem_f
    backward_s = bwd + attn_b + 2 * elem_f
    extra = np.stack([np.zeros(len(c)), attn_f, forward_s], axis=1)

    acts = activation_bytes(model, train, c)
    return BlockFigures(forward_s, backward_s, comm, extra, acts, block_params(model))


def activation_bytes(model: ModelSpec, train: AutoTrainingSpec, c: Candidates) -> np.ndarray:
    """Bytes one block keeps per micro-batch on one chip, per recomputation
    mode (columns none, selective, full); module docstring."""
    el = train.dtype.num_bytes
    s, h, a, d = train.sequence_length, model.hidden_size, model.num_heads, model.head_dim
    f = model.ffn_size
    t = c.tp.astype(float)
    tokens = (c.mbs * s).astype(float)
    flash = train.flash_attention
    kv = model.kv_heads
    drop = 1 if train.dropout else 0
    # Per token: the norm's input, QKV's input, Q, K and V, the projection's
    # input, the dropout mask (Korthikanti et al. 2022 section 4.1).
    attn_bytes = 2 * el * h + el * a * d + 2 * el * kv * d + el * a * d + drop * h
    if model.ffn_kind is FfnKind.GELU:
        mlp_bytes = el * h + 2 * el * f + drop * h
    else:
        mlp_bytes = el * h + 3 * el * f + drop * h
    per_token = attn_bytes + el * h + mlp_bytes  # the second norm's input
    # Unfused core: softmax output, and with dropout its mask and output.
    scores = 0.0 if flash else (el + drop * (1 + el)) * a * s
    none = tokens * (per_token + scores) / t
    selective = tokens * per_token / t
    full = tokens * el * h / t
    acts = np.stack([none, selective, full], axis=1)
    return acts


def _stage_layers(layers: int, pp: int, v: int) -> tuple[int, int, int, int]:
    """Blocks on the first, last and fullest middle stage under the even
    split (extra blocks on the last chunks, like the balancer's baseline),
    and the most blocks any one chunk holds."""
    base, extra = divmod(layers, pp * v)
    per_chunk = [base + (1 if ch >= pp * v - extra else 0) for ch in range(pp * v)]
    per_stage = [sum(per_chunk[st::pp]) for st in range(pp)]
    middle = max(per_stage[1:-1]) if pp > 2 else 0
    return per_stage[0], per_stage[-1], middle, max(per_chunk)


def price(model: ModelSpec, hw: JobHardware, train: AutoTrainingSpec, c: Candidates) -> Priced:
    """Step time, components and memory of every candidate (module docstring)."""
    el = train.dtype.num_bytes
    g_el = 4 if train.fp32_gradients else el
    s, h = train.sequence_length, model.hidden_size
    vocab = model.vocab_size or 0
    n = len(c)
    t = c.tp.astype(float)
    pp, dp, v = c.pp, c.dp, c.v
    m = (train.global_batch_sequences // (dp * c.mbs)).astype(float)
    tokens = (c.mbs * s).astype(float)
    blk = block_figures(model, hw, train, c)
    rec = blk.recompute_extra_s[np.arange(n), c.recompute]

    first_n, last_n, mid_n = _split_counts(model, c)

    head_s, tail_fwd, tail_bwd = end_block_seconds(model, hw, train, c)
    tail_s = tail_fwd + tail_bwd
    pp_bw, pp_launch, pp_step = _links(hw, c.tp * dp, np.where(pp > 1, 2, 1))
    msg_s = np.where(pp > 1, pp_launch + pp_step + tokens * h * el / t / pp_bw, 0.0)
    pp_comm = 2 * v * msg_s

    per_block = blk.forward_s + blk.backward_s + rec
    w_first = first_n * per_block + head_s + pp_comm + np.where(pp == 1, tail_s, 0.0)
    w_last = last_n * per_block + tail_s + pp_comm
    w_mid = mid_n * per_block + pp_comm
    w_max = np.maximum(np.maximum(w_first, np.where(pp > 1, w_last, 0.0)), w_mid)
    w_sum = model.num_layers * per_block + head_s + tail_s + pp * pp_comm
    pipe_s = m * w_max + (w_sum - w_max) / v

    # Per-chip parameters on the first (embedding) and last (output) stage.
    p_first = (first_n * blk.block_params + vocab * h) / t
    p_last = (last_n * blk.block_params + vocab * h + h) / t
    p_max = np.maximum(p_first, np.where(pp > 1, p_last, 0.0))
    dp_bw, dp_launch, dp_step = _links(hw, c.tp, dp)
    ring = np.where(dp > 1, (dp - 1) / dp, 0.0)
    lat = np.where(dp > 1, dp_launch + (dp - 1) * dp_step, 0.0)
    grad_bytes = p_max * g_el
    param_bytes = p_max * el
    z = c.zero
    dp_time = np.where(
        z == 0,
        2 * ring * grad_bytes / dp_bw + 2 * lat,
        ring * (grad_bytes + param_bytes) / dp_bw + 2 * lat,
    )
    stage_blocks = np.maximum(np.maximum(first_n, last_n), 1.0)
    if train.overlap_data_parallel:
        window = stage_blocks * (blk.backward_s + rec)
        dp_exposed = np.maximum(dp_time - window, dp_time / stage_blocks)
    else:
        dp_exposed = dp_time
    # ZeRO-3 gathers one block's parameters at a time: a ring's latency per block.
    gather_s = ring * param_bytes / dp_bw + lat * stage_blocks
    zero3 = np.where(
        z == 3,
        m
        * (
            np.maximum(gather_s - stage_blocks * blk.forward_s, 0.0)
            + np.maximum(gather_s - stage_blocks * (blk.backward_s + rec), 0.0)
        ),
        0.0,
    )
    dp_exposed = dp_exposed + zero3
    shard = p_max / np.where(z >= 1, dp, 1)
    opt_s = shard * (26 + g_el) / hw.hbm_bytes_per_s

    busy = m * w_max
    scale = np.where(w_max > 0, busy / w_max, 0.0)
    # Components of the fullest stage's busy time, in proportion to its parts.
    blocks_on_max = np.where(w_max == w_first, first_n, np.where(w_max == w_last, last_n, mid_n))
    comp = {
        "compute_s": scale
        * (
            blocks_on_max * (blk.forward_s + blk.backward_s - blk.tp_comm_s)
            + np.where(w_max == w_first, head_s, 0.0)
            + np.where((w_max == w_last) | (pp == 1), tail_s, 0.0)
        ),
        "tp_comm_s": scale * blocks_on_max * blk.tp_comm_s,
        "recompute_s": scale * blocks_on_max * rec,
        "pp_comm_s": scale * pp_comm,
    }
    comp["bubble_s"] = pipe_s - sum(comp.values())
    comp["dp_comm_s"] = dp_exposed
    comp["optimizer_s"] = opt_s
    step = pipe_s + dp_exposed + opt_s

    first_bytes, last_bytes = memory_bytes(model, hw, train, c)
    return Priced(step, comp, first_bytes, last_bytes, hw.usable_bytes)


def end_block_seconds(
    model: ModelSpec, hw: JobHardware, train: AutoTrainingSpec, c: Candidates
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per micro-batch on one chip: the head's forward (embedding lookup,
    `T h` elements written), the tail's forward and backward (output GEMM
    `2 T h V / t` FLOPs forward, twice that backward; the loss reads and
    writes the fp32 logits: one pass forward, two backward)."""
    el = train.dtype.num_bytes
    h, vocab = model.hidden_size, model.vocab_size or 0
    t = c.tp.astype(float)
    tokens = (c.mbs * train.sequence_length).astype(float)
    head = tokens * h * el / t / hw.hbm_bytes_per_s
    gemm = 2.0 * tokens * h * vocab / t / (hw.peak_flops_per_s * hw.gemm_efficiency)
    loss = tokens * vocab * 4 / t / hw.hbm_bytes_per_s
    return head, gemm + loss, 2 * gemm + 2 * loss


def _split_counts(model: ModelSpec, c: Candidates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks on the first, last and fullest middle stage of each candidate."""
    split = {
        key: _stage_layers(model.num_layers, *key)
        for key in {(int(a), int(b)) for a, b in zip(c.pp, c.v, strict=True)}
    }
    rows = [split[(int(a), int(b))] for a, b in zip(c.pp, c.v, strict=True)]
    arr = np.array(rows, dtype=float).reshape(-1, 4)
    return arr[:, 0], arr[:, 1], arr[:, 2]


def memory_bytes(
    model: ModelSpec, hw: JobHardware, train: AutoTrainingSpec, c: Candidates
) -> tuple[np.ndarray, np.ndarray]:
    """Per-chip bytes on the first and the last stage (0 when pp = 1):
    parameters, gradients and optimizer state by ZeRO stage, activations of
    the micro-batches alive, the full-recomputation transient and the
    logits (module docstring). Needs no timing, so it prunes before pricing."""
    el = train.dtype.num_bytes
    g_el = 4 if train.fp32_gradients else el
    h, vocab, n = model.hidden_size, model.vocab_size or 0, len(c)
    t, pp, dp, v, z = c.tp.astype(float), c.pp, c.dp, c.v, c.zero
    m = (train.global_batch_sequences // (dp * c.mbs)).astype(float)
    first_n, last_n, _ = _split_counts(model, c)
    p_first = (first_n * block_params(model) + vocab * h) / t
    p_last = (last_n * block_params(model) + vocab * h + h) / t
    per_param = (
        el / np.where(z >= 3, dp, 1)
        + g_el / np.where(z >= 2, dp, 1)
        + 12.0 / np.where(z >= 1, dp, 1)
    )
    acts_all = activation_bytes(model, train, c)
    act = acts_all[np.arange(n), c.recompute]
    alive = np.minimum(pp, m) * np.where(v > 1, 1 + (pp - 1) / (pp * v), 1.0)
    transient = np.where(c.recompute == 2, acts_all[:, 0], 0.0)
    logits = (c.mbs * train.sequence_length).astype(float) * vocab / t * (4 + el)
    first = p_first * per_param + first_n * act * alive + transient + np.where(pp == 1, logits, 0.0)
    last = p_last * per_param + last_n * act + transient + logits
    return first, np.where(pp > 1, last, 0.0)


def _links(
    hw: JobHardware, stride: np.ndarray, size: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bandwidth, launch and per-step seconds of groups of `size` chips at
    `stride` (JobHardware.group_link, vectorised)."""
    inside = stride * size <= hw.chips_per_node
    bw = np.where(inside, hw.intra_node_bytes_per_s, hw.inter_node_bytes_per_s)
    launch = np.where(inside, hw.intra_node_launch_s, hw.inter_node_launch_s)
    step = np.where(inside, hw.intra_node_step_s, hw.inter_node_step_s)
    return bw, launch, step


def model_flops_per_step(model: ModelSpec, train: AutoTrainingSpec) -> float:
    """Model FLOPs of one step (no recomputation): `6 N` per token over the
    FC and output weights plus the attention core's `12 s a d` per token and
    block (causal not discounted, the usual MFU convention)."""
    tokens = train.global_batch_sequences * train.sequence_length
    weights = model.num_layers * block_params(model) + (model.vocab_size or 0) * model.hidden_size
    attn = 12.0 * train.sequence_length * model.num_heads * model.head_dim * model.num_layers
    return tokens * (6.0 * weights + attn)
