"""The hardware: chips, how they are wired (a torus, switched nodes, fully
connected nodes, a scale-out network), the mesh shapes they can be used as,
and which calibration describes their links and compute."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import (
    MAX_CHIPS,
    MAX_DIM,
    MAX_FACTOR,
    MAX_GB_PER_S,
    MAX_GIB,
    MAX_LINKS,
    MAX_SECONDS,
    MAX_TFLOPS_PER_S,
    MIN_GB_PER_S,
    MIN_GIB,
    MIN_TFLOPS_PER_S,
    PeakTflopsPerS,
    Spec,
)


class Topology(str, Enum):
    """How the chips are wired.

    torus: every chip links to its neighbours along each torus dimension
    (TPUs); without a `torus:` block each mesh row and column is a ring
    calibrated on its own (the original TPU v4 files). switched: nodes whose
    chips reach each other through a switch at the chip's whole egress rate
    (NVSwitch). fully_connected: nodes whose chips have one direct link to
    each peer (AMD xGMI).
    """

    TORUS = "torus"
    SWITCHED = "switched"
    FULLY_CONNECTED = "fully_connected"


class NodeSpec(Spec):
    """The scale-up domain of a switched or fully connected cluster."""

    chips_per_node: int = Field(
        gt=0,
        le=MAX_CHIPS,
        description="Chips in one node (switch or xGMI domain). Range: 1 to 2^24.",
    )
    egress_gb_per_s: float | None = Field(
        default=None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="switched: per-chip bandwidth into the switch, one direction, GB/s (1e9). "
        "Range: 0.001 to 1e6.",
    )
    links_per_chip: int | None = Field(
        default=None,
        gt=0,
        le=MAX_LINKS,
        description="fully_connected: direct links per chip (peers - 1). Range: 1 to 4096.",
    )
    link_gb_per_s: float | None = Field(
        default=None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="fully_connected: one link, one direction, GB/s. Range: 0.001 to 1e6.",
    )


class ScaleOutSpec(Spec):
    """The network between nodes (rail-optimised InfiniBand / RoCE)."""

    nic_gb_per_s: float = Field(
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="NIC bandwidth per chip, one direction, GB/s. Range: 0.001 to 1e6.",
    )
    rails: int = Field(
        gt=0,
        le=MAX_LINKS,
        description="NICs (rails) per node, one per chip on HGX nodes. Range: 1 to 4096.",
    )


class TorusSpec(Spec):
    """A torus (or mesh) of known dimensions."""

    dims: list[int] = Field(
        description="Chips along each torus dimension, e.g. [8, 8, 4]. Range: each 1 to 2^24, "
        "at most 8 dimensions."
    )
    wraparound: list[bool] = Field(description="Whether each dimension wraps around (a ring).")
    link_gb_per_s: float = Field(
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="One link, one direction, GB/s (1e9). Range: 0.001 to 1e6.",
    )

    @model_validator(mode="after")
    def _check(self) -> TorusSpec:
        if not 1 <= len(self.dims) <= 8 or any(not 1 <= d <= MAX_CHIPS for d in self.dims):
            raise ValueError(
                f"torus.dims must be 1 to 8 chip counts of 1 to 2^24, got {self.dims}; "
                "fix: e.g. [8, 8, 4]"
            )
        if len(self.wraparound) != len(self.dims):
            raise ValueError(
                f"torus.wraparound has {len(self.wraparound)} entries for {len(self.dims)} dims; "
                "fix: give one true/false per dimension"
            )
        return self


class DcnSpec(Spec):
    """The data-center network joining several torus slices (TPU
    multi-slice): every slice is one copy of the cluster's `torus`, and
    chips in different slices talk over the hosts' NICs."""

    num_slices: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Slices joined by the data-center network. Range: 1 to 2^24.",
    )
    gb_per_s: float = Field(
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="Data-center network bandwidth per chip, one direction, GB/s (1e9): the "
        "host's NIC bandwidth over its chips. Range: 0.001 to 1e6.",
    )


class ClusterSpec(Spec):
    """A cluster description (human units in its keys, converted on use)."""

    name: str = Field(description="Cluster name shown in reports.")
    num_chips: int = Field(
        gt=0, le=MAX_CHIPS, description="Chips in the cluster. Range: 1 to 2^24."
    )
    topology: Topology = Field(
        default=Topology.TORUS,
        strict=False,
        description="torus, switched or fully_connected (see Topology).",
    )
    chip: str | None = Field(
        default=None,
        description="Chip preset name or chip YAML path: its peak, HBM capacity and bandwidth.",
    )
    peak_tflops_per_s: dict[str, PeakTflopsPerS] | None = Field(
        default=None,
        description="Per-chip peak dense TFLOP/s by dtype, e.g. {bf16: 275}; taken from the "
        "chip when omitted. Range: each 0.001 to 1e6.",
    )
    hbm_gib: float | None = Field(
        default=None,
        ge=MIN_GIB,
        le=MAX_GIB,
        description="Per-chip memory in GiB. Range: 2^-10 (1 MiB) to 2^20 (1 PiB).",
    )
    block_size: int = Field(
        default=8,
        gt=0,
        le=MAX_DIM,
        description="MeshSlice slicing block b (8 on TPU v4: 128x8 tiles). Range: 1 to 2^24.",
    )
    mesh_shapes: list[list[int]] | None = Field(
        default=None,
        description="Allowed [rows, cols] meshes; omitted means every factor pair. "
        "Range: each side 1 to 2^24.",
    )
    min_axis_size: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Smallest allowed mesh side when mesh_shapes is omitted. Range: 1 to 2^24.",
    )
    calibration: str = Field(
        default="tpu-v4", description="Calibration preset name or path to a calibration JSON."
    )
    overlap_slowdown: float | None = Field(
        default=None,
        ge=1.0,
        le=MAX_FACTOR,
        description="Compute slowdown while communication overlaps it; overrides the "
        "calibration. Range: 1 to 1000.",
    )
    node: NodeSpec | None = Field(
        default=None, description="switched / fully_connected: the node (scale-up domain)."
    )
    scale_out: ScaleOutSpec | None = Field(
        default=None, description="The network between nodes, when there is more than one."
    )
    torus: TorusSpec | None = Field(
        default=None, description="torus: its dimensions; omitted means per-axis calibrated rings."
    )
    dcn: DcnSpec | None = Field(
        default=None,
        description="torus: the data-center network between slices (multi-slice); each slice "
        "is one `torus`.",
    )
    source: str | None = Field(default=None, description="Where these figures come from.")
    hbm_gb_per_s: float | None = Field(
        default=None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="Per-chip HBM bandwidth, GB/s (memory-bound ops). Range: 0.001 to 1e6.",
    )
    attention_tflops_per_s: float | None = Field(
        default=None,
        ge=MIN_TFLOPS_PER_S,
        le=MAX_TFLOPS_PER_S,
        description="Sustained fused-attention rate per chip, TFLOP/s; omitted means the "
        "calibration's GEMM rate. Range: 0.001 to 1e6.",
    )
    data_parallel_gb_per_s: float | None = Field(
        default=None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="Per-chip, per-direction bandwidth of the network tier data-parallel "
        "collectives cross, GB/s. Range: 0.001 to 1e6.",
    )
    pipeline_gb_per_s: float | None = Field(
        default=None,
        ge=MIN_GB_PER_S,
        le=MAX_GB_PER_S,
        description="Per-chip, per-direction bandwidth between pipeline stages, GB/s. "
        "Range: 0.001 to 1e6.",
    )
    network_latency_us: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS * 1e6,
        description="Per-step latency of data-parallel and pipeline transfers, microseconds. "
        "Range: 0 to 3.6e9.",
    )

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.peak_tflops_per_s is None and self.chip is None:
            raise ValueError(
                "peak_tflops_per_s is missing; fix: add `chip:` (a chip preset) or "
                "`peak_tflops_per_s: {bf16: ...}`"
            )
        for shape in self.mesh_shapes or []:
            if len(shape) != 2 or not (1 <= shape[0] <= MAX_CHIPS and 1 <= shape[1] <= MAX_CHIPS):
                raise ValueError(
                    f"mesh_shapes entry {shape} must be [rows, cols] with sides 1 to 2^24; "
                    "fix: write each shape as a two-number list such as [16, 16]"
                )
        self._check_topology()
        return self

    def _check_topology(self) -> None:
        if self.topology is Topology.TORUS:
            if self.node is not None:
                raise ValueError(
                    "node is set on a torus; fix: set `topology: switched` or "
                    "`fully_connected`, or remove `node:`"
                )
            if self.dcn is not None and self.torus is None:
                raise ValueError(
                    "dcn is set without torus; fix: give the slice's `torus:` dimensions"
                )
            if self.torus is not None:
                product = 1
                for d in self.torus.dims:
                    product *= d
                slices = self.dcn.num_slices if self.dcn is not None else 1
                if product * slices != self.num_chips:
                    raise ValueError(
                        f"torus.dims {self.torus.dims} x {slices} slice(s) hold "
                        f"{product * slices} chips, not num_chips {self.num_chips}; fix: make "
                        "the dimensions times dcn.num_slices equal num_chips"
                    )
            return
        if self.dcn is not None:
            raise ValueError(
                f"dcn is set on a {self.topology.value} cluster; fix: remove `dcn:` (nodes use "
                "`scale_out:`)"
            )
        if self.torus is not None:
            raise ValueError(
                f"torus is set on a {self.topology.value} cluster; fix: remove `torus:` "
                "or set `topology: torus`"
            )
        if self.node is None:
            raise ValueError(
                f"node is required for topology {self.topology.value}; fix: add `node:` with "
                "chips_per_node and its link figures"
            )
        n = self.node
        if self.topology is Topology.SWITCHED and n.egress_gb_per_s is None:
            raise ValueError("node.egress_gb_per_s is required on a switched node; fix: add it")
        if self.topology is Topology.FULLY_CONNECTED:
            if n.links_per_chip is None or n.link_gb_per_s is None:
                raise ValueError(
                    "node.links_per_chip and node.link_gb_per_s are required on a fully "
                    "connected node; fix: add both"
                )
            if n.links_per_chip != n.chips_per_node - 1:
                raise ValueError(
                    f"node.links_per_chip is {n.links_per_chip} but a fully connected node of "
                    f"{n.chips_per_node} chips has {n.chips_per_node - 1}; fix: correct either"
                )
        if self.num_chips > n.chips_per_node:
            if self.num_chips % n.chips_per_node:
                raise ValueError(
                    f"num_chips {self.num_chips} is not a whole number of "
                    f"{n.chips_per_node}-chip nodes; fix: use a multiple of chips_per_node"
                )
            if self.scale_out is None:
                raise ValueError(
                    f"{self.num_chips} chips span several nodes but scale_out is missing; "
                    "fix: add `scale_out:` with nic_gb_per_s and rails"
                )

    def document(self) -> dict:
        """The spec as JSON, leaving out the topology keys a file did not
        set (so plans of the original torus files read as before)."""
        data = self.model_dump(mode="json")
        for key in ("chip", "node", "scale_out", "torus", "dcn"):
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Peak FLOP/s of one chip for `dtype` from `peak_tflops_per_s`
        (base units), or None if not listed here (see also the chip)."""
        value = (self.peak_tflops_per_s or {}).get(dtype)
        return None if value is None else value * 1e12
