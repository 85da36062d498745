"""One block and the two ends (embedding; final norm, logits and loss) for
one micro-batch on one chip: times and the bytes they keep."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from autotune.job.fc import FcTimes
from autotune.job.hardware import JobHardware
from autotune.job.result import LayerTimes
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding
from autotune.specs.training import AttentionKernel, Recompute, TrainingSpec
from cost_models import Axis, CollectiveOp, ComputeModel, ring_collective_s
from cost_models.activations import BlockShape, layer_activation_bytes_per_token
from cost_models.elementwise import (
    block_elementwise_ops,
    elementwise_s,
    loss_bytes_per_token,
)
from cost_models.transformer_flops import (
    FLASH_BACKWARD_GEMMS,
    attention_core_forward_flops,
    block_matrix_params,
)


@dataclass(frozen=True)
class StepShape:
    """The quantities every term below shares."""

    tp: int
    element_bytes: int
    grad_bytes: int
    sequence_parallel: bool
    flash: bool
    tokens: int  # per micro-batch
    vocab_split: int  # chips the vocabulary is split over (a ring)
    token_split: int  # chips the tokens are split over at the ends


def step_shape(
    training: TrainingSpec, tp: int, mesh_rows: int, mesh_cols: int, meshslice: bool
) -> StepShape:
    """Shared inputs. MeshSlice splits every activation over the whole mesh,
    so it behaves as sequence-parallel for the memory-bound ops; its ends
    split the vocabulary over the feature (column) axis and the tokens over
    the row axis. Megatron splits the vocabulary over all `tp` chips."""
    e = training.dtype.num_bytes
    return StepShape(
        tp=tp,
        element_bytes=e,
        grad_bytes=4 if training.fp32_gradients else e,
        sequence_parallel=True if meshslice else training.sequence_parallel,
        flash=training.attention is AttentionKernel.FLASH,
        tokens=training.tokens_per_micro_batch,
        vocab_split=mesh_cols if meshslice else tp,
        token_split=mesh_rows if meshslice else 1,
    )


def block_shape(model: ModelSpec, sequence_length: int) -> BlockShape:
    """The model's block, at `sequence_length` tokens per sequence, as the
    activation inventory sees it."""
    return BlockShape(
        hidden=model.hidden_size,
        num_heads=model.num_heads,
        num_kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        ffn=model.ffn_size,
        gated=model.ffn_kind is FfnKind.SWIGLU,
        seq_len=sequence_length,
    )


def unfused_attention_forward_s(
    gemm: ComputeModel,
    sequences: ArrayLike,
    num_heads: int,
    seq_len: int,
    head_dim: int,
    tp: ArrayLike,
) -> np.ndarray:
    """Forward seconds on one chip of the unfused attention core: for each
    of the `sequences x num_heads / tp` heads it holds, the score GEMM
    `Q K^T` (`s x s x d`) and the context GEMM `P V` (`s x d x s`), each
    priced by the GEMM model (efficiency curve and roofline)::

        t = b nh / tp * (gemm_s(s, s, d) + gemm_s(s, d, s))

    No causal skipping (`4 b nh s^2 d / tp` FLOPs, Korthikanti et al. 2022
    section 4.1). Vectorised over `sequences` and `tp`."""
    per_head = float(
        gemm.gemm_s(seq_len, seq_len, head_dim) + gemm.gemm_s(seq_len, head_dim, seq_len)
    )
    heads = np.asarray(sequences, dtype=float) * num_heads / np.asarray(tp, dtype=float)
    return heads * per_head


def logits_gemm_s(
    gemm: ComputeModel, tokens: ArrayLike, vocab_shard: ArrayLike, hidden: int
) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds on one chip of the output layer's GEMMs
    for `tokens` tokens against a `hidden x vocab_shard` weight shard: the
    logits `tokens x vocab_shard x hidden`, then backward-data
    `tokens x hidden x vocab_shard` and backward-weight
    `hidden x vocab_shard x tokens`, each priced by the GEMM model
    (efficiency curve and roofline; `2 T h V` FLOPs each). Vectorised."""
    n = np.asarray(tokens, dtype=float)
    vs = np.asarray(vocab_shard, dtype=float)
    forward = gemm.gemm_s(n, vs, hidden)
    backward = gemm.gemm_s(n, hidden, vs) + gemm.gemm_s(hidden, vs, n)
    return forward, backward


def layer_times(
    model: ModelSpec, training: TrainingSpec, fc: FcTimes, hw: JobHardware, sh: StepShape
) -> LayerTimes:
    """Forward and backward seconds of one block for one micro-batch.

    Attention core: flash (causal half, `FLOPs / attention rate`, backward
    2.5 forwards with the recomputation of the scores inside) or unfused
    (batched `s x s x d` GEMMs at the GEMM rate, no causal skipping, backward
    two forwards; softmax and dropout as memory-bound ops). Recomputation
    adds to the backward: selective the unfused core's forward (a flash
    kernel recomputes anyway), full the block's whole forward.
    """
    b, s = training.micro_batch_sequences, training.sequence_length
    nh, d = model.num_heads, model.head_dim
    if sh.flash:
        flops = attention_core_forward_flops(b, s, nh, d, causal=True) / sh.tp
        attn_f = flops / hw.attention_flops_per_s
        attn_b = FLASH_BACKWARD_GEMMS / 2.0 * attn_f
    else:
        attn_f = float(unfused_attention_forward_s(hw.gemm, b, nh, s, d, sh.tp))
        attn_b = 2.0 * attn_f
    ops = block_elementwise_ops(
        model.hidden_size,
        model.attention_width,
        model.kv_heads * d,
        model.ffn_size,
        model.ffn_kind is FfnKind.SWIGLU,
        nh,
        s,
        sh.element_bytes,
        training.dropout,
        model.position_encoding is PositionEncoding.ROTARY,
        sh.flash,
    )
    args = (sh.tokens, sh.tp, sh.sequence_parallel, hw.hbm_bytes_per_s)
    ew_f = elementwise_s(ops, *args, forward=True)
    ew_b = elementwise_s(ops, *args, forward=False)
    if training.recompute is Recompute.FULL:
        recompute = fc.forward_s + attn_f + ew_f
    elif training.recompute is Recompute.SELECTIVE and not sh.flash:
        core_ops = tuple(op for op in ops if op.name in ("softmax", "attention dropout"))
        recompute = attn_f + elementwise_s(core_ops, *args, forward=True)
    else:
        recompute = 0.0
    return LayerTimes(
        fc_forward_s=fc.forward_s,
        fc_backward_s=fc.backward_s,
        fc_exposed_comm_s=fc.exposed_comm_s,
        attention_forward_s=attn_f,
        attention_backward_s=attn_b,
        elementwise_forward_s=ew_f,
        elementwise_backward_s=ew_b,
        recompute_s=recompute,
    )


def layer_params_per_chip(model: ModelSpec, tp: int) -> float:
    """FC weights of a block split over `tp` chips, plus its two norm weight
    vectors (replicated)."""
    p = block_matrix_params(
        model.hidden_size,
        model.num_heads,
        model.kv_heads,
        model.head_dim,
        model.ffn_size,
        model.ffn_kind is FfnKind.SWIGLU,
    )
    return p / tp + 2 * model.hidden_size


def layer_activation_bytes(model: ModelSpec, training: TrainingSpec, sh: StepShape) -> float:
    """Bytes one block keeps per micro-batch on one chip (Korthikanti et al.
    2022 inventory, cost_models.activations)."""
    per_token = layer_activation_bytes_per_token(
        training.recompute.value,
        block_shape(model, training.sequence_length),
        sh.element_bytes,
        sh.tp,
        sh.sequence_parallel,
        training.dropout,
        sh.flash,
    )
    return per_token * sh.tokens


@dataclass(frozen=True)
class Ends:
    """Embedding (first stage) and final norm + logits + loss (last stage)
    per micro-batch: seconds, parameters per chip, transient bytes."""

    head_forward_s: float
    head_backward_s: float
    head_params: float
    tail_forward_s: float
    tail_backward_s: float
    tail_params: float
    tail_transient_bytes: float


def ends(model: ModelSpec, training: TrainingSpec, hw: JobHardware, sh: StepShape) -> Ends:
    """The vocabulary-sharded ends (Megatron-LM's vocab-parallel embedding
    and cross-entropy):

    - embedding: every chip looks up its vocabulary shard for its tokens
      (`2 e h` bytes per token, plus `2 e h` to add learned positions), then
      the partial sums are reduce-scattered over the vocabulary ring
      (all-gathered in backward); the backward scatters the gradient into
      its shard (`3 e h / ring`).
    - tail: final norm, all-gather of its output, the `T x h x V/t` logits
      GEMM (forward, backward-data, backward-weight at the GEMM rate), the
      gradient reduce-scatter, and the fp32 cross-entropy over the logits.
    Without a vocabulary size both are zero.
    """
    v, h, e, t = model.vocab_size, model.hidden_size, sh.element_bytes, sh.tp
    if v is None:
        return Ends(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    n = sh.tokens / sh.token_split  # tokens one chip handles at the ends
    ring = sh.vocab_split
    bw = hw.hbm_bytes_per_s
    learned = model.position_encoding is PositionEncoding.LEARNED
    comm = 0.0
    if ring > 1:
        shard = n * h * e / ring
        rs_link = hw.comm.link(CollectiveOp.REDUCE_SCATTER, Axis.COL)
        rs = float(ring_collective_s(rs_link, ring, shard))
        ag = float(ring_collective_s(hw.comm.link(CollectiveOp.ALL_GATHER, Axis.COL), ring, shard))
        comm = rs + ag
    head_f = n * (2 + (2 if learned else 0)) * e * h / bw + (comm / 2)
    head_b = n * 3 * e * h / ring / bw + (comm / 2)
    norm_split = t if sh.sequence_parallel else 1
    vs = v / ring
    logits_f, logits_b = (float(x) for x in logits_gemm_s(hw.gemm, n, vs, h))
    loss_f, loss_b = loss_bytes_per_token(v, e)
    norm_tokens = sh.tokens / norm_split
    tail_f = norm_tokens * 2 * e * h / bw + comm / 2 + logits_f + n * loss_f / ring / bw
    tail_b = norm_tokens * 3 * e * h / bw + comm / 2 + logits_b + n * loss_b / ring / bw
    return Ends(
        head_forward_s=head_f,
        head_backward_s=head_b,
        head_params=v * h / ring + (training.sequence_length * h if learned else 0),
        tail_forward_s=tail_f,
        tail_backward_s=tail_b,
        tail_params=v * h / ring + h,
        tail_transient_bytes=n * vs * (e + 4.0),
    )
