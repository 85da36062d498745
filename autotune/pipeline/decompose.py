"""Per-layer memories from measured (dry-run) stage peaks, by non-negative
least squares (pipeline.md section 4).

Model of a measured 1F1B stage s of a pp-stage dry run with n body layers, R
fully recomputed, S selective-recomputed and C communication-recomputed
(S and C include the R full ones), alive = pp - s micro-batches:

    M = const + n par + alive (u0 (n - R) + u_sel (n - S) + u_comm (n - C) + w R)
        + head [s = 0] + tail [s = pp - 1]

so a layer keeps a_none = u0 + u_sel + u_comm with no recomputation,
a_selective = u0 + u_comm, a_comm = u0 + u_sel, a_selective_comm = u0 and
a_full = w. Selective and communication savings add up (the seed's additive
model); parametrising by the savings makes every unknown, and every derived
activation, non-negative by construction. Unknowns whose column is zero in
every measurement (an option never used) are left out, with their options.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.errors import InputError


@dataclass(frozen=True)
class Measurement:
    """One measured stage of a dry run."""

    stage: int
    num_stages: int
    num_layers: int
    num_full: int
    num_selective: int
    num_comm: int
    memory_bytes: float
    label: str


@dataclass(frozen=True)
class Decomposition:
    """Solved memories (bytes), the fit's residuals and the options it supports."""

    unknowns: dict[str, float]
    activation_bytes: dict[str, float]
    parameter_bytes: float
    constant_bytes: float
    head_bytes: float
    tail_bytes: float
    residuals_bytes: tuple[float, ...]
    labels: tuple[str, ...]
    rms_residual_bytes: float
    max_relative_residual: float
    num_measurements: int
    warnings: tuple[str, ...]


def _row(m: Measurement, names: list[str]) -> list[float]:
    alive = m.num_stages - m.stage
    value = {
        "constant": 1.0,
        "parameter": float(m.num_layers),
        "u0": alive * float(m.num_layers - m.num_full),
        "u_selective": alive * float(m.num_layers - m.num_selective),
        "u_comm": alive * float(m.num_layers - m.num_comm),
        "full": alive * float(m.num_full),
        "head": 1.0 if m.stage == 0 else 0.0,
        "tail": 1.0 if m.stage == m.num_stages - 1 else 0.0,
    }
    return [value[n] for n in names]


def _unknowns(ms: list[Measurement]) -> list[str]:
    names = ["constant", "parameter", "u0"]
    if any(m.num_selective > m.num_full for m in ms):
        names.append("u_selective")
    if any(m.num_comm > m.num_full for m in ms):
        names.append("u_comm")
    if any(m.num_full > 0 for m in ms):
        names.append("full")
    if any(m.stage == 0 for m in ms):
        names.append("head")
    if any(m.stage == m.num_stages - 1 for m in ms):
        names.append("tail")
    return names


def _suggest(ms: list[Measurement], names: list[str], a: np.ndarray, file: str | None) -> str:
    """The first simple extra measurement that raises the rank."""
    rank = np.linalg.matrix_rank(a)
    pp = ms[0].num_stages
    base = max(1, round(sum(m.num_layers for m in ms) / len(ms)))
    for s in range(1, max(pp - 1, 1)):
        for n in (base + 1, base - 1, base):
            for full in (0, 1, 2):
                for sel in (0, 1) if "u_selective" in names else (0,):
                    for comm in (0, 1) if "u_comm" in names else (0,):
                        if n < full + max(sel, comm) or n <= 0:
                            continue
                        cand = Measurement(s, pp, n, full, full + sel, full + comm, 0.0, "")
                        row = np.array([_row(cand, names)])
                        if np.linalg.matrix_rank(np.vstack([a, row])) > rank:
                            return (
                                f"measure stage {s} of a {pp}-stage dry run with {n} layers, "
                                f"recompute {full}, select_recompute {full + sel}, "
                                f"select_comm_recompute {full + comm}"
                            )
    return "add dry-run stages whose layer and recomputation counts differ"


def decompose(ms: list[Measurement], *, file: str | None = None) -> Decomposition:
    """Solve for the per-layer memories; raise InputError when the
    measurements cannot determine them (naming a measurement that would)."""
    if not ms:
        raise InputError(
            "has no measured stage",
            file=file,
            field="memory_usage",
            fix="give the dry run's head_memory, tail_memory and body_memories",
        )
    names = _unknowns(ms)
    a = np.array([_row(m, names) for m in ms], dtype=float)
    b = np.array([m.memory_bytes for m in ms], dtype=float)
    rank = np.linalg.matrix_rank(a)
    folded = []
    if rank < len(names) and "constant" in names:
        # The seed tool's fallback: without enough stages to tell the constant
        # apart, solve without it; the constant is then spread over the
        # per-layer, head and tail memories that the measurements mix it with.
        without = [n for n in names if n != "constant"]
        reduced = np.array([_row(m, without) for m in ms], dtype=float)
        if np.linalg.matrix_rank(reduced) == len(without):
            folded.append(
                f"{len(ms)} measured stages cannot separate the constant per-stage memory from "
                f"the other unknowns; solved with constant 0 (the seed tool's constant-free "
                f"decomposition), so it is folded into the per-layer, head and tail memories "
                f"and plans with other layer counts are less exact; to separate it, "
                f"{_suggest(ms, names, a, file)}"
            )
            names, a, rank = without, reduced, len(without)
    if rank < len(names):
        _, _, vt = np.linalg.svd(a)
        null = vt[-1]
        tied = [names[i] for i in np.flatnonzero(np.abs(null) > 1e-6 * np.abs(null).max())]
        raise InputError(
            f"{len(ms)} measured stages determine only {rank} of the {len(names)} unknown "
            f"memories ({', '.join(names)}); {' and '.join(tied)} cannot be told apart",
            file=file,
            field="memory_usage.body_memories",
            fix=_suggest(ms, names, a, file),
        )
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    from scipy.optimize import nnls  # here: scipy.optimize takes a second to import

    x_scaled, _ = nnls(a / scale, b / 2**20, maxiter=50 * len(names))
    x = x_scaled / scale * 2**20
    residuals = a @ x - b
    rel = np.abs(residuals) / np.maximum(np.abs(b), 1.0)
    warnings = list(folded)
    if len(ms) == len(names):
        warnings.append(
            "as many measurements as unknowns: the fit is exact and the residuals "
            "cannot reveal measurement noise; add stages to check it"
        )
    if rel.max() > 0.05:
        worst = int(rel.argmax())
        warnings.append(
            f"poor fit: {ms[worst].label} is off by {rel.max() * 100:.1f}%; "
            "check that its counts match the dry run"
        )
    values = dict(zip(names, (float(v) for v in x), strict=True))
    u0 = values.get("u0", 0.0)
    u_sel = values.get("u_selective", 0.0)
    u_comm = values.get("u_comm", 0.0)
    act = {"none": u0 + u_sel + u_comm}
    if "u_selective" in names:
        act["selective"] = u0 + u_comm
    if "u_comm" in names:
        act["comm"] = u0 + u_sel
    if "u_selective" in names and "u_comm" in names:
        act["selective_comm"] = u0
    if "full" in names:
        act["full"] = values["full"]
    return Decomposition(
        unknowns=values,
        activation_bytes=act,
        parameter_bytes=values["parameter"],
        constant_bytes=values.get("constant", 0.0),
        head_bytes=values.get("head", 0.0),
        tail_bytes=values.get("tail", 0.0),
        residuals_bytes=tuple(float(r) for r in residuals),
        labels=tuple(m.label for m in ms),
        rms_residual_bytes=float(np.sqrt(np.mean(residuals**2))),
        max_relative_residual=float(rel.max()),
        num_measurements=len(ms),
        warnings=tuple(warnings),
    )
