"""The hardware figures the whole-step model needs, read in one place (the
cluster spec and its calibration today; a chip preset can feed the same
record later)."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.errors import InputError
from autotune.hardware.calibration import comm_model, compute_model
from autotune.specs.plan_input import PlanInput
from cost_models import CommModel, ComputeModel, LinkParams

GB = 1e9
GIB = float(2**30)


@dataclass(frozen=True)
class JobHardware:
    """Per-chip figures in base units (bytes, seconds, FLOP/s)."""

    peak_flops_per_s: float | None
    gemm: ComputeModel
    comm: CommModel
    attention_flops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    data_parallel: LinkParams | None
    pipeline: LinkParams | None
    overlap_slowdown: float


def _need(value: float | None, field: str, why: str, inp: PlanInput) -> float:
    if value is None:
        raise InputError(
            f"is missing; the whole-step model needs it for {why}",
            file=inp.cluster_ref or inp.source_file,
            field=f"cluster.{field}",
            fix=f"add `{field}:` to the cluster with its data-sheet value and source",
        )
    return value


def job_hardware(inp: PlanInput) -> tuple[JobHardware, tuple[str, ...]]:
    """Resolve the chip and network figures; a missing figure the step needs
    is a bad-input error, a missing optional one a warning."""
    c, t = inp.cluster, inp.training
    warnings = []
    hbm_gib = _need(c.hbm_gib, "hbm_gib", "the memory check", inp)
    hbm_gb_per_s = _need(c.hbm_gb_per_s, "hbm_gb_per_s", "memory-bound operations", inp)
    gemm = compute_model(inp.calibration)
    if c.attention_tflops_per_s is not None:
        attention = c.attention_tflops_per_s * 1e12
    else:
        attention = gemm.peak_flops_per_s
        if t.attention.value == "flash":
            warnings.append(
                f"cluster {c.name} gives no attention_tflops_per_s: the fused attention core "
                "is priced at the calibration's GEMM rate"
            )
    latency_s = (c.network_latency_us or 0.0) * 1e-6

    def link(field: str, needed: bool, why: str) -> LinkParams | None:
        value = getattr(c, field)
        if not needed:
            return None
        gb_per_s = _need(value, field, why, inp)
        if c.network_latency_us is None:
            _need(None, "network_latency_us", why, inp)
        return LinkParams(launch_s=latency_s, sync_s=latency_s, link_bytes_per_s=gb_per_s * GB)

    slowdown = c.overlap_slowdown
    return (
        JobHardware(
            peak_flops_per_s=c.peak_flops_per_s(t.dtype.value),
            gemm=gemm,
            comm=comm_model(inp.calibration),
            attention_flops_per_s=attention,
            hbm_bytes=hbm_gib * GIB,
            hbm_bytes_per_s=hbm_gb_per_s * GB,
            data_parallel=link(
                "data_parallel_gb_per_s", t.data_parallel > 1, "data-parallel collectives"
            ),
            pipeline=link("pipeline_gb_per_s", t.pipeline_parallel > 1, "pipeline transfers"),
            overlap_slowdown=slowdown if slowdown is not None else inp.calibration.overlap_slowdown,
        ),
        tuple(warnings),
    )
