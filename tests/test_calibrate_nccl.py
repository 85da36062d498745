"""nccl-tests parser: one test per layout variant (fixtures in
tests/fixtures/nccl/, README there says what each imitates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.calibrate.fit_comm import fit_all
from autotune.calibrate.run import read_input
from autotune.errors import InputError
from cost_models import Axis, CollectiveOp

NCCL = Path(__file__).parent / "fixtures" / "nccl"
ROW = (Axis.ROW,)


def _read(name: str, axes=ROW):
    return read_input(str(NCCL / name), axes)


@pytest.mark.parametrize(
    ("name", "op", "ring", "first_shard", "first_s", "num_rows"),
    [
        # v2.18, -g 8: size 1024 / 8 ranks = 128 B; 18 + 7*(2.5 + 128 B/150 GB/s) = 35.51 us
        ("all_gather_8gpu_v2.18.txt", CollectiveOp.ALL_GATHER, 8, 128.0, 35.51e-6, 11),
        # v2.10 layout, op from the file name, size-0 rows skipped: 1024 / 4 = 256 B
        ("all_gather_perf_4gpu_v2.10.log", CollectiveOp.ALL_GATHER, 4, 256.0, 25.51e-6, 10),
        # 16 MPI ranks on 2 hosts, debug lines in the table: 4096 / 16 = 256 B, 150.2 us
        ("reduce_scatter_2nodes_mpi.txt", CollectiveOp.REDUCE_SCATTER, 16, 256.0, 150.2e-6, 10),
        # all-reduce of 8 B on 2 ranks: shard 2*8/2 = 8 B; #wrong is N/A (-c 0)
        ("all_reduce_no_check_na.txt", CollectiveOp.ALL_REDUCE, 2, 8.0, 20.50e-6, 13),
        # sendrecv in a markdown fence: one hop (ring 2), shard = the 8 B message
        ("sendrecv_fenced.md", CollectiveOp.SEND_RECV, 2, 8.0, 20.50e-6, 12),
        # alltoall 8192 / 8 ranks = 1024 B to each peer
        ("alltoall_8gpu_v2.18.txt", CollectiveOp.ALL_TO_ALL, 8, 1024.0, 35.55e-6, 9),
    ],
)
def test_each_layout_parses(name, op, ring, first_shard, first_s, num_rows):
    parsed = _read(name)
    assert parsed.kind == "nccl-tests"
    rows = parsed.collectives
    assert len(rows) == num_rows
    assert {r.op for r in rows} == {op}
    assert {r.ring_size for r in rows} == {ring}
    assert rows[0].shard_bytes == first_shard
    assert rows[0].seconds == pytest.approx(first_s, rel=1e-12)
    assert parsed.skipped_lines == ()


def test_times_with_two_one_and_zero_decimals():
    """nccl-tests prints 35.51 (< 100 us), 1367.7 (< 10 ms) and 45906 (>= 10 ms)."""
    ag = [r.seconds for r in _read("all_gather_perf_4gpu_v2.10.log").collectives]
    assert 25.51e-6 in ag and pytest.approx(1367.7e-6) == ag[-1]
    rs = [r.seconds for r in _read("reduce_scatter_2nodes_mpi.txt").collectives]
    assert rs[-1] == pytest.approx(45906e-6)


def test_hosts_and_gpu_are_reported():
    single = _read("all_gather_8gpu_v2.18.txt").description
    assert "8 ranks on 1 host(s)" in single and "H100" in single and "intra-node" in single
    multi = _read("reduce_scatter_2nodes_mpi.txt").description
    assert "16 ranks on 2 host(s)" in multi and "inter-node" in multi


def test_axis_both_duplicates_rows_per_axis():
    parsed = _read("sendrecv_fenced.md", (Axis.ROW, Axis.COL))
    assert len(parsed.collectives) == 24
    assert {r.axis for r in parsed.collectives} == {Axis.ROW, Axis.COL}


def test_pooled_ring_sizes_separate_launch_from_sync():
    """8-rank and 4-rank all-gather logs together recover the fixture's
    parameters (18 us, 2.5 us, 150 GB/s) up to the printed rounding."""
    rows = [
        *_read("all_gather_8gpu_v2.18.txt").collectives,
        *_read("all_gather_perf_4gpu_v2.10.log").collectives,
    ]
    (fit,) = fit_all(rows)
    assert fit.ring_sizes == (4, 8)
    assert fit.launch_s == pytest.approx(18e-6, rel=0.01)
    assert fit.sync_s == pytest.approx(2.5e-6, rel=0.01)
    assert fit.link_bytes_per_s == pytest.approx(150e9, rel=0.01)


def test_single_log_keeps_launch_plus_sync():
    (fit,) = fit_all(_read("reduce_scatter_2nodes_mpi.txt").collectives)
    # 30 us + 15 * 8 us = 150 us is what one 16-rank log determines
    assert fit.combined_latency_s == pytest.approx(150e-6, rel=0.01)
    assert fit.link_bytes_per_s == pytest.approx(22e9, rel=0.01)
    assert "P=16" in fit.note


def test_log_without_table_names_file_and_line():
    with pytest.raises(InputError, match=r"no_table\.txt:14: has no nccl-tests result table"):
        _read("no_table.txt")


def test_garbled_row_is_skipped_not_misread(tmp_path):
    text = (NCCL / "all_gather_8gpu_v2.18.txt").read_text().splitlines()
    text[17] = text[17][:40] + " dgx-a-01:41872:41900 [0] NCCL INFO Connected"
    path = tmp_path / "garbled.txt"
    path.write_text("\n".join(text) + "\n")
    parsed = read_input(str(path), ROW)
    assert parsed.skipped_lines == (18,)
    assert len(parsed.collectives) == 10


def test_unsupported_test_is_rejected(tmp_path):
    text = (
        (NCCL / "all_gather_8gpu_v2.18.txt")
        .read_text()
        .replace("all_gather_perf", "broadcast_perf")
    )
    path = tmp_path / "bcast.txt"
    path.write_text(text)
    with pytest.raises(InputError, match=r"bcast\.txt:2: broadcast_perf is not an operation"):
        read_input(str(path), ROW)
