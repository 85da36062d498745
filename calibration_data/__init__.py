"""Bundled calibration files and example measurements (package data)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

#: preset name -> file in this package
CALIBRATION_PRESETS: dict[str, str] = {
    "tpu-v4": "tpu_v4.json",
    "dgx-a100-nominal": "dgx_a100_nominal.json",
}


def data_path(filename: str) -> Path:
    """Filesystem path of a bundled data file."""
    return Path(str(resources.files(__name__).joinpath(filename)))
