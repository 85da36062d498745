"""The 1D baselines: Megatron 1D tensor parallelism and FSDP on one ring of
all chips of a 2D torus (seed 000 sections 2.1 and 5.1; seed 001; model.md
section 7).

Both are the Collective 2D GEMM (cost_models.baselines) on a degenerate
mesh whose single non-trivial axis is a ring over all N chips, priced with
the 1D ring link model of :func:`ring_link`:

- 1D TP on the logical `1 x N` mesh: with Table 1's Y-stationary row for a
  column-parallel layer (`Y = OS(X, W)`: X all-gathered, `dX = LS(dY, W)`:
  reduce-scattered, `dW = RS(X, dY)`: X all-gathered again) and the
  X-stationary row for a row-parallel one (`Y = LS(X, W^T)`: reduce-scatter,
  then two all-gathers of dY) this is exactly Megatron with sequence
  parallelism (seed 001's f/g operators with the all-reduce split into
  all-gather + reduce-scatter), blocking, nothing overlapped.
- FSDP on the logical `N x 1` mesh with Table 1's Y-stationary row: tokens
  split over the ring, W all-gathered in forward and backward-data, dW
  reduce-scattered, with the weight traffic overlapped by prefetching.

Calls are on the logical mesh: the ring is the COL axis of `1 x N` (1D TP)
or the ROW axis of `N x 1` (FSDP), swapped for the transposed variant; a
chip sends `(N - 1) * shard_bytes` per collective, every chip alike.
"""

from __future__ import annotations

from cost_models.baselines import collective_gemm
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    Axis,
    CollectiveOp,
    CommModel,
    GemmEstimate,
    LinkParams,
    MeshShape,
    TimeBreakdown,
)

TORUS_LINKS_PER_CHIP = 4
"""A 2D torus chip has four links: two on its mesh row ring, two on its
mesh column ring. A 2D GEMM drives both rings at once."""

RING_LINKS_PER_CHIP = 2
"""A single ring through all chips enters and leaves each chip once, so it
drives two of the four links (seed 000 section 5.1, figure 10)."""


def ring_link(comm: CommModel, op: CollectiveOp) -> LinkParams:
    """Link parameters of `op` on one ring through all chips of the torus.

    Derivation: a ring through all `Nr x Nc` chips of a torus (a snake
    through the mesh rows, closed along a column) uses one link into and
    one out of every chip, two of its four links, and makes hops on both
    mesh axes (every mesh row contributes a row-axis hop). A ring collective
    advances in lock step, so each step lasts as long as its slowest hop::

        launch_s         = max(launch_s over row, col)
        sync_s           = max(sync_s over row, col)
        link_bytes_per_s = min(link_bytes_per_s over row, col)

    Axes the calibration lacks are skipped; at least one must be present.
    With size regimes (cost_models.types.LinkRegime) the axis with the lower
    large-message bandwidth is used as it is.
    The calibration's per-axis rings already run on two links each (a row
    ring or a column ring), so the 1D ring gets one axis's worth of links
    while a 2D algorithm drives both axes concurrently: half the links.
    """
    links = [comm.link(op, ax) for ax in (Axis.ROW, Axis.COL) if comm.has(op, ax)]
    if not links:
        comm.link(op, Axis.ROW)  # raises the calibration-gap KeyError
    if any(lk.regimes for lk in links):
        # size regimes do not combine field by field: take the axis whose
        # large-message bandwidth is lowest, whole (its slowest hop bounds the ring)
        return min(links, key=lambda lk: lk.link_bytes_per_s)
    return LinkParams(
        launch_s=max(lk.launch_s for lk in links),
        sync_s=max(lk.sync_s for lk in links),
        link_bytes_per_s=min(lk.link_bytes_per_s for lk in links),
    )


def ring_comm_model(comm: CommModel) -> CommModel:
    """A CommModel whose both axes carry :func:`ring_link` for every
    operation the calibration covers: the link model of a 1D ring of all
    chips, usable with any 2D formula on a `1 x N` or `N x 1` mesh."""
    ops = {op for op, _ in comm.params}
    params = {}
    for op in ops:
        link = ring_link(comm, op)
        params[(op, Axis.ROW)] = link
        params[(op, Axis.COL)] = link
    return CommModel(params)


def one_d_tp_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    num_chips: int,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
) -> GemmEstimate:
    """One GEMM of Megatron 1D tensor parallelism with sequence parallelism
    on a ring of `num_chips` chips (seed 001; seed 000 section 2.1).

    Formula: the Collective 2D GEMM on the logical `1 x N` mesh (its ROW
    axis has one chip and moves nothing) with the ring links of
    :func:`ring_link`::

        total = t_ag + t_gemm + t_rs     (whichever the dataflow moves)
        t_ag  = launch + (N - 1) * (sync + shard / bw)

    E.g. a column-parallel forward `Y = OS(X, W)` all-gathers the `T x I/N`
    pieces of X (`(N-1) * T*I/N` bytes per chip, the traffic that grows with
    N and makes 1D TP unscalable) and multiplies `(T, O/N, I)`; a
    row-parallel forward `Y = LS(X, W^T)` multiplies `(T, O, I/N)` and
    reduce-scatters `T x O/N` pieces. Megatron's collectives block, so
    nothing is overlapped. Units: elements, bytes per element, seconds.
    Raises InfeasibleError when a matrix does not split over N.
    """
    return collective_gemm(
        dataflow,
        m,
        n,
        k,
        MeshShape(1, num_chips),
        element_bytes,
        ring_comm_model(comm),
        compute,
        transposed,
    )


def fsdp_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    num_chips: int,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    overlap_slowdown: float = 1.0,
) -> GemmEstimate:
    """One GEMM of fully sharded data parallelism on a ring of `num_chips`
    chips (PyTorch FSDP, seed 000 reference 37 and section 5.1).

    FSDP is Table 1's Y-stationary row on the logical `N x 1` mesh: tokens
    are split over the ring, so `Y = OS(X, W)` all-gathers W's `I/N x O`
    pieces and multiplies `(T/N, O, I)`, `dX = LS(dY, W)` all-gathers W
    again and multiplies `(T/N, I, O)`, and `dW = RS(X, dY)` multiplies
    `(I, O, T/N)` and reduce-scatters dW's `I/N x O` pieces (the caller
    passes those three GEMMs; any dataflow is priced the same way).

    FSDP prefetches the next layer's weight all-gather and defers the
    gradient reduce-scatter, so across a stack of equal layers each GEMM's
    communication runs beside another GEMM's compute; in that steady state::

        total = max(t_gemm * overlap_slowdown, t_ag + t_rs)

    (the collectives share the ring, so they add). The breakdown keeps every
    launch, sync and transfer term. Raises InfeasibleError when a matrix
    does not split over N. Seconds.
    """
    plain = collective_gemm(
        dataflow,
        m,
        n,
        k,
        MeshShape(num_chips, 1),
        element_bytes,
        ring_comm_model(comm),
        compute,
        transposed,
    )
    b = plain.breakdown
    comm_s = b.launch_s + b.sync_s + b.transfer_s
    total = max(b.compute_s * overlap_slowdown, comm_s)
    return GemmEstimate(
        breakdown=TimeBreakdown(total, b.compute_s, b.launch_s, b.sync_s, b.transfer_s),
        prologue_s=0.0,
        steady_s=total,
        epilogue_s=0.0,
        num_iterations=1,
        calls=plain.calls,
    )
