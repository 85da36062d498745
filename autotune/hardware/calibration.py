"""Turn a validated calibration into the cost models' plain types (the one
place where spec units meet formula units)."""

from __future__ import annotations

import math

from autotune.specs.calibration import CalibrationSpec
from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, LinkParams, LinkRegime


def comm_model(calibration: CalibrationSpec) -> CommModel:
    """Every (operation, mesh axis) link of the calibration."""
    params = {}
    for op_name, axes in calibration.collectives.items():
        for axis_name, link in axes.items():
            regimes = tuple(
                LinkRegime(
                    max_shard_bytes=math.inf if r.max_shard_bytes is None else r.max_shard_bytes,
                    launch_s=r.launch_s,
                    sync_s=r.sync_s,
                    link_bytes_per_s=r.link_bytes_per_s,
                )
                for r in link.regimes or ()
            )
            params[(CollectiveOp(op_name), Axis(axis_name))] = LinkParams(
                launch_s=link.launch_s,
                sync_s=link.sync_s,
                link_bytes_per_s=link.link_bytes_per_s,
                regimes=regimes,
            )
    return CommModel(params)


def compute_model(
    calibration: CalibrationSpec, fallback_peak_flops_per_s: float | None = None
) -> ComputeModel:
    """The local GEMM model: the effective rate, shaped by the efficiency
    curve when the calibration has one."""
    c = calibration.compute
    if c is None:
        # a calibration of links only: the caller's nominal peak (it warns)
        assert fallback_peak_flops_per_s is not None, "no compute entry and no fallback peak"
        return ComputeModel(peak_flops_per_s=fallback_peak_flops_per_s)
    curve = c.efficiency_curve
    max_dims = curve.max_dims if curve and curve.max_dims else None
    return ComputeModel(
        peak_flops_per_s=c.effective_flops_per_s,
        max_efficiency=1.0,
        m_half=curve.m_half if curve else 0.0,
        n_half=curve.n_half if curve else 0.0,
        k_half=curve.k_half if curve else 0.0,
        ceiling_flops_per_s=c.peak_flops_per_s,
        hbm_bytes_per_s=c.hbm_bytes_per_s,
        element_bytes=DTYPE_BYTES.get(c.dtype, 2.0),
        max_dims=(max_dims[0], max_dims[1], max_dims[2]) if max_dims else None,
    )


#: bytes per element of the dtypes a calibration names
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "tf32": 4.0}
