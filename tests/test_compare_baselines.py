"""Hand-computed baseline GEMM times (cost_models.baselines, baselines_1d).

Every case uses toy units so the arithmetic is checkable by hand: links
with launch 1 s, sync 0.5 s, 1 byte/s; a compute rate of 2 FLOP/s, so a
local GEMM of (m, n, k) takes m*n*k seconds; 1 byte per element.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models import (
    Axis,
    CollectiveOp,
    CommModel,
    ComputeModel,
    Dataflow,
    LinkParams,
    MeshShape,
    meshslice_estimate,
    pipelined_broadcast_cost,
)
from cost_models.baselines.cannon import cannon_gemm
from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.common import InfeasibleError
from cost_models.baselines.fsdp import fsdp_gemm
from cost_models.baselines.one_d import one_d_tp_gemm
from cost_models.baselines.ring import RING_LINKS_PER_CHIP, TORUS_LINKS_PER_CHIP, ring_link
from cost_models.baselines.summa import best_packet_count, summa_gemm
from cost_models.baselines.wang import wang_gemm

LINK = LinkParams(launch_s=1.0, sync_s=0.5, link_bytes_per_s=1.0)
OPS = (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.SEND_RECV)
COMM = CommModel({(op, ax): LINK for op in OPS for ax in (Axis.ROW, Axis.COL)})
COMPUTE = ComputeModel(peak_flops_per_s=2.0)


def bytes_on(est, axis: Axis) -> float:
    return sum(c.bytes_sent_per_chip for c in est.calls if c.axis is axis)


# --- Collective -----------------------------------------------------------


@pytest.mark.parametrize(
    ("dataflow", "mesh", "mnk", "total_s"),
    [
        # OS 2x2, 8^3: AG col 4*4=16 B: 1+1*(0.5+16)=17.5, AG row same, concurrent; gemm 4*4*8
        (Dataflow.OS, MeshShape(2, 2), (8, 8, 8), 17.5 + 128),
        # LS 2x4: AG row (8/2)*(8/4)=8 B -> 9.5; gemm (4,8,2)=64; RS col 4*2=8 B -> 1+3*8.5=26.5
        (Dataflow.LS, MeshShape(2, 4), (8, 8, 8), 9.5 + 64 + 26.5),
        # RS 2x4: AG col (8/2)*(8/4)=8 B over 4: 26.5; gemm (8,2,4)=64; RS row 8 B over 2: 9.5
        (Dataflow.RS, MeshShape(2, 4), (8, 8, 8), 26.5 + 64 + 9.5),
    ],
)
def test_collective_hand_computed(dataflow, mesh, mnk, total_s):
    est = collective_gemm(dataflow, *mnk, mesh, 1, COMM, COMPUTE)
    assert est.total_s == pytest.approx(total_s)
    assert est.breakdown.exposed_comm_s == pytest.approx(
        total_s - 128 if dataflow is Dataflow.OS else total_s - 64
    )


@settings(max_examples=40, deadline=None)
@given(
    df=st.sampled_from(list(Dataflow)),
    r=st.sampled_from([1, 2, 4, 8]),
    c=st.sampled_from([1, 2, 4, 8]),
    scale=st.sampled_from([8, 64, 512]),
    transposed=st.booleans(),
)
def test_collective_equals_meshslice_with_one_slice(df, r, c, scale, transposed):
    # MeshSlice with S = 1 is the unoverlapped Collective 2D GEMM
    mesh = MeshShape(r, c)
    a = collective_gemm(df, scale, 2 * scale, 4 * scale, mesh, 2, COMM, COMPUTE, transposed)
    b = meshslice_estimate(df, scale, 2 * scale, 4 * scale, mesh, 1, 2, COMM, COMPUTE, transposed)
    assert a.breakdown == b.breakdown
    for axis in Axis:
        assert bytes_on(a, axis) == pytest.approx(bytes_on(b, axis))


def test_collective_rejects_uneven_sharding():
    with pytest.raises(InfeasibleError, match="not divisible by 3 mesh rows"):
        collective_gemm(Dataflow.OS, 8, 8, 8, MeshShape(3, 1), 1, COMM, COMPUTE)


# --- Wang et al. ----------------------------------------------------------


def test_wang_hand_computed_ls():
    # LS 2x4, 8^3. Decompose the col RS (P=4): AG row 9.5 exposed; chunk (4,2,2)=16,
    # send-recv 1+0.5+8=9.5: loop 16+3*max(16,9.5)=64 -> 73.5.
    # Decompose the row AG (P=2): chunk (4,4,2)=32: loop 32+32=64, RS 26.5 after -> 90.5.
    best = wang_gemm(Dataflow.LS, 8, 8, 8, MeshShape(2, 4), 1, COMM, COMPUTE)
    col = wang_gemm(
        Dataflow.LS, 8, 8, 8, MeshShape(2, 4), 1, COMM, COMPUTE, decomposed_axis=Axis.COL
    )
    row = wang_gemm(
        Dataflow.LS, 8, 8, 8, MeshShape(2, 4), 1, COMM, COMPUTE, decomposed_axis=Axis.ROW
    )
    assert col.total_s == pytest.approx(73.5)
    assert row.total_s == pytest.approx(90.5)
    assert best.total_s == pytest.approx(73.5)
    assert best.breakdown.compute_s == pytest.approx(64)
    # same bytes as the collectives it replaces: RS col 3*8, AG row 1*8
    assert bytes_on(best, Axis.COL) == pytest.approx(24)
    assert bytes_on(best, Axis.ROW) == pytest.approx(8)


def test_wang_transposed_reports_physical_axes():
    plain = wang_gemm(Dataflow.LS, 8, 8, 8, MeshShape(4, 2), 1, COMM, COMPUTE, transposed=True)
    # transposed on 4x2 = plain on 2x4 with the axes exchanged
    assert plain.total_s == pytest.approx(73.5)
    assert bytes_on(plain, Axis.ROW) == pytest.approx(24)


# --- SUMMA -----------------------------------------------------------------


def test_summa_hand_computed_os():
    # OS 2x4, 8^3, L=lcm(2,4)=4, one packet. A panel (8/2)*(8/4)=8 B along col (P=4):
    # 1+(1+2)*(0.5+8)=26.5; B panel (8/4)*(8/4)=4 B along row (P=2): 1+1*(0.5+4)=5.5.
    # gemm (4,2,2)=16; total 26.5 + 3*max(26.5,16) + 16 = 122.
    est = summa_gemm(Dataflow.OS, 8, 8, 8, MeshShape(2, 4), 1, COMM, COMPUTE, num_packets=1)
    assert est.total_s == pytest.approx(122)
    assert est.breakdown.sync_s == pytest.approx(4 * (3 * 0.5 + 1 * 0.5))
    assert est.breakdown.compute_s == pytest.approx(64)
    # every chip sends the all-gather's bytes: col 3*(4*2), row 1*(2*4)
    assert bytes_on(est, Axis.COL) == pytest.approx(24)
    assert bytes_on(est, Axis.ROW) == pytest.approx(8)


def test_best_packet_count_hand_computed():
    # ring 4, 8 B: D* = sqrt(2*8/(1*0.5)) = 5.66; t(5)=1+7*2.1=15.7, t(6)=1+8*(0.5+8/6)=15.67
    assert best_packet_count(LINK, 4, 8) == 6


@settings(max_examples=60, deadline=None)
@given(
    ring=st.integers(1, 64),
    message=st.floats(1, 1e9),
    sync=st.floats(1e-7, 1e-3),
    bw=st.floats(1e8, 1e11),
)
def test_best_packet_count_beats_every_other(ring, message, sync, bw):
    link = LinkParams(1e-5, sync, bw)
    d = best_packet_count(link, ring, message)
    best = pipelined_broadcast_cost(link, ring, message, d).total_s
    for other in range(1, min(200, int(message)) + 1):  # a packet holds at least one byte
        assert best <= pipelined_broadcast_cost(link, ring, message, other).total_s * (1 + 1e-12)


def test_summa_sync_grows_with_square_of_mesh_side():
    # square P x P: L = P iterations, two broadcasts of (D + P - 2) stages each:
    # sync = 2 * P * (D + P - 2) * sync_s, quadratic in P for a fixed D
    syncs = {}
    for side in (2, 4, 8, 16, 32):
        est = summa_gemm(
            Dataflow.OS,
            64 * 32,
            64 * 32,
            64 * 32,
            MeshShape(side, side),
            1,
            COMM,
            COMPUTE,
            num_packets=4,
        )
        assert est.breakdown.sync_s == pytest.approx(2 * side * (4 + side - 2) * 0.5)
        syncs[side] = est.breakdown.sync_s
    assert syncs[32] / syncs[16] > 3.5
    collective = collective_gemm(Dataflow.OS, 2048, 2048, 2048, MeshShape(32, 32), 1, COMM, COMPUTE)
    assert syncs[32] > 30 * collective.breakdown.sync_s  # vs Collective's O(P)


# --- Cannon ----------------------------------------------------------------


def test_cannon_hand_computed_os():
    # OS 4x4, 16^3: blocks 4*4=16 B. Skew floor(4/2)=2 hops: 1+2*(0.5+16)=34 (both axes at once);
    # t_c=(4,4,4)=64; shift 1+0.5+16=17.5; total 34 + 64 + 3*max(64,17.5) = 290
    est = cannon_gemm(Dataflow.OS, 16, 16, 16, MeshShape(4, 4), 1, COMM, COMPUTE)
    assert est.total_s == pytest.approx(290)
    # busiest chip: 2 skew sends + 3 shifts of 16 B on each axis
    assert bytes_on(est, Axis.COL) == pytest.approx(80)
    assert bytes_on(est, Axis.ROW) == pytest.approx(80)


def test_cannon_hand_computed_ls():
    # LS 2x2, 8^3: skew B 1 hop of (4*4)=16 B -> 17.5; t_c (4,4,4)=64; shifts 17.5;
    # align C 1 hop of 16 B -> 17.5: total 17.5 + 64 + 64 + 17.5 = 163
    est = cannon_gemm(Dataflow.LS, 8, 8, 8, MeshShape(2, 2), 1, COMM, COMPUTE)
    assert est.total_s == pytest.approx(163)


def test_cannon_rejects_non_square_mesh():
    with pytest.raises(InfeasibleError, match=r"Cannon needs a square mesh; 2x8 has 2 rows"):
        cannon_gemm(Dataflow.OS, 16, 16, 16, MeshShape(2, 8), 1, COMM, COMPUTE)


# --- 1D: Megatron TP and FSDP --------------------------------------------------


def test_ring_link_takes_the_slowest_hop():
    comm = CommModel(
        {
            (CollectiveOp.ALL_GATHER, Axis.ROW): LinkParams(2.0, 0.1, 10.0),
            (CollectiveOp.ALL_GATHER, Axis.COL): LinkParams(1.0, 0.3, 30.0),
        }
    )
    assert ring_link(comm, CollectiveOp.ALL_GATHER) == LinkParams(2.0, 0.3, 10.0)


def test_one_d_tp_hand_computed():
    # column-parallel forward Y = OS(X, W) on 4 chips, T=8, I=8, O=8: AG of X's 8x2 pieces
    # (16 B) over 4: 1 + 3*(0.5+16) = 50.5; gemm (8, 2, 8) = 128
    est = one_d_tp_gemm(Dataflow.OS, 8, 8, 8, 4, 1, COMM, COMPUTE)
    assert est.total_s == pytest.approx(50.5 + 128)
    assert bytes_on(est, Axis.COL) == pytest.approx(48)
    assert bytes_on(est, Axis.ROW) == 0


def test_fsdp_hand_computed():
    # forward Y = OS(X, W) on 4 chips, T=I=O=8: AG of W's 2x8 pieces (16 B): 50.5, hidden
    # behind the gemm (2, 8, 8) = 128 by prefetching: max(128, 50.5)
    est = fsdp_gemm(Dataflow.OS, 8, 8, 8, 4, 1, COMM, COMPUTE)
    assert est.total_s == pytest.approx(128)
    assert est.breakdown.transfer_s == pytest.approx(48)
    assert bytes_on(est, Axis.ROW) == pytest.approx(48)
    slow = fsdp_gemm(Dataflow.OS, 64, 64, 8, 4, 1, COMM, COMPUTE)
    # W 8x64 in 2x64 pieces (128 B): 1 + 3*128.5 = 386.5 > gemm (16, 64, 8) = 8192? no: hidden
    assert slow.total_s == pytest.approx(max(16 * 64 * 8, 386.5))


def test_one_d_uses_half_the_links_of_2d():
    assert TORUS_LINKS_PER_CHIP == 2 * RING_LINKS_PER_CHIP
    # Same per-chip traffic: 1D moves it all over one ring (two links); a square 2D
    # mesh splits it over the row and column rings (all four links) at once.
    one_d = one_d_tp_gemm(Dataflow.OS, 16, 16, 16, 16, 1, COMM, COMPUTE)
    assert {c.axis for c in one_d.calls} == {Axis.COL}
    two_d = collective_gemm(Dataflow.OS, 16, 16, 16, MeshShape(4, 4), 1, COMM, COMPUTE)
    assert {c.axis for c in two_d.calls} == {Axis.ROW, Axis.COL}
    # on the 1D ring every byte waits for the one ring: 15 steps of 16 B pieces, while
    # 2D sends 3 steps of 16 B on each axis concurrently
    assert one_d.breakdown.transfer_s == pytest.approx(15 * 16)
    assert two_d.total_s - two_d.breakdown.compute_s == pytest.approx(1 + 3 * 16.5)
    assert math.isclose(bytes_on(one_d, Axis.COL), 15 * 16)
