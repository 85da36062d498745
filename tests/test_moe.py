"""Mixtures of experts and multi-head latent attention: the model spec, the
Hugging Face readers (parameter counts against `transformers`' own), and
hand-computed tables for every cost term (cost_models.moe)."""

from __future__ import annotations

from pathlib import Path

import pytest
from planning import EP8_FP8, pinned, transformers_and_torch
from pydantic import ValidationError

from autotune.hf_config import parameter_count
from autotune.loading import load_model_spec
from autotune.plan.layers import block_fc_layers, qkv_out_features
from autotune.specs.model import ModelSpec
from autotune.specs.model_params import block_params, mla_projection_params, mtp_params

REPO = Path(__file__).resolve().parents[1]

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


_library = transformers_and_torch


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


def test_kimi_k2_config_reads_as_deepseek_v3(tmp_path: Path) -> None:
    """Kimi-K2 ships DeepSeek-V3's architecture as `model_type: kimi_k2`
    (MoonshotAI/Kimi-K2 docs/deploy_guidance.md): its hub config.json's
    dimensions (moonshotai/Kimi-K2-Instruct) written by DeepseekV3Config
    and renamed read as DeepSeek-V3, and count as `transformers` builds
    them; the card's 1T total and 32B activated."""
    import json

    transformers, torch = _library()
    config = transformers.DeepseekV3Config(
        hidden_size=7168, intermediate_size=18432, num_attention_heads=64,
        num_key_value_heads=64, num_hidden_layers=61, q_lora_rank=1536, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=384,
        n_shared_experts=1, num_experts_per_tok=8, moe_intermediate_size=2048,
        first_k_dense_replace=1, n_group=1, topk_group=1, vocab_size=163840,
    )  # fmt: skip
    config.save_pretrained(tmp_path / "kimi-k2")
    path = tmp_path / "kimi-k2" / "config.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "model_type": "kimi_k2", "num_nextn_predict_layers": 0}))
    spec = load_model_spec(path)
    assert spec.moe is not None and spec.mla is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token) == (384, 8)
    assert spec.moe.first_dense_layers == 1 and spec.moe.node_limit is None
    assert spec.mtp_layers == 0
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    library = model.num_parameters()
    assert abs(parameter_count(spec) - library) / library < 0.005
    assert abs(parameter_count(spec) - 1.04e12) / 1.04e12 < 0.02
    assert abs(parameter_count(spec, active=True) - 32e9) / 32e9 < 0.1


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


# -- cost terms by hand (cost_models.moe) ---------------------------------------

from cost_models.moe import (  # noqa: E402
    balanced_imbalance,
    default_imbalance,
    dispatch_bytes_per_chip,
    expert_data_parallel,
    expert_ffn_forward_flops,
    expert_params_per_chip,
    node_limited_share,
    permutation_bytes,
    routed_tokens_per_chip,
    tokens_per_expert,
)


def test_deepseek_v3_expert_terms_by_hand() -> None:
    # one chip's 4096 tokens (b s / (cp t)), top-8 of 256 experts, EP 64
    assert routed_tokens_per_chip(4096, 8) == 32768
    assert tokens_per_expert(4096, 8, 256, 64) == 4096 * 8 * 64 / 256 == 8192
    # ETP 2: the group's tokens gathered, each chip computing half of each expert
    assert tokens_per_expert(4096, 8, 256, 64, etp=2) == 16384
    assert dispatch_bytes_per_chip(4096, 8, 7168, 2) == 469_762_048
    # 2 f T h F_e: 2 * 3 * 32768 * 7168 * 2048
    assert expert_ffn_forward_flops(32768, 7168, 2048, 3) == 2 * 3 * 32768 * 7168 * 2048
    # permute (read + write T k copies) and un-permute (read T k, write T)
    assert permutation_bytes(4096, 8, 7168, 2) == (3 * 8 + 1) * 4096 * 7168 * 2
    # 256 / 64 = 4 experts of 3 x 7168 x 2048 per chip; 64 chips per stage -> EDP 1
    assert expert_params_per_chip(256, 64, 1, 7168, 2048, 3) == 4 * 3 * 7168 * 2048
    assert expert_params_per_chip(256, 64, 2, 7168, 2048, 3) == 2 * 3 * 7168 * 2048
    assert expert_data_parallel(64, 64) == 1 and expert_data_parallel(512, 64) == 8


@pytest.mark.parametrize(
    ("top_k", "limit", "nodes", "share"),
    [(8, 4, 8, 0.5), (8, 4, 4, 1.0), (8, None, 8, 1.0), (2, 4, 8, 1.0), (6, 3, 8, 0.5)],
)
def test_node_limited_share(top_k: int, limit: int | None, nodes: int, share: float) -> None:
    # DeepSeek-V3: each token reaches at most 4 of the group's nodes, sent once per node
    assert node_limited_share(top_k, limit, nodes) == share


def test_expected_normal_maximum_by_hand() -> None:
    """e_1 = 0; e_2 = 1 / sqrt(pi) (the mean of |X1 - X2| / 2); e_3 =
    3 / (2 sqrt(pi)) (Harter's closed form); e_8 = 1.42360 and e_64 =
    2.34373 from order-statistics tables (Harter 1961, expected values of
    normal order statistics); the asymptote sqrt(2 ln R) always above."""
    import math

    from cost_models.moe import expected_normal_maximum

    assert float(expected_normal_maximum(1)) == pytest.approx(0.0, abs=1e-9)
    assert float(expected_normal_maximum(2)) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert float(expected_normal_maximum(3)) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-6)
    assert float(expected_normal_maximum(8)) == pytest.approx(1.42360, abs=1e-5)
    assert float(expected_normal_maximum(64)) == pytest.approx(2.34373, abs=1e-5)
    ranks = (2, 8, 64, 4096)
    values = expected_normal_maximum(list(ranks))
    assert values.shape == (4,) and all(values < [math.sqrt(2 * math.log(r)) for r in ranks])


def test_balanced_imbalance_by_hand_and_against_a_simulation() -> None:
    import math

    import numpy as np

    # 1 + e_8 / sqrt(1000), e_8 = 1.42360
    expected = 1 + 1.42360 / math.sqrt(1000)
    assert float(balanced_imbalance(1000, 8)) == pytest.approx(expected, abs=1e-6)
    assert float(balanced_imbalance(1000, 1)) == 1.0 and float(balanced_imbalance(0, 8)) == 1.0
    # the busiest of R ranks when every copy picks one uniformly: the excess
    # over the mean within 5% of 2,000 multinomial draws
    rng = np.random.default_rng(7)
    for n, ranks in ((2000, 16), (500, 64), (20000, 8), (5000, 2)):
        counts = rng.multinomial(n * ranks, [1 / ranks] * ranks, size=2000)
        simulated = counts.max(axis=1).mean() / n - 1
        assert float(balanced_imbalance(n, ranks)) - 1 == pytest.approx(simulated, rel=0.05)


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(st.floats(1.0, 1e7), st.floats(1.0, 1e7), st.integers(1, 4096))
def test_balanced_imbalance_falls_with_tokens(n1: float, n2: float, ranks: int) -> None:
    low, high = sorted((n1, n2))
    a, b = float(balanced_imbalance(low, ranks)), float(balanced_imbalance(high, ranks))
    assert 1.0 <= b <= a


def test_default_imbalance_is_the_measured_real_routing_figure(tmp_path: Path) -> None:
    """A model stating no imbalance is priced at the real-routing default:
    UltraEP's lowest measured imbalance, 1.30 at EP 64 over 256 experts
    (arXiv:2606.04101), scaled by the experts each rank averages, with the
    binomial noise of few tokens per rank on top; one rank: 1. By hand, with
    the expected largest of R normal draws e_64 = 2.34373, e_8 = 1.42360,
    e_2 = 0.56419: c = 0.30 / (e_64 x sqrt(64/256)) = 0.30 / 1.171867 =
    0.25600; EP 8 of 8 experts (many tokens): 1 + e_8 x c = 1.3644; EP 2
    of 8: 1 + e_2 x c x 0.5 = 1.0722."""
    import math

    from planning import pinned, plan_for

    from cost_models.moe import routing_skew

    c = 0.30 / (2.34373 * 0.5)
    assert routing_skew() == pytest.approx(c, rel=1e-5)
    assert c == pytest.approx(0.25600, abs=1e-5)
    assert float(default_imbalance(1e12, 64, 256)) == pytest.approx(1.30, abs=1e-9)
    assert float(default_imbalance(1e12, 8, 8)) == pytest.approx(1.3644, abs=1e-4)
    assert float(default_imbalance(1e12, 2, 8)) == pytest.approx(1.0722, abs=1e-4)
    # sampling noise and routing skew add in quadrature: 4096 copies on 8 ranks
    both = 1 + 1.42360 * math.sqrt(c**2 * 8 / 8 + 1 / 4096)
    assert float(default_imbalance(4096, 8, 8)) == pytest.approx(both, rel=1e-5)
    # few tokens: the binomial floor dominates and the default never falls below it
    assert float(default_imbalance(2, 64, 256)) >= float(balanced_imbalance(2, 64))
    assert float(default_imbalance(4096, 1, 8)) == 1.0
    training = pinned(
        {"global_batch_sequences": 16, "sequence_length": 1024, "data_parallel": 8,
         "tensor_parallel": 1, "expert_parallel": 8}
    )  # fmt: skip
    plan = plan_for(tmp_path, MINI_MOE, training, "h100-hgx")
    # 2 sequences of 1,024 tokens per chip, 2 copies each: 4,096 over EP 8 of 16 experts
    assert plan.experts is not None
    assert plan.experts.imbalance == pytest.approx(float(default_imbalance(4096, 8, 16)))
    forced = {**MINI_MOE, "moe": {**MINI_MOE["moe"], "expert_imbalance": 1.0}}
    balanced = plan_for(tmp_path, forced, training, "h100-hgx")
    assert balanced.experts is not None and balanced.experts.imbalance == 1.0
    assert balanced.step_s < plan.step_s


@given(st.floats(1.0, 1e7), st.integers(1, 256), st.integers(0, 8))
def test_default_imbalance_grows_with_the_degree(copies: float, ranks: int, halvings: int) -> None:
    """For a fixed expert count, more expert-parallel ranks (fewer experts
    each) never lower the default imbalance, and it is never below the
    balanced-routing floor."""
    experts = 256
    low, high = sorted((ranks, max(1, min(experts, ranks * 2**halvings))))
    a = float(default_imbalance(copies, low, experts))
    b = float(default_imbalance(copies, high, experts))
    assert 1.0 <= a <= b + 1e-12
    assert b >= float(balanced_imbalance(copies, high)) - 1e-12


def test_grouped_gemm_flops_on_a_roofline() -> None:
    from autotune.job.experts import grouped_gemm_s
    from cost_models import ComputeModel

    peak = 1e15
    gemm = ComputeModel(peak_flops_per_s=peak)
    rows, h, width, experts = 1024.0, 4096, 1408, 4
    forward, backward = grouped_gemm_s(gemm, rows, h, width, True, experts)
    flops = 2 * 3 * rows * h * width * experts  # gate + up fused, then down
    assert forward == pytest.approx(flops / peak, rel=1e-12)
    assert backward == pytest.approx(2 * flops / peak, rel=1e-12)


def test_mla_attention_flops_and_key_value_bytes() -> None:
    from cost_models.transformer_flops import attention_core_forward_flops

    m = _v3()
    # Q K^T over d_qk = 192, P V over d_v = 128: 2 s^2 (192 + 128) per head
    assert m.core_head_dim == 160
    flops = attention_core_forward_flops(1, 4096, 128, m.core_head_dim, causal=True)
    assert flops == 2 * 128 * 4096**2 * (192 + 128) / 2
    # one chip's key/value block under context parallelism 2 (tp 8): K of 192
    # and V of 128 per head, 16 heads, 2048 tokens, bf16
    from autotune.job.block import context_block_bytes
    from autotune.specs.training import TrainingSpec

    t = TrainingSpec(global_batch_sequences=8, sequence_length=4096, context_parallel=2)
    assert context_block_bytes(m, t, 8, 1, 2) == 2048 * 16 * (192 + 128) * 2


def test_expert_axes_and_the_links_their_all_to_all_crosses(tmp_path: Path) -> None:
    from planning import write_plan

    from autotune.hardware.layout import ParallelAxis
    from autotune.hardware.placement import ResourceKind
    from autotune.job.hardware import hardware_view
    from autotune.loading import load_plan_input
    from cost_models import MeshShape, ring_collective_s

    path = write_plan(
        tmp_path,
        "gpt3-175b",
        {"global_batch_sequences": 64, "sequence_length": 2048},
        "h100-hgx-4n",
    )
    hw = hardware_view(load_plan_input(path))
    # 32 GPUs as TP 2 x DP 16: EP 4 stays in a node, EP 16 spans two
    small = hw.expert_axes(MeshShape(1, 2), 16, 1, 1, 4)
    big = hw.expert_axes(MeshShape(1, 2), 16, 1, 1, 16)
    assert not isinstance(small, str) and not isinstance(big, str)
    etp1, ep4, edp8 = small
    assert (etp1.axis, etp1.size, etp1.levels) == (ParallelAxis.EXPERT_TENSOR, 1, ())
    assert ep4.axis is ParallelAxis.EXPERT and (ep4.size, ep4.stride) == (4, 1)
    assert [lv.kind for lv in ep4.levels] == [ResourceKind.SWITCHED]
    assert (edp8.size, edp8.stride) == (8, 4) and edp8.levels[0].kind is ResourceKind.SCALE_OUT
    _, ep16, edp2 = big
    assert [(lv.size, lv.kind) for lv in ep16.levels] == [
        (8, ResourceKind.SWITCHED),
        (2, ResourceKind.SCALE_OUT),
    ]
    assert (edp2.size, edp2.stride) == (2, 16)
    # a chip's B bytes: 7 pieces of B/16 over the switch, then 1 piece of
    # 8 B/16 over its NIC; node-limited routing halves the NIC's share
    b = 64 * 2.0**20
    switch = hw.level_link(ep16.levels[0], "all_gather")
    nic = hw.level_link(ep16.levels[1], "all_gather")
    inside = float(ring_collective_s(switch, 8, b / 16))
    across = float(ring_collective_s(nic, 2, 8 * b / 16))
    assert float(hw.hierarchical_all_to_all_s(ep16, b)) == pytest.approx(inside + across)
    half = float(ring_collective_s(nic, 2, 4 * b / 16))
    limited = float(hw.hierarchical_all_to_all_s(ep16, b, scale_out_share=0.5))
    assert limited == pytest.approx(inside + half)
    # a token-based dispatcher relays: the switch also carries what the chip
    # forwards for the other node (2 x its own pieces, here a share 0.6 of
    # them), and the two levels run at once
    relay_inside = float(ring_collective_s(switch, 8, 2 * 0.6 * b / 16))
    relayed = float(
        hw.hierarchical_all_to_all_s(ep16, b, scale_out_share=0.5, scale_up_share=0.6, relayed=True)
    )
    assert relayed == pytest.approx(max(relay_inside, half))
    # 16 does not divide a stage of 2 x 4 chips
    assert isinstance(hw.expert_axes(MeshShape(1, 2), 4, 4, 1, 16), str)
    # expert tensor parallelism 2 inside the tensor pair, EP 8 two ranks
    # apart over 16 chips (4 per node on the switch, then 2 nodes), the
    # expert-data pair 16 apart
    split = hw.expert_axes(MeshShape(1, 2), 16, 1, 1, 8, 2)
    assert not isinstance(split, str)
    etp2, ep8, edp2 = split
    assert (etp2.size, etp2.stride) == (2, 1) and etp2.levels[0].kind is ResourceKind.SWITCHED
    assert (ep8.size, ep8.stride) == (8, 2)
    assert [(lv.size, lv.kind) for lv in ep8.levels] == [
        (4, ResourceKind.SWITCHED),
        (2, ResourceKind.SCALE_OUT),
    ]
    assert (edp2.size, edp2.stride) == (2, 16)
    assert "does not divide" in hw.expert_axes(MeshShape(1, 2), 16, 1, 1, 32, 2)


MINI_MOE = {
    "name": "mini-moe",
    "num_layers": 4,
    "hidden_size": 1024,
    "num_heads": 16,
    "num_kv_heads": 4,
    "head_dim": 64,
    "ffn_size": 2048,
    "ffn_kind": "swiglu",
    "vocab_size": 32000,
    "position_encoding": "rotary",
    "moe": {"num_experts": 16, "experts_per_token": 2, "expert_ffn_size": 2048},
}


#: MINI_MOE with multi-head latent attention (d_qk 96 = 64 + 32, d_v 64)
MINI_MLA = {
    **MINI_MOE,
    "name": "mini-mla",
    "num_kv_heads": None,
    "head_dim": 96,
    "mla": {
        "q_lora_rank": 256,
        "kv_lora_rank": 128,
        "qk_nope_head_dim": 64,
        "qk_rope_head_dim": 32,
        "v_head_dim": 64,
    },
}


#: 8 GPUs as TP 2 x DP 4 with the experts over 4 of them
TP2_EP4 = {
    "global_batch_sequences": 16,
    "sequence_length": 1024,
    "tensor_parallel": 2,
    "data_parallel": 4,
    "expert_parallel": 4,
}


@pytest.mark.parametrize(
    ("ep", "etp", "zero"), [(4, 1, 3), (16, 1, 3), (4, 1, 1), (1, 1, 0), (4, 2, 3), (2, 4, 1)]
)
def test_expert_memory_per_rank_under_ep_and_expert_data(
    tmp_path: Path, ep: int, etp: int, zero: int
):
    """16 GPUs as DP 16: each rank holds 16 / EP experts, each split over
    ETP chips, their weights sharded (ZeRO-3) and their gradients and Adam
    state (ZeRO 1-3) over the 16 / (EP ETP) ranks holding the same expert
    shard; the attention and router over all 16."""
    from planning import pinned, plan_for

    from autotune.job.block import block_params_per_chip

    training = pinned(
        {
            "global_batch_sequences": 16,
            "sequence_length": 1024,
            "tensor_parallel": 1,
            "data_parallel": 16,
            "expert_parallel": ep,
            "expert_tensor_parallel": etp,
            "zero_stage": zero,
        }
    )
    plan = plan_for(tmp_path, MINI_MOE, training, "h100-hgx-2n")
    assert (plan.config["ep"], plan.config["etp"]) == (ep, etp)
    spec = plan.inp.model
    dense = 4 * (block_params_per_chip(spec, 1) + 16 * 1024)  # attention + norms, router
    dense += plan.ends.head_params + plan.ends.tail_params
    experts = 4 * (16 // ep) * 3 * 1024 * 2048 / etp
    d, d_x = 16, 16 // (ep * etp)
    weights = 2 * dense / (d if zero == 3 else 1) + 2 * experts / (d_x if zero == 3 else 1)
    grads = 2 * dense / (d if zero >= 2 else 1) + 2 * experts / (d_x if zero >= 2 else 1)
    optimizer = 12 * dense / (d if zero >= 1 else 1) + 12 * experts / (d_x if zero >= 1 else 1)
    st = plan.stages
    assert st.weights_bytes[0] == pytest.approx(weights, rel=1e-12)
    assert st.gradients_bytes[0] == pytest.approx(grads, rel=1e-12)
    assert st.optimizer_bytes[0] == pytest.approx(optimizer, rel=1e-12)


def test_expert_parallel_beyond_the_stage_or_experts_is_refused(tmp_path: Path) -> None:
    from planning import pinned, write_plan

    from autotune.errors import InputError
    from autotune.loading import load_plan_input

    training = pinned({"global_batch_sequences": 16, "sequence_length": 1024, "expert_parallel": 3})
    path = write_plan(tmp_path, MINI_MOE, training, "h100-hgx-2n")
    with pytest.raises(InputError) as err:
        load_plan_input(path)
    assert err.value.one_line() == (
        f"{path}: training.expert_parallel: got 3; does not divide the model's 16 routed "
        "experts (each rank holds num_experts / expert_parallel); fix: use a divisor of 16"
    )


def test_cli_an_expert_layout_that_cannot_fit_exits_1(tmp_path: Path) -> None:
    """Every degree pinned, the experts on one GPU each: the stage, its
    busiest expert-parallel rank and the shortfall are named."""
    from clirun import assert_one_line_error, run_cli
    from planning import pinned, write_plan

    big = {**MINI_MOE, "moe": {**MINI_MOE["moe"], "num_experts": 64, "expert_ffn_size": 65536}}
    training = pinned(
        {
            "global_batch_sequences": 16,
            "sequence_length": 1024,
            "tensor_parallel": 1,
            "data_parallel": 16,
            "expert_parallel": 1,
        }
    )
    path = write_plan(tmp_path, big, training, "h100-hgx-2n")
    run = run_cli("plan", str(path))
    line = assert_one_line_error(
        run,
        "out of memory: pipeline stage 0 on its busiest expert-parallel rank (EP 1",
        "short by",
        "more expert parallelism",
        code=1,
    )
    assert "GiB" in line


def test_expert_tensor_parallelism_by_hand(tmp_path: Path) -> None:
    """EP 4 x ETP 2 on 8 GPUs (TP 2 x DP 4): each chip's 1,024 tokens bring
    2,048 copies, its expert-tensor pair computes both chips' copies on half
    of each expert (rows per expert `T k etp ep / E` = 1,024), all-gathers
    the arriving copies and reduce-scatters the outputs over the pair."""
    from planning import pinned, plan_for

    from cost_models import ring_collective_s
    from cost_models.moe import expert_tensor_gather_bytes

    assert expert_tensor_gather_bytes(2048, 1024, 2, 2) == 2 * 2048 * 1024 * 2
    training = pinned(
        {
            "global_batch_sequences": 4,
            "sequence_length": 2048,
            "tensor_parallel": 2,
            "data_parallel": 4,
            "expert_parallel": 4,
            "expert_tensor_parallel": 2,
            "micro_batch_size": 1,
        }
    )
    model = {**MINI_MOE, "moe": {**MINI_MOE["moe"], "expert_imbalance": 1.0}}
    plan = plan_for(tmp_path, model, training, "h100-hgx")
    x = plan.experts
    assert x is not None and plan.config["etp"] == 2
    # T = 2048 / 2 (sequence-split over the tensor pair), k = 2, E = 16
    assert x.rows_per_expert == pytest.approx(1024 * 2 * 2 * 4 / 16)
    assert x.expert_params == pytest.approx(16 / 4 * 3 * 1024 * 2048 / 2)
    assert x.expert_gemm_dims[0] == (1024.0, 2 * 1024, 1024)  # 2 x F_e / etp columns
    (pair,) = [a for a in plan.layout.axes if a.axis.value == "expert_tensor"]
    assert pair.size == 2
    gathered = 2 * 1024 * 2 * 1024 * 2
    link = plan.hw.level_link(pair.levels[0], "all_gather")
    rs = plan.hw.level_link(pair.levels[0], "reduce_scatter")
    gathers = float(
        ring_collective_s(link, 2, gathered / 2) + ring_collective_s(rs, 2, gathered / 2)
    )
    (_, ep_axis, _) = plan.hw.expert_axes(plan.fc.mesh, 4, 1, 1, 4, 2)
    a2a = float(plan.hw.hierarchical_all_to_all_s(ep_axis, 1024 * 2 * 1024 * 2))
    assert x.all_to_all_forward_s == pytest.approx(2 * a2a + gathers)
    line = " ".join(plan_text(plan).split())
    assert "EP 4 x ETP 2" in line and "(1/2 of each)" in line


def plan_text(plan) -> str:
    from rich.console import Console

    from autotune.job.report import render_report

    console = Console(record=True, width=200)
    render_report(plan, console)
    return console.export_text()


def test_expert_tensor_parallelism_is_searched_and_refused(tmp_path: Path) -> None:
    """Left out, expert tensor parallelism is 1; `auto` searches the
    divisors of the tensor chips; a width it does not divide exits 2 naming
    the field."""
    from clirun import assert_one_line_error, run_cli
    from planning import plan_for, write_plan

    training = {
        "global_batch_sequences": 16,
        "sequence_length": 1024,
        "tensor_parallel": 2,
        "data_parallel": 4,
        "expert_parallel": 4,
    }
    plan = plan_for(tmp_path, MINI_MOE, training, "h100-hgx")
    assert {int(e.config["etp"]) for e in plan.outcome.ranked} == {1}
    searched = {**training, "expert_tensor_parallel": "auto"}
    plan = plan_for(tmp_path, MINI_MOE, searched, "h100-hgx")
    assert {int(e.config["etp"]) for e in plan.outcome.ranked} == {1, 2}
    path = write_plan(tmp_path, MINI_MOE, {**training, "expert_tensor_parallel": 3}, "h100-hgx")
    assert_one_line_error(
        run_cli("plan", str(path)),
        "training.expert_tensor_parallel: got 3; does not divide the expert FFN width 2048",
    )


def test_cli_an_impossible_expert_layout_exits_2(tmp_path: Path) -> None:
    from clirun import assert_one_line_error, run_cli
    from planning import write_plan

    training = {"global_batch_sequences": 16, "sequence_length": 1024, "expert_parallel": 32}
    path = write_plan(tmp_path, MINI_MOE, training, "h100-hgx-2n")
    assert_one_line_error(
        run_cli("plan", str(path)),
        "training.expert_parallel: got 32; does not divide the model's 16 routed experts",
    )
    dense = {k: v for k, v in MINI_MOE.items() if k != "moe"}
    path = write_plan(tmp_path, dense, {**training, "expert_parallel": 2}, "h100-hgx-2n")
    assert_one_line_error(
        run_cli("plan", str(path)),
        "training.expert_parallel: got 2; the model 'mini-moe' has no routed experts",
    )


@pytest.mark.slow
@pytest.mark.parametrize("example", ["mixtral-8x7b-h100", "deepseek-v3-h100"])
def test_moe_examples_choose_expert_parallelism_and_verify(
    example_plans: dict[str, Path], example: str
) -> None:
    """The bundled MoE examples (every degree searched) plan, and `meshtune
    verify` runs their planned dense GEMMs on the mesh emulator.
    DeepSeek-V3 chooses expert parallelism above 1; Mixtral 8x7B on 32 GPUs
    keeps its 8 experts on every GPU (EP 1) at the real-routing default
    imbalance, the busiest rank's 1.30x costing EP 8 more than it saves,
    and spreads them (EP above 1) for a forced-balance run."""
    import json

    from clirun import run_cli

    doc = json.loads(example_plans[example].read_text())
    ep = doc["configuration"]["expert_parallel"]
    assert ep > 1 if example == "deepseek-v3-h100" else ep == 1
    axes = {a["axis"] for a in doc["layout"]["axes"]}
    assert {"expert", "expert_data"} <= axes
    run = run_cli("verify", str(example_plans[example]))
    assert run.exit_code == 0, run.stderr
    assert "GEMMs match" in run.stdout


@pytest.mark.slow
def test_mixtral_example_spreads_its_experts_under_forced_balance(tmp_path: Path) -> None:
    import yaml
    from planning import plan_for

    example = yaml.safe_load((REPO / "examples" / "mixtral-8x7b-h100.yaml").read_text())
    model = str(REPO / "examples" / example["model"])
    spec = load_model_spec(model).model_dump(mode="json")
    spec["moe"] = {**spec["moe"], "expert_imbalance": 1.0}
    plan = plan_for(tmp_path, spec, example["training"], example["cluster"])
    assert int(plan.config["ep"]) > 1


def test_expert_all_to_all_uses_the_calibrations_all_to_all_entry(tmp_path: Path) -> None:
    """With an all_to_all entry for a resource (calibrate from alltoall_perf
    logs), the expert all-to-all is priced on it; without one, on the
    resource's all-gather link (level_entry). The plan lists expert GEMMs
    and all-to-all pieces beyond the calibration's measured range."""
    import json

    from planning import write_plan

    from autotune.job.hardware import hardware_view
    from autotune.job.plan import make_plan
    from autotune.loading import load_plan_input
    from cost_models import MeshShape, ring_collective_s

    doc = json.loads((REPO / "calibration_data" / "h100_measured.json").read_text())
    switched = dict(doc["collectives"]["all_gather"]["switched"])
    switched["link_bytes_per_s"] /= 4
    switched["regimes"] = None
    switched["fit"] = {
        "num_points": 8,
        "ring_sizes": [8],
        "shard_bytes_min": 2.0**30,
        "shard_bytes_max": 2.0**31,
    }
    doc["collectives"]["all_to_all"] = {"switched": switched}
    doc["name"] = "h100-with-all-to-all"
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(doc))
    training = pinned(
        {
            "global_batch_sequences": 16,
            "sequence_length": 1024,
            "tensor_parallel": 1,
            "data_parallel": 8,
            "expert_parallel": 8,
        }
    )
    with_entry = hardware_view(
        load_plan_input(write_plan(tmp_path, MINI_MOE, training, "h100-hgx", calibration=str(cal)))
    )
    without = hardware_view(
        load_plan_input(
            write_plan(
                tmp_path, MINI_MOE, training, "h100-hgx", name="b.yaml", calibration="h100-measured"
            )
        )
    )
    (_, ep8, _) = with_entry.expert_axes(MeshShape(1, 1), 8, 1, 1, 8)
    b = 16 * 2.0**20
    link = with_entry.level_link(ep8.levels[0], "all_to_all")
    assert link.link_bytes_per_s == pytest.approx(
        without.level_link(ep8.levels[0], "all_gather").link_bytes_per_s / 4
    )
    assert float(with_entry.hierarchical_all_to_all_s(ep8, b)) == pytest.approx(
        float(ring_collective_s(link, 8, b / 8))
    )
    plan = make_plan(
        load_plan_input(
            write_plan(
                tmp_path, MINI_MOE, training, "h100-hgx", name="c.yaml", calibration=str(cal)
            )
        )
    )
    used = {x.used_by for x in plan.extrapolations}
    assert "expert all-to-all" in used  # pieces far below the 1 GiB it measured
    assert plan.experts is not None
    sent = plan.experts.all_to_all_bytes
    assert sent == pytest.approx(16 // 8 * 1024 * 2 * 1024 * 2 * plan.experts.imbalance)
    assert plan.experts.expert_gemm_dims[0] == (plan.experts.rows_per_expert, 2 * 2048, 1024)


def test_expert_tensor_parallelism_in_the_exports(tmp_path: Path) -> None:
    """Megatron-LM gets --expert-tensor-parallel-size; torchtitan 0.3.0 and
    MindFormers have no such degree and say so; MaxText splits every expert
    over its tensor axis, so an ETP other than the TP is named."""
    from click.testing import CliRunner
    from planning import pinned, write_plan

    from autotune.cli import main

    training = pinned({**TP2_EP4, "expert_tensor_parallel": 2})
    path = write_plan(tmp_path, MINI_MOE, training, "h100-hgx")
    doc = tmp_path / "plan.json"
    runner = CliRunner()
    assert runner.invoke(main, ["plan", str(path), "--out", str(doc)]).exit_code == 0
    out = tmp_path / "megatron"
    result = runner.invoke(main, ["export", str(doc), "--to", "megatron", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "--expert-tensor-parallel-size 2" in (out / "megatron_args.sh").read_text()
    for target in ("torchtitan", "mindformers"):
        result = runner.invoke(
            main, ["export", str(doc), "--to", target, "--out", str(tmp_path / target)]
        )
        assert "expert tensor parallel 2" in " ".join(result.output.split()), target
    one = write_plan(
        tmp_path, MINI_MOE, {**training, "expert_tensor_parallel": 1}, "h100-hgx", name="one.yaml"
    )
    doc1 = tmp_path / "one.json"
    assert runner.invoke(main, ["plan", str(one), "--out", str(doc1)]).exit_code == 0
    result = runner.invoke(
        main, ["export", str(doc1), "--to", "maxtext", "--out", str(tmp_path / "maxtext")]
    )
    assert "expert tensor parallel 1: MaxText splits each expert over its tensor axis" in " ".join(
        result.output.split()
    )


def test_the_balancer_sees_dense_and_moe_blocks_as_two_kinds(tmp_path: Path) -> None:
    """Two dense blocks first, then six MoE blocks, over two stages: an even
    split gives the second stage four MoE blocks against the first's two;
    the balancer, which receives the two kinds in model order, moves a
    block to the first stage and the plan is faster than the even split."""
    from planning import pinned, plan_for

    from autotune.job.balance_adapter import build_problem
    from autotune.job.model import Candidates
    from autotune.job.search import _balance_figures
    from autotune.specs.job import RECOMPUTE_MODES

    model = {
        **MINI_MOE,
        "num_layers": 8,
        "moe": {**MINI_MOE["moe"], "first_dense_layers": 2, "expert_imbalance": 1.0},
    }
    training = pinned(
        {
            "global_batch_sequences": 32,
            "sequence_length": 2048,
            "tensor_parallel": 1,
            "pipeline_parallel": 2,
            "data_parallel": 4,
            "expert_parallel": 4,
            "micro_batch_size": 1,
        }
    )
    plan = plan_for(tmp_path, model, training, "h100-hgx")
    layers = plan.stages.layers.sum(axis=1)
    assert plan.balanced and list(layers) == [5, 3]
    assert plan.step_s < plan.even_split_step_s
    # the problem the balancer got: two kinds, in model order
    row = {**plan.config, "recompute": RECOMPUTE_MODES.index(str(plan.config["recompute"]))}
    one = Candidates.of([row])
    f = _balance_figures(plan.inp, plan.hw, one, plan.outcome.figures, 0)
    problem = build_problem(f, ("none",))
    assert [(g.kind, g.count) for g in problem.groups] == [("dense", 2), ("moe", 6)]
    moe, dense = problem.groups[1], problem.groups[0]
    assert moe.forward_s > dense.forward_s and moe.parameter_bytes > dense.parameter_bytes


@pytest.mark.parametrize(
    ("recipe", "local", "forward", "backward"),
    [
        # two GroupedLinears; per expert L GEMMs forward, 2 L backward, and
        # the casts: current scaling 3 kernels per expert and operand, MXFP8
        # and blockwise 1, delayed scaling 1 fused kernel for all experts
        ("none", 16, 2 * 16, 2 * 32),
        ("current", 16, 2 * (16 + 48), 2 * (32 + 48)),
        ("current", 4, 2 * (4 + 12), 2 * (8 + 12)),
        ("mxfp8", 16, 2 * (16 + 16), 2 * (32 + 16)),
        ("blockwise", 2, 2 * (2 + 2), 2 * (4 + 2)),
        ("delayed", 16, 2 * (16 + 1), 2 * (32 + 1)),
        ("delayed", 1, 2 * (1 + 1), 2 * (2 + 1)),
    ],
)
def test_expert_kernel_launches_by_hand(recipe: str, local: int, forward: int, backward: int):
    from cost_models.moe import expert_kernel_launches

    assert expert_kernel_launches(local, recipe) == (forward, backward)


def test_host_bound_time_by_hand() -> None:
    """max(GPU, launches x host time): 128 launches at 13.7 us are 1.7536
    ms, above a 0.4 ms GPU path and below a 2 ms one; no host time leaves
    the GPU's."""
    from cost_models.moe import DEFAULT_HOST_LAUNCH_S, host_bound_s

    assert DEFAULT_HOST_LAUNCH_S == 13.7e-6
    assert float(host_bound_s(0.4e-3, 128, 13.7e-6)) == pytest.approx(1.7536e-3)
    assert float(host_bound_s(2e-3, 128, 13.7e-6)) == 2e-3
    assert float(host_bound_s(0.4e-3, 128, 0.0)) == 0.4e-3


@pytest.mark.parametrize(
    ("trainer", "gpu_nodes", "issued"),
    [
        (None, True, True),
        (None, False, False),
        ("megatron", True, True),
        ("megatron", False, True),
        ("torchtitan", True, False),
        ("jax", True, False),
        ("maxtext", False, False),
        ("mindformers", True, False),
    ],
)
def test_which_trainers_issue_per_expert_kernels(trainer, gpu_nodes: bool, issued: bool) -> None:
    from autotune.job.trainers import per_expert_kernels
    from autotune.specs.job import Trainer

    assert per_expert_kernels(None if trainer is None else Trainer(trainer), gpu_nodes) is issued


FINE_MOE = {
    **MINI_MOE,
    "name": "fine-moe",
    "hidden_size": 2048,
    "num_heads": 32,
    "num_kv_heads": 4,
    "moe": {"num_experts": 128, "experts_per_token": 8, "expert_ffn_size": 768},
}


def test_many_small_local_experts_wait_on_the_host(tmp_path: Path) -> None:
    """Qwen3-30B-A3B-like experts (128 of width 768, 8 per token) at EP 8 on
    one HGX H100 node under FP8 current scaling: 16 local experts issue
    2 (16 + 48) = 128 kernels forward and 2 (32 + 48) = 160 backward, at
    13.7 us each 1.75 and 2.19 ms of host time per layer and micro-batch,
    more than the GPU needs for their GEMMs; the report says so. torchtitan
    (one grouped GEMM) and a calibration with host_launch_s 0 leave host
    time out, and the step is faster by exactly the wait."""
    import json

    from planning import plan_for

    from autotune.job.report import experts_line

    training = pinned({**EP8_FP8, "zero_stage": 3})
    plan = plan_for(tmp_path, FINE_MOE, training, "h100-hgx", calibration="h100-measured")
    x = plan.experts
    assert x is not None and x.host_launches == (128.0, 160.0)
    assert x.host_wait_s > 0.0
    line = experts_line(plan)
    assert "host-bound: 288 per-expert kernel launches per layer and micro-batch" in line
    assert "13.7 us (a public profile's median; host_launch rows in meshtune calibrate" in line

    free = plan_for(
        tmp_path, FINE_MOE, training, "h100-hgx", calibration="h100-measured",
        constraints={"trainer": "torchtitan"},
    )  # fmt: skip
    assert free.experts is not None and free.experts.host_wait_s == 0.0
    assert "host-bound" not in experts_line(free)
    assert free.step_s < plan.step_s

    doc = json.loads((REPO / "calibration_data" / "h100_measured.json").read_text())
    doc["host_launch_s"] = 0.0
    cal = tmp_path / "no-host.json"
    cal.write_text(json.dumps(doc))
    off = plan_for(tmp_path, FINE_MOE, training, "h100-hgx", calibration=str(cal))
    assert off.experts is not None and off.experts.host_wait_s == 0.0
    assert off.step_s == pytest.approx(free.step_s, rel=1e-12)

    doc["host_launch_s"] = 27.4e-6  # twice the default: more wait, named as measured
    cal.write_text(json.dumps(doc))
    slow = plan_for(tmp_path, FINE_MOE, training, "h100-hgx", calibration=str(cal))
    assert slow.experts is not None and slow.experts.host_wait_s > x.host_wait_s
    assert "27.4 us (the calibration's host_launch_s)" in experts_line(slow)


def test_few_large_local_experts_are_not_host_bound(tmp_path: Path) -> None:
    """16 experts of width 8192 on hidden 4096 at EP 8 (2 local experts of
    4,096 rows, 0.55 TFLOP per GEMM): 2 (2 + 6) forward and 2 (4 + 6)
    backward launches (0.22 and 0.27 ms at 13.7 us) are under the GPU's
    time; the host adds nothing."""
    from planning import plan_for

    training = pinned({**EP8_FP8, "zero_stage": 1})
    large = {
        **MINI_MOE,
        "hidden_size": 4096,
        "num_heads": 32,
        "head_dim": 128,
        "moe": {"num_experts": 16, "experts_per_token": 2, "expert_ffn_size": 8192},
    }
    plan = plan_for(tmp_path, large, training, "h100-hgx", calibration="h100-measured")
    assert plan.experts is not None and plan.experts.host_launches == (16.0, 20.0)
    assert plan.experts.host_wait_s == 0.0


def test_every_fp8_recipe_has_a_launch_count() -> None:
    """A recipe added to the spec without its cast kernels counted fails
    here, not in a user's plan."""
    from autotune.specs.training import Fp8Recipe
    from cost_models.moe import expert_kernel_launches

    for recipe in Fp8Recipe:
        forward, backward = expert_kernel_launches(8, recipe.value)
        assert 16 <= forward < backward
    with pytest.raises(ValueError, match="unknown FP8 recipe"):
        expert_kernel_launches(8, "nvfp4")


def test_expert_activations_keep_fp8_gemm_inputs_by_hand() -> None:
    """Per routed copy (DeepSeek-V3's h 7168, F_e 2048, gated): the permuted
    input and the activation's output as the GEMMs' inputs, the gate/up
    output and the expert output in bf16, the fp32 routing weight. Under an
    FP8 recipe the two GEMM inputs are kept as their 1-byte column-wise
    copies (Transformer Engine's GroupedLinear)."""
    from cost_models.fp8 import fp8_saved_input_bytes_per_element
    from cost_models.moe import expert_activation_bytes_per_copy

    h, f = 7168, 2048
    bf16 = expert_activation_bytes_per_copy(h, f, True, 2)
    assert bf16 == 2 * (7168 + 2048) + 2 * (7168 + 2 * 2048) + 4 == 40964
    fp8 = expert_activation_bytes_per_copy(h, f, True, 2, 1, gemm_input_bytes=1.0)
    assert fp8 == 1 * (7168 + 2048) + 2 * (7168 + 2 * 2048) + 4 == 31748
    # MXFP8 adds its E8M0 scale per 32 elements; expert tensor parallelism 2
    # halves the widths of F_e
    mx = fp8_saved_input_bytes_per_element("mxfp8")
    got = expert_activation_bytes_per_copy(h, f, True, 2, 2, gemm_input_bytes=mx)
    assert got == pytest.approx((1 + 1 / 32) * (7168 + 1024) + 2 * (7168 + 2048) + 4, rel=1e-12)


def test_mla_activation_inventory_and_up_projection_recompute_by_hand() -> None:
    """DeepSeek-V3's attention (128 heads, d_qk 192, d_v 128, r_q 1536,
    r_kv 512, d_rope 64) under flash, bf16, no dropout, per token on one
    chip: Q and K at 192 per head, V and the projection input at 128, the
    latents `2 r_q + 2 r_kv + d_rope` beside the norms; selective
    recomputation re-runs the up-projections and frees Q, K and V."""
    from cost_models.activations import (
        BlockShape,
        block_activation_bytes,
        layer_activation_bytes_per_token,
        mla_latent_elements,
        up_projection_output_bytes,
    )

    latents = mla_latent_elements(1536, 512, 64)
    assert latents == 2 * 1536 + 2 * 512 + 64 == 4160
    assert mla_latent_elements(None, 512, 64) == 1088  # no query latent
    shape = BlockShape(7168, 128, 128, 192, 2048, True, 4096, 128, latents)
    inv = block_activation_bytes(shape, 2, dropout=False, flash=True)
    q, v = 128 * 192, 128 * 128
    ffn = 2 * 2 * 2048 + 2 * 2048  # shared expert: gate and up, activation output
    assert inv.head_split == 2 * (q + q) + 2 * v + 2 * v + ffn
    assert inv.seq_split == 4 * 2 * 7168 + 2 * 4160
    assert inv.score == 4 * 128  # the log-sum-exp
    freed = up_projection_output_bytes(shape, 2)
    assert freed == 2 * (2 * q + v)
    t = 2  # tensor parallelism with sequence parallelism
    none = layer_activation_bytes_per_token("none", shape, 2, t, True, False, True)
    selective = layer_activation_bytes_per_token("selective", shape, 2, t, True, False, True)
    assert none - selective == pytest.approx((freed + 4 * 128) / t, rel=1e-12)
    # without MLA nothing of the projections is freed
    gqa = BlockShape(4096, 32, 8, 128, 14336, True, 8192)
    assert up_projection_output_bytes(gqa, 2) == 0.0


def test_mla_up_projection_recompute_seconds_on_a_roofline() -> None:
    from autotune.job.block import mla_up_projection_forward_s
    from cost_models import ComputeModel

    peak = 1e15
    gemm = ComputeModel(peak_flops_per_s=peak)
    tokens, tp = 4096.0, 2
    got = mla_up_projection_forward_s(_v3(), gemm, tokens, tp)
    # q: T x r_q -> nh d_qk / t; kv: T x r_kv -> nh (d_nope + d_v) / t
    flops = 2 * tokens * 1536 * 128 * 192 / tp + 2 * tokens * 512 * 128 * (128 + 128) / tp
    assert got == pytest.approx(flops / peak, rel=1e-12)


def test_megatron_export_names_the_mla_up_projection_recompute(tmp_path: Path) -> None:
    """A selective plan of an MLA model recomputes the up-projections, which
    Megatron-LM runs only when `--recompute-modules` names `mla_up_proj`
    (its default is the attention core alone); a model without MLA keeps
    the default."""
    from click.testing import CliRunner
    from planning import pinned, write_plan

    from autotune.cli import main

    mla = MINI_MLA
    training = pinned({**TP2_EP4, "recompute": "selective"})
    runner = CliRunner()
    for model, modules in ((mla, "--recompute-modules mla_up_proj"), (MINI_MOE, None)):
        path = write_plan(tmp_path, model, training, "h100-hgx", name=f"{model['name']}.yaml")
        doc = tmp_path / f"{model['name']}.json"
        result = runner.invoke(main, ["plan", str(path), "--out", str(doc)])
        assert result.exit_code == 0, result.output
        out = tmp_path / model["name"]
        result = runner.invoke(main, ["export", str(doc), "--to", "megatron", "--out", str(out)])
        assert result.exit_code == 0, result.output
        text = (out / "megatron_args.sh").read_text()
        assert "--recompute-granularity selective" in text
        if modules:
            assert modules in text
        else:
            assert "--recompute-modules" not in text
            # without MLA a selective plan under flash priced nothing Megatron's
            # core_attn recomputation does: said, not hidden
            assert "core_attn recomputation re-runs the attention's forward kernel" in " ".join(
                result.output.split()
            )


@pytest.mark.parametrize(
    ("attn_f", "attn_b", "mlp_f", "mlp_b", "share", "pair"),
    [
        # every module outlasts the 1 s all-to-all beside it: the computation
        (2.0, 4.0, 1.5, 3.0, 0.0, 2.0 + 3.0 + 1.5 + 4.0),
        # short expert GEMMs: both dispatches (1 s) stay partly exposed
        (2.0, 4.0, 0.25, 0.5, 0.0, 2.0 + 1.0 + 1.0 + 4.0),
        # DeepEP's 20 of 132 SMs: each phase's computation ends 20/132 of
        # its 1 s overlap later
        (2.0, 4.0, 1.5, 3.0, 20 / 132, 2.0 + 3.0 + 1.5 + 4.0 + 4 * 20 / 132),
        # a module shorter than its all-to-all is hidden inside it even when
        # slowed: max(1, 0.25 + 0.25 f)
        (2.0, 4.0, 0.25, 0.5, 20 / 132, 2.0 + 20 / 132 + 1.0 + 1.0 + 4.0 + 20 / 132),
    ],
)
def test_merged_layer_pair_by_hand(attn_f, attn_b, mlp_f, mlp_b, share, pair) -> None:
    from cost_models.moe import merged_layer_pair_s

    # 2 s of all-to-all per pass: dispatch and combine 1 s each
    got = float(merged_layer_pair_s(attn_f, attn_b, mlp_f, mlp_b, 2.0, 2.0, share))
    assert got == pytest.approx(pair, rel=1e-12)


def test_flex_dispatchers_hold_their_sms(tmp_path: Path) -> None:
    """DeepEP and HybridEP hold 20 SMs (Megatron-LM's default) while they
    run: 20 of an H100's 132; NCCL's all-to-all is not charged."""
    from planning import EP8_FP8, plan_for

    for dispatcher, share in (("deepep", 20 / 132), ("hybridep", 20 / 132), ("alltoall", 0.0)):
        training = pinned({**EP8_FP8, "expert_dispatcher": dispatcher})
        plan = plan_for(tmp_path, MINI_MOE, training, "h100-hgx")
        assert plan.experts.comm_sm_share == pytest.approx(share, rel=1e-12), dispatcher


def test_allgather_dispatcher_by_hand(tmp_path: Path) -> None:
    """Megatron-LM's default dispatcher: each chip gathers every token of its
    expert group (its T = 1,024 tokens times EP 8 = 8,192, each with its
    fp32 probability and routing-map byte per expert, 5 x 16), keeps the copies
    routed to its experts, and reduce-scatters the outputs: an all-gather
    and a reduce-scatter of the gathered bytes per pass on the expert axis;
    its buffers are the gathered tokens and the un-permuted outputs."""
    from planning import write_plan

    from autotune.job.experts import expert_figures
    from autotune.job.hardware import hardware_view
    from autotune.loading import load_plan_input
    from cost_models import MeshShape
    from cost_models.moe import allgather_dispatch_tokens, permutation_bytes

    assert allgather_dispatch_tokens(1024, 8) == 8192
    assert allgather_dispatch_tokens(1024, 4, 2) == 8192
    # permute 2 x 1,024 copies (read and write), un-permute them into all
    # 8,192 gathered tokens
    assert permutation_bytes(1024, 2, 1024, 2, 8192) == (3 * 2 * 1024 + 8192) * 1024 * 2
    assert permutation_bytes(1024, 2, 1024, 2) == (3 * 2 + 1) * 1024 * 1024 * 2

    training = pinned({**EP8_FP8, "sequence_length": 1024, "fp8": "none",
                       "expert_dispatcher": "allgather"})  # fmt: skip
    path = write_plan(tmp_path, MINI_MOE, training, "h100-hgx")
    inp = load_plan_input(path)
    hw = hardware_view(inp)
    axes = hw.expert_axes(MeshShape(1, 1), 8, 1, 1, 8)
    assert not isinstance(axes, str)
    _, ep8, _ = axes
    x = expert_figures(inp.model, inp.training, hw, ep8, 1, 1, 1)
    gathered = 8192 * (1024 * 2 + 5 * 16)
    comm = float(hw.hierarchical_ring_s(ep8, "all_gather", gathered))
    comm += float(hw.hierarchical_ring_s(ep8, "reduce_scatter", gathered))
    assert x.all_to_all_forward_s == pytest.approx(comm, rel=1e-12)
    assert x.all_to_all_bytes == gathered
    assert x.buffer_bytes == 2 * 8192 * 1024 * 2


def test_allgather_dispatcher_is_refused_with_the_overlap(tmp_path: Path) -> None:
    from clirun import assert_one_line_error, run_cli
    from planning import write_plan

    training = pinned({**EP8_FP8, "fp8": "none", "expert_dispatcher": "allgather",
                       "overlap_expert_comm": True})  # fmt: skip
    path = write_plan(tmp_path, MINI_MOE, training, "h100-hgx")
    assert_one_line_error(
        run_cli("plan", str(path)),
        "training.overlap_expert_comm",
        "runs only with the alltoall or flex token dispatcher, not allgather",
    )
