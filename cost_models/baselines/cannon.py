"""Cannon's algorithm on square meshes (seed 000 section 2.3.2). See
cost_models.baselines for the conventions."""

from __future__ import annotations

from cost_models.baselines.common import (
    InfeasibleError,
    check_sharding,
    chunk_mnk,
    concurrent_cost_s,
    estimate,
    hop_link,
    logical_mesh,
    plan2d,
)
from cost_models.collectives import send_recv_cost
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    CollectiveCall,
    CollectiveOp,
    CommCost,
    CommModel,
    GemmEstimate,
    MeshShape,
)


def cannon_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    overlap_slowdown: float = 1.0,
) -> GemmEstimate:
    """Cannon's algorithm on a square `P x P` mesh: an initial skew, then P
    multiply steps with single-hop send-recv shifts between them (seed 000
    section 2.3.2; model.md section 7).

    Schedule per dataflow (blocks are the `1/P` pieces of a chip's shard):

    - OS: skew A along COL (mesh row i shifts by i) and B along ROW (mesh
      column j by j), concurrently; then P steps each multiplying
      `(M/P, N/P, K/P)` while A shifts one hop along COL and B one hop along
      ROW.
    - LS (A stays): skew B along ROW; P steps multiplying `(M/P, N/P, K/P)`
      while B shifts along ROW and the partial-output accumulator
      (`M/P x N/P`) moves one hop along COL, adding each step's product;
      finally the accumulators are aligned onto their owners along COL.
    - RS (B stays): the mirror image: skew A along COL, shift A along COL
      and the accumulator along ROW, align along ROW.

    A skew by `i` positions takes the shorter way round the ring, so the
    slowest mesh row (column) moves its block `floor(P/2)` hops, store and
    forward (:func:`send_recv_cost` with that many hops). The last step
    needs no shift, and no un-skew of the inputs is charged (generous to
    Cannon). With `t_c = gemm_s(M/P, N/P, K/P)` and `t_sh` the slower of the
    concurrent single-hop shifts::

        total = t_skew + t_c + (P - 1) * max(t_c * overlap_slowdown, t_sh) + t_align

    Bytes per chip: the shifts are `P - 1` single-hop SEND_RECV calls per
    moving matrix on its axis (every chip alike); the skew and alignment
    count the busiest chip, the one in the mesh row (column) shifted by
    `floor(P/2)`, which sends its block and relays `floor(P/2) - 1`
    others: `count = floor(P/2)`.

    Raises InfeasibleError on a non-square mesh (Cannon's shifts pair the
    k-th block of A's row with the k-th block of B's column only when both
    rings have the same length) or when blocks do not split evenly.
    """
    if mesh.num_rows != mesh.num_cols:
        raise InfeasibleError(
            f"Cannon needs a square mesh; {mesh} has {mesh.num_rows} rows and "
            f"{mesh.num_cols} columns"
        )
    check_sharding(dataflow, m, n, k, mesh)
    ring = mesh.num_rows
    lmesh, lcomm = logical_mesh(mesh, comm, transposed)
    p = plan2d(dataflow, m, n, k, lmesh, element_bytes)
    # every block is the 1/P piece of a shard; the product of one step is the
    # gathered local GEMM with its spanned dimension cut into P
    t_c = float(compute.gemm_s(*chunk_mnk(p.gemm_mnk, p.split_dim, ring)))
    hops = ring // 2
    skews, shifts, aligns = [], [], []
    skew_axes, shift_axes, align_axes = [], [], []
    calls: list[CollectiveCall] = []
    for mv in p.before:
        block = mv.shard_bytes
        skews.append(send_recv_cost(hop_link(lcomm, mv.axis), block, hops))
        shifts.append(send_recv_cost(hop_link(lcomm, mv.axis), block))
        skew_axes.append(mv.axis)
        shift_axes.append(mv.axis)
        calls.append(CollectiveCall(CollectiveOp.SEND_RECV, mv.axis, 2, block, hops + ring - 1))
    for mv in p.after:
        block = mv.shard_bytes
        shifts.append(send_recv_cost(hop_link(lcomm, mv.axis), block))
        aligns.append(send_recv_cost(hop_link(lcomm, mv.axis), block, hops))
        shift_axes.append(mv.axis)
        align_axes.append(mv.axis)
        calls.append(CollectiveCall(CollectiveOp.SEND_RECV, mv.axis, 2, block, hops + ring - 1))
    if ring == 1:
        skews, shifts, aligns, calls = [], [], [], []
        skew_axes, shift_axes, align_axes = [], [], []
    # skews (and the per-step shifts) of the two operands run together:
    # on separate links the slower, on one resource their bytes add
    skew_s = concurrent_cost_s(list(zip(skew_axes, skews, strict=True)), lcomm)
    align_s = concurrent_cost_s(list(zip(align_axes, aligns, strict=True)), lcomm)
    shift_s = concurrent_cost_s(list(zip(shift_axes, shifts, strict=True)), lcomm)
    steady = max(t_c * overlap_slowdown, shift_s)
    total = skew_s + t_c + (ring - 1) * steady + align_s
    comm_sum = sum(skews + aligns, CommCost()) + sum(shifts, CommCost()).scaled(ring - 1)
    return estimate(
        total, t_c * ring, comm_sum, skew_s, steady, t_c + align_s, ring, calls, transposed
    )
