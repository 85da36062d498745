"""Mixture-of-experts layers: tokens per expert, all-to-all bytes, expert
weights per rank, activations and memory-bound work (pure functions; base
units).

Layout (Megatron-Core's "parallel folding", Liu et al. 2025,
arXiv:2504.14960, section 3): the `N = t cp dp` chips of a pipeline stage
that run attention as `t` tensor x `cp` context x `dp` data chips run the
experts as `etp` expert-tensor x `ep` expert-parallel x `edp`
expert-data chips, `etp ep edp = N`, expert-tensor ranks innermost. Each
expert-parallel rank holds `E / ep` of the `E` routed experts, each split
over its `etp` chips; `edp` chips hold the same expert shard and reduce its
gradients.

Per chip and micro-batch, `T` tokens enter the layer (sequence-split
activations: `b s / (cp t)`). A token goes to `k` experts; the router's
dispatch all-to-all sends each copy to the rank holding its expert and the
combine all-to-all brings it back. With `etp > 1` the arriving tokens are
all-gathered over the expert-tensor group (and the outputs
reduce-scattered). The allgather dispatcher instead gathers every token
of the `ep x etp` group on every chip and reduce-scatters the outputs
(allgather_dispatch_tokens). With Megatron-Core's EP overlap, a merged
forward and backward pair each all-to-all with one module of the other
micro-batch (merged_layer_pair_s).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special


def routed_tokens_per_chip(tokens: ArrayLike, top_k: int, etp: int = 1) -> np.ndarray:
    """Mean routed token copies one chip's experts compute per micro-batch:
    `T k etp` (each of the `etp` chips of an expert-tensor group brings
    `T k` copies, and every chip of the group computes all of them on its
    `1 / etp` of the expert weights). Derivation from the layout above: the
    stage's `N T k` copies spread over the `ep` expert shards, each held by
    `edp` groups: `N T k / (ep edp) = T k etp`. Units: tokens. Vectorised."""
    return np.asarray(tokens, dtype=float) * top_k * etp


def tokens_per_expert(
    tokens: ArrayLike, top_k: int, num_experts: int, ep: ArrayLike, etp: int = 1
) -> np.ndarray:
    """Mean tokens each of a chip's `E / ep` local experts computes per
    micro-batch: `T k etp / (E / ep) = T k etp ep / E` (the grouped GEMM's
    rows per expert). Units: tokens. Vectorised."""
    local = num_experts / np.asarray(ep, dtype=float)
    return routed_tokens_per_chip(tokens, top_k, etp) / local


def expected_normal_maximum(count: ArrayLike) -> np.ndarray:
    """Expected largest of `R` independent standard normal draws, `e_R`::

        e_R = int_0^inf (1 - Phi(x)^R) dx - int_-inf^0 Phi(x)^R dx

    (the mean of a variable from its distribution function; `Phi(x)^R` is
    the distribution of the largest), integrated numerically on a fixed grid
    (trapezoid, 2,001 points each side; error under 1e-6 against adaptive
    quadrature for every `R`). `e_1 = 0`, `e_2 = 1 / sqrt(pi) = 0.5642`,
    `e_8 = 1.4236`, `e_64 = 2.3437`. The asymptote `sqrt(2 ln R)` is
    48% high at `R = 2`, 34% at 8 and 22% at 64.

    It is how many standard deviations the busiest of `R` ranks' loads lies
    above their mean when the loads are independent normal draws
    conditioned on their total (a layer's routed copies are fixed):
    `E[max_i (X_i - mean X)] = E[max_i X_i] - E[mean X] = e_R`, in units of
    one load's standard deviation before the conditioning; for normal
    draws the deviations `X_i - mean X` are independent of the mean, so the
    conditioning leaves them unchanged and no `1 - 1/R` factor enters.
    Derivation; dimensionless. Vectorised."""
    r = np.maximum(np.asarray(count, dtype=float), 1.0)[..., None]
    t = np.linspace(0.0, 1.0, 2001)
    below = -10.0 * (1.0 - t)
    above = (10.0 + np.sqrt(2.0 * np.log(r))) * t
    upper = np.trapezoid(-np.expm1(r * special.log_ndtr(above)), above, axis=-1)
    lower = np.trapezoid(np.exp(r * special.log_ndtr(below)), below, axis=-1)
    return np.maximum(upper - lower, 0.0)


MEASURED_ROUTING_IMBALANCE = 1.30
"""Busiest expert-parallel rank's tokens over the mean with learned routing
and no balancer: the lowest of the inter-rank imbalances UltraEP measured
(Wei et al., arXiv:2606.04101 v3, abstract: "reducing the final inter-rank
imbalance from 1.30-4.01 to 1.01-1.04", MoE models of 106B to 671B
parameters in training and prefill; the max : mean per rank of
Dots-Infra/UltraEP docs/blog_v1.md line 15 at 94cab099, its training runs
at EP 64 on Megatron-LM, line 153). The anchor of routing_skew.
Dimensionless."""

REFERENCE_EXPERT_RANKS = 64
"""Expert-parallel ranks of the runs behind MEASURED_ROUTING_IMBALANCE
(UltraEP blog_v1.md line 153: "Training uses EP64")."""

REFERENCE_EXPERTS = 256
"""Routed experts taken for the run behind MEASURED_ROUTING_IMBALANCE: the
largest count among UltraEP's trained models (DeepSeek-V3's 256; GLM-4.5
and Qwen3-235B have 128), i.e. four experts per rank, the layout that
averages over the most experts and so the likeliest to have measured the
lowest imbalance (assumption: the source does not say which model gave
1.30). With 128 the skew below would be 0.18 instead of 0.26."""


def routing_skew() -> float:
    """Relative spread of one expert's routed tokens per micro-batch under
    learned routing (its standard deviation over the mean), taken from the
    one measurement: solving default_imbalance's formula for `c` at
    MEASURED_ROUTING_IMBALANCE, REFERENCE_EXPERT_RANKS and
    REFERENCE_EXPERTS::

        c = (I_ref - 1) / (e_R sqrt(R / E)) = 0.30 / (2.3437 x 0.5) = 0.2560

    (`e_R` the expected largest of `R` normal draws, expected_normal_maximum;
    sampling noise left out there: UltraEP's training micro-batches give
    each rank tens of thousands of copies, adding under 0.001). Derivation;
    dimensionless."""
    r, e = float(REFERENCE_EXPERT_RANKS), float(REFERENCE_EXPERTS)
    excess = float(expected_normal_maximum(r))
    return (MEASURED_ROUTING_IMBALANCE - 1.0) / (excess * math.sqrt(r / e))


def default_imbalance(
    mean_tokens_per_rank: ArrayLike, ranks: ArrayLike, num_experts: int
) -> np.ndarray:
    """The imbalance priced when a model states none: busiest of `R`
    expert-parallel ranks over the mean when each of the `E` experts' load
    varies by the measured routing skew `c` (routing_skew) and each rank's
    `n` copies are drawn at random on top of it::

        I = 1 + e_R sqrt(c^2 R / E + 1 / n)

    A rank holds `E / R` experts, so its load averages their independent
    spreads (`c / sqrt(E / R)`) and adds the binomial noise of its copies
    (`1 / sqrt(n)`, balanced_imbalance); the largest of `R` such loads is
    `e_R` standard deviations above the mean (expected_normal_maximum: the
    expected largest of `R` normal draws, conditioned on their total). It
    gives 1.30 at UltraEP's EP 64 over 256 experts, less where a rank
    averages more experts (EP 2 of Mixtral's 8: 1.07; EP 32 of 256: 1.19),
    more where it averages fewer (EP 8 of 8:
    1.36), as UltraEP says ("the number of experts placed on each rank
    shrinks as EP grows, making imbalance harder to smooth out", blog_v1.md
    line 29). 1 on one rank. Derivation; dimensionless. Vectorised over
    tokens and ranks."""
    n = np.asarray(mean_tokens_per_rank, dtype=float)
    r = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    noise = np.where(n > 0, 1.0 / np.where(n > 0, n, 1.0), 0.0)
    spread = np.sqrt(routing_skew() ** 2 * r / float(num_experts) + noise)
    return np.where(r > 1, 1.0 + expected_normal_maximum(r) * spread, 1.0)


def balanced_imbalance(mean_tokens_per_rank: ArrayLike, ranks: ArrayLike) -> np.ndarray:
    """Busiest rank's routed tokens over the mean when every copy picks one
    of `R` ranks uniformly at random (a router that balances perfectly on
    average, the floor of real routing)::

        I = 1 + e_R / sqrt(n)

    `n` the mean copies per rank: the counts are multinomial, i.e.
    independent Poisson counts of mean and variance `n` conditioned on their
    total, and the largest lies `e_R` of their standard deviations
    `sqrt(n)` above the mean (expected_normal_maximum; normal approximation of the
    counts, derivation). 1 for one rank or no tokens. Real routing is more
    skewed: give `moe.expert_imbalance` from your runs. Dimensionless.
    Vectorised."""
    n = np.asarray(mean_tokens_per_rank, dtype=float)
    r = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    safe = np.where(n > 0, n, 1.0)
    return np.where((r > 1) & (n > 0), 1.0 + expected_normal_maximum(r) / np.sqrt(safe), 1.0)


def expert_ffn_forward_flops(
    routed_tokens: ArrayLike, hidden: int, expert_ffn: int, matrices: int
) -> np.ndarray:
    """Forward FLOPs of the routed experts over `routed_tokens` token copies:
    `2 f n h F_e` (`f` = 3 gated: gate, up, down; 2 not). The backward is
    twice this (data and weight gradients). Units: FLOPs. Vectorised."""
    return 2.0 * matrices * np.asarray(routed_tokens, dtype=float) * hidden * expert_ffn


def dispatch_bytes_per_chip(
    tokens: ArrayLike, top_k: int, hidden: int, element_bytes: float
) -> np.ndarray:
    """Bytes one chip sends in the dispatch all-to-all (and receives in the
    combine): its `T k` token copies of `h` elements, `T k h e`; `1 / ep`
    of them stay on the chip. Units: bytes. Vectorised."""
    return np.asarray(tokens, dtype=float) * top_k * hidden * element_bytes


def node_limited_share(top_k: int, node_limit: int | None, nodes: int) -> float:
    """Share of the inter-node dispatch bytes left when each token may reach
    at most `M = node_limit` nodes and is sent once per node (DeepSeek-V3
    report, arXiv:2412.19437, section 2.1.2 "node-limited routing", with
    the per-node deduplication its communication kernels do, section
    3.2.2): a token's copies cross the network `min(k, M)` times instead of
    `k`, so the share is `min(k, M) / k`; 1 without a limit, or when the
    expert-parallel group spans no more nodes than the limit. Dimensionless.
    Only a deduplicating dispatcher sends a token once per node
    (deduplicated_share); a plain all-to-all sends its `k` copies whatever
    nodes they go to."""
    if node_limit is None or nodes <= node_limit or node_limit >= top_k:
        return 1.0
    return node_limit / top_k


def _none_chosen(pool: int, held: int, top_k: int) -> float:
    """`C(pool - held, k) / C(pool, k)`: the chance that `k` experts drawn
    without replacement from `pool` miss the `held` ones: the product
    `prod_i (pool - held - i) / (pool - i)` for the top-k of real models,
    the log-gamma form beyond (constant time for any size)."""
    rest = pool - held
    if rest < top_k:
        return 0.0
    if top_k <= 1024:
        out = 1.0
        for i in range(top_k):
            out *= (rest - i) / (pool - i)
        return out
    return math.exp(
        math.lgamma(rest + 1)
        - math.lgamma(rest - top_k + 1)
        - math.lgamma(pool + 1)
        + math.lgamma(pool - top_k + 1)
    )


#: most expert groups destination_hit sums over exactly (its hypergeometric
#: sum grows with the groups a part holds)
MAX_EXACT_GROUPS = 4096


def destination_hit(
    top_k: int,
    num_experts: int,
    destinations: int,
    groups: int | None = None,
    group_limit: int | None = None,
) -> float:
    """Chance that one of `D = destinations` equal parts of the experts
    (nodes or ranks, `E / D` experts each) holds at least one of a token's
    `k` experts, the experts chosen uniformly (as forced balance makes
    them). Derivation:

    - no group limit: `1 - C(E - E / D, k) / C(E, k)`;
    - group-limited routing (DeepSeek-V3: `G` groups of `E / G` experts, a
      token's `k` experts drawn from `M` chosen groups; the DeepSeek-V3
      report, arXiv:2412.19437 section 2.1.2; Megatron-LM
      `--moe-router-num-groups` and `--moe-router-group-topk`), the groups
      chosen uniformly and the experts uniformly among their `M E / G`:
      when each part holds `g = G / D` whole groups, `j` of them chosen
      with the hypergeometric chance `C(g, j) C(G - g, M - j) / C(G, M)`,

          sum_j P(j) (1 - C((M - j) E / G, k) / C(M E / G, k));

      when each group spans `D / G` parts, a part's group is chosen with
      chance `M / G`: `(M / G) (1 - C(M E / G - E / D, k) / C(M E / G, k))`.

    Parts and groups that do not nest, and more than MAX_EXACT_GROUPS
    groups (no published model has a hundred), are priced without the limit
    (an upper bound of the bytes). Dimensionless."""
    d, e = destinations, num_experts
    if d <= 1:
        return 1.0
    unlimited = groups is None or group_limit is None or group_limit >= groups
    if unlimited or groups > MAX_EXACT_GROUPS:
        return 1.0 - _none_chosen(e, e // d, top_k)
    eligible = group_limit * e // groups
    if groups % d == 0:
        g = groups // d
        total = math.comb(groups, group_limit)
        hit = 0.0
        for j in range(1, min(g, group_limit) + 1):
            chance = math.comb(g, j) * math.comb(groups - g, group_limit - j) / total
            hit += chance * (1.0 - _none_chosen(eligible, j * e // groups, top_k))
        return hit
    if d % groups == 0:
        return group_limit / groups * (1.0 - _none_chosen(eligible, e // d, top_k))
    return 1.0 - _none_chosen(e, e // d, top_k)


def deduplicated_share(
    top_k: int,
    num_experts: int,
    nodes: int,
    node_limit: int | None,
    groups: int | None = None,
) -> float:
    """Share of the inter-node dispatch bytes a deduplicating dispatcher
    (DeepEP, HybridEP: "removes redundant tokens during cross-node
    communication", NVIDIA/Megatron-LM megatron/core/transformer/moe/
    README.md at d98e8a64) sends, against a plain all-to-all's, over an
    expert-parallel group of `N = nodes` nodes holding `E / N` experts each.

    Derivation (experts chosen uniformly, as forced balance makes them): a
    plain all-to-all sends each of a token's `k` copies, `k (N - 1) / N` of
    them to other nodes on average. A deduplicating one sends the token
    once to each other node holding at least one of its experts, `(N - 1)
    p` with `p` the chance of destination_hit, so the share is

        N p / k

    (`N = 2`, `E = 128`, `k = 8`, no limit: p = 1 - 0.0031, share 0.249).
    With node-limited routing given as `G = groups` expert groups of which
    a token may use `M = node_limit`, destination_hit counts it exactly;
    given as a node limit alone (`M < N`, `M < k`), a token's experts lie
    on `M` nodes, its own among them with probability `M / N`: it crosses
    the network `M (N - 1) / N` times, share `M / k` (node_limited_share).
    The same with `N` the expert-parallel ranks is the share of the bytes a
    token-based dispatcher moves inside a node (once per rank). 1 inside
    one node. Dimensionless."""
    if nodes <= 1:
        return 1.0
    if groups is None:
        limited = node_limited_share(top_k, node_limit, nodes)
        if limited < 1.0:
            return limited
    hit = destination_hit(top_k, num_experts, nodes, groups, node_limit)
    return min(1.0, nodes * hit / top_k)


def expert_params_per_chip(
    num_experts: int, ep: ArrayLike, etp: ArrayLike, hidden: int, expert_ffn: int, matrices: int
) -> np.ndarray:
    """Routed-expert weights one chip holds per MoE layer: its `E / ep`
    experts, each split over `etp` chips: `(E / ep) f h F_e / etp`. The
    router (`E h`) is replicated and counted apart. Units: parameters.
    Vectorised."""
    return (
        num_experts / np.asarray(ep, dtype=float) * matrices * hidden * expert_ffn
        / np.asarray(etp, dtype=float)
    )  # fmt: skip


def expert_data_parallel(chips_per_stage: ArrayLike, ep: ArrayLike, etp: int = 1) -> np.ndarray:
    """Chips holding the same expert shard (their gradients are reduced and
    ZeRO shards over them): `edp = t cp dp / (ep etp)`. Vectorised."""
    return np.asarray(chips_per_stage, dtype=float) / (np.asarray(ep, dtype=float) * etp)


FLEX_DISPATCH_NUM_SMS = 20
"""Streaming multiprocessors the flex dispatcher's dispatch and combine
kernels (DeepEP, HybridEP) hold while they run: Megatron-LM's historical
default (NVIDIA/Megatron-LM d98e8a64 `megatron/core/transformer/
transformer_config.py` lines 969-971: `moe_deepep_num_sms` "historical
default 20"; HybridEP takes DeepEP's default, lines 973-975). Units: SMs."""


def merged_layer_pair_s(
    attention_forward_s: ArrayLike,
    attention_backward_s: ArrayLike,
    experts_forward_s: ArrayLike,
    experts_backward_s: ArrayLike,
    all_to_all_forward_s: ArrayLike,
    all_to_all_backward_s: ArrayLike,
    sm_share: ArrayLike,
) -> np.ndarray:
    """Seconds of one MoE layer's forward (micro-batch `i + 1`) merged with
    another's backward (micro-batch `i`) as Megatron-Core's EP overlap
    schedules them (NVIDIA/Megatron-LM d98e8a64 `megatron/core/models/common/
    model_chunk_schedule_plan.py` lines 243-245)::

        comm stream: combine_bwd      | dispatch_fwd -> dispatch_bwd | combine_fwd
        comp stream: pre_dispatch_fwd | mlp_bwd      -> mlp_fwd      | pre_dispatch_bwd

    Each pass's all-to-all time `C` is its dispatch and its combine, half
    each; `A` is the layer's computation before the dispatch (attention,
    router, permutation), `M` the experts'. Four phases each take the
    longer of their two streams; while both run the computation has only
    `1 - f` of the chip's cores (`f` the share the dispatcher's kernels
    hold, FLEX_DISPATCH_NUM_SMS), so it ends `f min(c, w)` later (first
    order in `f`)::

        t = p(C_b/2, A_f) + p(C_f/2, M_b) + p(C_b/2, M_f) + p(C_f/2, A_b)
        p(c, w) = max(c, w + f min(c, w))

    A stream's work cannot move into another phase, so a long all-to-all
    beside a short module stays exposed even when the layer's computation
    as a whole is longer. Units: seconds, vectorised."""
    f = np.asarray(sm_share, dtype=float)

    def phase(comm: ArrayLike, work: ArrayLike) -> np.ndarray:
        c, w = np.asarray(comm, dtype=float), np.asarray(work, dtype=float)
        return np.maximum(c, w + f * np.minimum(c, w))

    c_f = np.asarray(all_to_all_forward_s, dtype=float) / 2.0
    c_b = np.asarray(all_to_all_backward_s, dtype=float) / 2.0
    return (
        phase(c_b, attention_forward_s)
        + phase(c_f, experts_backward_s)
        + phase(c_b, experts_forward_s)
        + phase(c_f, attention_backward_s)
    )


def expert_activation_bytes_per_copy(
    hidden: int,
    expert_ffn: int,
    gated: bool,
    element_bytes: float,
    etp: int = 1,
    gemm_input_bytes: float | None = None,
) -> float:
    """Bytes a chip keeps for the backward per routed token copy it
    computes (no recomputation): the permuted input (`h`), the first
    layer's outputs (`2 F_e / etp` gated: gate and up; `F_e / etp` not),
    the activation's output (`F_e / etp`), the expert output the weighted
    combine multiplies (`h`), and the routing weight (fp32)::

        g (h + F_e / etp) + e (h + 2 F_e / etp) + 4      (gated)

    The two GEMM inputs (the permuted tokens and the activation's output)
    are kept at `g` bytes per element, the other tensors at the training
    dtype's `e`: `g = e` without FP8; under an FP8 recipe the grouped GEMMs
    keep only the column-wise FP8 copy their weight-gradient GEMM reads,
    `g = 1 + scale` (cost_models.fp8.fp8_saved_input_bytes_per_element;
    Transformer Engine v2.9 `pytorch/module/grouped_linear.py` lines
    197-204: each input `update_usage(rowwise_usage=False,
    columnwise_usage=True)` before `save_for_backward`), as the dense FC
    layers do. Derivation from the layer's autograd graph (Megatron-Core's
    grouped MLP). Units: bytes."""
    g = element_bytes if gemm_input_bytes is None else gemm_input_bytes
    first = (2 if gated else 1) * expert_ffn / etp
    return g * (hidden + expert_ffn / etp) + element_bytes * (hidden + first) + 4.0


def expert_tensor_gather_bytes(
    received_copies: ArrayLike, hidden: int, element_bytes: float, etp: int
) -> np.ndarray:
    """Bytes each chip holds after the expert-tensor all-gather of the token
    copies its group received (the `total_bytes` of the all-gather, and of
    the reduce-scatter that returns the outputs): each of the `etp` chips
    brings its `n` received copies of `h` elements, so `etp n h e`. The
    collective moves `(etp - 1) / etp` of it per chip. Derivation from the
    layout (module docstring; Megatron-Core's `MoEAlltoAllTokenDispatcher`
    gathers over the expert-tensor group after the all-to-all). Units:
    bytes. Vectorised."""
    return etp * np.asarray(received_copies, dtype=float) * hidden * element_bytes


def permutation_bytes(
    tokens: ArrayLike,
    top_k: int,
    hidden: int,
    element_bytes: float,
    unpermuted_tokens: ArrayLike | None = None,
) -> np.ndarray:
    """HBM bytes of the memory-bound token shuffling around the experts per
    pass and chip: permute (read and write `T k` copies of `h`) and
    un-permute with the routing weights (read `T k` copies, write `U`
    tokens: the chip's `T`, or with the allgather dispatcher every gathered
    token, allgather_dispatch_tokens)::

        (3 k T + U) h e          ((3 k + 1) T h e when U = T)

    The backward moves the same gradients. Units: bytes. Vectorised."""
    t = np.asarray(tokens, dtype=float)
    u = t if unpermuted_tokens is None else np.asarray(unpermuted_tokens, dtype=float)
    return (3.0 * top_k * t + u) * hidden * element_bytes


def allgather_dispatch_tokens(tokens: ArrayLike, ep: int, etp: int = 1) -> np.ndarray:
    """Tokens every chip holds after the allgather dispatcher's all-gather
    over the expert group (`ep x etp` chips, each bringing its `T`): `T ep
    etp` (Megatron-Core `MoEAllGatherTokenDispatcher.token_dispatch`,
    `token_dispatcher.py` lines 281-303 at d98e8a64: "[(S/TP)*B, H] ->
    [((S/TP)*B)*(TP*EP), H]", its TP the expert tensor group). Each chip
    keeps the copies routed to its local experts, `T k etp` on average,
    and reduce-scatters its un-permuted outputs back over the same group.
    Units: tokens. Vectorised."""
    return np.asarray(tokens, dtype=float) * ep * etp


def router_bytes(tokens: ArrayLike, num_experts: int) -> np.ndarray:
    """HBM bytes of the router's scoring per pass and chip besides its GEMM:
    the `T x E` fp32 logits written, read by the softmax (or sigmoid) and
    top-k, the probabilities written and read again: `4 * 4 T E`.
    Derivation. Units: bytes. Vectorised."""
    return 16.0 * np.asarray(tokens, dtype=float) * num_experts


def capacity_tokens_per_expert(
    tokens: ArrayLike, top_k: int, num_experts: int, ep: ArrayLike, etp: int, capacity_factor: float
) -> np.ndarray:
    """Tokens an expert computes with a capacity factor `c` (extra tokens
    dropped, short experts padded, as GShard and Megatron-LM's
    `--moe-pad-expert-input-to-capacity` do): `ceil(c * mean)` with the
    mean of :func:`tokens_per_expert`. Units: tokens. Vectorised."""
    mean = tokens_per_expert(tokens, top_k, num_experts, ep, etp)
    return np.ceil(capacity_factor * mean)


__all__ = [
    "FLEX_DISPATCH_NUM_SMS",
    "allgather_dispatch_tokens",
    "balanced_imbalance",
    "capacity_tokens_per_expert",
    "destination_hit",
    "dispatch_bytes_per_chip",
    "expected_normal_maximum",
    "expert_activation_bytes_per_copy",
    "expert_data_parallel",
    "expert_ffn_forward_flops",
    "expert_params_per_chip",
    "expert_tensor_gather_bytes",
    "merged_layer_pair_s",
    "node_limited_share",
    "permutation_bytes",
    "routed_tokens_per_chip",
    "router_bytes",
    "tokens_per_expert",
]


DEFAULT_HOST_LAUNCH_S = 13.7e-6
"""Host (CPU and framework) time to issue one kernel of the routed experts'
per-expert path: the median of 645,099 Transformer Engine GEMM calls
(`nvte_cublas_gemm` NVTX ranges) in an nsys profile of Qwen3-30B-A3B
training on Megatron-LM at EP 8 (16 local experts, BF16, on B200; mean
20.3 us, minimum 10.3 us): yanring/Megatron-MoE-ModelZoo issue 7. A
measurement of a different node and an older Megatron-LM than a user's:
a calibration's `host_launch_s` replaces it. Seconds."""

#: per local expert and Transformer Engine GroupedLinear: quantize kernels
#: for each operand cast (forward: the input; backward: the output
#: gradient), by FP8 recipe, and whether one fused kernel casts every
#: expert's operand (the recipe's count is then per layer, not per expert)
_QUANTIZE_KERNELS = {
    "none": (0, False),
    "delayed": (1, True),
    "current": (3, False),
    "mxfp8": (1, False),
    "blockwise": (1, False),
}


def expert_kernel_launches(local_experts: ArrayLike, fp8_recipe: str) -> tuple[float, float]:
    """(forward, backward) kernel launches of one MoE layer's routed
    experts per micro-batch on one chip, as Megatron-LM runs them with
    Transformer Engine's GroupedLinear (two per layer: the first FFN
    matrix, gate and up fused, and the second), for `L` local experts::

        forward  = 2 (L + q_f)      backward = 2 (2 L + q_b)
        q = L c  (one cast of c kernels per expert), or 1 (fused over experts)

    Derivation from Transformer Engine v2.9 (commit 70f53666): GroupedLinear
    runs one cuBLAS GEMM per expert, round-robin on four side streams
    (`common/gemm/cublaslt_gemm.cu` lines 924-977), not one grouped kernel:
    `L` forward GEMMs, `L` data-gradient and `L` weight-gradient GEMMs; the
    forward casts the input and the backward the output gradient per
    expert (`pytorch/module/grouped_linear.py` split_quantize), in three
    kernels under current scaling (amax, scale, cast:
    `pytorch/csrc/quantizer.cpp` lines 497-535), one under MXFP8 and
    blockwise scaling, and in one fused kernel for all experts only under
    delayed scaling (`pytorch/csrc/extensions/cast.cpp` lines 116-149);
    BF16 casts nothing. Weight casts happen on a step's first micro-batch
    only and are left out. Units: kernel launches. `local_experts`
    vectorised."""
    if fp8_recipe not in _QUANTIZE_KERNELS:
        raise ValueError(f"unknown FP8 recipe {fp8_recipe!r}")
    per_cast, fused = _QUANTIZE_KERNELS[fp8_recipe]
    n = np.asarray(local_experts, dtype=float)
    casts = per_cast if fused else per_cast * n
    forward = 2.0 * (n + casts)
    backward = 2.0 * (2.0 * n + casts)
    return forward, backward


def host_bound_s(gpu_s: ArrayLike, launches: ArrayLike, host_launch_s: float) -> np.ndarray:
    """Time of a run of kernels the host issues one by one while the GPU
    waits for them::

        time = max(gpu_s, launches x host_launch_s)

    The routed experts' path runs so in Megatron-LM: its alltoall
    dispatcher blocks the host on a device-to-host copy of the token counts
    once per MoE layer forward (megatron/core/transformer/moe/
    token_dispatcher.py lines 921-960 at d98e8a64), so the host cannot
    queue the experts' kernels ahead, and a kernel cannot start before the
    host has issued it (derivation). Units: seconds. Vectorised."""
    return np.maximum(np.asarray(gpu_s, dtype=float), np.asarray(launches) * host_launch_s)
