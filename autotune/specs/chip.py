"""One accelerator chip: peak dense compute by dtype, HBM capacity and
bandwidth, and the device names it goes by in logs (human units in the YAML
keys, base units from the accessors)."""

from __future__ import annotations

import re
from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import (
    MAX_BYTES_PER_S,
    MAX_GIB,
    MIN_BYTES_PER_S,
    MIN_GIB,
    PeakTflopsPerS,
    Spec,
)

GIB = 2**30


class FigureKind(str, Enum):
    """Whether a spec's numbers are read off a data sheet or fitted to measurements."""

    NOMINAL = "nominal"
    FITTED = "fitted"


class ChipSpec(Spec):
    """A chip preset or file (`autotune/presets/chips/*.yaml`)."""

    name: str = Field(description="Preset name, e.g. h100-sxm.")
    vendor: str = Field(description="Maker, e.g. NVIDIA, AMD, Google.")
    peak_tflops_per_s: dict[str, PeakTflopsPerS] = Field(
        description="Peak dense (no sparsity) TFLOP/s of one chip by dtype, e.g. {bf16: 989}. "
        "Range: each 0.001 to 1e6."
    )
    hbm_gib: float = Field(
        ge=MIN_GIB,
        le=MAX_GIB,
        description="HBM capacity of one chip, GiB (2^30 bytes). Range: 2^-10 to 2^20.",
    )
    hbm_tb_per_s: float = Field(
        ge=MIN_BYTES_PER_S / 1e12,
        le=MAX_BYTES_PER_S / 1e12,
        description="HBM bandwidth of one chip, TB/s (1e12 B/s). Range: 1e-6 to 1000.",
    )
    device_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions (case-insensitive) matching the device names of this "
        "chip in nvidia-smi, nccl-tests, rccl-tests or JAX device_kind lines.",
    )
    family_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions (case-insensitive) matching device names that name "
        "only this chip's family (e.g. 'NVIDIA H100'); tried when no preset's device_patterns "
        "match, and ambiguous when presets of one family (A100 40GB and 80GB) both match.",
    )
    num_cores: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Cores a GEMM's output tiles spread over: streaming multiprocessors "
        "(NVIDIA) or compute units (AMD); the shape-aware GEMM model's waves. Omitted: "
        "GEMMs are fitted without tiles. Range: 1 to 1e6.",
    )
    figures: FigureKind = Field(
        default=FigureKind.NOMINAL,
        strict=False,
        description="nominal: data-sheet figures; fitted: measured on this chip.",
    )
    source: str = Field(description="Where every figure comes from (data sheet, table, URL).")

    @model_validator(mode="after")
    def _check(self) -> ChipSpec:
        if not self.peak_tflops_per_s:
            raise ValueError(
                "peak_tflops_per_s is empty; fix: give at least one dtype, e.g. {bf16: 989}"
            )
        for pattern in [*self.device_patterns, *self.family_patterns]:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"device_patterns entry {pattern!r} is not a regular expression ({exc}); "
                    "fix: escape special characters"
                ) from None
        return self

    def has_dtype(self, dtype: str) -> bool:
        """Whether the chip lists a peak for `dtype`."""
        return dtype in self.peak_tflops_per_s

    def peak_flops_per_s(self, dtype: str) -> float:
        """Peak dense FLOP/s of one chip for `dtype`; KeyError naming the
        known dtypes when the chip lists none for it."""
        value = self.peak_tflops_per_s.get(dtype)
        if value is None:
            known = ", ".join(sorted(self.peak_tflops_per_s))
            raise KeyError(f"chip {self.name} has no peak for dtype {dtype!r} (known: {known})")
        return value * 1e12

    @property
    def hbm_bytes(self) -> int:
        """HBM capacity of one chip, bytes."""
        return int(self.hbm_gib * GIB)

    @property
    def hbm_bytes_per_s(self) -> float:
        """HBM bandwidth of one chip, bytes/s."""
        return self.hbm_tb_per_s * 1e12
