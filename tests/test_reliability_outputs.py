"""Output and process handling: regression tests.

`--out` replaced a device node, FIFO or symlink with a regular file and reset
the mode to 0600; an unwritable folder gave exit 3 naming a hidden temp
file; `pipeline --out p.json --timeline missing_dir/t.svg` exited 2 but left
p.json; the JSON was written before the report crashed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli

import autotune.io
from autotune.errors import InputError
from autotune.io import atomic_write_text, check_output_path

REPO = Path(__file__).resolve().parent.parent
GPT3 = str(REPO / "examples" / "gpt3.yaml")
PIPELINE = str(REPO / "examples" / "pipeline-llama-pp8.yaml")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_out_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run = run_cli("plan", GPT3, "--out", str(fifo))
    assert_one_line_error(run, str(fifo), "--out", "FIFO", "fix:")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_out_refuses_a_symlink(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("keep")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    run = run_cli("plan", GPT3, "--out", str(link))
    assert_one_line_error(run, "link.json", "symlink", "fix:")
    assert link.is_symlink() and target.read_text() == "keep"


def test_out_refuses_a_device_node():
    run = run_cli("plan", GPT3, "--out", os.devnull)
    assert_one_line_error(run, os.devnull, "device", "fix:")


def test_out_refuses_a_folder(tmp_path):
    (tmp_path / "d").mkdir()
    run = run_cli("plan", GPT3, "--out", str(tmp_path / "d"))
    assert_one_line_error(run, "folder", code=2)


def test_out_keeps_the_existing_file_mode(tmp_path):
    out = tmp_path / "plan.json"
    out.write_text("old")
    out.chmod(0o640)
    run = run_cli("plan", GPT3, "--out", str(out), "--format", "json")
    assert run.exit_code == 0, run.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert out.read_text().startswith("{")


def test_out_new_file_gets_the_umask_mode_not_0600(tmp_path):
    out = tmp_path / "new.json"
    old = os.umask(0o022)
    try:
        atomic_write_text(out, "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_out_permission_problem_is_exit_2_naming_the_given_path(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(autotune.io.tempfile, "mkstemp", denied)
    out = tmp_path / "plan.json"
    run = run_cli("plan", GPT3, "--out", str(out))
    line = assert_one_line_error(run, str(out), "Permission denied", "fix:")
    assert ".tmp" not in line
    assert not out.exists()


def test_out_missing_folder_is_checked_before_any_work(tmp_path):
    run = run_cli("plan", GPT3, "--out", str(tmp_path / "missing" / "p.json"))
    assert_one_line_error(run, "missing", "does not exist", "fix:")


def test_pipeline_out_with_missing_timeline_folder_writes_nothing(tmp_path):
    out = tmp_path / "p.json"
    run = run_cli(
        "pipeline", PIPELINE, "--out", str(out), "--timeline", str(tmp_path / "nope" / "t.svg")
    )
    assert_one_line_error(run, "--timeline", "does not exist")
    assert not out.exists()


def test_report_crash_leaves_no_json_written(tmp_path, monkeypatch):
    import autotune.job.report

    def broken(*args, **kwargs):
        raise RuntimeError("renderer failed")

    monkeypatch.setattr(autotune.job.report, "render_report", broken)
    out = tmp_path / "p.json"
    run = run_cli("plan", GPT3, "--out", str(out))
    assert run.exit_code == 3
    assert len(run.stderr.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_interrupted_write_keeps_the_old_file_and_no_temp_file(tmp_path, monkeypatch, failure):
    out = tmp_path / "p.json"
    out.write_text("old")

    def broken_replace(src, dst):
        raise failure()

    monkeypatch.setattr(autotune.io.os, "replace", broken_replace)
    with pytest.raises((KeyboardInterrupt, InputError)):
        atomic_write_text(out, "new")
    assert out.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_out_name_longer_than_the_file_system_allows_is_bad_input(tmp_path):
    with pytest.raises(InputError, match="longer than 255 bytes"):
        check_output_path(tmp_path / ("x" * 300 + ".json"))


def test_pipeline_no_output_file_on_failure_infeasible_exit_1(tmp_path):
    out, svg = tmp_path / "p.json", tmp_path / "t.svg"
    run = run_cli(
        "pipeline", PIPELINE, "--memory-cap-mb", "2000", "--format", "json",
        "--out", str(out), "--timeline", str(svg),
    )  # fmt: skip
    assert run.exit_code == 1, run.stderr
    assert_one_line_error(run, "no plan fits the memory cap", code=1)
    assert not out.exists() and not svg.exists()
    assert _leftovers(tmp_path) == []
    # stdout still says why
    assert '"status": "infeasible"' in run.stdout


def test_pipeline_no_output_file_on_failure_time_limit_exit_4(tmp_path, monkeypatch):
    import autotune.pipeline.balance as bal

    # nothing found before the limit, nothing proven: exit 4
    monkeypatch.setattr(bal, "_heuristic_start", lambda *a, **k: (None, None))
    monkeypatch.setattr(bal, "_quick_start", lambda p: None)
    monkeypatch.setattr(bal, "baselines", lambda p: [])
    out = tmp_path / "p.json"
    out.write_text("previous result")
    run = run_cli("pipeline", PIPELINE, "--time-limit", "0.01", "--out", str(out))
    assert run.exit_code == 4, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith("meshtune: error: no plan found")
    assert out.read_text() == "previous result"
    assert "wrote" not in run.stdout


def test_pipeline_format_json_has_the_solver_banner_on_stdout_no_more(tmp_path):
    # HiGHS prints its banner from C to descriptor 1, which CliRunner does not
    # see: a real process shows what a pipe to `python -m json.tool` gets.
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", "pipeline", PIPELINE,
         "--format", "json", "--time-limit", "10"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HiGHS" not in proc.stdout
    assert json.loads(proc.stdout)["solver"]["name"] == "highs"
