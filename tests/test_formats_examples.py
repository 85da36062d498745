"""`meshtune export` of every bundled example's plan to every target: exit 0,
or exit 2 with the one-line refusal of a 2D plan by a 1D-only trainer; never
an internal error. Each file's header repeats the plan's parallel degrees,
micro-batches, recomputation and ZeRO stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import EXAMPLES, ONE_D_ONLY, maxtext_cannot_shard

from autotune.cli import main
from autotune.formats.export import TARGETS, export_plan


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def plans(example_plans: dict[str, Path]) -> dict[str, Path]:
    """One `meshtune plan --out` JSON per example."""
    return example_plans


def test_examples_found() -> None:
    assert len(EXAMPLES) >= 6, [p.name for p in EXAMPLES]


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_example_exports(plans: dict[str, Path], target: str, tmp_path: Path) -> None:
    """Every example's plan, pinned or searched, exports to every target
    that can express it; the others refuse in one line naming the fix."""
    for name, plan in plans.items():
        doc = json.loads(plan.read_text())
        assert doc["schema"] == "meshtune.plan/3"
        cfg, mesh = doc["configuration"], doc["mesh"]
        is_2d = min(mesh["num_rows"], mesh["num_cols"]) > 1
        result = _run("export", str(plan), "--to", target, "--out", str(tmp_path / name))
        if target in ONE_D_ONLY and is_2d:
            assert result.exit_code == 2, (name, result.output)
            (line,) = result.output.strip().splitlines()
            assert "runs 1D tensor parallelism only" in line, line
            assert "fix: export --to jax (or maxtext), or plan again with `tensor_mesh: 1d`" in line
            assert not (tmp_path / name).exists()
            continue
        if maxtext_cannot_shard(target, result.exit_code, result.output, tmp_path / name):
            continue
        assert result.exit_code == 0, (name, target, result.output)
        files = sorted((tmp_path / name).iterdir())
        assert files, (name, target)
        header = files[0].read_text()
        assert (
            f"data parallel {cfg['data_parallel']}, pipeline parallel "
            f"{cfg['pipeline_parallel']}, {cfg['micro_batches']} micro-batch(es) of "
            f"{cfg['micro_batch_size']} sequence(s), {cfg['num_chips']} chips"
        ) in header, (name, target)
        assert (
            f"interleave {cfg['interleave']}, recompute {cfg['recompute']}, "
            f"ZeRO stage {cfg['zero_stage']}"
        ) in header, (name, target)


@pytest.mark.parametrize("key", ["micro_batches", "recompute", "zero_stage"])
def test_plan_missing_a_configuration_key_exits_2(
    plans: dict[str, Path], tmp_path: Path, key: str
) -> None:
    doc = json.loads(plans["gpt3"].read_text())
    del doc["configuration"][key]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = _run("export", str(plan), "--to", "maxtext")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"plan.json: configuration.{key}: is required" in line, line


def test_megatron_without_sequence_parallelism(plans: dict[str, Path], tmp_path: Path) -> None:
    """A megatron-1d plan with sequence_parallel false: no --sequence-parallel,
    no userbuffers overlap (a megatron-1d plan prices blocking collectives)."""
    doc = json.loads(plans["megatron-gpt-175b-a100"].read_text())
    assert doc["configuration"]["fc_algorithm"] == "megatron-1d"
    doc["provenance"]["training"]["sequence_parallel"] = False
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    result = _run("export", str(plan), "--to", "megatron", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert [p.name for p in (tmp_path / "o").iterdir()] == ["megatron_args.sh"]
    text = (tmp_path / "o" / "megatron_args.sh").read_text()
    assert "--sequence-parallel" not in text and "--tp-comm-overlap" not in text.split("(")[-1]
    assert "--recompute-granularity selective" in text
    assert "assumed: fc_algorithm megatron-1d: Megatron's blocking" in text


def test_tpu_auto_example_exports_to_maxtext_with_its_slices(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """The TPU v5p example searches every degree on four slices: the MaxText
    config's ici_* products are one slice's chips and its dcn_* the slices."""
    doc = json.loads(plans["gpt3-tpu-v5p-auto"].read_text())
    assert doc["configuration"]["num_chips"] == 1024
    result = export_plan(str(plans["gpt3-tpu-v5p-auto"]), "maxtext")
    import yaml

    config = yaml.safe_load(result.files[0].text)
    ici = dcn = 1
    for key, value in config.items():
        if key.startswith("ici_") and key.endswith("_parallelism"):
            ici *= value
        if key.startswith("dcn_") and key.endswith("_parallelism"):
            dcn *= value
    assert ici == 256 and dcn == 4 and ici * dcn == 1024


def test_gpu_auto_example_exports_to_megatron_and_torchtitan(
    plans: dict[str, Path], tmp_path: Path
) -> None:
    """examples/llama3-70b-h100-auto.yaml searches every degree on 1 x N
    tensor meshes: its plan is a trainer config for both 1D trainers."""
    plan = plans["llama3-70b-h100-auto"]
    doc = json.loads(plan.read_text())
    assert doc["mesh"]["num_rows"] == 1
    for target in ("megatron", "torchtitan"):
        result = _run("export", str(plan), "--to", target, "--out", str(tmp_path / target))
        assert result.exit_code == 0, result.output
