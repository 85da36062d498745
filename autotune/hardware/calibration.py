"""Turn a validated calibration into the cost models' plain types (the one
place where spec units meet formula units), for a mesh placed on a
cluster's resources."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from autotune.errors import InputError
from autotune.hardware.cluster import Cluster
from autotune.hardware.placement import AxisPlacement, MeshPlacement, ResourceKind
from autotune.specs.calibration import CalibrationSpec, LinkSpec, TileModelSpec
from cost_models import Axis, CollectiveOp, CommModel, ComputeModel, LinkParams, LinkRegime
from cost_models.compute import TileModel

#: bytes per element of the dtypes a calibration names
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp8": 1.0, "tf32": 4.0}


def link_params(link: LinkSpec, bandwidth_multiplier: float = 1.0) -> LinkParams:
    """One calibrated link (its straight line and its size regimes, if any)
    as the cost model's LinkParams, every bandwidth scaled by
    `bandwidth_multiplier` (the unit links an axis drives at once)."""
    regimes = tuple(
        LinkRegime(
            max_shard_bytes=math.inf if r.max_shard_bytes is None else r.max_shard_bytes,
            launch_s=r.launch_s,
            sync_s=r.sync_s,
            link_bytes_per_s=r.link_bytes_per_s * bandwidth_multiplier,
        )
        for r in link.regimes or ()
    )
    return LinkParams(
        launch_s=link.launch_s,
        sync_s=link.sync_s,
        link_bytes_per_s=link.link_bytes_per_s * bandwidth_multiplier,
        regimes=regimes,
    )


def comm_model(calibration: CalibrationSpec) -> CommModel:
    """The calibration's per-mesh-axis (row, col) links, as calibrated."""
    params = {}
    for op_name, axes in calibration.collectives.items():
        for axis_name, link in axes.items():
            if axis_name not in ("row", "col"):
                continue
            params[(CollectiveOp(op_name), Axis(axis_name))] = link_params(link)
    return CommModel(params)


def axis_entry_key(entries: Mapping[str, LinkSpec], placed: AxisPlacement) -> str | None:
    """The key of `entries` (one operation's calibration entries) that
    prices a placed mesh axis: its resource kind (torus, switched,
    fully_connected, scale_out), else the mesh axis itself (row, col), else
    None."""
    kind = placed.kind.value if placed.kind is not ResourceKind.CALIBRATED_AXIS else None
    if kind in entries:
        return kind
    if placed.axis.value in entries:
        return placed.axis.value
    return None


def comm_model_for(
    calibration: CalibrationSpec,
    placement: MeshPlacement,
    fallback: CalibrationSpec | None = None,
) -> CommModel:
    """The links of both mesh axes of a placed mesh, and their resources.

    An axis uses the calibration's entry for its resource kind (torus,
    switched, fully_connected, scale_out) with the per-unit-link bandwidth
    scaled by the axis's `link_multiplier`; without one, the entry for the
    mesh axis itself (row, col) as calibrated; without either, the
    `fallback` calibration's entry for the resource kind (the cluster's
    nominal figures; the plan warns, see `fallback_kinds`). Axes whose
    placements name the same resource share it (cost_models.concurrency)."""
    params = {}
    ops = {*calibration.collectives, *(fallback.collectives if fallback else {})}
    for op_name in ops:
        entries = calibration.collectives.get(op_name, {})
        spare = fallback.collectives.get(op_name, {}) if fallback is not None else {}
        op = CollectiveOp(op_name)
        for axis in Axis:
            p = placement.axis(axis)
            key = axis_entry_key(entries, p)
            if key is not None:
                scale = p.link_multiplier if key != axis.value else 1.0
                params[(op, axis)] = link_params(entries[key], scale)
            elif p.size == 1 and entries:
                # a one-chip axis moves nothing; any entry keeps the formulas total
                params[(op, axis)] = link_params(next(iter(entries.values())))
            elif p.kind.value in spare and p.kind is not ResourceKind.CALIBRATED_AXIS:
                params[(op, axis)] = link_params(spare[p.kind.value], p.link_multiplier)
    resources = {axis: placement.axis(axis).resource for axis in Axis}
    return CommModel(params, resources)


def fallback_kinds(
    calibration: CalibrationSpec, cluster: Cluster, fallback: CalibrationSpec | None
) -> dict[str, list[str]]:
    """Resource kinds of `cluster` a mesh axis can land on that
    `calibration` has no entry for (neither the kind nor a row/col key) and
    `fallback` has: kind -> the operations taken from `fallback`."""
    if fallback is None:
        return {}
    kinds = []
    if cluster.topology.value == "torus":
        kinds.append("torus")
    else:
        kinds.append(cluster.topology.value)
        if cluster.num_nodes > 1:
            kinds.append("scale_out")
    taken: dict[str, list[str]] = {}
    for kind in kinds:
        for op_name, spare in fallback.collectives.items():
            entries = calibration.collectives.get(op_name, {})
            if kind in spare and kind not in entries and not set(entries) & {"row", "col"}:
                taken.setdefault(kind, []).append(op_name)
    return taken


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


def compute_model(
    calibration: CalibrationSpec, fallback_peak_flops_per_s: float | None = None
) -> ComputeModel:
    """The local GEMM model of a calibration alone: the effective rate,
    shaped by the efficiency curve when it has one, bounded by the peak and
    HBM bandwidth the calibration records. A calibration of links only uses
    the caller's nominal peak (the caller warns)."""
    c = calibration.compute
    if c is None:
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
        hbm_bytes_per_s=c.hbm_bytes_per_s or 0.0,
        element_bytes=DTYPE_BYTES.get(c.dtype, 2.0),
        max_dims=(max_dims[0], max_dims[1], max_dims[2]) if max_dims else None,
        tile=tile_model(c.tile_model),
    )


def tile_model(spec: TileModelSpec | None) -> TileModel | None:
    """A calibration's shape-aware GEMM model as the cost model's type."""
    if spec is None:
        return None
    return TileModel(
        num_cores=spec.num_cores,
        launch_s=spec.launch_s,
        k_overhead=spec.k_overhead,
        reuse_penalty=spec.reuse_penalty,
        tiles=tuple((int(t[0]), int(t[1])) for t in spec.tiles),
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
    curve on top) and the HBM bandwidth as the memory bound: the
    calibration's when it gives one (measured), else the chip's nominal.

    A constant rate above the peak is refused: a fit above peak is an error
    in the data or the dtype (hardware.md section 3). A fitted curve's
    asymptotic rate may exceed the peak (no measured GEMM did, `meshtune
    calibrate` checks that); the peak then caps every GEMM. A calibration
    with no compute entry runs at the chip's peak (the plan warns). Without
    a peak for `dtype`, or when the calibration measured another dtype, the
    calibration's own model is used (no check)."""
    peak = cluster.peak_flops_per_s(dtype)
    base = compute_model(calibration, peak)
    if calibration.compute is None or peak is None or calibration.compute.dtype != dtype:
        # no ceiling to hold a rate of another dtype against (the plan warns)
        return base
    rate = calibration.compute.effective_flops_per_s
    # A calibration's HBM rate (measured on its chip) before the cluster's
    # nominal one; `meshtune calibrate` writes the chip preset's.
    hbm = base.hbm_bytes_per_s or cluster.hbm_bytes_per_s or 0.0
    curved = max(base.m_half, base.n_half, base.k_half) > 0
    if rate > peak * (1 + 1e-9) and not curved:
        raise InputError(
            f"is {rate / 1e12:.1f} TFLOP/s, above the {peak / 1e12:g} TFLOP/s {dtype} peak of "
            f"cluster {cluster.name}",
            file=where,
            field="compute.effective_flops_per_s",
            fix="check the GEMM measurements (FLOPs = 2*m*n*k, the dtype measured) or the "
            "chip's peak",
        )
    if rate > peak:
        return ComputeModel(
            peak_flops_per_s=rate,
            m_half=base.m_half,
            n_half=base.n_half,
            k_half=base.k_half,
            hbm_bytes_per_s=hbm,
            element_bytes=element_bytes,
            ceiling_flops_per_s=peak,
            max_dims=base.max_dims,
            tile=base.tile,
        )
    return ComputeModel(
        peak_flops_per_s=peak,
        max_efficiency=rate / peak,
        m_half=base.m_half,
        n_half=base.n_half,
        k_half=base.k_half,
        hbm_bytes_per_s=hbm,
        element_bytes=element_bytes,
        max_dims=base.max_dims,
        tile=base.tile,
    )


def fp8_compute_model(
    calibration: CalibrationSpec, cluster: Cluster, dtype: str, where: str | None = None
) -> tuple[ComputeModel, str | None]:
    """The GEMM model of FP8 GEMMs (the FC layers under an FP8 recipe) and
    a warning when it is not measured:

    - the calibration's `compute_fp8` entry (or its `compute` entry when
      that was measured in fp8), at the chip's fp8 peak as ceiling
      (compute_model_for);
    - else the `dtype` model with every rate scaled by
      `peak_fp8 / peak_dtype` (the same efficiency at the fp8 peak: an
      upper bound of FP8's speed-up, which published pairs put well below
      2x: the plan says so and asks for fp8 gemm rows).

    FP8 GEMMs read 1-byte operands (the memory bound). Without an fp8 peak
    the chip cannot run FP8 (hardware_view refuses it first)."""
    entry = calibration.compute_fp8
    if entry is None and calibration.compute is not None and calibration.compute.dtype == "fp8":
        entry = calibration.compute
    if entry is not None:
        measured = calibration.model_copy(update={"compute": entry})
        return compute_model_for(measured, cluster, "fp8", 1.0, where), None
    base = compute_model_for(calibration, cluster, dtype, 1.0, where)
    peak_fp8, peak = cluster.peak_flops_per_s("fp8"), cluster.peak_flops_per_s(dtype)
    if peak_fp8 is None or peak is None:
        return base, (
            f"calibration {calibration.name} has no fp8 GEMM entry and cluster {cluster.name} "
            f"gives no fp8 and {dtype} peaks to scale by: FP8 GEMMs are priced at the {dtype} rate"
        )
    ratio = peak_fp8 / peak
    scaled = replace(
        base,
        peak_flops_per_s=base.peak_flops_per_s * ratio,
        ceiling_flops_per_s=None if base.ceiling_flops_per_s is None else peak_fp8,
    )
    return scaled, (
        f"calibration {calibration.name} has no fp8 GEMM entry (compute_fp8): FP8 GEMMs are "
        f"priced at its {dtype} efficiency on the fp8 peak ({peak_fp8 / 1e12:g} TFLOP/s), an upper "
        "bound of FP8's speed-up; add fp8 gemm rows to `meshtune calibrate` to measure it"
    )
