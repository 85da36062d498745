"""Collective, Wang, SUMMA and Cannon as `shard_map` kernels (optional
extra `jax`), the same schedules as :mod:`autotune.verify.baselines`."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from autotune.verify.baselines import Baseline, check_baseline, default_decomposed_axis
from autotune.verify.jax_backend import compile_gemm, device_mesh, meshslice_kernel, place
from cost_models import Axis, Dataflow, MeshShape


def _name(axis: Axis) -> str:
    return axis.value


def _shift(x, axis: str, size: int, offset: int):
    """Every device sends `x` `offset` places along its ring of `axis`."""
    from jax import lax

    return lax.ppermute(x, axis, [(i, (i + offset) % size) for i in range(size)])


def _chunk(x, dim: int, index, size: int):
    from jax import lax

    return lax.dynamic_slice_in_dim(x, index * size, size, axis=dim)


def wang_kernel(dataflow: Dataflow, mesh: MeshShape, decomposed: Axis) -> Callable:
    """Wang et al. with the collective on logical `decomposed` turned into
    single-hop `ppermute` steps, each beside one chunk of the local GEMM."""
    import jax.numpy as jnp
    from jax import lax

    ring, ax = mesh.size(decomposed), _name(decomposed)
    ls = dataflow is Dataflow.LS

    def kernel(a, b):
        pos = lax.axis_index(ax)
        if dataflow is Dataflow.OS:
            if decomposed is Axis.COL:
                moving, fixed, width = a, lax.all_gather(b, "row", axis=0, tiled=True), a.shape[1]
            else:
                moving, fixed, width = b, lax.all_gather(a, "col", axis=1, tiled=True), b.shape[0]
            out = None
            for t in range(ring):
                if t:
                    moving = _shift(moving, ax, ring, 1)
                origin = (pos - t) % ring
                if decomposed is Axis.COL:
                    step = moving @ _chunk(fixed, 0, origin, width)
                else:
                    step = _chunk(fixed, 1, origin, width) @ moving
                out = step if out is None else out + step
            return out
        stay, move = (a, b) if ls else (b, a)
        gather, scatter = ("row", "col") if ls else ("col", "row")
        out_dim = 1 if ls else 0

        def product(x):
            return stay @ x.T if ls else x.T @ stay

        if ax == gather:
            size = move.shape[0 if ls else 1]
            shape = list(product(move).shape)
            shape[out_dim] = size * ring
            partial = jnp.zeros(shape, dtype=a.dtype)
            for t in range(ring):
                if t:
                    move = _shift(move, ax, ring, 1)
                origin = (pos - t) % ring
                partial = lax.dynamic_update_slice_in_dim(
                    partial, product(move), origin * size, axis=out_dim
                )
            return lax.psum_scatter(partial, scatter, scatter_dimension=out_dim, tiled=True)
        moved = lax.all_gather(move, gather, axis=0 if ls else 1, tiled=True)
        chunk = moved.shape[0 if ls else 1] // ring
        acc = None
        for t in range(ring):
            contrib = product(_chunk(moved, 0 if ls else 1, (pos - t - 1) % ring, chunk))
            acc = contrib if acc is None else _shift(acc, ax, ring, 1) + contrib
        return acc

    return kernel


def _relay(x, axis: str, size: int, root: int, reduce: bool):
    """Ring broadcast from `root` (or reduce onto it) as `size - 1`
    single-hop `ppermute` relays."""
    from jax import lax

    pos = lax.axis_index(axis)
    first = (root + 1) % size if reduce else root
    for hop in range(size - 1):
        src, dst = (first + hop) % size, (first + hop + 1) % size
        got = lax.ppermute(x, axis, [(src, dst)])
        x = lax.select(pos == dst, x + got if reduce else got, x)
    return x


def summa_kernel(dataflow: Dataflow, mesh: MeshShape) -> Callable:
    """SUMMA: lcm(Nr, Nc) iterations of relay broadcast / reduce."""
    from jax import lax

    r, c = mesh.num_rows, mesh.num_cols
    lcm = math.lcm(r, c)
    per_r, per_c = lcm // r, lcm // c

    def kernel(a, b):
        if dataflow is Dataflow.OS:
            w = a.shape[1] // per_c
            out = None
            for l in range(lcm):
                a_p = _relay(
                    a[:, (l % per_c) * w : (l % per_c + 1) * w], "col", c, l // per_c, False
                )
                b_p = _relay(b[(l % per_r) * w : (l % per_r + 1) * w], "row", r, l // per_r, False)
                out = a_p @ b_p if out is None else out + a_p @ b_p
            return out
        ls = dataflow is Dataflow.LS
        pos = lax.axis_index("col" if ls else "row")
        pieces = []
        for l in range(lcm):
            if ls:
                h = b.shape[0] // per_r
                b_p = _relay(b[(l % per_r) * h : (l % per_r + 1) * h], "row", r, l // per_r, False)
                red = _relay(a @ b_p.T, "col", c, l // per_c, True)
                owner = l // per_c
            else:
                w = a.shape[1] // per_c
                a_p = _relay(
                    a[:, (l % per_c) * w : (l % per_c + 1) * w], "col", c, l // per_c, False
                )
                red = _relay(a_p.T @ b, "row", r, l // per_r, True)
                owner = l // per_r
            pieces.append((owner, red))
        per = per_c if ls else per_r
        import jax.numpy as jnp

        out = None
        for slot in range(per):
            # panel `slot` of the chip at ring position `owner` is panel owner * per + slot
            chosen = pieces[slot][1]
            for owner in range(1, lcm // per):
                cand = pieces[owner * per + slot][1]
                chosen = lax.select(pos == owner, cand, chosen)
            out = chosen if out is None else jnp.concatenate([out, chosen], axis=1 if ls else 0)
        return out

    return kernel


def cannon_kernel(dataflow: Dataflow, mesh: MeshShape) -> Callable:
    """Cannon on a square mesh: skews as direct two-axis `ppermute`s, then
    P steps with single-hop shifts (and, for LS/RS, accumulator shifts and
    a final alignment)."""
    from jax import lax

    p = mesh.num_rows

    def skew(x, along: str, offset_of_ring: Callable[[int], int]):
        pairs = []
        for i in range(p):
            for j in range(p):
                if along == "col":
                    dst = i * p + (j + offset_of_ring(i)) % p
                else:
                    dst = ((i + offset_of_ring(j)) % p) * p + j
                pairs.append((i * p + j, dst))
        return lax.ppermute(x, ("row", "col"), pairs)

    def kernel(a, b):
        if dataflow is Dataflow.OS:
            a, b = skew(a, "col", lambda i: -i), skew(b, "row", lambda j: -j)
            out = None
            for t in range(p):
                out = a @ b if out is None else out + a @ b
                if t < p - 1:
                    a, b = _shift(a, "col", p, -1), _shift(b, "row", p, -1)
            return out
        ls = dataflow is Dataflow.LS
        move_ax, acc_ax = ("row", "col") if ls else ("col", "row")
        moving = skew(b if ls else a, move_ax, lambda i: -i)
        acc = None
        for t in range(p):
            prod = a @ moving.T if ls else moving.T @ b
            acc = prod if acc is None else _shift(acc, acc_ax, p, -1) + prod
            if t < p - 1:
                moving = _shift(moving, move_ax, p, -1)
        return skew(acc, acc_ax, lambda i: i - 1)

    return kernel


def baseline_kernel(
    algorithm: Baseline, dataflow: Dataflow, logical: MeshShape, decomposed: Axis | None = None
) -> Callable:
    """The local kernel of a baseline on the logical mesh."""
    if algorithm is Baseline.COLLECTIVE:
        return meshslice_kernel(dataflow, 1, 1)
    if algorithm is Baseline.WANG:
        return wang_kernel(dataflow, logical, decomposed or default_decomposed_axis(dataflow))
    if algorithm is Baseline.SUMMA:
        return summa_kernel(dataflow, logical)
    return cannon_kernel(dataflow, logical)


def run_baseline_jax(
    algorithm: Baseline,
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    mesh: MeshShape,
    transposed: bool = False,
) -> np.ndarray:
    """Run a baseline on global operands over the device mesh; returns C."""
    from autotune.verify.algorithms import gemm_dims

    logical = mesh.transposed() if transposed else mesh
    check_baseline(algorithm, dataflow, *gemm_dims(dataflow, a, b), logical)
    jmesh = device_mesh(mesh, transposed)
    fn = compile_gemm(baseline_kernel(algorithm, dataflow, logical), jmesh)
    return np.asarray(fn(place(a, jmesh), place(b, jmesh)))
