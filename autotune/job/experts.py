"""The routed part of a mixture-of-experts block, and the wider FFN of a
MoE model's dense blocks, for one micro-batch on one chip (seconds, bytes).

A MoE model's planned block (job/block.py, job/fc.py) is its attention and
shared experts; each MoE block adds, per chip (cost_models.moe for the
terms; `T` tokens enter the layer on a chip: `b s / (cp t)` with the
activations split over the tensor chips, else `b s / cp`):

- router: the `T x E x h` GEMM (weights replicated) and its scoring
  (cost_models.moe.router_bytes over HBM);
- dispatch and combine all-to-alls over the expert-parallel axis
  (HardwareView.hierarchical_all_to_all_s), each chip sending its `T k`
  token copies (`T k h e` bytes) scaled by the imbalance `I` (the busiest
  rank receives `I` times the mean and the exchange ends when it has);
  with a deduplicating dispatcher (`expert_dispatcher` deepep or
  hybridep) the inter-node bytes scale by
  cost_models.moe.deduplicated_share (a token crosses once per node
  holding one of its experts; with node-limited routing at most `M`
  nodes) and the bytes inside a node by the same share over ranks (a
  token goes once to each rank holding one of its experts: DeepEP's
  `is_token_in_rank`, HybridEP's token-based dispatch); a plain
  all-to-all sends every copy. Forward: dispatch + combine;
  backward: the same for the gradients. With expert tensor parallelism
  `etp` (each expert's `F_e` split over `etp` chips, Megatron-Core's
  `--expert-tensor-parallel-size`), each chip's arriving copies are
  all-gathered over its expert-tensor group and the outputs
  reduce-scattered back (cost_models.moe.expert_tensor_gather_bytes), one
  all-gather and one reduce-scatter per pass, priced with the all-to-alls.
  Exposed here; with `overlap_expert_comm` the step hides them behind
  another micro-batch's computation (job/model.py expert_overlap);
- the grouped GEMMs of the chip's `E / ep` experts, each with
  `I T k etp ep / E` rows (the busiest rank's) and `F_e / etp` columns, as one batched GEMM per
  matrix in the FC layers' GEMM model (FP8 under an FP8 recipe): forward
  the first layer (`h -> 2 F_e` gated) and the second (`F_e -> h`),
  backward each one's data and weight gradients; with a capacity factor
  `c` every expert computes `ceil(c * mean)` rows (padded), so `I = c`;
- where the trainer issues the experts' kernels one per expert from the
  host (job/trainers.py per_expert_kernels: Megatron-LM with Transformer
  Engine), the grouped GEMMs take at least their launches' host time
  (cost_models.moe.expert_kernel_launches x `host_launch_s`, host_bound_s),
  forward and backward each;
- permutation and un-permutation (cost_models.moe.permutation_bytes) over
  HBM, forward and backward;
- memory: the chip's routed-expert weights (reduced and ZeRO-sharded over
  the expert-data axis), the router's (with the dense weights), the
  activations each routed copy keeps (none under full recomputation,
  which re-runs this forward; the grouped GEMMs' inputs as FP8 copies
  under an FP8 recipe), and the dispatched-token buffers.

A dense block of a MoE model (the first `first_dense_layers`, or those off
the MoE frequency) has an FFN of `ffn_size` instead of the shared experts'
`F_s`: the difference `F - F_s` is priced as one `b s / cp x (F - F_s) / t x h`
GEMM set (every token on a `1 / t` shard) in the FC GEMM model (its tensor-parallel
collectives left out), with its weights and activations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from autotune.hardware.layout import AxisLayout
from autotune.job.hardware import HardwareView
from autotune.specs.job import TrainingInput
from autotune.specs.model import FfnKind, ModelSpec
from autotune.specs.model_params import ffn_matrices
from autotune.specs.training import ExpertDispatcher, FcAlgorithm, Fp8Recipe
from cost_models import ComputeModel
from cost_models.fp8 import fp8_saved_input_bytes_per_element
from cost_models.moe import (
    FLEX_DISPATCH_NUM_SMS,
    allgather_dispatch_tokens,
    deduplicated_share,
    default_imbalance,
    dispatch_bytes_per_chip,
    expert_activation_bytes_per_copy,
    expert_kernel_launches,
    expert_params_per_chip,
    expert_tensor_gather_bytes,
    host_bound_s,
    permutation_bytes,
    routed_tokens_per_chip,
    router_bytes,
    tokens_per_expert,
)


@dataclass(frozen=True)
class ExpertFigures:
    """Per MoE block (and per dense block of a MoE model), one micro-batch,
    one chip (seconds, bytes, parameters). Recomputation modes indexed as
    RECOMPUTE_MODES."""

    forward_s: float
    backward_s: float
    #: the all-to-alls (and expert-tensor gathers) inside forward_s /
    #: backward_s (exposed)
    all_to_all_forward_s: float
    all_to_all_backward_s: float
    expert_params: float
    router_params: float
    activation_bytes: tuple[float, float, float]
    recompute_s: tuple[float, float, float]
    buffer_bytes: float
    imbalance: float
    rows_per_expert: float
    #: bytes one chip sends in one dispatch all-to-all (the busiest rank's;
    #: the allgather dispatcher: the bytes it gathers) and the share of
    #: them that crosses nodes (node-limited routing, a deduplicating
    #: dispatcher's once-per-node sends) and that moves inside one (its
    #: once-per-rank sends)
    all_to_all_bytes: float = 0.0
    scale_out_share: float = 1.0
    scale_up_share: float = 1.0
    #: the grouped GEMMs' (m, n, k) per expert (forward and backward)
    expert_gemm_dims: tuple[tuple[float, float, float], ...] = ()
    #: the experts' kernel launches per pass issued from the host (0: the
    #: trainer runs them otherwise) and the time the host adds to the
    #: grouped GEMMs' forward and backward (0: the GPU is the slower)
    host_launches: tuple[float, float] = (0.0, 0.0)
    host_wait_s: float = 0.0
    #: the share of the chip's cores the dispatcher's all-to-all kernels
    #: hold while they run (DeepEP, HybridEP; 0: NCCL's, not stated)
    comm_sm_share: float = 0.0
    #: the grouped GEMMs' part of forward_s / backward_s (host wait
    #: included): Megatron-Core's `mlp` node, which its EP overlap pairs
    #: with the all-to-alls (cost_models.moe.merged_layer_pair_s)
    mlp_forward_s: float = 0.0
    mlp_backward_s: float = 0.0
    #: a dense block's FFN beyond the planned shared experts
    dense_forward_s: float = 0.0
    dense_backward_s: float = 0.0
    dense_params: float = 0.0
    dense_activation_bytes: tuple[float, float, float] = (0.0, 0.0, 0.0)


def layer_tokens(model: ModelSpec, training: TrainingInput, tp: int, mbs: int, cp: int) -> float:
    """Tokens entering a MoE layer on one chip per micro-batch: `b s / cp`
    split over the `tp` tensor chips when activations are (MeshSlice
    always; megatron-1d with sequence parallelism), else whole."""
    tokens = mbs * (training.sequence_length // cp)
    split = training.fc_algorithm is FcAlgorithm.MESHSLICE or training.sequence_parallel
    return tokens / tp if split else float(tokens)


def grouped_gemm_s(
    gemm: ComputeModel, rows: float, hidden: int, expert_ffn: int, gated: bool, experts: float
) -> tuple[float, float]:
    """(forward, backward) seconds of `experts` local experts' FFNs with
    `rows` tokens each, as batched GEMMs: forward `rows x fF x h` and
    `rows x h x F` (`f` = 2 gated: gate and up fused), backward each
    layer's data gradient and weight gradient (`2 f rows h F` FLOPs per
    expert forward, twice that backward)."""
    dims = grouped_gemm_dims(rows, hidden, expert_ffn, gated)
    forward = sum(float(gemm.gemm_s(m, n, k, experts)) for m, n, k in dims[:2])
    backward = sum(float(gemm.gemm_s(m, n, k, experts)) for m, n, k in dims[2:])
    return forward, backward


def grouped_gemm_dims(
    rows: float, hidden: int, expert_ffn: int, gated: bool
) -> tuple[tuple[float, float, float], ...]:
    """(m, n, k) of one expert's GEMMs with `rows` tokens: the two forward
    ones (`rows x fF x h`, `rows x h x F`; `f` = 2 gated), then the
    backward's data and weight gradients of each (grouped_gemm_s)."""
    first = (2 if gated else 1) * expert_ffn
    return (
        (rows, first, hidden),
        (rows, hidden, expert_ffn),
        (rows, hidden, first),
        (hidden, first, rows),
        (rows, expert_ffn, hidden),
        (expert_ffn, hidden, rows),
    )


def imbalance_of(model: ModelSpec, mean_copies_per_rank: float, ep: int) -> float:
    """Busiest expert-parallel rank's routed tokens over the mean: the
    model's `expert_imbalance` when given, else its capacity factor (every
    expert padded to capacity), else the real-routing default derived from
    UltraEP's measurement for this many ranks and experts
    (cost_models.moe.default_imbalance)."""
    moe = model.moe
    assert moe is not None
    if moe.expert_imbalance is not None:
        return moe.expert_imbalance
    if moe.capacity_factor is not None:
        return moe.capacity_factor
    return float(default_imbalance(mean_copies_per_rank, ep, moe.num_experts))


def _scale_out_nodes(axis: AxisLayout, chips_per_node: int | None) -> int:
    """Nodes an expert-parallel group spans (1 inside one node or slice)."""
    if not axis.spans_nodes:
        return 1
    if chips_per_node is None:
        return axis.size
    return max(1, axis.size * axis.stride // chips_per_node)


def allgather_dispatch_s(
    hw: HardwareView,
    expert_axis: AxisLayout,
    tensor_axis: AxisLayout | None,
    gathered_bytes: float,
    etp: int,
) -> float:
    """Seconds of the allgather dispatcher's collectives per pass on one
    chip: the all-gather of `gathered_bytes` (every token of the `ep x etp`
    expert group) and the reduce-scatter of the outputs, each over the
    expert-tensor axis first (its `1 / ep` share) and then the expert axis
    (a ring over the product group moves what the two nested rings do)."""
    seconds = 0.0
    for op in ("all_gather", "reduce_scatter"):
        seconds += float(hw.hierarchical_ring_s(expert_axis, op, gathered_bytes))
        if etp > 1:
            assert tensor_axis is not None
            seconds += float(
                hw.hierarchical_ring_s(tensor_axis, op, gathered_bytes / expert_axis.size)
            )
    return seconds


def dispatch_sm_share(training: TrainingInput, hw: HardwareView) -> float:
    """The share of the chip's cores the flex dispatcher's kernels (DeepEP,
    HybridEP) hold while they run: FLEX_DISPATCH_NUM_SMS over the chip's
    num_cores; 0 for NCCL's all-to-all (its channel count is not stated)
    or a chip without a core count."""
    chip = hw.cluster.chip
    flex = training.expert_dispatcher.deduplicates
    if not flex or chip is None or not chip.num_cores:
        return 0.0
    return min(FLEX_DISPATCH_NUM_SMS / chip.num_cores, 1.0)


def expert_figures(
    model: ModelSpec,
    training: TrainingInput,
    hw: HardwareView,
    expert_axis: AxisLayout,
    tp: int,
    mbs: int,
    cp: int,
    tensor_axis: AxisLayout | None = None,
    host_launch_s: float = 0.0,
) -> ExpertFigures:
    """The module docstring's figures for `mbs` sequences per micro-batch on
    `tp` tensor chips and `cp` context chips, with the experts spread over
    `expert_axis` and each split over `tensor_axis` (expert tensor
    parallelism; none: 1), the host issuing each per-expert kernel in
    `host_launch_s` seconds (0: no per-expert kernels from the host)."""
    moe = model.moe
    assert moe is not None
    h, e = model.hidden_size, training.dtype.num_bytes
    k, experts, width = moe.experts_per_token, moe.num_experts, moe.expert_ffn_size
    gated = model.ffn_kind is FfnKind.SWIGLU
    f = ffn_matrices(model)
    ep = expert_axis.size
    etp = tensor_axis.size if tensor_axis is not None else 1
    fc_gemm = hw.fc_base.compute
    rate = hw.hbm_bytes_per_s

    tokens = layer_tokens(model, training, tp, mbs, cp)
    copies = float(routed_tokens_per_chip(tokens, k, etp))
    imbalance = imbalance_of(model, copies, ep)
    rows = float(tokens_per_expert(tokens, k, experts, ep, etp)) * imbalance
    if moe.capacity_factor is not None and moe.expert_imbalance is None:
        rows = float(np.ceil(rows))
    gemm_f, gemm_b = grouped_gemm_s(fc_gemm, rows, h, width / etp, gated, experts / ep)
    launches = (0.0, 0.0)
    host_wait = 0.0
    if host_launch_s > 0.0:
        launches_f, launches_b = expert_kernel_launches(experts / ep, training.fp8.value)
        launches = (float(launches_f), float(launches_b))
        bound_f = float(host_bound_s(gemm_f, launches_f, host_launch_s))
        bound_b = float(host_bound_s(gemm_b, launches_b, host_launch_s))
        host_wait = bound_f - gemm_f + bound_b - gemm_b
        gemm_f, gemm_b = bound_f, bound_b
    router_f = float(hw.gemm.gemm_s(tokens, experts, h))
    router_b = float(hw.gemm.gemm_s(tokens, h, experts) + hw.gemm.gemm_s(h, experts, tokens))
    allgather = training.expert_dispatcher is ExpertDispatcher.ALLGATHER
    # the allgather dispatcher's chip holds every token of its expert group
    group_tokens = float(allgather_dispatch_tokens(tokens, ep, etp)) if allgather else tokens
    shuffle = permutation_bytes(tokens, k, h, e, group_tokens) + router_bytes(tokens, experts)
    shuffle = float(shuffle) / rate

    a2a, sent, share, rank_share = 0.0, 0.0, 1.0, 1.0
    if allgather and ep * etp > 1:
        # every token of the expert group gathered on every chip (with its
        # fp32 probabilities and routing map), the outputs reduce-scattered
        sent = group_tokens * (h * e + 5.0 * experts)
        a2a = allgather_dispatch_s(hw, expert_axis, tensor_axis, sent, etp)
    elif ep > 1:
        nodes = _scale_out_nodes(expert_axis, hw.cluster.chips_per_node)
        if training.expert_dispatcher.deduplicates:
            groups = moe.expert_groups
            share = deduplicated_share(k, experts, nodes, moe.node_limit, groups)
            # once per destination rank: the same derivation over the `ep`
            # ranks of `E / ep` experts (a node limit stated without its
            # groups left out there: it packs a token's experts on fewer
            # ranks, so fewer bytes)
            limit = moe.node_limit if groups is not None else None
            rank_share = deduplicated_share(k, experts, ep, limit, groups)
        sent = float(dispatch_bytes_per_chip(tokens, k, h, e)) * imbalance
        a2a = float(
            hw.hierarchical_all_to_all_s(
                expert_axis,
                sent,
                scale_out_share=share,
                scale_up_share=rank_share,
                relayed=training.expert_dispatcher.deduplicates,
            )
        )
    gathers = 0.0
    if etp > 1 and not allgather:
        # the arriving copies all-gathered over the expert-tensor group, the
        # outputs reduce-scattered back (and the reverse for the gradients)
        gathered = float(expert_tensor_gather_bytes(imbalance * tokens * k, h, e, etp))
        assert tensor_axis is not None
        gathers = float(
            hw.hierarchical_ring_s(tensor_axis, "all_gather", gathered)
            + hw.hierarchical_ring_s(tensor_axis, "reduce_scatter", gathered)
        )
    # per pass: the dispatch and the combine all-to-all (the allgather
    # dispatcher's a2a holds its all-gather and reduce-scatter already)
    comm = (a2a if allgather else 2.0 * a2a) + gathers
    forward = router_f + shuffle + gemm_f + comm
    backward = router_b + shuffle + gemm_b + comm

    fp8 = training.fp8 is not Fp8Recipe.NONE
    kept_input = fp8_saved_input_bytes_per_element(training.fp8.value) if fp8 else e
    per_copy = expert_activation_bytes_per_copy(h, width, gated, e, etp, kept_input)
    kept = imbalance * copies * per_copy
    kept += 4.0 * tokens * experts  # the router's probabilities (fp32)
    activations = (kept, kept, 0.0)
    buffer = 2.0 * imbalance * copies * h * e  # tokens received and their permuted copy
    if allgather:
        # the gathered tokens (Megatron's global buffer) and the un-permuted
        # outputs before their reduce-scatter, both every gathered token
        buffer = 2.0 * group_tokens * h * e

    out = ExpertFigures(
        forward_s=forward,
        backward_s=backward,
        all_to_all_forward_s=comm,
        all_to_all_backward_s=comm,
        expert_params=float(expert_params_per_chip(experts, ep, etp, h, width, f)),
        router_params=float(experts * h),
        activation_bytes=activations,
        recompute_s=(0.0, 0.0, forward),
        buffer_bytes=buffer,
        imbalance=imbalance,
        rows_per_expert=rows,
        all_to_all_bytes=sent,
        scale_out_share=share,
        scale_up_share=rank_share,
        expert_gemm_dims=grouped_gemm_dims(rows, h, width / etp, gated),
        host_launches=launches,
        host_wait_s=host_wait,
        comm_sm_share=dispatch_sm_share(training, hw),
        mlp_forward_s=gemm_f,
        mlp_backward_s=gemm_b,
    )
    extra = model.ffn_size - moe.shared_expert_ffn_size
    if extra <= 0 or all(model.moe_layer_flags):
        return out
    shard = extra / tp
    first = (2 if gated else 1) * shard
    tokens = float(mbs * (training.sequence_length // cp))  # every token, a 1 / t shard
    # the extra FFN is one expert's worth of GEMMs over every token
    dense_f, dense_b = grouped_gemm_s(fc_gemm, tokens, h, shard, gated, 1)
    dense_kept = tokens * e * (first + shard)
    return replace(
        out,
        dense_forward_s=dense_f,
        dense_backward_s=dense_b,
        dense_params=f * h * shard,
        dense_activation_bytes=(dense_kept, dense_kept, 0.0),
    )
