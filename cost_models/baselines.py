"""The 2D GEMM algorithms MeshSlice is compared with (seed 000 sections 2.3
and 5; model.md section 7): Collective 2D GEMM, Wang et al., SUMMA and
Cannon, on the same calibrated cost model as MeshSlice.

Conventions (shared with cost_models.meshslice):

- OS: `C = A @ B`; LS: `C = A @ B^T` (A stays); RS: `C = A^T @ B` (B stays).
  Every matrix is stored with its rows split over the ROW axis (size `Nr`)
  and its columns over the COL axis (size `Nc`). `m, n, k` are the output
  rows, output columns and contraction size; `element_bytes` per element.
- `transposed=True` is the plain schedule on the transposed mesh with the
  axes' links exchanged (seed 000 section 3.2.1); the returned `calls` are on
  the physical axes.
- Every function returns a `GemmEstimate` whose breakdown has the same parts
  as MeshSlice's: `compute_s` (sum of the local GEMMs), `launch_s`,
  `sync_s`, `transfer_s` (every communication operation, hidden or not) and
  the critical-path `total_s`; exposed communication is `total - compute`.
- `calls` lists what ONE chip issues on each mesh axis, so that
  `sum(c.bytes_sent_per_chip for c in calls if c.axis is X)` is the bytes
  that chip puts on its axis-X links (`count * (ring_size - 1) *
  shard_bytes`). A single-hop send-recv is recorded as `ring_size=2`,
  `shard_bytes=message`, `count=number of sends`. Each docstring says which
  chip the count describes when chips differ.
- An infeasible configuration (a non-square mesh for Cannon, a dimension
  that does not split evenly) raises :class:`InfeasibleError` carrying the
  reason; callers record it as an infeasible result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.collectives import pipelined_broadcast_cost, ring_collective_cost, send_recv_cost
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow, sharding_violation
from cost_models.types import (
    Axis,
    CollectiveCall,
    CollectiveOp,
    CommCost,
    CommModel,
    GemmEstimate,
    LinkParams,
    MeshShape,
    TimeBreakdown,
)


class InfeasibleError(ValueError):
    """A baseline cannot run this GEMM on this mesh; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Move:
    """One collective of the S=1 (unsliced) 2D GEMM: `op` along `axis` over
    `ring` chips with a per-chip piece of `shard_bytes` (all-gather input
    piece, reduce-scatter output piece)."""

    op: CollectiveOp
    axis: Axis
    ring: int
    shard_bytes: float


@dataclass(frozen=True)
class _Plan2D:
    """The collectives before and after the local GEMM of a dataflow, the
    local GEMM `(m, n, k)` with every operand gathered, and the index (0, 1,
    2 for m, n, k) of the GEMM dimension the gathered moving operand spans,
    which is the dimension every decomposed algorithm cuts into chunks."""

    before: tuple[_Move, ...]
    gemm_mnk: tuple[float, float, float]
    after: tuple[_Move, ...]
    split_dim: int


def _plan2d(dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape, e: float) -> _Plan2D:
    """Per-chip shards of the three dataflows (model.md section 6, S = 1)."""
    nr, nc = mesh.num_rows, mesh.num_cols
    if dataflow is Dataflow.OS:
        return _Plan2D(
            before=(
                _Move(CollectiveOp.ALL_GATHER, Axis.COL, nc, (m / nr) * (k / nc) * e),
                _Move(CollectiveOp.ALL_GATHER, Axis.ROW, nr, (k / nr) * (n / nc) * e),
            ),
            gemm_mnk=(m / nr, n / nc, k),
            after=(),
            split_dim=2,
        )
    if dataflow is Dataflow.LS:
        return _Plan2D(
            before=(_Move(CollectiveOp.ALL_GATHER, Axis.ROW, nr, (n / nr) * (k / nc) * e),),
            gemm_mnk=(m / nr, n, k / nc),
            after=(_Move(CollectiveOp.REDUCE_SCATTER, Axis.COL, nc, (m / nr) * (n / nc) * e),),
            split_dim=1,
        )
    return _Plan2D(
        before=(_Move(CollectiveOp.ALL_GATHER, Axis.COL, nc, (k / nr) * (m / nc) * e),),
        gemm_mnk=(m, n / nc, k / nr),
        after=(_Move(CollectiveOp.REDUCE_SCATTER, Axis.ROW, nr, (m / nr) * (n / nc) * e),),
        split_dim=0,
    )


def _chunk(mnk: tuple[float, float, float], split_dim: int, parts: float) -> tuple[float, ...]:
    """The local GEMM with dimension `split_dim` divided into `parts`."""
    return tuple(d / parts if i == split_dim else d for i, d in enumerate(mnk))


def _check_sharding(dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape) -> None:
    why = sharding_violation(dataflow, m, n, k, mesh)
    if why is not None:
        raise InfeasibleError(f"{dataflow.value} on {mesh}: {why}")


def _estimate(
    total_s: float,
    compute_s: float,
    comm: CommCost,
    prologue_s: float,
    steady_s: float,
    epilogue_s: float,
    num_iterations: int,
    calls: list[CollectiveCall],
    transposed: bool,
) -> GemmEstimate:
    """Assemble a GemmEstimate; calls computed on the logical (possibly
    transposed) mesh are mapped back to the physical axes."""
    if transposed:
        calls = [
            CollectiveCall(c.op, c.axis.other(), c.ring_size, c.shard_bytes, c.count) for c in calls
        ]
    return GemmEstimate(
        breakdown=TimeBreakdown(
            total_s=float(total_s),
            compute_s=float(compute_s),
            launch_s=comm.launch_s,
            sync_s=comm.sync_s,
            transfer_s=comm.transfer_s,
        ),
        prologue_s=float(prologue_s),
        steady_s=float(steady_s),
        epilogue_s=float(epilogue_s),
        num_iterations=num_iterations,
        calls=tuple(c for c in calls if c.ring_size > 1 and c.count > 0),
    )


def _logical(mesh: MeshShape, comm: CommModel, transposed: bool) -> tuple[MeshShape, CommModel]:
    return (mesh.transposed(), comm.swapped_axes()) if transposed else (mesh, comm)


def _collective(mv: _Move, comm: CommModel) -> CommCost:
    return ring_collective_cost(comm.link(mv.op, mv.axis), mv.ring, mv.shard_bytes)


def _call(mv: _Move) -> CollectiveCall:
    return CollectiveCall(mv.op, mv.axis, mv.ring, mv.shard_bytes, 1)


def _hop(comm: CommModel, axis: Axis) -> LinkParams:
    return comm.link(CollectiveOp.SEND_RECV, axis)


# --------------------------------------------------------------------------
# Collective 2D GEMM
# --------------------------------------------------------------------------


def collective_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
) -> GemmEstimate:
    """Collective 2D GEMM: one all-gather / reduce-scatter per direction and
    one local GEMM, nothing overlapped (seed 000 section 2.3.4, figure 2b;
    model.md section 7).

    Schedule: the all-gathers of the moving inputs run first (OS: A along
    COL and B along ROW, concurrently, each on its own axis's links), then
    the whole local GEMM, then (LS/RS) the reduce-scatter of the output on
    the other axis. The local GEMM cannot start before its inputs are
    complete and the reduce-scatter needs the whole partial product, so
    there is nothing to overlap::

        total = max(t_ag over the 'before' axes) + t_gemm + t_rs

    with `t_ag`, `t_rs` from :func:`ring_collective_cost` (`launch + (P-1)
    * (sync + shard/bw)`) and `t_gemm` from `compute.gemm_s` on the local
    `(m/Nr, n/Nc, k)` (OS), `(m/Nr, n, k/Nc)` (LS), `(m, n/Nc, k/Nr)` (RS).
    It equals MeshSlice with S = 1.

    Bytes per chip (every chip alike): each collective is one call with the
    ring's per-chip piece, `(P-1) * shard_bytes` sent on its axis.
    Raises InfeasibleError when a matrix does not split evenly. Seconds.
    """
    _check_sharding(dataflow, m, n, k, mesh.transposed() if transposed else mesh)
    lmesh, lcomm = _logical(mesh, comm, transposed)
    p = _plan2d(dataflow, m, n, k, lmesh, element_bytes)
    pre = [_collective(mv, lcomm) for mv in p.before]
    post = [_collective(mv, lcomm) for mv in p.after]
    gemm = float(compute.gemm_s(*p.gemm_mnk))
    pre_s = max((c.total_s for c in pre), default=0.0)
    post_s = sum(c.total_s for c in post)
    total = pre_s + gemm + post_s
    comm_sum = sum(pre + post, CommCost())
    calls = [_call(mv) for mv in (*p.before, *p.after)]
    return _estimate(total, gemm, comm_sum, pre_s, 0.0, gemm + post_s, 1, calls, transposed)


# --------------------------------------------------------------------------
# Wang et al.
# --------------------------------------------------------------------------


def wang_gemm(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    decomposed_axis: Axis | None = None,
    overlap_slowdown: float = 1.0,
) -> GemmEstimate:
    """Wang et al.'s collective matmul: the collective on one mesh axis is
    decomposed into send-recv steps overlapped with partial GEMMs, the
    collective on the other axis stays a plain, unoverlapped collective
    (seed 000 sections 2.3.4 and 3.1; Wang et al., ASPLOS 2022).

    Derivation. Let the decomposed collective run on a ring of `P` chips
    with per-chip piece `shard` bytes (the all-gather input piece or the
    reduce-scatter output piece). The local GEMM splits into `P` chunks along
    the dimension that piece spans (OS: K; LS: N; RS: M), each
    `gemm_s(chunk)`:

    - all-gather decomposed: step 0 multiplies the local piece while it is
      sent to the ring neighbour; step j multiplies the piece received in
      step j-1 while forwarding it. `P - 1` single-hop send-recvs.
    - reduce-scatter decomposed: step j computes the partial output chunk
      bound for the chip j hops ahead, adds the accumulator received from
      the neighbour and sends it on while the next chunk is computed.

    Both give the same pipeline::

        t_loop = t_chunk + (P - 1) * max(t_chunk * overlap_slowdown, t_sr)
        t_sr   = launch_s + sync_s + shard / link_bytes_per_s   (send-recv link)

    and the other axis's collective is exposed: the all-gather that is not
    decomposed runs before the loop (its operand is needed by every chunk),
    the reduce-scatter that is not decomposed runs after it::

        total = t_before + t_loop + t_after

    `decomposed_axis=None` tries both axes and keeps the faster (Wang et al.
    choose the direction per GEMM); a ring of one chip on the decomposed
    axis degenerates to the Collective 2D GEMM. The send-recv is modelled
    one-directional (a bidirectional variant halves the steps but not the
    bytes per link).

    Bytes per chip (every chip alike): the decomposed direction is a
    SEND_RECV call with `ring_size=2`, `shard_bytes=shard`, `count=P-1`
    (the same `(P-1) * shard` bytes as the collective it replaces); the
    other direction one call of its collective. Seconds.
    """
    _check_sharding(dataflow, m, n, k, mesh.transposed() if transposed else mesh)
    lmesh, lcomm = _logical(mesh, comm, transposed)
    p = _plan2d(dataflow, m, n, k, lmesh, element_bytes)
    axes = [mv.axis for mv in (*p.before, *p.after)]
    if decomposed_axis is not None:
        logical_axis = decomposed_axis.other() if transposed else decomposed_axis
        if logical_axis not in axes:
            raise InfeasibleError(f"{dataflow.value} moves nothing along {decomposed_axis.value}")
        choices = [logical_axis]
    else:
        choices = axes
    best: GemmEstimate | None = None
    for axis in choices:
        est = _wang_one(p, axis, lcomm, compute, overlap_slowdown, transposed)
        if best is None or est.total_s < best.total_s:
            best = est
    assert best is not None
    return best


def _wang_one(
    p: _Plan2D,
    axis: Axis,
    comm: CommModel,
    compute: ComputeModel,
    overlap_slowdown: float,
    transposed: bool,
) -> GemmEstimate:
    """Wang's schedule with the collective on logical `axis` decomposed."""
    moves = (*p.before, *p.after)
    dec = next(mv for mv in moves if mv.axis is axis)
    other_before = [mv for mv in p.before if mv is not dec]
    other_after = [mv for mv in p.after if mv is not dec]
    pre = [_collective(mv, comm) for mv in other_before]
    post = [_collective(mv, comm) for mv in other_after]
    pre_s = max((c.total_s for c in pre), default=0.0)
    post_s = sum(c.total_s for c in post)
    ring = dec.ring
    chunk = float(compute.gemm_s(*_chunk(p.gemm_mnk, p.split_dim, ring)))
    sr = send_recv_cost(_hop(comm, axis), dec.shard_bytes) if ring > 1 else CommCost()
    steady = max(chunk * overlap_slowdown, sr.total_s)
    loop = chunk + (ring - 1) * steady
    total = pre_s + loop + post_s
    comm_sum = sum(pre + post, CommCost()) + sr.scaled(ring - 1)
    calls = [_call(mv) for mv in (*other_before, *other_after)]
    calls.append(CollectiveCall(CollectiveOp.SEND_RECV, axis, 2, dec.shard_bytes, ring - 1))
    return _estimate(
        total, chunk * ring, comm_sum, pre_s, steady, chunk + post_s, ring, calls, transposed
    )


# --------------------------------------------------------------------------
# SUMMA
# --------------------------------------------------------------------------


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


def _summa_panels(p: _Plan2D, iterations: int) -> tuple[list[_Panel], list[_Panel]]:
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
    lmesh, lcomm = _logical(mesh, comm, transposed)
    p = _plan2d(dataflow, m, n, k, lmesh, element_bytes)
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
    _check_sharding(dataflow, m, n, k, lmesh_check)
    iterations = math.lcm(lmesh_check.num_rows, lmesh_check.num_cols)
    dim = {Dataflow.OS: k, Dataflow.LS: n, Dataflow.RS: m}[dataflow]
    if dim % iterations:
        name = {Dataflow.OS: "K", Dataflow.LS: "N", Dataflow.RS: "M"}[dataflow]
        raise InfeasibleError(
            f"SUMMA {dataflow.value} cuts {name}={dim} into lcm(Nr,Nc)={iterations} panels"
        )
    if num_packets is not None and num_packets < 1:
        raise InfeasibleError(f"num_packets must be >= 1, got {num_packets}")
    lmesh, lcomm = _logical(mesh, comm, transposed)
    p = _plan2d(dataflow, m, n, k, lmesh, element_bytes)
    before, after = _summa_panels(p, iterations)

    def stage(panels: list[_Panel]) -> tuple[float, CommCost]:
        time_s, summed = 0.0, CommCost()
        for pn in panels:
            link = _bcast_link(lcomm, pn.op, pn.axis)
            d = num_packets or best_packet_count(link, pn.ring, pn.message_bytes)
            c = pipelined_broadcast_cost(link, pn.ring, pn.message_bytes, d)
            time_s, summed = max(time_s, c.total_s), summed + c
        return time_s, summed

    pre_s, pre_c = stage(before)
    post_s, post_c = stage(after)
    gemm = float(compute.gemm_s(*_chunk(p.gemm_mnk, p.split_dim, iterations)))
    steady = max(pre_s, gemm * overlap_slowdown, post_s)
    total = pre_s + (iterations - 1) * steady + gemm + post_s
    calls = [
        CollectiveCall(pn.op, pn.axis, pn.ring, pn.message_bytes / pn.ring, iterations)
        for pn in (*before, *after)
    ]
    return _estimate(
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
    _check_sharding(dataflow, m, n, k, mesh)
    ring = mesh.num_rows
    lmesh, lcomm = _logical(mesh, comm, transposed)
    p = _plan2d(dataflow, m, n, k, lmesh, element_bytes)
    # every block is the 1/P piece of a shard; the product of one step is the
    # gathered local GEMM with its spanned dimension cut into P
    t_c = float(compute.gemm_s(*_chunk(p.gemm_mnk, p.split_dim, ring)))
    hops = ring // 2
    skews, shifts, aligns = [], [], []
    calls: list[CollectiveCall] = []
    for mv in p.before:
        block = mv.shard_bytes
        skews.append(send_recv_cost(_hop(lcomm, mv.axis), block, hops))
        shifts.append(send_recv_cost(_hop(lcomm, mv.axis), block))
        calls.append(CollectiveCall(CollectiveOp.SEND_RECV, mv.axis, 2, block, hops + ring - 1))
    for mv in p.after:
        block = mv.shard_bytes
        shifts.append(send_recv_cost(_hop(lcomm, mv.axis), block))
        aligns.append(send_recv_cost(_hop(lcomm, mv.axis), block, hops))
        calls.append(CollectiveCall(CollectiveOp.SEND_RECV, mv.axis, 2, block, hops + ring - 1))
    if ring == 1:
        skews, shifts, aligns, calls = [], [], [], []
    skew_s = max((c.total_s for c in skews), default=0.0)
    align_s = max((c.total_s for c in aligns), default=0.0)
    shift_s = max((c.total_s for c in shifts), default=0.0)
    steady = max(t_c * overlap_slowdown, shift_s)
    total = skew_s + t_c + (ring - 1) * steady + align_s
    comm_sum = sum(skews + aligns, CommCost()) + sum(shifts, CommCost()).scaled(ring - 1)
    return _estimate(
        total, t_c * ring, comm_sum, skew_s, steady, t_c + align_s, ring, calls, transposed
    )
