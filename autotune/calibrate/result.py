"""Turn the fits into a calibration (`CalibrationSpec`) and a result the
renderers show, applying the coverage policy.

Coverage policy: a calibration holds only what the measurements determine.
Pairs (operation, mesh axis) and the compute rate that no input covers are
copied unchanged from an explicit `--base` calibration when one is given
(listed in `kept_from_base`) and are otherwise absent; `meshtune calibrate`
warns which pairs the planner needs are missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from autotune import __version__
from autotune.calibrate.fit_attention import AttentionFit
from autotune.calibrate.fit_comm import CommFit
from autotune.calibrate.fit_compute import ComputeFit
from autotune.calibrate.fit_overlap import OverlapFit
from autotune.calibrate.samples import ParsedFile
from autotune.errors import InputError
from autotune.specs.calibration import (
    AXIS_KEYS,
    CALIBRATION_SCHEMA,
    MAX_REL_ERROR,
    AttentionBackwardSpec,
    AttentionSpec,
    CalibrationSpec,
    CollectiveFit,
    ComputeSpec,
    CrossValidation,
    EfficiencyCurve,
    ExpectedError,
    LinkSpec,
    RegimeSpec,
    SourceFile,
    TileModelSpec,
)
from autotune.specs.chip import ChipSpec, FigureKind

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
    chip_reason: str = ""
    #: the fp8 rows' own fit (compute_fp8), when fp8 rows came beside others
    compute_fp8_fit: ComputeFit | None = None
    #: the attention rows' fit, when the inputs had any
    attention_fit: AttentionFit | None = None  # how the chip was found, or why it was not
    overlap_fit: OverlapFit | None = None
    #: the `host_launch` rows behind host_launch_s (seconds)
    host_launch_rows: tuple[float, ...] = ()
    #: "op.key: what the key means" for every collective entry written
    resource_notes: tuple[str, ...] = ()
    #: per comm fit, the entry it is written as (a resource such as
    #: scale_out or switched, or a mesh axis); None for a second mesh axis
    #: fed the same log (one entry, shown once)
    fit_keys: tuple[str | None, ...] = ()

    def shown_fits(self) -> list[tuple[str, CommFit]]:
        """("op.key", fit) for every collective fit the report shows."""
        keys = self.fit_keys or tuple(f.axis.value for f in self.comm_fits)
        return [
            (f"{fit.op.value}.{key}", fit)
            for fit, key in zip(self.comm_fits, keys, strict=True)
            if key is not None
        ]


def _cross_validation(fit: CommFit) -> CrossValidation | None:
    cv = fit.cv
    if cv is None:
        return None
    i_med, i_p90, i_max = cv.interpolation
    e_med, _, e_max = cv.extrapolation
    return CrossValidation(
        interpolation_median_rel_error=i_med,
        interpolation_p90_rel_error=i_p90,
        interpolation_worst_rel_error=i_max,
        extrapolation_cut_shard_bytes=(
            cv.extrapolation_cut_bytes if cv.extrapolation_errors else None
        ),
        extrapolation_median_rel_error=e_med,
        extrapolation_worst_rel_error=e_max,
        message_cut_bytes=cv.message_cut_bytes if cv.message_errors else None,
        message_cut_median_rel_error=cv.message_extrapolation[0],
        message_cut_worst_rel_error=cv.message_extrapolation[2],
        note=cv.note,
    )


def _link_spec(fit: CommFit, unit_links: float = 1.0, piece_scale: float = 1.0) -> LinkSpec:
    """The fit as a calibration entry; `unit_links` divides every bandwidth
    (a resource key holds one unit link, see coverage.resource_key) and
    `piece_scale` multiplies every piece size (regime bounds, the measured
    range) where the planner prices the resource with larger pieces than
    the log's (an all-to-all across hosts: coverage.all_to_all_piece_scale)."""
    assert fit.link_bytes_per_s is not None
    regimes = None
    if fit.regimes:
        regimes = [
            RegimeSpec(
                max_shard_bytes=None if math.isinf(bound) else bound * piece_scale,
                launch_s=launch,
                sync_s=sync,
                link_bytes_per_s=bw / unit_links,
            )
            for bound, launch, sync, bw in fit.regimes
        ]
    return LinkSpec(
        launch_s=fit.launch_s,
        sync_s=fit.sync_s,
        link_bytes_per_s=fit.link_bytes_per_s / unit_links,
        regimes=regimes,
        fit=CollectiveFit(
            num_points=fit.num_points,
            ring_sizes=list(fit.ring_sizes),
            r2=fit.r2,
            rms_rel_error=fit.rms_rel_error,
            max_rel_error=fit.max_rel_error,
            launch_s_stderr=fit.launch_s_stderr,
            sync_s_stderr=fit.sync_s_stderr,
            link_bytes_per_s_stderr=(
                None
                if fit.link_bytes_per_s_stderr is None
                else fit.link_bytes_per_s_stderr / unit_links
            ),
            identifiable=list(fit.identifiable),
            note=fit.note,
            num_outliers=fit.num_outliers,
            combined_latency_s=fit.combined_latency_s,
            combined_latency_s_stderr=fit.combined_latency_stderr_s,
            model=fit.model,
            shard_bytes_min=_scaled(fit.shard_bytes_range[0], piece_scale),
            shard_bytes_max=_scaled(fit.shard_bytes_range[1], piece_scale),
            extrapolation=fit.extrapolation,
            resource=fit.resource,
            cross_validation=_cross_validation(fit),
            outliers=[f"{f}:{line} ({err:+.0%})" for f, line, err in fit.outliers],
        ),
    )


def _rate_fields(fit: AttentionFit) -> dict:
    """An attention fit's rate entry fields (forward or backward)."""
    return {
        "flops_per_s": fit.flops_per_s,
        "seq_half": fit.seq_half,
        "measured_seq": list(fit.measured_seq),
        "fit": {
            "rms_rel_error": fit.rms_rel_error,
            "max_rel_error": fit.max_rel_error,
            "num_rows": fit.num_rows,
        },
    }


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _out_of_range(exc: ValidationError) -> str:
    """What a fitted value outside its plausible range was, in one phrase."""
    problem = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in problem.get("loc", ()))
    return (
        f"fitted {where} = {problem.get('input')!r} is outside its plausible range "
        "(docs/reliability.md); check the measurements"
    )


def _compute_spec(fit: ComputeFit, chip: ChipSpec | None) -> ComputeSpec:
    m_half, n_half, k_half = fit.halves
    m_err, n_err, k_err = fit.halves_stderr
    cv = np.asarray(fit.cv_errors)
    const_cv = np.asarray(fit.constant_cv_errors)
    tile = fit.tile
    return ComputeSpec(
        dtype=fit.dtype,
        effective_flops_per_s=fit.effective_flops_per_s,
        efficiency_curve=None
        if tile is not None
        else EfficiencyCurve(
            m_half=m_half,
            n_half=n_half,
            k_half=k_half,
            max_dims=list(fit.max_dims) if fit.max_dims else None,
        ),
        measured_dims=None
        if fit.min_dims is None or fit.max_dims is None
        else [list(fit.min_dims), list(fit.max_dims)],
        tile_model=None
        if tile is None
        else TileModelSpec(
            num_cores=tile.num_cores,
            launch_s=tile.launch_s,
            k_overhead=tile.k_overhead,
            reuse_penalty=tile.reuse_penalty,
            tiles=[list(t) for t in tile.tiles],
        ),
        peak_flops_per_s=fit.peak_flops_per_s,
        hbm_bytes_per_s=fit.hbm_bytes_per_s,
        source=None if chip is None else f"fitted; roofline of chip preset {chip.name}",
        fit={
            "model": fit.kind,
            "cv_median_rel_error": float(np.median(cv)) if cv.size else None,
            "other_model_cv_median_rel_error": float(np.median(fit.other_cv_errors))
            if fit.other_cv_errors
            else None,
            "cv_worst_rel_error": float(cv.max()) if cv.size else None,
            "constant_cv_median_rel_error": float(np.median(const_cv)) if const_cv.size else None,
            "outliers": ", ".join(f"{f}:{line}" for f, line in fit.outliers) or None,
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


def _expected_error(
    comm_fits: Sequence[CommFit], compute_fit: ComputeFit | None
) -> ExpectedError | None:
    errors = [e for f in comm_fits if f.usable and f.cv for e in f.cv.interpolation_errors]
    extrap = [
        e
        for f in comm_fits
        if f.usable and f.cv
        for e in (*f.cv.extrapolation_errors, *f.cv.message_errors)
    ]
    compute_errors = list(compute_fit.cv_errors) if compute_fit is not None else []
    if not errors and not compute_errors:
        return None
    every = errors + extrap

    def bounded(values: list[float], pick) -> float | None:
        # a held-out error above MAX_REL_ERROR (100,000%) says only "no estimate"
        return min(float(pick(values)), MAX_REL_ERROR) if values else None

    return ExpectedError(
        collective_median_rel_error=bounded(errors, np.median),
        collective_worst_rel_error=bounded(every, np.max),
        compute_median_rel_error=bounded(compute_errors, np.median),
        compute_worst_rel_error=bounded(compute_errors, np.max),
        basis="collectives: each inner size left out in turn (median), worst also over the "
        "fit-small/predict-large splits (piece and message); compute: each GEMM shape "
        "left out in turn",
    )


def build_result(
    files: Sequence[ParsedFile],
    comm_fits: Sequence[CommFit],
    compute_fit: ComputeFit | None,
    *,
    name: str,
    compute_fp8_fit: ComputeFit | None = None,
    attention_fit: AttentionFit | None = None,
    base: CalibrationSpec | None = None,
    base_ref: str | None = None,
    chip: ChipSpec | None = None,
    chip_reason: str = "",
    axes: Sequence[str] = ("row", "col"),
    overlap_fit: OverlapFit | None = None,
    host_launch_rows: Sequence[float] = (),
    by_axis: bool = False,
) -> CalibrationResult:
    """Assemble the calibration: fitted entries (keyed by the resource the
    log measured, or by mesh axis when `by_axis`), then what can be derived
    from them, then (only for what is still missing) the base calibration's
    entries, then the chip preset's compute rate; every entry not fitted is
    listed and warned about."""
    from autotune.calibrate.coverage import (
        all_to_all_piece_scale,
        derive_links,
        preset_compute_rate,
        resource_key,
    )

    warnings: list[str] = []
    collectives: dict[str, dict[str, LinkSpec]] = {}
    resource_notes: list[str] = []
    fit_keys: list[str | None] = []
    seen_keys: set[tuple[str, str]] = set()
    for fit in comm_fits:
        key, unit_links, why = resource_key(
            fit.resource, chip, fit.ring_sizes, fit.num_hosts, fit.op.value
        )
        if by_axis and key is not None:
            # the user named the mesh axis: keep the entry as that axis measured it
            why = f"keyed by mesh axis (--axis); the log measured {why.split(': ')[0]}"
            key, unit_links = None, 1.0
            warnings.append(
                f"{fit.op.value}.{fit.axis.value}: keyed by mesh axis, so it prices the "
                f"{fit.axis.value} axis as measured whatever resource that axis lands on; "
                "omit --axis to key it by resource"
            )
        key = key or fit.axis.value
        pair = f"{fit.op.value}.{key}"
        fit_keys.append(None if (fit.op.value, key) in seen_keys else key)
        seen_keys.add((fit.op.value, key))
        if not fit.usable:
            warnings.append(f"{pair}: not written: {fit.note}")
            continue
        if key in collectives.get(fit.op.value, {}):
            continue  # both mesh axes were fed the same log: one resource entry
        try:
            link = _link_spec(fit, unit_links, all_to_all_piece_scale(fit, key))
        except ValidationError as exc:  # a fitted value outside its plausible range
            warnings.append(f"{pair}: not written: {_out_of_range(exc)}")
            continue
        collectives.setdefault(fit.op.value, {})[key] = link
        resource_notes.append(f"{pair}: {why}")
        if fit.rms_rel_error > POOR_FIT_RMS:
            warnings.append(f"{pair}: poor fit, RMS relative error {fit.rms_rel_error:.0%}")
        if fit.note:
            warnings.append(f"{pair}: {fit.note}")
        if fit.still_climbing:
            warnings.append(
                f"{pair}: the bandwidth was still climbing at the largest piece measured "
                f"({fit.shard_bytes_range[1]:.4g} B), so larger pieces are likely predicted "
                "too slow; measure up to the bandwidth plateau (1-8 GiB messages)"
            )
        if fit.resource == "mixed":
            warnings.append(
                f"{pair}: pools single-host and multi-host logs (intra-node and scale-out "
                "links); calibrate them separately, one per --axis"
            )
    resource_keys = sorted({k for e in collectives.values() for k in e} - set(AXIS_KEYS))
    keys = [*axes, *(k for k in resource_keys if k not in axes)]
    derived, derive_warnings = derive_links(collectives, keys)
    warnings.extend(derive_warnings)
    kept: list[str] = []
    if base is not None:
        for op, base_axes in base.collectives.items():
            for axis, link in base_axes.items():
                if axis not in collectives.get(op, {}):
                    collectives.setdefault(op, {})[axis] = link
                    kept.append(f"{op}.{axis}")
    from_preset: list[str] = []
    compute: ComputeSpec | None = None
    if compute_fit is not None:
        try:
            compute = _compute_spec(compute_fit, chip)
        except ValidationError as exc:  # a fitted value outside its plausible range
            warnings.append(f"compute: not written: {_out_of_range(exc)}")
        else:
            if compute_fit.note:
                warnings.append(f"compute: {compute_fit.note}")
            if compute_fit.rms_rel_error > POOR_FIT_RMS:
                rms = compute_fit.rms_rel_error
                warnings.append(f"compute: poor fit, RMS relative error {rms:.0%}")
    compute_fp8: ComputeSpec | None = None
    if compute_fp8_fit is not None:
        try:
            compute_fp8 = _compute_spec(compute_fp8_fit, chip)
        except ValidationError as exc:
            warnings.append(f"compute_fp8: not written: {_out_of_range(exc)}")
        else:
            if compute_fp8_fit.rms_rel_error > POOR_FIT_RMS:
                rms = compute_fp8_fit.rms_rel_error
                warnings.append(f"compute_fp8: poor fit, RMS relative error {rms:.0%}")
    elif base is not None and base.compute_fp8 is not None:
        compute_fp8 = base.compute_fp8
        kept.append("compute_fp8")
    attention: AttentionSpec | None = None
    if attention_fit is not None:
        backward = attention_fit.backward
        attention = AttentionSpec(
            dtype=attention_fit.dtype,
            **_rate_fields(attention_fit),
            source="fitted from attention rows",
            backward=None if backward is None else AttentionBackwardSpec(**_rate_fields(backward)),
        )
        if attention_fit.note:
            warnings.append(f"attention: {attention_fit.note}")
    elif base is not None and base.attention is not None:
        attention = base.attention
        kept.append("attention")
    if compute is not None:
        pass  # the fitted curve stands; otherwise the fallbacks below
    elif base is not None:
        compute = base.compute
        kept.append("compute")
    elif chip is not None:
        rate = preset_compute_rate(chip)
        compute = ComputeSpec(
            dtype="bf16",
            effective_flops_per_s=rate,
            efficiency_curve=None,
            peak_flops_per_s=rate,
            hbm_bytes_per_s=chip.hbm_bytes_per_s,
            source=f"chip preset {chip.name} ({chip.figures.value} figures): {chip.source}",
        )
        from_preset.append(f"compute (bf16 peak of {chip.name})")
        warnings.append(
            f"compute: no gemm rows, so the rate is the {chip.name} preset's bf16 peak "
            f"{rate / 1e12:.0f} TFLOP/s ({chip.figures.value}); real GEMMs reach less: "
            "measure them (meshtune bench) for a fitted curve"
        )
    elif not any(f.usable for f in comm_fits):
        raise InputError(
            f"the inputs measure nothing a calibration holds: no gemm rows, no collective "
            f"fits, and no chip known ({chip_reason})",
            field="compute",
            fix="pass --chip PRESET (see meshtune presets), add gemm rows (meshtune bench), "
            "or pass --base CAL to keep its compute entry",
        )
    else:
        compute = None
        warnings.append(
            f"compute: no gemm rows and no chip preset ({chip_reason}), so the calibration "
            "has no compute entry; meshtune plan will use the cluster's nominal peak and say "
            "so; pass --chip PRESET or add gemm rows"
        )
    for entry in kept:
        warnings.append(f"{entry}: taken unchanged from --base {base_ref}, not measured")
    if resource_keys:
        ops = sorted({op for op, _ in PLANNER_PAIRS})
        missing = [
            f"{op}.{key}"
            for op in ops
            for key in resource_keys
            if key not in collectives.get(op, {})
        ]
        warnings.append(
            f"calibrates the {', '.join(resource_keys)} resource only: meshtune plan prices "
            "mesh axes on other resources (e.g. across nodes) with the cluster's nominal "
            "calibration and warns"
        )
    else:
        missing = [
            f"{op}.{axis}" for op, axis in PLANNER_PAIRS if axis not in collectives.get(op, {})
        ]
    if missing and resource_keys:
        warnings.append(
            f"not measured: {', '.join(missing)}; meshtune plan takes them from the "
            "cluster's calibration (nominal figures) and warns: measure them or pass --base CAL"
        )
    elif missing:
        warnings.append(
            f"the planner will stop with an error if it needs {', '.join(missing)}: "
            "measure them or pass --base CAL"
        )
    overlap = base.overlap_slowdown if base is not None else 1.0
    if overlap_fit is not None:
        overlap = overlap_fit.slowdown
        if overlap_fit.note:
            warnings.append(f"overlap_slowdown: {overlap_fit.note}")
    elif base is None:
        warnings.append(
            "overlap_slowdown: not measured, 1.0 assumed (compute is not slowed by a "
            "collective running beside it); meshtune bench measures it"
        )
    elif "overlap_slowdown" not in kept:
        kept.append("overlap_slowdown")
        warnings.append(f"overlap_slowdown: taken unchanged from --base {base_ref}")
    host_launch = float(np.median(host_launch_rows)) if host_launch_rows else None
    if host_launch is None and base is not None and base.host_launch_s is not None:
        host_launch = base.host_launch_s
        kept.append("host_launch_s")
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
    if derived:
        source += f"; derived: {', '.join(derived)}"
    if kept:
        source += f"; kept from {base_ref}: {', '.join(kept)}"
    if from_preset:
        source += f"; from the chip preset: {', '.join(from_preset)}"
    spec = CalibrationSpec(
        schema_=CALIBRATION_SCHEMA,
        name=name,
        source=source,
        tool_version=__version__,
        collectives=collectives,
        compute=compute,
        compute_fp8=compute_fp8,
        attention=attention,
        overlap_slowdown=overlap,
        host_launch_s=host_launch,
        inputs=inputs,
        base_calibration=base_ref if base is not None else None,
        kept_from_base=kept,
        chip=chip.name if chip is not None else None,
        derived=derived,
        from_preset=from_preset,
        expected_error=_expected_error(comm_fits, compute_fit),
        # what the inputs measured; kept_from_base, derived and from_preset
        # name the rest
        figures=FigureKind.FITTED,
    )
    return CalibrationResult(
        spec=spec,
        files=tuple(files),
        comm_fits=tuple(comm_fits),
        compute_fit=compute_fit,
        compute_fp8_fit=compute_fp8_fit,
        attention_fit=attention_fit,
        warnings=tuple(warnings),
        chip_reason=chip_reason,
        overlap_fit=overlap_fit,
        host_launch_rows=tuple(host_launch_rows),
        resource_notes=tuple(resource_notes),
        fit_keys=tuple(fit_keys),
    )


def to_json(result: CalibrationResult) -> str:
    """The calibration file's text (`meshtune.calibration/1`, base units)."""
    import json

    data = result.spec.model_dump(by_alias=True, mode="json")
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
