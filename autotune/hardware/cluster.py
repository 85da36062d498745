"""The resolved hardware of a plan: a cluster spec with its chip, and the
base-unit figures the cost models and the whole-job model read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.loading import cluster_file, load_chip_for, load_cluster_spec
from autotune.specs.chip import ChipSpec
from autotune.specs.cluster import ClusterSpec, Topology

GB = 1e9


@dataclass(frozen=True)
class Cluster:
    """A cluster spec and its chip (None when the file gives only peaks)."""

    spec: ClusterSpec
    chip: ChipSpec | None = None

    @property
    def name(self) -> str:
        """The cluster's name."""
        return self.spec.name

    @property
    def topology(self) -> Topology:
        """torus, switched or fully_connected."""
        return self.spec.topology

    @property
    def num_chips(self) -> int:
        """Chips in the cluster."""
        return self.spec.num_chips

    @property
    def chips_per_node(self) -> int | None:
        """Chips of one node (switch or xGMI domain); None on a torus."""
        return None if self.spec.node is None else self.spec.node.chips_per_node

    @property
    def num_nodes(self) -> int:
        """Nodes in the cluster (1 on a torus, which is one ICI domain)."""
        g = self.chips_per_node
        return 1 if g is None else max(1, self.num_chips // g)

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Peak dense FLOP/s of one chip for `dtype`: the cluster file's
        figure, else the chip's; None when neither lists the dtype."""
        value = self.spec.peak_flops_per_s(dtype)
        if value is None and self.chip is not None and self.chip.has_dtype(dtype):
            value = self.chip.peak_flops_per_s(dtype)
        return value

    @property
    def hbm_bytes(self) -> int | None:
        """HBM capacity of one chip, bytes (cluster file first, then chip)."""
        if self.spec.hbm_gib is not None:
            return int(self.spec.hbm_gib * 2**30)
        return None if self.chip is None else self.chip.hbm_bytes

    @property
    def hbm_bytes_per_s(self) -> float | None:
        """HBM bandwidth of one chip, bytes/s; None without a chip."""
        return None if self.chip is None else self.chip.hbm_bytes_per_s

    @property
    def node_bytes_per_s(self) -> float | None:
        """Nominal per-chip, per-direction bandwidth inside a node: the
        switch egress, or every xGMI link together; None on a torus."""
        n = self.spec.node
        if n is None:
            return None
        if self.topology is Topology.SWITCHED:
            return (n.egress_gb_per_s or 0.0) * GB
        return (n.links_per_chip or 0) * (n.link_gb_per_s or 0.0) * GB

    @property
    def scale_out_bytes_per_s(self) -> float | None:
        """Nominal per-chip, per-direction NIC bandwidth between nodes."""
        s = self.spec.scale_out
        return None if s is None else s.nic_gb_per_s * GB

    @property
    def torus_link_bytes_per_s(self) -> float | None:
        """Nominal one-direction bandwidth of one torus link."""
        t = self.spec.torus
        return None if t is None else t.link_gb_per_s * GB


def resolve_cluster(spec: ClusterSpec, base: Path | None = None) -> Cluster:
    """The spec with its chip loaded (a preset name, or a path relative to
    `base`, the folder of the file that names it)."""
    if spec.chip is None:
        return Cluster(spec)
    return Cluster(spec, load_chip_for(spec, base))


def load_cluster(ref: str | Path, base: Path | None = None) -> Cluster:
    """A cluster preset (`BASE-<N>n` sets the node count of a node preset)
    or YAML file, resolved with its chip."""
    spec, _ = load_cluster_spec(ref, base)
    path = cluster_file(str(ref), base)
    return resolve_cluster(spec, path.parent if path is not None else base)
