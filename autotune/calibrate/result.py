"""Turn the fits into a calibration (`CalibrationSpec`) and a result the
renderers show, applying the coverage policy.

Coverage policy: a calibration holds only what the measurements determine.
Pairs (operation, mesh axis) and the compute rate that no input covers are
copied unchanged from an explicit `--base` calibration when one is given
(listed in `kept_from_base`) and are otherwise absent; `meshtune calibrate`
warns which pairs the planner needs are missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune import __version__
from autotune.calibrate.fit_comm import CommFit
from autotune.calibrate.fit_compute import ComputeFit
from autotune.calibrate.samples import ParsedFile
from autotune.errors import InputError
from autotune.specs.calibration import (
    CALIBRATION_SCHEMA,
    CalibrationSpec,
    CollectiveFit,
    ComputeSpec,
    EfficiencyCurve,
    LinkSpec,
    SourceFile,
)

#: (operation, mesh axis) pairs the planner prices: the MeshSlice collectives
#: on both axes, and send-recv for layout transposes
PLANNER_PAIRS = (
    ("all_gather", "row"),
    ("all_gather", "col"),
    ("reduce_scatter", "row"),
    ("reduce_scatter", "col"),
    ("send_recv", "row"),
    ("send_recv", "col"),
)
#: relative RMS error above which a fit is flagged as poor
POOR_FIT_RMS = 0.15


@dataclass(frozen=True)
class CalibrationResult:
    """The written calibration plus everything the report shows about how
    it was obtained."""

    spec: CalibrationSpec
    files: tuple[ParsedFile, ...]
    comm_fits: tuple[CommFit, ...]
    compute_fit: ComputeFit | None
    warnings: tuple[str, ...]


def _link_spec(fit: CommFit) -> LinkSpec:
    assert fit.link_bytes_per_s is not None
    return LinkSpec(
        launch_s=fit.launch_s,
        sync_s=fit.sync_s,
        link_bytes_per_s=fit.link_bytes_per_s,
        fit=CollectiveFit(
            num_points=fit.num_points,
            ring_sizes=list(fit.ring_sizes),
            r2=fit.r2,
            rms_rel_error=fit.rms_rel_error,
            max_rel_error=fit.max_rel_error,
            launch_s_stderr=fit.launch_s_stderr,
            sync_s_stderr=fit.sync_s_stderr,
            link_bytes_per_s_stderr=fit.link_bytes_per_s_stderr,
            identifiable=list(fit.identifiable),
            note=fit.note,
            num_outliers=fit.num_outliers,
            combined_latency_s=fit.combined_latency_s,
            combined_latency_s_stderr=fit.combined_latency_stderr_s,
        ),
    )


def _compute_spec(fit: ComputeFit) -> ComputeSpec:
    m_half, n_half, k_half = fit.halves
    m_err, n_err, k_err = fit.halves_stderr
    return ComputeSpec(
        dtype=fit.dtype,
        effective_flops_per_s=fit.effective_flops_per_s,
        efficiency_curve=EfficiencyCurve(m_half=m_half, n_half=n_half, k_half=k_half),
        fit={
            "num_points": fit.num_points,
            "num_outliers": fit.num_outliers,
            "r2_log": fit.r2_log,
            "rms_rel_error": fit.rms_rel_error,
            "max_rel_error": fit.max_rel_error,
            "effective_flops_per_s_stderr": fit.effective_flops_per_s_stderr,
            "m_half_stderr": m_err,
            "n_half_stderr": n_err,
            "k_half_stderr": k_err,
            "constant_flops_per_s": fit.constant_flops_per_s,
            "constant_rms_rel_error": fit.constant_rms_rel_error,
            "identifiable": ", ".join(fit.identifiable),
            "note": fit.note,
        },
    )


def build_result(
    files: Sequence[ParsedFile],
    comm_fits: Sequence[CommFit],
    compute_fit: ComputeFit | None,
    *,
    name: str,
    base: CalibrationSpec | None = None,
    base_ref: str | None = None,
) -> CalibrationResult:
    """Assemble the calibration: fitted entries, then (only for what no
    input covers) the base calibration's entries."""
    warnings: list[str] = []
    collectives: dict[str, dict[str, LinkSpec]] = {}
    for fit in comm_fits:
        pair = f"{fit.op.value}.{fit.axis.value}"
        if not fit.usable:
            warnings.append(f"{pair}: not written: {fit.note}")
            continue
        collectives.setdefault(fit.op.value, {})[fit.axis.value] = _link_spec(fit)
        if fit.rms_rel_error > POOR_FIT_RMS:
            warnings.append(f"{pair}: poor fit, RMS relative error {fit.rms_rel_error:.0%}")
        if fit.note:
            warnings.append(f"{pair}: {fit.note}")
    kept: list[str] = []
    if base is not None:
        for op, axes in base.collectives.items():
            for axis, link in axes.items():
                if axis not in collectives.get(op, {}):
                    collectives.setdefault(op, {})[axis] = link
                    kept.append(f"{op}.{axis}")
    if compute_fit is not None:
        compute = _compute_spec(compute_fit)
        if compute_fit.note:
            warnings.append(f"compute: {compute_fit.note}")
        if compute_fit.rms_rel_error > POOR_FIT_RMS:
            rms = compute_fit.rms_rel_error
            warnings.append(f"compute: poor fit, RMS relative error {rms:.0%}")
    elif base is not None:
        compute = base.compute
        kept.append("compute")
    else:
        raise InputError(
            "no gemm rows in the inputs, and a calibration needs a compute rate",
            field="compute",
            fix="add gemm rows (meshtune bench) or pass --base CAL to keep its compute entry",
        )
    missing = [f"{op}.{axis}" for op, axis in PLANNER_PAIRS if axis not in collectives.get(op, {})]
    if missing:
        warnings.append(
            f"the planner will stop with an error if it needs {', '.join(missing)}: "
            "measure them or pass --base CAL"
        )
    inputs = [
        SourceFile(
            path=f.path,
            sha256=f.sha256,
            kind=f.kind,
            rows_used=f.num_rows,
            description=f.description,
        )
        for f in files
    ]
    described = "; ".join(f"{f.path} ({f.description})" for f in files)
    source = f"fitted by meshtune calibrate {__version__} from {described}"
    if kept:
        source += f"; kept from {base_ref}: {', '.join(kept)}"
    spec = CalibrationSpec(
        schema_=CALIBRATION_SCHEMA,
        name=name,
        source=source,
        tool_version=__version__,
        collectives=collectives,
        compute=compute,
        overlap_slowdown=base.overlap_slowdown if base is not None else 1.0,
        inputs=inputs,
        base_calibration=base_ref if base is not None else None,
        kept_from_base=kept,
    )
    return CalibrationResult(
        spec=spec,
        files=tuple(files),
        comm_fits=tuple(comm_fits),
        compute_fit=compute_fit,
        warnings=tuple(warnings),
    )


def to_json(result: CalibrationResult) -> str:
    """The calibration file's text (`meshtune.calibration/1`, base units)."""
    import json

    data = result.spec.model_dump(by_alias=True, mode="json")
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
