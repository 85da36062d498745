"""Memory-bound operations of one transformer block: bytes each moves over
HBM in the forward and backward pass, and the time at a given bandwidth.

Each op reads its inputs and writes its outputs once (fused kernels as
Megatron-LM runs them: bias-dropout-add, bias-GELU, scale-mask-softmax); the
backward reads the saved input and the output gradient and writes the input
gradient. Per token; `e` bytes per element, masks 1 byte. Derivation: count
the tensors each kernel touches (Korthikanti et al. 2022, section 4.1, list
the same tensors for memory; the byte counts follow from the kernel's reads
and writes).

| op | forward bytes | backward bytes |
|---|---|---|
| norm (x2) | read h, write h: `2 e h` | read x, dy, write dx: `3 e h` |
| residual add (x2) | read 2h, write h: `3 e h` | gradients summed at the fork: `3 e h` |
| dropout (x2) | read h, write h and mask: `(2e+1) h` | dy, mask in, dx out: `(2e+1) h` |
| rotary on Q and K | read and write `q + kv`: `2 e (q + kv)` | same |
| activation (GELU) | read F, write F: `2 e F` | read x, dy, write dx: `3 e F` |
| activation (SwiGLU) | read 2F, write F: `3 e F` | read gate, up, dy, write 2 grads: `5 e F` |
| softmax (unfused) | read and write `nh s`: `2 e nh s` | read y, dy, write dx: `3 e nh s` |
| attention dropout (unfused) | `(2 e + 1) nh s` | `(2 e + 1) nh s` |

A flash-attention kernel does the softmax and attention dropout on chip and
moves none of the `s x s` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpBytes:
    """One memory-bound op: name, forward and backward bytes per token, and
    whether tensor parallelism splits it (heads/FFN columns: always; hidden-
    wide ops: only with sequence parallelism)."""

    name: str
    forward_bytes: float
    backward_bytes: float
    head_split: bool


def block_elementwise_ops(
    hidden: int,
    attention_width: int,
    kv_width: int,
    ffn: int,
    gated: bool,
    num_heads: int,
    seq_len: int,
    element_bytes: int,
    dropout: bool,
    rotary: bool,
    flash: bool,
) -> tuple[OpBytes, ...]:
    """The memory-bound ops of one block with their bytes per token (table
    in the module docstring). Units: bytes per token."""
    e, h = element_bytes, hidden
    ops = [
        OpBytes("norm", 2 * 2 * e * h, 2 * 3 * e * h, False),
        OpBytes("residual add", 2 * 3 * e * h, 2 * 3 * e * h, False),
    ]
    if dropout:
        ops.append(OpBytes("dropout", 2 * (2 * e + 1) * h, 2 * (2 * e + 1) * h, False))
    if rotary:
        rot = 2 * e * (attention_width + kv_width)
        ops.append(OpBytes("rotary", rot, rot, True))
    if gated:
        ops.append(OpBytes("activation (SwiGLU)", 3 * e * ffn, 5 * e * ffn, True))
    else:
        ops.append(OpBytes("activation (GELU)", 2 * e * ffn, 3 * e * ffn, True))
    if not flash:
        score = num_heads * seq_len
        ops.append(OpBytes("softmax", 2 * e * score, 3 * e * score, True))
        if dropout:
            ops.append(OpBytes("attention dropout", (2 * e + 1) * score, (2 * e + 1) * score, True))
    return tuple(ops)


def elementwise_s(
    ops: tuple[OpBytes, ...],
    tokens: int,
    tensor_parallel: int,
    sequence_parallel: bool,
    hbm_bytes_per_s: float,
    forward: bool,
) -> float:
    """Seconds of the ops over `tokens` tokens on one chip::

        t = sum_op bytes_op * tokens / split_op / hbm_bytes_per_s

    `split_op = t` for head-split ops, and for hidden-wide ops with sequence
    parallelism; else 1 (replicated). Units: seconds; `hbm_bytes_per_s`
    bytes/s."""
    total = 0.0
    for op in ops:
        split = tensor_parallel if (op.head_split or sequence_parallel) else 1
        total += (op.forward_bytes if forward else op.backward_bytes) * tokens / split
    return total / hbm_bytes_per_s


def loss_bytes_per_token(vocab: int, element_bytes: int) -> tuple[float, float]:
    """Forward and backward bytes per token of the vocabulary-parallel
    cross-entropy over the logits (Megatron-LM computes it in fp32):
    forward reads the 16-bit logits, writes and re-reads fp32
    exponentials (`e V + 2 * 4 V`); backward reads them and writes the
    16-bit logit gradient (`4 V + e V`). Units: bytes per token (divide by
    the tensor-parallel size for the vocabulary shard)."""
    return element_bytes * vocab + 8.0 * vocab, 4.0 * vocab + element_bytes * vocab


def adam_step_bytes_per_param(param_bytes: int, grad_bytes: int) -> float:
    """HBM bytes of a mixed-precision Adam step per locally owned parameter:
    read and write the fp32 master weight, momentum and variance (`2 * 12`),
    read the gradient, write the 16-bit working weight. Units: bytes."""
    return 24.0 + grad_bytes + param_bytes
