"""Pure analytical cost models: collectives, local compute, MeshSlice and the
baseline 2D/1D GEMM algorithms. Never imports `autotune`."""

from cost_models.collectives import (
    pipelined_broadcast_cost,
    ring_collective_cost,
    ring_collective_s,
    ring_collective_terms,
    send_recv_cost,
)
from cost_models.compute import (
    ComputeModel,
    gemm_flops,
    roofline_gemm_s,
    saturating_efficiency,
)
from cost_models.meshslice import (
    Dataflow,
    collective_calls,
    local_gemm_dims,
    meshslice_estimate,
    meshslice_lower_bound_s,
    meshslice_times,
    sharding_violation,
    slice_count_violation,
    sliced_dim,
    valid_slice_counts,
)
from cost_models.transpose import transpose_cost
from cost_models.types import (
    Axis,
    CollectiveCall,
    CollectiveOp,
    CommCost,
    CommModel,
    GemmEstimate,
    LinkParams,
    LinkRegime,
    MeshShape,
    TimeBreakdown,
)

__all__ = [
    "Axis",
    "CollectiveCall",
    "CollectiveOp",
    "CommCost",
    "CommModel",
    "ComputeModel",
    "Dataflow",
    "GemmEstimate",
    "LinkParams",
    "LinkRegime",
    "MeshShape",
    "TimeBreakdown",
    "collective_calls",
    "gemm_flops",
    "local_gemm_dims",
    "meshslice_estimate",
    "meshslice_lower_bound_s",
    "meshslice_times",
    "pipelined_broadcast_cost",
    "ring_collective_cost",
    "ring_collective_s",
    "ring_collective_terms",
    "roofline_gemm_s",
    "saturating_efficiency",
    "send_recv_cost",
    "sharding_violation",
    "slice_count_violation",
    "sliced_dim",
    "transpose_cost",
    "valid_slice_counts",
]
