"""2D GEMM algorithms on the emulated mesh, scheduled exactly as the cost
models charge them.

MeshSlice (seed 000 section 3.1, figure 5, algorithm 2; model.md section 6)
for the OS, LS and RS dataflows, plain or transposed, with blocked slicing
of block `b` and any valid slice count `S`. Conventions follow
`cost_models.meshslice`: OS computes `C = A @ B` (A `M x K`, B `K x N`), LS
`C = A @ B^T` (A `M x K`, B `N x K`), RS `C = A^T @ B` (A `K x M`, B
`K x N`); every matrix is stored with its rows over the ROW axis and its
columns over the COL axis; the transposed variant is the plain schedule on
the transposed mesh. The baselines (Collective, SUMMA, Cannon, Wang) live in
:mod:`autotune.verify.baselines`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.verify.mesh import EmulatedMesh, Traffic
from cost_models import (
    Axis,
    Dataflow,
    MeshShape,
    sharding_violation,
    slice_count_violation,
)


class ScheduleError(ValueError):
    """A schedule that cannot run on this mesh (shapes that do not shard, an
    invalid slice count); raised before anything runs."""


@dataclass(frozen=True)
class EmulationResult:
    """The product a schedule computed and the traffic it caused."""

    output: np.ndarray
    traffic: Traffic


def operand_shapes(dataflow: Dataflow, m: int, n: int, k: int) -> tuple[tuple[int, int], ...]:
    """Shapes of A and B for a dataflow's `m x n` product over `k`."""
    if dataflow is Dataflow.OS:
        return (m, k), (k, n)
    if dataflow is Dataflow.LS:
        return (m, k), (n, k)
    return (k, m), (k, n)


def reference_product(dataflow: Dataflow, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The plain matmul a dataflow computes: `A @ B`, `A @ B^T` or `A^T @ B`."""
    if dataflow is Dataflow.OS:
        return a @ b
    if dataflow is Dataflow.LS:
        return a @ b.T
    return a.T @ b


def gemm_dims(dataflow: Dataflow, a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    """`(m, n, k)` of a dataflow applied to operands `a` and `b`; raises
    ScheduleError when their shapes do not fit together."""
    if dataflow is Dataflow.OS:
        (m, k), (k2, n) = a.shape, b.shape
    elif dataflow is Dataflow.LS:
        (m, k), (n, k2) = a.shape, b.shape
    else:
        (k, m), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ScheduleError(
            f"{dataflow.value}: operands {a.shape} and {b.shape} disagree on the contraction"
        )
    return m, n, k


def check_meshslice(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    num_slices: int,
    block: int,
    transposed: bool = False,
) -> None:
    """Raise ScheduleError when the matrices do not shard over the (logical)
    mesh or `num_slices` is not a valid slice count
    (:func:`cost_models.slice_count_violation`)."""
    logical = mesh.transposed() if transposed else mesh
    why = sharding_violation(dataflow, m, n, k, logical)
    if why is None:
        why = slice_count_violation(dataflow, m, n, k, logical, block, num_slices)
    if why is not None:
        raise ScheduleError(why)


def blocked_slice(grid: np.ndarray, dim: int, num_slices: int, block: int, index: int):
    """Slice `index` of every chip's shard: the blocks of `block` rows
    (`dim=0`) or columns (`dim=1`) whose local block number is `index`
    modulo `num_slices` (seed 000 algorithm 2, `blocked_slice_col`)."""
    r, c, rows, cols = grid.shape
    if dim == 0:
        view = grid.reshape(r, c, rows // (block * num_slices), num_slices, block, cols)
        return view[:, :, :, index].reshape(r, c, rows // num_slices, cols)
    view = grid.reshape(r, c, rows, cols // (block * num_slices), num_slices, block)
    return view[:, :, :, :, index].reshape(r, c, rows, cols // num_slices)


def place_slice(
    grid: np.ndarray, piece: np.ndarray, dim: int, num_slices: int, block: int, index: int
) -> None:
    """Write `piece` into slice `index` of every chip's shard (the inverse of
    :func:`blocked_slice`), in place."""
    r, c, rows, cols = grid.shape
    if dim == 0:
        view = grid.reshape(r, c, rows // (block * num_slices), num_slices, block, cols)
        view[:, :, :, index] = piece.reshape(r, c, rows // (block * num_slices), block, cols)
    else:
        view = grid.reshape(r, c, rows, cols // (block * num_slices), num_slices, block)
        view[:, :, :, :, index] = piece.reshape(r, c, rows, cols // (block * num_slices), block)


def _swap_last(grid: np.ndarray) -> np.ndarray:
    return np.swapaxes(grid, -1, -2)


def meshslice_grids(
    em: EmulatedMesh,
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    num_slices: int,
    block: int,
) -> np.ndarray:
    """Run MeshSlice on sharded grids `a` and `b`; returns the grid of C.

    Per iteration `s` (seed 000 figure 5; model.md section 6):

    - OS: slice A's columns and B's rows, all-gather A along COL and B along
      ROW, `C += A' @ B'`.
    - LS: slice B's rows, all-gather along ROW, `C' = A @ B'^T`,
      reduce-scatter C' along COL into slice `s` of C's columns.
    - RS: slice A's columns, all-gather along COL, `C' = A'^T @ B`,
      reduce-scatter C' along ROW into slice `s` of C's rows.

    The gathered blocks of slice `s` are the global blocks `= s (mod S)` in
    order on every chip because each local shard holds a whole number of
    `S * b` groups (:func:`cost_models.slice_count_violation`).
    """
    r, c = em.num_rows, em.num_cols
    if dataflow is Dataflow.OS:
        out = np.zeros((r, c, a.shape[2], b.shape[3]), dtype=np.result_type(a, b))
        for s in range(num_slices):
            a_all = em.all_gather(blocked_slice(a, 1, num_slices, block, s), Axis.COL, dim=1)
            b_all = em.all_gather(blocked_slice(b, 0, num_slices, block, s), Axis.ROW, dim=0)
            out += a_all @ b_all
        return out
    if dataflow is Dataflow.LS:
        n_local = b.shape[2] * r // c
        out = np.zeros((r, c, a.shape[2], n_local), dtype=np.result_type(a, b))
        for s in range(num_slices):
            b_all = em.all_gather(blocked_slice(b, 0, num_slices, block, s), Axis.ROW, dim=0)
            partial = a @ _swap_last(b_all)
            piece = em.reduce_scatter(partial, Axis.COL, dim=1)
            place_slice(out, piece, 1, num_slices, block, s)
        return out
    m_local = a.shape[3] * c // r
    out = np.zeros((r, c, m_local, b.shape[3]), dtype=np.result_type(a, b))
    for s in range(num_slices):
        a_all = em.all_gather(blocked_slice(a, 1, num_slices, block, s), Axis.COL, dim=1)
        partial = _swap_last(a_all) @ b
        piece = em.reduce_scatter(partial, Axis.ROW, dim=0)
        place_slice(out, piece, 0, num_slices, block, s)
    return out


def run_meshslice(
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    mesh: MeshShape,
    num_slices: int,
    block: int,
    transposed: bool = False,
) -> EmulationResult:
    """MeshSlice of global operands `a`, `b` on an emulated `mesh`: check
    the schedule (ScheduleError before anything runs), shard, run, gather C.

    `transposed` runs the plain schedule on the transposed mesh (the twin of
    seed 000 section 3.2.1); its traffic is recorded on the physical axes.
    """
    m, n, k = gemm_dims(dataflow, a, b)
    check_meshslice(dataflow, m, n, k, mesh, num_slices, block, transposed)
    em = EmulatedMesh(mesh, transposed)
    c = meshslice_grids(em, dataflow, em.shard(a), em.shard(b), num_slices, block)
    return EmulationResult(em.unshard(c), em.traffic())
