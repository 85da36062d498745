"""The NumPy mesh emulator: collectives, MeshSlice and the baselines compute
`A @ B` exactly and send the bytes the cost models charge."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.verify.algorithms import (
    ScheduleError,
    blocked_slice,
    operand_shapes,
    reference_product,
    run_meshslice,
)
from autotune.verify.baselines import Baseline, run_baseline
from autotune.verify.mesh import EmulatedMesh
from cost_models import (
    Axis,
    CollectiveOp,
    CommModel,
    ComputeModel,
    Dataflow,
    LinkParams,
    MeshShape,
    collective_calls,
)
from cost_models.baselines.cannon import cannon_gemm
from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.summa import summa_gemm
from cost_models.baselines.wang import wang_gemm

TOLERANCE = 1e-10
E = 8  # float64 bytes

_LINK = LinkParams(launch_s=1e-5, sync_s=1e-6, link_bytes_per_s=1e10)
COMM = CommModel({(op, ax): _LINK for op in CollectiveOp for ax in Axis})
COMPUTE = ComputeModel(peak_flops_per_s=1e12)


def _rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _model_bytes(calls) -> dict[Axis, float]:
    return {ax: float(sum(c.bytes_sent_per_chip for c in calls if c.axis is ax)) for ax in Axis}


def _counted(traffic) -> dict[Axis, float]:
    return {ax: traffic.max_bytes(ax) for ax in Axis}


# -- collectives, hand-computed ---------------------------------------------


def test_all_gather_concatenates_in_ring_order_and_counts_p_minus_1_pieces():
    em = EmulatedMesh(MeshShape(2, 3))
    grid = em.shard(np.arange(2 * 3 * 2, dtype=float).reshape(2, 6))  # 1x2 pieces
    out = em.all_gather(grid, Axis.COL, dim=1)
    # every chip of mesh row i ends with row i of the matrix
    np.testing.assert_array_equal(out[1, 2, 0], np.arange(6, 12))
    # ring of 3: (3 - 1) steps of one 2-element float64 piece = 32 bytes per chip
    assert em.traffic().uniform_bytes(Axis.COL) == 32.0
    assert em.traffic().uniform_bytes(Axis.ROW) == 0.0


def test_reduce_scatter_sums_the_ring_and_keeps_chunk_q_on_chip_q():
    em = EmulatedMesh(MeshShape(4, 1))
    grid = np.stack([np.full((1, 1, 8), float(i + 1)) for i in range(4)]).reshape(4, 1, 1, 8)
    grid = grid + np.arange(8.0)  # chip i holds (i + 1) + column index
    out = em.reduce_scatter(grid, Axis.ROW, dim=1)
    # chunk q is columns 2q, 2q+1: sum over chips (1+2+3+4) + 4 * column
    for q in range(4):
        np.testing.assert_array_equal(out[q, 0, 0], 10 + 4 * np.arange(2 * q, 2 * q + 2.0))
    # (4 - 1) steps of a 2-element chunk: 48 bytes per chip
    assert em.traffic().uniform_bytes(Axis.ROW) == 48.0


def test_broadcast_last_chip_of_the_chain_sends_nothing():
    em = EmulatedMesh(MeshShape(1, 4))
    grid = np.arange(4.0).reshape(1, 4, 1, 1) * np.ones((1, 1, 1, 6))
    out = em.broadcast(grid, Axis.COL, root=2, num_packets=3)
    assert np.all(out == 2.0)
    # chain 2 -> 3 -> 0 -> 1: chip 1 is last; the others forward 6 * 8 = 48 bytes
    np.testing.assert_array_equal(em.traffic().bytes_per_chip[Axis.COL][0], [48, 0, 48, 48])


def test_reduce_sums_onto_the_root():
    em = EmulatedMesh(MeshShape(3, 1))
    grid = np.arange(1.0, 4.0).reshape(3, 1, 1, 1) * np.ones((1, 1, 2, 2))
    out = em.reduce(grid, Axis.ROW, root=0, num_packets=2)
    assert np.all(out[0, 0] == 6.0)
    # chain 1 -> 2 -> 0: the root sends nothing, the others 4 * 8 = 32 bytes
    np.testing.assert_array_equal(em.traffic().bytes_per_chip[Axis.ROW][:, 0], [0, 32, 32])


def test_send_recv_takes_the_shorter_way_and_counts_hops():
    em = EmulatedMesh(MeshShape(5, 1))
    grid = np.arange(5.0).reshape(5, 1, 1, 1)
    out = em.send_recv(grid, Axis.ROW, 4)  # 4 forward = 1 backward hop
    np.testing.assert_array_equal(out[:, 0, 0, 0], [1, 2, 3, 4, 0])
    assert em.traffic().uniform_bytes(Axis.ROW) == 8.0


def test_transposed_mesh_records_traffic_on_the_physical_axes():
    em = EmulatedMesh(MeshShape(2, 4), transposed=True)
    assert (em.num_rows, em.num_cols) == (4, 2)
    em.all_gather(np.zeros((4, 2, 1, 1)), Axis.ROW, dim=0)  # logical ROW = physical COL
    traffic = em.traffic()
    assert traffic.uniform_bytes(Axis.COL) == 3 * 8.0
    assert traffic.uniform_bytes(Axis.ROW) == 0.0


def test_contiguous_slicing_computes_the_wrong_product():
    """The paper's warning (seed 000 section 3.1): slicing each shard into
    contiguous chunks pairs A's and B's blocks wrongly on a 2x3 mesh."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 12)), rng.standard_normal((12, 6))
    em = EmulatedMesh(MeshShape(2, 3))
    ga, gb = em.shard(a), em.shard(b)
    out = np.zeros((2, 3, 2, 2))
    for s in range(2):  # A: contiguous halves of its 4 local columns; B: strided
        a_s = ga[:, :, :, 2 * s : 2 * s + 2]
        b_s = blocked_slice(gb, 0, 2, 1, s)
        out += em.all_gather(a_s, Axis.COL, 1) @ em.all_gather(b_s, Axis.ROW, 0)
    assert _rel_error(em.unshard(out), a @ b) > 0.1


# -- MeshSlice: property tests ---------------------------------------------


@st.composite
def meshslice_cases(draw):
    nr, nc = draw(st.integers(1, 8)), draw(st.integers(1, 8))
    dataflow = draw(st.sampled_from(list(Dataflow)))
    transposed = draw(st.booleans())
    block = draw(st.sampled_from([1, 2, 4]))
    num_slices = draw(st.integers(1, 4))
    groups = draw(st.integers(1, 2))  # the sliced dim holds 1 or 2 S*b groups per unit
    logical = MeshShape(nc, nr) if transposed else MeshShape(nr, nc)
    r, c = logical.num_rows, logical.num_cols
    sliced = num_slices * block * math.lcm(r, c) * groups
    m = {Dataflow.OS: r * draw(st.integers(1, 2)), Dataflow.LS: r, Dataflow.RS: sliced}
    n = {Dataflow.OS: c, Dataflow.LS: sliced, Dataflow.RS: c * draw(st.integers(1, 2))}
    k = {Dataflow.OS: sliced, Dataflow.LS: c * draw(st.integers(1, 2)), Dataflow.RS: r}
    return (
        MeshShape(nr, nc),
        dataflow,
        transposed,
        block,
        num_slices,
        (m[dataflow], n[dataflow], k[dataflow]),
    )


@settings(max_examples=120, deadline=None)
@given(case=meshslice_cases(), seed=st.integers(0, 2**16))
def test_meshslice_equals_plain_matmul_and_sends_the_model_bytes(case, seed):
    mesh, dataflow, transposed, block, num_slices, (m, n, k) = case
    rng = np.random.default_rng(seed)
    shape_a, shape_b = operand_shapes(dataflow, m, n, k)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    res = run_meshslice(dataflow, a, b, mesh, num_slices, block, transposed)
    assert _rel_error(res.output, reference_product(dataflow, a, b)) < TOLERANCE
    calls = collective_calls(dataflow, m, n, k, mesh, num_slices, E, transposed)
    assert _counted(res.traffic) == _model_bytes(calls)
    # every chip sends the same, and the emulator issued exactly the model's calls
    assert all(res.traffic.uniform_bytes(ax) is not None for ax in Axis)
    assert sorted(res.traffic.calls, key=repr) == sorted(calls, key=repr)


@settings(max_examples=60, deadline=None)
@given(case=meshslice_cases(), bad=st.integers(1, 7))
def test_invalid_slice_count_is_refused_before_running(case, bad):
    mesh, dataflow, transposed, block, num_slices, (m, n, k) = case
    invalid = num_slices * 64 + bad  # never divides the sliced dimension's groups
    shape_a, shape_b = operand_shapes(dataflow, m, n, k)
    with pytest.raises(ScheduleError, match="not divisible by S\\*b\\*lcm"):
        run_meshslice(
            dataflow, np.ones(shape_a), np.ones(shape_b), mesh, invalid, block, transposed
        )


def test_uneven_sharding_is_refused():
    with pytest.raises(ScheduleError, match="not divisible by 3 mesh rows"):
        run_meshslice(Dataflow.OS, np.ones((4, 6)), np.ones((6, 2)), MeshShape(3, 2), 1, 1)


# -- baselines: property tests ---------------------------------------------

_MODEL = {
    Baseline.COLLECTIVE: collective_gemm,
    Baseline.WANG: wang_gemm,
    Baseline.SUMMA: summa_gemm,
    Baseline.CANNON: cannon_gemm,
}


@st.composite
def baseline_cases(draw):
    algorithm = draw(st.sampled_from(list(Baseline)))
    nr = draw(st.integers(1, 6))
    nc = nr if algorithm is Baseline.CANNON else draw(st.integers(1, 6))
    dataflow = draw(st.sampled_from(list(Dataflow)))
    transposed = draw(st.booleans())
    unit = nr * nc * math.lcm(nr, nc)  # splits over either mesh axis and into L panels
    dims = tuple(unit * draw(st.integers(1, 2)) for _ in range(3))
    axis = draw(st.sampled_from([Axis.ROW, Axis.COL]))
    num_packets = draw(st.integers(1, 4))
    return algorithm, MeshShape(nr, nc), dataflow, transposed, dims, axis, num_packets


@settings(max_examples=120, deadline=None)
@given(case=baseline_cases(), seed=st.integers(0, 2**16))
def test_baselines_equal_plain_matmul_and_send_the_model_bytes(case, seed):
    algorithm, mesh, dataflow, transposed, (m, n, k), axis, num_packets = case
    rng = np.random.default_rng(seed)
    shape_a, shape_b = operand_shapes(dataflow, m, n, k)
    a, b = rng.standard_normal(shape_a), rng.standard_normal(shape_b)
    wang_axis = axis if algorithm is Baseline.WANG else None
    res = run_baseline(algorithm, dataflow, a, b, mesh, transposed, wang_axis, num_packets)
    assert _rel_error(res.output, reference_product(dataflow, a, b)) < TOLERANCE
    kwargs = {"decomposed_axis": axis} if algorithm is Baseline.WANG else {}
    est = _MODEL[algorithm](dataflow, m, n, k, mesh, E, COMM, COMPUTE, transposed, **kwargs)
    # the models count the busiest chip where chips differ (Cannon's skew)
    assert _counted(res.traffic) == _model_bytes(est.calls)


def test_cannon_refuses_a_non_square_mesh():
    with pytest.raises(ScheduleError, match="square mesh"):
        run_baseline(
            Baseline.CANNON, Dataflow.OS, np.ones((4, 4)), np.ones((4, 4)), MeshShape(2, 4)
        )


def test_baselines_refuse_uneven_sharding():
    # LS on 2x3: C = A @ B^T has N = 4 columns, not divisible by 3 mesh columns
    with pytest.raises(ScheduleError, match="not divisible by 3 mesh columns"):
        run_baseline(Baseline.SUMMA, Dataflow.LS, np.ones((2, 3)), np.ones((4, 3)), MeshShape(2, 3))
