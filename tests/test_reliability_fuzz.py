"""The fuzz suite: every example file and the benchmark CSV, mutated, run
through the CLI in-process. Whatever the input: exit 0, 1 or 2; on failure
one line on stderr and no output file; no NaN, infinity or
null where a number is promised in any JSON written.

Bounded in CI by the "fuzz-ci" profile (tests/conftest.py); for a longer
local run: MESHTUNE_FUZZ_PROFILE=fuzz-long python -m pytest
tests/test_reliability_fuzz.py (docs/reliability.md).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from clirun import run_cli
from fuzzing import check_run, mutated_csv, mutated_json, mutated_yaml
from hypothesis import given, settings

from autotune.plan.schema import PlanDocument
from autotune.specs.calibration import CalibrationSpec

REPO = Path(__file__).resolve().parent.parent
PROFILE = settings.get_profile(os.environ.get("MESHTUNE_FUZZ_PROFILE", "fuzz-ci"))
PLAN_EXAMPLES = ["gpt3.yaml", "llama3-70b.yaml", "megatron-nlg.yaml"]
PIPELINE_EXAMPLES = [
    "pipeline-llama-pp8.yaml",
    "pipeline-deepseek-v3-pp16.yaml",
    "pipeline-seed-format.yaml",
]
BENCH_CSV = REPO / "calibration_data" / "example_bench.csv"
# keeps every fuzzed solve short; the solver honours it (docs/pipeline.md)
FUZZ_TIME_LIMIT_S = 1


def _pipeline_text(name: str) -> str:
    """The example with a short solver time limit."""
    doc = yaml.safe_load((REPO / "examples" / name).read_text())
    block = doc["meshtune"] if "meshtune" in doc else doc
    block["solver"] = {**(block.get("solver") or {}), "time_limit_s": FUZZ_TIME_LIMIT_S}
    return yaml.safe_dump(doc, sort_keys=False)


def _with_time_limit(text: str) -> str:
    """Put the short time limit back after a mutation, where it still fits."""
    try:
        doc = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return text
    if not isinstance(doc, dict):
        return text
    block = doc.get("meshtune", doc)
    if isinstance(block, dict) and isinstance(block.get("solver", {}), dict):
        block["solver"] = {**block.get("solver", {}), "time_limit_s": FUZZ_TIME_LIMIT_S}
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    return text


@functools.cache
def _baseline(command: str, name: str) -> dict:
    """The unmutated example's JSON document: where numbers are promised."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        if command == "pipeline":
            path.write_text(_pipeline_text(name))
        else:
            path.write_text((REPO / "examples" / name).read_text())
        run = run_cli(command, str(path), "--format", "json")
        assert run.exit_code == 0, run.stderr
        return json.loads(run.stdout)


def _run_fuzzed(command: str, name: str, text: str, *extra: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text)
        out = Path(folder) / "out.json"
        run = run_cli(command, str(path), "--format", "json", "--out", str(out), *extra)
        promised = PlanDocument if command == "plan" else _baseline(command, name)
        # pipeline: exit 4 = the time limit ran out with no plan and no proof (docs/pipeline.md)
        codes = (0, 1, 2, 4) if command == "pipeline" else (0, 1, 2)
        check_run(run, out, promised, json_stdout=True, codes=codes)
        leftovers = [p.name for p in Path(folder).iterdir() if p.name.endswith(".tmp")]
        assert leftovers == []


@pytest.mark.parametrize("name", PLAN_EXAMPLES)
def test_fuzz_plan_examples(name):
    text = (REPO / "examples" / name).read_text()

    @PROFILE
    @given(mutated_yaml(text))
    def check(mutated: str) -> None:
        _run_fuzzed("plan", name, mutated)

    check()


@pytest.mark.parametrize("name", PIPELINE_EXAMPLES)
def test_fuzz_pipeline_examples(name):
    text = _pipeline_text(name)

    @settings(PROFILE, max_examples=max(2, PROFILE.max_examples // 3))
    @given(mutated_yaml(text))
    def check(mutated: str) -> None:
        _run_fuzzed("pipeline", name, _with_time_limit(mutated))

    check()


@PROFILE
@given(mutated_csv(BENCH_CSV.read_text()))
def test_fuzz_benchmark_csv(mutated):
    """calibrate the mutated CSV; a calibration it writes must plan."""
    with tempfile.TemporaryDirectory() as folder:
        csv_path = Path(folder) / "bench.csv"
        csv_path.write_text(mutated)
        out = Path(folder) / "cal.json"
        run = run_cli("calibrate", str(csv_path), "--out", str(out), "--format", "json")
        check_run(run, out, CalibrationSpec, json_stdout=True)
        if run.exit_code == 0:
            plan = run_cli("plan", str(REPO / "examples" / "gpt3.yaml"), "--calibration", str(out))
            assert plan.exit_code in (0, 1, 2), (plan.stderr, plan.exception)
            if plan.exit_code:
                assert len(plan.stderr.splitlines()) == 1, plan.stderr


@functools.cache
def _plan_json() -> str:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "plan.json"
        run = run_cli("plan", str(REPO / "examples" / "gpt3.yaml"), "--out", str(out))
        assert run.exit_code == 0, run.stderr
        return out.read_text()


def test_fuzz_verify_plan_json():
    """verify a mutated plan document (the input `verify` reads)."""

    @settings(PROFILE, max_examples=max(2, PROFILE.max_examples // 2))
    @given(mutated_json(_plan_json()))
    def check(mutated: str) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "plan.json"
            path.write_text(mutated)
            run = run_cli("verify", str(path), "--format", "json")
            assert run.exit_code in (0, 1, 2), (run.exit_code, run.stderr, run.exception)
            if run.exit_code:
                assert len(run.stderr.splitlines()) == 1, run.stderr
            else:
                json.loads(run.stdout, parse_constant=lambda c: pytest.fail(c))

    check()
