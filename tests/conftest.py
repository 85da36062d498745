"""Shared test helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent


# Export targets whose trainer runs 1D tensor parallelism only: a 2D plan exits 2.
ONE_D_ONLY = {"megatron", "torchtitan", "mindformers"}


def maxtext_cannot_shard(target: str, exit_code: int, output: str, out: Path) -> bool:
    """Whether a MaxText export refused, in one line naming the fix and
    writing nothing, weights MaxText's axis rules cannot shard evenly
    (formats/maxtext.py `_embed_divides`; DeepSeek-V3 with ZeRO-3 over
    1,024 GPUs)."""
    if target != "maxtext" or exit_code != 2:
        return False
    (line,) = output.strip().splitlines()
    assert "holds weights MaxText cannot shard" in line and "fix: " in line, line
    assert not out.exists()
    return True


EXAMPLES = sorted(
    p for p in (REPO / "examples").glob("*.yaml") if not p.name.startswith("pipeline-")
)


@pytest.fixture(scope="session")
def example_plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One `meshtune plan --out` JSON per bundled example (not the pipeline
    tool's), planned once per test session."""
    from click.testing import CliRunner

    from autotune.cli import main

    folder = tmp_path_factory.mktemp("example-plans")
    out = {}
    for example in EXAMPLES:
        plan = folder / f"{example.stem}.json"
        result = CliRunner().invoke(main, ["plan", str(example), "--out", str(plan)])
        assert result.exit_code == 0, (example.name, result.output)
        out[example.stem] = plan
    return out


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


# The fast loop: `python -m pytest -m "not slow"`. A test is slow when its
# last measured duration (tests/durations.json, written by
# benchmarks/time_tests.py, which also times the fast loop alone so that
# a shared fixture's setup is charged to the tests that need it) reaches the
# file's `slow_at_s`, or its module has a long shared setup (`slow_modules`);
# tests not yet measured count as fast. CI runs everything.
_DURATIONS = json.loads((REPO / "tests" / "durations.json").read_text())


# Kept in the fast loop whatever they cost, so that it runs every command:
# the one `export` test in a process of its own.
FAST_ALWAYS = {"tests/test_formats_export.py::test_print_without_out"}


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every case of a test function with a slow case is slow: the cases
    # share fixtures whose setup the first case's time carries
    slow_at_s = float(_DURATIONS["slow_at_s"])
    slow = {_function(k) for k, s in _DURATIONS["seconds"].items() if s >= slow_at_s}
    modules = set(_DURATIONS["slow_modules"])
    for item in items:
        if item.nodeid in FAST_ALWAYS:
            continue
        if _function(item.nodeid) in slow or item.nodeid.split("::", 1)[0] in modules:
            item.add_marker(pytest.mark.slow)
