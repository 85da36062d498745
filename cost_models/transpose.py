"""Re-sharding an activation between the NORMAL and TRANSPOSED layouts."""

from __future__ import annotations

import math

from cost_models.types import Axis, CollectiveOp, CommCost, CommModel, MeshShape


def transpose_cost(
    rows: int, cols: int, element_bytes: float, mesh: MeshShape, comm: CommModel
) -> CommCost:
    """Seconds to move a `rows x cols` matrix from rows-over-ROW /
    cols-over-COL to rows-over-COL / cols-over-ROW (a distributed transpose).

    Derivation (meshtune's approximation; the paper charges transposes but
    gives no formula): every chip holds `shard = rows*cols*e / (Nr*Nc)` bytes
    and, after the transpose, almost all of it lives on other chips. With
    dimension-ordered routing the data crosses each axis once, as send-recv
    traffic. On a bidirectional ring of `P` chips the mean distance to a
    destination is about `P/4` hops and the `P * shard` bytes spread over
    `2P` directed links, so each link carries about `shard * P/8` bytes, and
    at least one shard's worth::

        t_axis = launch_s + ceil(P/4) * sync_s + shard * max(1, P/8) / link_bytes_per_s
        t      = t_row + t_col          (axes with P = 1 cost nothing)

    using the calibrated send-recv parameters of each axis. Units: elements,
    bytes per element, seconds. Expect it to be a rough estimate: it only
    decides between dataflow choices that need transposes and those that do
    not.
    """
    shard_bytes = rows * cols * element_bytes / mesh.num_chips
    total = CommCost()
    for axis in (Axis.ROW, Axis.COL):
        ring = mesh.size(axis)
        if ring <= 1:
            continue
        # size regimes: the parameters of a shard-sized message (identity without)
        link = comm.link(CollectiveOp.SEND_RECV, axis).at(shard_bytes)
        total = total + CommCost(
            launch_s=link.launch_s,
            sync_s=math.ceil(ring / 4) * link.sync_s,
            transfer_s=shard_bytes * max(1.0, ring / 8) / link.link_bytes_per_s,
        )
    return total
