"""The search's closed form against the whole-step model (autotune.job.step)
on the same configurations: the search ranks by the former, the plan of one
configuration reports the latter, so the two must agree."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from autotune.job.candidates import enumerate_candidates
from autotune.job.cluster_view import load_search_hardware, search_hardware
from autotune.job.fc_pricing import fc_times
from autotune.job.hardware import job_hardware
from autotune.job.pricing import end_block_seconds, price
from autotune.job.step import plan_job
from autotune.loading import load_cluster_spec, load_plan_input
from autotune.plan.search import plan
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec
from calibration_data import data_path
from cost_models import MeshShape
from cost_models.elementwise import loss_bytes_per_token

AGREEMENT = 0.05  # relative step-time difference allowed
CALIBRATION = "a100-nominal"  # both models read the same figures
# The whole-step model prices SwiGLU's gate and up projections as two FC
# layers that each all-gather their input (plan.layers lists them apart);
# the closed form fuses them into one GEMM as Megatron-LM does, one gather
# fewer of the five per block, so its exposed tensor communication is 20%
# lower there.
AGREEMENT_SWIGLU = 0.10

GPT = dict(vocab_size=51200)
CONFIGS = {
    # name: (model, cluster, training shared by both, tp, dp)
    "175B TP8 PP8 full, unfused": (
        dict(
            name="gpt-175b",
            num_layers=96,
            hidden_size=12288,
            num_heads=96,
            head_dim=128,
            ffn_size=49152,
            **GPT,
        ),
        "a100-hgx-8n",
        dict(
            global_batch_sequences=64,
            sequence_length=2048,
            pipeline_parallel=8,
            micro_batch_size=1,
            recompute="full",
            dropout=True,
            fp32_gradients=True,
        ),
        8,
        1,
        False,
    ),
    "530B TP8 PP35 selective, unfused": (
        dict(
            name="gpt-530b",
            num_layers=105,
            hidden_size=20480,
            num_heads=128,
            head_dim=160,
            ffn_size=81920,
            **GPT,
        ),
        "a100-hgx-35n",
        dict(
            global_batch_sequences=280,
            sequence_length=2048,
            pipeline_parallel=35,
            micro_batch_size=1,
            recompute="selective",
            dropout=True,
            fp32_gradients=True,
        ),
        8,
        1,
        False,
    ),
    "22B TP8 mbs4 full, unfused, async all-reduce": (
        dict(
            name="gpt-22b",
            num_layers=48,
            hidden_size=6144,
            num_heads=64,
            head_dim=96,
            ffn_size=24576,
            **GPT,
        ),
        "a100-hgx-1n",
        dict(
            global_batch_sequences=4,
            sequence_length=2048,
            pipeline_parallel=1,
            micro_batch_size=4,
            recompute="full",
            dropout=True,
            fp32_gradients=True,
            overlap_tensor_backward=True,  # Megatron-LM's asynchronous all-reduce
        ),
        8,
        1,
        False,
    ),
    "Llama-70B shape TP8 PP4 DP4 flash, ZeRO 1": (
        dict(
            name="llama-70b",
            num_layers=80,
            hidden_size=8192,
            num_heads=64,
            head_dim=128,
            num_kv_heads=8,
            ffn_size=28672,
            ffn_kind="swiglu",
            vocab_size=128256,
            position_encoding="rotary",
        ),
        "h100-hgx-16n",
        dict(
            global_batch_sequences=128,
            sequence_length=8192,
            pipeline_parallel=4,
            micro_batch_size=1,
            recompute="none",
            zero_stage=1,
        ),
        8,
        4,
        True,
    ),
}


# A calibration shaped like one `meshtune calibrate` fits from GEMM
# benchmarks and nccl-tests logs: a saturating GEMM efficiency curve whose
# asymptote (287 TFLOP/s, the fit of eight cuBLASLt bf16 rows on an A100
# SXM4) no real GEMM reaches, and collectives whose launch, step and
# bandwidth change with the message size (NCCL's protocol switches). The
# nominal calibration has neither, so only this one shows whether the
# closed form reads the same GEMM and link models as the whole-step model.
CURVE = {
    "effective_flops_per_s": 287.4e12,
    "efficiency_curve": {
        "m_half": 916.0,
        "n_half": 115.3,
        "k_half": 108.7,
        "max_dims": [802816.0, 16384.0, 16384.0],
    },
    "peak_flops_per_s": 312e12,
    "hbm_bytes_per_s": 1555e9,
}
# (largest per-chip piece or None, launch s, per-step s, bytes/s), small to large
NODE_REGIMES = [
    (2.0**20, 20e-6, 2e-6, 60e9),
    (2.0**24, 28e-6, 1e-6, 150e9),
    (None, 28e-6, 1e-6, 209e9),
]
NIC_REGIMES = [(2.0**20, 30e-6, 8e-6, 9e9), (None, 40e-6, 5e-6, 22.5e9)]


def curved_calibration(directory) -> str:
    """a100-nominal with CURVE as its compute model and NODE_REGIMES /
    NIC_REGIMES on every link; the file's path."""
    doc = json.loads(data_path("a100_nominal.json").read_text())
    doc["name"] = "a100-curve-regimes"
    doc["figures"] = "fitted"
    doc["compute"].update(CURVE)
    for entries in doc["collectives"].values():
        for kind, regimes in (("switched", NODE_REGIMES), ("scale_out", NIC_REGIMES)):
            rows = [
                {"max_shard_bytes": b, "launch_s": a, "sync_s": s, "link_bytes_per_s": w}
                for b, a, s, w in regimes
            ]
            # the plain fields repeat the large-message regime
            entries[kind] = {**{k: v for k, v in rows[-1].items() if k != "max_shard_bytes"}}
            entries[kind]["regimes"] = rows
    path = directory / "a100-curve-regimes.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.parametrize("calibration", ["nominal", "curve and regimes"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_closed_form_agrees_with_the_whole_step_model(name, calibration, tmp_path):
    model, cluster, training, tp, dp, flash = CONFIGS[name]
    cal = CALIBRATION if calibration == "nominal" else curved_calibration(tmp_path)
    job_training = {
        **training,
        "data_parallel": dp,
        "fc_algorithm": "megatron-1d",
        "attention": "flash" if flash else "unfused",
        "sequence_parallel": True,
    }
    path = tmp_path / "plan.yaml"
    doc = {"model": model, "training": job_training, "cluster": cluster, "calibration": cal}
    path.write_text(yaml.safe_dump(doc))
    inp = load_plan_input(str(path), None, None)
    whole = plan_job(inp, plan(inp), check_memory=False)
    assert whole.tensor_parallel == tp

    spec = ModelSpec(**model)
    hw = load_search_hardware(cluster, "bf16", cal)
    auto = AutoTrainingSpec(
        tensor_mesh=[1, tp],
        data_parallel=dp,
        interleave=1,
        zero_stage=training.get("zero_stage", 0),
        flash_attention=flash,
        **{k: v for k, v in training.items() if k != "zero_stage"},
    )
    c = enumerate_candidates(spec, hw, auto, SearchConstraints(max_micro_batch_size=64))
    assert len(c) == 1
    closed = float(price(spec, hw, auto, c).step_s[0])
    print(
        f"\n{name}, {calibration}: whole-step {whole.step_s:.3f} s, closed form {closed:.3f} s "
        f"({closed / whole.step_s - 1:+.1%})"
    )
    tolerance = AGREEMENT_SWIGLU if model.get("ffn_kind") == "swiglu" else AGREEMENT
    assert closed == pytest.approx(whole.step_s, rel=tolerance)


def _one_node(compute: dict, regimes: bool = False):
    """SearchHardware of one A100 HGX node under a100-nominal with
    `compute` merged into its compute entry (and NODE_REGIMES on its links)."""
    doc = json.loads(data_path("a100_nominal.json").read_text())
    doc["compute"].update(compute)
    if regimes:
        for entries in doc["collectives"].values():
            rows = [
                {"max_shard_bytes": b, "launch_s": a, "sync_s": s, "link_bytes_per_s": w}
                for b, a, s, w in NODE_REGIMES
            ]
            entries["switched"]["regimes"] = rows
    spec, _ = load_cluster_spec("a100-hgx-1n")
    return search_hardware(spec, CalibrationSpec.model_validate(doc), "bf16")


SMALL = ModelSpec(
    name="small",
    num_layers=2,
    hidden_size=1024,
    num_heads=8,
    head_dim=128,
    ffn_size=4096,
    vocab_size=8192,
)


def test_logits_gemm_is_priced_by_the_curve():
    # A100 bf16 peak 312 TFLOP/s, calibrated large-GEMM rate 156 = 0.5 x peak,
    # every dimension's half-efficiency size 1024. On a 1 x 8 mesh one chip
    # multiplies T = 2048 tokens by a 1024 x 8192/8 weight shard:
    # eff = 0.5 * 2048/3072 * 1024/2048 * 1024/2048 = 1/12 of peak = 26 TFLOP/s,
    # 2 * 2048 * 1024 * 1024 FLOPs / 26e12 = 165.19 us forward (HBM of the
    # A100 SXM4 80GB: 10.5 MB at 2039 GB/s = 5.1 us, not binding). The backward-data (2048, 1024,
    # 1024) and backward-weight (1024, 1024, 2048) GEMMs reach 1/12 too: twice
    # that. The constant rate alone (156 TFLOP/s) would give 27.5 us.
    hw = _one_node(
        {
            "effective_flops_per_s": 156e12,
            "efficiency_curve": {"m_half": 1024.0, "n_half": 1024.0, "k_half": 1024.0},
        }
    )
    train = AutoTrainingSpec(
        global_batch_sequences=1,
        sequence_length=2048,
        tensor_mesh=[1, 8],
        pipeline_parallel=1,
        data_parallel=1,
        micro_batch_size=1,
        interleave=1,
        recompute="none",
        zero_stage=0,
    )
    c = enumerate_candidates(SMALL, hw, train, SearchConstraints())
    assert len(c) == 1
    _, tail_f, tail_b = end_block_seconds(SMALL, hw, train, c)
    gemm_s = 2 * 2048 * 1024 * 1024 / 26e12
    assert gemm_s == pytest.approx(165.19e-6, rel=1e-4)
    loss_f, loss_b = loss_bytes_per_token(8192, 2)
    loss_s = 2048 / 8 / 2039e9
    assert float(tail_f[0]) == pytest.approx(gemm_s + loss_s * loss_f, rel=1e-9)
    assert float(tail_b[0]) == pytest.approx(2 * gemm_s + loss_s * loss_b, rel=1e-9)


def test_fc_time_cache_tells_curves_and_regimes_apart():
    # Same large-GEMM rate and straight lines, different curve or regimes:
    # the FC times (cached on SearchHardware) must differ, on Megatron's
    # 1 x 8 mesh and on a 2 x 4 MeshSlice mesh alike.
    plain = _one_node({"effective_flops_per_s": 249.6e12})
    curve = _one_node(
        {
            "effective_flops_per_s": 249.6e12,
            "efficiency_curve": {"m_half": 512.0, "n_half": 0.0, "k_half": 0.0},
        }
    )
    regimes = _one_node({"effective_flops_per_s": 249.6e12}, regimes=True)
    assert len({plain, curve, regimes}) == 3
    for rows, cols in ((1, 8), (2, 4)):
        times = [fc_times(SMALL, hw, rows, cols, 2048, 2) for hw in (plain, curve, regimes)]
        assert times[1].forward_s > times[0].forward_s
        assert times[2].forward_comm_s > times[0].forward_comm_s


def test_whole_step_data_parallel_and_pipeline_links_keep_their_regimes(tmp_path):
    # The Llama-70B shape's data-parallel (TP8 x DP4 = 32 chips) and pipeline
    # groups span nodes: both read the scale_out entries, regimes and all,
    # as the closed form's links do.
    model, cluster, training, tp, dp, _ = CONFIGS["Llama-70B shape TP8 PP4 DP4 flash, ZeRO 1"]
    doc = {
        "model": model,
        "training": {**training, "data_parallel": dp, "fc_algorithm": "megatron-1d"},
        "cluster": cluster,
        "calibration": curved_calibration(tmp_path),
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    inp = load_plan_input(str(path), None, None)
    hw, _ = job_hardware(inp, MeshShape(1, tp))
    search = load_search_hardware(cluster, "bf16", doc["calibration"])
    want = [(b or math.inf, a, s, w) for b, a, s, w in NIC_REGIMES]
    for link in (hw.data_parallel, hw.pipeline):
        got = [(r.max_shard_bytes, r.launch_s, r.sync_s, r.link_bytes_per_s) for r in link.regimes]
        assert got == want
    assert hw.data_parallel == search.inter_node_link
    assert hw.pipeline == search.inter_node_send_link
