"""The whole-step model end to end: pipeline memory, breakdown, ZeRO, the
CLI's step report, out-of-memory and bad training input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from autotune.cli import main
from autotune.job.step import plan_job
from autotune.loading import load_plan_input
from autotune.plan.search import plan

GPT_SMALL = {
    "name": "gpt-small",
    "num_layers": 16,
    "hidden_size": 2048,
    "num_heads": 16,
    "head_dim": 128,
    "ffn_size": 8192,
    "vocab_size": 51200,
}


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def job_for(tmp_path: Path, training: dict, cluster: str = "a100-hgx-4n", model=None):
    path = tmp_path / "plan.yaml"
    data = {"model": model or GPT_SMALL, "training": training, "cluster": cluster}
    path.write_text(yaml.safe_dump(data))
    inp = load_plan_input(str(path), None, None)
    return plan_job(inp, plan(inp), check_memory=False)


def test_one_f_one_b_stage_memory_follows_alive_micro_batches(tmp_path):
    """1F1B: stage s keeps min(pp - s, m) micro-batches alive, so with equal
    layers per stage the activations fall linearly from pp to 1."""
    training = {
        "global_batch_sequences": 64,
        "sequence_length": 2048,
        "pipeline_parallel": 4,
        "data_parallel": 1,
        "micro_batch_size": 1,
        "fc_algorithm": "megatron-1d",
        "recompute": "selective",
    }
    job = job_for(tmp_path, training)
    acts = [m.activations for m in job.memory]
    per_mb = acts[-1]  # the last stage holds one micro-batch
    assert [a / per_mb for a in acts] == pytest.approx([4, 3, 2, 1])
    assert job.memory[0].layers == 4


def test_breakdown_adds_up_to_the_step(tmp_path):
    training = {
        "global_batch_sequences": 64,
        "sequence_length": 2048,
        "pipeline_parallel": 2,
        "data_parallel": 2,
        "micro_batch_size": 2,
        "zero_stage": 1,
        "recompute": "full",
    }
    job = job_for(tmp_path, training)
    assert sum(p.seconds for p in job.breakdown) == pytest.approx(job.step_s, rel=1e-9)
    assert all(p.seconds >= -1e-12 for p in job.breakdown)
    parts = {p.name: p.seconds for p in job.breakdown}
    assert parts["pipeline bubble"] > 0 and parts["recomputation"] > 0
    assert job.hfu > job.mfu


def test_zero_stages_shrink_memory_and_overlap_hides_traffic(tmp_path):
    base = {
        "global_batch_sequences": 64,
        "sequence_length": 2048,
        "data_parallel": 4,
        "micro_batch_size": 2,
        "fc_algorithm": "megatron-1d",
    }
    mem = []
    for z in range(4):
        job = job_for(tmp_path, {**base, "zero_stage": z})
        mem.append(job.memory[0].weights + job.memory[0].gradients + job.memory[0].optimizer)
    assert mem[0] > mem[1] > mem[2] > mem[3]
    hidden = job_for(tmp_path, {**base, "overlap_data_parallel": True})
    blocking = job_for(tmp_path, {**base, "overlap_data_parallel": False})
    assert blocking.data_parallel_exposed_s == pytest.approx(blocking.data_parallel_comm_s)
    assert hidden.data_parallel_exposed_s < blocking.data_parallel_exposed_s


def test_mfu_counts_gqa_and_swiglu(tmp_path):
    llama = {
        "name": "llama-ish",
        "num_layers": 8,
        "hidden_size": 4096,
        "num_heads": 32,
        "num_kv_heads": 8,
        "head_dim": 128,
        "ffn_size": 14336,
        "ffn_kind": "swiglu",
        "vocab_size": 128256,
        "position_encoding": "rotary",
    }
    training = {"global_batch_sequences": 8, "sequence_length": 4096, "micro_batch_size": 1}
    job = job_for(tmp_path, training, "a100-hgx", llama)
    p_block = 4096 * (32 + 16) * 128 + 4096 * 4096 + 3 * 4096 * 14336
    per_token = 6 * (8 * p_block + 4096 * 128256) + 12 * 8 * 4096 * 32 * 128
    assert job.model_flops_per_step == pytest.approx(per_token * 8 * 4096)


@pytest.mark.parametrize(
    "example",
    [
        "examples/gpt3.yaml",
        "examples/megatron-nlg.yaml",
        "examples/llama3-70b.yaml",
        "examples/megatron-gpt-175b-a100.yaml",
        "examples/llama3-70b-h100.yaml",
    ],
)
def test_every_example_prints_step_breakdown_and_memory(repo_root, example):
    result = run("plan", example)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Step time:" in out and "MFU:" in out and "tokens/s:" in out
    assert "Where the step's time goes" in out and "pipeline bubble" in out
    assert "Memory per chip by pipeline stage" in out and "headroom" in out


def test_job_section_in_json(repo_root):
    doc = json.loads(run("plan", "examples/megatron-gpt-175b-a100.yaml", "--format", "json").stdout)
    job = doc["job"]
    assert job["version"] == 1 and job["pipeline_parallel"] == 8
    assert len(job["memory"]) == 8 and all(m["headroom_bytes"] > 0 for m in job["memory"])
    assert sum(p["time_s"] for p in job["breakdown"]) == pytest.approx(job["step_s"])


def test_out_of_memory_exits_1_naming_stage_and_shortfall(repo_root, tmp_path):
    data = yaml.safe_load(Path("examples/gpt3.yaml").read_text())
    data["training"]["recompute"] = "none"
    path = tmp_path / "oom.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "plan.json"
    result = run("plan", str(path), "--out", str(out))
    assert result.exit_code == 1
    assert "out of memory: pipeline stage 0 needs" in result.output
    assert "short by" in result.output and "GiB" in result.output
    assert "Memory per chip by pipeline stage" in result.stdout  # the table shows why
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"micro_batch_size": 3}, "not divisible by micro_batch_size (3)"),
        ({"interleave": 2}, "interleave 2 needs pipeline stages"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"micro_batches": 2, "micro_batch_size": 4}, "disagrees with micro_batch_size"),
        ({"recompute": "some"}, "recompute"),
    ],
)
def test_bad_training_fields_exit_2(repo_root, tmp_path, change, message):
    data = yaml.safe_load(Path("examples/gpt3.yaml").read_text())
    data["training"].update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("plan", str(path))
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_interleave_needs_micro_batches_multiple_of_stages(repo_root, tmp_path):
    data = yaml.safe_load(Path("examples/megatron-gpt-175b-a100.yaml").read_text())
    data["training"].update({"interleave": 2, "micro_batch_size": 2, "global_batch_sequences": 36})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("plan", str(path))
    assert result.exit_code == 2 and "multiple of pipeline_parallel" in result.output


def test_data_parallel_needs_a_link_figure(repo_root, tmp_path):
    cluster = yaml.safe_load(Path("autotune/presets/clusters/tpu-v4-256.yaml").read_text())
    for key in ("data_parallel_gb_per_s", "pipeline_gb_per_s"):
        cluster.pop(key)
    data = yaml.safe_load(Path("examples/gpt3.yaml").read_text())
    data["cluster"] = cluster
    data["training"].update({"data_parallel": 2, "global_batch_sequences": 256})
    cluster["num_chips"] = 512
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("plan", str(path))
    assert result.exit_code == 2 and "data_parallel_gb_per_s" in result.output


def test_selective_recompute_costs_nothing_extra_with_flash(tmp_path):
    base = {"global_batch_sequences": 16, "sequence_length": 2048, "micro_batch_size": 2}
    jobs = {
        (kernel, mode): job_for(tmp_path, {**base, "attention": kernel, "recompute": mode})
        for kernel, mode in itertools.product(("flash", "unfused"), ("none", "selective"))
    }
    assert jobs["flash", "selective"].layer.recompute_s == 0
    assert jobs["unfused", "selective"].layer.recompute_s > 0
    assert (
        jobs["unfused", "selective"].memory[0].activations
        < jobs["unfused", "none"].memory[0].activations
    )


def _ends_setup():
    from autotune.job.block import StepShape, ends
    from autotune.job.hardware import JobHardware
    from autotune.specs import ModelSpec, TrainingSpec
    from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, LinkParams

    link = LinkParams(launch_s=0.0, sync_s=1e-6, link_bytes_per_s=100e9)
    comm = CommModel({(op, ax): link for op in CollectiveOp for ax in (Axis.ROW, Axis.COL)})
    hw = JobHardware(
        peak_flops_per_s=200e12,
        gemm=ComputeModel(peak_flops_per_s=100e12),
        comm=comm,
        attention_flops_per_s=100e12,
        hbm_bytes=80 * 2**30,
        hbm_bytes_per_s=1e12,
        data_parallel=None,
        pipeline=None,
    )
    model = ModelSpec(
        name="m",
        num_layers=2,
        hidden_size=1024,
        num_heads=8,
        head_dim=128,
        ffn_size=4096,
        vocab_size=32000,
        position_encoding="rotary",
    )
    training = TrainingSpec(global_batch_sequences=1, sequence_length=4096)
    sh = StepShape(
        tp=4,
        element_bytes=2,
        grad_bytes=2,
        sequence_parallel=True,
        flash=True,
        tokens=4096,
        vocab_split=4,
        token_split=1,
    )
    return ends(model, training, hw, sh)


def test_ends_by_hand():
    """4096 tokens, h=1024, V=32000 over a ring of 4 chips, bf16:
    - reduce-scatter and all-gather of 4096*1024*2/4 = 2 MiB shards:
      3 * (1 us + 2,097,152 B / 100 GB/s) = 65.91 us each;
    - embedding lookup 4096 * 2 * 2 * 1024 B = 16.8 MB at 1 TB/s = 16.78 us,
      its backward 4096 * 3 * 2 * 1024 / 4 B = 6.29 us;
    - logits GEMM 2 * 4096 * 8000 * 1024 FLOPs = 67.1 GFLOP at 100 TFLOP/s =
      671.1 us forward, twice that backward;
    - final norm (sequence-parallel, 1024 tokens): 4.19 us / 6.29 us;
    - loss over 4096 x 8000 logits: 10 and 6 bytes each: 327.7 / 196.6 us."""
    e = _ends_setup()
    comm = 3 * (1e-6 + 4096 * 1024 * 2 / 4 / 100e9)
    assert e.head_forward_s == pytest.approx(4096 * 4 * 1024 / 1e12 + comm)
    assert e.head_backward_s == pytest.approx(4096 * 6 * 1024 / 4 / 1e12 + comm)
    logits = 2 * 4096 * 8000 * 1024 / 100e12
    norm_f, norm_b = 1024 * 4 * 1024 / 1e12, 1024 * 6 * 1024 / 1e12
    loss_f, loss_b = 4096 * 8000 * 10 / 1e12, 4096 * 8000 * 6 / 1e12
    assert e.tail_forward_s == pytest.approx(norm_f + comm + logits + loss_f)
    assert e.tail_backward_s == pytest.approx(norm_b + comm + 2 * logits + loss_b)
    assert e.head_params == 32000 * 1024 / 4  # rotary: no position table
    assert e.tail_transient_bytes == 4096 * 8000 * 6


def test_pipeline_transfer_and_optimizer_by_hand(tmp_path):
    """GPT-small (h=2048) on 2 stages of TP 8 over a100-hgx-2n: the stages
    talk across nodes, priced by the a100-nominal calibration's scale-out
    send-recv (40 us launch, 5 us per step, 22.5 GB/s): one micro-batch of
    2048 tokens sends 2048 * 2048 * 2 / 8 = 1 MiB in 91.6 us; 4
    micro-batches, a forward and a backward transfer each: 732.8 us. The
    optimizer step on stage 0 (8 layers of 50,335,744 / 8 + 4096 weights,
    plus the 51200 x 2048 / 8 embedding and 2048 x 2048 positions) moves
    30 bytes per parameter at 2,039 GB/s."""
    training = {
        "global_batch_sequences": 4,
        "sequence_length": 2048,
        "pipeline_parallel": 2,
        "micro_batch_size": 1,
        "fc_algorithm": "megatron-1d",
        "fp32_gradients": True,
    }
    job = job_for(tmp_path, training, "a100-hgx-2n")
    parts = {p.name: p.seconds for p in job.breakdown}
    p2p = 40e-6 + 5e-6 + 2048 * 2048 * 2 / 8 / 22.5e9
    assert parts["pipeline send/recv"] == pytest.approx(2 * 4 * p2p, rel=1e-9)
    layer = (2048 * (16 + 32) * 128 + 16 * 128 * 2048 + 2 * 2048 * 8192) / 8 + 2 * 2048
    params = 8 * layer + 51200 * 2048 / 8 + 2048 * 2048
    assert parts["optimizer step"] == pytest.approx(params * 30 / 2.039e12, rel=1e-9)
