"""Read the inputs, fit, and assemble: the one library call behind
`meshtune calibrate`."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from pydantic import ValidationError

from autotune.calibrate.csv_format import looks_like_csv, parse_csv
from autotune.calibrate.nccl_tests import looks_like_nccl_tests, parse_nccl_tests
from autotune.calibrate.result import CalibrationResult, build_result
from autotune.calibrate.samples import ParsedFile
from autotune.errors import InputError
from cost_models import Axis


def read_input(path: str, axes: tuple[Axis, ...]) -> ParsedFile:
    """Read one benchmark CSV or nccl-tests log (told apart by content)."""
    p = Path(path)
    if not p.exists():
        raise InputError("no such file", file=path, fix="check the path")
    if p.is_dir():
        raise InputError("is a folder, not a file", file=path, fix="name a file")
    data = p.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise InputError(
            "is binary data, not text",
            file=path,
            line=line,
            fix="pass a benchmark CSV or a text nccl-tests log",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"is not UTF-8 text (byte {exc.start})", file=path, line=line, fix="save it as UTF-8"
        ) from None
    if not text.strip():
        raise InputError(
            "is empty", file=path, line=1, fix="pass a benchmark CSV or an nccl-tests log"
        )
    if looks_like_csv(text):
        return parse_csv(text, path, digest)
    if looks_like_nccl_tests(text):
        return parse_nccl_tests(text, path, axes, digest)
    first = next(i for i, ln in enumerate(text.splitlines(), start=1) if ln.strip())
    raise InputError(
        "is neither a meshtune benchmark CSV nor an nccl-tests log with a result table",
        file=path,
        line=first,
        fix="start a CSV with the header kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds "
        "or paste a whole nccl-tests run",
    )


def calibrate(
    paths: Sequence[str],
    *,
    axes: tuple[Axis, ...] = (Axis.ROW, Axis.COL),
    name: str = "calibration",
    base_ref: str | None = None,
    chip_ref: str | None = None,
    model: str = "auto",
    by_axis: bool = False,
) -> CalibrationResult:
    """Fit a calibration from `paths`; nccl-tests rows are assigned to the
    mesh axes `axes`; the chip comes from `chip_ref` or the logs' device
    lines and bounds the GEMM curve (and supplies compute without GEMM
    rows); `base_ref` (a preset or file) supplies, with a warning, entries
    nothing else covers; `model` is auto, regimes or linear for the
    collectives. nccl-tests fits are keyed by the resource the log
    measured (switched, fully_connected, scale_out) when chip and hosts
    tell it, or by mesh axis when `by_axis`. Raises InputError on bad input
    before anything is fitted."""
    from autotune.calibrate.coverage import detect_chip
    from autotune.calibrate.fit_comm import fit_all
    from autotune.calibrate.fit_compute import choose_dtype, fit_gemm
    from autotune.calibrate.screen import screen_collectives, screen_gemms
    from autotune.loading import load_calibration

    files = [read_input(p, axes) for p in paths]
    base = load_calibration(base_ref, field="--base")[0] if base_ref else None
    chip, chip_reason, chip_warnings = detect_chip(files, chip_ref)
    # rows inconsistent with their group are reported and left out of every fit
    collectives, excluded = screen_collectives([s for f in files for s in f.collectives])
    gemms, excluded_gemms = screen_gemms([s for f in files for s in f.gemms])
    excluded += excluded_gemms
    if excluded:
        kept = {id(s) for s in (*collectives, *gemms)}
        files = [
            replace(
                f,
                collectives=tuple(s for s in f.collectives if id(s) in kept),
                gemms=tuple(s for s in f.gemms if id(s) in kept),
            )
            for f in files
        ]
    resources = {f.path: f.resource for f in files}
    hosts = {f.path: f.num_hosts for f in files}
    comm_fits = fit_all(collectives, model, resources, hosts)
    compute_fit = fp8_fit = None
    if gemms:
        dtype = choose_dtype(gemms)
        peak = chip.peak_flops_per_s(dtype) if chip is not None and chip.has_dtype(dtype) else None
        hbm = chip.hbm_bytes_per_s if chip is not None else None
        cores = chip.num_cores if chip is not None else None
        split_fp8 = dtype != "fp8" and any(s.dtype == "fp8" for s in gemms)
        main_rows = [s for s in gemms if s.dtype != "fp8"] if split_fp8 else gemms
        compute_fit = fit_gemm(main_rows, dtype, peak, hbm, num_cores=cores)
        if split_fp8:
            # fp8 rows beside the training dtype's: the FC layers' rate under
            # an FP8 recipe (compute_fp8), fitted on their own
            peak8 = (
                chip.peak_flops_per_s("fp8") if chip is not None and chip.has_dtype("fp8") else None
            )
            fp8_rows = [s for s in gemms if s.dtype == "fp8"]
            fp8_fit = fit_gemm(fp8_rows, "fp8", peak8, hbm, num_cores=cores)
    from autotune.calibrate.fit_attention import fit_attention
    from autotune.calibrate.fit_overlap import fit_overlap

    attention_rows = [a for f in files for a in f.attentions]
    attention_fit = fit_attention(attention_rows) if attention_rows else None

    overlap_fit = fit_overlap([o for f in files for o in f.overlaps], gemms)
    try:
        result = build_result(
            files,
            comm_fits,
            compute_fit,
            compute_fp8_fit=fp8_fit,
            attention_fit=attention_fit,
            overlap_fit=overlap_fit,
            host_launch_rows=[s for f in files for s in f.host_launches],
            name=name,
            base=base,
            base_ref=base_ref,
            chip=chip,
            chip_reason=chip_reason,
            axes=tuple(a.value for a in axes),
            by_axis=by_axis,
        )
    except ValidationError as exc:  # a fitted value outside its plausible range
        problem = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in problem.get("loc", ()))
        raise InputError(
            "the fitted calibration is outside the plausible ranges (docs/reliability.md)",
            file=paths[0] if len(paths) == 1 else None,
            field=where,
            value=problem.get("input"),
            fix="check the measurements for mistyped sizes or times",
        ) from None
    if excluded:
        result = replace(result, warnings=(*excluded, *result.warnings))
    if chip_warnings or chip is None:
        extra = list(chip_warnings)
        if chip is None:
            extra.append(
                f"chip unknown ({chip_reason}): the GEMM curve has no roofline ceiling; "
                "name the chip with --chip"
            )
        result = replace(result, warnings=(*extra, *result.warnings))
    return result
