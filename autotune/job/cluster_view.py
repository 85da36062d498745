"""The GPU cluster as the parallelism search reads it, in base units.

Built from the hardware layer's resolved cluster (nodes of `chips_per_node`
chips on a scale-up switch or fully connected links, one NIC rail per chip
between nodes) and its calibration (collective launch, per-step latency and
bandwidth per resource kind; the GEMM rate). A parallel group inside a node
runs on the node's links; a group that spans nodes is bounded by the NIC
(hardware.md section 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import InputError
from autotune.hardware.cluster import Cluster, resolve_cluster
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.cluster import ClusterSpec

GIB = 2**30
NODE_KINDS = ("switched", "fully_connected")


@dataclass(frozen=True)
class SearchHardware:
    """Per-chip figures of one cluster as scalars (seconds, bytes, FLOP/s),
    for the joint search's vectorised pricing (the single-configuration step
    model resolves richer ones: job/hardware.py JobHardware). A ring of P
    chips moving `total` bytes takes `launch + (P-1) (step + total/P/bw)`."""

    name: str
    num_chips: int
    chips_per_node: int
    peak_flops_per_s: float
    gemm_efficiency: float
    attention_efficiency: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    intra_node_bytes_per_s: float
    inter_node_bytes_per_s: float
    intra_node_launch_s: float
    inter_node_launch_s: float
    intra_node_step_s: float
    inter_node_step_s: float
    overlap_slowdown: float
    workspace_bytes: float
    memory_reserve_fraction: float
    dtype: str = "bf16"
    # The resolved cluster and calibration, for MeshSlice's per-axis links
    # (not part of equality or the hash, which the FC time cache keys on).
    cluster: Cluster | None = field(default=None, compare=False, hash=False, repr=False)
    calibration: CalibrationSpec | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def usable_bytes(self) -> float:
        """HBM left for tensors: capacity less the fragmentation reserve and workspace."""
        return self.hbm_bytes * (1 - self.memory_reserve_fraction) - self.workspace_bytes

    def group_link(self, stride: int, size: int) -> tuple[float, float, float]:
        """(bytes/s, launch s, per-step s) of a ring over `size` chips whose
        ranks are `stride` apart: the node's links when the group fits in a
        node (`stride * size <= chips_per_node`), else the NIC rails."""
        if stride * size <= self.chips_per_node:
            return self.intra_node_bytes_per_s, self.intra_node_launch_s, self.intra_node_step_s
        return self.inter_node_bytes_per_s, self.inter_node_launch_s, self.inter_node_step_s


def _link(calibration: CalibrationSpec, kinds: tuple[str, ...]):
    """The calibrated all-gather link of the first resource kind present."""
    entries = calibration.collectives.get("all_gather", {})
    for kind in kinds:
        if kind in entries:
            return entries[kind]
    return None


def search_hardware(
    spec: ClusterSpec,
    calibration: CalibrationSpec,
    dtype: str,
    *,
    workspace_gib: float = 1.0,
    memory_reserve_fraction: float = 0.05,
    base: Path | None = None,
    file: str | None = None,
) -> SearchHardware:
    """Resolve a cluster spec and its calibration into base units; an
    InputError names what the search cannot do without."""
    cluster = resolve_cluster(spec, base)

    def missing(field: str, why: str, fix: str) -> InputError:
        return InputError(
            f"is missing; the parallelism search needs it for {why}",
            file=file,
            field=f"cluster.{field}",
            value=None,
            fix=fix,
        )

    if cluster.chips_per_node is None:
        raise InputError(
            f"is a {cluster.topology.value} cluster; the parallelism search needs nodes",
            file=file,
            field="cluster",
            value=spec.name,
            fix="use a GPU cluster preset such as h100-hgx-32n or give `node:` and `scale_out:`",
        )
    peak = cluster.peak_flops_per_s(dtype)
    if peak is None:
        raise missing("chip", f"the {dtype} peak", "name a chip preset that lists this dtype")
    if cluster.hbm_bytes is None or cluster.hbm_bytes_per_s is None:
        raise missing("chip", "HBM capacity and bandwidth", "name a chip preset (`chip:`)")
    gemm_eff = min(calibration.compute.effective_flops_per_s / peak, 1.0)
    attention = spec.attention_tflops_per_s
    attention_eff = min(attention * 1e12 / peak, 1.0) if attention else gemm_eff
    inside = _link(calibration, NODE_KINDS)
    outside = _link(calibration, ("scale_out",))
    node_bw = inside.link_bytes_per_s if inside else cluster.node_bytes_per_s
    nic_bw = outside.link_bytes_per_s if outside else cluster.scale_out_bytes_per_s
    if not node_bw:
        raise missing("node", "the links inside a node", "give node.egress_gb_per_s")
    if not nic_bw:
        nic_bw = node_bw  # one node: nothing crosses a NIC
    slowdown = spec.overlap_slowdown or calibration.overlap_slowdown
    return SearchHardware(
        name=spec.name,
        num_chips=cluster.num_chips,
        chips_per_node=cluster.chips_per_node,
        peak_flops_per_s=peak,
        gemm_efficiency=gemm_eff,
        attention_efficiency=attention_eff,
        hbm_bytes=float(cluster.hbm_bytes),
        # the calibration's HBM rate (measured) before the chip's nominal one
        hbm_bytes_per_s=float(
            (calibration.compute.hbm_bytes_per_s if calibration.compute else None)
            or cluster.hbm_bytes_per_s
        ),
        intra_node_bytes_per_s=float(node_bw),
        inter_node_bytes_per_s=float(nic_bw),
        intra_node_launch_s=inside.launch_s if inside else 0.0,
        inter_node_launch_s=outside.launch_s if outside else 0.0,
        intra_node_step_s=inside.sync_s if inside else 0.0,
        inter_node_step_s=outside.sync_s if outside else 0.0,
        overlap_slowdown=slowdown,
        workspace_bytes=workspace_gib * GIB,
        memory_reserve_fraction=memory_reserve_fraction,
        dtype=dtype,
        cluster=cluster,
        calibration=calibration,
    )


def load_search_hardware(
    cluster_ref: str, dtype: str = "bf16", calibration_ref: str | None = None, **kw
) -> SearchHardware:
    """A cluster preset (`h100-hgx-32n`) or file, with its own or the given
    calibration, as SearchHardware."""
    from autotune.loading import cluster_file, load_calibration, load_cluster_spec

    spec, _ = load_cluster_spec(cluster_ref)
    path = cluster_file(str(cluster_ref), None)
    base = path.parent if path is not None else None
    calibration, _ = load_calibration(calibration_ref or spec.calibration, base)
    return search_hardware(spec, calibration, dtype, base=base, **kw)
