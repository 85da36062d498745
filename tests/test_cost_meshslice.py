"""MeshSlice GEMM times and the slice-count rule, hand-computed (model.md
section 6; seed 000 sections 3.1 and 3.2.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cost_models import (
    Axis,
    CollectiveOp,
    CommModel,
    ComputeModel,
    Dataflow,
    LinkParams,
    LinkRegime,
    MeshShape,
    collective_calls,
    meshslice_estimate,
    meshslice_lower_bound_s,
    meshslice_times,
    slice_count_violation,
    valid_slice_counts,
)

AG, RDS = CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER
COMM = CommModel(
    {
        (AG, Axis.ROW): LinkParams(1e-6, 2e-6, 1e9),
        (AG, Axis.COL): LinkParams(1e-6, 2e-6, 2e9),
        (RDS, Axis.ROW): LinkParams(3e-6, 1e-6, 1e9),
        (RDS, Axis.COL): LinkParams(3e-6, 1e-6, 4e9),
    }
)
COMPUTE = ComputeModel(peak_flops_per_s=1e11)
MESH = MeshShape(2, 4)  # Nr = 2 rows, Nc = 4 columns
E = 2  # bytes per element


def test_os_hand_computed():
    # OS, M=64 N=128 K=256, S=2 on 2x4:
    # AG col (P=4) of A slices: (64/2)*(256/(4*2))*2 B = 2048 B: 1us + 3*(2us + 1.024us) = 10.072us
    # AG row (P=2) of B slices: (256/(2*2))*(128/4)*2 B = 4096 B: 1us + 1*(2us + 4.096us) = 7.096us
    # local GEMM 32 x 32 x 128: 2*32*32*128 / 1e11 = 2.62144us
    # prologue max(10.072, 7.096) + 1 * steady max(10.072, 7.096, 2.62144) + epilogue 2.62144
    est = meshslice_estimate(Dataflow.OS, 64, 128, 256, MESH, 2, E, COMM, COMPUTE)
    assert est.prologue_s == pytest.approx(10.072e-6)
    assert est.steady_s == pytest.approx(10.072e-6)
    assert est.epilogue_s == pytest.approx(2.62144e-6)
    assert est.total_s == pytest.approx(22.76544e-6)
    b = est.breakdown
    assert b.compute_s == pytest.approx(2 * 2.62144e-6)
    assert b.launch_s == pytest.approx(2 * (1e-6 + 1e-6))
    assert b.sync_s == pytest.approx(2 * (3 * 2e-6 + 1 * 2e-6))
    assert b.transfer_s == pytest.approx(2 * (3 * 1.024e-6 + 4.096e-6))
    assert b.exposed_comm_s == pytest.approx(22.76544e-6 - 2 * 2.62144e-6)


def test_ls_hand_computed():
    # LS, M=64 N=128 K=256, S=2 on 2x4:
    # AG row (P=2) of B slices: (128/(2*2))*(256/4)*2 B = 4096 B: 1us + (2us + 4.096us) = 7.096us
    # local GEMM 32 x 64 x 64: 262144 FLOP / 1e11 = 2.62144us
    # RdS col (P=4), out piece (64/2)*(128/(4*2))*2 = 1024 B: 3us + 3*(1us + 0.256us) = 6.768us
    # total = 7.096 + 1*max(7.096, 2.62144, 6.768) + (2.62144 + 6.768) = 23.58144us
    est = meshslice_estimate(Dataflow.LS, 64, 128, 256, MESH, 2, E, COMM, COMPUTE)
    assert est.prologue_s == pytest.approx(7.096e-6)
    assert est.steady_s == pytest.approx(7.096e-6)
    assert est.epilogue_s == pytest.approx(9.38944e-6)
    assert est.total_s == pytest.approx(23.58144e-6)


def test_rs_hand_computed():
    # RS, M=128 N=64 K=256, S=2 on 2x4:
    # AG col (P=4) of A slices: (256/2)*(128/(4*2))*2 B = 4096 B: 1us + 3*(2us + 2.048us) = 13.144us
    # local GEMM 64 x 16 x 128: 262144 FLOP / 1e11 = 2.62144us
    # RdS row (P=2), out piece (128/(2*2))*(64/4)*2 = 1024 B: 3us + (1us + 1.024us) = 5.024us
    # total = 13.144 + max(13.144, 2.62144, 5.024) + (2.62144 + 5.024) = 33.93344us
    est = meshslice_estimate(Dataflow.RS, 128, 64, 256, MESH, 2, E, COMM, COMPUTE)
    assert est.total_s == pytest.approx(33.93344e-6)
    assert est.epilogue_s == pytest.approx(7.64544e-6)


def test_transposed_variant_is_plain_on_transposed_mesh():
    # The twin swaps the mesh axes' roles: same as the plain schedule on a
    # 4x2 mesh whose row links are the 2x4 mesh's column links.
    twin = meshslice_estimate(Dataflow.OS, 64, 128, 256, MESH, 2, E, COMM, COMPUTE, transposed=True)
    plain = meshslice_estimate(
        Dataflow.OS, 64, 128, 256, MESH.transposed(), 2, E, COMM.swapped_axes(), COMPUTE
    )
    assert twin.total_s == pytest.approx(plain.total_s)
    # A slices (OS's COL all-gather on the 4x2 mesh, ring 2) travel on the
    # physical ROW axis; B slices (ring 4) on the physical COL axis
    assert {(c.op, c.axis, c.ring_size) for c in twin.calls} == {
        (AG, Axis.ROW, 2),
        (AG, Axis.COL, 4),
    }


def test_single_slice_is_unoverlapped_collective():
    # S=1: prologue + epilogue only = max(AG_row, AG_col) + whole local GEMM
    est = meshslice_estimate(Dataflow.OS, 64, 128, 256, MESH, 1, E, COMM, COMPUTE)
    assert est.total_s == pytest.approx(est.prologue_s + est.epilogue_s)


def test_bytes_per_chip_per_axis():
    # OS S=2: COL carries 2 iterations * 3 steps * 2048 B; ROW 2 * 1 * 4096 B
    calls = collective_calls(Dataflow.OS, 64, 128, 256, MESH, 2, E)
    by_axis = {ax: sum(c.bytes_sent_per_chip for c in calls if c.axis is ax) for ax in Axis}
    assert by_axis == {Axis.COL: 2 * 3 * 2048, Axis.ROW: 2 * 1 * 4096}


@pytest.mark.parametrize(
    ("dataflow", "mnk", "mesh", "block", "s", "valid"),
    [
        # OS slices K: 256 % (2*8*lcm(2,4)) = 256 % 64 == 0
        (Dataflow.OS, (64, 128, 256), MeshShape(2, 4), 8, 2, True),
        # 256 % (8*8*4) = 256 % 256 == 0; S=16 -> 512 does not divide
        (Dataflow.OS, (64, 128, 256), MeshShape(2, 4), 8, 8, True),
        (Dataflow.OS, (64, 128, 256), MeshShape(2, 4), 8, 16, False),
        # lcm(3, 4) = 12: K=96 -> S*8*12 = 96 for S=1 only
        (Dataflow.OS, (24, 24, 96), MeshShape(3, 4), 8, 1, True),
        (Dataflow.OS, (24, 24, 96), MeshShape(3, 4), 8, 2, False),
        # LS slices N: 128 % (4*8*4) == 0; RS slices M: 64 % (2*8*4) == 0, 64 % (4*8*4) != 0
        (Dataflow.LS, (64, 128, 256), MeshShape(2, 4), 8, 4, True),
        (Dataflow.RS, (64, 128, 256), MeshShape(2, 4), 8, 2, True),
        (Dataflow.RS, (64, 128, 256), MeshShape(2, 4), 8, 4, False),
    ],
)
def test_slice_count_rule(dataflow, mnk, mesh, block, s, valid):
    assert (slice_count_violation(dataflow, *mnk, mesh, block, s) is None) is valid


@given(
    dataflow=st.sampled_from(list(Dataflow)),
    nr=st.integers(1, 8),
    nc=st.integers(1, 8),
    block=st.sampled_from([1, 2, 8]),
    mult=st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(1, 12)),
)
def test_valid_slice_counts_are_exactly_the_rule(dataflow, nr, nc, block, mult):
    lcm = math.lcm(nr, nc)
    m, n, k = (x * lcm * block for x in mult)
    mesh = MeshShape(nr, nc)
    valid = valid_slice_counts(dataflow, m, n, k, mesh, block)
    dim = {Dataflow.OS: k, Dataflow.LS: n, Dataflow.RS: m}[dataflow]
    brute = [
        s
        for s in range(1, dim + 1)
        if slice_count_violation(dataflow, m, n, k, mesh, block, s) is None
    ]
    assert valid == brute
    assert 1 in valid


@given(
    dataflow=st.sampled_from(list(Dataflow)),
    s=st.sampled_from([1, 2, 4, 8]),
    transposed=st.booleans(),
)
def test_time_is_at_least_compute_and_critical_path(dataflow, s, transposed):
    t = meshslice_times(dataflow, 256, 256, 256, MESH, [s], E, COMM, COMPUTE, transposed)
    assert t["total_s"][0] >= t["compute_s"][0] - 1e-15
    comm_total = t["launch_s"][0] + t["sync_s"][0] + t["transfer_s"][0]
    # the critical path never exceeds doing everything in sequence
    assert t["total_s"][0] <= t["compute_s"][0] + comm_total + 1e-12


SHARED = CommModel(
    {
        (AG, Axis.ROW): LinkParams(
            1e-6,
            2e-6,
            1e9,
            regimes=(LinkRegime(4096.0, 5e-6, 1e-6, 3e9), LinkRegime(math.inf, 1e-6, 2e-6, 1e9)),
        ),
        (AG, Axis.COL): LinkParams(1e-6, 2e-6, 2e9),
        (RDS, Axis.ROW): LinkParams(3e-6, 1e-6, 1e9),
        (RDS, Axis.COL): LinkParams(3e-6, 1e-6, 4e9),
    },
    resources={Axis.ROW: "switch", Axis.COL: "switch"},
)


def test_lower_bound_hand_computed():
    """OS, 256^3 on the 2 x 4 mesh: compute 2 * 256^3 / 8 / 1e11 = 41.94 us;
    the column all-gather of A moves 3 * (128 * 64 * 2 B) at 2 GB/s =
    24.58 us, the row all-gather of B 1 * (128 * 64 * 2 B) at 1 GB/s =
    16.38 us, on separate links. A 100x faster chip leaves the column
    gather; on one shared switch (SHARED, whose row link's fastest regime
    is 3 GB/s) the two add: 24.58 + 16384 / 3e9 = 30.04 us."""
    t = meshslice_lower_bound_s(Dataflow.OS, 256, 256, 256, MESH, E, COMM, COMPUTE)
    assert float(t) == pytest.approx(2 * 256**3 / 8 / 1e11)
    fast = ComputeModel(peak_flops_per_s=1e13)
    t = meshslice_lower_bound_s(Dataflow.OS, 256, 256, 256, MESH, E, COMM, fast)
    assert float(t) == pytest.approx(3 * 16384 / 2e9)
    t = meshslice_lower_bound_s(Dataflow.OS, 256, 256, 256, MESH, E, SHARED, fast)
    assert float(t) == pytest.approx(3 * 16384 / 2e9 + 16384 / 3e9)


@given(
    dataflow=st.sampled_from(list(Dataflow)),
    mult=st.tuples(*(st.integers(1, 64) for _ in range(3))),
    mesh=st.sampled_from([MESH, MeshShape(4, 2), MeshShape(1, 8), MeshShape(8, 8)]),
    transposed=st.booleans(),
    comm=st.sampled_from([COMM, SHARED]),
    peak=st.sampled_from([1e11, 1e13, 1e15]),
    slowdown=st.sampled_from([1.0, 1.2]),
)
def test_lower_bound_never_above_any_slice_count(
    dataflow, mult, mesh, transposed, comm, peak, slowdown
):
    """meshslice_lower_bound_s at or below meshslice_times at every slice
    count, on separate and on shared links, with size regimes, for compute-
    and communication-bound shapes."""
    m, n, k = (64 * x for x in mult)
    compute = ComputeModel(peak_flops_per_s=peak, max_efficiency=0.8, m_half=64.0)
    t = meshslice_times(
        dataflow, m, n, k, mesh, [1, 2, 4, 8, 16], E, comm, compute, transposed, slowdown
    )
    bound = float(meshslice_lower_bound_s(dataflow, m, n, k, mesh, E, comm, compute, transposed))
    assert bound > 0
    assert np.all(bound <= t["total_s"] * (1 + 1e-12))
