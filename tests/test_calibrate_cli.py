"""`meshtune calibrate` end to end: golden JSON, the report, bad input, and
`meshtune plan --calibration` using the result."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsoncheck import assert_json_close

from autotune.cli import main
from autotune.specs.calibration import CalibrationSpec

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MESHTUNE_UPDATE_GOLDEN") == "1"
EXAMPLE = "calibration_data/example_bench.csv"
HEADER = "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds"


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_example_golden_json(repo_root, tmp_path):
    out = tmp_path / "cal.json"
    result = run("calibrate", EXAMPLE, "--out", str(out), "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert json.loads(result.stdout) == doc
    spec = CalibrationSpec.model_validate(doc)
    assert spec.inputs[0].path == EXAMPLE and spec.inputs[0].rows_used == 287
    assert spec.tool_version and spec.compute.efficiency_curve is not None
    path = GOLDEN / "calibrate_example.json"
    if UPDATE:
        path.write_text(json.dumps(doc, indent=2) + "\n")
    # scipy's optimiser may differ in the last digits between versions
    assert_json_close(doc, json.loads(path.read_text()), rel=1e-6)


def test_example_recovers_the_tpu_v4_links(repo_root, tmp_path):
    """The example CSV is generated from tpu_v4.json with 5% noise and 5%
    outliers, 9 shard sizes, rings 2, 4, 8: bandwidths come back within 5%."""
    out = tmp_path / "cal.json"
    assert run("calibrate", EXAMPLE, "--out", str(out)).exit_code == 0
    fitted = json.loads(out.read_text())["collectives"]
    truth = json.loads(Path("calibration_data/tpu_v4.json").read_text())["collectives"]
    for op, axes in truth.items():
        for axis, link in axes.items():
            got = fitted[op][axis]
            assert got["link_bytes_per_s"] == pytest.approx(link["link_bytes_per_s"], rel=0.05)
            assert got["fit"]["r2"] > 0.98


def test_table_report_has_parameters_quality_and_plot(repo_root, tmp_path):
    result = run("calibrate", EXAMPLE, "--out", str(tmp_path / "c.json"))
    assert result.exit_code == 0
    for text in (
        "all_gather.row",
        "launch µs",
        "bw GB/s",
        "rms err",
        "TFLOP/s",
        "Measured vs fitted",
        "7 = gemm bf16",
        "wrote",
    ):
        assert text in result.stdout


def test_nccl_logs_with_base_keep_uncovered_pairs(repo_root, tmp_path):
    out = tmp_path / "gpu.json"
    result = run(
        "calibrate",
        "tests/fixtures/nccl/all_gather_8gpu_v2.18.txt",
        "tests/fixtures/nccl/all_gather_perf_4gpu_v2.10.log",
        "--axis",
        "col",
        "--base",
        "tpu-v4",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["collectives"]["all_gather"]["col"]["link_bytes_per_s"] == pytest.approx(
        150e9, rel=0.01
    )
    assert doc["base_calibration"] == "tpu-v4"
    assert "all_gather.row" in doc["kept_from_base"] and "compute" in doc["kept_from_base"]
    assert "all_gather.col" not in doc["kept_from_base"]


def test_single_ring_log_is_reported_not_split(repo_root, tmp_path):
    result = run(
        "calibrate",
        "tests/fixtures/nccl/reduce_scatter_2nodes_mpi.txt",
        "--base",
        "tpu-v4",
        "--out",
        str(tmp_path / "c.json"),
    )
    assert result.exit_code == 0
    assert "L+(P-1)S" in result.stdout
    assert "only launch_s + (P-1)*sync_s" in " ".join(result.stdout.split())


def test_no_gemm_rows_and_no_chip_leaves_compute_to_the_plan_loudly(repo_root, tmp_path):
    links = tmp_path / "links.csv"
    rows = "".join(
        f"collective,{op},{axis},4,{s},,,,bf16,{1e-5 + 3 * s / 1e10}\n"
        for op in ("all_gather", "reduce_scatter")
        for axis in ("row", "col")
        for s in (1e3, 1e5, 1e7)
    )
    links.write_text(f"{HEADER}\n{rows}")
    out = tmp_path / "c.json"
    result = run("calibrate", str(links), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["compute"] is None
    assert "no gemm rows and no chip preset" in " ".join(result.output.split())
    planned = run("plan", "examples/gpt3.yaml", "--calibration", str(out), "--format", "json")
    assert planned.exit_code == 0, planned.output
    assert "has no compute entry: compute times use cluster" in " ".join(planned.output.split())


def test_inputs_that_determine_nothing_are_an_error(repo_root, tmp_path):
    bad = tmp_path / "one_size.csv"
    bad.write_text(f"{HEADER}\ncollective,all_gather,row,4,1024,,,,bf16,1e-5\n")
    out = tmp_path / "c.json"
    result = run("calibrate", str(bad), "--out", str(out))
    assert result.exit_code == 2
    assert "measure nothing a calibration holds" in result.stderr and "--chip" in result.stderr
    assert not out.exists()


def test_no_gemm_rows_takes_compute_from_the_matched_chip_loudly(repo_root, tmp_path):
    """The A100 in the log's device lines picks the chip preset; its peak is
    the compute rate, and the report says so (never a silent TPU number)."""
    out = tmp_path / "c.json"
    result = run("calibrate", "tests/fixtures/nccl/sendrecv_fenced.md", "--out", str(out))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["chip"] == "a100-sxm4-40gb" and doc["from_preset"]
    assert doc["compute"]["effective_flops_per_s"] == doc["compute"]["peak_flops_per_s"]
    assert "tpu" not in json.dumps(doc["compute"]).lower()
    text = " ".join(result.output.split())
    assert "chip: a100-sxm4-40gb" in text
    assert "warning: compute: no gemm rows, so the rate is the a100-sxm4-40gb preset" in text


BAD_INPUTS = {
    "missing column": (
        "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype\n",
        r"bad\.csv:1: .*'seconds'",
    ),
    "negative time": (
        f"{HEADER}\ncollective,all_gather,row,2,1024,,,,bf16,-1e-5\n",
        r"bad\.csv:2: seconds: got '-1e-5'; must be from 1e-09 to 3600",
    ),
    "zero time": (f"# c\n{HEADER}\ngemm,,,,,64,64,64,bf16,0\n", r"bad\.csv:3: seconds: got '0'"),
    "empty file": ("", r"bad\.csv:1: is empty"),
    "unknown operation": (
        f"{HEADER}\ncollective,all_scatter,row,2,1024,,,,bf16,1e-5\n",
        r"bad\.csv:2: op: got 'all_scatter'; is not a known operation",
    ),
    "binary data": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"bad\.csv:3: is binary data"),
    "log with no table": (
        "# nThread 1 nGpus 8 minBytes 8\n#\n# Using devices\n"
        "#  Rank  0 Group  0 Pid   1 on h device  0 [0x18] NVIDIA H100\n",
        r"bad\.csv:4: has no nccl-tests result table",
    ),
    "neither": ("hello\n", r"bad\.csv:1: is neither a meshtune benchmark CSV"),
    "nccl zero time": (
        (Path(__file__).parent / "fixtures/nccl/all_gather_8gpu_v2.18.txt")
        .read_text()
        .replace("   35.51", "    0.00"),
        r"bad\.csv:\d+: time: got '0.00'; must be a time from 0.001 to 3.6e\+09 microseconds",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_malformed_input_exit_2_one_line_nothing_written(tmp_path, case):
    content, pattern = BAD_INPUTS[case]
    bad = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    out = tmp_path / "cal.json"
    result = run("calibrate", str(bad), "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert re.search(pattern, result.stderr), result.stderr
    assert not out.exists()


def test_plan_uses_the_calibration_and_records_its_source(repo_root, tmp_path):
    """Written last: needs `meshtune plan --format json` (inputs.calibration,
    summary.step_fc_time_s, mesh). Halving every link's bandwidth must slow
    the plan, and the plan must name the file and its hash."""
    default = json.loads(run("plan", "examples/gpt3.yaml", "--format", "json").stdout)
    cal = tmp_path / "slow.json"
    assert run("calibrate", EXAMPLE, "--out", str(cal)).exit_code == 0
    doc = json.loads(cal.read_text())
    for axes in doc["collectives"].values():
        for link in axes.values():
            link["link_bytes_per_s"] /= 8
    slow = tmp_path / "slow8.json"
    slow.write_text(json.dumps(doc))
    planned = {}
    for path in (cal, slow):
        result = run("plan", "examples/gpt3.yaml", "--calibration", str(path), "--format", "json")
        assert result.exit_code == 0, result.output
        planned[path] = json.loads(result.stdout)
        ref = planned[path]["provenance"]["calibration"]
        assert ref["path"] == str(path)
        assert ref["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert ref["name"] == "slow" and ref["source"].startswith("fitted by meshtune")
    fitted = planned[cal]["fc"]["step_fc_time_s"]
    slower = planned[slow]["fc"]["step_fc_time_s"]
    assert fitted != default["fc"]["step_fc_time_s"]
    assert slower > fitted * 1.05


def test_plot_png_needs_the_extra_or_writes_an_image(repo_root, tmp_path):
    out, png = tmp_path / "c.json", tmp_path / "fit.png"
    result = run("calibrate", EXAMPLE, "--out", str(out), "--plot", str(png))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 2
        assert "--plot: needs matplotlib" in result.stderr and "meshtune[plot]" in result.stderr
        assert not out.exists() and not png.exists()
    else:
        assert result.exit_code == 0
        assert png.read_bytes()[:4] == b"\x89PNG"


def test_plan_shows_the_calibrations_expected_error(repo_root, tmp_path):
    cal = tmp_path / "cal.json"
    assert run("calibrate", EXAMPLE, "--out", str(cal)).exit_code == 0
    expected = json.loads(cal.read_text())["expected_error"]
    table = run("plan", "examples/gpt3.yaml", "--calibration", str(cal))
    assert table.exit_code == 0, table.output
    median = expected["collective_median_rel_error"]
    text = " ".join(table.output.split())
    assert "error band ±" in text and f"collectives {median:.1%}," in text
    doc = json.loads(run("plan", "examples/gpt3.yaml", "--calibration", str(cal), "--format",
                         "json").stdout)  # fmt: skip
    assert doc["provenance"]["calibration"]["expected_error"] == expected
    # a calibration without held-out errors (the bundled presets) leaves the key out
    old = json.loads(run("plan", "examples/gpt3.yaml", "--format", "json").stdout)
    assert "expected_error" not in old["provenance"]["calibration"]


def test_report_names_the_resource_it_writes_not_row_and_col(tmp_path: Path) -> None:
    """A two-host log is written as collectives.all_reduce.scale_out: the
    report's table, regime table and plot legend say scale_out, once, not
    the mesh axes row and col the rows were fed to (issue 35)."""
    log = GOLDEN.parent / "fixtures" / "public_logs" / "h100_2node_all_reduce_a3mega.txt"
    result = run("calibrate", str(log), "--out", str(tmp_path / "c.json"))
    assert result.exit_code == 0
    text = re.sub(r"\s+", "", result.stdout)  # table cells fold long labels
    assert "all_reduce.scale_outregimes" in text
    assert "all_reduce.row" not in text and "all_reduce.col" not in text
    assert "1=all_reduce.scale_out" in text and "2=" not in text


def test_grouped_gemm_and_all_to_all_rows_calibrate(tmp_path: Path) -> None:
    """grouped_gemm rows (with the optional groups column) join the GEMM
    fit; all_to_all collective rows are written as their own entry, which
    the expert all-to-all is priced with."""
    from cost_models import ComputeModel

    truth = ComputeModel(7e14, 1.0, 0.0, 0.0, 0.0, hbm_bytes_per_s=3.35e12)
    lines = ["kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups"]
    for m in (512, 2048, 8192):
        for n in (1024, 4096):
            for k in (1024, 4096):
                lines.append(f"gemm,,,,,{m},{n},{k},bf16,{float(truth.gemm_s(m, n, k)):.6g},")
    for g in (8, 32):
        t = float(truth.gemm_s(256, 2048, 1024, g))
        lines.append(f"grouped_gemm,,,,,256,2048,1024,bf16,{t:.6g},{g}")
    for shard in (2**16, 2**18, 2**20, 2**22, 2**24, 2**26):
        t = 20e-6 + 7 * (2e-6 + shard / 150e9)
        lines.append(f"collective,all_to_all,row,8,{shard},,,,,{t:.6g},")
        lines.append(f"collective,all_gather,row,8,{shard},,,,,{20e-6 + 7 * shard / 300e9:.6g},")
    bench = tmp_path / "bench.csv"
    bench.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(
        main, ["calibrate", str(bench), "--out", str(out), "--chip", "h100-sxm"]
    )
    assert result.exit_code == 0, result.output
    assert "(2 grouped)" in result.output
    cal = json.loads(out.read_text())
    (a2a,) = cal["collectives"]["all_to_all"].values()
    (ag,) = cal["collectives"]["all_gather"].values()
    assert a2a["link_bytes_per_s"] == pytest.approx(150e9, rel=0.02)
    assert ag["link_bytes_per_s"] == pytest.approx(300e9, rel=0.02)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            "grouped_gemm,,,,,256,2048,1024,bf16,0.001,",
            "bench.csv:2: groups: is required in a grouped_gemm row; fix: add a groups column "
            "after seconds with the number of groups (experts) the kernel ran",
        ),
        (
            "gemm,,,,,256,2048,1024,bf16,0.001,4",
            "bench.csv:2: groups: got '4'; must be empty in a gemm row; fix: leave groups empty",
        ),
        (
            "grouped_gemm,,,,,256,2048,1024,bf16,0.001,0",
            "bench.csv:2: groups: got '0'; must be from 1 to 281474976710656; fix: write groups "
            "as a whole number from 1 to 281474976710656",
        ),
    ],
)
def test_bad_grouped_gemm_rows_exit_2(tmp_path: Path, row: str, expected: str) -> None:
    bench = tmp_path / "bench.csv"
    bench.write_text("kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups\n" + row + "\n")
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(bench), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().endswith(expected), result.output
    assert not out.exists()


HOST_ROWS = "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds\n" + "".join(
    f"host_launch,,,,,,,,,{s}\n" for s in ("1.37e-05", "2.03e-05", "1.03e-05")
)


def test_host_launch_rows_set_the_calibrations_host_launch_s(tmp_path: Path) -> None:
    """Three `host_launch` rows (10.3, 13.7 and 20.3 us) beside a base: the
    calibration's host_launch_s is their median, 13.7 us, the report says
    so, and a fine-grained MoE plan names it as the calibration's. Without
    rows the base's value is kept and listed as kept."""
    from planning import EP8_FP8, LLAMA, pinned, plan_for

    from autotune.job.report import experts_line

    # 128 experts of width 768 at EP 8: 16 local experts, host-bound in FP8
    fine = {
        **LLAMA,
        "name": "fine-moe",
        "hidden_size": 2048,
        "num_heads": 32,
        "num_kv_heads": 4,
        "head_dim": 64,
        "moe": {"num_experts": 128, "experts_per_token": 8, "expert_ffn_size": 768},
    }
    training = {**EP8_FP8, "zero_stage": 3}

    rows = tmp_path / "host.csv"
    rows.write_text(HOST_ROWS)
    out = tmp_path / "cal.json"
    result = run("calibrate", str(rows), "--base", "h100-measured", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "host_launch_s 13.7 us: median of 3 host_launch rows (10.3-20.3 us)" in result.output
    doc = json.loads(out.read_text())
    assert doc["host_launch_s"] == pytest.approx(13.7e-6)
    assert "host_launch_s" not in doc["kept_from_base"]

    again = tmp_path / "again.json"
    gemms = Path(__file__).resolve().parents[1] / "calibration_data/measured/gemm_h100_bf16_xla.csv"
    result = run("calibrate", str(gemms), "--base", str(out), "--out", str(again))
    assert result.exit_code == 0, result.output
    kept = json.loads(again.read_text())
    assert kept["host_launch_s"] == pytest.approx(13.7e-6)
    assert "host_launch_s" in kept["kept_from_base"]

    plan = plan_for(tmp_path, fine, pinned(training), "h100-hgx", calibration=str(out))
    assert "at 13.7 us (the calibration's host_launch_s)" in experts_line(plan)


@pytest.mark.parametrize(
    ("row", "text"),
    [
        (
            "host_launch,,,,,,,,bf16,1.37e-05",
            "dtype: got 'bf16'; must be empty in a host_launch row",
        ),
        ("host_launch,,,,,8,,,,1.37e-05", "m: got '8'; must be empty in a host_launch row"),
        ("host_launch,,,,,,,,,0.002", "seconds: got '0.002'; is above 1 ms"),
    ],
)
def test_bad_host_launch_rows_are_one_line(tmp_path: Path, row: str, text: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(f"kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds\n{row}\n")
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert f"bad.csv:2: {text}" in line and "fix: " in line
    assert not out.exists()
