"""FP8 recipes for the FC layers' GEMMs: the casting work they add, the
weight copies they keep and the activation bytes they save (job.md
section 6).

Every recipe keeps activations, master weights, gradients and collectives
in the training dtype (`e` bytes per element) and casts each GEMM operand
to FP8 (1 byte) right before the GEMM. On Hopper an FP8 GEMM takes only
"TN" operands, so the backward's weight-gradient GEMM needs a transposed
copy: Transformer Engine's fused cast-transpose kernel reads the tensor
once and writes both copies (row-wise and column-wise); MXFP8 and the
DeepSeek-style blocks scale along one dimension, so they too write a
row-wise and a column-wise copy, each with its scales (Transformer Engine
documentation, "FP8 recipes"; NVIDIA, "Using FP8 with Transformer Engine";
DeepSeek-V3 technical report, section 3.3).

Base units: bytes per element, bytes per parameter.
"""

from __future__ import annotations

#: Scale bytes per element of each recipe's FP8 copy: MXFP8 one E8M0 byte
#: per 32 elements (OCP Microscaling Formats v1.0, section 5.2); blockwise
#: one fp32 per 128 elements (1 x 128 tiles; DeepSeek-V3 section 3.3.2);
#: per-tensor recipes one fp32 per tensor (negligible).
SCALE_BYTES_PER_ELEMENT = {
    "delayed": 0.0,
    "current": 0.0,
    "mxfp8": 1.0 / 32.0,
    "blockwise": 4.0 / 128.0,
}


def fp8_cast_bytes_per_element(recipe: str, element_bytes: float) -> float:
    """HBM bytes moved to cast one element of a GEMM operand to FP8::

        e + 2 (1 + scale)          delayed, mxfp8, blockwise
        2 e + 2 (1 + scale)        current

    Read the `e`-byte element, write its row-wise and column-wise FP8 copies
    (1 byte each) with their scales (SCALE_BYTES_PER_ELEMENT). Delayed
    scaling takes the scale from the amax history of earlier steps (the
    amax of this cast is a by-product); current scaling needs the tensor's
    own amax before it can cast, one more read. Derivation from the
    recipes (module docstring)."""
    scale = SCALE_BYTES_PER_ELEMENT[recipe]
    read = 2.0 * element_bytes if recipe == "current" else element_bytes
    return read + 2.0 * (1.0 + scale)


def fp8_weight_copy_bytes_per_param(recipe: str) -> float:
    """Bytes per parameter of the FP8 weight copies a recipe keeps beside
    the `e`-byte weights: the row-wise and the column-wise copy with their
    scales, `2 (1 + scale)` (128 x 128 weight blocks for blockwise: a scale
    per 16,384 weights, negligible)."""
    scale = 0.0 if recipe == "blockwise" else SCALE_BYTES_PER_ELEMENT[recipe]
    return 2.0 * (1.0 + scale)


def fp8_saved_input_bytes_per_element(recipe: str) -> float:
    """Bytes per element of an FC layer's input kept for its backward under
    a recipe: the column-wise FP8 copy the weight-gradient GEMM reads, with
    its scales, `1 + scale` (instead of `e`)."""
    return 1.0 + SCALE_BYTES_PER_ELEMENT[recipe]
