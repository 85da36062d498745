"""`meshtune plan` end to end: golden JSON, examples, flags, and errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsoncheck import assert_json_close

from autotune.cli import main
from autotune.plan.schema import PlanDocument

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MESHTUNE_UPDATE_GOLDEN") == "1"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("example", "golden", "extra"),
    [
        ("examples/gpt3.yaml", "plan_gpt3.json", []),
        ("examples/megatron-nlg.yaml", "plan_megatron_size_rule.json", ["--dataflow", "size-rule"]),
    ],
)
def test_plan_golden_json(repo_root, example, golden, extra):
    result = run("plan", example, "--format", "json", *extra)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    PlanDocument.model_validate(doc)
    assert doc["schema"] == "meshtune.plan/3"
    assert doc["mesh"]["num_rows"] * doc["mesh"]["num_cols"] == 256
    path = GOLDEN / golden
    # the search's own clock is the one figure that changes run to run
    doc["search"]["elapsed_s"] = 0.0
    if UPDATE:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    expected = json.loads(path.read_text())
    doc.pop("tool_version"), expected.pop("tool_version")
    assert_json_close(doc, expected)


@pytest.mark.parametrize(
    "example", ["examples/gpt3.yaml", "examples/megatron-nlg.yaml", "examples/llama3-70b.yaml"]
)
def test_every_example_plans_and_reports(repo_root, example):
    result = run("plan", example)
    assert result.exit_code == 0, result.output
    assert "Planned:" in result.stdout and "FC FLOP utilization" in result.stdout
    assert "Where time goes" in result.stdout and "Why it wins" in result.stdout


def test_out_file_and_table(repo_root, tmp_path):
    out = tmp_path / "plan.json"
    result = run("plan", "examples/gpt3.yaml", "--out", str(out))
    assert result.exit_code == 0
    doc = PlanDocument.model_validate_json(out.read_text())
    assert doc.provenance.calibration.name == "tpu-v4"
    assert doc.provenance.calibration.sha256 and len(doc.provenance.calibration.sha256) == 64
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temp file left


def test_dataflow_flag_always_w(repo_root):
    doc = json.loads(
        run("plan", "examples/gpt3.yaml", "--format", "json", "--dataflow", "always-w").stdout
    )
    assert {layer["stationary"] for layer in doc["layers"]} == {"W"}
    assert doc["provenance"]["dataflow_policy"] == "always-w"


def test_cluster_override_changes_chip_count(repo_root):
    doc = json.loads(
        run("plan", "examples/gpt3.yaml", "--cluster", "tpu-v4-1024", "--format", "json").stdout
    )
    assert doc["mesh"]["num_chips"] == 1024


def test_presets_lists_bundled(repo_root):
    result = run("presets")
    assert result.exit_code == 0
    for name in ("gpt3-175b", "megatron-nlg-530b", "llama3-70b-like", "tpu-v4-256", "tpu-v4"):
        assert name in result.stdout
    # the two measured H100 calibrations differ only in their attention kernel's rows
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "attention 630 TFLOP/s (backward 695) at long sequences" in lines["h100-measured"]
    assert "attention 360 TFLOP/s (backward 331) at long sequences" in lines["h100-measured-fa2"]
    assert "attention" not in lines["h100-nominal"]


# ---------------------------------------------------------------- bad input

BASE = """\
model:
  name: m
  num_layers: 2
  hidden_size: 1024
  num_heads: 8
  head_dim: 128
  ffn_size: 4096
training:
  global_batch_sequences: 16
  sequence_length: 128
cluster: tpu-v4-16
"""


def write(tmp_path: Path, text: str, name: str = "plan.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        # missing field
        (
            lambda s: s.replace("  num_layers: 2\n", ""),
            r"plan\.yaml: model\.num_layers: is required; fix: add `num_layers:`",
        ),
        # unknown key
        (
            lambda s: s.replace("  sequence_length: 128\n", "  sequence_length: 128\n  batch: 3\n"),
            r"training\.batch: got 3; is not a known key; "
            r"fix: remove it or correct the spelling \(allowed: global_batch_sequences",
        ),
        # negative size
        (
            lambda s: s.replace("hidden_size: 1024", "hidden_size: -1024"),
            r"model\.hidden_size: got -1024; Input should be greater than 0 "
            r"\(plausible range: 1 to 2\^24\); fix: use a value > 0",
        ),
        # heads not divisible
        (
            lambda s: s.replace("  head_dim: 128\n", "  head_dim: 128\n  num_kv_heads: 3\n"),
            r"model: num_heads \(8\) must be a multiple of num_kv_heads \(3\); "
            r"fix: use a num_kv_heads",
        ),
        # a chip count with no allowed mesh shape
        (
            lambda s: s.replace(
                "cluster: tpu-v4-16\n",
                "cluster:\n  name: c\n  num_chips: 16\n  hbm_gib: 32\n  hbm_gb_per_s: 1200\n"
                "  peak_tflops_per_s: {bf16: 275}\n  mesh_shapes: [[4, 8], [2, 2]]\n",
            ).replace(
                "  sequence_length: 128\n",
                "  sequence_length: 128\n  data_parallel: 1\n  pipeline_parallel: 1\n",
            ),
            r"training: no configuration of 16 chips is possible \(tensor_mesh 1x16: not in the "
            r"cluster's mesh_shapes.*fix: leave more degrees to the search or change the cluster",
        ),
        # wrong type (strict: no silent coercion of a string to an int)
        (
            lambda s: s.replace("num_layers: 2", "num_layers: '2'"),
            r"model\.num_layers: got '2'; Input should be a valid integer",
        ),
        # batch not divisible by data parallel
        (
            lambda s: s.replace(
                "  sequence_length: 128\n", "  sequence_length: 128\n  data_parallel: 3\n"
            ),
            r"training\.data_parallel: got 3; does not divide the cluster's 16 chips; "
            r"fix: pin another value",
        ),
        # data parallelism that does not divide the batch
        (
            lambda s: s.replace("global_batch_sequences: 16", "global_batch_sequences: 12").replace(
                "  sequence_length: 128\n", "  sequence_length: 128\n  data_parallel: 8\n"
            ),
            r"training\.data_parallel: got 8; does not divide the global batch of 12 sequences",
        ),
        # unknown preset
        (
            lambda s: s.replace("cluster: tpu-v4-16", "cluster: tpu-v9"),
            r"cluster: got 'tpu-v9'; is neither a cluster preset nor a file; fix: use one of",
        ),
    ],
)
def test_bad_input_one_line_exit_2(tmp_path, edit, pattern):
    path = write(tmp_path, edit(BASE))
    out = tmp_path / "out.json"
    result = run("plan", path, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert lines[0].startswith("meshtune: error: ")
    import re

    assert re.search(pattern, lines[0]), lines[0]
    assert not out.exists()


def test_non_yaml_file(tmp_path):
    path = write(tmp_path, "model: [unclosed\n  - {\n")
    result = run("plan", path)
    assert result.exit_code == 2
    assert "plan.yaml: is not valid YAML at line" in result.stderr


def test_binary_file(tmp_path):
    p = tmp_path / "model.yaml"
    p.write_bytes(b"\x00\x01\x02binary")
    result = run("plan", str(p))
    assert result.exit_code == 2
    assert "is binary data, not text" in result.stderr


def test_top_level_not_a_mapping(tmp_path):
    result = run("plan", write(tmp_path, "- a\n- b\n"))
    assert result.exit_code == 2
    assert "must be a YAML mapping" in result.stderr


def test_missing_file(tmp_path):
    result = run("plan", str(tmp_path / "nope.yaml"))
    assert result.exit_code == 2
    assert "nope.yaml: no such file" in result.stderr


def test_out_folder_missing_writes_nothing(tmp_path):
    path = write(tmp_path, BASE)
    result = run("plan", path, "--out", str(tmp_path / "missing" / "x.json"))
    assert result.exit_code == 2
    assert "the output folder does not exist" in result.stderr


def test_no_feasible_plan_exit_1(tmp_path):
    # hidden 36 cannot be split into blocks of 8 on any mesh of 16 chips,
    # and the pins leave the tensor group all 16
    text = BASE.replace("hidden_size: 1024", "hidden_size: 36").replace(
        "num_heads: 8", "num_heads: 3"
    )
    text = text.replace(
        "  sequence_length: 128\n",
        "  sequence_length: 128\n  data_parallel: 1\n  pipeline_parallel: 1\n",
    )
    text = text.replace("head_dim: 128", "head_dim: 12").replace("ffn_size: 4096", "ffn_size: 100")
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 1
    assert result.stderr.startswith("meshtune: error: no configuration can run the model")
    assert "tensor_mesh" in result.stderr and len(result.stderr.splitlines()) == 1


def test_calibration_file_errors(tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text('{"schema": "meshtune.calibration/1", "name": "x"}')
    result = run("plan", write(tmp_path, BASE), "--calibration", str(bad))
    assert result.exit_code == 2
    assert "cal.json: source: is required" in result.stderr


def _calibration_without(tmp_path: Path, op: str, axis: str | None = None) -> str:
    from calibration_data import data_path

    cal = json.loads(data_path("tpu_v4.json").read_text())
    if axis is None:
        del cal["collectives"][op]
    else:
        del cal["collectives"][op][axis]
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(cal))
    return str(path)


def test_calibration_missing_a_needed_collective(tmp_path):
    """Meshes whose axes the calibration cannot price are left out, with a
    warning naming the gap; when the pins leave no other, exit 2 naming it."""
    cal = _calibration_without(tmp_path, "reduce_scatter", "col")
    result = run("plan", write(tmp_path, BASE), "--calibration", cal, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["configuration"]["tensor_mesh"][1] == 1
    gap = "cal.json: collectives.reduce_scatter.col: has no reduce_scatter parameters"
    assert any(gap in w for w in doc["warnings"])
    pinned = BASE.replace(
        "  sequence_length: 128\n", "  sequence_length: 128\n  tensor_mesh: [4, 4]\n"
    )
    result = run("plan", write(tmp_path, pinned, "pinned.yaml"), "--calibration", cal)
    assert result.exit_code == 2, result.output
    assert gap in result.stderr and len(result.stderr.splitlines()) == 1


def test_calibration_without_send_recv_warns(tmp_path):
    cal = _calibration_without(tmp_path, "send_recv")
    result = run("plan", write(tmp_path, BASE), "--calibration", cal, "--format", "json")
    assert result.exit_code == 0
    warnings = json.loads(result.stdout)["warnings"]
    assert any("no send_recv parameters" in w for w in warnings)


def test_dtype_mismatch_warns(tmp_path):
    text = BASE.replace("  sequence_length: 128\n", "  sequence_length: 128\n  dtype: fp32\n")
    result = run("plan", write(tmp_path, text))
    assert result.exit_code == 0
    assert "measured for bf16 but training uses fp32" in result.stdout
    assert "no peak_tflops_per_s for fp32" in result.stdout


@pytest.mark.slow
def test_a_pipeline_the_batch_forces_is_named(tmp_path):
    """72 GPUs of an NVL72 rack (9 x 8) and a batch of 512 sequences: 512
    divides over no multiple of 9 replicas, so the search pipelines the
    factor 9, and the report says so with the nearest batches that the
    replicas divide; with the larger one, data parallelism takes those
    chips, the warning goes and the step is faster."""
    from planning import LLAMA3_8B, plan_for

    training = {"global_batch_sequences": 512, "sequence_length": 4096}
    plan = plan_for(tmp_path, LLAMA3_8B, training, "gb200-nvl72")
    pp, dp = int(plan.config["pp"]), int(plan.config["dp"])
    assert pp == 9 and 512 % (dp * pp) != 0
    line = next(w for w in plan.warnings if "does not divide" in w)
    replicas = dp * pp
    lower, upper = 512 // replicas * replicas, (512 // replicas + 1) * replicas
    assert f"batch of 512 sequences does not divide over {replicas} data-parallel" in line
    assert "pipeline parallelism 9" in line and f"a batch of {lower} or {upper} sequences" in line
    wider = plan_for(
        tmp_path, LLAMA3_8B, {**training, "global_batch_sequences": upper}, "gb200-nvl72"
    )
    assert int(wider.config["pp"]) == 1
    assert not any("does not divide" in w for w in wider.warnings)
    assert wider.tokens_per_s > plan.tokens_per_s
    # a pinned pipeline is the file's choice: no warning
    pinned = plan_for(tmp_path, LLAMA3_8B, {**training, "pipeline_parallel": 9}, "gb200-nvl72")
    assert not any("does not divide" in w for w in pinned.warnings)
