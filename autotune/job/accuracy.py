"""How far a plan's predicted step can be trusted: the calibration's
held-out error carried to the step as a band, and the parts of the step
priced beyond what the calibration measured.

The band (derivation): each part of the step is priced by one of the
calibration's models, whose held-out relative error the calibration records
(`expected_error`: the collectives' median, the GEMM model's median). A part
of `t_i` seconds priced with relative error `e_i` moves the step by up to
`e_i t_i`; adding them (errors of one model move together, so they add
rather than average out)::

    band_rel = sum_i e_i t_i / step_s

with the collective error for the exposed communication (tensor, pipeline,
data parallel) and the compute error for everything else; the pipeline
bubble is idle time that scales with the stages' work, so it carries the
work's average error. Configurations whose step is within the band of the
chosen one are near-ties: the model cannot tell them apart, and the report
names them as the ones to benchmark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.render_text import byte_size
from autotune.specs.calibration import CalibrationSpec, ComputeSpec, ExpectedError

#: exposed communication, priced by the collective fits
COMM_PARTS = ("tp_comm_s", "pp_comm_s", "dp_comm_s")
#: compute and memory-bound work, priced by the GEMM model and the HBM rate
WORK_PARTS = (
    "fc_compute_s",
    "attention_s",
    "elementwise_s",
    "recompute_s",
    "ends_s",
    "optimizer_s",
)


def step_band_rel(
    parts: Mapping[str, float], step_s: float, expected: ExpectedError | None
) -> float | None:
    """The step's relative error band (module docstring): None when the
    calibration records no held-out error (data-sheet figures) or the step
    is zero. A missing collective or compute error takes the other's."""
    if expected is None or step_s <= 0:
        return None
    comm = expected.collective_median_rel_error
    work = expected.compute_median_rel_error
    if comm is None and work is None:
        return None
    comm = work if comm is None else comm
    work = comm if work is None else work
    assert comm is not None and work is not None
    comm_s = sum(parts.get(k, 0.0) for k in COMM_PARTS)
    work_s = sum(parts.get(k, 0.0) for k in WORK_PARTS)
    busy = comm_s + work_s
    bubble_rel = (comm * comm_s + work * work_s) / busy if busy > 0 else work
    total = comm * comm_s + work * work_s + bubble_rel * parts.get("bubble_s", 0.0)
    return total / step_s


@dataclass(frozen=True)
class Extrapolation:
    """A part of the plan priced outside what its calibration measured.

    `what` names the model (`all_gather.switched`, `gemm bf16`); `measured`
    and `priced` are the (low, high) sizes: piece bytes for a collective,
    for a GEMM the dimension named in `dimension` (m, n or k); `factor` is
    how far beyond: the priced size over the largest measured, or the
    smallest measured over the priced size (> 1)."""

    kind: str  # "collective", "gemm" or "attention"
    what: str
    dimension: str  # "piece bytes", "m", "n", "k" or "sequence"
    measured: tuple[float, float]
    priced: tuple[float, float]
    factor: float
    used_by: str

    def line(self) -> str:
        """One line for the report."""
        lo, hi = self.measured
        plo, phi = self.priced
        if self.kind == "collective":
            span = f"pieces of {byte_size(lo)} to {byte_size(hi)}"
            used = f"{byte_size(plo)} to {byte_size(phi)}"
        else:
            span = f"{self.dimension} from {lo:,.0f} to {hi:,.0f}"
            used = f"{self.dimension} {plo:,.0f}" + (f" to {phi:,.0f}" if phi != plo else "")
        return (
            f"{self.what} was measured on {span}; priced here for the {self.used_by}: "
            f"{used}, {self.factor:.1f}x beyond it"
        )


def attention_extrapolations(calibration: CalibrationSpec, local_seq: float) -> list[Extrapolation]:
    """The fused attention kernel priced on `local_seq` tokens per chip
    (the sequence over the context-parallel chips) outside the sequences
    its calibration rows measured, forward and backward: beyond the longest
    the rate is held at its value there (cost_models.context_parallel
    attention_rate_flops_per_s), below the shortest the fitted curve is
    extrapolated."""
    attention = calibration.attention
    if attention is None:
        return []
    out = []
    for what, entry in (("attention", attention), ("attention backward", attention.backward)):
        if entry is None:
            continue
        low, high = (float(x) for x in entry.measured_seq)
        factor = _beyond(local_seq, local_seq, low, high)
        if factor > EXTRAPOLATION_SLACK:
            out.append(
                Extrapolation(
                    "attention",
                    f"{what} {attention.dtype}",
                    "sequence",
                    (low, high),
                    (local_seq, local_seq),
                    factor,
                    "attention core",
                )
            )
    return out


def _beyond(lo: float, hi: float, low: float, high: float) -> float:
    """How far [lo, hi] reaches outside [low, high], as a factor (1: inside)."""
    factor = 1.0
    if hi > high > 0:
        factor = max(factor, hi / high)
    if 0 < lo < low:
        factor = max(factor, low / lo)
    return factor


#: a size within this factor of the measured range is not reported
EXTRAPOLATION_SLACK = 1.0001


def collective_extrapolations(
    calibration: CalibrationSpec, used: Mapping[tuple[str, str], tuple[float, float, str]]
) -> list[Extrapolation]:
    """`used` maps (operation, calibration key) to the (smallest, largest)
    piece the plan prices on it and who prices it; each entry whose fit
    measured a narrower range is returned."""
    out = []
    for (op, key), (lo, hi, who) in sorted(used.items()):
        link = calibration.collectives.get(op, {}).get(key)
        fit = link.fit if link is not None else None
        if fit is None or fit.shard_bytes_min is None or fit.shard_bytes_max is None:
            continue
        factor = _beyond(lo, hi, fit.shard_bytes_min, fit.shard_bytes_max)
        if factor > EXTRAPOLATION_SLACK:
            out.append(
                Extrapolation(
                    "collective",
                    f"{op}.{key}",
                    "piece bytes",
                    (fit.shard_bytes_min, fit.shard_bytes_max),
                    (lo, hi),
                    factor,
                    who,
                )
            )
    return out


def gemm_extrapolations(
    calibration: CalibrationSpec,
    shapes: Mapping[str, list[tuple[float, float, float]]],
    compute: ComputeSpec | None = None,
) -> list[Extrapolation]:
    """`shapes` maps who prices them (FC layers, attention core, output
    layer) to the local GEMM shapes (m, n, k); each dimension outside the
    range the compute fit (`compute`, default the calibration's compute
    entry) measured is returned, per user."""
    compute = compute or calibration.compute
    if compute is None:
        return []
    low, high = compute.measured_range()
    if high is None:
        return []
    out = []
    for who, dims in shapes.items():
        if not dims:
            continue
        for j, name in enumerate("mnk"):
            lo = min(d[j] for d in dims)
            hi = max(d[j] for d in dims)
            floor = low[j] if low is not None else 0.0
            factor = _beyond(lo, hi, floor, high[j])
            if factor > EXTRAPOLATION_SLACK:
                out.append(
                    Extrapolation(
                        "gemm",
                        f"gemm {compute.dtype}",
                        name,
                        (floor, high[j]),
                        (lo, hi),
                        factor,
                        who,
                    )
                )
    return out
