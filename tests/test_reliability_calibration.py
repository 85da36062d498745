"""One bad CSV row corrupts a calibration: regression tests.

A ring size or shard size typed with extra digits moved a fitted link
bandwidth by factors of 17 to 10^38, exit 0, the file was written, and
`plan --calibration` used it without a word. Now a row inconsistent with
the rest of its group is reported and excluded, a poor fit is not written
without --accept-poor-fit, and `plan` says when its calibration has a poor
or extrapolated fit.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from clirun import assert_one_line_error, run_cli

from autotune.calibrate.screen import INCONSISTENCY_FACTOR, inconsistent_rows

REPO = Path(__file__).resolve().parent.parent
BENCH = (REPO / "calibration_data" / "example_bench.csv").read_text()
GPT3 = str(REPO / "examples" / "gpt3.yaml")


def _calibrate(tmp_path: Path, text: str, *extra: str):
    csv_path = tmp_path / "bench.csv"
    csv_path.write_text(text)
    out = tmp_path / "cal.json"
    run = run_cli("calibrate", str(csv_path), "--out", str(out), *extra)
    return run, out


def _bandwidths(doc: dict) -> dict[str, float]:
    return {
        f"{op}.{axis}": link["link_bytes_per_s"]
        for op, axes in doc["collectives"].items()
        for axis, link in axes.items()
    }


@pytest.fixture(scope="module")
def clean_bandwidths(tmp_path_factory) -> dict[str, float]:
    run, out = _calibrate(tmp_path_factory.mktemp("clean"), BENCH)
    assert run.exit_code == 0, run.stderr
    return _bandwidths(json.loads(out.read_text()))


@pytest.mark.parametrize(
    ("old", "new", "line_fragment"),
    [
        # a shard size with six extra digits
        ("collective,all_gather,row,4,8388608,", "collective,all_gather,row,4,8388608000000,", ""),
        # a shard size with extra digits that a chip could still hold
        (
            "collective,reduce_scatter,col,8,536870912,",
            "collective,reduce_scatter,col,8,53687091200,",
            "",
        ),
        # a ring size with extra digits
        ("collective,all_gather,row,8,8388608,", "collective,all_gather,row,8000,8388608,", ""),
        # a time missing three digits of its exponent sign (1000x too fast)
        (
            "collective,send_recv,col,4,134217728,,,,bf16,1.130155e-02",
            "collective,send_recv,col,4,134217728,,,,bf16,1.130155e-05",
            "",
        ),
    ],
)
def test_one_bad_csv_row_is_reported_and_excluded(
    tmp_path, clean_bandwidths, old, new, line_fragment
):
    assert old in BENCH
    line = BENCH[: BENCH.index(old)].count("\n") + 1
    run, out = _calibrate(tmp_path, BENCH.replace(old, new, 1), "--format", "json")
    assert run.exit_code == 0, run.stderr
    reported = [w for w in run.stderr.splitlines() if f"bench.csv:{line}:" in w]
    assert reported and "excluded" in reported[0], run.stderr
    fitted = _bandwidths(json.loads(out.read_text()))
    for pair, bw in clean_bandwidths.items():
        assert fitted[pair] == pytest.approx(bw, rel=0.05), pair


def test_one_bad_csv_row_screen_keeps_consistent_noisy_data():
    """The busy-machine outliers of the example (x1.5 to x3) are not
    inconsistent rows; the robust fit handles them."""
    ring = np.array([2, 2, 2, 4, 4, 4, 8, 8, 8], dtype=float)
    shard = np.array([1e4, 1e6, 1e8] * 3)
    seconds = 1e-5 * ring + (ring - 1) * shard / 1e10
    seconds[4] *= 3.0  # an outlier, not a typo
    work = np.stack([ring, shard], axis=1)
    assert inconsistent_rows(work, seconds) == []
    seconds[7] /= INCONSISTENCY_FACTOR * 20  # a typo
    assert inconsistent_rows(work, seconds) == [7]


def _noisy_bench() -> str:
    rng = random.Random(1)
    rows = []
    for line in BENCH.splitlines():
        cells = line.split(",")
        if cells[0] == "collective":
            cells[-1] = f"{float(cells[-1]) * rng.choice([0.3, 1.0, 3.0]):.6e}"
        rows.append(",".join(cells))
    return "\n".join(rows) + "\n"


def test_poor_fit_is_not_written_without_accept_poor_fit(tmp_path):
    run, out = _calibrate(tmp_path, _noisy_bench())
    assert_one_line_error(run, "bench.csv", "poor fit", "--accept-poor-fit")
    assert not out.exists()


def test_poor_fit_accepted_is_written_and_plan_warns(tmp_path):
    run, out = _calibrate(tmp_path, _noisy_bench(), "--accept-poor-fit")
    assert run.exit_code == 0, run.stderr
    assert "written with --accept-poor-fit" in run.stdout
    plan = run_cli("plan", GPT3, "--calibration", str(out), "--format", "json")
    assert plan.exit_code == 0, plan.stderr
    warnings = json.loads(plan.stdout)["warnings"]
    assert any("poor fit" in w for w in warnings), warnings


def test_plan_warns_when_its_calibration_is_extrapolated(tmp_path):
    large = (",8388608,", ",33554432,", ",134217728,", ",536870912,")
    text = "\n".join(line for line in BENCH.splitlines() if not any(size in line for size in large))
    run, out = _calibrate(tmp_path, text + "\n")
    assert run.exit_code == 0, run.stderr
    plan = run_cli("plan", GPT3, "--calibration", str(out), "--format", "json")
    assert plan.exit_code == 0, plan.stderr
    doc = json.loads(plan.stdout)
    beyond = [x for x in doc["extrapolations"] if x["kind"] == "collective"]
    assert any(x["measured"][1] == 2 * 2**20 and x["factor"] > 1 for x in beyond), beyond
    table = run_cli("plan", GPT3, "--calibration", str(out))
    assert "extrapolated:" in table.stdout and "2 MiB" in table.stdout


def test_bundled_calibration_plans_without_fit_warnings():
    plan = run_cli("plan", GPT3, "--format", "json")
    doc = json.loads(plan.stdout)
    assert not any("poor fit" in w for w in doc["warnings"]), doc["warnings"]
    assert doc["extrapolations"] == []


def test_messages_csv_cell_over_128_kib_is_bad_input_not_exit_3(tmp_path):
    # the csv module refuses a field over 128 KiB; that was exit 3
    lines = BENCH.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("collective,"))
    cells = lines[row].split(",")
    cells[1] = "x" * (200 * 1024)
    lines[row] = ",".join(cells)
    run, out = _calibrate(tmp_path, "\n".join(lines) + "\n")
    assert_one_line_error(run, "bench.csv:", "not a valid CSV row", "fix:")
    assert not out.exists()
