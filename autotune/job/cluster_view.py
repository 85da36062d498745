"""The GPU cluster as the parallelism search reads it, in base units.

A cluster is nodes of `chips_per_node` chips on a scale-up switch (every chip
gets its whole egress bandwidth for any group inside the node) joined by one
NIC rail per chip. A parallel group inside a node runs on the switch; a group
that spans nodes is bounded by the NIC (hardware.md section 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from autotune.errors import InputError
from autotune.hardware.chips import load_chip
from autotune.specs.job_search import GpuClusterSpec

GIB = 2**30


@dataclass(frozen=True)
class JobHardware:
    """Per-chip figures of one cluster (seconds, bytes, FLOP/s)."""

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
    intra_node_latency_s: float
    inter_node_latency_s: float
    overlap_slowdown: float
    workspace_bytes: float
    memory_reserve_fraction: float

    @property
    def usable_bytes(self) -> float:
        """HBM left for tensors: capacity less the fragmentation reserve and workspace."""
        return self.hbm_bytes * (1 - self.memory_reserve_fraction) - self.workspace_bytes

    def group_link(self, stride: int, size: int) -> tuple[float, float]:
        """(bytes/s, per-step latency s) of a ring over `size` chips whose
        ranks are `stride` apart: on the switch when the group fits in a node
        (`stride * size <= chips_per_node`), else on the NIC rails."""
        if stride * size <= self.chips_per_node:
            return self.intra_node_bytes_per_s, self.intra_node_latency_s
        return self.inter_node_bytes_per_s, self.inter_node_latency_s


def _preset_dir() -> Path:
    return Path(str(resources.files("autotune").joinpath("presets", "gpu_clusters")))


def gpu_cluster_names() -> list[str]:
    """Bundled GPU cluster presets (use `NAME-<N>n` for N nodes)."""
    return sorted(p.stem for p in _preset_dir().glob("*.yaml"))


def load_gpu_cluster_spec(ref: str | dict, *, file: str | None = None) -> GpuClusterSpec:
    """A preset name (`a100-hgx-128n` is `a100-hgx` with 128 nodes), a YAML
    path or an inline mapping."""
    from autotune.loading import load_mapping, validate_spec

    if isinstance(ref, dict):
        return validate_spec(GpuClusterSpec, ref, file=file, prefix="cluster")
    match = re.fullmatch(r"(.+)-(\d+)n", ref)
    base, nodes = (match.group(1), int(match.group(2))) if match else (ref, None)
    if base in gpu_cluster_names():
        path = _preset_dir() / f"{base}.yaml"
        spec = validate_spec(GpuClusterSpec, load_mapping(path), file=str(path))
        if nodes is not None:
            if nodes < 1:
                raise InputError(
                    "needs at least one node",
                    file=file,
                    field="cluster",
                    value=ref,
                    fix="write e.g. a100-hgx-128n",
                )
            spec = spec.model_copy(update={"num_nodes": nodes, "name": ref})
        return spec
    path = Path(ref)
    if not path.is_file():
        raise InputError(
            "is neither a GPU cluster preset nor a file",
            file=file,
            field="cluster",
            value=ref,
            fix=f"use one of {', '.join(gpu_cluster_names())} (with -<N>n) or a YAML path",
        )
    return validate_spec(GpuClusterSpec, load_mapping(path), file=str(path))


def job_hardware(spec: GpuClusterSpec, dtype: str = "bf16") -> JobHardware:
    """Resolve a cluster spec against its chip preset into base units."""
    chip = load_chip(spec.chip)
    if not chip.has_dtype(dtype):
        raise InputError(
            f"chip {chip.name} has no {dtype} peak",
            field="training.dtype",
            value=dtype,
            fix="choose a dtype the chip lists",
        )
    eff = spec.bandwidth_efficiency
    return JobHardware(
        name=spec.name,
        num_chips=spec.num_nodes * spec.chips_per_node,
        chips_per_node=spec.chips_per_node,
        peak_flops_per_s=chip.peak_flops_per_s(dtype),
        gemm_efficiency=spec.gemm_efficiency,
        attention_efficiency=spec.attention_efficiency,
        hbm_bytes=float(chip.hbm_bytes),
        hbm_bytes_per_s=chip.hbm_bytes_per_s,
        intra_node_bytes_per_s=spec.intra_node_gb_per_s * 1e9 * eff,
        inter_node_bytes_per_s=spec.inter_node_gb_per_s * 1e9 * eff,
        intra_node_latency_s=spec.intra_node_latency_us * 1e-6,
        inter_node_latency_s=spec.inter_node_latency_us * 1e-6,
        overlap_slowdown=spec.overlap_slowdown,
        workspace_bytes=spec.workspace_gib * GIB,
        memory_reserve_fraction=spec.memory_reserve_fraction,
    )
