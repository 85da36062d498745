"""The step's error band, near-ties and what a plan extrapolates
(autotune/job/accuracy.py, extrapolate.py), by hand and on plans."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from planning import pinned, plan_for

from autotune.cli import main
from autotune.job.accuracy import (
    collective_extrapolations,
    gemm_extrapolations,
    step_band_rel,
)
from autotune.loading import load_calibration
from autotune.specs.calibration import ExpectedError
from cost_models import Dataflow, MeshShape, local_gemm_dims


def _expected(comm: float | None, work: float | None) -> ExpectedError:
    return ExpectedError(
        collective_median_rel_error=comm, compute_median_rel_error=work, basis="test"
    )


def test_step_band_by_hand() -> None:
    # 6 s of FC compute at 10%, 2 s of exposed communication at 5%, a 2 s
    # bubble at the work's average (0.7 / 8 = 8.75%): 0.875 s of 10 s
    parts = {"fc_compute_s": 6.0, "tp_comm_s": 2.0, "bubble_s": 2.0}
    assert step_band_rel(parts, 10.0, _expected(0.05, 0.10)) == pytest.approx(0.0875)
    # one error missing: the other prices every part
    assert step_band_rel(parts, 10.0, _expected(None, 0.10)) == pytest.approx(0.10)
    assert step_band_rel(parts, 10.0, _expected(0.05, None)) == pytest.approx(0.05)
    # no held-out error (data-sheet calibrations): no band
    assert step_band_rel(parts, 10.0, None) is None
    assert step_band_rel(parts, 10.0, _expected(None, None)) is None


def test_local_gemm_dims_by_hand() -> None:
    # OS on 2 x 4: the local GEMM is (m / rows, n / cols, k), k sliced by S
    assert local_gemm_dims(Dataflow.OS, 1024, 1024, 1024, MeshShape(2, 4), 2) == (512, 256, 512)
    # Megatron 1D, column parallel: the 1 x 8 mesh, one slice: (T, O/8, I)
    assert local_gemm_dims(Dataflow.OS, 8192, 2304 * 8, 6144, MeshShape(1, 8), 1) == (
        8192,
        2304,
        6144,
    )


def test_extrapolations_by_hand() -> None:
    cal, _ = load_calibration("a100-measured")
    low, high = cal.compute.measured_range()
    assert low is not None and high is not None
    # inside the measured box: nothing; k of 96 against the smallest measured
    # k (768): 8x below
    assert gemm_extrapolations(cal, {"FC layers": [tuple(high)]}) == []
    (x,) = gemm_extrapolations(cal, {"attention core": [(2048, 2048, 96)]})
    assert x.dimension == "k" and x.factor == pytest.approx(low[2] / 96)
    assert "priced here for the attention core: k 96, " in x.line()
    # a collective piece 4x above the fit's largest and 2x below its smallest
    entry = next(
        (op, key, link)
        for op, links in cal.collectives.items()
        for key, link in links.items()
        if link.fit is not None and link.fit.shard_bytes_max
    )
    op, key, link = entry
    lo, hi = link.fit.shard_bytes_min, link.fit.shard_bytes_max
    (c,) = collective_extrapolations(cal, {(op, key): (lo / 2, hi * 4, "FC layers")})
    assert c.factor == pytest.approx(4.0) and c.kind == "collective"
    assert collective_extrapolations(cal, {(op, key): (lo, hi, "FC layers")}) == []


GPT_22B = {
    "name": "gpt-22b",
    "num_layers": 48,
    "hidden_size": 6144,
    "num_heads": 64,
    "head_dim": 96,
    "ffn_size": 24576,
    "vocab_size": 51200,
}


def test_a_measured_plan_carries_its_band_and_extrapolations(tmp_path) -> None:
    """The 22B layer of Korthikanti et al. on one A100 node with the measured
    calibration: the band comes from its held-out errors, the unfused
    attention core's k = 96 is below the GEMMs it measured (k >= 768)."""
    training = {
        "global_batch_sequences": 16,
        "sequence_length": 2048,
        "fc_algorithm": "megatron-1d",
        "attention": "unfused",
        "tensor_parallel": 8,
        "micro_batch_size": 4,
    }
    plan = plan_for(tmp_path, GPT_22B, pinned(training), "a100-hgx-1n", calibration="a100-measured")
    assert plan.band_rel is not None and 0.04 < plan.band_rel < 0.06
    what = {(x.used_by, x.dimension) for x in plan.extrapolations}
    assert ("attention core", "k") in what
    nominal = plan_for(tmp_path, GPT_22B, pinned(training), "a100-hgx-1n")
    assert nominal.band_rel is None and nominal.extrapolations == ()


def test_near_ties_are_named_in_the_report_and_the_json(tmp_path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "model: {name: gpt-13b, num_layers: 40, hidden_size: 5120, num_heads: 40, head_dim: 128,"
        " ffn_size: 20480, vocab_size: 51200}\n"
        "training: {global_batch_sequences: 256, sequence_length: 2048, "
        "fc_algorithm: megatron-1d}\n"
        "cluster: a100-hgx-4n\ncalibration: a100-measured\n"
    )
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(main, ["plan", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "error band ±" in text and "Near-tie:" in text
    doc = json.loads(out.read_text())
    band = doc["predictions"]["step_band_rel_error"]
    step = doc["predictions"]["step_s"]
    assert doc["predictions"]["step_band_s"] == pytest.approx(
        [step * (1 - band), step * (1 + band)]
    )
    near = [a for a in doc["alternatives"] if a["within_error_band"]]
    assert near and all(a["step_s"] <= step * (1 + band) and a["fits"] for a in near)
    far = [a for a in doc["alternatives"] if not a["within_error_band"] and a["fits"]]
    assert all(a["step_s"] > step * (1 + band) for a in far)


def test_attention_beyond_its_measured_sequences_is_listed() -> None:
    """h100-measured's attention rows span 512-16,384 tokens forward and
    1,024-8,192 backward: a kernel on 65,536 tokens per chip is 4x and 8x
    beyond them (its rates held there), one on 2,048 inside both."""
    from autotune.job.accuracy import attention_extrapolations

    cal, _ = load_calibration("h100-measured")
    assert attention_extrapolations(cal, 2048.0) == []
    forward, backward = attention_extrapolations(cal, 65536.0)
    assert (forward.what, forward.factor) == ("attention bf16", pytest.approx(4.0))
    assert (backward.what, backward.factor) == ("attention backward bf16", pytest.approx(8.0))
    assert forward.line() == (
        "attention bf16 was measured on sequence from 512 to 16,384; priced here for the "
        "attention core: sequence 65,536, 4.0x beyond it"
    )
    (short,) = attention_extrapolations(cal, 768.0)  # below the backward's shortest
    assert short.what == "attention backward bf16" and short.factor == pytest.approx(1024 / 768)


def test_flash_attention_2_preset_reproduces_its_rows_and_runs_below_fa3() -> None:
    """h100-measured-fa2's attention comes from FlashAttention-2's own rows
    (calibration_data/measured/attention_h100_fa2_tritonbench.csv): priced
    back through the rate curve, the 16,384-token rows come within 10% of
    their measured times (full forward 6.142 ms, causal backward 8.947 ms at
    1 x 16 heads x d 128), and the preset runs attention at about half
    h100-measured's FlashAttention-3 rate at 8,192 tokens, forward and
    backward; everything else in the two presets is the same."""
    from cost_models.context_parallel import attention_rate_flops_per_s, attention_rate_length

    fa2, _ = load_calibration("h100-measured-fa2")
    fa3, _ = load_calibration("h100-measured")
    flops = 4.0 * 16 * 16384**2 * 128

    def seconds(entry, n_flops: float, causal: bool) -> float:
        s = attention_rate_length(16384, causal)
        return n_flops / float(attention_rate_flops_per_s(s, entry.flops_per_s, entry.seq_half))

    assert seconds(fa2.attention, flops, False) == pytest.approx(6.14246e-3, rel=0.10)
    assert seconds(fa2.attention.backward, 2.5 * flops / 2, True) == pytest.approx(
        8.94672e-3, rel=0.10
    )

    def rate(entry, s: int) -> float:
        return float(attention_rate_flops_per_s(s, entry.flops_per_s, entry.seq_half))

    # at 8,192 tokens, the longest both measured backward
    assert 0.5 < rate(fa2.attention, 8192) / rate(fa3.attention, 8192) < 0.6
    assert 0.45 < rate(fa2.attention.backward, 8192) / rate(fa3.attention.backward, 8192) < 0.55

    def rounded(value):  # the two files are separate fits of the same rows
        if isinstance(value, float):
            return float(f"{value:.6g}")
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items() if k != "outliers"}
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return value

    assert rounded(fa2.model_dump(include={"compute", "compute_fp8", "collectives"})) == rounded(
        fa3.model_dump(include={"compute", "compute_fp8", "collectives"})
    )
