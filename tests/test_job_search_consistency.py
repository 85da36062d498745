"""The search's closed form against the whole-step model (autotune.job.step)
on the same configurations: the search ranks by the former, the plan of one
configuration reports the latter, so the two must agree."""

from __future__ import annotations

import pytest
import yaml

from autotune.job.candidates import enumerate_candidates
from autotune.job.cluster_view import load_search_hardware
from autotune.job.pricing import price
from autotune.job.step import plan_job
from autotune.loading import load_plan_input
from autotune.plan.search import plan
from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec

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
    "22B TP8 mbs4 full, unfused": (
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


@pytest.mark.parametrize("name", list(CONFIGS))
def test_closed_form_agrees_with_the_whole_step_model(name, tmp_path):
    model, cluster, training, tp, dp, flash = CONFIGS[name]
    job_training = {
        **training,
        "data_parallel": dp,
        "fc_algorithm": "megatron-1d",
        "attention": "flash" if flash else "unfused",
        "sequence_parallel": True,
    }
    path = tmp_path / "plan.yaml"
    doc = {"model": model, "training": job_training, "cluster": cluster, "calibration": CALIBRATION}
    path.write_text(yaml.safe_dump(doc))
    inp = load_plan_input(str(path), None, None)
    whole = plan_job(inp, plan(inp), check_memory=False)
    assert whole.tensor_parallel == tp

    spec = ModelSpec(**model)
    hw = load_search_hardware(cluster, "bf16", CALIBRATION)
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
        f"\n{name}: whole-step {whole.step_s:.3f} s, closed form {closed:.3f} s "
        f"({closed / whole.step_s - 1:+.1%})"
    )
    tolerance = AGREEMENT_SWIGLU if model.get("ffn_kind") == "swiglu" else AGREEMENT
    assert closed == pytest.approx(whole.step_s, rel=tolerance)
