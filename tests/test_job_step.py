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


def job_for(tmp_path: Path, training: dict, cluster: str = "dgx-a100-selene-4n", model=None):
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
    job = job_for(tmp_path, training, "dgx-a100-selene", llama)
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
