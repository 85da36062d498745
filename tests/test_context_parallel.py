"""Context parallelism: hand-computed ring-attention bytes and overlap,
causal chunk balance, attention FLOPs at long sequence with GQA, the
all-to-all model, the layout of the context group, and the planner's
rules and choices."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from planning import LLAMA3_8B as LLAMA8B
from planning import pinned, plan_for, write_plan

from autotune.cli import main
from autotune.hardware.layout import ParallelAxis
from cost_models.context_parallel import (
    kv_block_bytes,
    ring_attention_exposed_s,
    ulysses_all_to_all_bytes,
)
from cost_models.transformer_flops import attention_core_forward_flops


def causal_units_per_chip(cp: int) -> list[float]:
    """Chunk-pair units of causal work each chip does under load-balanced
    chunking (chip i holds chunks i and 2cp-1-i): a query chunk q against a
    key chunk k is 1 unit if k < q, 1/2 if k == q, 0 if k > q."""
    out = []
    for i in range(cp):
        mine = (i, 2 * cp - 1 - i)
        units = 0.0
        for q in mine:
            for k in range(2 * cp):
                units += 1.0 if k < q else 0.5 if k == q else 0.0
        out.append(units)
    return out


@pytest.mark.parametrize("cp", [1, 2, 3, 4, 8, 16])
def test_causal_chunks_balance_the_work(cp):
    # every chip does 2 cp units, the causal total (2 cp)^2 / 2 over cp chips
    units = causal_units_per_chip(cp)
    assert units == [2.0 * cp] * cp
    assert sum(units) == (2 * cp) ** 2 / 2


def test_ring_step_bytes_and_overlap_by_hand():
    # Llama-3-8B shape, 1 sequence of 131,072 tokens, cp 8, tp 2, bf16:
    # a chip holds 16,384 tokens and 8 / 2 = 4 key/value heads of 128:
    # K and V: 2 * 16384 * 4 * 128 * 2 B = 33,554,432 B (32 MiB) per step
    block = kv_block_bytes(131072 / 8, 4, 128, 2)
    assert float(block) == 2 * 16384 * 4 * 128 * 2 == 33_554_432
    # attention of the chip: 4 b nh s^2 d / 2 / (tp cp) FLOPs
    flops = attention_core_forward_flops(1, 131072, 32, 128, causal=True) / (2 * 8)
    assert flops == pytest.approx(4 * 32 * 131072**2 * 128 / 2 / 16)
    # at 400 TFLOP/s: 2.75 s forward, 0.344 s per step; a 32 MiB send at
    # 50 GB/s takes 0.67 ms: hidden
    attention_s = flops / 400e12
    assert float(ring_attention_exposed_s(attention_s, 33_554_432 / 50e9, 8)) == 0.0
    # a slow link: 0.5 s per send exposes (8 - 1) * (0.5 - attention_s / 8)
    exposed = float(ring_attention_exposed_s(attention_s, 0.5, 8))
    assert exposed == pytest.approx(7 * (0.5 - attention_s / 8))
    # no ring without context parallelism
    assert float(ring_attention_exposed_s(attention_s, 0.5, 1)) == 0.0


def test_ulysses_bytes_by_hand():
    # 32 query and 8 key/value heads per chip, 4096 local tokens, d 128, bf16:
    # in: 4096 * (32 + 16) * 128 * 2 B; out: 4096 * 32 * 128 * 2 B
    into, out = ulysses_all_to_all_bytes(4096, 32, 8, 128, 2)
    assert float(into) == 4096 * 48 * 128 * 2
    assert float(out) == 4096 * 32 * 128 * 2


@given(
    attention=st.floats(1e-6, 10.0),
    send=st.floats(0.0, 10.0),
    cp=st.integers(1, 64),
)
def test_exposed_is_never_negative_nor_above_the_sends(attention, send, cp):
    exposed = float(ring_attention_exposed_s(attention, send, cp))
    assert 0.0 <= exposed <= max(cp - 1, 0) * send + 1e-12


def _plan(tmp_path, training, cluster="h100-hgx-8n", **sections):
    return plan_for(tmp_path, LLAMA8B, pinned(training), cluster, **sections)


def test_context_group_lays_out_next_to_the_tensor_mesh(tmp_path):
    training = {
        "global_batch_sequences": 8,
        "sequence_length": 32768,
        "tensor_parallel": 2,
        "context_parallel": 4,
        "data_parallel": 8,
        "recompute": "full",
    }
    plan = _plan(tmp_path, training)
    ctx = plan.layout.axis(ParallelAxis.CONTEXT)
    data = plan.layout.axis(ParallelAxis.DATA)
    grad = plan.layout.axis(ParallelAxis.GRADIENT)
    assert (ctx.size, ctx.stride) == (4, 2) and not ctx.spans_nodes
    assert (data.size, data.stride) == (8, 8) and data.spans_nodes
    assert (grad.size, grad.stride) == (32, 2)
    assert plan.training.context_parallel == 4
    # the FC layers see 8192 tokens per chip: a quarter of the sequence
    assert plan.training.tokens_per_micro_batch == 8192
    assert plan.block.context_forward_s >= 0 and plan.parts["cp_comm_s"] >= 0


def test_context_parallelism_divides_activations_and_attention(tmp_path):
    base = {
        "global_batch_sequences": 32,
        "sequence_length": 32768,
        "tensor_parallel": 2,
        "recompute": "full",
        "micro_batch_size": 1,
    }
    one = _plan(tmp_path, {**base, "context_parallel": 1, "data_parallel": 32})
    four = _plan(tmp_path, {**base, "context_parallel": 4, "data_parallel": 8})
    ratio = np.asarray(one.block.activation_bytes) / np.asarray(four.block.activation_bytes)
    assert ratio == pytest.approx([4, 4, 4])
    assert one.block.attention_forward_s / four.block.attention_forward_s == pytest.approx(4)
    # ZeRO and the gradient reduction run over data x context: the same 32
    assert four.layout.axis(ParallelAxis.GRADIENT).size == 32


@pytest.mark.parametrize("comm", ["p2p", "all_gather", "a2a"])
def test_each_exchange_prices(tmp_path, comm):
    training = {
        "global_batch_sequences": 8,
        "sequence_length": 65536,
        "tensor_parallel": 1,
        "context_parallel": 8,
        "data_parallel": 8,
        "recompute": "full",
        "context_parallel_comm": comm,
    }
    plan = _plan(tmp_path, training)
    b = plan.block
    assert np.isfinite(b.context_forward_s) and b.context_buffer_bytes > 0
    if comm != "p2p":
        assert b.context_forward_s > 0  # exposed by construction


def plan_cli(tmp_path, training: dict, cluster: str = "h100-hgx-8n"):
    """`meshtune plan` on a file of the Llama-3-8B shape with `training`."""
    path = write_plan(tmp_path, LLAMA8B, training, cluster)
    return CliRunner().invoke(main, ["plan", str(path)])


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"sequence_length": 1004, "context_parallel": 4}, "not a multiple of 8"),
        ({"attention": "unfused", "context_parallel": 2}, "fused kernel"),
    ],
)
def test_invalid_context_degree_exits_2_naming_the_rule(tmp_path, change, text):
    training = pinned({"global_batch_sequences": 8, "sequence_length": 4096, **change})
    result = plan_cli(tmp_path, training)
    assert result.exit_code == 2, result.output
    assert text in result.output and "fix:" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_ulysses_needs_heads_divisible(tmp_path):
    # 8 key/value heads over tp 4 leave 2 per chip: a2a 4 cannot split them
    training = pinned(
        {
            "global_batch_sequences": 8,
            "sequence_length": 8192,
            "tensor_parallel": 4,
            "context_parallel": 4,
            "data_parallel": 4,
            "context_parallel_comm": "a2a",
        }
    )
    result = plan_cli(tmp_path, training)
    assert result.exit_code == 2, result.output
    assert "Ulysses" in result.output and "training.context_parallel" in result.output


def test_sequence_no_context_degree_fits_exits_1_naming_the_shortfall(tmp_path):
    # 4M tokens on 8 GPUs: even cp 8 and full recomputation leave too much
    training = {"global_batch_sequences": 8, "sequence_length": 4194304}
    result = plan_cli(tmp_path, training, "h100-hgx-1n")
    assert result.exit_code == 1, result.output
    assert "out of memory" in result.output and "short by" in result.output


def test_long_sequence_search_chooses_context_parallelism(tmp_path):
    # 131,072 tokens on 64 H100, every degree searched
    training = {"global_batch_sequences": 64, "sequence_length": 131072}
    plan = plan_for(tmp_path, LLAMA8B, training, "h100-hgx-8n")
    assert plan.fits
    assert int(plan.config["cp"]) > 1
    c = plan.config
    assert int(c["rows"]) * int(c["cols"]) * int(c["cp"]) * int(c["pp"]) * int(c["dp"]) == 64


def test_chunk_units_helper_is_exact():
    # the helper itself against a brute-force token-level count (cp 3, 2 tokens a chunk)
    cp, per = 3, 2
    n = 2 * cp * per
    owner = {}
    for i in range(cp):
        for chunk in (i, 2 * cp - 1 - i):
            for t in range(chunk * per, (chunk + 1) * per):
                owner[t] = i
    pairs = [0] * cp
    for q, k in itertools.product(range(n), range(n)):
        if k <= q:
            pairs[owner[q]] += 1
    # every chip does the same token-pair work within the diagonal's share
    assert max(pairs) - min(pairs) <= per * per


def test_ulysses_exchange_by_the_all_to_all_formula(tmp_path):
    """a2a over 8 GPUs of one node: each pass is two all-to-alls (queries,
    keys and values in; the output back), each `P - 1` pieces of
    `bytes / P` on the switch's link (HardwareView.hierarchical_all_to_all_s),
    exposed in the forward and again in the backward."""
    from cost_models import ring_collective_s

    training = {
        "global_batch_sequences": 8,
        "sequence_length": 65536,
        "tensor_parallel": 1,
        "context_parallel": 8,
        "data_parallel": 1,
        "micro_batch_size": 1,
        "recompute": "full",
        "context_parallel_comm": "a2a",
    }
    plan = _plan(tmp_path, training, "h100-hgx-1n")
    axis = plan.layout.axis(ParallelAxis.CONTEXT)
    (level,) = axis.levels
    link = plan.hw.level_link(level, "all_gather")
    tokens = 65536 / 8
    into = tokens * (32 + 2 * 8) * 128 * 2  # queries + keys + values, bf16
    out = tokens * 32 * 128 * 2
    expected = float(ring_collective_s(link, 8, into / 8) + ring_collective_s(link, 8, out / 8))
    assert plan.block.context_forward_s == pytest.approx(expected)
    assert plan.block.context_backward_s == pytest.approx(expected)
    assert plan.block.context_buffer_bytes == pytest.approx(into)


def test_a_context_degree_dividing_the_micro_batch_never_beats_more_replicas(tmp_path):
    """The search skips (on nodes, data parallelism searched) a context
    degree that divides the micro-batch: the same configuration with `cp`
    times the replicas at `1 / cp` of the micro-batch runs on the same
    chips and costs no more. Priced side by side here, both ways."""
    from autotune.job.candidates import _dominated_by_data_parallelism
    from autotune.job.fc import FcTable
    from autotune.job.hardware import hardware_view
    from autotune.job.model import Candidates, KeyFigures, price
    from autotune.job.search import key_figures
    from autotune.loading import load_plan_input
    from cost_models import MeshShape

    training = {"global_batch_sequences": 32, "sequence_length": 16384}
    path = write_plan(tmp_path, LLAMA8B, training, "h100-hgx-2n")
    inp = load_plan_input(path)
    hw = hardware_view(inp)
    rows = []
    for tp, cp, pp, mbs, zero, rc in itertools.product(
        (1, 2, 4), (2, 4), (1, 2), (2, 4, 8), (1, 3), (0, 2)
    ):
        if mbs % cp or 16 % (tp * cp * pp):
            continue
        if not _dominated_by_data_parallelism(inp, hw, MeshShape(1, tp), cp, mbs):
            continue
        dp = 16 // (tp * cp * pp)
        if 32 % (dp * mbs):
            continue  # a replica's sequences must divide into micro-batches
        base = {"rows": 1, "cols": tp, "pp": pp, "mbs": mbs, "v": 1, "recompute": rc}
        rows.append({**base, "dp": dp, "cp": cp, "zero": zero})
        rows.append({**base, "dp": dp * cp, "cp": 1, "mbs": mbs // cp, "zero": zero})
    c = Candidates.of(rows)
    figs = KeyFigures({}, {}, {})
    key_figures(inp, hw, FcTable(inp, hw, inp.search.dataflow), c, figs)
    p = price(c, figs, hw, inp.training, LLAMA8B["num_layers"], LLAMA8B["hidden_size"])
    assert len(rows) >= 20
    context, replicas = p.step_s[0::2], p.step_s[1::2]
    assert np.all(replicas <= context * (1 + 1e-12))
    assert np.all(p.peak_bytes[1::2] <= p.peak_bytes[0::2] * (1 + 1e-12))
