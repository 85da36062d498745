"""A NumPy emulation of a 2D mesh of chips and its ring collectives.

A *grid* is one ndarray of shape `(R, C, *local)`: `grid[i, j]` is chip
`(i, j)`'s local array (every chip of a 2D GEMM holds a shard of the same
shape). Collectives run along one mesh axis, every ring of that axis at
once, step by step as the ring algorithms of seed 002 (and seed 000 figure
3) move data, and every chip's sent bytes are counted per axis while they
run. A call log records what each chip issued, in the cost models'
`CollectiveCall` terms, so a run can be compared with what a cost model
charges.

Transposed variants (seed 000 section 3.2.1) run the plain schedule on the
transposed mesh: an `EmulatedMesh(shape, transposed=True)` presents the
logical `num_cols x num_rows` grid whose ROW axis is the physical COL axis,
and records its traffic on the physical axes and chips.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from cost_models import Axis, CollectiveCall, CollectiveOp, MeshShape


def _grid_axis(axis: Axis) -> int:
    """Index of a mesh axis in a grid array: ROW indexes mesh rows (dim 0)."""
    return 0 if axis is Axis.ROW else 1


def _take(grid: np.ndarray, axis: Axis, index: int) -> np.ndarray:
    """The chips at position `index` along `axis` (a view, keeping dims)."""
    sl = [slice(None), slice(None)]
    sl[_grid_axis(axis)] = slice(index, index + 1)
    return grid[tuple(sl)]


@dataclass(frozen=True)
class Traffic:
    """What the chips of a run sent: per physical axis, bytes per chip
    (`(num_rows, num_cols)` arrays of the physical mesh), and the log of
    collectives each chip issued (op, physical axis, ring size, per-chip
    piece in bytes) with how often."""

    bytes_per_chip: dict[Axis, np.ndarray]
    calls: tuple[CollectiveCall, ...]

    def max_bytes(self, axis: Axis) -> float:
        """The most bytes any chip sent on `axis`."""
        return float(self.bytes_per_chip[axis].max())

    def uniform_bytes(self, axis: Axis) -> float | None:
        """Bytes every chip sent on `axis` when all chips sent the same,
        else None."""
        arr = self.bytes_per_chip[axis]
        return float(arr.flat[0]) if np.all(arr == arr.flat[0]) else None


class EmulatedMesh:
    """A logical 2D mesh of emulated chips with ring collectives along an
    axis and per-chip, per-axis byte counting.

    `shape` is the physical mesh; with `transposed=True` the logical mesh is
    `shape.transposed()`: logical chip `(a, b)` is physical chip `(b, a)`
    and logical axis ROW is physical axis COL.
    """

    def __init__(self, shape: MeshShape, transposed: bool = False) -> None:
        self.physical = shape
        self.transposed = transposed
        self.logical = shape.transposed() if transposed else shape
        self._bytes = {ax: np.zeros((shape.num_rows, shape.num_cols)) for ax in Axis}
        self._calls: Counter[tuple[CollectiveOp, Axis, int, float]] = Counter()

    @property
    def num_rows(self) -> int:
        """Logical mesh rows (ring size of the logical ROW axis)."""
        return self.logical.num_rows

    @property
    def num_cols(self) -> int:
        """Logical mesh columns (ring size of the logical COL axis)."""
        return self.logical.num_cols

    def size(self, axis: Axis) -> int:
        """Ring size along logical `axis`."""
        return self.logical.size(axis)

    def physical_axis(self, axis: Axis) -> Axis:
        """The physical axis whose links a logical axis uses."""
        return axis.other() if self.transposed else axis

    # -- sharding ---------------------------------------------------------

    def shard(self, matrix: np.ndarray) -> np.ndarray:
        """Split a 2D matrix into a grid: rows over the (logical) ROW axis,
        columns over the COL axis (seed 000 section 2.3.1)."""
        rows, cols = matrix.shape
        r, c = self.num_rows, self.num_cols
        assert rows % r == 0 and cols % c == 0, "matrix does not shard evenly"
        return np.ascontiguousarray(
            matrix.reshape(r, rows // r, c, cols // c).transpose(0, 2, 1, 3)
        )

    def unshard(self, grid: np.ndarray) -> np.ndarray:
        """The global matrix a grid of 2D shards holds."""
        r, c, lr, lc = grid.shape
        return grid.transpose(0, 2, 1, 3).reshape(r * lr, c * lc)

    # -- accounting -------------------------------------------------------

    def _send(self, axis: Axis, per_chip_bytes: np.ndarray | float) -> None:
        """Charge bytes sent by each logical chip on a logical axis."""
        arr = np.broadcast_to(
            np.asarray(per_chip_bytes, dtype=float), (self.num_rows, self.num_cols)
        )
        if self.transposed:
            arr = arr.T
        self._bytes[self.physical_axis(axis)] += arr

    def _log(self, op: CollectiveOp, axis: Axis, shard_bytes: float) -> None:
        self._calls[(op, self.physical_axis(axis), self.size(axis), float(shard_bytes))] += 1

    def traffic(self) -> Traffic:
        """Bytes sent so far and the collectives issued (physical axes)."""
        calls = tuple(
            CollectiveCall(op=op, axis=ax, ring_size=ring, shard_bytes=shard, count=count)
            for (op, ax, ring, shard), count in sorted(
                self._calls.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value, kv[0][3])
            )
        )
        return Traffic({ax: arr.copy() for ax, arr in self._bytes.items()}, calls)

    # -- collectives ------------------------------------------------------

    def _ring_step(self, grid: np.ndarray, axis: Axis, offset: int = 1) -> np.ndarray:
        """Every chip sends its array to the chip `offset` places further
        along the ring of `axis` (one link hop when offset is +-1)."""
        return np.roll(grid, offset, axis=_grid_axis(axis))

    def all_gather(self, grid: np.ndarray, axis: Axis, dim: int) -> np.ndarray:
        """Ring all-gather along `axis`: every chip ends with the pieces of
        all chips of its ring concatenated along local `dim` in ring order.

        Ring algorithm (seed 002; seed 000 figure 3): in each of `P - 1`
        steps every chip passes the piece it last received (first its own) to
        its successor, so each chip sends `(P - 1) * piece_bytes`.
        """
        p = self.size(axis)
        piece_bytes = grid[0, 0].nbytes
        self._log(CollectiveOp.ALL_GATHER, axis, piece_bytes)
        ax = _grid_axis(axis)
        slots: list[list[np.ndarray | None]] = [[None] * p for _ in range(p)]
        in_flight = grid
        for step in range(p):
            if step:
                in_flight = self._ring_step(in_flight, axis)
                self._send(axis, piece_bytes)
            for pos in range(p):
                # after `step` hops, chip `pos` holds the piece of chip pos - step
                slots[pos][(pos - step) % p] = _take(in_flight, axis, pos)
        rows = [np.concatenate(slots[pos], axis=2 + dim) for pos in range(p)]
        return np.concatenate(rows, axis=ax)

    def reduce_scatter(self, grid: np.ndarray, axis: Axis, dim: int) -> np.ndarray:
        """Ring reduce-scatter along `axis`: the ring's arrays are summed and
        chip `q` keeps the `q`-th of `P` equal chunks along local `dim`.

        Ring algorithm (seed 002): in step `t` chip `p` sends its running sum
        of chunk `p - t - 1` to its successor, which adds its own part; after
        `P - 1` steps chip `q` holds the full chunk `q`. Each chip sends
        `(P - 1) * chunk_bytes`.
        """
        p = self.size(axis)
        length = grid.shape[2 + dim]
        assert length % p == 0, "reduce-scatter dimension does not split over the ring"
        chunks = np.split(grid, p, axis=2 + dim)
        chunk_bytes = chunks[0][0, 0].nbytes
        self._log(CollectiveOp.REDUCE_SCATTER, axis, chunk_bytes)
        ax = _grid_axis(axis)

        def own_chunk(shift: int) -> np.ndarray:
            # chip `pos` contributes its chunk (pos + shift) mod P
            parts = [_take(chunks[(pos + shift) % p], axis, pos) for pos in range(p)]
            return np.concatenate(parts, axis=ax)

        partial = own_chunk(-1)
        for step in range(p - 1):
            partial = self._ring_step(partial, axis)
            self._send(axis, chunk_bytes)
            partial = partial + own_chunk(-step - 2)
        return partial if p > 1 else chunks[0]

    def broadcast(
        self, grid: np.ndarray, axis: Axis, root: int, num_packets: int = 1
    ) -> np.ndarray:
        """Pipelined ring broadcast along `axis` from the chip at position
        `root` of every ring (seed 000 section 2.3.3, figure 3).

        The message is cut into `num_packets` packets that stream down the
        ring `root -> root+1 -> ... -> root+P-1`: every chip but the last
        forwards each packet once, so it sends the whole message and the last
        chip sends nothing.
        """
        return self._chain(grid, axis, root, num_packets, CollectiveOp.BROADCAST, reduce=False)

    def reduce(self, grid: np.ndarray, axis: Axis, root: int, num_packets: int = 1) -> np.ndarray:
        """Pipelined ring reduce along `axis` to the chip at position `root`
        (seed 000 section 2.3.3): partial sums stream `root+1 -> root+2 ->
        ... -> root`, each chip adding its part; every chip but the root
        sends the whole message once. Only the root's result is meaningful;
        the other chips keep their input."""
        return self._chain(grid, axis, root, num_packets, CollectiveOp.REDUCE, reduce=True)

    def _chain(
        self,
        grid: np.ndarray,
        axis: Axis,
        root: int,
        num_packets: int,
        op: CollectiveOp,
        reduce: bool,
    ) -> np.ndarray:
        p = self.size(axis)
        ax = _grid_axis(axis)
        message_bytes = grid[0, 0].nbytes
        self._log(op, axis, message_bytes)
        if p == 1:
            return grid.copy()
        packets = np.array_split(np.arange(grid[0, 0].size), num_packets)
        flat = grid.reshape(grid.shape[0], grid.shape[1], -1)
        out = flat.copy()
        # Hop h moves data from chain position h to h+1; broadcast chains
        # start at the root, reduce chains start just after it and end on it.
        first = root if not reduce else (root + 1) % p
        sent = np.zeros(p)
        for stage in range(num_packets + p - 2):
            for hop in range(p - 1):
                packet = stage - hop
                if not 0 <= packet < num_packets:
                    continue
                src, dst = (first + hop) % p, (first + hop + 1) % p
                idx = packets[packet]
                src_sl = [slice(None), slice(None), idx]
                dst_sl = [slice(None), slice(None), idx]
                src_sl[ax], dst_sl[ax] = src, dst
                if reduce:
                    out[tuple(dst_sl)] = out[tuple(dst_sl)] + out[tuple(src_sl)]
                else:
                    out[tuple(dst_sl)] = out[tuple(src_sl)]
                sent[src] += idx.size * grid.itemsize
        shape = [1, 1]
        shape[ax] = p
        self._send(axis, sent.reshape(shape))
        return out.reshape(grid.shape)

    def send_recv(self, grid: np.ndarray, axis: Axis, offsets: int | np.ndarray) -> np.ndarray:
        """Point-to-point shifts along `axis`: every chip's array moves
        `offset` places along its ring (positive = towards higher positions),
        store-and-forward over the shorter way round.

        `offsets` is one int for every ring, or one per ring (an array over
        the other axis, as Cannon's initial skew needs). A shift of `h` hops
        makes every chip of that ring send its array `h` times.
        """
        p = self.size(axis)
        other = axis.other()
        num_rings = self.size(other)
        offs = np.broadcast_to(np.asarray(offsets, dtype=int), (num_rings,)) % p
        piece_bytes = grid[0, 0].nbytes
        out = grid.copy()
        sent = np.zeros(num_rings)
        for ring in range(num_rings):
            off = int(offs[ring])
            if off == 0:
                continue
            step = 1 if off <= p - off else -1
            hops = off if step == 1 else p - off
            moving = _take(grid, other, ring)
            for _ in range(hops):
                moving = np.roll(moving, step, axis=_grid_axis(axis))
            sl = [slice(None), slice(None)]
            sl[_grid_axis(other)] = slice(ring, ring + 1)
            out[tuple(sl)] = moving
            sent[ring] = hops * piece_bytes
            for _ in range(hops):
                self._log(CollectiveOp.SEND_RECV, axis, piece_bytes)
        shape = [1, 1]
        shape[_grid_axis(other)] = num_rings
        self._send(axis, sent.reshape(shape))
        return out
