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

from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.ring import ring_comm_model
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    CommModel,
    GemmEstimate,
    MeshShape,
)


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
