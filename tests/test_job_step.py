"""The whole-step model end to end on pinned configurations: pipeline
memory, the breakdown, ZeRO, the CLI's step report, out-of-memory and bad
training input, and hand-computed ends, transfers and optimizer step."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from planning import LLAMA, pinned, plan_for

from autotune.cli import main
from autotune.job.model import PARTS

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
    return plan_for(tmp_path, model or GPT_SMALL, pinned(training), cluster)


def test_one_f_one_b_stage_memory_follows_alive_micro_batches(tmp_path):
    """1F1B: stage s keeps min(pp - s, m) micro-batches alive, so with equal
    layers per stage the activations fall linearly from pp to 1."""
    training = {
        "global_batch_sequences": 64,
        "sequence_length": 2048,
        "pipeline_parallel": 4,
        "data_parallel": 8,
        "micro_batch_size": 1,
        "fc_algorithm": "megatron-1d",
        "recompute": "selective",
        "layer_split": "even",
    }
    job = job_for(tmp_path, training)
    acts = list(job.stages.activation_bytes)
    per_mb = acts[-1]  # the last stage holds one micro-batch
    assert [a / per_mb for a in acts] == pytest.approx([4, 3, 2, 1])
    assert list(job.stages.layers[:, 0]) == [4, 4, 4, 4]


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
    assert sum(job.parts.values()) == pytest.approx(job.step_s, rel=1e-9)
    assert all(v >= -1e-12 for v in job.parts.values())
    assert job.parts["bubble_s"] > 0 and job.parts["recompute_s"] > 0
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
        st = job_for(tmp_path, {**base, "zero_stage": z}).stages
        mem.append(st.weights_bytes[0] + st.gradients_bytes[0] + st.optimizer_bytes[0])
    assert mem[0] > mem[1] > mem[2] > mem[3]
    hidden = job_for(tmp_path, {**base, "overlap_data_parallel": True}).stages
    blocking = job_for(tmp_path, {**base, "overlap_data_parallel": False}).stages
    assert blocking.dp_exposed_s[0] == pytest.approx(blocking.dp_comm_s[0])
    assert hidden.dp_exposed_s[0] < blocking.dp_exposed_s[0]


def test_mfu_counts_gqa_and_swiglu(tmp_path):
    training = {"global_batch_sequences": 8, "sequence_length": 4096, "micro_batch_size": 1}
    job = job_for(tmp_path, training, "a100-hgx", LLAMA)
    p_block = 4096 * (32 + 16) * 128 + 4096 * 4096 + 3 * 4096 * 14336
    # flash attention: the causal half of the attention core, 12 L s nh d / 2
    per_token = 6 * (8 * p_block + 4096 * 128256) + 12 * 8 * 4096 * 32 * 128 / 2
    assert job.model_flops_per_step == pytest.approx(per_token * 8 * 4096)
    # unfused: the full count (Korthikanti et al. 2022)
    job = job_for(tmp_path, {**training, "attention": "unfused"}, "a100-hgx", LLAMA)
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
        "examples/llama3-8b-128k-h100.yaml",
    ],
)
def test_every_example_prints_step_breakdown_and_memory(repo_root, example):
    result = run("plan", example)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Step time:" in out and "MFU:" in out and "tokens/s:" in out
    assert "Where the step's time goes" in out and "pipeline bubble" in out
    assert "Memory per chip by pipeline stage" in out and "headroom" in out


def test_predictions_in_json(repo_root):
    doc = json.loads(run("plan", "examples/megatron-gpt-175b-a100.yaml", "--format", "json").stdout)
    p = doc["predictions"]
    assert doc["configuration"]["pipeline_parallel"] == 8
    assert len(p["memory"]) == 8 and all(m["headroom_bytes"] > 0 for m in p["memory"])
    assert sum(part["time_s"] for part in p["breakdown"]) == pytest.approx(p["step_s"])
    assert [part["key"] for part in p["breakdown"]] == list(PARTS)


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
        ({"micro_batch_size": 3}, "micro_batch_size: got 3; does not divide the 128 sequences"),
        ({"interleave": 2}, "interleave 2 needs pipeline stages"),
        ({"zero_stage": 4}, "zero_stage"),
        ({"micro_batches": 2, "micro_batch_size": 4}, "give only one of them"),
        ({"recompute": "some"}, "recompute"),
        ({"flash_attention": True}, "now `attention: flash`"),
    ],
)
def test_bad_training_fields_exit_2(repo_root, tmp_path, change, message):
    data = yaml.safe_load(Path("examples/gpt3.yaml").read_text())
    data["training"].pop("micro_batches")
    data["training"].update(change)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("plan", str(path))
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_interleave_needs_micro_batches_multiple_of_stages(repo_root, tmp_path):
    data = yaml.safe_load(Path("examples/megatron-gpt-175b-a100.yaml").read_text())
    data["training"].update({"interleave": 2, "micro_batch_size": 2, "global_batch_sequences": 36})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = run("plan", str(path))
    assert result.exit_code == 2, result.output
    assert "training.interleave" in result.output and "multiple of the 8 stages" in result.output


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
    assert result.exit_code == 2, result.output
    assert "data_parallel_gb_per_s" in result.output


def test_selective_recompute_costs_nothing_extra_with_flash(tmp_path):
    base = {"global_batch_sequences": 16, "sequence_length": 2048, "micro_batch_size": 2}
    jobs = {
        (kernel, mode): job_for(tmp_path, {**base, "attention": kernel, "recompute": mode})
        for kernel, mode in itertools.product(("flash", "unfused"), ("none", "selective"))
    }
    assert jobs["flash", "selective"].block.recompute_s[1] == 0
    assert jobs["unfused", "selective"].block.recompute_s[1] > 0
    assert (
        jobs["unfused", "selective"].stages.activation_bytes[0]
        < jobs["unfused", "none"].stages.activation_bytes[0]
    )


def test_ends_by_hand():
    """4096 tokens, h=1024, V=32000 over a ring of 4 chips (Megatron 1D, tensor
    parallelism 4, sequence parallel), bf16:
    - reduce-scatter and all-gather of 4096*1024*2/4 = 2 MiB shards:
      3 * (1 us + 2,097,152 B / 100 GB/s) = 65.91 us each;
    - embedding lookup 4096 * 2 * 2 * 1024 B = 16.8 MB at 1 TB/s = 16.78 us,
      its backward 4096 * 3 * 2 * 1024 / 4 B = 6.29 us;
    - logits GEMM 2 * 4096 * 8000 * 1024 FLOPs = 67.1 GFLOP at 100 TFLOP/s =
      671.1 us forward, twice that backward;
    - final norm (sequence-parallel, 1024 tokens): 4.19 us / 6.29 us;
    - loss over 4096 x 8000 logits: 10 and 6 bytes each: 327.7 / 196.6 us."""
    from types import SimpleNamespace

    from autotune.job.block import end_figures
    from autotune.specs import ModelSpec
    from autotune.specs.job import TrainingInput
    from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, LinkParams

    link = LinkParams(launch_s=0.0, sync_s=1e-6, link_bytes_per_s=100e9)
    comm = CommModel({(op, ax): link for op in CollectiveOp for ax in (Axis.ROW, Axis.COL)})
    hw = SimpleNamespace(gemm=ComputeModel(peak_flops_per_s=100e12), hbm_bytes_per_s=1e12)
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
    training = TrainingInput(
        global_batch_sequences=1, sequence_length=4096, fc_algorithm="megatron-1d"
    )
    e = end_figures(model, training, hw, comm, 1, 4, 1)  # type: ignore[arg-type]
    ring = 3 * (1e-6 + 4096 * 1024 * 2 / 4 / 100e9)
    assert e.head_forward_s == pytest.approx(4096 * 4 * 1024 / 1e12 + ring)
    assert e.head_backward_s == pytest.approx(4096 * 6 * 1024 / 4 / 1e12 + ring)
    logits = 2 * 4096 * 8000 * 1024 / 100e12
    norm_f, norm_b = 1024 * 4 * 1024 / 1e12, 1024 * 6 * 1024 / 1e12
    loss_f, loss_b = 4096 * 8000 * 10 / 1e12, 4096 * 8000 * 6 / 1e12
    assert e.tail_forward_s == pytest.approx(norm_f + ring + logits + loss_f)
    assert e.tail_backward_s == pytest.approx(norm_b + ring + 2 * logits + loss_b)
    assert e.head_params == 32000 * 1024 / 4  # rotary: no position table
    assert e.tail_transient_bytes == 4096 * 8000 * 6


#: GPT-small on 2 stages of TP 8, 4 micro-batches of one sequence
TWO_STAGES = {
    "global_batch_sequences": 4,
    "sequence_length": 2048,
    "pipeline_parallel": 2,
    "micro_batch_size": 1,
    "fc_algorithm": "megatron-1d",
    "fp32_gradients": True,
    "layer_split": "even",
}


def test_pipeline_transfer_and_optimizer_by_hand(tmp_path):
    """GPT-small (h=2048) on 2 stages of TP 8 over a100-hgx-2n: the stages
    talk across nodes, priced by the a100-nominal calibration's scale-out
    send-recv (40 us launch, 5 us per step, 22.5 GB/s): one micro-batch of
    2048 tokens sends 2048 * 2048 * 2 / 8 = 1 MiB in 91.6 us, once in its
    forward and once in its backward on each stage (one chunk): 4
    micro-batches give 8 transfers. The optimizer step on stage 0 (8 layers
    of 50,335,744 / 8 + 4096 weights, plus the 51200 x 2048 / 8 embedding and
    2048 x 2048 positions) moves 30 bytes per parameter at 2,039 GB/s; it is
    the larger of the two stages' (the last stage's output layer has no
    position table)."""
    job = job_for(tmp_path, TWO_STAGES, "a100-hgx-2n")
    p2p = 40e-6 + 5e-6 + 2048 * 2048 * 2 / 8 / 22.5e9
    assert job.parts["pp_comm_s"] == pytest.approx(2 * 4 * p2p, rel=1e-9)
    layer = (2048 * (16 + 32) * 128 + 16 * 128 * 2048 + 2 * 2048 * 8192) / 8 + 2 * 2048
    params = 8 * layer + 51200 * 2048 / 8 + 2048 * 2048
    assert job.stages.optimizer_s[0] == pytest.approx(params * 30 / 2.039e12, rel=1e-9)


@pytest.mark.parametrize(
    ("sequence_parallel", "scatter_gather", "share"),
    [(True, False, 8), (False, True, 8), (False, False, 1)],
)
def test_pipeline_send_without_scatter_gather(tmp_path, sequence_parallel, scatter_gather, share):
    """The same 2 stages of TP 8 over a100-hgx-2n: every chip sends 1/8 of
    the micro-batch's 2048 x 2048 activation when it is split (sequence
    parallelism, or Megatron's scatter-gather), the whole 8 MiB when neither
    (Megatron's --no-scatter-gather-tensors-in-pipeline, DeepSpeed's
    pipeline engine): 40 us + 5 us + bytes / 22.5 GB/s per send, 8 sends."""
    training = {
        **TWO_STAGES,
        "sequence_parallel": sequence_parallel,
        "pipeline_scatter_gather": scatter_gather,
    }
    job = job_for(tmp_path, training, "a100-hgx-2n")
    p2p = 40e-6 + 5e-6 + 2048 * 2048 * 2 / share / 22.5e9
    assert job.parts["pp_comm_s"] == pytest.approx(2 * 4 * p2p, rel=1e-9)
