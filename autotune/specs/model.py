"""What is trained: the transformer's shape."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from autotune.specs.base import MAX_DIM, MAX_FACTOR, MAX_LAYERS, Spec


class FfnKind(str, Enum):
    """Feed-forward block kind: GELU has 2 FC layers, SwiGLU 3."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class PositionEncoding(str, Enum):
    """Learned absolute position embeddings (GPT) or rotary (Llama)."""

    LEARNED = "learned"
    ROTARY = "rotary"


class RouterKind(str, Enum):
    """How a token's expert scores are normalised: softmax (Mixtral, Qwen,
    DeepSeek-V2, gpt-oss) or sigmoid (DeepSeek-V3). Informational: both are
    priced as the same memory-bound work."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"


class MoeSpec(Spec):
    """The mixture-of-experts FFN: a router sends each token to
    `experts_per_token` of `num_experts` routed experts (each a gated FFN of
    `expert_ffn_size`), plus shared experts every token uses."""

    num_experts: int = Field(
        ge=2, le=MAX_DIM, description="Routed experts per MoE layer. Range: 2 to 2^24."
    )
    experts_per_token: int = Field(
        ge=1, le=MAX_DIM, description="Routed experts each token uses (top-k). Range: 1 to 2^24."
    )
    expert_ffn_size: int = Field(
        gt=0, le=MAX_DIM, description="Inner width of one routed expert. Range: 1 to 2^24."
    )
    shared_expert_ffn_size: int = Field(
        default=0,
        ge=0,
        le=MAX_DIM,
        description="Inner width of the shared experts together (every token uses them; "
        "DeepSeek: n_shared_experts x moe_intermediate_size; 0: none). Range: 0 to 2^24.",
    )
    first_dense_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="Leading blocks with a dense FFN of the model's ffn_size (DeepSeek-V3: 3). "
        "Range: 0 to 100,000.",
    )
    layer_frequency: int = Field(
        default=1,
        ge=1,
        le=MAX_LAYERS,
        description="After the dense blocks, block i (from 0) is MoE when (i + 1) is a "
        "multiple of this (1: every block). Range: 1 to 100,000.",
    )
    router: RouterKind = Field(
        default=RouterKind.SOFTMAX, strict=False, description="softmax or sigmoid scores."
    )
    capacity_factor: float | None = Field(
        default=None,
        ge=1.0,
        le=MAX_FACTOR,
        description="Tokens an expert takes, over its even share (extra ones dropped); "
        "omitted means dropless. Range: 1 to 1000.",
    )
    expert_imbalance: float | None = Field(
        default=None,
        ge=1.0,
        le=MAX_FACTOR,
        description="Busiest expert-parallel rank's routed tokens over the mean, as measured "
        "in your runs (1 for forced balance); omitted means the capacity factor when set, else "
        "a real-routing default that grows with the expert-parallel degree: 1.30, the lowest "
        "imbalance UltraEP measured (arXiv:2606.04101, EP 64), scaled to the experts each rank "
        "holds (cost_models.moe.default_imbalance). Range: 1 to 1000.",
    )
    node_limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DIM,
        description="Most expert groups (nodes) one token may be sent to (DeepSeek-V3 "
        "topk_group: 4); omitted means no limit. Range: 1 to 2^24.",
    )

    expert_groups: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DIM,
        description="Groups the routed experts are split into for node-limited routing "
        "(DeepSeek-V3 n_group: 8); omitted means not stated. Range: 1 to 2^24.",
    )

    @model_validator(mode="after")
    def _check_top_k(self) -> MoeSpec:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds num_experts "
                f"({self.num_experts}); fix: use a top-k no larger than the expert count"
            )
        if self.expert_groups is not None and self.num_experts % self.expert_groups:
            raise ValueError(
                f"expert_groups ({self.expert_groups}) does not divide num_experts "
                f"({self.num_experts}); fix: a divisor of num_experts"
            )
        return self


class MlaSpec(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values
    pass through low-rank projections; each head's query/key has a
    `qk_nope_head_dim` part from the compressed KV and a shared
    `qk_rope_head_dim` rotary part; values are `v_head_dim` wide."""

    q_lora_rank: int | None = Field(
        default=None,
        gt=0,
        le=MAX_DIM,
        description="Query compression rank; omitted means a full query projection "
        "(DeepSeek-V2-Lite). Range: 1 to 2^24.",
    )
    kv_lora_rank: int = Field(
        gt=0, le=MAX_DIM, description="Compressed key/value width. Range: 1 to 2^24."
    )
    qk_nope_head_dim: int = Field(
        gt=0, le=MAX_DIM, description="Per-head query/key width without RoPE. Range: 1 to 2^24."
    )
    qk_rope_head_dim: int = Field(
        gt=0, le=MAX_DIM, description="Per-head query/key RoPE width. Range: 1 to 2^24."
    )
    v_head_dim: int = Field(gt=0, le=MAX_DIM, description="Per-head value width. Range: 1 to 2^24.")

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: `nope + rope`."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class ModelSpec(Spec):
    """A decoder-only transformer, as far as its FC layers are concerned."""

    name: str = Field(description="Model name shown in reports, e.g. gpt3-175b.")
    num_layers: int = Field(
        gt=0, le=MAX_LAYERS, description="Transformer blocks. Range: 1 to 100,000."
    )
    hidden_size: int = Field(
        gt=0, le=MAX_DIM, description="Model (residual stream) width. Range: 1 to 2^24."
    )
    num_heads: int = Field(
        gt=0, le=MAX_DIM, description="Attention (query) heads. Range: 1 to 2^24."
    )
    head_dim: int = Field(
        gt=0, le=MAX_DIM, description="Width of one attention head. Range: 1 to 2^24."
    )
    num_kv_heads: int | None = Field(
        default=None,
        gt=0,
        le=MAX_DIM,
        description="Key/value heads (GQA); omitted means num_heads (MHA). Range: 1 to 2^24.",
    )
    ffn_size: int = Field(
        gt=0,
        le=MAX_DIM,
        description="Feed-forward inner width (a mixture of experts: its dense blocks'). "
        "Range: 1 to 2^24.",
    )
    ffn_kind: FfnKind = Field(
        default=FfnKind.GELU,
        strict=False,
        description="gelu (up, down) or swiglu (gate, up, down).",
    )
    vocab_size: int | None = Field(
        default=None,
        gt=0,
        le=MAX_DIM,
        description="Vocabulary size (embedding, output layer and loss; omitted means they "
        "are left out of the step). Range: 1 to 2^24.",
    )
    position_encoding: PositionEncoding = Field(
        default=PositionEncoding.LEARNED, strict=False, description="learned or rotary."
    )
    tied_embeddings: bool | None = Field(
        default=None,
        description=(
            "Input embedding and output projection share one matrix (informational, "
            "for parameter counts); omitted means not stated."
        ),
    )

    moe: MoeSpec | None = Field(
        default=None,
        description="Mixture of experts (omitted: every FFN dense).",
    )
    mla: MlaSpec | None = Field(
        default=None,
        description="Multi-head latent attention (omitted: Q, K, V projections of full width).",
    )
    sliding_window: int | None = Field(
        default=None,
        gt=0,
        le=MAX_DIM,
        description="Tokens a sliding-window block's query attends to (itself and those "
        "before it: Mistral 7B v0.1 4096, gpt-oss 128); omitted: every block attends to the "
        "whole causal prefix. Range: 1 to 2^24.",
    )
    full_attention_every: int | None = Field(
        default=None,
        ge=2,
        le=MAX_LAYERS,
        description="With sliding_window: every n-th block (the n-th, 2n-th, ...) attends to "
        "the whole prefix instead (gpt-oss and Gemma 2: 2; Gemma 3: 6; Megatron-LM's "
        "--window-attn-skip-freq); omitted: every block is windowed. Range: 2 to 100,000.",
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        le=MAX_LAYERS,
        description="Multi-token-prediction blocks after the last (DeepSeek-V3: 1), each with "
        "its own projection and a pass through the output layer. Range: 0 to 100,000.",
    )

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        kv = self.kv_heads
        if kv > self.num_heads or self.num_heads % kv:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({kv}); "
                "fix: use a num_kv_heads that divides num_heads"
            )
        if self.moe is not None and self.moe.first_dense_layers > self.num_layers:
            raise ValueError(
                f"moe.first_dense_layers ({self.moe.first_dense_layers}) exceeds num_layers "
                f"({self.num_layers}); fix: at most num_layers"
            )
        if self.full_attention_every is not None and self.sliding_window is None:
            raise ValueError(
                f"full_attention_every ({self.full_attention_every}) needs sliding_window; "
                "fix: give the window's tokens, or remove full_attention_every"
            )
        if self.mla is not None and self.head_dim != self.mla.qk_head_dim:
            raise ValueError(
                f"head_dim ({self.head_dim}) must be mla.qk_nope_head_dim + "
                f"mla.qk_rope_head_dim ({self.mla.qk_head_dim}); fix: set head_dim to their sum"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_unstated(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unstated tied_embeddings is left out of dumps, so documents that
        # embed a model written before the field existed keep their bytes.
        data = handler(self)
        if self.tied_embeddings is None:
            data.pop("tied_embeddings", None)
        for key in ("moe", "mla"):
            if getattr(self, key) is None:
                data.pop(key, None)
        if self.mtp_layers == 0:
            data.pop("mtp_layers", None)
        for key in ("sliding_window", "full_attention_every"):
            if getattr(self, key) is None:
                data.pop(key, None)
        return data

    @property
    def windowed_blocks(self) -> int:
        """Blocks whose attention is windowed: all without full_attention_every,
        else those whose 1-based number is not a multiple of it; 0 without a
        sliding window."""
        if self.sliding_window is None:
            return 0
        n = self.full_attention_every
        return self.num_layers if n is None else self.num_layers - self.num_layers // n

    @property
    def kv_heads(self) -> int:
        """Key/value heads (num_heads when not grouped)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def attention_width(self) -> int:
        """Width of the attention core's output, the output projection's
        input: `num_heads * head_dim` (MLA: `num_heads * v_head_dim`)."""
        return self.num_heads * self.value_head_dim

    @property
    def value_head_dim(self) -> int:
        """Per-head value width: head_dim (MLA: v_head_dim)."""
        return self.mla.v_head_dim if self.mla is not None else self.head_dim

    @property
    def core_head_dim(self) -> float:
        """Mean of the query/key and value head widths, `(d_qk + d_v) / 2`:
        the attention core's `Q K^T` and `P V` cost `2 s^2 (d_qk + d_v)` per
        head, i.e. `4 s^2 d` with this `d` (head_dim without MLA)."""
        return (self.head_dim + self.value_head_dim) / 2

    def is_moe_layer(self, index: int) -> bool:
        """Whether block `index` (from 0) has a mixture-of-experts FFN:
        past the first dense blocks, every `layer_frequency`-th (Qwen2-MoE's
        `(i + 1) % decoder_sparse_step == 0`)."""
        moe = self.moe
        if moe is None or index < moe.first_dense_layers:
            return False
        return (index + 1) % moe.layer_frequency == 0

    @property
    def moe_layer_flags(self) -> tuple[bool, ...]:
        """Per block (model order) whether it is a mixture-of-experts block."""
        return tuple(self.is_moe_layer(i) for i in range(self.num_layers))
