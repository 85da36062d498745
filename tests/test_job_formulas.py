"""Hand-computed checks of every whole-step term (cost_models)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cost_models.activations import (
    BlockShape,
    block_activation_bytes,
    korthikanti_layer_bytes,
    layer_activation_bytes_per_token,
)
from cost_models.data_parallel import (
    data_parallel_traffic,
    exposed_overlap_s,
    model_state_bytes,
)
from cost_models.elementwise import (
    adam_step_bytes_per_param,
    block_elementwise_ops,
    elementwise_s,
    loss_bytes_per_token,
)
from cost_models.transformer_flops import (
    attention_core_forward_flops,
    block_matrix_params,
    megatron_flops_per_iteration,
    model_flops_per_token,
    recompute_flops_per_token,
)

# ---------------------------------------------------------------- FLOPs


def test_attention_flops_gqa_by_hand():
    # b=2, s=1024, nh=32 query heads, d=128: QK^T and AV are 2 s^2 d each per
    # head and sequence: 4 * 2 * 32 * 1024^2 * 128 = 34,359,738,368 FLOPs.
    full = attention_core_forward_flops(2, 1024, 32, 128, causal=False)
    assert full == 4 * 2 * 32 * 1024**2 * 128 == 34_359_738_368
    assert attention_core_forward_flops(2, 1024, 32, 128, causal=True) == full / 2


def test_block_params_gqa_swiglu_by_hand():
    # Llama-3-70B shape: h=8192, 64 heads of 128, 8 KV heads, F=28672, SwiGLU.
    # QKV 8192*(64+16)*128 = 83,886,080; out 8192*8192 = 67,108,864;
    # FFN 3*8192*28672 = 704,643,072; total 855,638,016.
    assert block_matrix_params(8192, 64, 8, 128, 28672, gated=True) == 855_638_016
    # GPT-3: 12 h^2
    assert block_matrix_params(12288, 96, 96, 128, 4 * 12288, gated=False) == 12 * 12288**2


@pytest.mark.parametrize("h,a,l_,s", [(6144, 64, 48, 2048), (12288, 96, 96, 2048)])
def test_model_flops_reduce_to_korthikanti(h, a, l_, s):
    """GPT (MHA, GELU, F=4h): per token = 72 l h^2 (1 + s/6h + V/(12 h l))."""
    v = 51200
    ours = model_flops_per_token(l_, h, a, a, h // a, 4 * h, False, v, s)
    paper = 72 * l_ * h * h * (1 + s / (6 * h) + v / (12 * h * l_))
    assert ours == pytest.approx(paper, rel=1e-12)


def test_model_flops_gqa_counts_smaller_kv():
    mha = model_flops_per_token(1, 1024, 16, 16, 64, 4096, False, 0, 512)
    gqa = model_flops_per_token(1, 1024, 16, 4, 64, 4096, False, 0, 512)
    # the K and V projections shrink from 2*1024*1024 to 2*1024*256 weights
    assert mha - gqa == 6 * 2 * 1024 * (1024 - 256)


def test_recompute_flops_by_hand():
    args = (2, 1024, 16, 16, 64, 4096, False, 512, False)
    assert recompute_flops_per_token("none", *args) == 0
    core = 4 * 512 * 16 * 64
    assert recompute_flops_per_token("selective", *args) == 2 * core
    assert recompute_flops_per_token("full", *args) == 2 * (2 * 12 * 1024**2 + core)


def test_megatron_equation3_is_four_thirds_of_model_flops_without_logits():
    b, s, l_, h = 8, 2048, 24, 2304
    f = megatron_flops_per_iteration(b, s, l_, h, 0)
    model = model_flops_per_token(l_, h, 24, 24, 96, 4 * h, False, 0, s) * b * s
    assert f == pytest.approx(4 / 3 * model, rel=1e-12)


# ---------------------------------------------------------------- activations

GPT = BlockShape(
    hidden=12288, num_heads=96, num_kv_heads=96, head_dim=128, ffn=49152, gated=False, seq_len=2048
)


def test_inventory_is_34h_plus_5as():
    """Derivation (module docstring): 2h + 4h + 2h + 2h + h (attention) +
    2h + 8h + 8h + h (MLP) + 4h (norms) = 34h, scores 5 a s."""
    inv = block_activation_bytes(GPT, 2, dropout=True, flash=False)
    assert inv.head_split + inv.seq_split == 34 * 12288
    assert inv.score == 5 * 96 * 2048


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_activations_match_korthikanti_table2(mode, t, sp):
    s, b = 2048, 1
    ours = layer_activation_bytes_per_token(mode, GPT, 2, t, sp, True, False) * s * b
    if mode == "selective" and not sp:
        # Table 2 lists selective with SP only; without SP the replicated 10 sbh stays
        paper = s * b * 12288 * (10 + 24 / t)
    else:
        paper = korthikanti_layer_bytes(s, b, 12288, 96, t, mode, sp)
    assert ours == pytest.approx(paper, rel=1e-12)


def test_flash_and_swiglu_gqa_inventory_by_hand():
    # h=4096, 32 heads of 128, 8 KV heads, F=14336 SwiGLU, no dropout, flash:
    # seq split 4*2*4096 = 32768; head split 2*(4096+1024) + 2*1024 + 2*4096
    # + 2*2*14336 + 2*14336 = 10240 + 2048 + 8192 + 57344 + 28672 = 106496;
    # flash keeps 4 bytes of log-sum-exp per head: 128.
    shape = BlockShape(4096, 32, 8, 128, 14336, True, 8192)
    inv = block_activation_bytes(shape, 2, dropout=False, flash=True)
    assert (inv.seq_split, inv.head_split, inv.score) == (32768, 106496, 128)
    assert layer_activation_bytes_per_token("none", shape, 2, 4, True, False, True) == (
        (32768 + 106496 + 128) / 4
    )


def test_recompute_orders_memory():
    kw = {"element_bytes": 2, "tensor_parallel": 8, "sequence_parallel": True, "dropout": True}
    none = layer_activation_bytes_per_token("none", GPT, flash=False, **kw)
    sel = layer_activation_bytes_per_token("selective", GPT, flash=False, **kw)
    full = layer_activation_bytes_per_token("full", GPT, flash=False, **kw)
    assert none > sel > full == 2 * 12288 / 8


# ---------------------------------------------------------------- memory-bound ops


def test_elementwise_bytes_by_hand():
    # h=1024, q=kv=1024, F=4096, GELU, 16 heads, s=512, bf16, dropout, no rotary, unfused
    ops = {
        o.name: o
        for o in block_elementwise_ops(
            1024, 1024, 1024, 4096, False, 16, 512, 2, True, False, False
        )
    }
    assert (ops["norm"].forward_bytes, ops["norm"].backward_bytes) == (8192, 12288)
    assert ops["residual add"].forward_bytes == 12288
    assert ops["dropout"].forward_bytes == 2 * 5 * 1024 == 10240
    assert (ops["activation (GELU)"].forward_bytes, ops["activation (GELU)"].backward_bytes) == (
        16384,
        24576,
    )
    assert (ops["softmax"].forward_bytes, ops["softmax"].backward_bytes) == (32768, 49152)
    assert ops["attention dropout"].forward_bytes == 5 * 16 * 512 == 40960
    assert "rotary" not in ops


def test_elementwise_swiglu_rotary_flash_by_hand():
    ops = {
        o.name: o
        for o in block_elementwise_ops(
            4096, 4096, 1024, 14336, True, 32, 8192, 2, False, True, True
        )
    }
    assert ops["rotary"].forward_bytes == 2 * 2 * (4096 + 1024)
    assert ops["activation (SwiGLU)"].forward_bytes == 3 * 2 * 14336
    assert ops["activation (SwiGLU)"].backward_bytes == 5 * 2 * 14336
    assert "softmax" not in ops and "dropout" not in ops


def test_elementwise_time_sharding():
    ops = block_elementwise_ops(1024, 1024, 1024, 4096, False, 16, 512, 2, False, False, True)
    # norm + residual are hidden-wide: 8192 + 12288 = 20480; GELU 16384 split
    sp = elementwise_s(ops, 1000, 4, True, 1e12, forward=True)
    no_sp = elementwise_s(ops, 1000, 4, False, 1e12, forward=True)
    assert sp == pytest.approx(1000 * (20480 + 16384) / 4 / 1e12)
    assert no_sp == pytest.approx(1000 * (20480 + 16384 / 4) / 1e12)


def test_loss_and_adam_bytes():
    assert loss_bytes_per_token(50000, 2) == (50000 * 10, 50000 * 6)
    assert adam_step_bytes_per_param(2, 4) == 30


# ---------------------------------------------------------------- ZeRO


@pytest.mark.parametrize(
    "stage,expected",
    [
        (0, (2e9, 4e9, 12e9)),
        (1, (2e9, 4e9, 1.5e9)),
        (2, (2e9, 0.5e9, 1.5e9)),
        (3, (0.25e9, 0.5e9, 1.5e9)),
    ],
)
def test_zero_memory_by_hand(stage, expected):
    # 1e9 parameters on the stage, d = 8, bf16 weights, fp32 gradients
    m = model_state_bytes(1e9, stage, 8, 2, 4)
    assert (m.weights, m.gradients, m.optimizer) == pytest.approx(expected)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_traffic_by_hand(stage):
    # 1e9 parameters, d=4, m=3 micro-batches, bf16 everywhere: one shard is 0.5 GB
    tr = data_parallel_traffic(1e9, stage, 4, 3, 2, 2)
    sent = tr.bytes_sent_per_chip(4)
    if stage < 3:
        assert sent == pytest.approx(2 * 3 * 0.5e9)  # all-reduce = RS + AG, 2 (d-1)/d * 2P
    else:
        assert sent == pytest.approx(3 * 3 * 3 * 0.5e9)  # per micro-batch 2 AG + 1 RS


def test_exposed_overlap():
    assert exposed_overlap_s(1.0, 3.0, 0.1) == pytest.approx(0.1)
    assert exposed_overlap_s(5.0, 3.0, 0.1) == pytest.approx(2.0)
    assert exposed_overlap_s(0.05, 3.0, 0.1) == pytest.approx(0.05)


@given(
    params=st.floats(1e6, 1e12),
    d=st.integers(1, 1024),
    g=st.sampled_from([2, 4]),
)
def test_zero_stages_never_grow_memory(params, d, g):
    totals = [model_state_bytes(params, z, d, 2, g).total for z in range(4)]
    assert all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(totals))


def test_overlapped_backward_pair_by_hand():
    from cost_models.concurrency import overlapped_pair_saving_s

    # dgrad: 1.0 ms compute, 0.8 ms all-reduce; wgrad: 1.2 ms compute, no
    # gather. Blocking 3.0 ms; overlapped: dgrad 1.0 + max(0.8, 1.1 * 1.2)
    # = 2.32 ms, saving 0.68 ms (= 0.8 + 1.2 - 1.32).
    assert overlapped_pair_saving_s(0.8e-3, 1.0e-3, 0.0, 1.2e-3, 1.1) == pytest.approx(0.68e-3)
    # communication longer than the slowed compute beside it (2.0 ms against
    # 1.2 x 0.5 ms): the pair takes the 2.0 ms of communication, so the whole
    # 0.5 ms of compute is saved.
    assert overlapped_pair_saving_s(2.0e-3, 0.0, 0.0, 0.5e-3, 1.2) == pytest.approx(0.5e-3)
    # both pairs (sequence parallelism: the re-gather beside the dgrad GEMM)
    both = overlapped_pair_saving_s(0.8e-3, 1.0e-3, 0.5e-3, 1.2e-3, 1.0)
    assert both == pytest.approx(0.8e-3 + 0.5e-3)
    # a slowdown so large that overlapping loses never costs time
    assert overlapped_pair_saving_s(0.1e-3, 1.0e-3, 0.0, 1.0e-3, 3.0) == 0.0


@given(
    st.floats(0, 1e-2),
    st.floats(0, 1e-2),
    st.floats(0, 1e-2),
    st.floats(0, 1e-2),
    st.floats(1.0, 2.0),
)
def test_overlapped_backward_saves_at_most_the_shorter(cd, xd, cw, xw, slow):
    from cost_models.concurrency import overlapped_pair_saving_s

    saving = overlapped_pair_saving_s(cd, xd, cw, xw, slow)
    assert 0.0 <= saving <= min(cd, xw) + min(cw, xd) + 1e-15
