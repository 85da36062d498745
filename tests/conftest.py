"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def repo_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test from the repository root (relative example paths)."""
    monkeypatch.chdir(REPO)
    return REPO
