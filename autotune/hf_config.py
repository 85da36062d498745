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

Mixtures of experts: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2 / V3
(with multi-head latent attention and, for V3, multi-token prediction),
Kimi-K2 and gpt-oss map onto `ModelSpec.moe` (and `mla`, `mtp_layers`) from the same
classes' keys: routed experts (`num_local_experts`, `num_experts` or
`n_routed_experts`), top-k (`num_experts_per_tok`), expert width
(`moe_intermediate_size`, Mixtral's and gpt-oss's `intermediate_size`),
shared experts (DeepSeek `n_shared_experts x moe_intermediate_size`,
Qwen2-MoE `shared_expert_intermediate_size`), dense blocks first
(DeepSeek `first_k_dense_replace`, Qwen `mlp_only_layers` when they are the
leading blocks), MoE every n-th block (`decoder_sparse_step`), the router's
scores (`scoring_func`) and node-limited routing (`topk_group`).
Kimi-K2's `model_type: kimi_k2` is DeepSeek-V3's architecture under another
name ("Kimi-K2 reuses the DeepSeekV3CausalLM architecture ... we set
model_type kimi_k2 in config.json", MoonshotAI/Kimi-K2
docs/deploy_guidance.md, "Others"), read with DeepSeek-V3's keys.

Sliding-window attention (`sliding_window`, and which blocks use it from
`layer_types` or the family's default: Mistral every block, Gemma 2 and
gpt-oss every other, Gemma 3 five of six) maps onto `sliding_window` and
`full_attention_every`; Qwen's `use_sliding_window` (false in the released
models) windows only the blocks from `max_window_layers` on, which is
refused with one line.

Architectures meshtune cannot price (other mixture-of-experts families,
anything not listed) are refused with one line naming what is missing.
Norms, biases and learned position embeddings are not part of the spec
(they are not FC layers and hold well under 0.5% of the weights of the
models tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.specs.base import MAX_DIM, MAX_LAYERS
from autotune.specs.model import FfnKind, ModelSpec, PositionEncoding
from autotune.specs.model_params import block_params


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

# Keys whose value > 1 marks a mixture of experts (Mixtral, Qwen3-MoE and
# gpt-oss: num_local_experts; Qwen2-MoE and Qwen3-MoE hub files:
# num_experts; DeepSeek: n_routed_experts).
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")

# The mixture-of-experts families read (their attention keys are Llama's;
# DeepSeek's attention is multi-head latent attention).
FAMILIES.update(
    {
        "mixtral": _Family(**_LLAMA_KEYS, tied_default=False),
        "qwen2_moe": _Family(**_LLAMA_KEYS, tied_default=False),
        "qwen3_moe": _Family(**_LLAMA_KEYS, tied_default=False),
        "gpt_oss": _Family(**_LLAMA_KEYS, tied_default=False),
        "deepseek_v2": _Family(**{**_LLAMA_KEYS, "head_dim": None}, tied_default=False),
        "deepseek_v3": _Family(**{**_LLAMA_KEYS, "head_dim": None}, tied_default=False),
        "kimi_k2": _Family(**{**_LLAMA_KEYS, "head_dim": None}, tied_default=False),
    }
)
ARCHITECTURES.update(
    {
        "MixtralForCausalLM": "mixtral",
        "Qwen2MoeForCausalLM": "qwen2_moe",
        "Qwen3MoeForCausalLM": "qwen3_moe",
        "GptOssForCausalLM": "gpt_oss",
        "DeepseekV2ForCausalLM": "deepseek_v2",
        "DeepseekV3ForCausalLM": "deepseek_v3",
    }
)
# Kimi-K2: DeepSeek-V3's architecture and keys (module docstring)
_DEEPSEEK_V3 = ("deepseek_v3", "kimi_k2")
_DEEPSEEK = ("deepseek_v2", *_DEEPSEEK_V3)
_MOE_READ = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", *_DEEPSEEK)
# mixture-of-experts families whose layouts are not mapped
_MOE_TYPES = (
    "dbrx",
    "olmoe",
    "granitemoe",
    "phimoe",
    "jetmoe",
    "gpt_oss",
    "llama4",
    "llama4_text",
)

_FIX_DENSE = "write the model's fields (with `moe:`) in the plan YAML (README)"


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
    if model_type in _MOE_READ:
        return
    for key in _EXPERT_KEYS:
        value = data.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            _fail(
                path,
                key,
                f"marks a mixture of experts in a {model_type!r} config, whose expert layout "
                f"meshtune does not map (it reads {', '.join(_MOE_READ)})",
                value,
                _FIX_DENSE,
            )
    if model_type in _MOE_TYPES:
        _fail(
            path,
            "model_type",
            "is a mixture-of-experts family whose layout meshtune does not map "
            f"(it reads {', '.join(_MOE_READ)})",
            model_type,
            _FIX_DENSE,
        )
    if data.get("kv_lora_rank"):
        _fail(
            path,
            "kv_lora_rank",
            f"multi-head latent attention is read only in DeepSeek configs, not {model_type!r}",
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
    data: dict[str, Any],
    key: str,
    path: str,
    optional: bool = False,
    high: int = MAX_DIM,
    low: int = 1,
) -> int | None:
    """`data[key]` as a whole number from `low` to `high` (the model spec's
    plausible range of that dimension; `low` 0 for counts a model may not
    have, such as shared experts), named by its config.json key."""
    if key not in data or data[key] is None:
        if optional:
            return None
        _fail(path, key, "is required", fix=f'add `"{key}": <positive integer>`')
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _fail(
            path,
            key,
            f"must be a whole number from {low} to {high}",
            value,
            f"give `{key}` as a whole number from {low} to {high}",
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
    mla = _mla_fields(data, file) if model_type in _DEEPSEEK else None
    if mla is not None:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        kv = None  # every head has its own key and value (from the compressed KV)
    moe = _moe_fields(data, model_type, layers, file) if model_type in _MOE_READ else None
    if model_type in ("mixtral", "gpt_oss"):
        # every block is MoE: intermediate_size is the expert width
        assert moe is not None
        ffn = moe["expert_ffn_size"]
    mtp = 0
    if model_type in _DEEPSEEK_V3:
        mtp = _dimension(
            data, "num_nextn_predict_layers", file, optional=True, high=MAX_LAYERS, low=0
        )
        mtp = mtp or 0
    window = _window_fields(data, model_type, layers, file)
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
        **({"moe": moe} if moe is not None else {}),
        **({"mla": mla} if mla is not None else {}),
        **({"mtp_layers": mtp} if mtp else {}),
        **window,
    }


#: Families whose blocks alternate windowed and full attention when the
#: config lists no `layer_types`: every n-th block (1-based) full, as the
#: `transformers` 5.23 configuration classes build their default
#: `layer_types` (Gemma 2 and gpt-oss: every second; Gemma 3:
#: `sliding_window_pattern`, default 6). Mistral windows every block.
_FULL_EVERY = {"gemma2": 2, "gpt_oss": 2, "gemma3_text": 6}


def _window_fields(data: dict[str, Any], model_type: str, layers: int, path: str) -> dict[str, Any]:
    """`sliding_window` and `full_attention_every` of the spec from a
    config's `sliding_window` and its blocks' kinds (`layer_types`, else the
    family's default pattern); none when the config has no window or the
    family ignores it (Qwen's `use_sliding_window: false`)."""
    window = data.get("sliding_window")
    if window is None or model_type not in (
        "mistral",
        "gemma2",
        "gemma3_text",
        "gpt_oss",
        "qwen2",
        "qwen3",
        "qwen2_moe",
        "qwen3_moe",
    ):
        return {}
    if model_type.startswith("qwen") and not data.get("use_sliding_window", False):
        return {}
    w = _dimension(data, "sliding_window", path)
    kinds = data.get("layer_types")
    if kinds is None:
        if model_type.startswith("qwen"):
            _fail(
                path,
                "use_sliding_window",
                "windows only the blocks from max_window_layers on, a pattern meshtune does not "
                "price (it windows every block, or all but every n-th)",
                True,
                "set use_sliding_window to false, or give the model's fields in the plan YAML",
            )
        every = _FULL_EVERY.get(model_type)
        if model_type == "gemma3_text":
            every = _dimension(data, "sliding_window_pattern", path, optional=True) or every
        kinds = [
            "full_attention" if every and (i + 1) % every == 0 else "sliding_attention"
            for i in range(layers)
        ]
    if not isinstance(kinds, list) or len(kinds) != layers:
        _fail(
            path,
            "layer_types",
            f"must list one kind per block ({layers})",
            kinds,
            'give "sliding_attention" or "full_attention" for every block',
        )
    full = [i + 1 for i, kind in enumerate(kinds) if kind == "full_attention"]
    if len(full) == layers:
        return {}
    if not full:
        return {"sliding_window": w}
    every = full[0]
    if every < 2 or full != list(range(every, layers + 1, every)):
        _fail(
            path,
            "layer_types",
            "mixes sliding and full attention in a pattern meshtune does not price (every "
            "block windowed, or every n-th block full)",
            f"full attention at blocks {', '.join(map(str, full[:4]))}"
            + (", ..." if len(full) > 4 else ""),
            "give the model's fields in the plan YAML with the nearest full_attention_every",
        )
    return {"sliding_window": w, "full_attention_every": every}


def _first_key(data: dict[str, Any], keys: tuple[str, ...]) -> str:
    """The first of `keys` the config gives (the last when none: the one a
    'required' error names)."""
    return next((k for k in keys if data.get(k) is not None), keys[-1])


def _moe_fields(data: dict[str, Any], model_type: str, layers: int, path: str) -> dict[str, Any]:
    """`ModelSpec.moe` from a mixture-of-experts config (module docstring)."""
    experts_key = _first_key(data, ("num_local_experts", "num_experts", "n_routed_experts"))
    experts = _dimension(data, experts_key, path)
    top_k = _dimension(data, "num_experts_per_tok", path)
    assert experts is not None and top_k is not None
    width_key = (
        "intermediate_size" if model_type in ("mixtral", "gpt_oss") else ("moe_intermediate_size")
    )
    out: dict[str, Any] = {
        "num_experts": experts,
        "experts_per_token": top_k,
        "expert_ffn_size": _dimension(data, width_key, path),
    }
    if model_type in _DEEPSEEK:
        shared = _dimension(data, "n_shared_experts", path, optional=True, low=0) or 0
        out["shared_expert_ffn_size"] = shared * out["expert_ffn_size"]
        if data.get("first_k_dense_replace") not in (None, 0):
            out["first_dense_layers"] = _dimension(
                data, "first_k_dense_replace", path, high=MAX_LAYERS
            )
        freq = data.get("moe_layer_freq", 1)
        if freq != 1:
            _fail(
                path,
                "moe_layer_freq",
                "other than 1 is not mapped (meshtune places MoE blocks after the dense ones "
                "at every block)",
                freq,
                "use 1, or write the model's fields in the plan YAML",
            )
        if data.get("scoring_func", "softmax" if model_type == "deepseek_v2" else "sigmoid") == (
            "sigmoid"
        ):
            out["router"] = "sigmoid"
        limit = _dimension(data, "topk_group", path, optional=True)
        groups = _dimension(data, "n_group", path, optional=True)
        if limit is not None and groups is not None and limit < groups:
            out["node_limit"] = limit
            out["expert_groups"] = groups
    if model_type == "qwen2_moe":
        out["shared_expert_ffn_size"] = (
            _dimension(data, "shared_expert_intermediate_size", path, optional=True, low=0) or 0
        )
    if model_type in ("qwen2_moe", "qwen3_moe"):
        step = _dimension(data, "decoder_sparse_step", path, optional=True, high=MAX_LAYERS)
        out["layer_frequency"] = step or 1
        dense = data.get("mlp_only_layers") or []
        if not isinstance(dense, list) or dense != list(range(len(dense))) or len(dense) > layers:
            _fail(
                path,
                "mlp_only_layers",
                "is mapped only as the leading blocks [0, 1, ..., n-1]",
                dense,
                "list the leading block indices, or write the model's fields in the plan YAML",
            )
        out["first_dense_layers"] = len(dense)
    return out


def _mla_fields(data: dict[str, Any], path: str) -> dict[str, Any]:
    """`ModelSpec.mla` from a DeepSeek-V2 / V3 config."""
    return {
        "q_lora_rank": _dimension(data, "q_lora_rank", path, optional=True),
        "kv_lora_rank": _dimension(data, "kv_lora_rank", path),
        "qk_nope_head_dim": _dimension(data, "qk_nope_head_dim", path),
        "qk_rope_head_dim": _dimension(data, "qk_rope_head_dim", path),
        "v_head_dim": _dimension(data, "v_head_dim", path),
    }


def parameter_count(model: ModelSpec, active: bool = False) -> int:
    """Weights the spec describes (what `transformers` counts): every
    block's FC weights (plan/layers.block_params: attention, dense FFN or
    shared and routed experts with the router) plus the token embedding and,
    when untied, the output projection::

        sum_l P_block(l) + V H (2 - tied)

    With `active`, a MoE block counts the `k` routed experts a token uses.
    Multi-token-prediction modules are left out (`transformers` does not
    build them; plan/layers.mtp_params counts them). Norms, biases and
    learned position embeddings are left out. Needs `vocab_size` and
    `tied_embeddings` (ValueError otherwise)."""
    if model.vocab_size is None or model.tied_embeddings is None:
        raise ValueError("parameter_count needs vocab_size and tied_embeddings")
    blocks = sum(block_params(model, i, active) for i in range(model.num_layers))
    embeddings = model.vocab_size * model.hidden_size * (1 if model.tied_embeddings else 2)
    return blocks + embeddings
