"""The seed tool's published files, accepted as they are (tests/fixtures/
seed_tool/README.md cites each): every run's stdout parses as JSON, and each
test says which use of the seed tool it imitates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main

FIX = Path(__file__).parent / "fixtures" / "seed_tool"


def run(*args: str):
    return CliRunner().invoke(main, ["pipeline", *args], catch_exceptions=False)


def run_json(*args: str):
    result = run(*args, "--format", "json")
    assert result.exit_code == 0 and result.stdout, f"exit {result.exit_code}: {result.stderr}"
    return result, json.loads(result.stdout)


def test_old_init_yaml_with_manual_plans():
    # The seed readme's comparison run: `--init cfgs/init_demo.yaml -s 16 -i 3
    # -mb 16 -mem 62000 -manual cfgs/manual_demo.yaml` (time limit shortened).
    result, doc = run_json(
        str(FIX / "init_demo.yaml"),
        *("--stages", "16", "--chunks", "3", "--micro-batches", "16"),
        *("--memory-cap-mb", "62000", "--time-limit", "2"),
        *("--manual", str(FIX / "manual_demo.yaml")),
    )
    assert result.exit_code == 0, result.stderr
    assert doc["inputs"]["format"] == "seed" and doc["inputs"]["num_chunks"] == 3
    assert doc["inputs"]["memory_cap_bytes"] == 62000 * 2**20
    # A 2 s limit on a loaded machine may end before any bound: the plan
    # still comes, with its gap when one is known.
    assert doc["plan"]["fits"] and doc["solver"]["first_plan_s"] is not None
    assert doc["solver"]["gap"] is None or doc["solver"]["gap"] >= 0
    names = [(m["name"], m["num_chunks"]) for m in doc["manual_plans"]]
    assert names == [("manual1", 3), ("manual2", 1)]
    manual1 = doc["manual_plans"][0]
    # manual1 is the seed readme's hand-tuned plan for this very run: it fits.
    assert manual1["fits"] and manual1["plan"]["seed_config"]["offset"][0][0] == -1
    assert manual1["step_time_vs_plan"] == pytest.approx(
        manual1["step_time_s"] / doc["plan"]["step_time_s"]
    )
    assert "seed tool's defaults" in result.stderr


def test_multi_round_init_yaml_folds_the_constant():
    # `--init cfgs/init_demopp4.yaml` (two dry-run rounds, pp 4): five measured
    # stages for six unknowns, which the seed tool solves without the constant.
    result, doc = run_json(
        str(FIX / "init_demopp4.yaml"),
        *("--micro-batches", "8", "--memory-cap-mb", "20000", "--time-limit", "2"),
    )
    assert result.exit_code == 0, result.stderr
    assert doc["decomposition"]["constant_bytes"] == 0.0
    assert any("constant-free" in w for w in doc["decomposition"]["warnings"])
    assert "constant-free" in result.stderr
    assert doc["inputs"]["num_stages"] == 4 and doc["plan"]["fits"]


def test_new_init_yaml_without_times_gives_the_decomposition():
    # The seed readme's init file for a 175B llama: `profiling_config` points
    # at profiler traces, so there are no times to plan with.
    result, doc = run_json(str(FIX / "init_readme_profiling.yaml"))
    assert result.exit_code == 0, result.stderr
    assert doc["status"] == "decomposition_only" and doc["plan"] is None
    dec = doc["decomposition"]
    assert len(dec["residuals"]) == 16
    assert set(dec["activation_bytes_per_layer"]) == {"none", "selective", "comm", "selective_comm"}
    assert "profiling_config" in doc["warnings"][0]


@pytest.mark.parametrize(
    ("name", "chunks"),
    [("llama2_70b.json", "2"), ("demo.json", "1")],
)
def test_layer_description_json(name, chunks):
    # The balancer step on its layer file: `-m llama2_70b -s 16 -mb 32 -i 2`
    # (its readme), and the same for the demo layers with one chunk.
    result, doc = run_json(
        str(FIX / name),
        *("--stages", "16", "--chunks", chunks, "--micro-batches", "32"),
        # 5 s: the search ends 1.3 s before the limit (docs/reliability.md), and
        # the first plan must not depend on how busy the machine is
        *("--memory-cap-mb", "56000", "--time-limit", "5"),
    )
    assert result.exit_code == 0, result.stderr
    assert doc["inputs"]["format"] == "seed-layers"
    assert sum(k["count"] for k in doc["inputs"]["layer_kinds"]) == 96
    assert doc["plan"]["fits"]
    assert "stage_const_mem" in result.stderr


def test_layer_json_needs_the_shape_from_the_command_line():
    result = run(str(FIX / "llama2_70b.json"), "--stages", "16")
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "pass --micro-batches M, --memory-cap-mb X" in result.stderr


def test_template_with_zero_times_is_refused():
    # The seed tool's blank template: its body time is 0.
    result = run(str(FIX / "template.json"), "--stages", "2", "--micro-batches", "2")
    assert result.exit_code == 2
    assert "layers_description[1].time: got 0; must be at least" in result.stderr


def test_model_list_is_refused_with_the_file_to_use():
    # cfgs/model_layers.json names layers but has no times or memories.
    result = run(str(FIX / "model_layers.json"), "--stages", "4")
    assert result.exit_code == 2
    assert "list of models" in result.stderr and "layers/<model>.json" in result.stderr
