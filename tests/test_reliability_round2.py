"""Hardening, second round: regression tests named after each finding.

A pipeline YAML field set to 1e308 ended in an internal error (PuLP's "RHS
to NaN/inf", a NaN in the JSON, a time_t overflow) or was solved silently;
memory fields said "got inf" for the 1e308 typed; messages did not name the
option (`calibrate --base nosuch`) or the field (`verify` on a NaN
`num_rows`); a seed-tool memory of -1 gave no fix; `calibrate --check`
listed every log row twice; `pipeline --time-limit T` ran 1-1.7 s past T.
(The sweep of every numeric field of every format is
tests/test_reliability_extremes.py; the time limit's measurement is
benchmarks/pipeline_time_limit.py.)
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parent.parent
LLAMA_PP8 = (REPO / "examples" / "pipeline-llama-pp8.yaml").read_text()
SEED = (REPO / "examples" / "pipeline-seed-format.yaml").read_text()
BENCH = str(REPO / "calibration_data" / "example_bench.csv")
PLAN_1D = REPO / "tests" / "fixtures" / "formats" / "plan_gpt3_1d_tp8.json"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("forward_ms: 0.6", "forward_ms: 1e308", "head.forward_ms"),
        ("forward_ms: 5.0\n  memory_gib: 4.5",
         "forward_ms: 5.0\n  backward_factor: 1e308\n  memory_gib: 4.5", "tail.backward_factor"),
        ("forward_ms: 4.2", "forward_ms: 1e308", "layers.0.forward_ms"),
        ("backward_factor: 2.0\n", "backward_factor: 1e308\n", "layers.0.backward_factor"),
        ("time_limit_s: 60", "time_limit_s: 1e308", "solver.time_limit_s"),
        ("selective: 0.04", "selective: 1e308", "recompute_options.selective"),
        ("cap_gib: 56", "cap_gib: 1e308", "memory.cap_gib"),
        ("constant_gib: 5.0", "constant_gib: 1e308", "memory.constant_gib"),
    ],
)  # fmt: skip
def test_overflow_after_unit_conversion_pipeline_yaml_1e308_names_field_and_value(
    tmp_path, old, new, field
):
    assert old in LLAMA_PP8, old
    path = _write(tmp_path, "p.yaml", LLAMA_PP8.replace(old, new, 1))
    run = run_cli("pipeline", path, "--time-limit", "1")
    line = assert_one_line_error(run, "p.yaml", field, "got 1e308", "fix:")
    assert "inf" not in line.split("got ")[1].split(";")[0]


def test_overflow_after_unit_conversion_cli_numbers_are_ranged():
    for flag, value in (("--time-limit", "1e308"), ("--memory-cap-mb", "1e308")):
        run = run_cli("pipeline", str(REPO / "examples" / "pipeline-llama-pp8.yaml"), flag, value)
        assert_one_line_error(run, flag, f"got {value}", "fix:")


def test_verify_wrong_schema_exits_2(tmp_path):
    doc = json.loads(PLAN_1D.read_text())
    for schema in ("meshtune.plan/9", None):
        if schema is None:
            doc.pop("schema")
        else:
            doc["schema"] = schema
        path = _write(tmp_path, "plan.json", json.dumps(doc))
        assert_one_line_error(run_cli("verify", path), "plan.json", "schema", "fix:")


def test_messages_name_what_is_wrong_verify_nan_num_rows_names_the_field(tmp_path):
    text = PLAN_1D.read_text().replace('"num_rows": 1,', '"num_rows": NaN,', 1)
    assert "NaN" in text
    path = _write(tmp_path, "plan.json", text)
    for command in (("verify", path), ("export", path, "--to", "megatron")):
        assert_one_line_error(run_cli(*command), "plan.json", "num_rows", "got NaN", "fix:")


@pytest.mark.parametrize(
    "args",
    [
        ("calibrate", BENCH, "--base", "nosuch", "--out", "OUT"),
        ("calibrate", BENCH, "--check", "nosuch"),
        ("calibrate", BENCH, "--chip", "nosuch", "--out", "OUT"),
        ("calibrate", BENCH, "--cluster", "nosuch", "--out", "OUT"),
        ("plan", str(REPO / "examples" / "gpt3.yaml"), "--model", "nosuch"),
        ("plan", str(REPO / "examples" / "gpt3.yaml"), "--cluster", "nosuch"),
        ("plan", str(REPO / "examples" / "gpt3.yaml"), "--calibration", "nosuch"),
        ("compare", str(REPO / "examples" / "gpt3.yaml"), "--cluster", "nosuch"),
        ("pipeline", str(REPO / "examples" / "pipeline-seed-format.yaml"), "--manual", "nosuch"),
    ],
    ids=lambda args: f"{args[0]} {next(a for a in args if a.startswith('--'))}",
)
def test_messages_name_what_is_wrong_an_unknown_reference_names_its_option(tmp_path, args):
    option = next(a for a in args if a.startswith("--"))
    args = tuple(str(tmp_path / "out.json") if a == "OUT" else a for a in args)
    line = assert_one_line_error(run_cli(*args), f"{option}: got 'nosuch'", "fix:")
    assert not (tmp_path / "out.json").exists(), line


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("head_memory: 38239", "head_memory: -1", "memory_usage.head_memory"),
        ("memories: [49019,", "memories: [-1,", "memory_usage.body_memories.memories[0]"),
        ("head: 0.9", "head: -1", "time_config.head"),
    ],
)
def test_messages_name_what_is_wrong_seed_tool_minus_one_gives_a_fix(tmp_path, old, new, field):
    path = _write(tmp_path, "s.yaml", SEED.replace(old, new, 1))
    assert_one_line_error(run_cli("pipeline", path), "s.yaml", field, "got -1", "fix: give")


def test_calibrate_check_lists_each_log_row_once():
    log = (
        REPO
        / "tests/fixtures/public_logs/nccl_all_reduce_perf_16xH100_2host_nccl-tests-issue309.txt"
    )
    run = run_cli("calibrate", str(log), "--check", "h100-nominal", "--format", "json")
    assert run.exit_code == 0, run.stderr
    rows = json.loads(run.stdout)["rows"]
    table_rows = [
        line for line in log.read_text().splitlines() if line.strip()[:1].isdigit()
    ]  # fmt: skip
    assert len(rows) == len({(r["line"], r["what"]) for r in rows}) == len(table_rows)


def test_calibrate_check_a_torus_log_keeps_one_row_per_axis():
    # on a torus calibration a log line stands for a row ring and a col ring,
    # which the calibration prices with two entries: both listed
    log = REPO / "tests/fixtures/nccl/all_gather_8gpu_v2.18.txt"
    run = run_cli("calibrate", str(log), "--check", "tpu-v4", "--format", "json")
    rows = json.loads(run.stdout)["rows"]
    assert {r["what"].split(" ")[0] for r in rows} == {"all_gather.row", "all_gather.col"}
    assert len(rows) == 2 * len({r["line"] for r in rows})


# Where the CLI's InputErrors are built: each must name where (file, field
# or line) and a fix; the validators' own messages carry "fix:" or get one
# from autotune.loading._fix_for.
_ERROR_HELPERS = {"_err": 5, "_fail": 5}  # positional arguments up to `fix`


def _error_calls():
    for path in sorted((REPO / "autotune").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name == "InputError" or name in _ERROR_HELPERS:
                yield path.relative_to(REPO), node, name


def test_every_error_the_cli_raises_names_where_and_a_fix():
    calls = list(_error_calls())
    assert len(calls) > 100  # the walk found the errors
    missing = []
    for path, node, name in calls:
        keywords = {k.arg for k in node.keywords}
        if None in keywords:  # **kwargs passed on
            continue
        if name == "InputError":
            named = "fix" in keywords and bool({"file", "field", "line"} & keywords)
        else:
            named = "fix" in keywords or len(node.args) >= _ERROR_HELPERS[name]
        if not named:
            missing.append(f"{path}:{node.lineno} {name}")
    assert not missing, missing


def test_every_error_the_cli_raises_a_validator_message_carries_a_fix():
    # `raise ValueError(...)` inside the specs' validators becomes the
    # message of an InputError; one without "fix:" gets only the generic fix
    missing = []
    readers = [*(REPO / "autotune" / "specs").glob("*.py")] + [
        REPO / "autotune" / name
        for name in ("pipeline/yaml_format.py", "pipeline/seed_format.py", "verify/plan_file.py")
    ]
    for path in sorted(readers):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            if getattr(node.exc.func, "id", None) != "ValueError" or not node.exc.args:
                continue
            text = ast.unparse(node.exc.args[0])
            if "fix:" not in text:
                missing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not missing, missing


def test_time_limits_count_from_the_command_start(tmp_path, monkeypatch):
    # a command already 4.5 s into a 5 s limit leaves the search almost
    # nothing: the run returns its first plan within about a second
    import autotune.cli.common as common

    started = time.perf_counter() - 4.5
    monkeypatch.setattr(common, "command_started_s", lambda: started)
    path = _write(tmp_path, "p.yaml", LLAMA_PP8)
    t0 = time.perf_counter()
    run = run_cli("pipeline", path, "--time-limit", "5", "--format", "json")
    elapsed_s = time.perf_counter() - t0
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["plan"] is not None
    assert elapsed_s < 2.5, elapsed_s


def test_time_limits_process_age_is_measured_from_the_process_start():
    code = (
        "import time; time.sleep(0.4); "
        "from autotune.processes import process_age_s; print(process_age_s())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    age_s = float(done.stdout)
    # Linux gives the age to 10 ms; elsewhere 0 (not counted)
    assert age_s == 0.0 or 0.4 <= age_s < 10.0, age_s
