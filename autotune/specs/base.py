"""The common pydantic base of every spec: strict, frozen, no unknown keys,
finite numbers only.

Plausible-range convention: every numeric field of a spec carries both
bounds (``gt``/``ge`` and ``le``/``lt``) and states them in its description
as ``Range: LOW to HIGH.`` The upper bounds are far above any real machine or
model (they exist to turn a typo such as ``hidden_size: 1228800000000`` into a
one-line error instead of hours of work or a meaningless plan); the constants
below are the shared ones. NaN and infinity are rejected for every float
(``allow_inf_nan=False``), so a bound can never be slipped past. Numbers
that only describe a fit's quality (errors, standard errors, counts) are
checked finite and non-negative but carry no upper bound: they feed no
result. tests/test_reliability_numbers.py holds every input spec to this.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Shared plausible upper bounds (inclusive), stated in field descriptions.
MAX_DIM = 2**24  # one model dimension (width, heads, vocabulary): 16,777,216
MAX_LAYERS = 100_000  # transformer blocks or pipeline layers
MAX_CHIPS = 2**24  # chips in a cluster, mesh side, parallel degree: 16,777,216
MAX_COUNT = 2**24  # sequences per step, tokens per sequence, micro-batches
MAX_SECONDS = 3600.0  # one measured or modelled operation, seconds
MAX_BYTES_PER_S = 1e15  # one link's (or one chip's HBM) bandwidth: 1 PB/s
MAX_BYTES = 2.0**50  # one message or buffer: 1 PiB
MAX_GB_PER_S = 1e6  # the same bandwidth bound in GB/s (1e9 B/s)
MAX_LINKS = 4096  # links, NICs or rails of one chip or node
MAX_FLOPS_PER_S = 1e18  # one chip's rate: 1 EFLOP/s
MAX_TFLOPS_PER_S = 1e6  # the same in TFLOP/s
MAX_GIB = 2.0**20  # memory of one chip: 1 PiB
MAX_FACTOR = 1000.0  # a slowdown or multiplier
# Shared plausible lower bounds (inclusive) of rates and capacities that the
# models divide by: far below any real chip, they keep a typo such as
# `5e-324` from turning a time into infinity.
MIN_GB_PER_S = 1e-3  # one link or NIC: 1 MB/s
MIN_BYTES_PER_S = 1e6  # the same in bytes/s
MIN_TFLOPS_PER_S = 1e-3  # one chip: 1 GFLOP/s
MIN_FLOPS_PER_S = 1e9  # the same in FLOP/s
MIN_GIB = 2.0**-10  # memory of one chip: 1 MiB

# One chip's peak for one dtype, TFLOP/s (the values of `peak_tflops_per_s`).
PeakTflopsPerS = Annotated[float, Field(ge=MIN_TFLOPS_PER_S, le=MAX_TFLOPS_PER_S)]

FINITE_CONFIG = ConfigDict(
    extra="forbid", frozen=True, strict=True, allow_inf_nan=False, defer_build=True
)


class Spec(BaseModel):
    """Strict (no silent coercion), frozen, rejects unknown keys, NaN and infinity."""

    model_config = FINITE_CONFIG
