"""What is trained: the transformer's shape."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from autotune.specs.base import MAX_DIM, MAX_LAYERS, Spec


class FfnKind(str, Enum):
    """Feed-forward block kind: GELU has 2 FC layers, SwiGLU 3."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class PositionEncoding(str, Enum):
    """Learned absolute position embeddings (GPT) or rotary (Llama)."""

    LEARNED = "learned"
    ROTARY = "rotary"


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
        gt=0, le=MAX_DIM, description="Feed-forward inner width. Range: 1 to 2^24."
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

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        kv = self.kv_heads
        if kv > self.num_heads or self.num_heads % kv:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({kv}); "
                "fix: use a num_kv_heads that divides num_heads"
            )
        return self

    @model_serializer(mode="wrap")
    def _omit_unstated(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unstated tied_embeddings is left out of dumps, so documents that
        # embed a model written before the field existed keep their bytes.
        data = handler(self)
        if self.tied_embeddings is None:
            data.pop("tied_embeddings", None)
        return data

    @property
    def kv_heads(self) -> int:
        """Key/value heads (num_heads when not grouped)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def attention_width(self) -> int:
        """`num_heads * head_dim`: the width of the attention core."""
        return self.num_heads * self.head_dim
