"""MeshSlice: the sliced 2D GEMM, its validity rule and its time
(seed 000 sections 3.1 and 3.2.2; model.md sections 2 and 6)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike

from cost_models.collectives import ring_collective_terms
from cost_models.compute import ComputeModel
from cost_models.concurrency import concurrent_s, resource_key
from cost_models.divisors import divisors
from cost_models.types import (
    Axis,
    CollectiveCall,
    CollectiveOp,
    CommModel,
    GemmEstimate,
    MeshShape,
    TimeBreakdown,
)


class Dataflow(str, Enum):
    """The three 2D GEMM dataflows (seed 000 section 2.3.1, figure 1).

    OS: `C = A @ B`, C stays; A is all-gathered along COL, B along ROW.
    LS: `C = A @ B^T`, A stays; B is all-gathered along ROW, C
        reduce-scattered along COL.
    RS: `C = A^T @ B`, B stays; A is all-gathered along COL, C
        reduce-scattered along ROW.
    `M, N, K` always name the product's output rows, output columns and
    contraction size.
    """

    OS = "OS"
    LS = "LS"
    RS = "RS"


def sliced_dim(dataflow: Dataflow, m: int, n: int, k: int) -> int:
    """The GEMM dimension MeshSlice cuts into `S` slices (model.md section 6):
    OS slices the contraction `K`; LS slices `N` (the moving right operand's
    rows and the output's columns); RS slices `M`."""
    return {Dataflow.OS: k, Dataflow.LS: n, Dataflow.RS: m}[dataflow]


def _matrix_layouts(dataflow: Dataflow, m: int, n: int, k: int) -> dict[str, tuple[int, int]]:
    """Stored shape (rows over ROW, columns over COL) of A, B and C."""
    if dataflow is Dataflow.OS:
        return {"A": (m, k), "B": (k, n), "C": (m, n)}
    if dataflow is Dataflow.LS:
        return {"A": (m, k), "B": (n, k), "C": (m, n)}
    return {"A": (k, m), "B": (k, n), "C": (m, n)}


def sharding_violation(dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape) -> str | None:
    """Why A, B or C cannot be split evenly over the mesh, or None.

    Every matrix's rows go to mesh rows and its columns to mesh columns
    (seed 000 section 3.2.1), so each stored row count must be divisible by
    `num_rows` and each column count by `num_cols`.
    """
    for name, (rows, cols) in _matrix_layouts(dataflow, m, n, k).items():
        if rows % mesh.num_rows:
            return f"{name} has {rows} rows, not divisible by {mesh.num_rows} mesh rows"
        if cols % mesh.num_cols:
            return f"{name} has {cols} columns, not divisible by {mesh.num_cols} mesh columns"
    return None


def slice_unit(mesh: MeshShape, block: int) -> int:
    """`b * lcm(Nr, Nc)`: the sliced dimension must be a multiple of `S`
    times this (see :func:`slice_count_violation`)."""
    return block * math.lcm(mesh.num_rows, mesh.num_cols)


def slice_count_violation(
    dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape, block: int, num_slices: int
) -> str | None:
    """Why `num_slices` is not a valid MeshSlice slice count, or None.

    Rule (model.md section 6; derivation): slice `s` of a local shard takes
    every S-th block of `b` columns (or rows) of the sliced dimension `D`.
    The shard along the ROW axis holds `D / Nr` of it and the shard along the
    COL axis `D / Nc`; both must split into whole `S * b` groups so that the
    gathered blocks on every chip are the global blocks `= s (mod S)`, in
    order, and (LS/RS) each chip's reduce-scatter piece is contiguous::

        D % (S * b * lcm(Nr, Nc)) == 0

    e.g. OS: `K % (S * b * lcm(Nr, Nc)) == 0`.
    """
    if num_slices < 1:
        return f"slice count {num_slices} must be >= 1"
    dim = sliced_dim(dataflow, m, n, k)
    unit = slice_unit(mesh, block) * num_slices
    if dim % unit:
        name = {Dataflow.OS: "K", Dataflow.LS: "N", Dataflow.RS: "M"}[dataflow]
        return (
            f"{dataflow.value} slices {name}={dim}, which is not divisible by "
            f"S*b*lcm(Nr,Nc) = {num_slices}*{block}*{math.lcm(mesh.num_rows, mesh.num_cols)}"
        )
    return None


def valid_slice_counts(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    block: int,
    max_slices: int | None = None,
) -> list[int]:
    """Every valid `S` (ascending): the divisors of `D / (b * lcm(Nr, Nc))`
    when the matrices shard evenly (:func:`sharding_violation`) and that
    quotient is whole; otherwise none. `max_slices` caps the list."""
    if sharding_violation(dataflow, m, n, k, mesh) is not None:
        return []
    dim = sliced_dim(dataflow, m, n, k)
    unit = slice_unit(mesh, block)
    if dim % unit:
        return []
    # factor first: trial division to sqrt(quotient) hangs on huge dimensions
    return divisors(dim // unit, max_slices)


@dataclass(frozen=True)
class _Iteration:
    """One MeshSlice iteration: collectives before the local GEMM (run
    concurrently on different axes), the local GEMM, collectives after it."""

    before: tuple[tuple[CollectiveOp, Axis, int, float], ...]
    gemm_mnk: tuple[float, float, float]
    after: tuple[tuple[CollectiveOp, Axis, int, float], ...]


def _iteration(
    dataflow: Dataflow, m: int, n: int, k: int, mesh: MeshShape, element_bytes: float
) -> _Iteration:
    """The iteration of S=1 scaled per slice later; shard sizes follow
    model.md section 6 (per chip, bytes), before division by S."""
    nr, nc = mesh.num_rows, mesh.num_cols
    e = element_bytes
    if dataflow is Dataflow.OS:
        return _Iteration(
            before=(
                (CollectiveOp.ALL_GATHER, Axis.COL, nc, (m / nr) * (k / nc) * e),
                (CollectiveOp.ALL_GATHER, Axis.ROW, nr, (k / nr) * (n / nc) * e),
            ),
            gemm_mnk=(m / nr, n / nc, k),
            after=(),
        )
    if dataflow is Dataflow.LS:
        return _Iteration(
            before=((CollectiveOp.ALL_GATHER, Axis.ROW, nr, (n / nr) * (k / nc) * e),),
            gemm_mnk=(m / nr, n, k / nc),
            after=((CollectiveOp.REDUCE_SCATTER, Axis.COL, nc, (m / nr) * (n / nc) * e),),
        )
    return _Iteration(
        before=((CollectiveOp.ALL_GATHER, Axis.COL, nc, (k / nr) * (m / nc) * e),),
        gemm_mnk=(m, n / nc, k / nr),
        after=((CollectiveOp.REDUCE_SCATTER, Axis.ROW, nr, (m / nr) * (n / nc) * e),),
    )


def _sliced_gemm(dataflow: Dataflow, mnk: tuple[float, float, float], s: np.ndarray):
    """The local GEMM of one iteration: the sliced dimension divided by S."""
    gm, gn, gk = mnk
    if dataflow is Dataflow.OS:
        return gm, gn, gk / s
    if dataflow is Dataflow.LS:
        return gm, gn / s, gk
    return gm / s, gn, gk


def local_gemm_dims(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    num_slices: int,
    transposed: bool = False,
) -> tuple[float, float, float]:
    """The (m, n, k) of the local GEMM one chip runs per slice of a MeshSlice
    GEMM on `mesh` (model.md section 6; the iteration's GEMM with its sliced
    dimension divided by `num_slices`); Megatron 1D is the `1 x N` mesh
    with one slice. Elements. The transposed variant runs the plain schedule
    on the transposed mesh."""
    physical = mesh.transposed() if transposed else mesh
    it = _iteration(dataflow, m, n, k, physical, 1.0)
    gm, gn, gk = _sliced_gemm(dataflow, it.gemm_mnk, np.asarray(float(num_slices)))
    return float(gm), float(gn), float(gk)


def collective_calls(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    num_slices: int,
    element_bytes: float,
    transposed: bool = False,
) -> tuple[CollectiveCall, ...]:
    """The collectives one chip issues for a whole MeshSlice GEMM, on the
    physical mesh axes: each iteration's calls with `count = S` and the
    per-slice shard (`1/S` of the S=1 shard). The transposed variant runs the
    plain schedule on the transposed mesh, so its axes are exchanged."""
    physical = mesh.transposed() if transposed else mesh
    it = _iteration(dataflow, m, n, k, physical, element_bytes)
    calls = []
    for op, axis, ring, shard in (*it.before, *it.after):
        calls.append(
            CollectiveCall(
                op=op,
                axis=axis.other() if transposed else axis,
                ring_size=ring,
                shard_bytes=shard / num_slices,
                count=num_slices,
            )
        )
    return tuple(calls)


def _stage_terms(calls, comm: CommModel, s: np.ndarray):
    """Per-iteration terms of each collective in `calls` (per-slice shards):
    a list of `(axis, latency, transfer)` for :func:`concurrent_s` and the
    summed launch, sync and transfer seconds."""
    zero = np.zeros_like(s, dtype=float)
    terms, launch, sync, transfer = [], zero.copy(), zero.copy(), zero.copy()
    for op, axis, ring, shard in calls:
        ln, sy, tr = ring_collective_terms(comm.link(op, axis), ring, shard / s)
        terms.append((axis, ln + sy, tr))
        launch, sync, transfer = launch + ln, sync + sy, transfer + tr
    return terms, launch, sync, transfer


def meshslice_times(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    num_slices: ArrayLike,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    overlap_slowdown: float = 1.0,
) -> dict[str, np.ndarray]:
    """Predicted time of a MeshSlice GEMM for each slice count in `num_slices`.

    Schedule (seed 000 section 3.2.2; model.md section 6): a software
    pipeline of S iterations whose stages are the collectives before the
    local GEMM (OS: both all-gathers, concurrently on the two axes; LS/RS:
    the all-gather), the local GEMM, and the collectives after it (LS/RS:
    the reduce-scatter on the other axis). With `pre`, `gemm`, `post` the
    per-iteration stage times::

        prologue = pre
        steady   = max(gemm * overlap_slowdown, pre | post)
        epilogue = gemm + post
        total    = prologue + (S - 1) * steady + epilogue

    which is exact for a pipeline of equal iterations; S = 1 gives the
    unoverlapped Collective 2D GEMM. `pre | post` is the time of the
    next iteration's collectives and the previous one's running together
    (:func:`cost_models.concurrency.concurrent_s`): on separate links
    (a torus) the slower of them, seed 000's `max(pre, post)`; on one
    resource (row and column inside an NVSwitch node) their bytes add
    (hardware.md section 1). Collective times follow
    :func:`ring_collective_terms` with the per-slice shards of model.md
    section 6; the local GEMM follows :meth:`ComputeModel.gemm_s`.
    `overlap_slowdown` (>= 1) stretches compute that runs beside
    communication (1.0 on TPU, the paper's assumption; 1.1-1.3 on GPUs).

    The transposed variant stores every matrix transposed and swaps the
    mesh axes' roles (seed 000 section 3.2.1), so it is the plain schedule on
    the transposed mesh with the axes' links exchanged.

    Units: dimensions in elements, `element_bytes` per element, seconds out.
    Returns arrays (one entry per S) keyed `total_s`, `compute_s`,
    `launch_s`, `sync_s`, `transfer_s`, `prologue_s`, `steady_s`,
    `epilogue_s`.
    """
    s = np.atleast_1d(np.asarray(num_slices, dtype=float))
    if transposed:
        mesh, comm = mesh.transposed(), comm.swapped_axes()
    it = _iteration(dataflow, m, n, k, mesh, element_bytes)
    pre_terms, pre_l, pre_s, pre_t = _stage_terms(it.before, comm, s)
    post_terms, post_l, post_s, post_t = _stage_terms(it.after, comm, s)
    gemm = compute.gemm_s(*_sliced_gemm(dataflow, it.gemm_mnk, s))
    gemm = np.broadcast_to(gemm, s.shape).astype(float)
    prologue = np.broadcast_to(concurrent_s(pre_terms, comm), s.shape)
    comm_steady = concurrent_s(pre_terms + post_terms, comm)
    steady = np.maximum(gemm * overlap_slowdown, comm_steady)
    epilogue = gemm + concurrent_s(post_terms, comm)
    total = prologue + (s - 1) * steady + epilogue
    return {
        "total_s": total,
        "compute_s": s * gemm,
        "launch_s": s * (pre_l + post_l),
        "sync_s": s * (pre_s + post_s),
        "transfer_s": s * (pre_t + post_t),
        "prologue_s": prologue,
        "steady_s": steady,
        "epilogue_s": epilogue,
    }


def meshslice_estimate(
    dataflow: Dataflow,
    m: int,
    n: int,
    k: int,
    mesh: MeshShape,
    num_slices: int,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
    overlap_slowdown: float = 1.0,
) -> GemmEstimate:
    """:func:`meshslice_times` for one slice count, as a `GemmEstimate` with
    its breakdown and the collectives it issues (same formula and units)."""
    t = meshslice_times(
        dataflow,
        m,
        n,
        k,
        mesh,
        [num_slices],
        element_bytes,
        comm,
        compute,
        transposed,
        overlap_slowdown,
    )
    f = {key: float(v[0]) for key, v in t.items()}
    return GemmEstimate(
        breakdown=TimeBreakdown(
            total_s=f["total_s"],
            compute_s=f["compute_s"],
            launch_s=f["launch_s"],
            sync_s=f["sync_s"],
            transfer_s=f["transfer_s"],
        ),
        prologue_s=f["prologue_s"],
        steady_s=f["steady_s"],
        epilogue_s=f["epilogue_s"],
        num_iterations=num_slices,
        calls=collective_calls(dataflow, m, n, k, mesh, num_slices, element_bytes, transposed),
    )


def meshslice_lower_bound_s(
    dataflow: Dataflow,
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    mesh: MeshShape,
    element_bytes: float,
    comm: CommModel,
    compute: ComputeModel,
    transposed: bool = False,
) -> np.ndarray:
    """Seconds no slice count of :func:`meshslice_times` beats, without
    choosing one.

    Formula (derived from the schedule of :func:`meshslice_times`)::

        t >= max( 2 m n k / (Nr Nc) / rate_max,
                  max over resources g of  sum_{calls c on g} (P_c - 1) shard_c / bw_c )

    with `shard_c` a call's S = 1 shard in bytes, `bw_c` its link's fastest
    bandwidth (over size regimes) and `rate_max = min(peak_flops_per_s *
    max_efficiency, ceiling_flops_per_s)`. Derivation: every latency is
    >= 0 and a resource's concurrent time is >= the bytes it carries over
    its bandwidth (:func:`cost_models.concurrency.concurrent_s`), so with
    `pre_g`, `post_g` the S = 1 transfer seconds on resource g the
    prologue, steady iterations and epilogue take at least `pre_g / S`,
    `(pre_g + post_g) / S` and `post_g / S`, which sum to `pre_g + post_g`
    over the S iterations; and prologue + (S - 1) steady + epilogue >=
    S gemm(S), which no efficiency below `max_efficiency` and no roofline
    makes shorter than the FLOPs at `rate_max`. Seconds; dimensions in
    elements, vectorised over `m`, `n`, `k`.
    """
    m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
    if transposed:
        mesh, comm = mesh.transposed(), comm.swapped_axes()
    it = _iteration(dataflow, m, n, k, mesh, element_bytes)  # type: ignore[arg-type]
    carried: dict[str, np.ndarray] = {}
    for op, axis, ring, shard in (*it.before, *it.after):
        if ring <= 1:
            continue
        bw = comm.link(op, axis).fastest_bytes_per_s
        key = resource_key(comm, axis)
        carried[key] = carried.get(key, 0.0) + (ring - 1) * shard / bw
    bound = 2.0 * m * n * k / mesh.num_chips / compute.fastest_flops_per_s
    for seconds in carried.values():
        bound = np.maximum(bound, seconds)
    return bound
