"""`constraints.trainer`: the search keeps to the tensor meshes and ZeRO
stages the named trainer runs as priced (autotune/job/trainers.py), so its
export writes the plan without a `not expressed:` line for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli
from planning import LLAMA, write_plan

from autotune.job.candidates import Refusals, enumerate_candidates
from autotune.job.hardware import hardware_view
from autotune.job.trainers import (
    expert_tensor_refusal,
    mesh_refusal,
    recompute_refusal,
    zero_refusal,
)
from autotune.loading import load_plan_input
from autotune.specs.job import RECOMPUTE_MODES, Trainer

# (trainer, zero, dp, pp, cp) -> refused?
ZERO_CASES = [
    (Trainer.MEGATRON, 2, 8, 2, 1, True),  # Megatron-FSDP has no pipeline stages
    (Trainer.MEGATRON, 3, 8, 2, 1, True),
    (Trainer.MEGATRON, 3, 8, 1, 2, False),  # Megatron-FSDP with context parallelism runs
    (Trainer.MEGATRON, 1, 8, 4, 1, False),  # the distributed optimizer
    (Trainer.TORCHTITAN, 1, 8, 1, 1, True),  # FSDP shards the gradients too
    (Trainer.TORCHTITAN, 0, 8, 1, 2, True),  # FSDP over the context group
    (Trainer.TORCHTITAN, 0, 8, 1, 1, False),
    (Trainer.TORCHTITAN, 2, 8, 4, 2, False),
    (Trainer.MAXTEXT, 1, 8, 1, 1, True),  # optimizer sharded only with the weights
    (Trainer.MAXTEXT, 2, 8, 1, 1, True),
    (Trainer.MAXTEXT, 1, 1, 1, 4, True),  # the weights over the context axis
    (Trainer.MAXTEXT, 3, 8, 1, 4, False),
    (Trainer.MAXTEXT, 0, 8, 4, 1, False),
    (Trainer.MINDFORMERS, 1, 8, 1, 1, True),  # level1 shards the weights
    (Trainer.MINDFORMERS, 2, 8, 1, 1, False),
    (Trainer.JAX, 1, 8, 4, 4, False),
    (None, 2, 8, 4, 1, False),
]


@pytest.mark.parametrize(("trainer", "zero", "dp", "pp", "cp", "refused"), ZERO_CASES)
def test_zero_rules_by_hand(trainer, zero, dp, pp, cp, refused):
    why = zero_refusal(trainer, zero, dp, pp, cp)
    assert (why is not None) is refused
    if refused:
        assert why.endswith(f"(constraints.trainer: {trainer.value})")


def test_mesh_rules_by_hand():
    """Megatron-LM and torchtitan run one tensor axis; the others any mesh."""
    for trainer in (Trainer.MEGATRON, Trainer.TORCHTITAN):
        assert mesh_refusal(trainer, 2, 4) is not None
        assert mesh_refusal(trainer, 1, 8) is None and mesh_refusal(trainer, 8, 1) is None
    for trainer in (Trainer.JAX, Trainer.MAXTEXT, Trainer.MINDFORMERS, None):
        assert mesh_refusal(trainer, 2, 4) is None


def test_recompute_and_expert_tensor_rules_by_hand():
    """torchtitan: no attention-only selective recomputation, each expert
    whole; MaxText: no recompute none, every expert split over the tensor
    axis; Megatron-LM and JAX: any."""
    assert recompute_refusal(Trainer.TORCHTITAN, "selective") is not None
    assert recompute_refusal(Trainer.TORCHTITAN, "full") is None
    assert recompute_refusal(Trainer.MAXTEXT, "none") is not None
    assert recompute_refusal(Trainer.MAXTEXT, "selective") is None
    assert all(recompute_refusal(Trainer.MEGATRON, m) is None for m in RECOMPUTE_MODES)
    assert expert_tensor_refusal(Trainer.TORCHTITAN, 2, 4) is not None
    assert expert_tensor_refusal(Trainer.TORCHTITAN, 1, 4) is None
    assert expert_tensor_refusal(Trainer.MAXTEXT, 1, 4) is not None
    assert expert_tensor_refusal(Trainer.MAXTEXT, 4, 4) is None
    assert expert_tensor_refusal(Trainer.MEGATRON, 2, 4) is None
    assert expert_tensor_refusal(None, 2, 4) is None


def _candidates(tmp_path: Path, trainer: str | None):
    constraints = {"trainer": trainer} if trainer else {}
    path = write_plan(
        tmp_path,
        LLAMA,
        {"global_batch_sequences": 64, "sequence_length": 8192},
        "h100-hgx-4n",
        name=f"{trainer}.yaml",
        constraints=constraints,
    )
    inp = load_plan_input(path)
    refusals = Refusals()
    return enumerate_candidates(inp, hardware_view(inp), refusals), refusals


@pytest.mark.parametrize("trainer", [t.value for t in Trainer])
def test_every_kept_candidate_runs_on_the_trainer(tmp_path: Path, trainer: str):
    """An 8-layer Llama on 32 H100, everything searched: without the
    constraint the search keeps configurations each rule refuses (so the
    test can fail); with it, none, and every refusal names the trainer."""
    free, _ = _candidates(tmp_path, None)
    bound, refusals = _candidates(tmp_path, trainer)
    t = Trainer(trainer)

    def runs(c, i: int) -> bool:
        z, dp, pp, cp = int(c.zero[i]), int(c.dp[i]), int(c.pp[i]), int(c.cp[i])
        return (
            zero_refusal(t, z, dp, pp, cp) is None
            and mesh_refusal(t, int(c.rows[i]), int(c.cols[i])) is None
            and recompute_refusal(t, RECOMPUTE_MODES[int(c.recompute[i])]) is None
        )

    assert 0 < len(bound) <= len(free)
    assert all(runs(bound, i) for i in range(len(bound)))
    outside = sum(not runs(free, i) for i in range(len(free)))
    assert len(free) - len(bound) == outside
    if t is not Trainer.JAX:
        assert outside > 0
        assert any(f"constraints.trainer: {trainer}" in r for _, _, r in refusals.lines())


def test_a_pinned_stage_the_trainer_cannot_run_is_one_line(tmp_path: Path):
    """ZeRO-3 pinned with 2 pipeline stages for Megatron-LM: exit 2 naming
    the field, the trainer and the fix."""
    path = write_plan(
        tmp_path,
        LLAMA,
        {
            "global_batch_sequences": 64,
            "sequence_length": 8192,
            "zero_stage": 3,
            "pipeline_parallel": 2,
        },
        "h100-hgx-4n",
        constraints={"trainer": "megatron"},
    )
    assert_one_line_error(
        run_cli("plan", str(path)),
        "training.zero_stage: got 3",
        "Megatron-FSDP",
        "(constraints.trainer: megatron)",
        "fix:",
    )


def test_an_unknown_trainer_is_one_line(tmp_path: Path):
    path = write_plan(
        tmp_path,
        LLAMA,
        {"global_batch_sequences": 8, "sequence_length": 4096},
        "h100-hgx",
        constraints={"trainer": "nemo"},
    )
    assert_one_line_error(
        run_cli("plan", str(path)), "constraints.trainer: got 'nemo'", "'megatron'"
    )


@pytest.mark.parametrize("trainer", ["torchtitan", "maxtext"])
def test_expert_tensor_degrees_follow_the_trainer(tmp_path: Path, trainer: str):
    """A 16-expert model with the expert tensor degree searched (`auto`) on
    16 H100: torchtitan keeps each expert whole (1), MaxText splits it over
    the tensor axis (etp = tp, also when the file leaves the degree out)."""
    from test_moe import MINI_MOE

    for etp_given in ({"expert_tensor_parallel": "auto"}, {}):
        path = write_plan(
            tmp_path,
            MINI_MOE,
            {"global_batch_sequences": 32, "sequence_length": 2048, **etp_given},
            "h100-hgx-2n",
            name=f"{trainer}-moe.yaml",
            constraints={"trainer": trainer},
        )
        inp = load_plan_input(path)
        c = enumerate_candidates(inp, hardware_view(inp), Refusals())
        assert len(c) > 0
        tp = c.rows * c.cols
        if trainer == "torchtitan":
            assert (c.etp == 1).all()
        else:
            assert (c.etp == tp).all() and (tp > 1).any()


def test_with_a_trainer_stages_do_not_mix_recomputation():
    """No export writes different recomputation modes per stage, so with a
    trainer the search's step 6 (the balancer mixing the winner's mode with
    the next faster one per stage) does not run; without one it may."""
    from autotune.job.search import _mix_winner
    from autotune.job.trainers import stage_mixes
    from autotune.specs.job import Constraints

    assert stage_mixes(None) and not any(stage_mixes(t) for t in Trainer)
    ranked = ["the ranking as it was"]
    lim = Constraints(trainer=Trainer.MEGATRON)
    assert _mix_winner(None, None, None, None, ranked, lim, {}, {}) == (ranked, False)


@pytest.mark.parametrize("target", ["megatron", "maxtext", "torchtitan"])
def test_a_per_stage_plan_exports_the_heaviest_mode_and_says_so(tmp_path: Path, target: str):
    """A plan whose stages recompute differently (the search's step 6
    without a trainer): Megatron-LM, MaxText and torchtitan apply one mode
    to every block, so the export writes the heaviest and a `not
    expressed:` line. The MaxText export used to fail with an internal
    error on it and the Megatron-LM one to recompute nothing (regression)."""
    import json

    from autotune.formats.export import export_plan

    fixture = Path(__file__).parent / "fixtures" / "formats" / "plan_gpt3_1d_tp8.json"
    doc = json.loads(fixture.read_text())
    doc["configuration"]["recompute"] = "per-stage"
    stages = doc["pipeline"]["stages"]
    n = stages[0]["layers"]
    stages[0]["recompute"] = {"full": n // 2, "none": n - n // 2}
    for stage in stages[1:]:
        stage["recompute"] = {"none": stage["layers"]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    result = export_plan(str(path), target)
    text = "".join(f.text for f in result.files)
    assert any(line.startswith("recompute per stage") for line in result.not_expressed)
    written = {
        "megatron": "--recompute-granularity full",
        "maxtext": 'remat_policy: "full"',
        "torchtitan": "FullAC",
    }[target]
    assert written in text


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan", "maxtext", "mindformers"])
def test_a_plan_searched_for_a_trainer_exports_with_nothing_left_out(
    tmp_path: Path, trainer: str
) -> None:
    """The 8-layer Llama on 32 H100, everything searched for the trainer
    (one tensor chip wins): its export writes the plan whole, with no `not
    expressed:` line. On one tensor chip a layer has no dataflow or slice
    count to express; the exports used to list one anyway (torchtitan its
    column/row-parallel mismatches, MaxText each layer, MindFormers a
    dataflow line)."""
    from autotune.formats.export import export_plan

    path = write_plan(
        tmp_path, LLAMA, {"global_batch_sequences": 64, "sequence_length": 4096},
        "h100-hgx-4n", constraints={"trainer": trainer},
    )  # fmt: skip
    out = tmp_path / "plan.json"
    result = run_cli("plan", str(path), "--out", str(out))
    assert result.exit_code == 0, result.stderr
    exported = export_plan(str(out), trainer)
    assert exported.not_expressed == ()


@pytest.mark.parametrize("trainer", ["megatron", "torchtitan"])
def test_column_and_row_parallel_trainers_are_priced_weight_stationary(
    tmp_path: Path, trainer: str
) -> None:
    """Megatron-LM and torchtitan keep every FC layer's weights in place
    (column- then row-parallel): with the constraint the FC planner prices
    only that dataflow, the plan records `always-w`, and its export at
    tensor parallel 4 lists no layer whose collectives differ from the
    trainer's (without the constraint the cheapest dataflows do differ, so
    the test can fail); a file that asks for another policy exits 2."""
    import json

    from autotune.formats.export import export_plan

    training = {"global_batch_sequences": 64, "sequence_length": 4096, "tensor_parallel": 4}
    plans = {}
    for bound in (True, False):
        folder = tmp_path / str(bound)
        folder.mkdir()
        sections = {"constraints": {"trainer": trainer}} if bound else {}
        path = write_plan(folder, LLAMA, training, "h100-hgx-4n", **sections)
        out = folder / "plan.json"
        result = run_cli("plan", str(path), "--out", str(out))
        assert result.exit_code == 0, result.stderr
        plans[bound] = out

    def mismatched(plan: Path) -> list[str]:
        lines = export_plan(str(plan), trainer).not_expressed
        return [line for line in lines if "-parallel layer runs" in line]

    doc = json.loads(plans[True].read_text())
    assert doc["configuration"]["tensor_parallel"] == 4
    assert "always-w" in json.dumps(doc)
    assert mismatched(plans[True]) == []
    assert mismatched(plans[False])

    path = write_plan(
        tmp_path, LLAMA, training, "h100-hgx-4n",
        search={"dataflow": "cost"}, constraints={"trainer": trainer},
    )  # fmt: skip
    assert_one_line_error(
        run_cli("plan", str(path)),
        "search.dataflow: got 'cost'",
        "weight-stationary",
        f"(constraints.trainer: {trainer})",
        "fix: write `dataflow: always-w` or leave it out",
    )
