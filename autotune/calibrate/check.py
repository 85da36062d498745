"""`meshtune calibrate --check`: predict every measurement of some files
from an existing calibration, and say how far off each prediction is.

Collective rows are priced with the calibration's link of their operation
and mesh axis (cost_models.ring_collective_s, regimes included); GEMM rows
with its compute model (roofline and all). A row outside what the
calibration was fitted on (a piece larger than any it saw, a GEMM dimension
beyond the largest measured) is flagged `extrapolated`; a row the
calibration cannot price (no link for the pair, another dtype) is listed
with the reason and left out of the summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.calibrate.run import read_input
from autotune.specs.calibration import CalibrationSpec, LinkSpec
from cost_models import Axis, ring_collective_s


@dataclass(frozen=True)
class CheckRow:
    """One measurement and its prediction."""

    file: str
    line: int
    kind: str  # collective or gemm
    what: str  # e.g. "all_gather.row P=8 shard 1.0 MiB" or "gemm 4096x4096x1024 bf16"
    measured_s: float
    predicted_s: float | None
    rel_error: float | None  # (predicted - measured) / measured
    extrapolated: bool
    note: str | None


@dataclass(frozen=True)
class CheckResult:
    """Every row, and the summary of the rows that could be priced."""

    calibration: str
    rows: tuple[CheckRow, ...]

    def summary(self, which: str = "all") -> dict[str, float | int | None]:
        """median, p90 and worst |relative error| of priced rows; `which`
        is all, collective, gemm, fitted-range or extrapolated."""
        picked = [r for r in self.rows if r.rel_error is not None]
        if which in ("collective", "gemm"):
            picked = [r for r in picked if r.kind == which]
        elif which == "extrapolated":
            picked = [r for r in picked if r.extrapolated]
        elif which == "fitted-range":
            picked = [r for r in picked if not r.extrapolated]
        errors = np.abs([r.rel_error for r in picked], dtype=float)
        if errors.size == 0:
            return {"rows": 0, "median": None, "p90": None, "worst": None}
        return {
            "rows": int(errors.size),
            "median": float(np.median(errors)),
            "p90": float(np.percentile(errors, 90)),
            "worst": float(errors.max()),
        }


def _mib(value: float) -> str:
    return f"{value / 2**20:.4g} MiB" if value >= 2**20 else f"{value:.4g} B"


def _entry(
    calibration: CalibrationSpec, resource: str | None, op: str, axis: str
) -> tuple[LinkSpec | None, str, str]:
    """The entry that prices a log's rows: the mesh axis's, else the one of
    the resource the log measured (the key `meshtune calibrate` writes for
    it, coverage.resource_key); returns (entry, key, "ring" when the entry
    holds one of the ring's P - 1 direct links, "rails" when it holds one
    NIC rail of a ring crossing hosts, else "one")."""
    from autotune.calibrate.coverage import INTRA_NODE_KIND
    from autotune.hardware.chips import load_chip

    entries = calibration.collectives.get(op, {})
    if axis in entries:
        return entries[axis], axis, "one"
    key = None
    if resource == "scale_out":
        key = "scale_out"
    elif resource == "intra_node" and calibration.chip is not None:
        key = INTRA_NODE_KIND.get(load_chip(calibration.chip).vendor)
    if key is None or key not in entries:
        return None, key or axis, "one"
    links = {"fully_connected": "ring", "scale_out": "rails"}.get(key, "one")
    return entries[key], key, links


def check(
    calibration: CalibrationSpec, name: str, paths: Sequence[str], axes: tuple[Axis, ...]
) -> CheckResult:
    """Predict every measurement in `paths` (nccl-tests logs, benchmark
    CSVs) with `calibration`."""
    from autotune.calibrate.coverage import rails_per_host
    from autotune.hardware.calibration import DTYPE_BYTES, compute_model, link_params

    compute = compute_model(calibration) if calibration.compute is not None else None
    rows: list[CheckRow] = []
    for path in paths:
        parsed = read_input(path, axes)
        # a log line stands for every mesh axis asked for; where the
        # calibration prices those axes with one entry (switched, scale_out),
        # the line is one prediction, listed once
        listed: set[tuple[int, str]] = set()
        for s in parsed.collectives:
            link, key, links = _entry(calibration, parsed.resource, s.op.value, s.axis.value)
            what = f"{s.op.value}.{key} P={s.ring_size} shard {_mib(s.shard_bytes)}"
            if (s.line, what) in listed:
                continue
            listed.add((s.line, what))
            if link is None:
                rows.append(
                    CheckRow(
                        s.file,
                        s.line,
                        "collective",
                        what,
                        s.seconds,
                        None,
                        None,
                        False,
                        f"the calibration has no {s.op.value}.{key}",
                    )
                )
                continue
            largest = link.fit.shard_bytes_max if link.fit is not None else None
            scale, ring, piece = 1.0, s.ring_size, s.shard_bytes
            if links == "ring":
                scale = float(s.ring_size - 1)
            elif links == "rails" and parsed.num_hosts and s.op.value == "all_to_all":
                # as the planner prices it: H - 1 pieces of S / H on one rail
                # per chip (coverage.all_to_all_rail_links)
                ring = parsed.num_hosts
                piece = s.shard_bytes * rails_per_host(s.ring_size, parsed.num_hosts)
            elif links == "rails" and parsed.num_hosts:
                scale = rails_per_host(s.ring_size, parsed.num_hosts)
            predicted = float(ring_collective_s(link_params(link, scale), ring, piece))
            rows.append(
                CheckRow(
                    s.file,
                    s.line,
                    "collective",
                    what,
                    s.seconds,
                    predicted,
                    predicted / s.seconds - 1.0,
                    largest is not None and s.shard_bytes > largest * 1.0001,
                    None,
                )
            )
        for g in parsed.gemms:
            what = f"gemm {g.m}x{g.n}x{g.k} {g.dtype}"
            unpriced = (
                "the calibration has no compute entry"
                if compute is None or calibration.compute is None
                else f"the calibration's compute is {calibration.compute.dtype}"
                if g.dtype != calibration.compute.dtype
                else None
            )
            if unpriced is not None:
                rows.append(
                    CheckRow(g.file, g.line, "gemm", what, g.seconds, None, None, False, unpriced)
                )
                continue
            curve = calibration.compute.efficiency_curve
            beyond = bool(
                curve is not None
                and curve.max_dims is not None
                and any(d > cap for d, cap in zip((g.m, g.n, g.k), curve.max_dims, strict=True))
            )
            predicted = float(compute.gemm_s(g.m, g.n, g.k))
            note = None
            if calibration.compute.peak_flops_per_s is None:
                note = "no roofline ceiling in the calibration"
            elif DTYPE_BYTES.get(g.dtype) is None:
                note = "unknown element size"
            rows.append(
                CheckRow(
                    g.file,
                    g.line,
                    "gemm",
                    what,
                    g.seconds,
                    predicted,
                    predicted / g.seconds - 1.0,
                    beyond,
                    note,
                )
            )
    return CheckResult(calibration=name, rows=tuple(rows))


def to_dict(result: CheckResult) -> dict:
    """The JSON form of a check."""
    return {
        "calibration": result.calibration,
        "summary": {
            k: result.summary(k)
            for k in ("all", "collective", "gemm", "fitted-range", "extrapolated")
        },
        "rows": [
            {
                "file": r.file,
                "line": r.line,
                "kind": r.kind,
                "what": r.what,
                "measured_s": r.measured_s,
                "predicted_s": r.predicted_s,
                "rel_error": r.rel_error,
                "extrapolated": r.extrapolated,
                "note": r.note,
            }
            for r in result.rows
        ],
    }
