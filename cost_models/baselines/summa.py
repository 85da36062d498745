"""SUMMA with ring broadcasts and reduces streamed in packets (seed 000
section 2.3.3). See cost_models.baselines for the conventions."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.baselines.common import (
    InfeasibleError,
    Plan2D,
    check_sharding,
    chunk_mnk,
    concurrent_cost_s,
    estimate,
    logical_mesh,
    plan2d,
)
from cost_models.collectives import pipelined_broadcast_cost
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    Axis,
    CollectiveCall,
    CollectiveOp,
    CommCost,
    CommModel,
    GemmEstimate,
    LinkParams,
    MeshShape,
)


def _bcast_link(comm: CommModel, op: CollectiveOp, axis: Axis) -> LinkParams:
    """Broadcast/reduce link parameters of an axis: the calibration's
    `broadcast` / `reduce` fit when it has one, else its send-recv link.

    Why send-recv: a pipelined ring broadcast (or reduce) streams its
    packets hop by hop, each stage a neighbour-to-neighbour transfer with
    its own synchronisation (seed 000 figure 3), which is what a send-recv
    step measures; the all-gather fit describes the fused collective, whose
    steps move whole shards and synchronise far less often (seed 000
    section 2.3.4).
    """
    if comm.has(op, axis):
        return comm.link(op, axis)
    return comm.link(CollectiveOp.SEND_RECV, axis)


def best_packet_count(link: LinkParams, ring_size: int, message_bytes: float) -> int:
    """The packet count `D` that minimises a pipelined ring broadcast.

    Derivation from :func:`pipelined_broadcast_cost`::

        t(D) = launch + (D + P - 2) * (sync + message / (D * bw))
             = const + D * sync + (P - 2) * message / (D * bw)

    is convex in D with its real minimum at
    `D* = sqrt((P - 2) * message / (bw * sync))`; the best integer is the
    floor or the ceiling of D* (at least 1). Rings of 1 or 2 chips have no
    bubble to fill, so D = 1. Without a sync cost every packet count above
    the message size in bytes is pointless, so D is capped there.
    """
    if ring_size <= 2 or message_bytes <= 0:
        return 1
    cap = max(1, int(message_bytes))
    if link.sync_s <= 0:
        return cap
    d_star = math.sqrt((ring_size - 2) * message_bytes / (link.link_bytes_per_s * link.sync_s))
    options = {min(max(1, math.floor(d_star)), cap), min(max(1, math.ceil(d_star)), cap)}
    return min(
        options,
        key=lambda d: (pipelined_broadcast_cost(link, ring_size, message_bytes, d).total_s, d),
    )


@dataclass(frozen=True)
class _Panel:
    """One SUMMA broadcast or reduce per iteration: a `message_bytes` panel
    along `axis` over `ring` chips."""

    op: CollectiveOp
    axis: Axis
    ring: int
    message_bytes: float


def _summa_panels(p: Plan2D, iterations: int) -> tuple[list[_Panel], list[_Panel]]:
    """The broadcast (before the GEMM) and reduce (after) of one iteration.

    The collective's gathered operand is `ring * shard`; SUMMA cuts it into
    `iterations` panels, each owned by one chip of the ring."""
    before = [
        _Panel(CollectiveOp.BROADCAST, mv.axis, mv.ring, mv.shard_bytes * mv.ring / iterations)
        for mv in p.before
    ]
    after = [
        _Panel(CollectiveOp.REDUCE, mv.axis, mv.ring, mv.shard_bytes * mv.ring / iterations)
        for mv in p.after
    ]
    return before, after


def summa_packet_counts(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    transposed: bool = False,
) -> dict[Axis, int]:
    """The best packet count of SUMMA's broadcast/reduce on each physical
    axis that moves data (:func:`best_packet_count` per panel)."""
    lmesh, lcomm = logical_mesh(mesh, comm, transposed)
    p = plan2d(dataflow, m, n, k, lmesh, element_bytes)
    before, after = _summa_panels(p, math.lcm(lmesh.num_rows, lmesh.num_cols))
    out = {}
    for pn in (*before, *after):
        if pn.ring > 1:
            d = best_packet_count(_bcast_link(lcomm, pn.op, pn.axis), pn.ring, pn.message_bytes)
            out[pn.axis.other() if transposed else pn.axis] = d
    return out


def summa_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    num_packets: int | None = None,
    overlap_slowdown: float = 1.0,
) -> GemmEstimate:
    """SUMMA: `L = lcm(Nr, Nc)` iterations of ring broadcast / reduce and a
    partial GEMM (seed 000 section 2.3.3, figures 2a and 3; model.md
    section 7).

    Each iteration broadcasts one panel of every moving input along its
    axis from the chip that owns it (OS: an `M/Nr x K/L` panel of A along
    COL and a `K/L x N/Nc` panel of B along ROW; LS: an `N/L x K/Nc` panel
    of B along ROW; RS: a `K/Nr x M/L` panel of A along COL), multiplies
    (OS: `(M/Nr, N/Nc, K/L)`; LS: `(M/Nr, N/L, K/Nc)`; RS: `(M/L, N/Nc,
    K/Nr)`) and (LS/RS) reduces the partial output panel (LS: `M/Nr x N/L`
    along COL; RS: `M/L x N/Nc` along ROW) onto its owner. Every broadcast
    and reduce is a ring pipeline of `D` packets (seed 000 figure 3)::

        t_bcast = launch + (D + P - 2) * (sync + panel / (D * bw))

    (:func:`pipelined_broadcast_cost`). The iterations are software
    pipelined like MeshSlice's (the next panels travel while the current
    one is multiplied; the two axes run concurrently), which is generous to
    SUMMA: with `pre`, `gemm`, `post` the per-iteration stage times::

        total = pre + (L - 1) * max(pre, gemm * overlap_slowdown, post)
                + gemm + post

    so the synchronisation time is `L * (D + P - 2) * sync` per axis: on a
    square `P x P` mesh `L = P`, which grows with the square of the mesh
    side (the paper's O(K^2)).

    `num_packets=None` uses :func:`best_packet_count` for every panel
    (the best D for SUMMA); an integer fixes D for all of them. Broadcast
    and reduce take the calibration's `broadcast` / `reduce` links when it
    has them, else the axis's send-recv link (see :func:`_bcast_link`).

    Bytes per chip (every chip alike): a ring broadcast of a panel is sent
    by every chip but the ring's last (a reduce by every chip but its
    root); the L iterations rotate the root evenly round the ring (each chip
    owns `L / P` panels), so every chip sends `L * (P - 1) / P` panels:
    recorded as `count=L`, `shard_bytes=panel / P`. That equals the bytes
    of the Collective GEMM's all-gather or reduce-scatter on that axis.

    Raises InfeasibleError when a matrix does not split evenly or the
    panelled dimension (OS: K, LS: N, RS: M) is not a multiple of L.
    """
    lmesh_check = mesh.transposed() if transposed else mesh
    check_sharding(dataflow, m, n, k, lmesh_check)
    iterations = math.lcm(lmesh_check.num_rows, lmesh_check.num_cols)
    dim = {Dataflow.OS: k, Dataflow.LS: n, Dataflow.RS: m}[dataflow]
    if dim % iterations:
        name = {Dataflow.OS: "K", Dataflow.LS: "N", Dataflow.RS: "M"}[dataflow]
        raise InfeasibleError(
            f"SUMMA {dataflow.value} cuts {name}={dim} into lcm(Nr,Nc)={iterations} panels"
        )
    if num_packets is not None and num_packets < 1:
        raise InfeasibleError(f"num_packets must be >= 1, got {num_packets}")
    lmesh, lcomm = logical_mesh(mesh, comm, transposed)
    p = plan2d(dataflow, m, n, k, lmesh, element_bytes)
    before, after = _summa_panels(p, iterations)

    def stage(panels: list[_Panel]) -> tuple[list[tuple[Axis, CommCost]], CommCost]:
        items, summed = [], CommCost()
        for pn in panels:
            link = _bcast_link(lcomm, pn.op, pn.axis)
            d = num_packets or best_packet_count(link, pn.ring, pn.message_bytes)
            c = pipelined_broadcast_cost(link, pn.ring, pn.message_bytes, d)
            items.append((pn.axis, c))
            summed = summed + c
        return items, summed

    pre_items, pre_c = stage(before)
    post_items, post_c = stage(after)
    pre_s = concurrent_cost_s(pre_items, lcomm)
    post_s = concurrent_cost_s(post_items, lcomm)
    gemm = float(compute.gemm_s(*chunk_mnk(p.gemm_mnk, p.split_dim, iterations)))
    # the next panel's broadcasts and the previous one's reduces run together
    steady = max(gemm * overlap_slowdown, concurrent_cost_s(pre_items + post_items, lcomm))
    total = pre_s + (iterations - 1) * steady + gemm + post_s
    calls = [
        CollectiveCall(pn.op, pn.axis, pn.ring, pn.message_bytes / pn.ring, iterations)
        for pn in (*before, *after)
    ]
    return estimate(
        total,
        gemm * iterations,
        (pre_c + post_c).scaled(iterations),
        pre_s,
        steady,
        gemm + post_s,
        iterations,
        calls,
        transposed,
    )


# --------------------------------------------------------------------------
# Cannon
# --------------------------------------------------------------------------
