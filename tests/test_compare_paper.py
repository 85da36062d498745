"""`meshtune compare` against the paper (seed 000 section 5.1, Fig 9 and
Fig 10 at 256 TPU v4 chips; Table 2), and the CLI's errors and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.compare.comparison import (
    PAPER_MESHSLICE_OVER_WANG,
    PAPER_PHASE1_GAIN,
    Algorithm,
    compare_point,
)
from autotune.loading import load_plan_input

# Our MeshSlice-over-Wang gain may differ from the paper's by this many
# percentage points (reasons: docs/compare.md, accuracy).
WANG_GAIN_TOLERANCE = 0.20


REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", params=["gpt3", "megatron-nlg"])
def point_256(request):
    inp = load_plan_input(REPO / "examples" / f"{request.param}.yaml").plan_input()
    return inp.model.name, compare_point(inp, 256, 128)


def test_fig9_meshslice_fastest_and_summa_behind_collective(point_256):
    # mirrors Fig 9 (weak scaling, 256 chips, batch 128 x 2048) and Fig 10 (SUMMA's sync)
    _name, point = point_256
    ms = point.result(Algorithm.MESHSLICE)
    for a in point.algorithms:
        if a.feasible and a.algorithm is not Algorithm.MESHSLICE:
            assert a.step_fc_time_s > ms.step_fc_time_s, a.algorithm
    summa, coll = point.result(Algorithm.SUMMA), point.result(Algorithm.COLLECTIVE)
    assert summa.step_fc_time_s > coll.step_fc_time_s
    assert summa.breakdown.sync_s > 5 * coll.breakdown.sync_s


def test_fig9_meshslice_over_wang_next_to_paper(point_256):
    name, point = point_256
    ours = point.result(Algorithm.WANG).meshslice_gain
    paper = PAPER_MESHSLICE_OVER_WANG[name]
    print(
        f"\n{name} @256 (seed 000 Fig 9): MeshSlice over Wang ours {ours:+.1%}, paper {paper:+.1%}"
    )
    assert ours > 0
    assert abs(ours - paper) <= WANG_GAIN_TOLERANCE


def test_table2_phase1_gain_next_to_paper(point_256):
    name, point = point_256
    ours = point.phase1.gain
    print(
        f"\n{name} @256 (seed 000 Table 2): chosen dataflows over always-W ours {ours:+.1%}, "
        f"paper {PAPER_PHASE1_GAIN[name]:+.1%} (gap explained in docs/compare.md)"
    )
    assert ours >= 0  # the cost policy never loses to always-w


# Table 2 against the framework-default baseline (every layer Y-stationary, the
# dataflow a uniform 2D sharding runs): tolerance 10 percentage points.
ALWAYS_Y_TOLERANCE = 0.10


def test_table2_phase1_gain_over_always_y(point_256):
    name, point = point_256
    ours = point.phase1.gain_over_always_y
    paper = PAPER_PHASE1_GAIN[name]
    print(
        f"\n{name} @256 (seed 000 Table 2): chosen dataflows over always-Y ours {ours:+.1%}, "
        f"paper {paper:+.1%}"
    )
    assert ours >= 0
    assert abs(ours - paper) <= ALWAYS_Y_TOLERANCE


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_json_small_sweep(repo_root):
    result = run("compare", "examples/gpt3.yaml", "--chips", "16,32", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "meshtune.compare/1"
    assert doc["scaling"] == "weak"
    assert [p["num_chips"] for p in doc["points"]] == [16, 32]
    assert [p["batch_sequences"] for p in doc["points"]] == [8, 16]
    algos = [a["algorithm"] for a in doc["points"][0]["algorithms"]]
    assert algos == ["meshslice", "collective", "wang", "summa", "cannon", "1d-tp", "fsdp"]
    cannon32 = doc["points"][1]["algorithms"][4]
    assert cannon32["feasible"] is False and "square" in cannon32["reason"]


def test_cli_strong_scaling_and_table(repo_root):
    result = run("compare", "examples/megatron-nlg.yaml", "--chips", "16,64", "--batch", "32")
    assert result.exit_code == 0, result.output
    assert "strong scaling" in result.stdout
    assert "Utilization against chip count" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chips", "16,x"], "--chips: got '16,x'; expected comma-separated integers"),
        (["--chips", "0"], "chip counts must be 1 to 2^24"),
        (["--chips", "99999999999"], "chip counts must be 1 to 2^24"),
        (["--chips", "15"], "--chips: got 15; is odd"),
        (["--batch", "0"], "--batch: got 0; must be 1 to 2^24"),
        (["--batch", "99999999999"], "--batch: got 99999999999; must be 1 to 2^24"),
    ],
)
def test_cli_bad_input(repo_root, args, message):
    result = CliRunner().invoke(main, ["compare", "examples/gpt3.yaml", *args])
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output
