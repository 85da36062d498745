"""Messages: regression tests for the one error format.

click printed three-line usage errors; a `model:` or `cluster:` string that
is neither a preset nor a file was reported without the plan file's name;
deep nesting (100,000-level JSON, 2,000-level YAML) ended in RecursionError
exit 3; a 400-byte YAML alias bomb expanded to hundreds of MB and an error
message repr()'d the whole value; a 5,000-character file name ended in
exit 3.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli

from autotune.errors import InputError
from autotune.safe_load import MAX_DEPTH, parse_json, parse_yaml

REPO = Path(__file__).resolve().parent.parent
GPT3_PATH = REPO / "examples" / "gpt3.yaml"
GPT3 = GPT3_PATH.read_text()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["plan", str(REPO / "examples")], ["MODEL_FILE", "is a directory", "fix:"]),
        (["plan", str(GPT3_PATH), "--format", "xml"], ["--format", "'xml'", "fix:"]),
        (["plan"], ["Missing argument", "MODEL_FILE", "fix:"]),
        (["plna"], ["No such command", "plna", "fix:"]),
        (["plan", str(GPT3_PATH), "--bogus"], ["--bogus", "fix:"]),
        (["compare", str(GPT3_PATH), "--batch", "x"], ["--batch", "'x'", "fix:"]),
    ],
)
def test_messages_click_usage_errors_are_one_line(args, fragments):
    run = run_cli(*args)
    assert_one_line_error(run, *fragments)
    assert run.stdout == ""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("  name: gpt3-175b\n", "", None),
        ("cluster: tpu-v4-256", "cluster: no-such-cluster", "cluster"),
        ("cluster: tpu-v4-256", "cluster: tpu-v4-256\ncalibration: no-such-cal", "calibration"),
    ],
)
def test_messages_unknown_reference_names_the_plan_file(tmp_path, old, new, field):
    if field is None:  # a model given by name
        text = "model: no-such-model\n" + GPT3.split("training:", 1)[1].join(["training:", ""])
        field = "model"
    else:
        text = GPT3.replace(old, new)
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    run = run_cli("plan", str(path))
    assert_one_line_error(run, str(path), field, "no-such", "fix:")


def test_messages_deep_json_nesting_is_bad_input(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    run = run_cli("plan", str(GPT3_PATH), "--calibration", str(path))
    assert_one_line_error(run, "deep.json", f"more than {MAX_DEPTH} levels", "fix:")


def test_messages_deep_yaml_nesting_is_bad_input(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("model: " + "[" * 2000 + "]" * 2000 + "\n")
    run = run_cli("plan", str(path))
    assert_one_line_error(run, "deep.yaml", f"more than {MAX_DEPTH} levels", "fix:")


def test_messages_deep_json_in_a_string_is_not_nesting():
    assert parse_json('{"a": "' + "[" * 1000 + '"}', file=None, fix="x") == {"a": "[" * 1000}


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


def test_messages_yaml_alias_bomb_is_bad_input_and_fast(tmp_path):
    text = _alias_bomb()
    assert len(text) < 600
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    start = time.perf_counter()
    run = run_cli("plan", str(path))
    assert time.perf_counter() - start < 5
    assert_one_line_error(run, "bomb.yaml", "aliases", "fix:")


def test_messages_small_alias_use_is_still_allowed():
    data = parse_yaml("a: &a {x: 1}\nb: *a\n", file=None)
    assert data == {"a": {"x": 1}, "b": {"x": 1}}


def test_messages_recursive_alias_is_bad_input():
    with pytest.raises(InputError, match="alias"):
        parse_yaml("a: &a [1, *a]\n", file="f.yaml")


def test_messages_error_never_renders_a_huge_value_whole():
    huge = ["x" * 1000] * 100_000
    start = time.perf_counter()
    line = str(InputError("bad", file="f", field="k", value=huge, fix="y"))
    assert time.perf_counter() - start < 1
    assert len(line) < 400


def test_messages_long_file_names_are_bad_input(tmp_path):
    name = "x" * 5000 + ".yaml"
    run = run_cli("plan", name)
    line = assert_one_line_error(run, "File name too long", "fix:")
    assert len(line) < 600
    run = run_cli("plan", str(GPT3_PATH), "--out", str(tmp_path / ("y" * 5000 + ".json")))
    assert_one_line_error(run, "longer than 255 bytes", "fix:")


def test_messages_huge_integer_literal_is_bad_input(tmp_path):
    path = tmp_path / "digits.yaml"
    path.write_text(GPT3.replace("hidden_size: 12288", "hidden_size: " + "9" * 5000))
    run = run_cli("plan", str(path))
    assert_one_line_error(run, "digits.yaml", "fix:")


def test_messages_input_that_is_not_a_regular_file_is_bad_input():
    run = run_cli("plan", "/dev/zero")
    assert_one_line_error(run, "/dev/zero", "not a regular file", "fix:")


def test_messages_a_dtype_the_chip_cannot_run_is_refused(tmp_path):
    """An FP8 recipe on the TPU v4 (bf16 only) planned at the bf16 rate with
    a warning; a cluster whose chip lists its peaks without fp8 now refuses
    it in one line (other dtypes missing from the list only lack a peak:
    warned). `dtype: fp8` is refused: FP8 is a recipe, not the dtype."""
    path = tmp_path / "plan.yaml"
    text = GPT3.replace("dtype: bf16", "dtype: bf16\n  fp8: delayed")
    assert text != GPT3
    path.write_text(text)
    run = run_cli("plan", str(path))
    assert_one_line_error(run, "plan.yaml", "training.fp8", "got delayed", "tpu-v4-256", "fix:")
    # a cluster whose chip preset has no fp8 (the A100) names the chip
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(text.replace("cluster: tpu-v4-256", "cluster: a100-hgx-4n"))
    run = run_cli("plan", str(gpu))
    assert_one_line_error(run, "gpu.yaml", "training.fp8", "chip a100-sxm4-80gb", "fix:")
    old = tmp_path / "old.yaml"
    old.write_text(GPT3.replace("dtype: bf16", "dtype: fp8"))
    run = run_cli("plan", str(old))
    assert_one_line_error(run, "old.yaml", "training.dtype", "fp8: delayed", "fix:")


def test_booleans_are_quoted_as_yaml_writes_them():
    """An error quotes a boolean as the file wrote it (`true`), not as
    Python prints it (`True`)."""
    from autotune.errors import shown_value

    assert (shown_value(True), shown_value(False), shown_value(1)) == ("true", "false", "1")
    error = InputError(
        "needs experts", file="plan.yaml", field="training.overlap_expert_comm", value=True
    )
    assert "training.overlap_expert_comm: got true;" in error.one_line()
