"""Every parallel axis of one configuration on the hardware's resources
(hardware.md section 1; architecture.md "hardware view").

Ranks are laid out innermost first in a fixed order:

- nodes (NVSwitch, NVL72, xGMI): the tensor mesh's col axis, its row axis,
  context parallelism, data parallelism, pipeline stages (Megatron-LM's
  `tp-cp-ep-dp-pp` rank order, megatron/core/parallel_state.py; torchtitan's
  is the same with tensor innermost, pipeline outermost);
- a torus: the tensor mesh's col and row axes on the innermost torus
  dimensions, then context parallelism, then pipeline stages, then data
  parallelism (MaxText's order: its `data` mesh axis is the outermost, so
  several slices joined by the data-center network split the data axis
  first: `dcn_data_parallelism`; its `context` axis sits next to `tensor`).

The gradients of weights replicated over both the context and the data
groups are reduced over their product (Megatron-LM's data-parallel group
"with context parallel"): the GRADIENT axis, the data axis when there is no
context parallelism.

An axis takes the next chips of the scale-up domain (a node), or the next
torus dimensions of a slice (`take_dims`); what does not fit crosses the
NIC rails (nodes) or the data-center network (slices). Each axis is a list of
levels, innermost first, one per resource it crosses: a data-parallel group
spanning two slices of four chips each is a torus level of 4 and a DCN
level of 2, reduced hierarchically (cost_models: one ring per level).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import numpy as np
from numpy.typing import ArrayLike

from autotune.hardware.cluster import Cluster
from autotune.hardware.placement import (
    AxisPlacement,
    MeshPlacement,
    ResourceKind,
    place_mesh,
    scale_out_description,
    scale_out_rails,
    take_dims,
)
from autotune.specs.cluster import Topology
from cost_models import Axis, MeshShape


class ParallelAxis(str, Enum):
    """The parallel axes of a configuration."""

    TENSOR_COL = "tensor_col"
    TENSOR_ROW = "tensor_row"
    CONTEXT = "context"
    DATA = "data"
    PIPELINE = "pipeline"
    GRADIENT = "gradient"  # data x context: where gradients are reduced
    EXPERT = "expert"  # expert parallelism: the routed tokens' all-to-all
    EXPERT_TENSOR = "expert_tensor"  # one expert's weights split (expert tensor parallelism)
    EXPERT_DATA = "expert_data"  # where expert gradients are reduced


@dataclass(frozen=True)
class Level:
    """One resource an axis's groups cross: `size` chips of the group on it,
    the calibration key of its unit links (`kind`), the resource's name
    (axes naming the same one share it), how many unit links the group
    drives at once (`link_multiplier`) and the data-sheet rate that gives."""

    size: int
    kind: ResourceKind
    resource: str
    link_multiplier: float
    nominal_bytes_per_s: float | None
    description: str


@dataclass(frozen=True)
class AxisLayout:
    """One parallel axis: its size, the rank distance between neighbours
    (`stride`), and the levels it crosses, innermost first (their sizes
    multiply to `size`; none for a single chip)."""

    axis: ParallelAxis
    size: int
    stride: int
    levels: tuple[Level, ...]

    @property
    def spans_nodes(self) -> bool:
        """Whether the groups cross nodes (NICs) or slices (DCN)."""
        return any(lv.kind in (ResourceKind.SCALE_OUT, ResourceKind.DCN) for lv in self.levels)

    @property
    def dcn_size(self) -> int:
        """Chips of a group in different slices (1 unless it crosses the DCN)."""
        out = 1
        for lv in self.levels:
            if lv.kind is ResourceKind.DCN:
                out *= lv.size
        return out

    def all_to_all_pieces(
        self, total_bytes: ArrayLike, scale_out_share: float = 1.0, scale_up_share: float = 1.0
    ) -> list[tuple[Level, np.ndarray]]:
        """(level, piece bytes) of one all-to-all over this axis in which
        every chip holds `total_bytes` (job/hardware.py
        hierarchical_all_to_all_s has the derivation): level `l` sends
        `P_l - 1` pieces of `Q total / P`, `Q` the chips of the inner
        levels; `scale_out_share` scales the pieces of levels that cross
        nodes or slices (node-limited routing, a deduplicating dispatcher's
        once-per-node sends) and `scale_up_share` those of the levels inside
        one (its once-per-rank sends). Vectorised."""
        total = np.asarray(total_bytes, dtype=float)
        out, inner = [], 1
        for level in self.levels:
            crosses = level.kind in (ResourceKind.SCALE_OUT, ResourceKind.DCN)
            piece = inner * total / self.size * (scale_out_share if crosses else scale_up_share)
            out.append((level, piece))
            inner *= level.size
        return out

    @property
    def description(self) -> str:
        """Where the axis runs, in words."""
        if not self.levels:
            return "single chip"
        return "; then ".join(lv.description for lv in self.levels)


@dataclass(frozen=True)
class Layout:
    """A configuration's axes on the hardware: the tensor mesh's placement
    (the links MeshSlice prices) and every axis as levels."""

    mesh: MeshShape
    tensor: MeshPlacement
    axes: tuple[AxisLayout, ...]
    rank_order: tuple[ParallelAxis, ...]

    def axis(self, which: ParallelAxis) -> AxisLayout:
        """The layout of one parallel axis."""
        return next(a for a in self.axes if a.axis is which)


def _tensor_axis(p: AxisPlacement, stride: int) -> AxisLayout:
    which = ParallelAxis.TENSOR_ROW if p.axis is Axis.ROW else ParallelAxis.TENSOR_COL
    if p.size == 1:
        return AxisLayout(which, 1, stride, ())
    level = Level(
        p.size, p.kind, p.resource, p.link_multiplier, p.nominal_bytes_per_s, p.description
    )
    return AxisLayout(which, p.size, stride, (level,))


def _node_level(cluster: Cluster, size: int, inside: bool, what: str, stride: int) -> Level:
    """A group of `size` chips `stride` ranks apart inside one node (its
    switch or xGMI links) or across nodes (on the NIC rails its chips in one
    node drive, `scale_out_rails`; hardware.md section 1)."""
    node = cluster.spec.node
    assert node is not None
    if not inside:
        nic = cluster.scale_out_bytes_per_s
        rails, a = scale_out_rails(cluster, stride, size)
        return Level(
            size,
            ResourceKind.SCALE_OUT,
            "scale-out NIC",
            rails,
            None if nic is None else rails * nic,
            scale_out_description(cluster, f"{what} of {size}", rails, a),
        )
    if cluster.topology is Topology.SWITCHED:
        egress = (node.egress_gb_per_s or 0.0) * 1e9
        return Level(
            size,
            ResourceKind.SWITCHED,
            "nvswitch",
            1.0,
            egress,
            f"{what} of {size} inside a node on the switch ({egress / 1e9:g} GB/s per chip)",
        )
    link = (node.link_gb_per_s or 0.0) * 1e9
    return Level(
        size,
        ResourceKind.FULLY_CONNECTED,
        f"xgmi {what} peers",
        float(size - 1),
        (size - 1) * link,
        f"{what} of {size} inside a node, {size - 1} direct links ({link / 1e9:g} GB/s each)",
    )


def _figures_level(size: int, rate_gb_per_s: float, what: str) -> Level:
    return Level(
        size,
        ResourceKind.CLUSTER_FIGURES,
        f"cluster {what} links",
        1.0,
        rate_gb_per_s * 1e9,
        f"{what} of {size} on the cluster file's {what} links ({rate_gb_per_s:g} GB/s per chip)",
    )


def _torus_level(cluster: Cluster, parts: list[tuple[int, int, bool]], what: str) -> Level:
    t = cluster.spec.torus
    assert t is not None
    link = t.link_gb_per_s * 1e9
    size = 1
    for _, n, _ in parts:
        size *= n
    mult = sum(2.0 if whole and t.wraparound[i] else 1.0 for i, _, whole in parts) or 1.0
    shape = ", ".join(
        f"dim {i}: {n}" + (" wrapped" if whole and t.wraparound[i] else "")
        if whole
        else f"dim {i}: {n} of {t.dims[i]}"
        for i, n, whole in parts
    )
    dims = "+".join(str(i) for i, _, _ in sorted(parts))
    return Level(
        size,
        ResourceKind.TORUS,
        f"torus dims {dims}",
        mult,
        mult * link,
        f"{what} of {size} on torus {shape}; {mult:g} links ({mult * link / 1e9:g} GB/s)",
    )


def _dcn_level(cluster: Cluster, size: int, what: str) -> Level:
    dcn = cluster.spec.dcn
    rate = None if dcn is None else dcn.gb_per_s * 1e9
    return Level(
        size,
        ResourceKind.DCN,
        "data-center network",
        1.0,
        rate,
        f"{what} of {size} across slices over the data-center network"
        + (f" ({rate / 1e9:g} GB/s per chip)" if rate else ""),
    )


_WHAT = {
    ParallelAxis.CONTEXT: "context-parallel group",
    ParallelAxis.DATA: "data-parallel group",
    ParallelAxis.PIPELINE: "pipeline",
    ParallelAxis.GRADIENT: "data x context group",
    ParallelAxis.EXPERT: "expert-parallel group",
    ParallelAxis.EXPERT_TENSOR: "expert-tensor group",
    ParallelAxis.EXPERT_DATA: "expert-data group",
}


def _nodes(cluster: Cluster, mesh: MeshShape, dp: int, pp: int, cp: int) -> Layout:
    g = cluster.chips_per_node
    assert g is not None
    tp = mesh.num_chips
    tensor = place_mesh(cluster, mesh)
    axes = [_tensor_axis(tensor.col, 1), _tensor_axis(tensor.row, mesh.num_cols)]
    spec = cluster.spec

    def node_axis(
        which: ParallelAxis, size: int, stride: int, figures: float | None, what: str
    ) -> AxisLayout:
        if size == 1:
            return AxisLayout(which, 1, stride, ())
        if figures is not None:
            return AxisLayout(which, size, stride, (_figures_level(size, figures, what),))
        inside = g % (stride * size) == 0
        return AxisLayout(which, size, stride, (_node_level(cluster, size, inside, what, stride),))

    stride = tp
    for which, size, figures in (
        (ParallelAxis.CONTEXT, cp, None),
        (ParallelAxis.DATA, dp, spec.data_parallel_gb_per_s),
        (ParallelAxis.PIPELINE, pp, spec.pipeline_gb_per_s),
    ):
        axes.append(node_axis(which, size, stride, figures, _WHAT[which]))
        stride *= size
    # context and data ranks are adjacent: one group of dp x cp chips
    if cp == 1:
        data = axes[-2]
        axes.append(AxisLayout(ParallelAxis.GRADIENT, data.size, data.stride, data.levels))
    else:
        figures = spec.data_parallel_gb_per_s
        what = _WHAT[ParallelAxis.GRADIENT]
        axes.append(node_axis(ParallelAxis.GRADIENT, dp * cp, tp, figures, what))
    return Layout(
        mesh,
        tensor,
        tuple(axes),
        (
            ParallelAxis.TENSOR_COL,
            ParallelAxis.TENSOR_ROW,
            ParallelAxis.CONTEXT,
            ParallelAxis.DATA,
            ParallelAxis.PIPELINE,
        ),
    )


def _gradient_axis(axes: list[AxisLayout], tp: int) -> AxisLayout:
    """The data x context group as the levels of both (context innermost):
    one ring per level, as every multi-level axis."""
    context = next(a for a in axes if a.axis is ParallelAxis.CONTEXT)
    data = next(a for a in axes if a.axis is ParallelAxis.DATA)
    return AxisLayout(
        ParallelAxis.GRADIENT, context.size * data.size, tp, context.levels + data.levels
    )


def _torus(cluster: Cluster, mesh: MeshShape, dp: int, pp: int, cp: int) -> Layout | str:
    spec = cluster.spec
    tensor = place_mesh(cluster, mesh)
    axes = [_tensor_axis(tensor.col, 1), _tensor_axis(tensor.row, mesh.num_cols)]
    order = (
        ParallelAxis.TENSOR_COL,
        ParallelAxis.TENSOR_ROW,
        ParallelAxis.CONTEXT,
        ParallelAxis.PIPELINE,
        ParallelAxis.DATA,
    )
    stride = mesh.num_chips
    if spec.torus is None:
        # per-axis calibrated rings (the original TPU v4 files): the data and
        # pipeline groups use the cluster file's own link figures
        if cp > 1:
            return (
                f"cluster {spec.name} gives per-axis link figures only, none for a "
                f"context-parallel group of {cp}"
            )
        axes.append(AxisLayout(ParallelAxis.CONTEXT, 1, stride, ()))
        for which, size, figures, key in (
            (ParallelAxis.PIPELINE, pp, spec.pipeline_gb_per_s, "pipeline_gb_per_s"),
            (ParallelAxis.DATA, dp, spec.data_parallel_gb_per_s, "data_parallel_gb_per_s"),
        ):
            what = _WHAT[which]
            if size == 1:
                axes.append(AxisLayout(which, 1, stride, ()))
            elif figures is None:
                return f"cluster {spec.name} gives no {key} for a {what} of {size}"
            else:
                axes.append(AxisLayout(which, size, stride, (_figures_level(size, figures, what),)))
            stride *= size
        axes.append(_gradient_axis(axes, mesh.num_chips))
        return Layout(mesh, tensor, tuple(axes), order)

    dims = list(spec.torus.dims)
    slice_chips = 1
    for d in dims:
        slice_chips *= d
    if slice_chips % mesh.num_chips:
        return (
            f"the {mesh} tensor mesh does not fit in one {slice_chips}-chip slice "
            "(tensor parallelism stays inside a slice)"
        )
    remaining = [[i, d] for i, d in enumerate(dims)]
    for axis in (Axis.COL, Axis.ROW):
        take_dims(remaining, mesh.size(axis), dims)
    dcn_left = spec.dcn.num_slices if spec.dcn is not None else 1
    outer = ((ParallelAxis.CONTEXT, cp), (ParallelAxis.PIPELINE, pp), (ParallelAxis.DATA, dp))
    for which, size in outer:
        what = _WHAT[which]
        if size == 1:
            axes.append(AxisLayout(which, 1, stride, ()))
            continue
        parts, need = take_dims(remaining, size, dims)
        levels = [_torus_level(cluster, parts, what)] if parts else []
        if need > 1:
            if remaining:
                return (
                    f"a {what} of {size} does not lay out on the torus dimensions left "
                    f"({', '.join(str(left) for _, left in remaining)} chips)"
                )
            if dcn_left % need:
                return (
                    f"a {what} of {size} needs {need} slices across the data-center network, "
                    f"which {dcn_left} slice(s) left cannot give"
                )
            dcn_left //= need
            levels.append(_dcn_level(cluster, need, what))
        axes.append(AxisLayout(which, size, stride, tuple(levels)))
        stride *= size
    axes.append(_gradient_axis(axes, mesh.num_chips))
    return Layout(mesh, tensor, tuple(axes), order)


def place_layout(cluster: Cluster, mesh: MeshShape, dp: int, pp: int, cp: int = 1) -> Layout | str:
    """Where every axis of (`mesh`, data parallel `dp`, pipeline `pp`,
    context parallel `cp`) runs on `cluster` (module docstring), or why it
    cannot be laid out."""
    if cluster.topology is Topology.TORUS:
        return _torus(cluster, mesh, dp, pp, cp)
    return _nodes(cluster, mesh, dp, pp, cp)


def _slice_levels(levels: list[Level], inner: int, size: int) -> tuple[Level, ...] | None:
    """The levels crossed by a group of `size` ranks `inner` ranks apart,
    in a rank order whose consecutive groups cross `levels` innermost
    first: skip the innermost `inner` ranks, then take `size`. A level only
    partly skipped or taken keeps its resource with the smaller group size
    (a sub-ring on the same links). None when the sizes do not nest."""
    out: list[Level] = []
    skip, need = inner, size
    for level in levels:
        if need == 1:
            break
        n = level.size
        if skip >= n:
            if skip % n:
                return None
            skip //= n
            continue
        if n % skip:
            return None
        avail, skip = n // skip, 1
        take = min(avail, need)
        if avail % take or need % take:
            return None
        out.append(replace(level, size=take))
        need //= take
    return tuple(out) if need == 1 else None


def expert_axes(
    cluster: Cluster, layout: Layout, ep: int, etp: int = 1
) -> tuple[AxisLayout, AxisLayout, AxisLayout] | str:
    """(expert-tensor, expert-parallel, expert-data) axes of a pipeline
    stage's `N = t cp dp` chips regrouped for the experts (cost_models.moe,
    Megatron-Core's folding): `etp` consecutive ranks in the stage's order
    (tensor, context, data) split each expert's weights; groups of `ep`
    such groups, `etp` ranks apart, exchange tokens; ranks `etp ep` apart
    hold the same experts. On nodes each is a group inside a node when its
    span fits one, else over the NIC rails (as the data axis), an expert
    group spanning nodes in two levels; on a torus, the levels of the
    tensor, context and data axes the ranks cross. Or why it cannot be laid
    out."""
    stage = [
        layout.axis(a)
        for a in (
            ParallelAxis.TENSOR_COL,
            ParallelAxis.TENSOR_ROW,
            ParallelAxis.CONTEXT,
            ParallelAxis.DATA,
        )
    ]
    chips = 1
    for a in stage:
        chips *= a.size
    if chips % (ep * etp):
        if etp == 1:
            return f"expert parallelism {ep} does not divide the stage's {chips} chips"
        return (
            f"expert parallelism {ep} x expert tensor parallelism {etp} does not divide the "
            f"stage's {chips} chips"
        )
    edp = chips // (ep * etp)
    what_ep, what_edp = _WHAT[ParallelAxis.EXPERT], _WHAT[ParallelAxis.EXPERT_DATA]
    what_etp = _WHAT[ParallelAxis.EXPERT_TENSOR]
    if cluster.topology is not Topology.TORUS:
        g = cluster.chips_per_node
        if cluster.spec.node is None or g is None:
            return f"cluster {cluster.spec.name} describes no node to place expert groups on"

        def axis(which: ParallelAxis, size: int, stride: int, what: str) -> AxisLayout:
            if size == 1:
                return AxisLayout(which, 1, stride, ())
            inside = g % (stride * size) == 0
            return AxisLayout(
                which, size, stride, (_node_level(cluster, size, inside, what, stride),)
            )

        tensor = axis(ParallelAxis.EXPERT_TENSOR, etp, 1, what_etp)
        data = axis(ParallelAxis.EXPERT_DATA, edp, ep * etp, what_edp)
        span = ep * etp
        if span <= g or span % g or g % etp:
            return tensor, axis(ParallelAxis.EXPERT, ep, etp, what_ep), data
        # an all-to-all spanning nodes: the chips in one node exchange over
        # the node's links, and each chip's share for the other nodes leaves
        # on its own NIC rail (two levels; a ring's few node-crossing hops
        # spread over every rail instead, which the one-level axes model)
        levels = (
            _node_level(cluster, g // etp, True, what_ep, etp),
            _node_level(cluster, span // g, False, what_ep, g),
        )
        return tensor, AxisLayout(ParallelAxis.EXPERT, ep, etp, levels), data
    levels = [lv for a in stage for lv in a.levels]
    inner = _slice_levels(levels, 1, etp)
    middle = _slice_levels(levels, etp, ep)
    outer = _slice_levels(levels, etp * ep, edp)
    if inner is None or middle is None or outer is None:
        return (
            f"an expert-parallel group of {ep}"
            + (f" x {etp} expert-tensor chips" if etp > 1 else "")
            + " does not nest in the torus groups of the tensor, context and data axes"
        )
    return (
        AxisLayout(ParallelAxis.EXPERT_TENSOR, etp, 1, inner),
        AxisLayout(ParallelAxis.EXPERT, ep, etp, middle),
        AxisLayout(ParallelAxis.EXPERT_DATA, edp, ep * etp, outer),
    )
