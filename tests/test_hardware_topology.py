"""Mesh axes on resources, per topology kind, with hand-computed times;
the roofline never beats peak or HBM; presets and bad cluster files."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import InputError
from autotune.hardware.calibration import (
    check_links_within_nominal,
    comm_model,
    comm_model_for,
    compute_model_for,
)
from autotune.hardware.cluster import load_cluster
from autotune.hardware.placement import ResourceKind, place_mesh
from autotune.loading import load_calibration, validate_spec
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.cluster import ClusterSpec
from cost_models import Axis, CollectiveOp, ComputeModel, Dataflow, MeshShape, meshslice_times
from cost_models.compute import TileModel, gemm_flops, gemm_hbm_bytes, tiled_gemm_work

W = 100e9  # unit link rate of the test calibration, bytes/s


def _calibration(
    keys: tuple[str, ...], rate: float = W, rates: dict[str, float] | None = None
) -> CalibrationSpec:
    """Zero latencies, one rate per unit link (or per key in `rates`):
    times are bytes / bandwidth."""
    rates = rates or {}

    def link(key: str) -> dict:
        return {"launch_s": 0.0, "sync_s": 0.0, "link_bytes_per_s": rates.get(key, rate)}

    ops = ("all_gather", "reduce_scatter", "send_recv")
    return CalibrationSpec.model_validate(
        {
            "schema": "meshtune.calibration/1",
            "name": "unit",
            "source": "test",
            "collectives": {op: {k: link(k) for k in keys} for op in ops},
            "compute": {"dtype": "bf16", "effective_flops_per_s": 1e12},
        }
    )


def _os_prologue_s(cluster_name: str, mesh: MeshShape, cal: CalibrationSpec) -> float:
    """The prologue of an unsliced OS GEMM: both all-gathers at once."""
    placement = place_mesh(load_cluster(cluster_name), mesh)
    comm = comm_model_for(cal, placement)
    t = meshslice_times(Dataflow.OS, 1024, 1024, 1024, mesh, [1], 2, comm, ComputeModel(1e15))
    return float(t["prologue_s"][0])


def test_nvswitch_node_pays_row_plus_col_bytes() -> None:
    # 2 x 4 inside one 8-GPU NVSwitch node; OS all-gathers A along col (4
    # chips, shard 512x256x2 B) and B along row (2 chips, shard 512x256x2 B)
    mesh = MeshShape(2, 4)
    shard = 512 * 256 * 2
    col_bytes, row_bytes = 3 * shard, 1 * shard
    t = _os_prologue_s("h100-hgx", mesh, _calibration(("switched",)))
    assert t == pytest.approx((row_bytes + col_bytes) / W)
    p = place_mesh(load_cluster("h100-hgx"), mesh)
    assert p.shared and p.row.kind is p.col.kind is ResourceKind.SWITCHED


def test_torus_pays_the_larger() -> None:
    # 16 x 16 on a 16x16 torus: each axis one wrapped dimension, 2 links
    mesh = MeshShape(16, 16)
    shard = (1024 // 16) * (1024 // 16) * 2
    t = _os_prologue_s("tpu-v5e-256", mesh, _calibration(("torus",)))
    assert t == pytest.approx(15 * shard / (2 * W))  # max(row, col), not their sum
    p = place_mesh(load_cluster("tpu-v5e-256"), mesh)
    assert not p.shared and p.row.link_multiplier == p.col.link_multiplier == 2


def test_original_torus_file_keeps_its_per_axis_links() -> None:
    cal, _ = load_calibration("tpu-v4")
    p = place_mesh(load_cluster("tpu-v4-256"), MeshShape(32, 8))
    assert p.row.kind is ResourceKind.CALIBRATED_AXIS and not p.shared
    assert comm_model_for(cal, p).params == comm_model(cal).params


@pytest.mark.parametrize(("mesh", "row_links", "col_links"), [((1, 8), 1, 7), ((2, 4), 1, 3)])
def test_mi300x_axis_of_k_gets_k_minus_1_links(mesh, row_links, col_links) -> None:
    shape = MeshShape(*mesh)
    p = place_mesh(load_cluster("mi300x-node"), shape)
    assert p.col.link_multiplier == col_links
    comm = comm_model_for(_calibration(("fully_connected",)), p)
    link = comm.link(CollectiveOp.ALL_GATHER, Axis.COL)
    assert link.link_bytes_per_s == pytest.approx(col_links * W)
    if shape.num_rows > 1:
        assert p.row.link_multiplier == row_links and not p.shared


def test_axis_spanning_nodes_is_bounded_by_the_nic() -> None:
    cluster = load_cluster("h100-hgx-4n")
    assert cluster.num_chips == 32 and cluster.num_nodes == 4
    # 4 x 8: col (8) fills a node, row (4) crosses the 4 nodes on the rails
    p = place_mesh(cluster, MeshShape(4, 8))
    assert p.col.kind is ResourceKind.SWITCHED and not p.col.spans_nodes
    assert p.row.kind is ResourceKind.SCALE_OUT and p.row.spans_nodes
    assert p.row.nominal_bytes_per_s == pytest.approx(50e9)
    assert not p.shared  # NVLink beside the NIC
    # 2 x 16: col (16) does not fit in a node; both axes on the NICs, shared
    p = place_mesh(cluster, MeshShape(2, 16))
    assert p.col.kind is p.row.kind is ResourceKind.SCALE_OUT and p.shared
    # the nominal calibration prices the crossing axis at its NIC rate
    nominal, _ = load_calibration("h100-nominal")
    comm = comm_model_for(nominal, place_mesh(cluster, MeshShape(4, 8)))
    row = comm.link(CollectiveOp.ALL_GATHER, Axis.ROW)
    assert row.link_bytes_per_s == pytest.approx(50e9 * 0.9)
    assert row.link_bytes_per_s <= p.row.nominal_bytes_per_s


def test_group_across_nodes_drives_its_chips_rails() -> None:
    """A ring of P chips with a in each node leaves each node once per NCCL
    channel, one channel per NIC rail: per chip it moves at a NICs' rate,
    at most the node's own links (placement.scale_out_rails)."""
    from autotune.hardware.cluster import Cluster
    from autotune.hardware.layout import ParallelAxis, place_layout
    from autotune.hardware.placement import group_chips_per_node, scale_out_rails

    a100 = load_cluster("a100-hgx-4n")  # 8 per node, 300 GB/s NVSwitch, 25 GB/s NICs
    # 1 x 16: the col ring spans two nodes, 8 chips in each: 8 rails, 200 GB/s
    p = place_mesh(a100, MeshShape(1, 16))
    assert p.col.kind is ResourceKind.SCALE_OUT and p.col.link_multiplier == 8
    assert p.col.nominal_bytes_per_s == pytest.approx(200e9)
    assert "8 per node on 8 NIC rails (200 GB/s)" in p.col.description
    # 4 x 8: each row ring has one chip per node: one rail, as before
    assert place_mesh(a100, MeshShape(4, 8)).row.link_multiplier == 1
    # TP 2 x DP 8 on two nodes: each data-parallel group has 4 chips per node
    layout = place_layout(load_cluster("a100-hgx-2n"), MeshShape(1, 2), 8, 1)
    assert not isinstance(layout, str)
    (level,) = layout.axis(ParallelAxis.DATA).levels
    assert level.kind is ResourceKind.SCALE_OUT and level.link_multiplier == 4
    # chips per node of a group, by hand
    assert group_chips_per_node(8, 1, 16) == 8 and group_chips_per_node(8, 2, 8) == 4
    assert group_chips_per_node(8, 8, 4) == 1 and group_chips_per_node(8, 3, 8) == 1
    assert group_chips_per_node(8, 2, 2) == 2
    # node links slower than the rails together bound the ring: 100 / 25 = 4
    node = a100.spec.node.model_copy(update={"egress_gb_per_s": 100.0})
    slow = Cluster(a100.spec.model_copy(update={"node": node}), a100.chip)
    assert scale_out_rails(slow, 1, 16) == (4.0, 8)
    assert "bounded by the node's links" in place_mesh(slow, MeshShape(1, 16)).col.description


def test_crossing_axis_time_is_bytes_over_the_nic() -> None:
    # 4 x 8 on 4 nodes, OS unsliced: B all-gathered along row (4 chips across
    # the rails, 3 steps of 256x128x2 B at the NIC's 40 GB/s), A along col
    # (8 chips in the node, 7 steps of 256x128x2 B at 400 GB/s); separate
    # resources, so the prologue is the slower of the two: the NIC's
    cal = _calibration(("switched", "scale_out"), rates={"switched": 400e9, "scale_out": 40e9})
    shard = 256 * 128 * 2
    t = _os_prologue_s("h100-hgx-4n", MeshShape(4, 8), cal)
    assert t == pytest.approx(max(3 * shard / 40e9, 7 * shard / 400e9)) == 3 * shard / 40e9


def test_calibration_above_nominal_links_is_refused() -> None:
    cal = _calibration(("scale_out",), rate=60e9)  # a 400 Gb/s NIC moves 50 GB/s
    with pytest.raises(InputError, match=r"scale_out.link_bytes_per_s.*above the nominal 50.0"):
        check_links_within_nominal(cal, load_cluster("h100-hgx-2n"), "cal.json")


def test_torus_dims_assigned_innermost_first() -> None:
    p = place_mesh(load_cluster("tpu-v5p-256"), MeshShape(32, 8))  # dims [4, 8, 8]
    assert p.col.resource == "torus dims 2" and p.col.link_multiplier == 2
    assert p.row.resource == "torus dims 0+1" and p.row.link_multiplier == 4
    assert not p.shared


def test_node_count_in_the_preset_name() -> None:
    c = load_cluster("h100-hgx-32n")
    assert (c.name, c.num_chips, c.chips_per_node, c.num_nodes) == ("h100-hgx-32n", 256, 8, 32)
    assert c.peak_flops_per_s("bf16") == pytest.approx(989e12)
    assert c.hbm_bytes_per_s == pytest.approx(3.35e12)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"node": None}, "node is required for topology switched"),
        ({"scale_out": None}, "span several nodes but scale_out is missing"),
        ({"num_chips": 12}, "not a whole number of 8-chip nodes"),
        ({"torus": {"dims": [2, 8], "wraparound": [True, True], "link_gb_per_s": 1}},
         "torus is set on a switched cluster"),
    ],
)  # fmt: skip
def test_bad_cluster_files(patch, message) -> None:
    data = {
        "name": "x",
        "num_chips": 16,
        "topology": "switched",
        "chip": "h100-sxm",
        "node": {"chips_per_node": 8, "egress_gb_per_s": 450},
        "scale_out": {"nic_gb_per_s": 50, "rails": 8},
    }
    data.update(patch)
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(InputError, match=message):
        validate_spec(ClusterSpec, data, file="c.yaml")


def test_calibration_above_peak_is_refused() -> None:
    cal = _calibration(("switched",))
    fast = cal.model_copy(
        update={"compute": cal.compute.model_copy(update={"effective_flops_per_s": 1.2e15})}
    )
    with pytest.raises(InputError, match=r"1200.0 TFLOP/s, above the 989 TFLOP/s bf16 peak"):
        compute_model_for(fast, load_cluster("h100-hgx"), "bf16", 2)


@settings(max_examples=300, deadline=None)
@given(
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 1 << 16),
    k=st.integers(1, 1 << 16),
    peak=st.floats(1e12, 5e15),
    eff=st.floats(0.01, 1.0),
    halves=st.tuples(*[st.floats(0, 4096)] * 3),
    hbm=st.floats(1e11, 1e13),
    element_bytes=st.sampled_from([1, 2, 4]),
)
def test_no_gemm_beats_peak_or_hbm(m, n, k, peak, eff, halves, hbm, element_bytes) -> None:
    model = ComputeModel(peak, eff, *halves, hbm_bytes_per_s=hbm, element_bytes=element_bytes)
    t = float(model.gemm_s(m, n, k))
    assert t >= float(gemm_flops(m, n, k)) / peak * (1 - 1e-12)
    assert t >= float(gemm_hbm_bytes(m, n, k, element_bytes)) / hbm * (1 - 1e-12)
    assert math.isfinite(t)


def test_tiled_gemm_work_by_hand() -> None:
    """Tile and wave quantisation (cost_models.compute.tiled_gemm_work),
    on 132 cores with 128 x 128 tiles unless stated."""
    one = ((128, 128),)
    tile = 2 * 128 * 128 * 512  # FLOPs of one 128 x 128 tile at k = 512
    # 1024 x 1024: 64 tiles, one wave: every core busy for one tile
    assert tiled_gemm_work(1024, 1024, 512, 132, one) == 132 * tile
    # 1000 x 1000 pads to the same 64 tiles (tile quantisation)
    assert tiled_gemm_work(1000, 1000, 512, 132, one) == 132 * tile
    # 2048 x 2048: 256 tiles, two waves (wave quantisation); 2176 x 2048: 272, three
    assert tiled_gemm_work(2048, 2048, 512, 132, one) == 2 * 132 * tile
    assert tiled_gemm_work(2176, 2048, 512, 132, one) == 3 * 132 * tile
    # each tile's k overhead and the reuse penalty of a 128 x 128 tile
    assert tiled_gemm_work(1024, 1024, 512, 132, one, k_overhead=64) == 132 * tile * 576 / 512
    assert tiled_gemm_work(1024, 1024, 512, 132, one, reuse_penalty=16) == 132 * tile * 1.25
    # the cheapest tile: 33792 x 128 is 264 tiles of 128 x 128 (2 waves) or
    # 132 of 256 x 128 (1 wave of tiles twice the size): the same work; at
    # 256 x 128 a 128 x 128 tile halves a core's work against one 256 x 128
    two = ((128, 128), (256, 128))
    assert tiled_gemm_work(33792, 128, 512, 132, two) == 2 * 132 * tile
    assert tiled_gemm_work(256, 128, 512, 132, two) == 132 * tile
    # never less than the GEMM's own FLOPs
    assert tiled_gemm_work(4096, 4096, 4096, 132) >= 2 * 4096**3
    # 32 GEMMs of 256 x 256 in one batched kernel: 128 tiles, one wave; apart,
    # each is a wave of its own 4 tiles
    assert tiled_gemm_work(256, 256, 512, 132, one, batch=32) == 132 * tile
    assert 32 * tiled_gemm_work(256, 256, 512, 132, one) == 32 * 132 * tile


@settings(max_examples=300, deadline=None)
@given(
    m=st.integers(1, 1 << 16),
    n=st.integers(1, 1 << 16),
    k=st.integers(1, 1 << 16),
    peak=st.floats(1e12, 5e15),
    share=st.floats(0.01, 1.0),
    cores=st.integers(1, 512),
    launch=st.floats(0, 1e-4),
    k_overhead=st.floats(0, 512),
    reuse=st.floats(0, 64),
    hbm=st.floats(1e11, 1e13),
    batch=st.integers(1, 256),
)
def test_no_tiled_gemm_beats_peak_or_hbm(
    m, n, k, peak, share, cores, launch, k_overhead, reuse, hbm, batch
) -> None:
    tile = TileModel(cores, launch, k_overhead, reuse)
    model = ComputeModel(peak, share, hbm_bytes_per_s=hbm, ceiling_flops_per_s=peak, tile=tile)
    t = float(model.gemm_s(m, n, k, batch))
    assert t >= launch + batch * float(gemm_flops(m, n, k)) / peak * (1 - 1e-12)
    assert t >= batch * float(gemm_hbm_bytes(m, n, k, 2)) / hbm * (1 - 1e-12)
    # one batched kernel is never slower than its GEMMs one by one
    assert t <= batch * float(model.gemm_s(m, n, k)) * (1 + 1e-12)
    assert math.isfinite(t)


@pytest.mark.parametrize("cluster", ["h100-hgx-4n", "mi300x-node", "tpu-v5p-256", "h100-hgx"])
def test_roofline_from_presets_never_beats_peak(cluster) -> None:
    c = load_cluster(cluster)
    cal, _ = load_calibration(c.spec.calibration)
    model = compute_model_for(cal, c, "bf16", 2)
    for m, n, k in [(8, 8192, 8192), (1024, 4096, 4096), (65536, 128, 64), (16384,) * 3]:
        t = float(model.gemm_s(m, n, k))
        assert t >= 2 * m * n * k / c.peak_flops_per_s("bf16")
        assert t >= (m * k + k * n + m * n) * 2 / c.hbm_bytes_per_s


@settings(max_examples=200, deadline=None)
@given(
    lat=st.tuples(st.floats(0, 1e-3), st.floats(0, 1e-3)),
    xfer=st.tuples(st.floats(0, 1e-2), st.floats(0, 1e-2)),
)
def test_shared_resource_adds_separate_overlaps(lat, xfer) -> None:
    from cost_models import CommModel
    from cost_models.concurrency import concurrent_s

    calls = [(Axis.ROW, lat[0], xfer[0]), (Axis.COL, lat[1], xfer[1])]
    alone = [lat[0] + xfer[0], lat[1] + xfer[1]]
    separate = float(concurrent_s(calls, CommModel({})))
    shared = float(concurrent_s(calls, CommModel({}, {Axis.ROW: "sw", Axis.COL: "sw"})))
    assert separate == pytest.approx(max(alone))
    assert shared >= separate - 1e-15
    assert shared >= min(lat) + sum(xfer) - 1e-15
    assert shared <= sum(alone) + 1e-15
