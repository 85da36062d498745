"""Collective 2D GEMM and Wang et al. (seed 000 sections 2.3.4 and 5).
See cost_models.baselines for the conventions."""

from __future__ import annotations

from cost_models.baselines.common import (
    check_sharding,
    concurrent_cost_s,
    estimate,
    logical_mesh,
    move_call,
    move_cost,
    plan2d,
)
from cost_models.compute import ComputeModel
from cost_models.meshslice import Dataflow
from cost_models.types import (
    CommCost,
    CommModel,
    GemmEstimate,
    MeshShape,
)


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

        total = t_ag over the 'before' axes + t_gemm + t_rs

    where the 'before' all-gathers (OS: one per axis) run together: on
    separate links the slower one, on one resource their bytes add
    (cost_models.baselines.common.concurrent_cost_s)

    with `t_ag`, `t_rs` from :func:`ring_collective_cost` (`launch + (P-1)
    * (sync + shard/bw)`) and `t_gemm` from `compute.gemm_s` on the local
    `(m/Nr, n/Nc, k)` (OS), `(m/Nr, n, k/Nc)` (LS), `(m, n/Nc, k/Nr)` (RS).
    It equals MeshSlice with S = 1.

    Bytes per chip (every chip alike): each collective is one call with the
    ring's per-chip piece, `(P-1) * shard_bytes` sent on its axis.
    Raises InfeasibleError when a matrix does not split evenly. Seconds.
    """
    check_sharding(dataflow, m, n, k, mesh.transposed() if transposed else mesh)
    lmesh, lcomm = logical_mesh(mesh, comm, transposed)
    p = plan2d(dataflow, m, n, k, lmesh, element_bytes)
    pre = [move_cost(mv, lcomm) for mv in p.before]
    post = [move_cost(mv, lcomm) for mv in p.after]
    gemm = float(compute.gemm_s(*p.gemm_mnk))
    pre_s = concurrent_cost_s([(mv.axis, c) for mv, c in zip(p.before, pre, strict=True)], lcomm)
    post_s = sum(c.total_s for c in post)
    total = pre_s + gemm + post_s
    comm_sum = sum(pre + post, CommCost())
    calls = [move_call(mv) for mv in (*p.before, *p.after)]
    return estimate(total, gemm, comm_sum, pre_s, 0.0, gemm + post_s, 1, calls, transposed)
