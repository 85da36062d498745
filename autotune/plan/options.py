"""Every layer option of a mesh priced at once (phase 2's inner loop,
vectorised).

A layer option is one FC layer with one stationary matrix in the plain or
transposed variant (Table 1): three GEMMs, each at its fastest valid slice
count. Phase 1 reads these prices for every dataflow choice it weighs, and
the job search needs them for every mesh and micro-batch it considers, so
they are computed for many layer lists (one per token count) in a handful of
:func:`cost_models.meshslice_times` calls: one per (dataflow, variant) with
every GEMM shape and every valid slice count side by side. The arithmetic is
elementwise, so each price is bit-for-bit the one a call per GEMM gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.plan.dataflow import GemmShape, Stationary, table1
from autotune.plan.layers import FCLayer
from autotune.specs.plan_input import SliceScope
from cost_models import (
    CommModel,
    ComputeModel,
    MeshShape,
    meshslice_times,
    sharding_violation,
    slice_count_violation,
    valid_slice_counts,
)


@dataclass(frozen=True)
class GemmChoice:
    """One GEMM of a layer option at its chosen slice count: the shape, the
    valid counts, and total and compute seconds at the chosen one."""

    shape: GemmShape
    num_slices: int
    valid_slice_counts: tuple[int, ...]
    total_s: float
    compute_s: float


@dataclass(frozen=True)
class LayerOption:
    """A layer's three GEMMs under one stationary and variant: seconds for
    all three once, and each GEMM's choice."""

    total_s: float
    gemms: tuple[GemmChoice, GemmChoice, GemmChoice]

    @property
    def slices(self) -> tuple[int, ...]:
        """The three slice counts."""
        return tuple(g.num_slices for g in self.gemms)


#: (layer index, stationary, transposed) -> option, or why it is infeasible
OptionKey = tuple[int, Stationary, bool]


@dataclass(frozen=True)
class PricingContext:
    """What a GEMM's price depends on besides its shape (base units)."""

    mesh: MeshShape
    comm: CommModel
    compute: ComputeModel
    element_bytes: float
    block: int
    max_slices: int | None
    overlap_slowdown: float
    scope: SliceScope


def _gemm_mesh(shape: GemmShape, mesh: MeshShape) -> MeshShape:
    return mesh.transposed() if shape.transposed else mesh


def _why_not(shape: GemmShape, mesh: MeshShape, block: int) -> str:
    m = _gemm_mesh(shape, mesh)
    why = sharding_violation(shape.dataflow, shape.m, shape.n, shape.k, m) or (
        slice_count_violation(shape.dataflow, shape.m, shape.n, shape.k, m, block, 1)
    )
    return f"{shape.gemm_pass.value} {shape.dataflow.value}: {why}"


def price_layer_options(
    layer_lists: Sequence[Sequence[FCLayer]], ctx: PricingContext
) -> list[dict[OptionKey, LayerOption | str]]:
    """For each list of layers (a block at one token count), every layer
    option on `ctx.mesh`: its price at the best slice counts (per GEMM, or
    one count shared by the layer's GEMMs when `ctx.scope` is LAYER), or
    the reason it cannot run."""
    mesh = ctx.mesh
    shapes: list[GemmShape] = []
    valid: list[tuple[int, ...]] = []
    where: list[tuple[int, OptionKey]] = []  # per option: (list index, key)
    option_shapes: list[tuple[int, int, int]] = []
    valid_cache: dict[tuple, tuple[int, ...]] = {}
    for li, layers in enumerate(layer_lists):
        for idx, layer in enumerate(layers):
            for st in Stationary:
                for transposed in (False, True):
                    ids = []
                    for shape in table1(layer, st, transposed):
                        gm = _gemm_mesh(shape, mesh)
                        vkey = (shape.dataflow, shape.m, shape.n, shape.k, gm)
                        counts = valid_cache.get(vkey)
                        if counts is None:
                            counts = tuple(
                                valid_slice_counts(
                                    shape.dataflow,
                                    shape.m,
                                    shape.n,
                                    shape.k,
                                    gm,
                                    ctx.block,
                                    ctx.max_slices,
                                )
                            )
                            valid_cache[vkey] = counts
                        ids.append(len(shapes))
                        shapes.append(shape)
                        valid.append(counts)
                    where.append((li, (idx, st, transposed)))
                    option_shapes.append((ids[0], ids[1], ids[2]))

    # every (shape, slice count) pair, priced by (dataflow, variant) group;
    # a shape's counts sit side by side in `flat_total` from `start[i]`
    lengths = np.array([len(v) for v in valid], dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    flat_total = np.empty(int(lengths.sum()))
    flat_compute = np.empty_like(flat_total)
    groups: dict[tuple, list[int]] = {}
    for i, shape in enumerate(shapes):
        if valid[i]:
            groups.setdefault((shape.dataflow, shape.transposed), []).append(i)
    for (dataflow, transposed), members in groups.items():
        idx = np.asarray(members, dtype=np.int64)
        counts = lengths[idx]
        m = np.repeat([float(shapes[i].m) for i in members], counts)
        n = np.repeat([float(shapes[i].n) for i in members], counts)
        k = np.repeat([float(shapes[i].k) for i in members], counts)
        s = np.concatenate([valid[i] for i in members]).astype(float)
        t = meshslice_times(
            dataflow,
            m,
            n,
            k,
            mesh,
            s,
            ctx.element_bytes,
            ctx.comm,
            ctx.compute,
            transposed,
            ctx.overlap_slowdown,
        )
        where_flat = np.concatenate([np.arange(start[i], start[i] + lengths[i]) for i in members])
        flat_total[where_flat] = t["total_s"]
        flat_compute[where_flat] = t["compute_s"]
    # each shape's fastest count (the first of equal ones, as argmin)
    nonempty = lengths > 0
    best_pos = np.full(len(shapes), -1, dtype=np.int64)
    if nonempty.any():
        starts = start[nonempty]
        mins = np.minimum.reduceat(flat_total, starts)
        seg = np.repeat(np.arange(starts.size), lengths[nonempty])
        is_min = flat_total == mins[seg]
        hits = np.flatnonzero(is_min)
        order = np.flatnonzero(np.diff(np.concatenate([[-1], seg[hits]])) != 0)
        first = hits[order]
        best_pos[np.flatnonzero(nonempty)] = first - starts

    def choice(i: int, p: int) -> GemmChoice:
        j = int(start[i] + p)
        total, compute = float(flat_total[j]), float(flat_compute[j])
        return GemmChoice(shapes[i], valid[i][p], valid[i], total, compute)

    out: list[dict[OptionKey, LayerOption | str]] = [{} for _ in layer_lists]
    for (li, key), ids in zip(where, option_shapes, strict=True):
        missing = [i for i in ids if not valid[i]]
        if missing:
            name = layer_lists[li][key[0]].name
            out[li][key] = f"{name} {key[1].value}-stationary: " + _why_not(
                shapes[missing[0]], mesh, ctx.block
            )
            continue
        if ctx.scope is SliceScope.GEMM:
            picks = [int(best_pos[i]) for i in ids]
        else:
            common = sorted(set.intersection(*(set(valid[i]) for i in ids)))
            if not common:
                name = layer_lists[li][key[0]].name
                out[li][key] = (
                    f"{name} {key[1].value}-stationary: no slice count valid for all 3 GEMMs"
                )
                continue
            sums = np.zeros(len(common))
            for i in ids:
                pos = {c: j for j, c in enumerate(valid[i])}
                sums += np.array([flat_total[start[i] + pos[c]] for c in common])
            best = common[int(np.argmin(sums))]
            picks = [valid[i].index(best) for i in ids]
        gemms = tuple(choice(i, p) for i, p in zip(ids, picks, strict=True))
        if ctx.scope is SliceScope.GEMM:
            total = sum(g.total_s for g in gemms)
        else:
            total = float(sum(flat_total[start[i] + p] for i, p in zip(ids, picks, strict=True)))
        out[li][key] = LayerOption(total, gemms)  # type: ignore[arg-type]
    return out
