"""Shared plumbing of the baseline 2D GEMM cost models: the stored
layouts, the collectives each dataflow moves, and the breakdown builder.
See cost_models.baselines for the conventions."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.collectives import ring_collective_cost
from cost_models.concurrency import concurrent_s
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
class Move:
    """One collective of the S=1 (unsliced) 2D GEMM: `op` along `axis` over
    `ring` chips with a per-chip piece of `shard_bytes` (all-gather input
    piece, reduce-scatter output piece)."""

    op: CollectiveOp
    axis: Axis
    ring: int
    shard_bytes: float


@dataclass(frozen=True)
class Plan2D:
    """The collectives before and after the local GEMM of a dataflow, the
    local GEMM `(m, n, k)` with every operand gathered, and the index (0, 1,
    2 for m, n, k) of the GEMM dimension the gathered moving operand spans,
    which is the dimension every decomposed algorithm cuts into chunks."""

    before: tuple[Move, ...]
    gemm_mnk: tuple[float, float, float]
    after: tuple[Move, ...]
    split_dim: int


def plan2d(dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape, e: float) -> Plan2D:
    """Per-chip shards of the three dataflows (model.md section 6, S = 1)."""
    nr, nc = mesh.num_rows, mesh.num_cols
    if dataflow is Dataflow.OS:
        return Plan2D(
            before=(
                Move(CollectiveOp.ALL_GATHER, Axis.COL, nc, (m / nr) * (k / nc) * e),
                Move(CollectiveOp.ALL_GATHER, Axis.ROW, nr, (k / nr) * (n / nc) * e),
            ),
            gemm_mnk=(m / nr, n / nc, k),
            after=(),
            split_dim=2,
        )
    if dataflow is Dataflow.LS:
        return Plan2D(
            before=(Move(CollectiveOp.ALL_GATHER, Axis.ROW, nr, (n / nr) * (k / nc) * e),),
            gemm_mnk=(m / nr, n, k / nc),
            after=(Move(CollectiveOp.REDUCE_SCATTER, Axis.COL, nc, (m / nr) * (n / nc) * e),),
            split_dim=1,
        )
    return Plan2D(
        before=(Move(CollectiveOp.ALL_GATHER, Axis.COL, nc, (k / nr) * (m / nc) * e),),
        gemm_mnk=(m, n / nc, k / nr),
        after=(Move(CollectiveOp.REDUCE_SCATTER, Axis.ROW, nr, (m / nr) * (n / nc) * e),),
        split_dim=0,
    )


def chunk_mnk(mnk: tuple[float, float, float], split_dim: int, parts: float) -> tuple[float, ...]:
    """The local GEMM with dimension `split_dim` divided into `parts`."""
    return tuple(d / parts if i == split_dim else d for i, d in enumerate(mnk))


def check_sharding(dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape) -> None:
    why = sharding_violation(dataflow, m, n, k, mesh)
    if why is not None:
        raise InfeasibleError(f"{dataflow.value} on {mesh}: {why}")


def estimate(
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


def logical_mesh(mesh: MeshShape, comm: CommModel, transposed: bool) -> tuple[MeshShape, CommModel]:
    return (mesh.transposed(), comm.swapped_axes()) if transposed else (mesh, comm)


def move_cost(mv: Move, comm: CommModel) -> CommCost:
    return ring_collective_cost(comm.link(mv.op, mv.axis), mv.ring, mv.shard_bytes)


def move_call(mv: Move) -> CollectiveCall:
    return CollectiveCall(mv.op, mv.axis, mv.ring, mv.shard_bytes, 1)


def concurrent_cost_s(items: list[tuple[Axis, CommCost]], comm: CommModel) -> float:
    """Seconds until several concurrently issued collectives (each on its
    mesh axis) finish: costs on one resource add their transfers, on
    separate resources they overlap (cost_models.concurrency.concurrent_s;
    hardware.md section 1). Without resources: the slowest one."""
    if not items:
        return 0.0
    terms = [(axis, c.launch_s + c.sync_s, c.transfer_s) for axis, c in items]
    return float(concurrent_s(terms, comm))


def hop_link(comm: CommModel, axis: Axis) -> LinkParams:
    return comm.link(CollectiveOp.SEND_RECV, axis)


# --------------------------------------------------------------------------
# Collective 2D GEMM
# --------------------------------------------------------------------------
