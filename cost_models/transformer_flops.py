"""FLOP counts of a decoder transformer: the attention core, the model FLOPs
behind MFU and the executed FLOPs behind HFU.

Conventions (all counts are FLOPs, a multiply-add is 2 FLOPs):

- `b` sequences of `s` tokens, `nh` query heads of width `d`, `nkv`
  key/value heads (GQA: `nkv < nh`; MHA: `nkv = nh`), hidden size `h`,
  feed-forward width `F`, vocabulary `V`, `L` blocks.
- Model FLOPs follow Korthikanti et al. 2022 (arXiv:2205.05198, section 6,
  `72 B s l h^2 (1 + s/(6h) + V/(12 h l))`) and PaLM (Chowdhery et al. 2022,
  appendix B, `6 N + 12 L H Q T`): every matrix parameter costs 6 FLOPs per
  token (forward 2, backward 4), the attention core is counted in full
  (non-causal), the logits GEMM is counted and the embedding lookup is not.
  This generalises their GPT formula to GQA (smaller K/V projections) and
  SwiGLU (three FFN matrices); with MHA, GELU and `F = 4h` it reduces to it.
"""

from __future__ import annotations


def block_matrix_params(
    hidden: int, num_heads: int, num_kv_heads: int, head_dim: int, ffn: int, gated: bool
) -> int:
    """Weights of the FC layers of one block (biases and norms excluded).

    Formula: `h (nh + 2 nkv) d` (QKV) `+ nh d h` (attention output)
    `+ (3 if gated else 2) h F` (FFN: up and down, plus a gate for SwiGLU).
    GPT-3 (MHA, GELU, F = 4h): `12 h^2`. Units: parameters.
    """
    qkv = hidden * (num_heads + 2 * num_kv_heads) * head_dim
    out = num_heads * head_dim * hidden
    return qkv + out + (3 if gated else 2) * hidden * ffn


def attention_core_forward_flops(
    batch_sequences: int, seq_len: int, num_heads: int, head_dim: int, causal: bool
) -> float:
    """Forward FLOPs of `Q K^T` and `A V` over `b` sequences.

    Formula: each is `nh` GEMMs of `s x d` by `d x s` (or `s x s` by `s x d`)
    per sequence, `2 s^2 d` FLOPs each::

        F = 2 * (2 b nh s^2 d) = 4 b nh s^2 d        (full)
        F_causal = F / 2                             (masked half skipped)

    GQA does not change it: K and V heads are shared by `nh / nkv` query
    heads, but every query head still multiplies a full `s x d` key and value
    (derivation; FlashAttention-2, Dao 2023, section 4 counts
    `4 s^2 d nh` per sequence and halves it for causal masks). Units: FLOPs.
    """
    full = 4.0 * batch_sequences * num_heads * seq_len * seq_len * head_dim
    return full / 2.0 if causal else full


def windowed_attention_share(seq_len: float, window: int | None) -> float:
    """Work of a causal sliding-window attention core over the causal core's
    (the share a flash kernel that skips masked tiles executes): each query
    meets at most `w` keys (itself and the `w - 1` before it), so in the
    continuous count `attention_core_forward_flops` uses for the causal
    mask (`s^2 / 2` query-key pairs)::

        K_w = s^2 / 2                   s <= w
        K_w = s w - w^2 / 2             s >  w
        share = K_w / (s^2 / 2)

    1 without a window (`None`). Derivation (Mistral 7B, arXiv:2310.06825,
    section 2: "each token can attend to at most W tokens"; the kernel's
    block granularity is left out). Dimensionless."""
    if window is None or seq_len <= window:
        return 1.0
    pairs = seq_len * window - window * window / 2.0
    return pairs / (seq_len * seq_len / 2.0)


FLASH_BACKWARD_GEMMS = 5.0
"""A flash-attention backward runs five `s x s x d` GEMM sets (`S = Q K^T`
again, `dV = P^T dO`, `dP = dO V^T`, `dQ = dS K`, `dK = dS^T Q`) against the
forward's two, so it costs 2.5 forwards (Dao 2023, FlashAttention-2,
section 3.1.2; the recomputation of `S` is part of the kernel)."""


def model_flops_per_token(
    num_layers: int,
    hidden: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    ffn: int,
    gated: bool,
    vocab: int,
    seq_len: int,
    causal: bool = False,
    core_share: float = 1.0,
) -> float:
    """Training model FLOPs per token (the MFU numerator).

    Formula::

        6 * (L * P_block + h V) + 12 * L * s * nh * d * c

    `P_block` from :func:`block_matrix_params`; the last term is the
    attention core (forward `4 s nh d` per token, backward twice that),
    counted in full (`c = 1`) as Korthikanti et al. 2022 and PaLM do, or,
    with `causal`, its unmasked half (`c = 1/2`: the work a causal kernel
    that skips the masked half does; at long sequences the full count
    exceeds what the chips execute and MFU would pass 1), times `core_share`
    (sliding-window blocks: the mean over the blocks of
    windowed_attention_share, what the kernel executes). For GPT (MHA,
    GELU, F = 4h, nh d = h) this is Korthikanti's
    `72 s l h^2 (1 + s/(6h) + V/(12 h l))` divided by `s` (per token).
    Units: FLOPs per token.
    """
    p_block = block_matrix_params(hidden, num_heads, num_kv_heads, head_dim, ffn, gated)
    dense = 6.0 * (num_layers * p_block + hidden * vocab)
    attention = 12.0 * num_layers * seq_len * num_heads * head_dim * (0.5 if causal else 1.0)
    return dense + attention * core_share


def recompute_flops_per_token(
    mode: str,
    num_layers: int,
    hidden: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    ffn: int,
    gated: bool,
    seq_len: int,
    attention_causal: bool,
    core_share: float = 1.0,
) -> float:
    """FLOPs executed again in the backward pass by recomputation (added to
    the model FLOPs for HFU); the attention core's times `core_share` as in
    :func:`model_flops_per_token`.

    Formula (derivation: recomputation re-runs forward work):

    - `none`: 0
    - `selective` (the attention core, Korthikanti et al. 2022 section 5):
      `L * 4 s nh d` (halved for a causal kernel that skips the masked half)
    - `full` (every block's forward): `L * (2 P_block + 4 s nh d)`

    Units: FLOPs per token.
    """
    core = 4.0 * seq_len * num_heads * head_dim * (0.5 if attention_causal else 1.0) * core_share
    if mode == "none":
        return 0.0
    if mode == "selective":
        return num_layers * core
    if mode == "full":
        p_block = block_matrix_params(hidden, num_heads, num_kv_heads, head_dim, ffn, gated)
        return num_layers * (2.0 * p_block + core)
    raise ValueError(f"unknown recomputation mode {mode!r}")


def megatron_flops_per_iteration(
    batch_sequences: int, seq_len: int, num_layers: int, hidden: int, vocab: int
) -> float:
    """FLOPs per iteration as Narayanan et al. SC'21 (arXiv:2104.04473,
    section 5.1, equation 3) count them for their "achieved teraFLOP/s per
    GPU", with full activation recomputation (four forward passes per block,
    three for the logits)::

        F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))

    Used only to turn a predicted time into their published metric.
    Units: FLOPs.
    """
    b, s, n_l, h = batch_sequences, seq_len, num_layers, hidden
    return 96.0 * b * s * n_l * h * h * (1.0 + s / (6.0 * h) + vocab / (16.0 * n_l * h))
