"""Seed 003 reproduced: the ring all-gather matmul (Pallas:MGPU, fp16,
each shard M=1024, K=N=4096) on 2, 4 and 8 H100s, priced from the bundled
H100 preset and its nominal calibration, next to the seed's measured kernel
times and its NCCL all-gather + cuBLAS reference times.

Source: seed 003 (the JAX Pallas:MGPU "collective matmul" guide), its
results table. Nothing here is fitted to that table: the compute rate is the
calibration's stated 80% of the H100's dense peak, the NVLink rate and
NCCL latencies come from h100-nominal, the overlap slowdown 1.1 from the
calibration (Galvatron / Calculon), and the kernel's per-round
synchronisation is the ~6 us the seed states in its lower-bound formula.
"""

from __future__ import annotations

import pytest

from autotune.hardware.calibration import comm_model_for, compute_model_for
from autotune.hardware.cluster import load_cluster
from autotune.hardware.placement import place_mesh
from autotune.loading import load_calibration
from cost_models import Dataflow, LinkParams, MeshShape, meshslice_times, valid_slice_counts
from cost_models.collective_matmul import allgather_then_matmul_s, ring_allgather_matmul_s

SHARD_M, K, N = 1024, 4096, 4096
ELEMENT_BYTES = 2  # fp16
SEED_SYNC_S = 6e-6  # "about 6 us per communication round" (seed 003)
#: devices -> (kernel time, reference time), microseconds (seed 003's table)
SEED = {2: (102e-6, 147e-6), 4: (212e-6, 290e-6), 8: (436e-6, 565e-6)}
TOLERANCE = 0.15


def _models():
    cluster = load_cluster("h100-hgx")
    cal, _ = load_calibration("h100-nominal")
    compute = compute_model_for(cal, cluster, "bf16", ELEMENT_BYTES)  # fp16 peak = bf16 peak
    ag = cal.collectives["all_gather"]["switched"]
    nccl = LinkParams(ag.launch_s, ag.sync_s, ag.link_bytes_per_s)
    sr = cal.collectives["send_recv"]["switched"]
    # one fused kernel: no launch per step; the seed's fence per round
    kernel = LinkParams(0.0, SEED_SYNC_S, sr.link_bytes_per_s)
    return compute, nccl, kernel, cal.overlap_slowdown


def _predict(devices: int) -> tuple[float, float]:
    compute, nccl, kernel, slowdown = _models()
    ours = ring_allgather_matmul_s(SHARD_M, N, K, devices, ELEMENT_BYTES, kernel, compute, slowdown)
    ref = allgather_then_matmul_s(SHARD_M, N, K, devices, ELEMENT_BYTES, nccl, compute)
    return ours, ref


def _meshslice_1d(devices: int) -> tuple[float, int]:
    """The same GEMM as a P x 1 mesh priced by the planner's machinery:
    LS with X = B^T stationary (n_shard x K per chip), Y = A all-gathered
    along the row axis in S slices over NCCL, no reduce-scatter (one column)."""
    cluster = load_cluster("h100-hgx")
    cal, _ = load_calibration("h100-nominal")
    compute = compute_model_for(cal, cluster, "bf16", ELEMENT_BYTES)
    mesh = MeshShape(devices, 1)
    comm = comm_model_for(cal, place_mesh(cluster, mesh))
    m, n = devices * N, devices * SHARD_M
    valid = valid_slice_counts(Dataflow.LS, m, n, K, mesh, cluster.spec.block_size)
    times = meshslice_times(
        Dataflow.LS, m, n, K, mesh, valid, ELEMENT_BYTES, comm, compute,
        overlap_slowdown=cal.overlap_slowdown,
    )["total_s"]  # fmt: skip
    best = int(times.argmin())
    return float(times[best]), valid[best]


def test_seed003_table_printed() -> None:
    compute, *_ = _models()
    one = float(compute.gemm_s(SHARD_M, N, K))
    print(
        f"\nseed 003, H100, fp16, shard {SHARD_M}x{K} @ {K}x{N}; one local GEMM {one * 1e6:.1f} us"
    )
    print(
        "devices  kernel: seed   ours    err   reference: seed   ours    err"
        "   MeshSlice P x 1 over NCCL"
    )
    for devices, (kernel_s, ref_s) in SEED.items():
        ours, ref = _predict(devices)
        ms, s = _meshslice_1d(devices)
        print(
            f"{devices:>7}  {kernel_s * 1e6:>12.0f} {ours * 1e6:>6.0f} {ours / kernel_s - 1:>+6.1%}"
            f"  {ref_s * 1e6:>15.0f} {ref * 1e6:>6.0f} {ref / ref_s - 1:>+6.1%}"
            f"   {ms * 1e6:>6.0f} (S={s})"
        )


@pytest.mark.parametrize("devices", sorted(SEED))
def test_meshslice_1d_sits_between_kernel_and_reference(devices: int) -> None:
    # slicing over NCCL hides most of the all-gather but pays NCCL's launch
    # per slice: slower than the fused kernel, faster than gather-then-GEMM
    ours, ref = _predict(devices)
    ms, _ = _meshslice_1d(devices)
    assert ours < ms < ref


@pytest.mark.parametrize("devices", sorted(SEED))
def test_seed003_within_tolerance(devices: int) -> None:
    kernel_s, ref_s = SEED[devices]
    ours, ref = _predict(devices)
    assert abs(ours / kernel_s - 1) <= TOLERANCE, (devices, ours, kernel_s)
    assert abs(ref / ref_s - 1) <= TOLERANCE, (devices, ref, ref_s)
    # the overlapped kernel beats the reference, as measured
    assert ours < ref


def test_compute_is_a_realistic_fraction_of_peak() -> None:
    compute, *_ = _models()
    one = float(compute.gemm_s(SHARD_M, N, K))
    utilisation = 2 * SHARD_M * N * K / one / 989e12
    # the seed measures ~43 us (81% of the dense peak) for this GEMM alone
    assert 0.7 < utilisation < 0.9
