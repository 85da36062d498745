"""Context parallelism: one sequence split over `cp` chips, the attention
core's keys and values exchanged among them (job.md section 6).

Causal load balancing (Megatron-LM / Transformer Engine; Liu et al., "Ring
Attention", 2023, and its load-balanced form in TE's
`attn_forward_func_with_cp`): each sequence is cut into `2 cp` equal chunks
and chip `i` holds chunks `i` and `2 cp - 1 - i`, so every chip owns the
same share of the causal score matrix. In chunk-pair units (one chunk's
queries against one chunk's keys) a chip's queries face `2 cp` units of
causal work: on the first ring step its own two chunks (one whole unit and
two causal halves: 2 units), on each later step half of the 4 units the
arriving block offers (2 units). So each of the `cp` steps is `1 / cp` of
the chip's attention, whatever the chip.

All functions take base units (seconds, bytes) and broadcast over arrays.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def kv_block_bytes(
    local_tokens: ArrayLike, kv_heads_per_chip: ArrayLike, head_dim: int, element_bytes: float
) -> np.ndarray:
    """Bytes of the key and value block one chip holds and passes on::

        bytes = 2 * local_tokens * kv_heads_per_chip * head_dim * element_bytes

    `local_tokens` is the chip's tokens of the micro-batch (`b s / cp`,
    divided by any tensor split of the sequences); `kv_heads_per_chip` the
    key/value heads it holds. Derivation: K and V are each
    `tokens x kv_heads x head_dim` (Ainslie et al. 2023, GQA)."""
    tokens = np.asarray(local_tokens, dtype=float)
    return 2.0 * tokens * np.asarray(kv_heads_per_chip, dtype=float) * head_dim * element_bytes


def ring_attention_exposed_s(attention_s: ArrayLike, step_send_s: ArrayLike, cp: int) -> np.ndarray:
    """Seconds of a ring-attention pass (forward or backward) the attention
    does not hide, per chip::

        exposed = (cp - 1) * max(0, step_send_s - attention_s / cp)

    The pass is `cp` steps of `attention_s / cp` each (module docstring);
    during each of the first `cp - 1` steps the chip sends the block it holds
    to the next chip and receives the next one (`step_send_s`, one
    send-recv), and the next step waits for both. The last step sends
    nothing. Zero for `cp` 1. Derivation from the schedule of Transformer
    Engine's p2p context parallelism (one send-recv per step, overlapped
    with the step's attention)."""
    if cp <= 1:
        return np.zeros_like(np.asarray(attention_s, dtype=float))
    attn = np.asarray(attention_s, dtype=float)
    return (cp - 1) * np.maximum(np.asarray(step_send_s, dtype=float) - attn / cp, 0.0)


def ulysses_all_to_all_bytes(
    local_tokens: ArrayLike,
    q_heads_per_chip: ArrayLike,
    kv_heads_per_chip: ArrayLike,
    head_dim: int,
    element_bytes: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(bytes per chip into the attention, bytes out of it) of DeepSpeed-
    Ulysses's all-to-alls in one forward pass (Jacobs et al. 2023, section
    3.1): queries, keys and values go from a sequence split to a head split,
    the attention output back::

        in  = local_tokens * (q_heads + 2 kv_heads) * head_dim * element_bytes
        out = local_tokens * q_heads * head_dim * element_bytes

    with the heads a chip holds before the exchange (it leaves with
    `1 / cp` of them for the whole sequence). The backward pass moves the
    same bytes the other way."""
    tokens = np.asarray(local_tokens, dtype=float)
    q = np.asarray(q_heads_per_chip, dtype=float)
    kv = np.asarray(kv_heads_per_chip, dtype=float)
    return (
        tokens * (q + 2.0 * kv) * head_dim * element_bytes,
        tokens * q * head_dim * element_bytes,
    )


def attention_rate_length(seq_len: ArrayLike, causal: bool) -> np.ndarray:
    """The length whose rate a fused attention kernel runs at: `s` for a
    full mask, `s / 2` for a causal one (each query block meets on average
    half the keys, and the kernel skips the masked tiles, so its tiles and
    waves are those of a full kernel on `s / 2` tokens). Derivation; on the
    one public source that times both masks of one kernel on one machine
    (FlashAttention-3 backward on H100, B=4, H=48, d=128: meta-pytorch/
    tritonbench pull requests #1256, full, and #1267, causal) the causal
    rate at `s` is within 3% of the full rate at `s / 2` for s = 2,048 -
    8,192 (316/313, 444/435, 539/520 TFLOP/s). On FlashAttention-2, both
    masks and both passes on one Hopper GPU (pytorch/benchmark commit
    c0409aaf, d = 128), the backward agrees within 4% for s = 2,048 -
    16,384 (183/190 ... 307/302) but the causal forward runs 8-13% below the
    full rate at `s / 2` (286/327 ... 329/356): a fit to both masks (as
    `h100-measured-fa2`'s) splits that difference. Units: tokens."""
    s = np.asarray(seq_len, dtype=float)
    return s / 2.0 if causal else s


def attention_rate_flops_per_s(
    seq_len: ArrayLike,
    asymptotic_flops_per_s: float,
    seq_half: float,
    max_seq_len: float | None = None,
) -> np.ndarray:
    """The fused attention kernel's rate for sequences (or context-parallel
    blocks) of `seq_len` tokens (their rate length,
    :func:`attention_rate_length`)::

        rate = asymptotic_flops_per_s * s / (s + seq_half),  s <= max_seq_len

    A saturating curve in the sequence length (short sequences leave the
    kernel's tiles and the chip's cores partly idle; long ones run at its
    asymptotic rate); `seq_half` 0 is a constant rate. Beyond the longest
    length measured (`max_seq_len`, when given) the rate is held at that
    length's instead of climbing further on the fitted curve (the GEMM
    model's rule for shapes beyond the measured ones). Fitted by `meshtune
    calibrate` from attention rows (calibrate/fit_attention.py). Units:
    tokens, FLOP/s."""
    s = np.asarray(seq_len, dtype=float)
    if max_seq_len is not None:
        s = np.minimum(s, max_seq_len)
    if seq_half <= 0:
        return np.full_like(s, asymptotic_flops_per_s)
    return asymptotic_flops_per_s * s / (s + seq_half)
