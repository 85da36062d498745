"""`meshtune bench`'s CSV writer and mesh choice (no JAX needed)."""

from __future__ import annotations

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
    ]  # fmt: skip
    text = to_csv(rows, "jax 0 on cpu, 8 devices")
    lines = text.splitlines()
    assert lines[0].startswith("# meshtune bench")
    assert lines[1] == "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds"
    assert lines[2] == "collective,all_gather,row,2,4096,,,,fp32,0.00015"
    assert lines[4] == "gemm,,,,,256,128,64,fp32,0.003"
    parsed = parse_csv(text, "bench.csv")
    assert parsed.kind == "meshtune-csv"
    assert (len(parsed.collectives), len(parsed.gemms)) == (2, 1)
