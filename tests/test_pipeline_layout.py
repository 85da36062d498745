"""A pinned Megatron-LM pipeline layout (`training.pipeline_layout`): read
by Megatron-LM's grammar, checked against the model, priced as written and
exported back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli
from planning import LLAMA, plan_for, write_plan

from autotune.specs.pipeline_layout import LayoutError, expand_layout, layout_blocks, mtp_stage

# 8 layers on 2 stages of 2 chunks: Megatron-LM's virtual stage i runs on
# rank i mod 2, so stage 0 holds chunks 0 and 2, stage 1 chunks 1 and 3
TRAINING = {
    "global_batch_sequences": 16,
    "sequence_length": 1024,
    "tensor_parallel": 1,
    "data_parallel": 4,
    "pipeline_parallel": 2,
    "context_parallel": 1,
    "micro_batch_size": 1,
    "recompute": "none",
    "zero_stage": 0,
    "pipeline_layout": "Et|ttt|ttt|tL",
}


@pytest.mark.parametrize(
    ("layout", "stages"),
    [
        # Megatron-LM's own docstring examples (pipeline_parallel_layer_layout.py)
        ("Ettt|(tt|)*29,m|L", ["Ettt"] + ["tt"] * 29 + ["m", "L"]),
        ("xy(ab|cd|ef)*2,pq".replace("x", "E").replace("y", "t").replace("a", "t"), None),
        ("E(t|)*3L", ["Et", "t", "t", "L"]),
        ("Et*3|t*2L", ["Ettt", "ttL"]),
        ("E|(|t)*2,tL", ["E", "", "t", "ttL"]),  # "(|ab)*2,cd -> |ab|abcd"
    ],
)
def test_layout_grammar(layout: str, stages: list[str] | None) -> None:
    if stages is None:
        with pytest.raises(LayoutError, match="not a layout character"):
            expand_layout(layout)
    else:
        assert expand_layout(layout) == stages


def test_deepseek_v3_recipe_layout_by_hand() -> None:
    """Megatron-Bridge's DeepSeek-V3 H100 layout: the embedding and one
    block, thirty stages of two, then the MTP block and the loss."""
    blocks = layout_blocks("Et|(tt|)*30mL", 61, 1)
    assert blocks == [1] + [2] * 30 + [0]
    assert sum(blocks) == 61 and len(blocks) == 32


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("tE|tttttttL", "must start with the embedding E"),
        ("Ettttttt|tLL", "must end with the loss L"),
        ("Ettt|ttttL", "holds 7 transformer blocks (t); the model has 8"),
        ("Etttt|ttttmL", "holds 1 MTP blocks (m); the model has 0"),
    ],
)
def test_layout_checked_against_the_model(layout: str, reason: str) -> None:
    with pytest.raises(LayoutError, match=re.escape(reason)):
        layout_blocks(layout, 8, 0)


def test_mtp_blocks_stand_where_megatron_allows() -> None:
    """Megatron-LM (validate_layer_layout): every MTP block in one virtual
    stage, after every transformer block, the last virtual stage of its
    rank; with the loss or standalone before it."""
    with pytest.raises(LayoutError, match="must come before the MTP blocks"):
        layout_blocks("Ettt|tmttttL", 8, 1)
    with pytest.raises(LayoutError, match=re.escape("every MTP block (m) must be in one stage")):
        layout_blocks("Etttt|ttttm|mL", 8, 2)
    assert layout_blocks("Etttt|ttttmL", 8, 1) == [4, 4]
    assert layout_blocks("Etttt|ttttm|L", 8, 1) == [4, 4, 0]
    # the report's DeepSeek-V3 H100 layout: 32 virtual stages on 8 ranks,
    # the MTP block alone on rank 6's last, the loss alone on rank 7's
    assert layout_blocks("Et*3|(tt|)*29m|L", 61, 1) == [3] + [2] * 29 + [0, 0]
    assert mtp_stage("Et*3|(tt|)*29m|L", 8) == 30
    assert mtp_stage("Et|(tt|)*30mL", 8) == 31
    assert mtp_stage("Et|(tt|)*30L", 8) is None
    # stage 1 of 4 on 2 ranks is rank 1's first virtual stage, not its last
    with pytest.raises(LayoutError, match="virtual stage 1, not in the last virtual stage"):
        mtp_stage("Etttt|m|tttt|L", 2)


#: LLAMA with one multi-token-prediction block, 2 ranks x 2 virtual stages
MTP_MODEL = {**LLAMA, "name": "llama-mtp", "mtp_layers": 1}


def test_a_standalone_mtp_block_runs_on_its_own_rank(tmp_path: Path) -> None:
    """`...|ttm|L`: the MTP block and its projection run on rank 0 (chunk
    2), the loss on rank 1; against `...|tt|mL` (the block with the loss)
    the same work moves from rank 1 to rank 0, and the send from the MTP
    stage to the loss's carries its hidden states too: one more
    activation send each way per micro-batch."""
    from autotune.specs.model import ModelSpec
    from autotune.specs.model_params import block_params

    training = {**TRAINING, "global_batch_sequences": 8}
    standalone = plan_for(
        tmp_path, MTP_MODEL, {**training, "pipeline_layout": "Ettt|ttt|ttm|L"}, "h100-hgx"
    )
    with_loss = plan_for(
        tmp_path, MTP_MODEL, {**training, "pipeline_layout": "Ettt|ttt|tt|mL"}, "h100-hgx"
    )
    for plan in (standalone, with_loss):
        # the model's blocks: rank 0 chunks 0 and 2, rank 1 chunks 1 and 3
        assert plan.stages.layers.tolist() == [[3.0, 2.0], [3.0, 0.0]]
    spec = ModelSpec(**MTP_MODEL)
    # bf16 weights of one block (its FC layers and its two norms' 2h) and
    # the 2h x h projection (tensor parallel 1)
    moved = 2 * (block_params(spec, 0) + 2 * 4096 + 2 * 4096 * 4096)
    a, b = standalone.stages.weights_bytes, with_loss.stages.weights_bytes
    assert a[0] - b[0] == pytest.approx(moved) and b[1] - a[1] == pytest.approx(moved)
    # compute conserved; one more send each way per micro-batch (m = 2)
    m, v = 2, 2
    send_s = with_loss.parts["pp_comm_s"] / (2 * m * v)
    extra = standalone.stages.busy_s.sum() - with_loss.stages.busy_s.sum()
    assert send_s > 0 and extra == pytest.approx(2 * m * send_s, rel=1e-9)


def test_a_pinned_layout_is_priced_as_written_and_exported(tmp_path: Path) -> None:
    plan = plan_for(tmp_path, LLAMA, TRAINING, "h100-hgx")
    assert (plan.config["pp"], plan.config["v"]) == (2, 2)
    # stage 0: chunks 0 and 2 (1 + 3 blocks); stage 1: chunks 1 and 3 (3 + 1)
    assert plan.stages.layers.tolist() == [[1.0, 3.0], [3.0, 1.0]]
    even = plan_for(tmp_path, LLAMA, {**TRAINING, "pipeline_layout": None}, "h100-hgx")
    assert even.stages.layers.tolist() != plan.stages.layers.tolist()

    path = write_plan(tmp_path, LLAMA, TRAINING, "h100-hgx", name="layout.yaml")
    doc = tmp_path / "layout.json"
    run = run_cli("plan", str(path), "--out", str(doc))
    assert run.exit_code == 0, run.stderr
    data = json.loads(doc.read_text())
    assert data["configuration"]["layer_split"] == "layout"
    assert data["pipeline"]["layer_split"] == "layout"
    out = tmp_path / "megatron"
    run = run_cli("export", str(doc), "--to", "megatron", "--out", str(out))
    assert run.exit_code == 0, run.stderr
    text = (out / "megatron_args.sh").read_text()
    exported = text.split("--pipeline-model-parallel-layout ")[1].split()[0].strip("'")
    assert expand_layout(exported) == expand_layout(TRAINING["pipeline_layout"])


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (
            {"pipeline_layout": "Et|ttt|ttt|tX"},
            ["training.pipeline_layout", "'X' is not a layout character", "fix:"],
        ),
        (
            {"pipeline_parallel": "auto"},
            ["training.pipeline_layout", "needs the pipeline stages pinned", "fix:"],
        ),
        (
            {"interleave": 4},
            ["training.pipeline_layout", "has 4 virtual stage(s), not pipeline_parallel x "
             "interleave (2 x 4)", "fix:"],
        ),
        (
            {"pipeline_parallel": 3},
            ["training.pipeline_layout", "not a multiple of pipeline_parallel (3)"],
        ),
        (
            {"pipeline_layout": "Et|ttt|tt|tL"},
            ["training.pipeline_layout", "holds 7 transformer blocks (t); the model has 8",
             "fix: give 8 t, 0 m"],
        ),
    ],
)  # fmt: skip
def test_cli_a_bad_layout_exits_2_naming_the_field(
    tmp_path: Path, change: dict, fragments: list[str]
) -> None:
    path = write_plan(tmp_path, LLAMA, {**TRAINING, **change}, "h100-hgx")
    assert_one_line_error(run_cli("plan", str(path)), *fragments)


def test_a_layout_may_give_the_ends_chunks_of_their_own(tmp_path: Path) -> None:
    """Megatron-LM's --account-for-embedding/loss-in-pipeline-split as a
    layout: 6 blocks and the two ends over 4 x 2 virtual stages, the
    embedding and the loss each alone in theirs (more chunks than blocks)."""
    model = {**LLAMA, "num_layers": 6}
    training = {**TRAINING, "pipeline_layout": "E|t|t|t|t|t|t|L", "interleave": 2,
                "pipeline_parallel": 4, "data_parallel": 2}  # fmt: skip
    plan = plan_for(tmp_path, model, training, "h100-hgx")
    assert plan.stages.layers.tolist() == [[0.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]]


@pytest.mark.parametrize(
    "layout", ["E(tt|)*3000000000L", "Et*99999999999999|L", "E((t|)*999)*9999L"]
)
def test_a_huge_repetition_is_refused_before_it_is_built(layout: str) -> None:
    with pytest.raises(LayoutError, match="unrolls to more than 1,000,000 characters"):
        expand_layout(layout)
