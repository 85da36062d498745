"""Turn a validated calibration into the cost models' plain types (the one
place where spec units meet formula units), for a mesh placed on a
cluster's resources."""

from __future__ import annotations

from autotune.errors import InputError
from autotune.hardware.cluster import Cluster
from autotune.hardware.placement import MeshPlacement, ResourceKind
from autotune.specs.calibration import CalibrationSpec
from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, LinkParams


def comm_model(calibration: CalibrationSpec) -> CommModel:
    """Every per-mesh-axis (row, col) link of the calibration; resource-kind
    entries need a placement (see :func:`comm_model_for`)."""
    params = {}
    for op_name, axes in calibration.collectives.items():
        for axis_name, link in axes.items():
            if axis_name not in ("row", "col"):
                continue
            params[(CollectiveOp(op_name), Axis(axis_name))] = LinkParams(
                launch_s=link.launch_s, sync_s=link.sync_s, link_bytes_per_s=link.link_bytes_per_s
            )
    return CommModel(params)


def comm_model_for(calibration: CalibrationSpec, placement: MeshPlacement) -> CommModel:
    """The links of both mesh axes of a placed mesh, and their resources.

    An axis uses the calibration's entry for its resource kind (torus,
    switched, fully_connected, scale_out) with the per-unit-link bandwidth
    scaled by the axis's `link_multiplier`; without one, the entry for the
    mesh axis itself (row, col) as calibrated. Axes whose placements name
    the same resource share it (cost_models.concurrency)."""
    params = {}
    for op_name, entries in calibration.collectives.items():
        op = CollectiveOp(op_name)
        for axis in Axis:
            p = placement.axis(axis)
            link = entries.get(p.kind.value) if p.kind is not ResourceKind.CALIBRATED_AXIS else None
            if link is not None:
                params[(op, axis)] = LinkParams(
                    launch_s=link.launch_s,
                    sync_s=link.sync_s,
                    link_bytes_per_s=link.link_bytes_per_s * p.link_multiplier,
                )
            elif axis.value in entries:
                a = entries[axis.value]
                params[(op, axis)] = LinkParams(a.launch_s, a.sync_s, a.link_bytes_per_s)
            elif p.size == 1 and entries:
                # a one-chip axis moves nothing; any entry keeps the formulas total
                a = next(iter(entries.values()))
                params[(op, axis)] = LinkParams(a.launch_s, a.sync_s, a.link_bytes_per_s)
    resources = {axis: placement.axis(axis).resource for axis in Axis}
    return CommModel(params, resources)


def check_links_within_nominal(
    calibration: CalibrationSpec, cluster: Cluster, where: str | None
) -> None:
    """Refuse a calibration whose per-unit-link rate exceeds the cluster's
    nominal figure for that resource: a fit above the hardware is an error
    in the data (wrong size column, a tree algorithm on two nodes)."""
    nominal = {
        "torus": cluster.torus_link_bytes_per_s,
        "switched": cluster.node_bytes_per_s if cluster.spec.topology.value == "switched" else None,
        "fully_connected": None
        if cluster.spec.node is None or cluster.spec.node.link_gb_per_s is None
        else cluster.spec.node.link_gb_per_s * 1e9,
        "scale_out": cluster.scale_out_bytes_per_s,
    }
    for op_name, entries in calibration.collectives.items():
        for key, link in entries.items():
            bound = nominal.get(key)
            if bound is not None and link.link_bytes_per_s > bound * (1 + 1e-9):
                raise InputError(
                    f"is {link.link_bytes_per_s / 1e9:.1f} GB/s, above the nominal "
                    f"{bound / 1e9:.1f} GB/s of cluster {cluster.name}'s {key} links",
                    file=where,
                    field=f"collectives.{op_name}.{key}.link_bytes_per_s",
                    fix="check the measurements (bytes per chip, NCCL_ALGO=Ring, three or more "
                    "nodes) or the cluster's link figures",
                )


def compute_model(calibration: CalibrationSpec) -> ComputeModel:
    """The local GEMM model of a calibration alone: the effective rate as
    the ceiling, shaped by the efficiency curve when it has one."""
    c = calibration.compute
    curve = c.efficiency_curve
    return ComputeModel(
        peak_flops_per_s=c.effective_flops_per_s,
        max_efficiency=1.0,
        m_half=curve.m_half if curve else 0.0,
        n_half=curve.n_half if curve else 0.0,
        k_half=curve.k_half if curve else 0.0,
    )


def compute_model_for(
    calibration: CalibrationSpec,
    cluster: Cluster,
    dtype: str,
    element_bytes: float,
    where: str | None = None,
) -> ComputeModel:
    """The roofline GEMM model: the chip's peak for `dtype` as the ceiling,
    the calibration's large-GEMM rate as a fraction of it (its efficiency
    curve on top) and the chip's HBM bandwidth as the memory bound.

    A calibration whose rate exceeds the peak is refused: a fit above peak
    is an error in the data or the dtype (hardware.md section 3). Without a
    peak for `dtype`, or when the calibration measured another dtype, the
    calibration's rate is the ceiling (no check)."""
    base = compute_model(calibration)
    peak = cluster.peak_flops_per_s(dtype)
    rate = calibration.compute.effective_flops_per_s
    if peak is None or calibration.compute.dtype != dtype:
        # no ceiling to hold a rate of another dtype against (the plan warns)
        return base
    if rate > peak * (1 + 1e-9):
        raise InputError(
            f"is {rate / 1e12:.1f} TFLOP/s, above the {peak / 1e12:g} TFLOP/s {dtype} peak of "
            f"cluster {cluster.name}",
            file=where,
            field="compute.effective_flops_per_s",
            fix="check the GEMM measurements (FLOPs = 2*m*n*k, the dtype measured) or the "
            "chip's peak",
        )
    hbm = cluster.hbm_bytes_per_s or 0.0
    return ComputeModel(
        peak_flops_per_s=peak,
        max_efficiency=rate / peak,
        m_half=base.m_half,
        n_half=base.n_half,
        k_half=base.k_half,
        hbm_bytes_per_s=hbm,
        element_bytes=element_bytes,
    )
