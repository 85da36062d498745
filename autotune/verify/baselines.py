"""The baseline 2D GEMM algorithms on the emulated mesh, scheduled as
`cost_models.baselines` charges them: Collective 2D GEMM, Wang et al.,
SUMMA and Cannon (seed 000 sections 2.3.2-2.3.4; model.md section 7).

Conventions are MeshSlice's (:mod:`autotune.verify.algorithms`): OS
`C = A @ B`, LS `C = A @ B^T` (A stays), RS `C = A^T @ B` (B stays), rows
over ROW and columns over COL, transposed = plain schedule on the
transposed mesh. Each run's traffic can be compared with the `calls` of the
matching cost-model function: per physical axis, the bytes the busiest chip
sent equal `sum(c.bytes_sent_per_chip for c in calls if c.axis is axis)`.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np

from autotune.verify.algorithms import (
    EmulationResult,
    ScheduleError,
    gemm_dims,
    meshslice_grids,
)
from autotune.verify.mesh import EmulatedMesh
from cost_models import Axis, Dataflow, MeshShape, sharding_violation


class Baseline(str, Enum):
    """The 2D GEMM algorithms MeshSlice is compared with."""

    COLLECTIVE = "collective"
    WANG = "wang"
    SUMMA = "summa"
    CANNON = "cannon"


def _sw(grid: np.ndarray) -> np.ndarray:
    return np.swapaxes(grid, -1, -2)


def _cols(grid: np.ndarray, start: int, width: int) -> np.ndarray:
    return grid[:, :, :, start : start + width]


def _rows(grid: np.ndarray, start: int, height: int) -> np.ndarray:
    return grid[:, :, start : start + height]


def check_baseline(
    algorithm: Baseline, dataflow: Dataflow, m: int, n: int, k: int, logical: MeshShape
) -> None:
    """Raise ScheduleError when `algorithm` cannot run this GEMM on the
    logical mesh (the same rules as `cost_models.baselines`)."""
    why = sharding_violation(dataflow, m, n, k, logical)
    if why is None and algorithm is Baseline.SUMMA:
        lcm = math.lcm(logical.num_rows, logical.num_cols)
        dim = {Dataflow.OS: k, Dataflow.LS: n, Dataflow.RS: m}[dataflow]
        if dim % lcm:
            why = f"SUMMA {dataflow.value} cuts {dim} into lcm(Nr,Nc)={lcm} panels"
    if why is None and algorithm is Baseline.CANNON:
        if logical.num_rows != logical.num_cols:
            why = f"Cannon needs a square mesh, not {logical}"
        else:
            p = logical.num_rows
            for d in (m, n, k):
                if d % p:
                    why = f"Cannon cuts every dimension into {p} blocks; {d} does not split"
    if why is not None:
        raise ScheduleError(why)


def _by_position(axis: Axis, ring: int, fn) -> np.ndarray:
    """A grid whose chips at ring position `p` along `axis` hold `fn(p)`'s
    values there (each chip's work depends on where it sits on the ring)."""
    ax = 0 if axis is Axis.ROW else 1
    parts = []
    for p in range(ring):
        sl = [slice(None), slice(None)]
        sl[ax] = slice(p, p + 1)
        parts.append(fn(p)[tuple(sl)])
    return np.concatenate(parts, axis=ax)


def wang_grids(
    em: EmulatedMesh, dataflow: Dataflow, a: np.ndarray, b: np.ndarray, decomposed: Axis
) -> np.ndarray:
    """Wang et al. (as `cost_models.baselines.wang.wang_gemm` schedules it): the
    collective on logical axis `decomposed` becomes `P - 1` single-hop
    send-recvs, each overlapped with one chunk of the local GEMM; the other
    direction is a plain collective, before the loop for an all-gather and
    after it for a reduce-scatter.

    All-gather decomposed: in step `t` chip `p` multiplies the piece that
    started on ring position `p - t` and forwards it. Reduce-scatter
    decomposed: in step `t` chip `p` computes the output chunk of position
    `p - t - 1`, adds the running sum received from its predecessor and
    passes it on; the last step computes its own chunk.
    """
    ring = em.size(decomposed)
    if dataflow is Dataflow.OS:
        if decomposed is Axis.COL:  # A's pieces circulate, B is gathered along ROW
            moving, fixed, width = a, em.all_gather(b, Axis.ROW, dim=0), a.shape[3]

            def mult(piece: np.ndarray, origin: int) -> np.ndarray:
                return piece @ _rows(fixed, origin * width, width)
        else:
            moving, fixed, width = b, em.all_gather(a, Axis.COL, dim=1), b.shape[2]

            def mult(piece: np.ndarray, origin: int) -> np.ndarray:
                return _cols(fixed, origin * width, width) @ piece

        out = None
        piece = moving
        for t in range(ring):
            if t:
                piece = em.send_recv(piece, decomposed, 1)
            step = _by_position(decomposed, ring, lambda p, t=t, x=piece: mult(x, (p - t) % ring))
            out = step if out is None else out + step
        return out
    ls = dataflow is Dataflow.LS
    stay, move = (a, b) if ls else (b, a)
    gather_axis, scatter_axis = (Axis.ROW, Axis.COL) if ls else (Axis.COL, Axis.ROW)
    out_dim = 1 if ls else 0  # the output dimension the gathered operand spans

    def product(moving: np.ndarray) -> np.ndarray:
        return stay @ _sw(moving) if ls else _sw(moving) @ stay

    if decomposed is gather_axis:
        held = [move]
        for _ in range(ring - 1):
            held.append(em.send_recv(held[-1], decomposed, 1))
        products = [product(h) for h in held]
        blocks = [
            _by_position(decomposed, ring, lambda p, o=o: products[(p - o) % ring])
            for o in range(ring)
        ]
        return em.reduce_scatter(np.concatenate(blocks, axis=2 + out_dim), scatter_axis, out_dim)
    moved = em.all_gather(move, gather_axis, dim=0 if ls else 1)
    chunk = moved.shape[2 if ls else 3] // ring

    def contribution(c: int) -> np.ndarray:
        part = _rows(moved, c * chunk, chunk) if ls else _cols(moved, c * chunk, chunk)
        return product(part)

    acc = None
    for t in range(ring):
        contrib = _by_position(decomposed, ring, lambda p, t=t: contribution((p - t - 1) % ring))
        acc = contrib if acc is None else em.send_recv(acc, decomposed, 1) + contrib
    return acc


def summa_grids(
    em: EmulatedMesh, dataflow: Dataflow, a: np.ndarray, b: np.ndarray, num_packets: int
) -> np.ndarray:
    """SUMMA (seed 000 section 2.3.3, figure 2a): `L = lcm(Nr, Nc)`
    iterations; iteration `l` broadcasts panel `l` of each moving input from
    the chip that owns it (ring position `l // (L / P)`) in `num_packets`
    packets, multiplies, and (LS/RS) reduces the partial output panel onto
    its owner."""
    r, c = em.num_rows, em.num_cols
    lcm = math.lcm(r, c)
    per_r, per_c = lcm // r, lcm // c  # panels per chip along ROW / COL
    if dataflow is Dataflow.OS:
        width = a.shape[3] // per_c
        out = np.zeros((r, c, a.shape[2], b.shape[3]))
        for l in range(lcm):
            a_p = _cols(a, (l % per_c) * width, width)
            b_p = _rows(b, (l % per_r) * width, width)
            a_p = em.broadcast(a_p, Axis.COL, l // per_c, num_packets)
            b_p = em.broadcast(b_p, Axis.ROW, l // per_r, num_packets)
            out += a_p @ b_p
        return out
    if dataflow is Dataflow.LS:
        height = b.shape[2] // per_r
        out = np.zeros((r, c, a.shape[2], height * per_c))
        for l in range(lcm):
            b_p = em.broadcast(
                _rows(b, (l % per_r) * height, height), Axis.ROW, l // per_r, num_packets
            )
            red = em.reduce(a @ _sw(b_p), Axis.COL, l // per_c, num_packets)
            root, off = l // per_c, (l % per_c) * height
            out[:, root, :, off : off + height] = red[:, root]
        return out
    width = a.shape[3] // per_c
    out = np.zeros((r, c, width * per_r, b.shape[3]))
    for l in range(lcm):
        a_p = em.broadcast(_cols(a, (l % per_c) * width, width), Axis.COL, l // per_c, num_packets)
        red = em.reduce(_sw(a_p) @ b, Axis.ROW, l // per_r, num_packets)
        root, off = l // per_r, (l % per_r) * width
        out[root, :, off : off + width] = red[root]
    return out


def cannon_grids(em: EmulatedMesh, dataflow: Dataflow, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cannon (seed 000 section 2.3.2) on a square `P x P` mesh, as
    `cost_models.baselines.cannon.cannon_gemm` schedules it.

    OS: skew A along COL (mesh row `i` by `-i`) and B along ROW (column `j`
    by `-j`), then P multiply steps with single-hop shifts between them.
    LS: skew B along ROW; each step multiplies `A @ B'^T`, a contribution to
    output block `(i, i + j + t)`, whose accumulator moves one hop along
    COL per step; the accumulators end one place off their owners and are
    aligned along COL. RS mirrors LS with A moving along COL and the
    accumulator along ROW.
    """
    p = em.num_rows
    skew = -np.arange(p)
    if dataflow is Dataflow.OS:
        a_s, b_s = em.send_recv(a, Axis.COL, skew), em.send_recv(b, Axis.ROW, skew)
        out = np.zeros((p, p, a.shape[2], b.shape[3]))
        for t in range(p):
            out += a_s @ b_s
            if t < p - 1:
                a_s, b_s = em.send_recv(a_s, Axis.COL, -1), em.send_recv(b_s, Axis.ROW, -1)
        return out
    ls = dataflow is Dataflow.LS
    move_axis, acc_axis = (Axis.ROW, Axis.COL) if ls else (Axis.COL, Axis.ROW)
    moving = em.send_recv(b if ls else a, move_axis, skew)
    acc = None
    for t in range(p):
        prod = a @ _sw(moving) if ls else _sw(moving) @ b
        acc = prod if acc is None else em.send_recv(acc, acc_axis, -1) + prod
        if t < p - 1:
            moving = em.send_recv(moving, move_axis, -1)
    return em.send_recv(acc, acc_axis, np.arange(p) - 1)


def default_decomposed_axis(dataflow: Dataflow) -> Axis:
    """The logical axis whose collective Wang's schedule decomposes by
    default: that of the dataflow's first collective (OS and RS: COL, LS:
    ROW)."""
    return Axis.ROW if dataflow is Dataflow.LS else Axis.COL


def run_baseline(
    algorithm: Baseline,
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    mesh: MeshShape,
    transposed: bool = False,
    decomposed_axis: Axis | None = None,
    num_packets: int = 1,
) -> EmulationResult:
    """Run a baseline on global operands over an emulated `mesh` (checked
    first: ScheduleError before anything runs). `decomposed_axis` is Wang's
    decomposed physical axis (default :func:`default_decomposed_axis`);
    `num_packets` is SUMMA's packet count D."""
    m, n, k = gemm_dims(dataflow, a, b)
    logical = mesh.transposed() if transposed else mesh
    check_baseline(algorithm, dataflow, m, n, k, logical)
    em = EmulatedMesh(mesh, transposed)
    ga, gb = em.shard(a), em.shard(b)
    if algorithm is Baseline.COLLECTIVE:
        out = meshslice_grids(em, dataflow, ga, gb, 1, 1)
    elif algorithm is Baseline.WANG:
        if decomposed_axis is None:
            axis = default_decomposed_axis(dataflow)
        else:
            axis = decomposed_axis.other() if transposed else decomposed_axis
        out = wang_grids(em, dataflow, ga, gb, axis)
    elif algorithm is Baseline.SUMMA:
        out = summa_grids(em, dataflow, ga, gb, num_packets)
    else:
        out = cannon_grids(em, dataflow, ga, gb)
    return EmulationResult(em.unshard(out), em.traffic())
