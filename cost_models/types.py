"""Plain value types shared by every cost model.

`cost_models` never imports `autotune`: the planner converts its validated
specs into these frozen dataclasses before calling a formula.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class Axis(str, Enum):
    """A mesh axis. ROW is the axis of size `num_rows` (the chips of one mesh
    column: a matrix's rows are split over it); COL the axis of size
    `num_cols` (the chips of one mesh row)."""

    ROW = "row"
    COL = "col"

    def other(self) -> Axis:
        """The other mesh axis."""
        return Axis.COL if self is Axis.ROW else Axis.ROW


class CollectiveOp(str, Enum):
    """Communication operations whose cost is calibrated per mesh axis."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    SEND_RECV = "send_recv"
    ALL_REDUCE = "all_reduce"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALL_TO_ALL = "all_to_all"


@dataclass(frozen=True)
class LinkRegime:
    """The linear parameters one collective follows for per-chip pieces up
    to `max_shard_bytes` (and above the previous regime's bound): NCCL and
    RCCL switch protocol (LL, LL128, Simple) and channel count with message
    size, and each choice has its own latency and bandwidth (see
    :func:`cost_models.collectives.ring_collective_terms`)."""

    max_shard_bytes: float  # math.inf for the last regime
    launch_s: float
    sync_s: float
    link_bytes_per_s: float

    def __post_init__(self) -> None:
        assert self.max_shard_bytes > 0
        assert self.launch_s >= 0 and self.sync_s >= 0 and self.link_bytes_per_s > 0


@dataclass(frozen=True)
class LinkParams:
    """Ring-collective parameters of one operation on one mesh axis
    (model.md section 4): a fixed launch overhead, a per-step
    synchronisation latency and the effective per-step link bandwidth.

    With `regimes` the three values depend on the per-chip piece (one
    linear model per size range, see :class:`LinkRegime`); the plain fields
    then hold the last (large-message) regime, so a formula that reads them
    directly sees the bandwidth plateau. Without regimes (the default, and
    every calibration written before regimes existed) the model is the one
    straight line."""

    launch_s: float
    sync_s: float
    link_bytes_per_s: float
    regimes: tuple[LinkRegime, ...] = ()

    def __post_init__(self) -> None:
        assert self.launch_s >= 0 and self.sync_s >= 0 and self.link_bytes_per_s > 0
        bounds = [r.max_shard_bytes for r in self.regimes]
        assert bounds == sorted(bounds) and (not bounds or bounds[-1] == float("inf"))

    def at(self, shard_bytes: float) -> LinkParams:
        """The linear parameters that hold for a piece of `shard_bytes`
        (the first regime whose bound is >= it); itself without regimes."""
        for regime in self.regimes:
            if shard_bytes <= regime.max_shard_bytes:
                return LinkParams(regime.launch_s, regime.sync_s, regime.link_bytes_per_s)
        return self

    @property
    def fastest_bytes_per_s(self) -> float:
        """The highest bandwidth of any size regime (the plain one without
        regimes): no piece moves faster."""
        return max((r.link_bytes_per_s for r in self.regimes), default=self.link_bytes_per_s)


@dataclass(frozen=True)
class CommModel:
    """Calibrated collective parameters, keyed by (operation, mesh axis),
    and the physical resource each mesh axis runs on.

    `resources` names the resource under each axis (e.g. "nvswitch",
    "scale-out NIC", "torus dim 0"). Collectives running at the same time
    on axes with the same resource name share its bandwidth; on different
    names they overlap. Omitted (None) means every axis has its own links,
    the contention-free torus of seed 000.
    """

    params: Mapping[tuple[CollectiveOp, Axis], LinkParams]
    resources: Mapping[Axis, str] | None = None

    def link(self, op: CollectiveOp, axis: Axis) -> LinkParams:
        """Parameters of `op` on `axis`; a missing pair is a calibration gap."""
        try:
            return self.params[(op, axis)]
        except KeyError:
            raise KeyError(
                f"the calibration has no parameters for {op.value} on the {axis.value} axis"
            ) from None

    def has(self, op: CollectiveOp, axis: Axis) -> bool:
        """Whether the calibration covers `op` on `axis`."""
        return (op, axis) in self.params

    def swapped_axes(self) -> CommModel:
        """The same links with the two mesh axes exchanged (used for the
        transposed variant of a dataflow, which runs the plain schedule on the
        transposed mesh)."""
        resources = (
            None
            if self.resources is None
            else {ax.other(): name for ax, name in self.resources.items()}
        )
        return CommModel({(op, ax.other()): p for (op, ax), p in self.params.items()}, resources)

    def shares_resource(self, a: Axis, b: Axis) -> bool:
        """Whether traffic on axes `a` and `b` shares one resource's
        bandwidth (always for the same axis; never without `resources`)."""
        if a is b:
            return True
        if self.resources is None:
            return False
        return self.resources.get(a) is not None and self.resources.get(a) == self.resources.get(b)


@dataclass(frozen=True)
class MeshShape:
    """A logical 2D mesh of `num_rows x num_cols` chips."""

    num_rows: int
    num_cols: int

    def __post_init__(self) -> None:
        assert self.num_rows >= 1 and self.num_cols >= 1

    @property
    def num_chips(self) -> int:
        """Chips in the mesh."""
        return self.num_rows * self.num_cols

    def size(self, axis: Axis) -> int:
        """Ring size along `axis`."""
        return self.num_rows if axis is Axis.ROW else self.num_cols

    def transposed(self) -> MeshShape:
        """The mesh with its axes exchanged."""
        return MeshShape(self.num_cols, self.num_rows)

    def __str__(self) -> str:
        return f"{self.num_rows}x{self.num_cols}"


@dataclass(frozen=True)
class CommCost:
    """Time of one or more collectives split into its three terms (seconds)."""

    launch_s: float = 0.0
    sync_s: float = 0.0
    transfer_s: float = 0.0

    @property
    def total_s(self) -> float:
        """launch + sync + transfer."""
        return self.launch_s + self.sync_s + self.transfer_s

    def __add__(self, other: CommCost) -> CommCost:
        return CommCost(
            self.launch_s + other.launch_s,
            self.sync_s + other.sync_s,
            self.transfer_s + other.transfer_s,
        )

    def scaled(self, factor: float) -> CommCost:
        """Every term multiplied by `factor` (e.g. the number of iterations)."""
        return CommCost(self.launch_s * factor, self.sync_s * factor, self.transfer_s * factor)


@dataclass(frozen=True)
class TimeBreakdown:
    """Where the time of a distributed GEMM (or a sum of them) goes.

    `total_s` is the critical path. `compute_s` is the pure local GEMM time;
    `launch_s`, `sync_s`, `transfer_s` add up every collective's terms
    whether hidden or not; `exposed_comm_s = total_s - compute_s` is the
    communication (and overlap slowdown) that compute did not hide.
    """

    total_s: float
    compute_s: float
    launch_s: float
    sync_s: float
    transfer_s: float

    @property
    def exposed_comm_s(self) -> float:
        """Critical-path time not spent computing."""
        return max(self.total_s - self.compute_s, 0.0)

    @property
    def comm_s(self) -> float:
        """All communication time, hidden or not."""
        return self.launch_s + self.sync_s + self.transfer_s

    def __add__(self, other: TimeBreakdown) -> TimeBreakdown:
        return TimeBreakdown(
            self.total_s + other.total_s,
            self.compute_s + other.compute_s,
            self.launch_s + other.launch_s,
            self.sync_s + other.sync_s,
            self.transfer_s + other.transfer_s,
        )

    def scaled(self, factor: float) -> TimeBreakdown:
        """Every term multiplied by `factor` (e.g. a layer count)."""
        return TimeBreakdown(
            self.total_s * factor,
            self.compute_s * factor,
            self.launch_s * factor,
            self.sync_s * factor,
            self.transfer_s * factor,
        )

    @staticmethod
    def zero() -> TimeBreakdown:
        """The empty breakdown."""
        return TimeBreakdown(0.0, 0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class CollectiveCall:
    """One collective a chip issues: `op` along `axis` over a ring of
    `ring_size` chips with a per-chip piece of `shard_bytes`, issued `count`
    times. The bytes one chip sends for it are
    `count * (ring_size - 1) * shard_bytes` (ring algorithm)."""

    op: CollectiveOp
    axis: Axis
    ring_size: int
    shard_bytes: float
    count: int = 1

    @property
    def bytes_sent_per_chip(self) -> float:
        """Bytes one chip puts on its `axis` links for this call."""
        return self.count * max(self.ring_size - 1, 0) * self.shard_bytes


@dataclass(frozen=True)
class GemmEstimate:
    """A distributed GEMM's predicted time with the schedule that produced it."""

    breakdown: TimeBreakdown
    prologue_s: float
    steady_s: float
    epilogue_s: float
    num_iterations: int
    calls: tuple[CollectiveCall, ...] = field(default_factory=tuple)

    @property
    def total_s(self) -> float:
        """Critical-path time of the GEMM."""
        return self.breakdown.total_s
