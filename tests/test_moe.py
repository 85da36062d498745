"""Mixtures of experts and multi-head latent attention: the model spec, the
Hugging Face readers (parameter counts against `transformers`' own), and
hand-computed tables for every cost term (cost_models.moe)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from autotune.hf_config import parameter_count
from autotune.loading import load_model_spec
from autotune.plan.layers import block_fc_layers, qkv_out_features
from autotune.specs.model import ModelSpec
from autotune.specs.model_params import block_params, mla_projection_params, mtp_params

# Published dimensions (each model's hub config.json) given to the
# transformers config class of its family; the class writes the file.
# Active counts: the model cards' "activated parameters".
MOE_ROUND_TRIPS = {
    # mistralai/Mixtral-8x7B-v0.1 config.json (class defaults); 46.7B, 12.9B active
    "mixtral-8x7b": ("MixtralConfig", {}, 12.9e9),
    # Qwen/Qwen1.5-MoE-A2.7B config.json (class defaults); 14.3B, 2.7B active
    "qwen1.5-moe-a2.7b": ("Qwen2MoeConfig", {}, 2.7e9),
    # Qwen/Qwen3-30B-A3B config.json; 30.5B, 3.3B active
    "qwen3-30b-a3b": ("Qwen3MoeConfig", dict(
        hidden_size=2048, intermediate_size=6144, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, num_hidden_layers=48, moe_intermediate_size=768,
        num_experts=128, num_experts_per_tok=8, vocab_size=151936), 3.3e9),
    # deepseek-ai/DeepSeek-V2-Lite config.json; 15.7B, 2.4B active
    "deepseek-v2-lite": ("DeepseekV2Config", dict(
        hidden_size=2048, intermediate_size=10944, num_attention_heads=16,
        num_key_value_heads=16, num_hidden_layers=27, q_lora_rank=None, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=64,
        n_shared_experts=2, num_experts_per_tok=6, moe_intermediate_size=1408,
        first_k_dense_replace=1, vocab_size=102400), 2.4e9),
    # deepseek-ai/DeepSeek-V3 config.json (class defaults); 671B, 37B active
    "deepseek-v3": ("DeepseekV3Config", {}, 37e9),
    # openai/gpt-oss-120b config.json (class defaults); 117B, 5.1B active
    "gpt-oss-120b": ("GptOssConfig", {}, 5.1e9),
}  # fmt: skip


def _library():
    """transformers and torch: required in CI, skipped elsewhere when absent."""
    if os.environ.get("CI"):
        import torch
        import transformers
    else:
        transformers = pytest.importorskip("transformers")
        torch = pytest.importorskip("torch")
    return transformers, torch


@pytest.mark.parametrize("name", list(MOE_ROUND_TRIPS))
def test_moe_config_round_trip(tmp_path: Path, name: str) -> None:
    transformers, torch = _library()
    cls_name, kwargs, active_card = MOE_ROUND_TRIPS[name]
    config = getattr(transformers, cls_name)(**kwargs)
    config.save_pretrained(tmp_path / name)
    spec = load_model_spec(tmp_path / name / "config.json")
    assert spec.moe is not None
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    library = model.num_parameters()
    assert abs(parameter_count(spec) - library) / library < 0.005, name
    # active: within 15% of the card (cards round, and some leave the
    # embeddings out: gpt-oss's 5.1B, ours 5.7B with its 1.2B of embeddings)
    active = parameter_count(spec, active=True)
    assert abs(active - active_card) / active_card < 0.15, (name, active)


def _v3() -> ModelSpec:
    return ModelSpec(
        name="deepseek-v3",
        num_layers=61,
        hidden_size=7168,
        num_heads=128,
        head_dim=192,
        ffn_size=18432,
        ffn_kind="swiglu",
        vocab_size=129280,
        position_encoding="rotary",
        tied_embeddings=False,
        moe=dict(
            num_experts=256,
            experts_per_token=8,
            expert_ffn_size=2048,
            shared_expert_ffn_size=2048,
            first_dense_layers=3,
            router="sigmoid",
            node_limit=4,
        ),
        mla=dict(
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=128,
        ),
        mtp_layers=1,
    )


def test_deepseek_v3_counts_by_hand() -> None:
    m = _v3()
    # MLA (DeepSeek-V2 report section 2.1.2): q 7168*1536 + 1536*128*192,
    # kv 7168*(512+64) + 512*128*(128+128)
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
    assert mla_projection_params(m) == mla == 69_664_768
    attention = mla + 128 * 128 * 7168
    dense = attention + 3 * 7168 * 18432
    moe = attention + 3 * 7168 * 2048 + 256 * 3 * 7168 * 2048 + 256 * 7168
    assert block_params(m, 0) == dense and block_params(m, 2) == dense
    assert block_params(m, 3) == moe == block_params(m, 60)
    active = attention + 3 * 7168 * 2048 + 8 * 3 * 7168 * 2048 + 256 * 7168
    assert block_params(m, 3, active=True) == active
    total = 3 * dense + 58 * moe + 2 * 129280 * 7168
    assert parameter_count(m) == total  # 671.0B: the card's 671B
    assert round(total / 1e9, 1) == 671.0
    # the MTP module: one MoE block and the 2h x h projection; the card's
    # 14B of MTP weights also hold copies of the embedding and output layer
    # (2 x 0.93B) and norms
    assert mtp_params(m) == moe + 2 * 7168 * 7168
    assert round(mtp_params(m) / 1e9, 2) == 11.61


def test_mla_planned_as_one_qkv_layer_of_the_same_weights() -> None:
    m = _v3()
    width = qkv_out_features(m)
    # ceil(69,664,768 / (7168 * 128)) * 128 = 76 * 128
    assert width == 76 * 128 == 9728
    assert width % m.num_heads == 0
    assert 0 <= width * 7168 - mla_projection_params(m) < 7168 * 128
    names = [layer.name for layer in block_fc_layers(m, 4096)]
    # the planned block of a MoE model: attention and the shared experts
    assert names == ["qkv", "attn_out", "ffn_gate", "ffn_up", "ffn_down"]
    layers = block_fc_layers(m, 4096)
    assert layers[1].in_features == 128 * 128  # nh * v_head_dim
    assert layers[2].out_features == 2048  # the shared expert


def test_moe_block_without_shared_experts_plans_attention_only() -> None:
    m = ModelSpec(
        name="mixtral",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        ffn_size=14336,
        ffn_kind="swiglu",
        moe=dict(num_experts=8, experts_per_token=2, expert_ffn_size=14336),
    )
    assert [layer.name for layer in block_fc_layers(m, 4096)] == ["qkv", "attn_out"]
    assert m.moe_layer_flags == (True,) * 32


def test_layer_pattern() -> None:
    m = ModelSpec(
        name="x",
        num_layers=8,
        hidden_size=64,
        num_heads=4,
        head_dim=16,
        ffn_size=256,
        moe=dict(num_experts=4, experts_per_token=1, expert_ffn_size=32, first_dense_layers=1,
                 layer_frequency=2),
    )  # fmt: skip
    # Qwen2-MoE's rule: block i is MoE when (i + 1) % step == 0, past the dense ones
    assert m.moe_layer_flags == (False, True, False, True, False, True, False, True)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (dict(moe=dict(num_experts=8, experts_per_token=9, expert_ffn_size=8)), "exceeds"),
        (dict(moe=dict(num_experts=1, experts_per_token=1, expert_ffn_size=8)), "num_experts"),
        (
            dict(moe=dict(num_experts=8, experts_per_token=2, expert_ffn_size=8,
                          first_dense_layers=9)),
            "first_dense_layers (9) exceeds num_layers (4)",
        ),
        (
            dict(mla=dict(kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8)),
            "head_dim (16) must be mla.qk_nope_head_dim + mla.qk_rope_head_dim (12)",
        ),
    ],
)  # fmt: skip
def test_impossible_expert_fields_are_refused(change: dict, expected: str) -> None:
    base = dict(name="x", num_layers=4, hidden_size=64, num_heads=4, head_dim=16, ffn_size=64)
    with pytest.raises(ValidationError) as err:
        ModelSpec(**base, **change)
    assert expected in str(err.value)
