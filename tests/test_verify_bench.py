"""`meshtune bench`'s CSV writer and mesh choice (no JAX needed)."""

from __future__ import annotations

import pytest

from autotune.calibrate.csv_format import parse_csv
from autotune.verify.bench import BenchRow, default_meshes, to_csv
from cost_models import MeshShape


def test_default_meshes_give_two_ring_sizes_per_axis():
    # 8 devices: 2x4 and 4x2, so each axis is measured on rings of 2 and 4
    assert default_meshes(8) == (MeshShape(2, 4), MeshShape(4, 2))
    # 6 devices: 2x3 and 3x2; 4 devices: only 2x2; 3 devices: nothing with both sides >= 2
    assert default_meshes(6) == (MeshShape(2, 3), MeshShape(3, 2))
    assert default_meshes(4) == (MeshShape(2, 2),)
    assert default_meshes(3) == ()


def test_csv_is_what_calibrate_reads():
    rows = [
        BenchRow("collective", "fp32", 1.5e-4, op="all_gather", axis="row", ring_size=2,
                 shard_bytes=4096),
        BenchRow("collective", "fp32", 2.5e-4, op="reduce_scatter", axis="col", ring_size=4,
                 shard_bytes=65536),
        BenchRow("gemm", "fp32", 3.0e-3, m=256, n=128, k=64),
        BenchRow("collective", "fp32", 3.5e-4, op="all_to_all", axis="col", ring_size=4,
                 shard_bytes=16384),
        BenchRow("grouped_gemm", "fp32", 4.0e-3, m=64, n=512, k=256, groups=16),
    ]  # fmt: skip
    text = to_csv(rows, "jax 0 on cpu, 8 devices")
    lines = text.splitlines()
    assert lines[0].startswith("# meshtune bench")
    assert lines[1] == "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups"
    assert lines[2] == "collective,all_gather,row,2,4096,,,,fp32,0.00015,"
    assert lines[4] == "gemm,,,,,256,128,64,fp32,0.003,"
    assert lines[6] == "grouped_gemm,,,,,64,512,256,fp32,0.004,16"
    parsed = parse_csv(text, "bench.csv")
    assert parsed.kind == "meshtune-csv"
    assert (len(parsed.collectives), len(parsed.gemms)) == (3, 2)
    assert parsed.collectives[2].op.value == "all_to_all" and parsed.gemms[1].groups == 16


def test_overlap_rows_round_trip_and_give_the_slowdown():
    from autotune.calibrate.fit_overlap import fit_overlap

    rows = [
        BenchRow("gemm", "fp32", 2.0e-3, m=256, n=256, k=256),
        BenchRow("overlap", "fp32", 2.5e-3, op="all_gather", axis="row", ring_size=4,
                 shard_bytes=65536, m=256, n=256, k=256),
        BenchRow("overlap", "fp32", 2.2e-3, op="all_gather", axis="col", ring_size=2,
                 shard_bytes=65536, m=256, n=256, k=256),
        BenchRow("overlap", "fp32", 9.9e-3, op="all_gather", axis="col", ring_size=2,
                 shard_bytes=65536, m=64, n=64, k=64),
    ]  # fmt: skip
    text = to_csv(rows, "jax 0 on cpu, 8 devices")
    assert text.splitlines()[3] == "overlap,all_gather,row,4,65536,256,256,256,fp32,0.0025,"
    parsed = parse_csv(text, "bench.csv")
    assert len(parsed.overlaps) == 3 and parsed.overlaps[0].collective.ring_size == 4
    fit = fit_overlap(parsed.overlaps, parsed.gemms)
    # 2.5/2.0 and 2.2/2.0; the 64^3 row has no GEMM-alone row and is skipped
    assert fit.per_row == pytest.approx((1.25, 1.1)) and fit.skipped == 1
    assert fit.slowdown == pytest.approx(1.175) and fit.note is None


def test_cli_refuses_a_bad_mesh_in_one_line(tmp_path):
    """`meshtune bench` itself, without JAX: a mesh side of 0 is exit 2 with
    one line naming the option, the value and the fix, and no CSV."""
    from click.testing import CliRunner

    from autotune.cli import main

    out = tmp_path / "b.csv"
    result = CliRunner().invoke(main, ["bench", "--mesh", "3x0", "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "meshtune: error: --mesh: got '3x0'; both sides must be 1 to 4096; fix: e.g. --mesh 2x4"
    )
    assert not out.exists()
