"""One transformer block and the two ends of the model (embedding; final
norm, logits and loss) for one micro-batch on one chip, per tensor mesh and
micro-batch size: seconds, and the bytes they keep.

Per block (tokens `T = b s` per micro-batch, `t` tensor-parallel chips):

- FC layers: :mod:`autotune.job.fc` (MeshSlice plan or Megatron 1D).
- Attention core: a flash kernel costs `4 b nh s^2 d / 2 / t` FLOPs forward
  (the causal half, cost_models.transformer_flops; a sliding-window
  block its windowed share of them at the rate of a `w`-token kernel,
  averaged over the model's windowed and full blocks) at the attention rate
  (the calibration's fitted curve in the sequence length, else the
  cluster's figure, else the GEMM rate) and
  2.5 forwards of FLOPs backward (`FLASH_BACKWARD_GEMMS / 2`), at the
  backward kernel's own fitted rate when the calibration has one (else the
  forward's); unfused, the batched
  `s x s x d` GEMMs run by the GEMM model with a 2x backward.
- Memory-bound ops (norms, residual adds, dropouts, rotary, the FFN
  activation, the unfused core's softmax and dropout) over HBM:
  cost_models.elementwise with its per-token bytes.
- Recomputation adds to the backward: selective the unfused core's forward
  with its softmax and dropout (nothing under flash, whose kernel recomputes
  the scores anyway) and, under MLA, the two up-projections (Megatron-
  Core's `mla_up_proj`, which frees Q, K and V), full the block's whole
  forward.
- Activations kept per recomputation mode: the Korthikanti et al. 2022
  inventory (cost_models.activations); under MeshSlice every activation is
  split over the mesh (sequence-parallel in effect).
- Context parallelism over `cp` chips: every chip holds `s / cp` tokens of
  each sequence (load-balanced causal chunks), so the FC layers, the
  memory-bound ops and the activations see `b s / cp` tokens, the attention
  core does `1 / cp` of the sequence's causal work, and the key/value
  exchange (cost_models.context_parallel) adds what the attention does not
  hide: ring attention (p2p) one block send per step overlapped with that
  step's attention, backward the keys/values and their gradients; the
  all-gather variant gathers the keys/values before the attention (and
  reduce-scatters their gradients after its backward), exposed; Ulysses
  (a2a) four all-to-alls around the attention per pass, exposed.
- An FP8 recipe (cost_models.fp8): the FC GEMMs run at the FP8 rate
  (job/fc.py with the FP8 GEMM model), every FC input is cast to FP8 in
  the forward and every output gradient in the backward (memory-bound, the
  chip's `1 / t` share of each), and the FC inputs kept for the backward
  are their FP8 column-wise copies (recomputation none or selective).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from autotune.errors import InputError
from autotune.hardware.layout import AxisLayout
from autotune.job.fc import FcBlock
from autotune.job.hardware import HardwareView
from autotune.plan.dataflow import GemmPass, Stationary, table1
from autotune.plan.layers import FFN_GATE, block_fc_layers, planned_ffn_size
from autotune.specs.job import RECOMPUTE_MODES, TrainingInput
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding
from autotune.specs.training import AttentionKernel, ContextComm, FcAlgorithm, Fp8Recipe
from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, MeshShape, ring_collective_s
from cost_models.activations import (
    BlockShape,
    layer_activation_bytes_per_token,
    mla_latent_elements,
)
from cost_models.context_parallel import (
    attention_rate_flops_per_s,
    attention_rate_length,
    kv_block_bytes,
    ring_attention_exposed_s,
    ulysses_all_to_all_bytes,
)
from cost_models.elementwise import block_elementwise_ops, elementwise_s, loss_bytes_per_token
from cost_models.fp8 import fp8_cast_bytes_per_element, fp8_saved_input_bytes_per_element
from cost_models.meshslice import meshslice_lower_bound_s
from cost_models.transformer_flops import (
    FLASH_BACKWARD_GEMMS,
    attention_core_forward_flops,
    windowed_attention_share,
)


def block_shape(model: ModelSpec, sequence_length: int) -> BlockShape:
    """The model's block, at `sequence_length` tokens per sequence, as the
    activation inventory sees it."""
    mla = model.mla
    return BlockShape(
        hidden=model.hidden_size,
        num_heads=model.num_heads,
        num_kv_heads=model.kv_heads,
        head_dim=model.head_dim,
        ffn=planned_ffn_size(model),
        gated=model.ffn_kind is FfnKind.SWIGLU,
        seq_len=sequence_length,
        value_head_dim=None if mla is None else mla.v_head_dim,
        latent_elements=0
        if mla is None
        else mla_latent_elements(mla.q_lora_rank, mla.kv_lora_rank, mla.qk_rope_head_dim),
    )


def flash_attention_s(hw: HardwareView, flops: float, length: float) -> tuple[float, float]:
    """(forward, backward) seconds of a fused attention kernel doing `flops`
    forward FLOPs at the rate of rate length `length` (cost_models.
    context_parallel.attention_rate_flops_per_s): the forward at the
    attention rate, the backward `FLASH_BACKWARD_GEMMS / 2` forwards of
    FLOPs at the backward kernel's own fitted rate when the calibration has
    one, else at the forward's. Units: FLOPs, tokens, seconds."""
    rate = attention_rate_flops_per_s(
        length, hw.attention_flops_per_s, hw.attention_seq_half, hw.attention_max_seq
    )
    forward = flops / float(rate)
    backward = FLASH_BACKWARD_GEMMS / 2.0 * forward
    if hw.attention_backward_flops_per_s is not None:
        rate_b = attention_rate_flops_per_s(
            length,
            hw.attention_backward_flops_per_s,
            hw.attention_backward_seq_half,
            hw.attention_backward_max_seq,
        )
        backward = FLASH_BACKWARD_GEMMS / 2.0 * flops / float(rate_b)
    return forward, backward


def mla_up_projection_forward_s(
    model: ModelSpec, compute: ComputeModel, tokens: float, tp: int
) -> float:
    """Forward seconds on one chip of multi-head latent attention's two
    up-projections, which selective recomputation re-runs (Megatron-Core's
    `mla_up_proj`; cost_models.activations): every token's query latent
    to its `nh / t` heads' queries and the key/value latent to their keys
    and values, each a column-parallel GEMM in the FC GEMM model::

        t = gemm_s(T, nh d_qk / t, r_q) + gemm_s(T, nh (d_nope + d_v) / t, r_kv)

    (`r_q = h` without query compression). The rotary embedding's
    re-application is memory-bound and left out. Zero without MLA. Units:
    seconds."""
    mla = model.mla
    if mla is None:
        return 0.0
    nh = model.num_heads
    r_q = mla.q_lora_rank or model.hidden_size
    q = compute.gemm_s(tokens, nh * mla.qk_head_dim / tp, r_q)
    kv = compute.gemm_s(tokens, nh * (mla.qk_nope_head_dim + mla.v_head_dim) / tp, mla.kv_lora_rank)
    return float(q + kv)


def unfused_attention_forward_s(
    gemm: ComputeModel,
    sequences: ArrayLike,
    num_heads: int,
    seq_len: int,
    head_dim: int,
    tp: ArrayLike,
) -> np.ndarray:
    """Forward seconds on one chip of the unfused attention core: over the
    `sequences x num_heads / tp` heads it holds, the score GEMMs `Q K^T`
    (`s x s x d`) and the context GEMMs `P V` (`s x d x s`), each product
    one strided-batched kernel over the heads (Megatron-LM's unfused core
    runs `torch.baddbmm` and `torch.bmm` on `[b np, s, d]` tensors), priced
    by the GEMM model (its roofline; with tiles the heads share the waves
    and one launch)::

        t = gemm_s(s, s, d, batch=b nh / tp) + gemm_s(s, d, s, batch=b nh / tp)

    No causal skipping (`4 b nh s^2 d / tp` FLOPs, Korthikanti et al. 2022
    section 4.1). Vectorised over `sequences` and `tp`."""
    heads = np.asarray(sequences, dtype=float) * num_heads / np.asarray(tp, dtype=float)
    return gemm.gemm_s(seq_len, seq_len, head_dim, heads) + gemm.gemm_s(
        seq_len, head_dim, seq_len, heads
    )


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


@dataclass(frozen=True)
class BlockFigures:
    """One block, one micro-batch, one chip (seconds, bytes). Recomputation
    modes are indexed as RECOMPUTE_MODES (none, selective, full)."""

    fc: FcBlock
    attention_forward_s: float
    attention_backward_s: float
    elementwise_forward_s: float
    elementwise_backward_s: float
    recompute_s: tuple[float, float, float]
    activation_bytes: tuple[float, float, float]
    params_per_chip: float
    #: context parallelism: the key/value exchange the attention does not hide
    context_forward_s: float = 0.0
    context_backward_s: float = 0.0
    #: context parallelism: key/value blocks in flight or gathered (bytes)
    context_buffer_bytes: float = 0.0

    @property
    def forward_s(self) -> float:
        """FC + attention core + memory-bound ops + exposed context exchange,
        forward."""
        return (
            self.fc.forward_s
            + self.attention_forward_s
            + self.elementwise_forward_s
            + self.context_forward_s
        )

    @property
    def backward_s(self) -> float:
        """The same backward, without recomputation."""
        return (
            self.fc.backward_s
            + self.attention_backward_s
            + self.elementwise_backward_s
            + self.context_backward_s
        )


@dataclass(frozen=True)
class EndFigures:
    """Embedding (first stage) and final norm + logits + loss (last stage)
    per micro-batch on one chip: seconds, parameters, transient bytes."""

    head_forward_s: float
    head_backward_s: float
    head_params: float
    tail_forward_s: float
    tail_backward_s: float
    tail_params: float
    tail_transient_bytes: float
    #: the part of the tail figures that is the multi-token-prediction
    #: modules' `2h -> h` projections (they run with the MTP blocks, on
    #: the loss's stage unless the layout puts the blocks standalone)
    mtp_projection_forward_s: float = 0.0
    mtp_projection_backward_s: float = 0.0
    mtp_projection_params: float = 0.0


def fc_lower_bounds(
    model: ModelSpec,
    training: TrainingInput,
    hw: HardwareView,
    rows: int,
    cols: int,
    tokens: Sequence[float],
) -> list[FcBlock]:
    """For each micro-batch of `tokens` tokens on a chip's share of the
    sequences (`b s / cp`), a block's FC seconds no
    dataflow choice or slice count on the `rows x cols` mesh beats, without
    pricing any: per layer, the least over its layer options (every
    stationary matrix, plain and transposed; Table 1) of the forward GEMM's
    and of the two backward GEMMs' cost_models.meshslice_lower_bound_s (the
    FLOPs at the highest GEMM rate, or the bytes the busiest link must
    carry, whichever is longer); transposes and exposed collectives only
    add. Under Megatron 1D, or when the calibration cannot price the mesh,
    the FLOPs alone: `2 T I O / t` per GEMM at the highest rate. No
    buffers. `T` is the micro-batch's `tokens`."""
    ctx = None
    if training.fc_algorithm is FcAlgorithm.MESHSLICE:
        try:
            ctx = hw.tensor_context(MeshShape(rows, cols))
        except InputError:
            ctx = None
    if ctx is None:
        rate = hw.gemm.fastest_flops_per_s
        out = []
        for n in tokens:
            layers = block_fc_layers(model, n)
            flops = sum(2.0 * x.tokens * x.in_features * x.out_features for x in layers)
            forward = flops / (rows * cols) / rate
            out.append(FcBlock(forward, 2.0 * forward, 0.0, 0.0))
        return out
    mesh = MeshShape(rows, cols)
    # one layer list with every size's token count side by side (Table 1
    # only rearranges the sizes, so its shapes carry the arrays through)
    count = len(tokens)
    forward = np.zeros(count)
    backward = np.zeros(count)
    for layer in block_fc_layers(model, np.asarray(tokens, dtype=float)):  # type: ignore[arg-type]
        best_f = np.full(count, np.inf)
        best_b = np.full(count, np.inf)
        for st in Stationary:
            for transposed in (False, True):
                f = np.zeros(count)
                b = np.zeros(count)
                for shape in table1(layer, st, transposed):
                    t = meshslice_lower_bound_s(
                        shape.dataflow,
                        shape.m,
                        shape.n,
                        shape.k,
                        mesh,
                        ctx.element_bytes,
                        ctx.comm,
                        ctx.compute,
                        transposed,
                    )
                    if shape.gemm_pass is GemmPass.FORWARD:
                        f = f + t
                    else:
                        b = b + t
                best_f, best_b = np.minimum(best_f, f), np.minimum(best_b, b)
        forward += best_f
        backward += best_b
    return [
        FcBlock(float(fw), float(bw), 0.0, 0.0) for fw, bw in zip(forward, backward, strict=True)
    ]


def sequence_parallel(training: TrainingInput) -> bool:
    """Whether activations outside the FC layers are split over the tensor
    chips: always under MeshSlice (its 2D split), the plan's choice under
    Megatron 1D."""
    return training.fc_algorithm is FcAlgorithm.MESHSLICE or training.sequence_parallel


def activation_bytes_per_mode(
    model: ModelSpec, training: TrainingInput, tp: int, mbs: int, cp: int = 1
) -> tuple[float, float, float]:
    """Bytes one block keeps per micro-batch on one chip, per recomputation
    mode (none, selective, full): the Korthikanti et al. 2022 inventory
    (cost_models.activations) for `mbs` sequences on `tp` chips, each chip
    holding `s / cp` tokens of every sequence (context parallelism runs the
    attention fused: no score matrices kept)."""
    local_s = training.sequence_length // cp
    tokens = mbs * local_s
    shape = block_shape(model, local_s)
    flash = training.attention is AttentionKernel.FLASH
    sp = sequence_parallel(training)
    e = training.dtype.num_bytes
    a = [
        tokens * layer_activation_bytes_per_token(mode, shape, e, tp, sp, training.dropout, flash)
        for mode in RECOMPUTE_MODES
    ]
    if training.fp8 is not Fp8Recipe.NONE:
        # the FC inputs kept for the backward: the two norm outputs (QKV
        # and FFN up/gate inputs, split only with sequence parallelism), the
        # attention output and the FFN activation (split over the chips),
        # each as its FP8 copy instead of e bytes
        kept = 2 * model.hidden_size / (tp if sp else 1)
        kept += (model.attention_width + model.ffn_size) / tp
        saved = tokens * kept * (e - fp8_saved_input_bytes_per_element(training.fp8.value))
        a[0] -= saved
        a[1] -= saved
    return float(a[0]), float(a[1]), float(a[2])


def block_params_per_chip(model: ModelSpec, tp: int) -> float:
    """Weights of the planned block's FC layers (plan/layers.block_fc_layers:
    attention and the dense FFN, or a MoE block's shared experts) split over
    `tp` chips, plus its two norms' scales (replicated): `P_block / tp + 2 h`.
    A MoE block's routed experts and router are job/experts.py's."""
    params = sum(layer.in_features * layer.out_features for layer in block_fc_layers(model, 1))
    return params / tp + 2 * model.hidden_size


def end_memory(
    model: ModelSpec, training: TrainingInput, rows: int, cols: int, mbs: int, cp: int = 1
) -> tuple[float, float, float]:
    """(head parameters, tail parameters, tail transient bytes) per chip:
    the vocabulary shard of the embedding (with learned positions) and of
    the output layer (with the final norm), and the logits the tail keeps
    (`n V / ring` elements in the dtype and in fp32); see :func:`end_figures`."""
    v, h, e = model.vocab_size, model.hidden_size, training.dtype.num_bytes
    if v is None:
        return 0.0, 0.0, 0.0
    megatron = training.fc_algorithm is FcAlgorithm.MEGATRON_1D
    ring = rows * cols if megatron else cols
    n = mbs * (training.sequence_length // cp) / (1 if megatron else rows)
    learned = model.position_encoding is PositionEncoding.LEARNED
    head = v * h / ring + (training.sequence_length * h if learned else 0)
    return head, v * h / ring + h, n * (v / ring) * (e + 4.0)


def context_kv_heads(model: ModelSpec, training: TrainingInput, tp: int, mbs: int) -> float:
    """Key/value heads one chip holds over its `mbs` sequences: `kv / t`
    per sequence (`max(kv / t, 1)` under Megatron 1D, which replicates
    key/value heads over a larger tensor group; MeshSlice spreads the same
    share over sequences and heads)."""
    kv = model.kv_heads / tp
    if training.fc_algorithm is FcAlgorithm.MEGATRON_1D:
        kv = max(kv, 1.0)
    return mbs * kv


def context_block_bytes(
    model: ModelSpec, training: TrainingInput, tp: int, mbs: int, cp: int
) -> float:
    """Bytes of the key/value block one chip holds in a context group of
    `cp` (`s / cp` tokens of each sequence; context_kv_heads heads):
    cost_models.context_parallel.kv_block_bytes."""
    heads = context_kv_heads(model, training, tp, mbs)
    local_tokens = training.sequence_length // cp
    # MLA: keys of d_qk and values of d_v per head, `2 (d_qk + d_v) / 2` in all
    d = model.core_head_dim
    return float(kv_block_bytes(local_tokens, heads, d, training.dtype.num_bytes))


def context_exchange(
    model: ModelSpec,
    training: TrainingInput,
    hw: HardwareView,
    context: AxisLayout,
    tp: int,
    mbs: int,
    attention_forward_s: float,
    attention_backward_s: float,
) -> tuple[float, float, float]:
    """(forward exposed, backward exposed seconds, buffer bytes) of the
    context-parallel key/value exchange of one block and micro-batch on one
    chip (module docstring), over the `context` axis's levels. A chip holds
    `s / cp` tokens of each of its sequences and `kv / t` key/value heads
    per sequence (`max(kv / t, 1)` under Megatron 1D, which replicates
    key/value heads over a larger tensor group); MeshSlice spreads the same
    share over sequences and heads.

    - p2p: one send-recv of the chip's block per ring step
      (ring_attention_exposed_s), backward the block and its gradient;
      buffers: the block being sent and the one arriving.
    - all_gather: forward an all-gather of the `cp` blocks, backward the
      gather again and a reduce-scatter of their gradients; buffer: the
      gathered keys/values.
    - a2a: forward and backward, an all-to-all of queries, keys and values
      and one of the output (ulysses_all_to_all_bytes); buffer: the
      exchanged queries, keys and values."""
    cp = context.size
    if cp <= 1:
        return 0.0, 0.0, 0.0
    e = training.dtype.num_bytes
    d, nh = model.core_head_dim, model.num_heads
    local_tokens = training.sequence_length // cp
    block = context_block_bytes(model, training, tp, mbs, cp)
    kv_heads = context_kv_heads(model, training, tp, mbs)
    q_heads = mbs * nh / tp
    comm = training.context_parallel_comm
    if comm is ContextComm.P2P:
        forward = ring_attention_exposed_s(attention_forward_s, hw.send_s(context, block), cp)
        backward = ring_attention_exposed_s(
            attention_backward_s, hw.send_s(context, 2.0 * block), cp
        )
        return float(forward), float(backward), 2.0 * block
    if comm is ContextComm.ALL_GATHER:
        gather = float(hw.hierarchical_ring_s(context, "all_gather", cp * block))
        scatter = float(hw.hierarchical_ring_s(context, "reduce_scatter", cp * block))
        return gather, gather + scatter, cp * block
    into, out = ulysses_all_to_all_bytes(local_tokens, q_heads, kv_heads, d, e)
    once = float(hw.hierarchical_all_to_all_s(context, into)) + float(
        hw.hierarchical_all_to_all_s(context, out)
    )
    return once, once, float(into)


def fp8_cast_s(
    model: ModelSpec, training: TrainingInput, hw: HardwareView, tokens: float, tp: int
) -> tuple[float, float]:
    """(forward, backward) seconds one chip spends casting a block's FC
    operands to FP8 for `tokens` tokens: every layer's input forward, its
    output gradient backward, the chip's `1 / tp` share of each, at
    cost_models.fp8.fp8_cast_bytes_per_element over HBM::

        t_f = tokens * sum(in) / tp * bytes / hbm,  t_b = the same with sum(out)

    The weights' FP8 copies are refreshed once per step (the optimizer
    step, job/model.py)."""
    per = fp8_cast_bytes_per_element(training.fp8.value, training.dtype.num_bytes)
    layers = block_fc_layers(model, tokens)
    # SwiGLU's gate and up projections read one input (one fused GEMM)
    inputs = sum(layer.in_features for layer in layers if layer.name != FFN_GATE)
    outputs = sum(layer.out_features for layer in layers)
    rate = hw.hbm_bytes_per_s
    return tokens * inputs / tp * per / rate, tokens * outputs / tp * per / rate


def block_figures(
    model: ModelSpec,
    training: TrainingInput,
    hw: HardwareView,
    fc: FcBlock,
    tp: int,
    mbs: int,
    context: AxisLayout | None = None,
) -> BlockFigures:
    """Per-block times and bytes (module docstring) for `mbs` sequences per
    micro-batch on `tp` tensor-parallel chips, each sequence split over the
    `context` axis's chips (none: no context parallelism)."""
    cp = 1 if context is None else context.size
    s, nh, d = training.sequence_length, model.num_heads, model.core_head_dim
    local_s = s // cp
    e = training.dtype.num_bytes
    flash = training.attention is AttentionKernel.FLASH
    sp = sequence_parallel(training)
    tokens = mbs * local_s
    if flash:
        flops = attention_core_forward_flops(mbs, s, nh, d, causal=True) / (tp * cp)
        # the kernel runs on the chip's query block of s / cp tokens, causal:
        # at the rate of a full kernel on half of them
        length = float(attention_rate_length(local_s, causal=True))
        attn_f, attn_b = flash_attention_s(hw, flops, length)
        windowed = model.windowed_blocks / model.num_layers
        if windowed > 0:
            # a sliding-window block: its share of the causal work, each query
            # block meeting at most w keys (the rate of a full kernel on w; it
            # errs slow: the window's many query blocks fill the chip better
            # than one w-token sequence's do)
            w = model.sliding_window
            assert w is not None
            share = windowed_attention_share(s, w)
            win_f, win_b = flash_attention_s(hw, flops * share, min(float(w), length))
            attn_f = (1.0 - windowed) * attn_f + windowed * win_f
            attn_b = (1.0 - windowed) * attn_b + windowed * win_b
    else:
        attn_f = float(unfused_attention_forward_s(hw.gemm, mbs, nh, s, d, tp))
        attn_b = 2.0 * attn_f
    ops = block_elementwise_ops(
        model.hidden_size,
        model.attention_width,
        model.kv_heads * model.head_dim,
        planned_ffn_size(model),
        model.ffn_kind is FfnKind.SWIGLU,
        nh,
        local_s,
        e,
        training.dropout,
        model.position_encoding is PositionEncoding.ROTARY,
        flash,
    )
    ew_f = float(elementwise_s(ops, tokens, tp, sp, hw.hbm_bytes_per_s, forward=True))
    ew_b = float(elementwise_s(ops, tokens, tp, sp, hw.hbm_bytes_per_s, forward=False))
    if training.fp8 is not Fp8Recipe.NONE:
        cast_f, cast_b = fp8_cast_s(model, training, hw, tokens, tp)
        ew_f += cast_f
        ew_b += cast_b
    cx_f = cx_b = cx_buf = 0.0
    if context is not None:
        cx_f, cx_b, cx_buf = context_exchange(model, training, hw, context, tp, mbs, attn_f, attn_b)
    if flash:
        selective = 0.0
    else:
        core = tuple(op for op in ops if op.name in ("softmax", "attention dropout"))
        selective = attn_f + float(elementwise_s(core, tokens, tp, sp, hw.hbm_bytes_per_s, True))
    selective += mla_up_projection_forward_s(model, hw.fc_base.compute, tokens, tp)
    full = fc.forward_s + attn_f + ew_f + cx_f
    return BlockFigures(
        fc=fc,
        attention_forward_s=attn_f,
        attention_backward_s=attn_b,
        elementwise_forward_s=ew_f,
        elementwise_backward_s=ew_b,
        recompute_s=(0.0, selective, full),
        activation_bytes=activation_bytes_per_mode(model, training, tp, mbs, cp),
        params_per_chip=block_params_per_chip(model, tp),
        context_forward_s=cx_f,
        context_backward_s=cx_b,
        context_buffer_bytes=cx_buf,
    )


def end_figures(
    model: ModelSpec,
    training: TrainingInput,
    hw: HardwareView,
    comm: CommModel | None,
    rows: int,
    cols: int,
    mbs: int,
    cp: int = 1,
) -> EndFigures:
    """The vocabulary-sharded ends (Megatron-LM's vocab-parallel embedding
    and cross-entropy) for one micro-batch on one chip of a `rows x cols`
    tensor mesh. MeshSlice splits the tokens over the rows and the
    vocabulary over the columns; Megatron 1D the vocabulary over all chips.

    - embedding: every chip looks up its vocabulary shard for its tokens
      (`2 e h` bytes per token, plus `2 e h` to add learned positions), then
      the partial sums are reduce-scattered over the vocabulary ring
      (all-gathered in backward; the col axis's links of `comm`); the
      backward scatters the gradient into its shard (`3 e h / ring`).
    - tail: final norm, all-gather of its output, the `T x h x V/ring`
      logits GEMMs (logits_gemm_s), the gradient reduce-scatter, and the
      fp32 cross-entropy over the logits (loss_bytes_per_token); each
      multi-token-prediction module adds its `2h -> h` projection and the
      tail again (its block is priced as one more MoE block of the last
      chunk, job/model.py).
    Without a vocabulary size both are zero; without `comm` the vocabulary
    ring's collectives are left out (a lower bound). Under context
    parallelism a chip handles `s / cp` tokens of each sequence."""
    v, h, e = model.vocab_size, model.hidden_size, training.dtype.num_bytes
    if v is None:
        return EndFigures(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    tp = rows * cols
    megatron = training.fc_algorithm is FcAlgorithm.MEGATRON_1D
    tokens = mbs * (training.sequence_length // cp)
    n = tokens / (1 if megatron else rows)  # tokens one chip handles at the ends
    ring = tp if megatron else cols
    bw = hw.hbm_bytes_per_s
    learned = model.position_encoding is PositionEncoding.LEARNED
    link_comm = 0.0
    if ring > 1 and comm is not None:
        shard = n * h * e / ring
        rs = float(ring_collective_s(comm.link(CollectiveOp.REDUCE_SCATTER, Axis.COL), ring, shard))
        ag = float(ring_collective_s(comm.link(CollectiveOp.ALL_GATHER, Axis.COL), ring, shard))
        link_comm = rs + ag
    head_f = n * (2 + (2 if learned else 0)) * e * h / bw + link_comm / 2
    head_b = n * 3 * e * h / ring / bw + link_comm / 2
    norm_tokens = tokens / (tp if sequence_parallel(training) else 1)
    vs = v / ring
    logits_f, logits_b = (float(x) for x in logits_gemm_s(hw.gemm, n, vs, h))
    loss_f, loss_b = loss_bytes_per_token(v, e)
    tail_f = norm_tokens * 2 * e * h / bw + link_comm / 2 + logits_f + n * loss_f / ring / bw
    tail_b = norm_tokens * 3 * e * h / bw + link_comm / 2 + logits_b + n * loss_b / ring / bw
    head_params, tail_params, tail_transient = end_memory(model, training, rows, cols, mbs, cp)
    if model.mtp_layers:
        # each multi-token-prediction module (its block is priced with the
        # last chunk's): the `2h -> h` projection of its two normed inputs
        # on a `1 / t` shard, then the output layer and the loss again
        proj_f = float(hw.gemm.gemm_s(tokens, h / tp, 2 * h))
        proj_b = float(
            hw.gemm.gemm_s(tokens, 2 * h, h / tp) + hw.gemm.gemm_s(2 * h, h / tp, tokens)
        )
        tail_f += model.mtp_layers * (proj_f + tail_f)
        tail_b += model.mtp_layers * (proj_b + tail_b)
        tail_params += model.mtp_layers * 2 * h * h / tp
    else:
        proj_f = proj_b = 0.0
    return EndFigures(
        head_forward_s=head_f,
        head_backward_s=head_b,
        head_params=head_params,
        tail_forward_s=tail_f,
        tail_backward_s=tail_b,
        tail_params=tail_params,
        tail_transient_bytes=tail_transient,
        mtp_projection_forward_s=model.mtp_layers * proj_f,
        mtp_projection_backward_s=model.mtp_layers * proj_b,
        mtp_projection_params=model.mtp_layers * 2 * h * h / tp,
    )
