"""`meshtune export` of every bundled example's plan to every target: exit 0,
or exit 2 with the one-line refusal of a 2D plan by a 1D-only trainer; never
an internal error. Each file's header repeats the plan's parallel degrees,
micro-batches, recomputation and ZeRO stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.formats.export import TARGETS

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if not p.name.startswith("pipeline-")
)
ONE_D_ONLY = {"megatron", "torchtitan"}


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One `meshtune plan --out` JSON per example."""
    folder = tmp_path_factory.mktemp("plans")
    out = {}
    for example in EXAMPLES:
        plan = folder / f"{example.stem}.json"
        result = _run("plan", str(example), "--out", str(plan))
        assert result.exit_code == 0, (example.name, result.output)
        out[example.stem] = plan
    return out


def test_examples_found() -> None:
    assert len(EXAMPLES) >= 6, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_example_exports(plans: dict[str, Path], target: str, tmp_path: Path) -> None:
    for name, plan in plans.items():
        doc = json.loads(plan.read_text())
        if doc["schema"] != "meshtune.plan/2":
            # an `auto` example writes the search's document, which names a
            # configuration rather than a plan: refused in one line
            result = _run("export", str(plan), "--to", target, "--out", str(tmp_path / name))
            assert result.exit_code == 2, (name, result.output)
            assert len(result.output.strip().splitlines()) == 1, result.output
            assert "is a search result" in result.output, result.output
            assert not (tmp_path / name).exists()
            continue
        job, mesh = doc["job"], doc["mesh"]
        is_2d = min(mesh["num_rows"], mesh["num_cols"]) > 1
        result = _run("export", str(plan), "--to", target, "--out", str(tmp_path / name))
        if target in ONE_D_ONLY and is_2d:
            assert result.exit_code == 2, (name, result.output)
            (line,) = result.output.strip().splitlines()
            assert "runs 1D tensor parallelism only" in line, line
            assert not (tmp_path / name).exists()
            continue
        assert result.exit_code == 0, (name, target, result.output)
        files = sorted((tmp_path / name).iterdir())
        assert files, (name, target)
        header = files[0].read_text()
        assert (
            f"data parallel {job['data_parallel']}, pipeline parallel "
            f"{job['pipeline_parallel']}, {job['micro_batches']} micro-batch(es) of "
            f"{job['micro_batch_sequences']} sequence(s), {job['chips']} chips"
        ) in header, (name, target)
        assert (
            f"interleave {job['interleave']}, recompute {job['recompute']}, "
            f"ZeRO stage {job['zero_stage']}"
        ) in header, (name, target)


@pytest.mark.parametrize("key", ["micro_batches", "recompute", "zero_stage"])
def test_plan_missing_a_training_or_job_key_exits_2(
    plans: dict[str, Path], tmp_path: Path, key: str
) -> None:
    doc = json.loads(plans["gpt3"].read_text())
    del doc["job"][key]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = _run("export", str(plan), "--to", "maxtext")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"plan.json: job.{key}: is required" in line, line


def test_megatron_without_sequence_parallelism(plans: dict[str, Path], tmp_path: Path) -> None:
    """A megatron-1d plan with sequence_parallel false: no --sequence-parallel,
    no userbuffers overlap (it needs sequence parallelism), one note saying so."""
    doc = json.loads(plans["megatron-gpt-175b-a100"].read_text())
    assert doc["inputs"]["training"]["fc_algorithm"] == "megatron-1d"
    doc["inputs"]["training"]["sequence_parallel"] = False
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = _run("export", str(plan), "--to", "megatron", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["megatron_args.sh"]
    text = (tmp_path / "o" / "megatron_args.sh").read_text()
    assert "--sequence-parallel" not in text and "--tp-comm-overlap" not in text.split("(")[-1]
    assert "--recompute-granularity selective" in text
    assert "not expressed: --tp-comm-overlap:" in text
