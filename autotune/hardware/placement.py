"""Which physical resource each mesh axis runs on (hardware.md section 1).

Ranks are placed the way a user places them: row-major, so the col axis
(the `Nc` chips of one mesh row) holds consecutive ranks. On nodes of `G`
chips the col axis stays inside a node when `Nc` divides `G`, and the row
axis takes the rest of the node before it crosses nodes; on a torus the col
axis takes the fastest torus dimensions and the row axis the next ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from autotune.hardware.cluster import Cluster
from autotune.specs.cluster import Topology
from cost_models import Axis, MeshShape


class ResourceKind(str, Enum):
    """The kind of resource under a mesh axis; the value is the key of its
    per-unit-link figures in a calibration."""

    TORUS = "torus"
    SWITCHED = "switched"
    FULLY_CONNECTED = "fully_connected"
    SCALE_OUT = "scale_out"
    DCN = "dcn"  # the data-center network between TPU slices
    CALIBRATED_AXIS = "axis"  # an original torus file: each axis calibrated on its own
    # the cluster file's own data-parallel / pipeline link figures
    CLUSTER_FIGURES = "cluster"


@dataclass(frozen=True)
class AxisPlacement:
    """One mesh axis on the hardware.

    `resource` names what it runs on ("nvswitch", "scale-out NIC", "torus
    dims 1+2", "xgmi"); axes with the same resource share its bandwidth.
    `link_multiplier` is how many calibrated unit links the axis gets: torus
    links (2 for a whole wrapped dimension, 1 otherwise, summed over its
    dimensions), 1 switch egress, `k - 1` xGMI links, 1 NIC.
    `nominal_bytes_per_s` is the data-sheet bandwidth that gives (None for
    an original torus file).
    """

    axis: Axis
    size: int
    kind: ResourceKind
    resource: str
    link_multiplier: float
    nominal_bytes_per_s: float | None
    spans_nodes: bool
    description: str


@dataclass(frozen=True)
class MeshPlacement:
    """Both axes of a mesh on the hardware."""

    mesh: MeshShape
    row: AxisPlacement
    col: AxisPlacement

    def axis(self, axis: Axis) -> AxisPlacement:
        """The placement of `axis`."""
        return self.row if axis is Axis.ROW else self.col

    @property
    def shared(self) -> bool:
        """Whether row and col traffic share one resource (their bytes add)."""
        return self.row.size > 1 and self.col.size > 1 and self.row.resource == self.col.resource


def place_mesh(cluster: Cluster, mesh: MeshShape) -> MeshPlacement:
    """Where the `Nr x Nc` tensor mesh's axes run on `cluster`."""
    if cluster.topology is Topology.TORUS:
        if cluster.spec.torus is None:
            return MeshPlacement(mesh, _calibrated(Axis.ROW, mesh), _calibrated(Axis.COL, mesh))
        return _torus(cluster, mesh)
    return _nodes(cluster, mesh)


def _calibrated(axis: Axis, mesh: MeshShape) -> AxisPlacement:
    size = mesh.size(axis)
    return AxisPlacement(
        axis,
        size,
        ResourceKind.CALIBRATED_AXIS,
        f"torus {axis.value} rings",
        1.0,
        None,
        False,
        f"torus {axis.value} rings (links calibrated per mesh axis)",
    )


def take_dims(
    remaining: list[list[int]], need: int, dims: list[int]
) -> tuple[list[tuple[int, int, bool]], int]:
    """Lay `need` chips on the torus dimensions left in `remaining` (`[dim
    index, chips left]` pairs of the torus `dims`, innermost last),
    innermost first: a dimension whose chips left divide what is still
    needed is taken whole, one that what is needed divides is taken in part
    (its rest stays for the next axis); stop at the first that neither
    divides. Returns the parts taken (dim index, chips, whether that is the
    whole dimension) and what could not be laid (1 when everything fits).
    `remaining` is updated in place."""
    parts: list[tuple[int, int, bool]] = []
    while need > 1 and remaining:
        idx, left = remaining[-1]
        if need % left == 0:
            parts.append((idx, left, left == dims[idx]))
            need //= left
            remaining.pop()
        elif left % need == 0:
            parts.append((idx, need, False))
            remaining[-1][1] = left // need
            need = 1
        else:
            break
    return parts, need


def _torus(cluster: Cluster, mesh: MeshShape) -> MeshPlacement:
    """Col takes the last torus dimensions, row the next: a whole dimension
    with wraparound gives 2 links (a bidirectional ring), a whole one
    without or a part of one gives 1; an axis over several dimensions sums
    them (scaling book, "How to think about TPUs": collectives over several
    axes use each axis's links). Axes splitting one dimension share it."""
    t = cluster.spec.torus
    assert t is not None
    link = t.link_gb_per_s * 1e9
    remaining = [[i, d] for i, d in enumerate(t.dims)]  # dims not yet used, innermost last
    used: dict[Axis, list[tuple[int, int, bool]]] = {}
    for axis in (Axis.COL, Axis.ROW):
        parts, need = take_dims(remaining, mesh.size(axis), list(t.dims))
        used[axis] = parts if need == 1 else []
    placements = {}
    for axis in Axis:
        parts = used[axis]
        size = mesh.size(axis)
        if size > 1 and not parts:
            placements[axis] = AxisPlacement(
                axis,
                size,
                ResourceKind.TORUS,
                "torus (unaligned)",
                1.0,
                link,
                False,
                f"{size} chips not aligned with torus dims {t.dims}: 1 link assumed",
            )
            continue
        mult = sum(2.0 if whole and t.wraparound[i] else 1.0 for i, _, whole in parts) or 1.0
        dims = "+".join(str(i) for i, _, _ in sorted(parts))
        shape = ", ".join(
            f"dim {i}: {n}" + (" wrapped" if whole and t.wraparound[i] else "")
            if whole
            else f"dim {i}: {n} of {t.dims[i]}"
            for i, n, whole in parts
        )
        placements[axis] = AxisPlacement(
            axis,
            size,
            ResourceKind.TORUS,
            f"torus dims {dims}" if parts else "none",
            mult,
            mult * link,
            False,
            f"torus {shape}; {mult:g} links ({mult * link / 1e9:g} GB/s)"
            if parts
            else "single chip",
        )
    row, col = placements[Axis.ROW], placements[Axis.COL]
    row_dims = {i for i, _, _ in used[Axis.ROW]}
    col_dims = {i for i, _, _ in used[Axis.COL]}
    if row_dims & col_dims or "unaligned" in row.resource or "unaligned" in col.resource:
        # both axes on links of one dimension: their traffic shares it
        shared = f"torus dims {'+'.join(str(i) for i in sorted(row_dims | col_dims)) or '?'}"
        row = _renamed(row, shared)
        col = _renamed(col, shared)
    return MeshPlacement(mesh, row, col)


def _renamed(p: AxisPlacement, resource: str) -> AxisPlacement:
    return AxisPlacement(
        p.axis,
        p.size,
        p.kind,
        resource,
        p.link_multiplier,
        p.nominal_bytes_per_s,
        p.spans_nodes,
        p.description + " (shares links with the other axis)",
    )


def group_chips_per_node(chips_per_node: int, stride: int, size: int) -> int:
    """Chips of one group of `size` ranks `stride` apart that share a node of
    `chips_per_node`: `G / stride` (at most `size`) when the stride divides
    the node, else 1 (a group whose members straddle nodes unevenly is
    priced as if each node held one of them)."""
    if stride >= chips_per_node or chips_per_node % stride:
        return 1
    return max(1, min(size, chips_per_node // stride))


def scale_out_rails(cluster: Cluster, stride: int, size: int) -> tuple[float, int]:
    """NIC rails a group of `size` chips `stride` ranks apart drives at once
    when it crosses nodes, and its chips per node.

    Formula (derivation; NCCL's rail-aligned rings, src/graph/search.cc,
    one channel per NIC): a ring of `P` chips with `a` in each node leaves
    each node once per channel, and every hop carries the same bytes, so
    the bytes a node sends out equal one chip's; NCCL spreads its channels
    over the `a` chips' own NICs, and the intra-node hops run on the node's
    links. Per chip the ring moves at::

        min(a * nic_bytes_per_s, node_bytes_per_s)

    returned in NIC units: `min(a, node_bytes_per_s / nic_bytes_per_s)`
    (the node bound only when both figures are known). A group with one
    chip per node drives one rail, as before.
    """
    g = cluster.chips_per_node or 1
    a = group_chips_per_node(g, stride, size)
    rails = float(a)
    nic, node = cluster.scale_out_bytes_per_s, cluster.node_bytes_per_s
    if nic and node:
        rails = max(1.0, min(rails, node / nic))
    return rails, a


def scale_out_description(cluster: Cluster, label: str, rails: float, a: int) -> str:
    """How a group (`label`, e.g. "8 chips") that crosses nodes is priced,
    in one phrase."""
    nic = cluster.scale_out_bytes_per_s
    if a <= 1:
        return f"{label} across nodes, bounded by the NIC" + (
            f" ({nic / 1e9:g} GB/s per chip)" if nic else ""
        )
    rate = f" ({rails * nic / 1e9:g} GB/s)" if nic else ""
    bound = "" if rails >= a else ", bounded by the node's links"
    return f"{label} across nodes, {a} per node on {rails:g} NIC rails{rate}{bound}"


def _nodes(cluster: Cluster, mesh: MeshShape) -> MeshPlacement:
    """Col inside a node when it divides the node size `G`; row inside too
    when `Nr` divides `G / Nc`; an axis that crosses nodes is bounded by the
    NIC rails its chips in one node drive (:func:`scale_out_rails`;
    hardware.md section 1)."""
    g = cluster.chips_per_node
    assert g is not None
    nc, nr = mesh.num_cols, mesh.num_rows
    col_inside = g % nc == 0
    row_inside = col_inside and (g // nc) % nr == 0
    return MeshPlacement(
        mesh,
        _node_axis(cluster, Axis.ROW, nr, row_inside, nc),
        _node_axis(cluster, Axis.COL, nc, col_inside, 1),
    )


def _node_axis(cluster: Cluster, axis: Axis, size: int, inside: bool, stride: int) -> AxisPlacement:
    if size == 1:
        return AxisPlacement(
            axis, 1, ResourceKind.SWITCHED, "none", 1.0, None, False, "single chip"
        )
    if not inside:
        nic = cluster.scale_out_bytes_per_s
        rails, a = scale_out_rails(cluster, stride, size)
        return AxisPlacement(
            axis,
            size,
            ResourceKind.SCALE_OUT,
            "scale-out NIC",
            rails,
            None if nic is None else rails * nic,
            True,
            scale_out_description(cluster, f"{size} chips", rails, a),
        )
    node = cluster.spec.node
    assert node is not None
    if cluster.topology is Topology.SWITCHED:
        egress = (node.egress_gb_per_s or 0.0) * 1e9
        return AxisPlacement(
            axis,
            size,
            ResourceKind.SWITCHED,
            "nvswitch",
            1.0,
            egress,
            False,
            f"{size} chips inside a node on the switch ({egress / 1e9:g} GB/s egress per chip)",
        )
    link = (node.link_gb_per_s or 0.0) * 1e9
    return AxisPlacement(
        axis,
        size,
        ResourceKind.FULLY_CONNECTED,
        f"xgmi {axis.value} peers",
        float(size - 1),
        (size - 1) * link,
        False,
        f"{size} chips inside a node, {size - 1} direct links ({link / 1e9:g} GB/s each)",
    )
