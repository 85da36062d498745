"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def repo_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test from the repository root (relative example paths)."""
    monkeypatch.chdir(REPO)
    return REPO


# Fuzz-suite profiles (tests/test_reliability_fuzz.py), chosen with
# MESHTUNE_FUZZ_PROFILE: "fuzz-ci" (default) is bounded and derandomised so CI
# stays well under a minute; "fuzz-long" explores for a local run:
#   MESHTUNE_FUZZ_PROFILE=fuzz-long python -m pytest tests/test_reliability_fuzz.py
FUZZ_PROFILES = {
    "fuzz-ci": settings(
        max_examples=10,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    ),
    "fuzz-long": settings(
        max_examples=400,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    ),
}
for _name, _profile in FUZZ_PROFILES.items():
    settings.register_profile(_name, _profile)
