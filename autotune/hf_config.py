"""Hugging Face `config.json` as a model spec.

The dense decoder-only families people train map onto :class:`ModelSpec`:
Llama, Mistral, Qwen2, Qwen3, Gemma (1, 2 and 3 text), GPT-NeoX and GPT-2.
Key names and defaults are those of the `transformers` configuration and
modelling classes (transformers 5.23.0: `models/<family>/configuration_*.py`,
and for GPT-2's FFN width `GPT2Block`: `n_inner` or `4 * n_embd`).

- Gated FFNs (Llama, Mistral, Qwen, Gemma: gate, up and down projections,
  SiLU or GELU) are `ffn_kind: swiglu`: the three GEMMs have the same shapes
  whatever the activation. GPT-NeoX and GPT-2 have two (`gelu`).
- `head_dim` is the config's when it gives one (Gemma: 256 with a 3072-wide
  residual stream), else `hidden_size / num_attention_heads`.
- `tie_word_embeddings` missing from a file means the family's class default
  (what `transformers` itself would load): tied for Gemma and GPT-2, untied
  for the others.
- position encoding: rotary for every family but GPT-2 (learned absolute
  positions); a trainer export says so (Megatron-LM's default is learned).

Architectures meshtune cannot price (mixture of experts, multi-head latent
attention, anything not listed) are refused with one line naming what is
missing. Norms, biases and learned position embeddings are not part of the
spec (they are not FC layers and hold well under 0.5% of the weights of the
models tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.specs.base import MAX_DIM, MAX_LAYERS
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding


@dataclass(frozen=True)
class _Family:
    """Where one family's config keeps each dimension."""

    layers: str
    hidden: str
    heads: str
    ffn: str | None  # None: GPT-2's n_inner, defaulting to 4 * hidden
    kv_heads: str | None
    head_dim: str | None
    gated: bool
    tied_default: bool
    rotary: bool = True  # rotary position embeddings (GPT-2: learned absolute)


_LLAMA_KEYS = dict(
    layers="num_hidden_layers",
    hidden="hidden_size",
    heads="num_attention_heads",
    ffn="intermediate_size",
    kv_heads="num_key_value_heads",
    head_dim="head_dim",
    gated=True,
)

FAMILIES: dict[str, _Family] = {
    "llama": _Family(**_LLAMA_KEYS, tied_default=False),
    "mistral": _Family(**_LLAMA_KEYS, tied_default=False),
    "qwen2": _Family(**_LLAMA_KEYS, tied_default=False),
    "qwen3": _Family(**_LLAMA_KEYS, tied_default=False),
    "gemma": _Family(**_LLAMA_KEYS, tied_default=True),
    "gemma2": _Family(**_LLAMA_KEYS, tied_default=True),
    "gemma3_text": _Family(**_LLAMA_KEYS, tied_default=True),
    "gpt_neox": _Family(
        layers="num_hidden_layers",
        hidden="hidden_size",
        heads="num_attention_heads",
        ffn="intermediate_size",
        kv_heads=None,
        head_dim=None,
        gated=False,
        tied_default=False,
    ),
    "gpt2": _Family(
        layers="n_layer",
        hidden="n_embd",
        heads="n_head",
        ffn=None,
        kv_heads=None,
        head_dim=None,
        gated=False,
        tied_default=True,
        rotary=False,
    ),
}

# `architectures[0]` of hub files -> model_type, for files that lack model_type.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "GPTNeoXForCausalLM": "gpt_neox",
    "GPT2LMHeadModel": "gpt2",
}

# Keys whose value > 1 marks a mixture of experts (Mixtral and Qwen3-MoE:
# num_local_experts; Qwen2-MoE: num_experts; DeepSeek: n_routed_experts).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_MOE_TYPES = (
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "dbrx",
    "olmoe",
    "granitemoe",
    "phimoe",
    "jetmoe",
    "gpt_oss",
    "llama4",
    "llama4_text",
)

_FIX_DENSE = "use a dense model, or write the model's fields in the plan YAML (README)"


def _fail(path: str, field: str | None, message: str, value: Any = None, fix: str = "") -> None:
    raise InputError(message, file=path, field=field, value=value, fix=fix or None)


def _model_type(data: dict[str, Any], path: str) -> str:
    model_type = data.get("model_type")
    if isinstance(model_type, str) and model_type:
        return model_type
    archs = data.get("architectures")
    if isinstance(archs, list) and archs and archs[0] in ARCHITECTURES:
        return ARCHITECTURES[archs[0]]
    raise InputError(
        "is required (a Hugging Face config.json names its model_type)",
        file=path,
        field="model_type",
        fix=f'add `"model_type": ...`, one of {", ".join(FAMILIES)}',
    )


def _refuse_unpriceable(data: dict[str, Any], model_type: str, path: str) -> None:
    for key in _EXPERT_KEYS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            _fail(
                path,
                key,
                "mixture of experts cannot be priced yet: meshtune plans dense FFN blocks "
                "(no expert parallelism or routing cost)",
                value,
                _FIX_DENSE,
            )
    if model_type in _MOE_TYPES:
        _fail(
            path,
            "model_type",
            "is a mixture-of-experts family, which meshtune cannot price yet (dense FFNs only)",
            model_type,
            _FIX_DENSE,
        )
    if data.get("kv_lora_rank"):
        _fail(
            path,
            "kv_lora_rank",
            "multi-head latent attention cannot be priced yet: meshtune plans Q, K and V "
            "projections of full width",
            data["kv_lora_rank"],
            _FIX_DENSE,
        )
    if model_type not in FAMILIES:
        _fail(
            path,
            "model_type",
            "is not an architecture meshtune maps (its FC layer shapes are unknown)",
            model_type,
            f"use one of {', '.join(FAMILIES)}, or write the model's fields in the plan YAML",
        )


def _dimension(
    data: dict[str, Any], key: str, path: str, optional: bool = False, high: int = MAX_DIM
) -> int | None:
    """`data[key]` as a whole number from 1 to `high` (the model spec's
    plausible range of that dimension), named by its config.json key."""
    if key not in data or data[key] is None:
        if optional:
            return None
        _fail(path, key, "is required", fix=f'add `"{key}": <positive integer>`')
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        _fail(
            path,
            key,
            f"must be a whole number from 1 to {high}",
            value,
            f"give `{key}` as a whole number from 1 to {high}",
        )
    return value


def _name(path: Path) -> str:
    # models/llama-3-8b/config.json -> llama-3-8b; my-model.json -> my-model
    if path.name == "config.json" and path.resolve().parent.name:
        return path.resolve().parent.name
    return path.stem


def spec_fields(data: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The model-spec fields of a parsed Hugging Face `config.json` (to be
    validated as :class:`ModelSpec`); InputError when a key is missing or
    the architecture cannot be priced. `autotune.loading.load_model_spec`
    reads the file."""
    file = str(path)
    model_type = _model_type(data, file)
    _refuse_unpriceable(data, model_type, file)
    fam = FAMILIES[model_type]
    layers = _dimension(data, fam.layers, file, high=MAX_LAYERS)
    hidden = _dimension(data, fam.hidden, file)
    heads = _dimension(data, fam.heads, file)
    vocab = _dimension(data, "vocab_size", file)
    if fam.ffn is None:
        ffn = _dimension(data, "n_inner", file, optional=True) or 4 * hidden
    else:
        ffn = _dimension(data, fam.ffn, file)
    kv = _dimension(data, fam.kv_heads, file, optional=True) if fam.kv_heads else None
    head_dim = _dimension(data, fam.head_dim, file, optional=True) if fam.head_dim else None
    if head_dim is None:
        if hidden % heads:
            _fail(
                file,
                fam.hidden,
                f"is not divisible by {fam.heads} ({heads}), so the head width is unknown",
                hidden,
                'add `"head_dim"`',
            )
        head_dim = hidden // heads
    tied = data.get("tie_word_embeddings", fam.tied_default)
    if not isinstance(tied, bool):
        _fail(file, "tie_word_embeddings", "must be true or false", tied, "write true or false")
    return {
        "name": _name(Path(path)),
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "head_dim": head_dim,
        "num_kv_heads": kv if kv is not None and kv != heads else None,
        "ffn_size": ffn,
        "ffn_kind": (FfnKind.SWIGLU if fam.gated else FfnKind.GELU).value,
        "position_encoding": (
            PositionEncoding.ROTARY if fam.rotary else PositionEncoding.LEARNED
        ).value,
        "vocab_size": vocab,
        "tied_embeddings": tied,
    }


def parameter_count(model: ModelSpec) -> int:
    """Weights the spec describes: every block's FC weights plus the token
    embedding and, when untied, the output projection:

        L * (H (nh + 2 nkv) d + nh d H + f H F) + V H (2 - tied),  f = 3 gated, 2 not

    Norms, biases and learned position embeddings are left out. Needs
    `vocab_size` and `tied_embeddings` (ValueError otherwise)."""
    if model.vocab_size is None or model.tied_embeddings is None:
        raise ValueError("parameter_count needs vocab_size and tied_embeddings")
    h, d = model.hidden_size, model.head_dim
    attention = h * (model.num_heads + 2 * model.kv_heads) * d + model.attention_width * h
    ffn_matrices = 3 if model.ffn_kind is FfnKind.SWIGLU else 2
    block = attention + ffn_matrices * h * model.ffn_size
    embeddings = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    return model.num_layers * block + embeddings
