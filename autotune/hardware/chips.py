"""Chip presets: load by name or path, list them, and recognise a chip from
the device line of a log (nvidia-smi, nccl-tests, rccl-tests, JAX)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path

from autotune.errors import InputError
from autotune.specs.chip import ChipSpec


def _chip_dir() -> Path:
    return Path(str(resources.files("autotune").joinpath("presets", "chips")))


def chip_names() -> list[str]:
    """Names of the bundled chip presets, sorted."""
    return sorted(p.stem for p in _chip_dir().glob("*.yaml"))


@cache
def _load_preset(name: str) -> ChipSpec:
    from autotune.loading import load_mapping, validate_spec

    path = _chip_dir() / f"{name}.yaml"
    return validate_spec(ChipSpec, load_mapping(path), file=str(path))


def load_chip(name_or_path: str | Path) -> ChipSpec:
    """A chip preset by name (see `chip_names()`) or a chip YAML file;
    InputError naming the presets when it is neither."""
    ref = str(name_or_path)
    if ref in chip_names():
        return _load_preset(ref)
    path = Path(ref)
    if not path.is_file():
        raise InputError(
            "is neither a chip preset nor a file",
            field="chip",
            value=ref,
            fix=f"use one of {', '.join(chip_names())} or a path to a chip YAML",
        )
    from autotune.loading import load_mapping, validate_spec

    return validate_spec(ChipSpec, load_mapping(path), file=str(path))


def match_chip(device_text: str) -> str | None:
    """The chip preset whose device pattern matches `device_text` (e.g. the
    "NVIDIA H100 80GB HBM3" of an nccl-tests rank line), or None.

    When patterns of several presets match, the longest matched text wins
    ("TPU v5 lite" is v5e even though "TPU v5" also matches); a tie between
    presets is ambiguous and gives None.
    """
    best: list[tuple[int, str]] = []
    for name in chip_names():
        for pattern in _load_preset(name).device_patterns:
            for m in re.finditer(pattern, device_text, flags=re.IGNORECASE):
                best.append((len(m.group(0)), name))
    if not best:
        return None
    longest = max(length for length, _ in best)
    names = {name for length, name in best if length == longest}
    return names.pop() if len(names) == 1 else None
