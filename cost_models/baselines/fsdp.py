"""Fully sharded data parallelism on one ring of all chips (seed 000
reference 37 and section 5.1; model.md section 7): the Collective 2D GEMM on
the logical `N x 1` mesh with the weight traffic overlapped by prefetching.
See cost_models.baselines.one_d for the mesh conventions."""

from __future__ import annotations

from cost_models.baselines.collective import collective_gemm
from cost_models.baselines.ring import ring_comm_model
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import CommModel, GemmEstimate, MeshShape, TimeBreakdown


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
