"""The linear ring-collective cost model (seed 000 section 3.2.2, equation 5;
seed 002 "collective communication performance analysis")."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from cost_models.types import CommCost, LinkParams


def ring_collective_terms(
    link: LinkParams, ring_size: ArrayLike, shard_bytes: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Launch, sync and transfer seconds of one ring all-gather,
    reduce-scatter or send-recv step sequence.

    Formula (model.md section 4; seed 000 equation 5)::

        t = launch_s + (P - 1) * (sync_s + shard_bytes / link_bytes_per_s)

    `ring_size` is P (chips on the ring, >= 1); `shard_bytes` is one chip's
    piece in bytes: the input piece for an all-gather, the output piece for
    a reduce-scatter, the message for a send-recv. A ring of one chip sends
    nothing and costs nothing. Vectorised over `shard_bytes` and
    `ring_size` (arrays broadcast against each other).

    Assumes a contention-free ring (each torus row or column is its own
    ring), which is why the model fits TPU tori well (seed 000 section 5.3).

    Size regimes (docs/calibrate.md "The collective model"): when `link`
    has regimes, each piece uses the launch, sync and bandwidth of the
    regime its `shard_bytes` falls in (regime r covers pieces above the
    bound of regime r-1 up to its own `max_shard_bytes`), i.e. the same
    formula with per-size-range parameters. This is how NCCL and RCCL
    behave: their tuner picks a protocol and channel count per message size,
    each with its own latency and bandwidth (NCCL src/graph/tuning.cc), so
    the measured time is piecewise linear in size. Without regimes the
    result is bit-for-bit the single straight line.
    """
    shard = np.asarray(shard_bytes, dtype=float)
    ring = np.asarray(ring_size)
    if ring.ndim == 0 and ring <= 1:
        zero = np.zeros_like(shard)
        return zero, zero, zero
    steps = ring - 1 if ring.ndim == 0 else np.maximum(ring - 1, 0)
    shape = np.broadcast_shapes(shard.shape, ring.shape)
    if not link.regimes and ring.ndim == 0:
        # one ring of two or more chips (the common call): the same
        # products as below, without broadcasting
        launch = np.full(shape, link.launch_s)
        sync = np.full(shape, steps * link.sync_s)
        return launch, sync, np.asarray(steps * shard / link.link_bytes_per_s, dtype=float)
    moves = np.broadcast_to(steps > 0, shape)
    if not link.regimes:
        launch = np.where(moves, link.launch_s, 0.0)
        sync = np.broadcast_to(steps * link.sync_s, shape).astype(float)
        transfer = np.broadcast_to(steps * shard / link.link_bytes_per_s, shape).astype(float)
        return launch, sync, transfer
    launch = np.zeros(shape)
    sync = np.zeros(shape)
    transfer = np.zeros(shape)
    below = np.zeros(shape, dtype=bool)
    for regime in link.regimes:
        here = (shard <= regime.max_shard_bytes) & ~below
        launch = np.where(here & moves, regime.launch_s, launch)
        sync = np.where(here, steps * regime.sync_s, sync)
        transfer = np.where(here, steps * shard / regime.link_bytes_per_s, transfer)
        below |= here
    return launch, sync, transfer


def ring_collective_s(link: LinkParams, ring_size: ArrayLike, shard_bytes: ArrayLike) -> np.ndarray:
    """Total seconds of one ring collective: the sum of
    :func:`ring_collective_terms` (same formula, units and source)."""
    launch, sync, transfer = ring_collective_terms(link, ring_size, shard_bytes)
    return launch + sync + transfer


def ring_collective_cost(link: LinkParams, ring_size: int, shard_bytes: float) -> CommCost:
    """:func:`ring_collective_terms` for a scalar shard, as a `CommCost`."""
    launch, sync, transfer = ring_collective_terms(link, ring_size, shard_bytes)
    return CommCost(float(launch), float(sync), float(transfer))


def pipelined_broadcast_cost(
    link: LinkParams, ring_size: int, message_bytes: float, num_packets: int
) -> CommCost:
    """A ring broadcast (or reduce) streamed in `num_packets` packets.

    Formula (seed 000 section 2.3.3, figure 3; derivation below)::

        stages = D + P - 2
        t = launch_s + stages * (sync_s + (message_bytes / D) / link_bytes_per_s)

    The message is cut into D packets that stream along the P-chip ring; a
    packet needs P - 1 link hops and packet i starts i stages after the
    first, so the last packet arrives after (D - 1) + (P - 1) link stages,
    each moving one packet of `message_bytes / D` bytes and paying one
    synchronisation. (The seed counts D + P - 1 stages, including the stage
    in which the root injects the first packet; no link moves data in it.)
    `message_bytes` is the whole message in bytes, the result in seconds; a
    ring of one chip costs nothing.
    """
    if ring_size <= 1:
        return CommCost()
    if num_packets < 1:
        raise ValueError("num_packets must be >= 1")
    stages = num_packets + ring_size - 2
    packet_bytes = message_bytes / num_packets
    link = link.at(packet_bytes)  # size regimes: the packet's (identity without)
    return CommCost(
        launch_s=link.launch_s,
        sync_s=stages * link.sync_s,
        transfer_s=stages * packet_bytes / link.link_bytes_per_s,
    )


def send_recv_cost(link: LinkParams, message_bytes: float, num_hops: int = 1) -> CommCost:
    """A point-to-point transfer of `message_bytes` over `num_hops` links of
    a ring, store-and-forward.

    Formula (model.md section 4 with P - 1 = hops)::

        t = launch_s + hops * (sync_s + message_bytes / link_bytes_per_s)

    Zero hops cost nothing. Seconds.
    """
    if num_hops <= 0:
        return CommCost()
    link = link.at(message_bytes)  # size regimes: the message's (identity without)
    return CommCost(
        launch_s=link.launch_s,
        sync_s=num_hops * link.sync_s,
        transfer_s=num_hops * message_bytes / link.link_bytes_per_s,
    )
