"""A calibration from nccl-tests logs names the resource it measured
(switched, fully_connected, scale_out), and a plan prices each mesh axis
with the entry of the resource the axis lands on, taking what the
calibration lacks from the cluster's own (nominal) calibration with a
warning. End to end: calibrate a single-node log, plan a multi-node
example with it, and check which link each axis used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.loading import load_calibration, load_plan_input
from autotune.plan.context import check_calibration, search_context
from cost_models import Axis, CollectiveOp, MeshShape

LOGS = Path(__file__).parent / "fixtures" / "public_logs"
EXAMPLES = Path(__file__).parent.parent / "examples"


def _calibrate(tmp_path: Path, log: str, *flags: str) -> tuple[dict, str]:
    out = tmp_path / "cal.json"
    result = CliRunner().invoke(main, ["calibrate", str(LOGS / log), "--out", str(out), *flags])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text()), result.output


def test_single_node_nvidia_log_calibrates_the_switch(tmp_path: Path) -> None:
    cal, report = _calibrate(tmp_path, "a100_sendrecv_note.md", "--cluster", "a100-hgx")
    assert set(cal["collectives"]) == {"send_recv"}
    assert set(cal["collectives"]["send_recv"]) == {"switched"}
    assert "written as collectives.send_recv.switched" in report
    assert "NVSwitch" in " ".join(report.split())


def test_single_node_mi300x_log_calibrates_one_xgmi_link(tmp_path: Path) -> None:
    cal, report = _calibrate(tmp_path, "mi300x_1node_rccl_all_reduce.txt")
    link = cal["collectives"]["all_reduce"]["fully_connected"]
    assert set(cal["collectives"]["all_reduce"]) == {"fully_connected"}
    # the log's 8 ranks drive 7 direct links: one link carries a seventh of the fitted rate
    assert "7 links" in " ".join(report.split())
    # under the MI300X's 64 GB/s per-link nominal rate (mi300x-node preset)
    assert 20e9 < link["link_bytes_per_s"] < 64e9


def test_multi_host_log_calibrates_scale_out(tmp_path: Path) -> None:
    cal, report = _calibrate(tmp_path, "h100_2node_all_reduce_a3mega.txt")
    assert set(cal["collectives"]["all_reduce"]) == {"scale_out"}
    assert "written as collectives.all_reduce.scale_out" in report


def test_plan_uses_the_calibrated_switch_and_nominal_rails(tmp_path: Path) -> None:
    cal, _ = _calibrate(tmp_path, "a100_sendrecv_note.md", "--cluster", "a100-hgx")
    inp = load_plan_input(
        EXAMPLES / "megatron-gpt-175b-a100.yaml", calibration_override=str(tmp_path / "cal.json")
    )
    nominal, _ = load_calibration("a100-nominal")
    warnings = " ".join(" ".join(check_calibration(inp)).split())
    assert "has no switched links (all_gather, reduce_scatter)" in warnings
    assert "has no scale_out links" in warnings and "a100-nominal" in warnings

    # 8 x 8 mesh on 8 nodes of 8: col inside a node (NVSwitch), row across nodes (NICs)
    ctx = search_context(inp).for_mesh(MeshShape(8, 8))
    assert ctx.placement is not None
    assert ctx.placement.col.kind.value == "switched"
    assert ctx.placement.row.kind.value == "scale_out"
    measured = cal["collectives"]["send_recv"]["switched"]["link_bytes_per_s"]
    col_send = ctx.comm.link(CollectiveOp.SEND_RECV, Axis.COL)
    assert col_send.link_bytes_per_s == pytest.approx(measured)
    for op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
        col = ctx.comm.link(op, Axis.COL).link_bytes_per_s
        row = ctx.comm.link(op, Axis.ROW).link_bytes_per_s
        assert col == pytest.approx(nominal.collectives[op.value]["switched"].link_bytes_per_s)
        assert row == pytest.approx(nominal.collectives[op.value]["scale_out"].link_bytes_per_s)
    # the rails are never priced at the measured NVLink rate
    row_send = ctx.comm.link(CollectiveOp.SEND_RECV, Axis.ROW).link_bytes_per_s
    assert row_send == pytest.approx(nominal.collectives["send_recv"]["scale_out"].link_bytes_per_s)
    assert row_send < measured / 2


def test_plan_cli_shows_the_fallback_warning(tmp_path: Path) -> None:
    _calibrate(tmp_path, "a100_sendrecv_note.md", "--cluster", "a100-hgx")
    result = CliRunner().invoke(
        main,
        [
            "plan",
            str(EXAMPLES / "megatron-gpt-175b-a100.yaml"),
            "--calibration",
            str(tmp_path / "cal.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "mesh axes on scale_out use cluster a100-hgx-8n's calibration a100-nominal" in text


def test_llama_h100_example_with_a_single_node_h100_log(tmp_path: Path) -> None:
    """The 8 x H100 one-host all-gather log of the parser fixtures, no flags:
    all_gather.switched; the 32-node Llama example prices its in-node axis
    with it and its cross-node axis with h100-nominal's scale_out."""
    out = tmp_path / "h100.json"
    log = Path(__file__).parent / "fixtures" / "nccl" / "all_gather_8gpu_v2.18.txt"
    result = CliRunner().invoke(main, ["calibrate", str(log), "--out", str(out)])
    assert result.exit_code == 0, result.output
    cal = json.loads(out.read_text())
    assert set(cal["collectives"]["all_gather"]) == {"switched"}
    assert cal["chip"] == "h100-sxm"
    inp = load_plan_input(EXAMPLES / "llama3-70b-h100.yaml", calibration_override=str(out))
    nominal, _ = load_calibration("h100-nominal")
    warnings = " ".join(" ".join(check_calibration(inp)).split())
    assert "has no scale_out links" in warnings and "h100-nominal" in warnings
    assert "has no switched links (reduce_scatter)" in warnings
    ctx = search_context(inp).for_mesh(MeshShape(32, 8))
    assert ctx.placement.col.kind.value == "switched"
    assert ctx.placement.row.kind.value == "scale_out"
    measured = cal["collectives"]["all_gather"]["switched"]["link_bytes_per_s"]
    assert ctx.comm.link(CollectiveOp.ALL_GATHER, Axis.COL).link_bytes_per_s == pytest.approx(
        measured
    )
    nominal_rail = nominal.collectives["all_gather"]["scale_out"].link_bytes_per_s
    row = ctx.comm.link(CollectiveOp.ALL_GATHER, Axis.ROW).link_bytes_per_s
    assert row == pytest.approx(nominal_rail)
    assert row < measured
