"""Chip presets: load by name or path, list them, and recognise a chip from
the device line of a log (nvidia-smi, nccl-tests, rccl-tests, JAX)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from autotune.loading import load_chip_spec, preset_names
from autotune.specs.chip import ChipSpec


def chip_names() -> list[str]:
    """Names of the bundled chip presets, sorted."""
    return preset_names("chips")


@cache
def _load_preset(name: str) -> ChipSpec:
    return load_chip_spec(name)


def load_chip(name_or_path: str | Path, field: str = "chip") -> ChipSpec:
    """A chip preset by name (see `chip_names()`) or a chip YAML file;
    InputError naming the presets (and `field`, the key or option that
    named it) when it is neither."""
    ref = str(name_or_path)
    return _load_preset(ref) if ref in chip_names() else load_chip_spec(ref, field=field)


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


def match_chip_family(device_text: str) -> list[str]:
    """The chip presets whose family pattern matches `device_text`, a device
    name that names the family only ("NVIDIA H100"), sorted: one preset is a
    match, several (the A100's 40GB and 80GB) leave the choice to the user."""
    return sorted(
        name
        for name in chip_names()
        if any(
            re.search(pattern, device_text, flags=re.IGNORECASE)
            for pattern in _load_preset(name).family_patterns
        )
    )
