"""Bundled calibration files and example measurements (package data)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: preset name -> file in this package
CALIBRATION_PRESETS: dict[str, str] = {
    "tpu-v4": "tpu_v4.json",
    "a100-nominal": "a100_nominal.json",
    "a100-measured": "a100_measured.json",
    "h100-nominal": "h100_nominal.json",
    "h100-measured": "h100_measured.json",
    "h100-measured-fa2": "h100_measured_fa2.json",
    "b200-nominal": "b200_nominal.json",
    "mi300x-nominal": "mi300x_nominal.json",
    "tpu-v5p-nominal": "tpu_v5p_nominal.json",
    "tpu-v5e-nominal": "tpu_v5e_nominal.json",
    "tpu-v6e-nominal": "tpu_v6e_nominal.json",
}


def data_path(filename: str) -> Path:
    """Filesystem path of a bundled data file."""
    return Path(str(resources.files(__name__).joinpath(filename)))
