"""The GPU cluster as the parallelism search reads it, in base units.

Built from the hardware layer's resolved cluster (nodes of `chips_per_node`
chips on a scale-up switch or fully connected links, one NIC rail per chip
between nodes) and its calibration (collective launch, per-step latency and
bandwidth per resource kind, with their size regimes; the roofline GEMM model
with its efficiency curve), through the hardware layer's own converters
(hardware/calibration.py), as the whole-step model reads them. A parallel group inside a node
runs on the node's links; a group that spans nodes is bounded by the NIC
(hardware.md section 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.errors import InputError
from autotune.hardware.calibration import DTYPE_BYTES, compute_model_for, link_params
from autotune.hardware.cluster import Cluster, resolve_cluster
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.cluster import ClusterSpec
from cost_models import ComputeModel, LinkParams

GIB = 2**30
NODE_KINDS = ("switched", "fully_connected")


@dataclass(frozen=True)
class SearchHardware:
    """Per-chip figures of one cluster in base units (seconds, bytes,
    FLOP/s), for the joint search's vectorised pricing, read from the same
    models the single-configuration step model uses (job/hardware.py
    JobHardware): `gemm` is the calibration's roofline GEMM model (its
    efficiency curve, bounded by the chip's peak and HBM), the links are the
    calibrated ones with their size regimes. A ring of P chips moving
    `total` bytes takes `launch + (P-1) (step + total/P/bw)`, each term from
    the regime the piece `total/P` falls in
    (cost_models.collectives.ring_collective_s).

    Every field takes part in equality and the hash (the FC time cache keys
    on them), so two calibrations that differ in a curve or a regime never
    share a cached price."""

    name: str
    num_chips: int
    chips_per_node: int
    peak_flops_per_s: float
    gemm: ComputeModel
    attention_efficiency: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    #: all-gather links (data-parallel rings): inside a node, across nodes
    intra_node_link: LinkParams
    inter_node_link: LinkParams
    #: send-recv links (pipeline transfers): inside a node, across nodes
    intra_node_send_link: LinkParams
    inter_node_send_link: LinkParams
    overlap_slowdown: float
    workspace_bytes: float
    memory_reserve_fraction: float
    dtype: str = "bf16"
    #: every calibrated link as (operation, resource, link), for MeshSlice's
    #: and Megatron's per-axis placement (comm_model_for reads them all)
    calibrated_links: tuple[tuple[str, str, LinkParams], ...] = ()
    # The resolved cluster and calibration, for the per-axis placement;
    # the calibration's content is in `gemm` and `calibrated_links` above.
    cluster: Cluster | None = field(default=None, compare=False, hash=False, repr=False)
    calibration: CalibrationSpec | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def usable_bytes(self) -> float:
        """HBM left for tensors: capacity less the fragmentation reserve and workspace."""
        return self.hbm_bytes * (1 - self.memory_reserve_fraction) - self.workspace_bytes

    def group_link(self, stride: int, size: int, send: bool = False) -> LinkParams:
        """The link of a ring over `size` chips whose ranks are `stride`
        apart: the node's links when the group fits in a node
        (`stride * size <= chips_per_node`), else the NIC rails; the
        send-recv link when `send`, else the all-gather one."""
        inside = stride * size <= self.chips_per_node
        if send:
            return self.intra_node_send_link if inside else self.inter_node_send_link
        return self.intra_node_link if inside else self.inter_node_link


def _link(calibration: CalibrationSpec, kinds: tuple[str, ...], op: str = "all_gather"):
    """The calibrated `op` link of the first resource kind present."""
    entries = calibration.collectives.get(op, {})
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
    gemm = compute_model_for(calibration, cluster, dtype, DTYPE_BYTES.get(dtype, 2.0), file)
    attention = spec.attention_tflops_per_s
    # Without a measured attention rate the fused kernel runs at the GEMM
    # model's large-GEMM rate, as in the step model (job/hardware.py).
    large_gemm = gemm.peak_flops_per_s * gemm.max_efficiency
    attention_eff = min((attention * 1e12 if attention else large_gemm) / peak, 1.0)
    inside = _link(calibration, NODE_KINDS)
    outside = _link(calibration, ("scale_out",))
    node_bw = inside.link_bytes_per_s if inside else cluster.node_bytes_per_s
    nic_bw = outside.link_bytes_per_s if outside else cluster.scale_out_bytes_per_s
    if not node_bw:
        raise missing("node", "the links inside a node", "give node.egress_gb_per_s")
    if not nic_bw:
        nic_bw = node_bw  # one node: nothing crosses a NIC

    def tier(entry, rate: float) -> LinkParams:
        # the calibrated line with its regimes, else the nominal rate alone
        return link_params(entry) if entry is not None else LinkParams(0.0, 0.0, float(rate))

    node_link, nic_link = tier(inside, node_bw), tier(outside, nic_bw)
    node_send = _link(calibration, NODE_KINDS, "send_recv")
    nic_send = _link(calibration, ("scale_out",), "send_recv")
    slowdown = spec.overlap_slowdown or calibration.overlap_slowdown
    return SearchHardware(
        name=spec.name,
        num_chips=cluster.num_chips,
        chips_per_node=cluster.chips_per_node,
        peak_flops_per_s=peak,
        gemm=gemm,
        attention_efficiency=attention_eff,
        hbm_bytes=float(cluster.hbm_bytes),
        # the calibration's HBM rate (measured, in the GEMM model) before
        # the chip's nominal one, as the step model reads it
        hbm_bytes_per_s=float(gemm.hbm_bytes_per_s or cluster.hbm_bytes_per_s),
        intra_node_link=node_link,
        inter_node_link=nic_link,
        intra_node_send_link=link_params(node_send) if node_send else node_link,
        inter_node_send_link=link_params(nic_send) if nic_send else nic_link,
        overlap_slowdown=slowdown,
        workspace_bytes=workspace_gib * GIB,
        memory_reserve_fraction=memory_reserve_fraction,
        dtype=dtype,
        calibrated_links=tuple(
            (op, kind, link_params(link))
            for op, entries in sorted(calibration.collectives.items())
            for kind, link in sorted(entries.items())
        ),
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
