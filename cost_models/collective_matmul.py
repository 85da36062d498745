"""The 1D ring all-gather matmul (seed 003) and its unoverlapped reference
(an all-gather, then one GEMM), priced with the same link and compute
models as the 2D algorithms."""

from __future__ import annotations

from cost_models.collectives import ring_collective_s
from cost_models.compute import ComputeModel
from cost_models.types import LinkParams


def ring_allgather_matmul_s(
    shard_m: int,
    n: int,
    k: int,
    num_devices: int,
    element_bytes: float,
    link: LinkParams,
    compute: ComputeModel,
    overlap_slowdown: float = 1.0,
) -> float:
    """Seconds of `AllGather(A) @ B` as a ring collective matmul on
    `num_devices` chips (seed 003, "ring all-gather" algorithm).

    Each device holds an `shard_m x k` shard of `A` and a `k x n` block of
    `B`. In step i it multiplies the shard it holds (its own at step 0)
    while sending that shard to its ring neighbour; before the next step it
    waits for the neighbour's shard (a semaphore after a memory fence, the
    per-round cost the seed measures at ~6 us). The last step sends nothing
    and waits for nothing::

        t_gemm = compute.gemm_s(shard_m, n, k)
        t_send = shard_m * k * element_bytes / link_bytes_per_s
        t = launch_s + (P - 1) * (max(t_gemm * overlap_slowdown, t_send) + sync_s) + t_gemm

    `sync_s` is the per-step synchronisation the seed describes (not hidden
    behind compute: the wait follows the step's GEMM); `launch_s` the kernel
    launch (0 for one fused kernel). P = 1 is one local GEMM. Seconds.
    """
    gemm = float(compute.gemm_s(shard_m, n, k))
    if num_devices <= 1:
        return gemm
    send = shard_m * k * element_bytes / link.link_bytes_per_s
    step = max(gemm * overlap_slowdown, send) + link.sync_s
    return link.launch_s + (num_devices - 1) * step + gemm


def allgather_then_matmul_s(
    shard_m: int,
    n: int,
    k: int,
    num_devices: int,
    element_bytes: float,
    link: LinkParams,
    compute: ComputeModel,
) -> float:
    """Seconds of the unoverlapped reference of seed 003: a ring all-gather
    of the `shard_m x k` shards (e.g. NCCL), then one local GEMM of the
    gathered `(P * shard_m) x k` by `k x n` (e.g. cuBLAS)::

        t = launch_s + (P - 1) * (sync_s + shard_bytes / link_bytes_per_s)
            + compute.gemm_s(P * shard_m, n, k)

    (model.md section 4 for the all-gather). Seconds."""
    shard_bytes = shard_m * k * element_bytes
    gather = float(ring_collective_s(link, num_devices, shard_bytes))
    return gather + float(compute.gemm_s(num_devices * shard_m, n, k))
