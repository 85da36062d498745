"""Sliding-window attention (`sliding_window`, `full_attention_every`): the
attention core's share by hand, the blocks it applies to, the Hugging Face
readers, and the exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planning import LLAMA, pinned, plan_for, transformers_and_torch, write_plan
from pydantic import ValidationError

from autotune.formats.export import export_plan
from autotune.loading import load_model_spec
from autotune.specs.model import ModelSpec
from cost_models.transformer_flops import model_flops_per_token, windowed_attention_share

REPO = Path(__file__).resolve().parent.parent


def test_windowed_share_by_hand() -> None:
    # gpt-oss at 4,096 tokens: each query meets at most 128 keys
    assert windowed_attention_share(4096, 128) == (4096 * 128 - 128**2 / 2) / (4096**2 / 2)
    assert windowed_attention_share(4096, 128) == pytest.approx(0.0615234375, rel=1e-12)
    # a window at least the sequence is the causal core; no window likewise
    assert windowed_attention_share(4096, 4096) == 1.0
    assert windowed_attention_share(2048, 4096) == 1.0
    assert windowed_attention_share(4096, None) == 1.0
    # Mistral 7B v0.1 at 32K: 4,096 keys per query at most
    assert windowed_attention_share(32768, 4096) == pytest.approx(
        (32768 * 4096 - 4096**2 / 2) / (32768**2 / 2), rel=1e-12
    )


@pytest.mark.parametrize(
    ("layers", "window", "every", "windowed"),
    [(36, 128, 2, 18), (26, 1024, 6, 22), (32, 4096, None, 32), (32, None, None, 0)],
)
def test_windowed_blocks(layers: int, window: int | None, every: int | None, windowed: int):
    m = ModelSpec(
        name="m", num_layers=layers, hidden_size=64, num_heads=4, head_dim=16, ffn_size=128,
        sliding_window=window, full_attention_every=every,
    )  # fmt: skip
    assert m.windowed_blocks == windowed


def test_full_attention_every_needs_a_window() -> None:
    with pytest.raises(ValidationError, match="needs sliding_window"):
        ModelSpec(
            name="m", num_layers=4, hidden_size=64, num_heads=4, head_dim=16, ffn_size=128,
            full_attention_every=2,
        )  # fmt: skip


def test_model_flops_count_the_windowed_core() -> None:
    args = (36, 2880, 64, 8, 64, 2880, True, 201088, 4096)
    full = model_flops_per_token(*args, causal=True)
    share = 0.5 + 0.5 * windowed_attention_share(4096, 128)
    windowed = model_flops_per_token(*args, causal=True, core_share=share)
    core = 12.0 * 36 * 4096 * 64 * 64 * 0.5
    assert full - windowed == pytest.approx(core * (1 - share), rel=1e-12)


def test_windowed_blocks_price_their_share_of_the_attention(tmp_path: Path) -> None:
    """Half the blocks windowed to 128 of 4,096 tokens: the block's attention
    is the mean of the full causal core and the windowed one; at the
    nominal calibration's constant attention rate that is exactly the
    causal core times `(1 + share) / 2`."""
    training = pinned({"global_batch_sequences": 8, "sequence_length": 4096,
                       "tensor_parallel": 1, "data_parallel": 8})  # fmt: skip
    full = plan_for(tmp_path, LLAMA, training, "h100-hgx")
    windowed = {**LLAMA, "sliding_window": 128, "full_attention_every": 2}
    half = plan_for(tmp_path, windowed, training, "h100-hgx")
    share = windowed_attention_share(4096, 128)
    for name in ("attention_forward_s", "attention_backward_s"):
        got = getattr(half.block, name)
        assert got == pytest.approx(getattr(full.block, name) * (1 + share) / 2, rel=1e-9)
    assert half.step_s < full.step_s


def test_exports_window_the_attention_or_say_they_cannot(tmp_path: Path) -> None:
    from clirun import run_cli

    windowed = {**LLAMA, "sliding_window": 128, "full_attention_every": 2}
    training = pinned({"global_batch_sequences": 8, "sequence_length": 4096,
                       "tensor_parallel": 1, "data_parallel": 8})  # fmt: skip
    path = write_plan(tmp_path, windowed, training, "h100-hgx")
    doc = tmp_path / "plan.json"
    run = run_cli("plan", str(path), "--out", str(doc))
    assert run.exit_code == 0, run.stderr
    megatron = export_plan(str(doc), "megatron").files[0].text
    # TE counts the keys before the query: 128 tokens is (127, 0)
    assert "--window-size 127,0" in megatron
    assert "--window-attn-skip-freq 2" in megatron
    flags = json.loads((REPO / "tests/fixtures/formats/megatron-arguments.json").read_text())
    assert {"--window-size", "--window-attn-skip-freq"} <= set(flags["flags"])
    for target in ("torchtitan", "maxtext", "mindformers"):
        lines = " ".join(export_plan(str(doc), target).not_expressed)
        assert "sliding_window 128 on all but every 2nd block" in lines, target


_library = transformers_and_torch

# transformers' configuration classes at their defaults: the published
# models' windows and which blocks use them
WINDOWED_CONFIGS = {
    "GptOssConfig": (128, 2, 18),  # openai/gpt-oss-120b: 36 blocks, alternating
    "Gemma2Config": (4096, 2, 13),  # google/gemma-2-9b: 26 blocks in the class default
    "Gemma3TextConfig": (4096, 6, 22),  # 26 blocks, five of six windowed
    "MistralConfig": (4096, None, 32),  # mistralai/Mistral-7B-v0.1: every block
}


@pytest.mark.parametrize("cls_name", list(WINDOWED_CONFIGS))
def test_hugging_face_windows_match_the_library(tmp_path: Path, cls_name: str) -> None:
    transformers, _ = _library()
    config = getattr(transformers, cls_name)()
    config.save_pretrained(tmp_path / cls_name)
    spec = load_model_spec(tmp_path / cls_name / "config.json")
    window, every, windowed = WINDOWED_CONFIGS[cls_name]
    assert (spec.sliding_window, spec.full_attention_every) == (window, every)
    assert spec.windowed_blocks == windowed
    kinds = getattr(config, "layer_types", None)
    if kinds is not None:
        assert sum(k == "sliding_attention" for k in kinds) == windowed


@pytest.mark.parametrize(
    ("model", "comm", "refused"),
    [
        ({**LLAMA, "sliding_window": 4096}, "p2p", "sliding-window attention only"),
        ({**LLAMA, "sliding_window": 4096}, "all_gather", None),
        ({**LLAMA, "sliding_window": 4096}, "a2a", None),
        (LLAMA, "p2p", None),
    ],
)
def test_context_parallel_comm_transformer_engine_runs(
    tmp_path: Path, model: dict, comm: str, refused: str | None
) -> None:
    """Transformer Engine v2.9 runs sliding-window attention under context
    parallelism only with all_gather or a2a: a pinned p2p context group
    exits 2 naming the rule; the others plan."""
    from clirun import assert_one_line_error, run_cli

    training = pinned({"global_batch_sequences": 8, "sequence_length": 8192,
                       "tensor_parallel": 1, "data_parallel": 4, "context_parallel": 2,
                       "context_parallel_comm": comm})  # fmt: skip
    path = write_plan(tmp_path, model, training, "h100-hgx")
    run = run_cli("plan", str(path))
    if refused is None:
        assert run.exit_code == 0, run.stderr
    else:
        assert_one_line_error(run, "training.context_parallel", refused)


def test_mla_context_parallelism_runs_p2p_only(tmp_path: Path) -> None:
    from clirun import assert_one_line_error, run_cli

    from autotune.job.trainers import context_attention_refusal
    from autotune.specs.training import ContextComm

    v3 = load_model_spec(REPO / "examples" / "deepseek-v3" / "config.json")
    assert context_attention_refusal(v3, ContextComm.P2P) is None
    for comm in (ContextComm.A2A, ContextComm.ALL_GATHER):
        assert "MLA (key width 192, value width 128)" in context_attention_refusal(v3, comm)
    # torchtitan's attention is PyTorch's, not Transformer Engine's: no such rule
    windowed = {**LLAMA, "sliding_window": 4096}
    training = pinned({"global_batch_sequences": 8, "sequence_length": 8192,
                       "tensor_parallel": 1, "data_parallel": 4, "context_parallel": 2,
                       "context_parallel_comm": "p2p", "zero_stage": 3})  # fmt: skip
    path = write_plan(tmp_path, windowed, training, "h100-hgx",
                      constraints={"trainer": "torchtitan"})  # fmt: skip
    run = run_cli("plan", str(path))
    assert run.exit_code == 0, run.stderr
    path = write_plan(tmp_path, windowed, training, "h100-hgx", name="m.yaml",
                      constraints={"trainer": "megatron"})  # fmt: skip
    assert_one_line_error(run_cli("plan", str(path)), "sliding-window attention only")


def test_a_windowed_model_exchanges_context_by_all_gather_unless_told(tmp_path: Path) -> None:
    """Left out, the context exchange of a windowed model is all_gather
    (Transformer Engine windows the attention under context parallelism
    only with all_gather or a2a), shown on the Planned line; a model
    without a window keeps p2p."""
    from clirun import run_cli

    training = pinned({"global_batch_sequences": 8, "sequence_length": 8192,
                       "tensor_parallel": 1, "data_parallel": 4,
                       "context_parallel": 2})  # fmt: skip
    for model, comm in (({**LLAMA, "sliding_window": 4096}, "all_gather"), (LLAMA, "p2p")):
        path = write_plan(tmp_path, model, training, "h100-hgx")
        run = run_cli("plan", str(path))
        assert run.exit_code == 0, run.stderr
        assert f"context exchange {comm}" in " ".join(run.stdout.split())
