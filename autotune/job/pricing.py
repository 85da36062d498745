"""Closed-form step time and memory of every candidate at once (numpy).

The per-block terms use the whole-step model's formulas (cost_models:
transformer_flops, elementwise, activations) and hardware models (every GEMM
by the calibration's GEMM model: its efficiency curve bounded by the chip's
peak and HBM, `SearchHardware.gemm`; every ring collective by
`ring_collective_s` with the calibrated size regimes), evaluated on arrays of
candidates. Per block and micro-batch on one chip (tokens `T = b s`, tensor
chips `t`; every activation split over the group, as sequence parallelism
and MeshSlice's 2D split do):

- FC layers: :func:`autotune.job.fc_pricing.fc_times` (cached per mesh and T);
- attention core: `4 b nh s^2 d / t` FLOPs forward, halved by a causal flash
  kernel at the attention rate with a 2.5x backward
  (`FLASH_BACKWARD_GEMMS / 2`), or unfused batched GEMMs by the GEMM model
  (job/block.py `unfused_attention_forward_s`) with a 2x backward;
- memory-bound ops (norms, residual adds, dropouts, rotary, the FFN
  activation, and the unfused core's softmax and dropout) over HBM:
  `elementwise_s` with the bytes of `block_elementwise_ops`;
- recomputation adds to the backward: selective the unfused core's forward
  with its softmax and dropout (nothing under flash, whose kernel
  recomputes the scores anyway), full the block's whole forward;
- head (first stage): embedding lookup, `T h` elements written; tail (last
  stage): output GEMMs (`2 T h V / t` FLOPs forward, twice that backward; job/block.py
  `logits_gemm_s` on `T / rows` tokens and `V / cols` of the vocabulary) and the fp32
  cross-entropy (`loss_bytes_per_token` over the vocabulary shard);
- pipeline: each stage sends its `T h / t` activation forward and its
  gradient back, per chunk and micro-batch, on the critical path (a
  send-recv ring of two: one launch, one step and the bytes over the link
  between stages);
- 1F1B step over the stage times `W_s` (pipeline.md section 2, extended to
  `v` chunks): `m * max_s W_s + (sum_s W_s - max_s W_s) / v`;
- data parallel over the replicas' network tier (ring: `launch + (dp-1)
  (step + bytes / dp / bw)`, per size regime): ZeRO 0 all-reduces the gradients, ZeRO 1-2
  reduce-scatter them and all-gather the parameters, ZeRO 3 also gathers the
  parameters before every micro-batch's forward and backward, block by block
  (one ring per block; hidden behind that micro-batch's compute when
  shorter). With overlap, gradient traffic hides behind the last
  micro-batch's backward except the last block's share;
- optimizer: Adam over the local shard, `adam_step_bytes_per_param` over HBM.

Memory per chip, first and last stage (the largest): parameters (2 bytes),
gradients (`g`), fp32 master and Adam moments (12), divided by ZeRO stage;
activations per block and micro-batch per recomputation mode
(`layer_activation_bytes_per_token`: Korthikanti et al. 2022 Table 2 rebuilt
term by term for GQA, SwiGLU, flash and dropout), times the micro-batches
alive on the first stage (`min(pp, m)`, times `1 + (pp-1)/(pp v)` when
interleaved, their section 4.2.3); full recomputation keeps each block's
input plus one block's activations during its backward; the last stage keeps
the logits (fp32 and 16-bit copies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.job.block import block_shape, logits_gemm_s, unfused_attention_forward_s
from autotune.job.candidates import Candidates
from autotune.job.cluster_view import SearchHardware
from autotune.job.fc_pricing import fc_gemms, fc_times
from autotune.specs.job_search import RECOMPUTE_MODES, AutoTrainingSpec
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding
from cost_models import ring_collective_s
from cost_models.activations import layer_activation_bytes_per_token
from cost_models.elementwise import (
    adam_step_bytes_per_param,
    block_elementwise_ops,
    elementwise_s,
    loss_bytes_per_token,
)
from cost_models.transformer_flops import FLASH_BACKWARD_GEMMS, attention_core_forward_flops

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
    micro_batches: np.ndarray

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
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates
) -> BlockFigures:
    """Per-block times and activations (module docstring), vectorised, with
    the whole-step model's formulas (cost_models.transformer_flops,
    cost_models.elementwise, cost_models.activations)."""
    el = train.dtype.num_bytes
    s, a, d = train.sequence_length, model.num_heads, model.head_dim
    t = c.tp.astype(float)
    tokens = (c.mbs * s).astype(float)
    keys = np.stack([c.rows, c.cols, c.mbs], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    overlap = train.overlap_tensor_backward
    per_key = [fc_times(model, hw, int(r), int(k), int(b) * s, el, overlap) for r, k, b in uniq]
    fwd = np.array([x.forward_s for x in per_key])[inverse]
    bwd = np.array([x.backward_s for x in per_key])[inverse]
    comm = np.array([x.forward_comm_s + x.backward_comm_s for x in per_key])[inverse]

    flash = train.flash_attention
    if flash:
        core = attention_core_forward_flops(c.mbs.astype(float), s, a, d, causal=True) / t
        attn_f = core / (hw.peak_flops_per_s * hw.attention_efficiency)
        attn_b = FLASH_BACKWARD_GEMMS / 2.0 * attn_f
    else:
        # Batched s x s x d GEMMs by the GEMM model, no causal skipping.
        attn_f = unfused_attention_forward_s(hw.gemm, c.mbs, a, s, d, t)
        attn_b = 2.0 * attn_f
    ops = _elementwise_ops(model, train)
    ew_f = elementwise_s(ops, tokens, t, True, hw.hbm_bytes_per_s, forward=True)
    ew_b = elementwise_s(ops, tokens, t, True, hw.hbm_bytes_per_s, forward=False)
    forward_s = fwd + attn_f + ew_f
    backward_s = bwd + attn_b + ew_b
    if flash:
        # A flash kernel recomputes the scores in its backward anyway.
        selective = np.zeros(len(c))
    else:
        core_ops = tuple(op for op in ops if op.name in ("softmax", "attention dropout"))
        selective = attn_f + elementwise_s(core_ops, tokens, t, True, hw.hbm_bytes_per_s, True)
    extra = np.stack([np.zeros(len(c)), selective, forward_s], axis=1)
    acts = activation_bytes(model, train, c)
    return BlockFigures(forward_s, backward_s, comm, extra, acts, block_params(model))


def _elementwise_ops(model: ModelSpec, train: AutoTrainingSpec):
    return block_elementwise_ops(
        model.hidden_size,
        model.attention_width,
        model.kv_heads * model.head_dim,
        model.ffn_size,
        model.ffn_kind is FfnKind.SWIGLU,
        model.num_heads,
        train.sequence_length,
        train.dtype.num_bytes,
        train.dropout,
        model.position_encoding is PositionEncoding.ROTARY,
        train.flash_attention,
    )


def activation_bytes(model: ModelSpec, train: AutoTrainingSpec, c: Candidates) -> np.ndarray:
    """Bytes one block keeps per micro-batch on one chip, per recomputation
    mode (columns none, selective, full): the Korthikanti et al. 2022
    inventory (cost_models.activations) with every activation split over
    the tensor group (sequence parallelism, or MeshSlice's 2D split)."""
    shape = block_shape(model, train.sequence_length)
    t = c.tp.astype(float)
    tokens = (c.mbs * train.sequence_length).astype(float)
    cols = [
        tokens
        * layer_activation_bytes_per_token(
            mode,
            shape,
            train.dtype.num_bytes,
            t,
            True,
            train.dropout,
            train.flash_attention,
        )
        for mode in RECOMPUTE_MODES
    ]
    return np.stack(cols, axis=1)


def _stage_layers(layers: int, pp: int, v: int) -> tuple[int, int, int, int]:
    """Blocks on the first, last and fullest middle stage under the even
    split (extra blocks on the last chunks, like the balancer's baseline),
    and the most blocks any one chunk holds."""
    base, extra = divmod(layers, pp * v)
    per_chunk = [base + (1 if ch >= pp * v - extra else 0) for ch in range(pp * v)]
    per_stage = [sum(per_chunk[st::pp]) for st in range(pp)]
    middle = max(per_stage[1:-1]) if pp > 2 else 0
    return per_stage[0], per_stage[-1], middle, max(per_chunk)


def price(model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates) -> Priced:
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
    # One send-recv hop (a ring of two) per transfer; a group of `2` at
    # stride `tp dp` fits in a node when both stages do.
    msg_s = _ring_s(hw, c.tp * dp, np.where(pp > 1, 2, 1), tokens * h * el / t, send=True)
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
    grad_bytes = p_max * g_el
    param_bytes = p_max * el
    z = c.zero
    # Rings of `dp` replicas at stride `tp` (cost_models.data_parallel's
    # traffic): ZeRO 0 reduce-scatters and all-gathers the gradients (an
    # all-reduce), ZeRO 1-3 reduce-scatter them and all-gather the weights.
    grad_ring = _ring_s(hw, c.tp, dp, grad_bytes / dp)
    param_ring = _ring_s(hw, c.tp, dp, param_bytes / dp)
    dp_time = np.where(z == 0, 2 * grad_ring, grad_ring + param_ring)
    stage_blocks = np.maximum(np.maximum(first_n, last_n), 1.0)
    if train.overlap_data_parallel:
        window = stage_blocks * (blk.backward_s + rec)
        dp_exposed = np.maximum(dp_time - window, dp_time / stage_blocks)
    else:
        dp_exposed = dp_time
    # ZeRO-3 gathers one block's parameters at a time: a ring per block.
    gather_s = stage_blocks * _ring_s(hw, c.tp, dp, param_bytes / stage_blocks / dp)
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
    opt_s = shard * adam_step_bytes_per_param(el, g_el) / hw.hbm_bytes_per_s

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
    return Priced(step, comp, first_bytes, last_bytes, hw.usable_bytes, m)


def end_block_seconds(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per micro-batch on one chip: the head's forward (embedding lookup,
    `T h` elements written), the tail's forward and backward (output GEMM
    `2 T h V / t` FLOPs forward, twice that backward; the fp32 cross-entropy
    over the vocabulary shard, cost_models.elementwise.loss_bytes_per_token)."""
    el = train.dtype.num_bytes
    h, vocab = model.hidden_size, model.vocab_size or 0
    t = c.tp.astype(float)
    tokens = (c.mbs * train.sequence_length).astype(float)
    head = tokens * h * el / t / hw.hbm_bytes_per_s
    # Tokens split over the mesh rows, the vocabulary over its columns
    # (all `t` chips under Megatron's `1 x t`), as in the step model.
    gemm_f, gemm_b = logits_gemm_s(hw.gemm, tokens / c.rows, vocab / c.cols, h)
    loss_f, loss_b = loss_bytes_per_token(vocab, el)
    loss = tokens / t / hw.hbm_bytes_per_s
    return head, gemm_f + loss * loss_f, gemm_b + loss * loss_b


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
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates
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


def _ring_s(
    hw: SearchHardware,
    stride: np.ndarray,
    size: np.ndarray,
    shard_bytes: np.ndarray,
    send: bool = False,
) -> np.ndarray:
    """Seconds of one ring collective of `size` chips at `stride` moving
    `shard_bytes` per chip (cost_models.collectives.ring_collective_s, size
    regimes included), on the node's links when the group fits in a node
    (`stride * size <= chips_per_node`), else on the NIC rails
    (SearchHardware.group_link, vectorised); the send-recv links when
    `send`. A group of one costs nothing."""
    inside = stride * size <= hw.chips_per_node
    if send:
        node, nic = hw.intra_node_send_link, hw.inter_node_send_link
    else:
        node, nic = hw.intra_node_link, hw.inter_node_link
    return np.where(
        inside,
        ring_collective_s(node, size, shard_bytes),
        ring_collective_s(nic, size, shard_bytes),
    )


def model_flops_per_step(model: ModelSpec, train: AutoTrainingSpec) -> float:
    """Model FLOPs of one step (no recomputation): `6 N` per token over the
    FC and output weights plus the attention core's `12 s a d` per token and
    block (causal not discounted, the usual MFU convention)."""
    tokens = train.global_batch_sequences * train.sequence_length
    weights = model.num_layers * block_params(model) + (model.vocab_size or 0) * model.hidden_size
    attn = 12.0 * train.sequence_length * model.num_heads * model.head_dim * model.num_layers
    return tokens * (6.0 * weights + attn)
