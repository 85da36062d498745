"""NNLS memory decomposition: recovery from noisy synthetic dry runs,
non-negativity, and the under-determined error."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.errors import InputError
from autotune.pipeline.decompose import Measurement, decompose

MIB = 2**20


def synthetic(truth, rows, pp, noise=0.0, seed=0):
    """Stage memories from the module's model with known per-layer values (MiB)."""
    rng = np.random.default_rng(seed)
    out = []
    for s, n, full, sel, comm in rows:
        alive = pp - s
        m = truth["constant"] + n * truth["parameter"]
        m += alive * (
            truth["u0"] * (n - full)
            + truth["u_sel"] * (n - sel)
            + truth["u_comm"] * (n - comm)
            + truth["full"] * full
        )
        m += truth["head"] * (s == 0) + truth["tail"] * (s == pp - 1)
        m *= 1 + rng.uniform(-noise, noise)
        out.append(Measurement(s, pp, n, full, sel, comm, m * MIB, f"stage {s}"))
    return out


TRUTH = {
    "constant": 6000,
    "parameter": 900,
    "u0": 150,
    "u_sel": 120,
    "u_comm": 80,
    "full": 20,
    "head": 3000,
    "tail": 5000,
}
ROWS = [
    (0, 5, 1, 2, 1),
    (15, 7, 0, 1, 1),
    (1, 7, 0, 0, 0),
    (3, 6, 2, 3, 2),
    (5, 5, 0, 1, 2),
    (7, 7, 1, 1, 3),
    (9, 6, 0, 2, 0),
    (11, 5, 3, 3, 4),
    (12, 7, 0, 0, 1),
    (13, 6, 1, 2, 1),
]


def test_recovers_known_memories_with_noise():
    dec = decompose(synthetic(TRUTH, ROWS, 16, noise=0.002, seed=1))
    # 0.2% noise on ~30-60 GB measurements: per-layer values within 5%.
    assert dec.parameter_bytes / MIB == pytest.approx(900, rel=0.05)
    assert dec.activation_bytes["none"] / MIB == pytest.approx(350, rel=0.05)
    assert dec.activation_bytes["selective"] / MIB == pytest.approx(230, rel=0.05)
    assert dec.activation_bytes["full"] / MIB == pytest.approx(20, abs=5)
    assert dec.constant_bytes / MIB == pytest.approx(6000, rel=0.1)
    assert dec.max_relative_residual < 0.01
    assert not any("poor fit" in w for w in dec.warnings)


def test_exact_data_exact_answer():
    dec = decompose(synthetic(TRUTH, ROWS, 16))
    for key, value in {
        "parameter": 900,
        "u0": 150,
        "u_selective": 120,
        "u_comm": 80,
        "full": 20,
        "head": 3000,
        "tail": 5000,
        "constant": 6000,
    }.items():
        assert dec.unknowns[key] / MIB == pytest.approx(value, rel=1e-6)
    assert dec.rms_residual_bytes < 1.0


@settings(max_examples=30, deadline=None)
@given(
    noise=st.floats(0.0, 0.2),
    seed=st.integers(0, 1000),
    zero=st.sampled_from(["u_sel", "u_comm", "full", "head"]),
)
def test_never_negative(noise, seed, zero):
    truth = dict(TRUTH, **{zero: 0.0})
    dec = decompose(synthetic(truth, ROWS, 16, noise=noise, seed=seed))
    assert all(v >= 0 for v in dec.unknowns.values())
    assert all(v >= 0 for v in dec.activation_bytes.values())


def test_constant_tied_to_parameters_is_folded_with_a_warning():
    # Every body stage has the same layer count: parameter and constant are
    # tied, so (as the seed tool does) the constant is dropped and the warning
    # says so and names a stage that would separate them.
    rows = [(0, 6, 0, 0, 0), (15, 6, 0, 0, 0), (2, 6, 0, 0, 0), (5, 6, 0, 0, 0)]
    dec = decompose(synthetic(TRUTH, rows, 16), file="dry.yaml")
    assert dec.constant_bytes == 0.0
    (folded,) = [w for w in dec.warnings if "constant-free" in w]
    assert re.search(r"to separate it, measure stage \d+ of a 16-stage dry run", folded)
    # The folded fit still reproduces the measured stages exactly.
    assert max(abs(r) for r in dec.residuals_bytes) < 1.0


def test_under_determined_names_the_fix():
    # Selective recomputation on half of every stage's layers: its saving is
    # tied to the plain activation whatever the constant is.
    rows = [(0, 6, 0, 3, 0), (15, 6, 0, 3, 0), (2, 6, 0, 3, 0), (5, 6, 0, 3, 0), (7, 6, 0, 3, 0)]
    with pytest.raises(
        InputError,
        match=r"determine only \d of the \d unknown memories .*"
        r"cannot be told apart; fix: measure stage \d+ of a 16-stage dry run "
        r"with \d+ layers",
    ):
        decompose(synthetic(TRUTH, rows, 16), file="dry.yaml")


def test_poor_fit_warns():
    ms = synthetic(TRUTH, ROWS, 16)
    ms[3] = Measurement(3, 16, 6, 2, 3, 2, ms[3].memory_bytes * 1.5, "stage 3")
    dec = decompose(ms)
    assert any("poor fit" in w for w in dec.warnings)
