"""Activation memory of one transformer block per micro-batch, tensor by
tensor, for each recomputation mode (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", arXiv:2205.05198,
section 4 and Table 2).

Inventory (16-bit activations, `e = 2` bytes; dropout masks 1 byte per
element; per token of the micro-batch; `h` hidden, `q = nh d` attention width,
`kv = nkv d`, `F` FFN width, `nh` heads, `s` sequence length):

| tensor kept for backward | bytes per token | split by tensor parallelism |
|---|---|---|
| norm 1 input | e h | only with sequence parallelism |
| QKV input (norm 1 output) | e h | only with sequence parallelism |
| Q and K (inputs of `Q K^T`) | e (q + kv) | yes (heads) |
| softmax output | e nh s | yes (heads) |
| attention dropout mask | nh s | yes (heads) |
| attention dropout output (input of `A V`) | e nh s | yes (heads) |
| V | e kv | yes (heads) |
| attention output projection input | e q | yes (heads) |
| attention dropout mask (after projection) | h | only with sequence parallelism |
| norm 2 input | e h | only with sequence parallelism |
| FFN input (norm 2 output) | e h | only with sequence parallelism |
| FFN up output (activation input) | e F (SwiGLU: 2 e F, gate and up) | yes |
| activation output (FFN down input) | e F | yes |
| FFN dropout mask | h | only with sequence parallelism |

With MHA, GELU, `F = 4h`, dropout: `34 h + 5 nh s` bytes per token, i.e.
Korthikanti's `s b h (34 + 5 a s / h)` per layer. Without dropout the three
masks and the attention dropout output go. A fused flash-attention kernel
keeps none of the `s x s` tensors, only its output (already counted as the
projection input) and the fp32 log-sum-exp per head and token (`4 nh`).

Multi-head latent attention (DeepSeek-V2 report, arXiv:2405.04434, section
2.1): Q and K are `nh d_qk` wide, V and the projection input `nh d_v`, and
the block also keeps its latents: the query latent `r_q` and the key/value
latent `r_kv` (each the input of its norm and, normed, of its
up-projection) and the shared rotary key `d_rope`, `e (2 r_q + 2 r_kv +
d_rope)` bytes per token (split with sequence parallelism here; Megatron-
Core gathers the normed latents before the column-parallel up-projections,
so at `t > 1` this undercounts by at most `e (r_q + r_kv) (1 - 1/t)`).
"""

from __future__ import annotations

from dataclasses import dataclass

MASK_BYTES = 1
"""Dropout masks are stored as one byte per element (Korthikanti et al. 2022
section 4.1)."""

LSE_BYTES = 4
"""Flash attention keeps the fp32 log-sum-exp of every head and row."""


@dataclass(frozen=True)
class BlockShape:
    """What the activation inventory needs from the model and the step."""

    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn: int
    gated: bool
    seq_len: int
    value_head_dim: int | None = None
    """Per-head value width (MLA's `d_v`); None: head_dim."""
    latent_elements: int = 0
    """MLA's latents kept per token, in elements (`2 r_q + 2 r_kv + d_rope`,
    mla_latent_elements); 0 without MLA."""


@dataclass(frozen=True)
class ActivationBytes:
    """Bytes one block keeps per token, split by how tensor parallelism
    divides them: `head_split` over the heads or FFN columns, `seq_split`
    only with sequence parallelism (else replicated), `score` the `s x s`
    attention tensors (over the heads)."""

    head_split: float
    seq_split: float
    score: float

    def per_chip(self, tensor_parallel: int, sequence_parallel: bool) -> float:
        """Bytes per token on one chip of a `t`-way group:
        `(head_split + score) / t + seq_split / (t if SP else 1)`."""
        t = tensor_parallel
        return (self.head_split + self.score) / t + self.seq_split / (t if sequence_parallel else 1)


def block_activation_bytes(
    shape: BlockShape, element_bytes: int, dropout: bool, flash: bool
) -> ActivationBytes:
    """Per-token activation bytes of one block without recomputation (the
    module docstring's inventory). Units: bytes per token."""
    e = element_bytes
    h, q, kv = shape.hidden, shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    v = kv if shape.value_head_dim is None else shape.num_kv_heads * shape.value_head_dim
    out = q if shape.value_head_dim is None else shape.num_heads * shape.value_head_dim
    mask = MASK_BYTES if dropout else 0
    seq_split = 4 * e * h + 2 * mask * h  # norm inputs/outputs, two dropout masks
    seq_split += e * shape.latent_elements  # MLA's latents
    ffn_up = (2 if shape.gated else 1) * e * shape.ffn
    head_split = e * (q + kv) + e * v + e * out + ffn_up + e * shape.ffn
    if flash:
        score = LSE_BYTES * shape.num_heads
    else:
        per_score = e + (mask + e if dropout else 0)  # softmax out (+ mask, dropout out)
        score = per_score * shape.num_heads * shape.seq_len
    return ActivationBytes(float(head_split), float(seq_split), float(score))


def mla_latent_elements(q_lora_rank: int | None, kv_lora_rank: int, rope_head_dim: int) -> int:
    """Elements per token an MLA block keeps for its latents (module
    docstring): `2 r_q + 2 r_kv + d_rope` (no query latent without query
    compression: `2 r_kv + d_rope`). Units: elements."""
    return 2 * (q_lora_rank or 0) + 2 * kv_lora_rank + rope_head_dim


def up_projection_output_bytes(shape: BlockShape, element_bytes: int) -> float:
    """Bytes per token of the tensors MLA's up-projections and rotary
    embedding produce for the attention core, `e (2 nh d_qk + nh d_v)`
    (Q, K, V): what selective recomputation of the up-projections (Megatron-
    Core's `mla_up_proj`) frees, keeping the latents instead. Zero without
    MLA. Units: bytes per token, split over the heads."""
    if shape.latent_elements == 0:
        return 0.0
    nh = shape.num_heads
    d_v = shape.head_dim if shape.value_head_dim is None else shape.value_head_dim
    return float(element_bytes * (2 * nh * shape.head_dim + nh * d_v))


def layer_activation_bytes_per_token(
    mode: str,
    shape: BlockShape,
    element_bytes: int,
    tensor_parallel: int,
    sequence_parallel: bool,
    dropout: bool,
    flash: bool,
) -> float:
    """Bytes one block keeps on one chip per token of a micro-batch, by
    recomputation mode (Korthikanti et al. 2022, Table 2):

    - `none`: the whole inventory; with MHA/GELU/dropout this is
      `34 h + 5 nh s` without parallelism, `10 h + (24 h + 5 nh s) / t`
      with tensor parallelism, `(34 h + 5 nh s) / t` with sequence
      parallelism too.
    - `selective`: the `s x s` tensors are recomputed (`34 h / t` with
      sequence parallelism); a flash kernel keeps none anyway, so only its
      log-sum-exp goes. Under MLA the up-projections are recomputed too
      (Megatron-Core's `mla_up_proj`): Q, K and V go
      (up_projection_output_bytes), the latents stay.
    - `full`: only the block input, `e h` (`/ t` with sequence parallelism:
      Korthikanti's `2 s b h` per layer, split by `t` when the checkpoint is
      sequence-sharded).

    Units: bytes per token per chip.
    """
    t = tensor_parallel
    if mode == "full":
        return element_bytes * shape.hidden / (t if sequence_parallel else 1)
    inv = block_activation_bytes(shape, element_bytes, dropout, flash)
    if mode == "selective":
        freed = up_projection_output_bytes(shape, element_bytes)
        inv = ActivationBytes(inv.head_split - freed, inv.seq_split, 0.0)
    elif mode != "none":
        raise ValueError(f"unknown recomputation mode {mode!r}")
    return inv.per_chip(t, sequence_parallel)


def korthikanti_layer_bytes(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    num_heads: int,
    tensor_parallel: int,
    mode: str,
    sequence_parallel: bool,
) -> float:
    """Korthikanti et al. 2022 Table 2 closed forms, bytes per layer (GPT:
    MHA, GELU, F = 4h, dropout, 16-bit activations), for tests::

        no parallelism           s b h (34 + 5 a s / h)
        tensor parallel          s b h (10 + 24/t + 5 a s / (h t))
        tensor + sequence par.   s b h / t (34 + 5 a s / h)
        selective + SP           34 s b h / t
        full recomputation       2 s b h (/ t with SP)
    """
    s, b, h, a, t = seq_len, micro_batch, hidden, num_heads, tensor_parallel
    if mode == "full":
        return 2.0 * s * b * h / (t if sequence_parallel else 1)
    score = 5.0 * a * s / h if mode == "none" else 0.0
    if sequence_parallel:
        return s * b * h / t * (34.0 + score)
    return s * b * h * (10.0 + 24.0 / t + score / t)
