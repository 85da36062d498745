"""Fit the fused attention kernel's rate from `attention` rows
(calibrate/csv_format.py): `rate(s) = R s / (s + s_half)`
(cost_models.context_parallel.attention_rate_flops_per_s), least squares
on the relative error of each row's time; one sequence length measured
gives a constant rate (the median). `attention_backward` rows are fitted
the same way on their own (2.5 forwards of FLOPs each), the backward
kernel's rate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from autotune.calibrate.samples import AttentionSample
from autotune.errors import InputError
from cost_models.context_parallel import attention_rate_flops_per_s, attention_rate_length


@dataclass(frozen=True)
class AttentionFit:
    """The fitted rate and how well it describes the rows."""

    dtype: str
    flops_per_s: float
    seq_half: float
    measured_seq: tuple[int, int]
    rms_rel_error: float
    max_rel_error: float
    num_rows: int
    note: str = ""
    #: the backward kernel's own fit, when backward rows were given
    backward: AttentionFit | None = None


def fit_attention(samples: Sequence[AttentionSample]) -> AttentionFit:
    """The forward rows' fit, with the backward rows' fit attached when
    there are any; InputError when there are only backward rows."""
    forward = [s for s in samples if not s.backward]
    backward = [s for s in samples if s.backward]
    if not forward:
        s = backward[0]
        raise InputError(
            "attention_backward rows need attention (forward) rows beside them",
            file=s.file,
            line=s.line,
            field="kind",
            value="attention_backward",
            fix="add attention rows of the same kernel (meshtune prices the backward "
            "against the forward)",
        )
    fit = _fit_rate(forward)
    return replace(fit, backward=_fit_rate(backward)) if backward else fit


def _fit_rate(samples: Sequence[AttentionSample]) -> AttentionFit:
    """Fit the rows of the most measured dtype (bf16 first); the others are
    named in the note."""
    counts = Counter(s.dtype for s in samples)
    dtype = "bf16" if "bf16" in counts else counts.most_common(1)[0][0]
    rows = [s for s in samples if s.dtype == dtype]
    # each row's rate is read at its kernel's rate length (s / 2 causal)
    seq = np.array([float(attention_rate_length(s.seq_len, s.causal)) for s in rows])
    flops = np.array([s.flops for s in rows])
    seconds = np.array([s.seconds for s in rows])
    rates = flops / seconds
    if len(set(seq.tolist())) == 1:
        big, half = float(np.median(rates)), 0.0
    else:

        def residual(x: np.ndarray) -> np.ndarray:
            rate = attention_rate_flops_per_s(seq, float(np.exp(x[0])), float(np.exp(x[1])))
            return flops / rate / seconds - 1.0

        start = np.array([np.log(rates.max()), np.log(float(np.median(seq)) / 4)])
        res = least_squares(residual, start)
        big, half = float(np.exp(res.x[0])), float(np.exp(res.x[1]))
    predicted = flops / attention_rate_flops_per_s(seq, big, half)
    rel = np.abs(predicted / seconds - 1.0)
    others = sorted(set(counts) - {dtype})
    return AttentionFit(
        dtype=dtype,
        flops_per_s=big,
        seq_half=half,
        measured_seq=(min(s.seq_len for s in rows), max(s.seq_len for s in rows)),
        rms_rel_error=float(np.sqrt(np.mean(rel**2))),
        max_rel_error=float(rel.max()),
        num_rows=len(rows),
        note=f"ignored {', '.join(others)} attention rows" if others else "",
    )
