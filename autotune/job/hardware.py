"""The hardware figures the whole-step model needs, read in one place (the
cluster spec and its calibration today; a chip preset can feed the same
record later)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import InputError
from autotune.hardware.calibration import link_params
from autotune.plan.context import search_context
from autotune.specs.plan_input import PlanInput
from autotune.specs.training import FcAlgorithm
from cost_models import CommModel, ComputeModel, LinkParams, MeshShape

GB = 1e9
GIB = float(2**30)


@dataclass(frozen=True)
class JobHardware:
    """Per-chip figures in base units (bytes, seconds, FLOP/s)."""

    peak_flops_per_s: float | None
    gemm: ComputeModel
    comm: CommModel  # the tensor-parallel mesh's links (its COL axis carries the vocabulary ring)
    attention_flops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    data_parallel: LinkParams | None
    pipeline: LinkParams | None
    # compute beside a collective runs this much slower (the calibration's)
    overlap_slowdown: float = 1.0


def _need(value: float | None, field: str, why: str, inp: PlanInput) -> float:
    if value is None:
        raise InputError(
            f"is missing; the whole-step model needs it for {why}",
            file=inp.cluster_ref or inp.source_file,
            field=f"cluster.{field}",
            fix=f"add `{field}:` to the cluster with its data-sheet value and source",
        )
    return value


def job_hardware(inp: PlanInput, mesh: MeshShape) -> tuple[JobHardware, tuple[str, ...]]:
    """Resolve the chip and network figures for the planned `mesh` (or the
    `1 x tp` ring of megatron-1d); a missing figure the step needs is a
    bad-input error, a missing optional one a warning.

    Data-parallel and pipeline links: the cluster's explicit
    `data_parallel_gb_per_s` / `pipeline_gb_per_s` (with
    `network_latency_us` per ring step); else the calibration's all-gather
    (data parallel) or send-recv (pipeline) entry for the resource the group
    crosses (`scale_out` when its members sit in different nodes, else the
    node's kind), with its size regimes; else the cluster's nominal NIC or node rate."""
    c, t = inp.cluster, inp.training
    ctx = search_context(inp)
    cluster = ctx.cluster
    if t.fc_algorithm is FcAlgorithm.MEGATRON_1D:
        mesh = MeshShape(1, mesh.num_chips)
    comm = ctx.for_mesh(mesh).comm
    warnings = []
    hbm_bytes = cluster.hbm_bytes
    if hbm_bytes is None:
        _need(None, "hbm_gib", "the memory check", inp)
    # the calibration's HBM rate (measured) before the chip's nominal one
    hbm_per_s = ctx.compute.hbm_bytes_per_s or cluster.hbm_bytes_per_s
    if hbm_per_s is None:
        hbm_per_s = _need(c.hbm_gb_per_s, "hbm_gb_per_s", "memory-bound operations", inp) * GB
    gemm = ctx.compute
    if c.attention_tflops_per_s is not None:
        attention = c.attention_tflops_per_s * 1e12
    else:
        attention = float(gemm.peak_flops_per_s * gemm.max_efficiency)
        if t.attention.value == "flash":
            warnings.append(
                f"cluster {c.name} gives no attention_tflops_per_s: the fused attention core "
                "is priced at the calibration's GEMM rate"
            )
    latency_s = (c.network_latency_us or 0.0) * 1e-6
    tp = mesh.num_chips
    node = cluster.chips_per_node
    # Megatron-LM's rank order: tensor-parallel ranks innermost, then data,
    # then pipeline; a group spans nodes when its members are a node apart.
    dp_spans = node is not None and tp * t.data_parallel > node
    pp_spans = node is not None and tp * t.data_parallel >= node

    def link(field: str, op: str, spans: bool, needed: bool, why: str) -> LinkParams | None:
        if not needed:
            return None
        value = getattr(c, field)
        if value is not None:
            return LinkParams(launch_s=0.0, sync_s=latency_s, link_bytes_per_s=value * GB)
        resource = "scale_out" if spans else cluster.topology.value
        entry = inp.calibration.collectives.get(op, {}).get(resource)
        if entry is not None:
            return link_params(entry)  # the calibrated line and its size regimes
        rate = cluster.scale_out_bytes_per_s if spans else cluster.node_bytes_per_s
        if rate is None:
            _need(None, field, why, inp)
        if c.network_latency_us is None:
            warnings.append(
                f"cluster {c.name} gives no network_latency_us and the calibration no "
                f"{op}.{resource} entry: {why} are priced by bandwidth alone"
            )
        return LinkParams(launch_s=0.0, sync_s=latency_s, link_bytes_per_s=float(rate))

    return (
        JobHardware(
            peak_flops_per_s=cluster.peak_flops_per_s(t.dtype.value),
            gemm=gemm,
            comm=comm,
            attention_flops_per_s=attention,
            hbm_bytes=float(hbm_bytes),
            hbm_bytes_per_s=float(hbm_per_s),
            data_parallel=link(
                "data_parallel_gb_per_s",
                "all_gather",
                dp_spans,
                t.data_parallel > 1,
                "data-parallel collectives",
            ),
            pipeline=link(
                "pipeline_gb_per_s",
                "send_recv",
                pp_spans,
                t.pipeline_parallel > 1,
                "pipeline transfers",
            ),
            overlap_slowdown=ctx.overlap_slowdown,
        ),
        tuple(warnings),
    )
