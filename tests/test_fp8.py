"""FP8 recipes: hand-computed casting bytes, weight copies and kept inputs
per recipe, FP8 weight gathers, the FP8 GEMM model, `calibrate` fitting
fp8 and attention rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from planning import LLAMA3_8B as LLAMA8B
from planning import pinned, plan_for

from autotune.cli import main
from autotune.job.model import param_gather_bytes
from autotune.specs.job import TrainingInput
from cost_models.context_parallel import attention_rate_flops_per_s
from cost_models.fp8 import (
    fp8_cast_bytes_per_element,
    fp8_saved_input_bytes_per_element,
    fp8_weight_copy_bytes_per_param,
)


@pytest.mark.parametrize(
    ("recipe", "cast", "copies", "kept"),
    [
        # bf16 in: read 2, write row + column copies 1 + 1
        ("delayed", 2 + 2, 2.0, 1.0),
        # current scaling reads once more for the amax
        ("current", 2 + 2 + 2, 2.0, 1.0),
        # MXFP8: one E8M0 scale byte per 32 elements in each copy
        ("mxfp8", 2 + 2 * (1 + 1 / 32), 2 * (1 + 1 / 32), 1 + 1 / 32),
        # blockwise: one fp32 per 128 activations; 128 x 128 weight blocks
        ("blockwise", 2 + 2 * (1 + 4 / 128), 2.0, 1 + 4 / 128),
    ],
)
def test_recipe_bytes_by_hand(recipe, cast, copies, kept):
    assert fp8_cast_bytes_per_element(recipe, 2) == pytest.approx(cast)
    assert fp8_weight_copy_bytes_per_param(recipe) == pytest.approx(copies)
    assert fp8_saved_input_bytes_per_element(recipe) == pytest.approx(kept)


def test_weight_gathers_in_fp8_only_when_asked():
    base = {"global_batch_sequences": 8, "sequence_length": 4096}
    assert param_gather_bytes(TrainingInput.model_validate(base)) == 2
    fp8 = {**base, "fp8": "delayed"}
    assert param_gather_bytes(TrainingInput.model_validate(fp8)) == 2
    assert param_gather_bytes(TrainingInput.model_validate({**fp8, "fp8_param_gather": True})) == 1


def _plan(tmp_path, training):
    return plan_for(tmp_path, LLAMA8B, pinned(training), "h100-hgx-1n")


def test_fp8_plan_by_hand(tmp_path):
    """One H100 node, TP 8, one micro-batch of 1 x 4096 tokens: FP8 halves
    the FC GEMMs' time at the nominal calibration (the bf16 efficiency at
    twice the peak), adds the casts (memory-bound), keeps two weight copies
    of 1 byte per block parameter, and keeps the FC inputs in 1 byte."""
    base = {
        "global_batch_sequences": 8,
        "sequence_length": 4096,
        "tensor_parallel": 8,
        "micro_batch_size": 1,
        "fc_algorithm": "megatron-1d",
    }
    bf16 = _plan(tmp_path, base)
    fp8 = _plan(tmp_path, {**base, "fp8": "delayed"})
    # the GEMM part of the FC time halves; the collectives stay bf16
    ratio = fp8.block.fc.forward_s / bf16.block.fc.forward_s
    assert 0.5 <= ratio < 1.0
    # casts: forward reads every FC input once (4 bytes an element: read 2,
    # write two 1-byte copies), the chip's 1/8 share, at the HBM rate
    tokens = 4096
    inputs = 4096 + 4096 + 4096 + 14336  # qkv, attn_out, ffn up/gate (one input), down
    cast_s = tokens * inputs / 8 * 4 / fp8.hw.hbm_bytes_per_s
    assert fp8.block.elementwise_forward_s - bf16.block.elementwise_forward_s == pytest.approx(
        cast_s, rel=1e-9
    )
    # weight copies: 2 bytes per block parameter on the chip
    layers = 32
    copies = layers * bf16.block.params_per_chip * 2
    assert fp8.stages.weights_bytes[0] - bf16.stages.weights_bytes[0] == pytest.approx(copies)
    # kept FC inputs: 2 h / 8 (sequence parallel) + (attention width + ffn) / 8
    # elements a token, 1 byte instead of 2
    kept = tokens * (2 * 4096 / 8 + (4096 + 14336) / 8) * (2 - 1)
    saved = np.asarray(bf16.block.activation_bytes) - np.asarray(fp8.block.activation_bytes)
    assert saved[:2] == pytest.approx([kept, kept]) and saved[2] == 0
    # the attention core and the output layer stay bf16
    assert fp8.block.attention_forward_s == pytest.approx(bf16.block.attention_forward_s)
    assert any("no fp8 GEMM entry" in w for w in fp8.warnings)


def test_report_names_the_peak_behind_fp8_utilisation(tmp_path):
    """MFU and HFU divide by the dtype's (bf16) peak, which FP8 GEMMs run
    above: the report says so beside them for an FP8 plan, not for bf16."""
    from rich.console import Console

    from autotune.job.report import render_report

    base = {"global_batch_sequences": 8, "sequence_length": 4096, "tensor_parallel": 8,
            "micro_batch_size": 1, "fc_algorithm": "megatron-1d"}  # fmt: skip
    for training, said in ((base, False), ({**base, "fp8": "current"}, True)):
        console = Console(width=400, record=True)
        render_report(_plan(tmp_path, training), console)
        text = console.export_text()
        assert ("(of the bf16 peak; FP8 GEMMs run above it)" in text) is said


def test_attention_rate_curve_by_hand():
    assert float(attention_rate_flops_per_s(8192, 400e12, 0.0)) == 400e12
    assert float(attention_rate_flops_per_s(2048, 400e12, 2048.0)) == pytest.approx(200e12)


REPO = Path(__file__).resolve().parents[1]


def _write_csv(path, rows):
    text = "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds\n" + "\n".join(rows) + "\n"
    path.write_text(text)


def test_calibrate_fits_fp8_and_attention_rows(tmp_path):
    rows = []
    # bf16 and fp8 GEMMs at 600 and 1000 TFLOP/s (large squares)
    for size in (4096, 8192, 16384):
        flops = 2 * size**3
        rows.append(f"gemm,,,,,{size},{size},{size},bf16,{flops / 600e12:.6e}")
        rows.append(f"gemm,,,,,{size},{size},{size},fp8,{flops / 1000e12:.6e}")
    # causal attention, 32 heads of 128, rate 500 TFLOP/s * r / (r + 1024)
    # at its rate length r = s / 2; the backward 2.5 forwards of FLOPs at
    # 400 TFLOP/s * r / (r + 2048)
    for seq in (1024, 4096, 16384, 65536):
        flops = 4 * 32 * seq**2 * 128 / 2
        r = seq / 2
        rate = 500e12 * r / (r + 1024)
        rows.append(f"attention,causal,,,,{seq},32,128,bf16,{flops / rate:.6e}")
        back = 400e12 * r / (r + 2048)
        rows.append(f"attention_backward,causal,,,,{seq},32,128,bf16,{2.5 * flops / back:.6e}")
    csv = tmp_path / "bench.csv"
    _write_csv(csv, rows)
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(
        main, ["calibrate", str(csv), "--chip", "h100-sxm", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["compute"]["dtype"] == "bf16"
    assert doc["compute_fp8"]["dtype"] == "fp8"
    assert doc["compute_fp8"]["effective_flops_per_s"] > doc["compute"]["effective_flops_per_s"]
    att = doc["attention"]
    assert att["flops_per_s"] == pytest.approx(500e12, rel=1e-3)
    assert att["seq_half"] == pytest.approx(1024, rel=1e-2)
    assert att["measured_seq"] == [1024, 65536]
    assert "attention (bf16)" in result.output
    back = att["backward"]
    assert back["flops_per_s"] == pytest.approx(400e12, rel=1e-3)
    assert back["seq_half"] == pytest.approx(2048, rel=1e-2)
    assert "attention backward (bf16)" in result.output


def test_attention_rate_length_and_the_longest_measured_by_hand():
    from cost_models.context_parallel import attention_rate_length

    assert float(attention_rate_length(8192, causal=True)) == 4096
    assert float(attention_rate_length(8192, causal=False)) == 8192
    # held at the longest length measured: 8,192 -> 400e12 * 8192 / 10240
    held = float(attention_rate_flops_per_s(65536, 400e12, 2048.0, 8192))
    assert held == pytest.approx(320e12)
    assert float(attention_rate_flops_per_s(4096, 400e12, 2048.0, 8192)) == pytest.approx(
        400e12 * 4096 / 6144
    )


def test_the_backward_runs_at_its_own_rate(tmp_path):
    """A calibration with a backward entry prices the flash backward as 2.5
    forwards of FLOPs at the backward's rate on the causal rate length
    (s / cp / 2), the forward at the forward's."""
    cal = json.loads((REPO / "calibration_data" / "h100_measured.json").read_text())
    cal["attention"] = {
        "dtype": "bf16",
        "flops_per_s": 600e12,
        "seq_half": 0.0,
        "measured_seq": [1024, 16384],
        "backward": {"flops_per_s": 300e12, "seq_half": 1024.0, "measured_seq": [1024, 4096]},
    }
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    training = pinned(
        {
            "global_batch_sequences": 8,
            "sequence_length": 8192,
            "tensor_parallel": 1,
            "data_parallel": 8,
        }
    )
    plan = plan_for(tmp_path, LLAMA8B, training, "h100-hgx", calibration=str(path))
    b = plan.block
    ratio = b.attention_backward_s / b.attention_forward_s
    # the forward at 600 TFLOP/s; the backward at 300 * 4096 / 5120 (held at 4,096)
    assert ratio == pytest.approx(2.5 * 600 / (300 * 4096 / 5120))


def test_attention_row_with_a_bad_mask_is_one_line(tmp_path):
    csv = tmp_path / "bench.csv"
    _write_csv(csv, ["attention,sliding,,,,4096,32,128,bf16,0.001"])
    result = CliRunner().invoke(main, ["calibrate", str(csv), "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 2
    assert "op" in result.output and "causal or full" in result.output
    assert not (tmp_path / "c.json").exists()


def test_backward_attention_rows_alone_are_one_line(tmp_path):
    csv = tmp_path / "bench.csv"
    _write_csv(csv, ["attention_backward,full,,,,4096,32,128,bf16,0.001"])
    result = CliRunner().invoke(main, ["calibrate", str(csv), "--out", str(tmp_path / "c.json")])
    assert result.exit_code == 2
    assert result.output.strip().endswith(
        "bench.csv:2: kind: got 'attention_backward'; attention_backward rows need attention "
        "(forward) rows beside them; fix: add attention rows of the same kernel (meshtune "
        "prices the backward against the forward)"
    ), result.output
    assert not (tmp_path / "c.json").exists()
