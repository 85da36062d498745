"""Wang et al.'s collective matmul (seed 000 sections 2.3.4, 3.1 and 5;
Wang et al., ASPLOS 2022). See cost_models.baselines for the conventions."""

from __future__ import annotations

from cost_models.baselines.common import (
    InfeasibleError,
    Plan2D,
    check_sharding,
    chunk_mnk,
    concurrent_cost_s,
    estimate,
    hop_link,
    logical_mesh,
    move_call,
    move_cost,
    plan2d,
)
from cost_models.collectives import send_recv_cost
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    Axis,
    CollectiveCall,
    CollectiveOp,
    CommCost,
    CommModel,
    GemmEstimate,
    MeshShape,
)


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
    check_sharding(dataflow, m, n, k, mesh.transposed() if transposed else mesh)
    lmesh, lcomm = logical_mesh(mesh, comm, transposed)
    p = plan2d(dataflow, m, n, k, lmesh, element_bytes)
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
    p: Plan2D,
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
    pre = [move_cost(mv, comm) for mv in other_before]
    post = [move_cost(mv, comm) for mv in other_after]
    pre_s = concurrent_cost_s([(mv.axis, c) for mv, c in zip(other_before, pre, strict=True)], comm)
    post_s = sum(c.total_s for c in post)
    ring = dec.ring
    chunk = float(compute.gemm_s(*chunk_mnk(p.gemm_mnk, p.split_dim, ring)))
    sr = send_recv_cost(hop_link(comm, axis), dec.shard_bytes) if ring > 1 else CommCost()
    steady = max(chunk * overlap_slowdown, sr.total_s)
    loop = chunk + (ring - 1) * steady
    total = pre_s + loop + post_s
    comm_sum = sum(pre + post, CommCost()) + sr.scaled(ring - 1)
    calls = [move_call(mv) for mv in (*other_before, *other_after)]
    calls.append(CollectiveCall(CollectiveOp.SEND_RECV, axis, 2, dec.shard_bytes, ring - 1))
    return estimate(
        total, chunk * ring, comm_sum, pre_s, steady, chunk + post_s, ring, calls, transposed
    )


# --------------------------------------------------------------------------
# SUMMA
# --------------------------------------------------------------------------
