"""The fully connected (FC) layers of one transformer block, sized for one
micro-batch of one tensor-parallel group."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotune.specs.model import FfnKind, ModelSpec
from autotune.specs.model_params import mla_projection_params
from autotune.specs.training import TrainingSpec

QKV = "qkv"
ATTN_OUT = "attn_out"
FFN_GATE = "ffn_gate"
FFN_UP = "ffn_up"
FFN_DOWN = "ffn_down"


@dataclass(frozen=True)
class FCLayer:
    """`Y = X @ W` with X `tokens x in_features`, W `in_features x out_features`.

    `count_per_step` is how many times one chip runs this layer's three GEMMs
    per training step: blocks on one pipeline stage times micro-batches.
    """

    name: str
    in_features: int
    out_features: int
    tokens: int
    count_per_step: int

    @property
    def flops_per_pass(self) -> float:
        """FLOPs of one of its three GEMMs: `2 * T * I * O`."""
        return 2.0 * self.tokens * self.in_features * self.out_features

    @property
    def training_flops(self) -> float:
        """FLOPs of forward + backward-data + backward-weight, once."""
        return 3.0 * self.flops_per_pass


def blocks_per_stage(model: ModelSpec, training: TrainingSpec) -> int:
    """Blocks on the busiest pipeline stage: `ceil(num_layers / pp)`."""
    return math.ceil(model.num_layers / training.pipeline_parallel)


def fc_layers(model: ModelSpec, training: TrainingSpec) -> list[FCLayer]:
    """The FC layers of a block in model order.

    GELU blocks (GPT-3 style, model.md section 3): QKV `H -> (nh + 2 nkv) d`,
    attention output `nh d -> H`, FFN up `H -> F`, FFN down `F -> H`. SwiGLU
    blocks (seed 001 "SwiGLU") add a gate projection `H -> F` beside the up
    projection. Grouped-query attention shrinks the K and V parts of QKV to
    `nkv` heads.
    """
    count = blocks_per_stage(model, training) * training.num_micro_batches
    return block_fc_layers(model, training.tokens_per_micro_batch, count)


def qkv_out_features(model: ModelSpec) -> int:
    """Output width of the block's QKV layer: `(nh + 2 nkv) d`. Under MLA,
    the four low-rank projections are planned as one QKV layer of the same
    input and (to a multiple of `nh`, so heads still divide) the same
    weights and FLOPs: `ceil(P_mla / (h nh)) nh` (an approximation: the
    chained down- and up-projections' own collectives are not priced)."""
    if model.mla is None:
        return (model.num_heads + 2 * model.kv_heads) * model.head_dim
    per_head = math.ceil(mla_projection_params(model) / (model.hidden_size * model.num_heads))
    return per_head * model.num_heads


def planned_ffn_size(model: ModelSpec) -> int:
    """Width of the FFN planned with the attention as one tensor-parallel
    block: the model's ffn_size, or for a mixture of experts the shared
    experts' width (0: none; the routed experts are priced apart,
    cost_models.moe)."""
    if model.moe is None:
        return model.ffn_size
    return model.moe.shared_expert_ffn_size


def block_fc_layers(model: ModelSpec, tokens: int, count: int = 1) -> list[FCLayer]:
    """The FC layers of a block for `tokens` tokens per micro-batch, each run
    `count` times per step (see :func:`fc_layers`): QKV (qkv_out_features)
    and the attention output, then the FFN of planned_ffn_size (none when
    it is 0)."""
    h = model.hidden_size
    layers = [
        FCLayer(QKV, h, qkv_out_features(model), tokens, count),
        FCLayer(ATTN_OUT, model.attention_width, h, tokens, count),
    ]
    ffn = planned_ffn_size(model)
    if ffn == 0:
        return layers
    if model.ffn_kind is FfnKind.SWIGLU:
        layers.append(FCLayer(FFN_GATE, h, ffn, tokens, count))
    layers.append(FCLayer(FFN_UP, h, ffn, tokens, count))
    layers.append(FCLayer(FFN_DOWN, ffn, h, tokens, count))
    return layers
