"""Non-finite and absurd numbers pass validation: regression tests.

NaN slipped past `value < 0` checks and infinity past `gt`/`ge` bounds, so
plans exited 0 with "FLOP utilization: nan%" or a null step time; absurd
sizes (2^62, 10^30) were accepted. Every spec now rejects non-finite floats
and carries a plausible range on every number.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from clirun import assert_one_line_error, run_cli
from pydantic import BaseModel

from autotune.plan.schema import PlanDocument
from autotune.specs.calibration import (
    CalibrationSpec,
    ComputeSpec,
    EfficiencyCurve,
    LinkSpec,
    RegimeSpec,
    TileModelSpec,
)
from autotune.specs.chip import ChipSpec
from autotune.specs.cluster import ClusterSpec, NodeSpec, ScaleOutSpec, TorusSpec
from autotune.specs.model import ModelSpec
from autotune.specs.plan_input import SearchSpec
from autotune.specs.training import TrainingSpec

REPO = Path(__file__).resolve().parent.parent
GPT3 = (REPO / "examples" / "gpt3.yaml").read_text()
CALIBRATION = (REPO / "calibration_data" / "tpu_v4.json").read_text()


def _plan_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return str(path)


def _inline_cluster(extra: str) -> str:
    return GPT3.replace(
        "cluster: tpu-v4-256",
        "cluster: {name: c, num_chips: 256, peak_tflops_per_s: {bf16: 275}, calibration: tpu-v4"
        + extra
        + "}",
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (_inline_cluster(", overlap_slowdown: .nan"), "cluster.overlap_slowdown"),
        (_inline_cluster(", hbm_gib: .inf"), "cluster.hbm_gib"),
        (
            GPT3.replace(
                "cluster: tpu-v4-256",
                "cluster: {name: c, num_chips: 256, peak_tflops_per_s: {bf16: .nan}}",
            ),
            "cluster.peak_tflops_per_s.bf16",
        ),
        (
            GPT3.replace(
                "cluster: tpu-v4-256",
                "cluster: {name: c, num_chips: 256, peak_tflops_per_s: {bf16: -.inf}}",
            ),
            "cluster.peak_tflops_per_s.bf16",
        ),
    ],
)
def test_non_finite_numbers_pass_validation_nan_and_inf_are_bad_input(tmp_path, text, field):
    out = tmp_path / "plan.json"
    run = run_cli("plan", _plan_file(tmp_path, text), "--out", str(out))
    assert_one_line_error(run, "plan.yaml", field, "finite")
    assert not out.exists()


@pytest.mark.parametrize("size", ["4611686018427387904", "1000000000000000000000000000000"])
def test_absurd_numbers_pass_validation_huge_dimension_is_bad_input(tmp_path, size):
    run = run_cli(
        "plan", _plan_file(tmp_path, GPT3.replace("hidden_size: 12288", f"hidden_size: {size}"))
    )
    assert_one_line_error(run, "model.hidden_size", size, "plausible range: 1 to 2^24", "fix:")


@pytest.mark.parametrize(
    ("pattern", "replacement", "fragment"),
    [
        (r'"link_bytes_per_s": [0-9.e+]+', '"link_bytes_per_s": Infinity', "Infinity"),
        (r'"link_bytes_per_s": [0-9.e+]+', '"link_bytes_per_s": NaN', "NaN"),
        (r'"link_bytes_per_s": [0-9.e+]+', '"link_bytes_per_s": 1e999', "finite"),
        (r'"link_bytes_per_s": [0-9.e+]+', '"link_bytes_per_s": 1e308', "plausible range"),
        (r'"launch_s": [0-9.e+-]+', '"launch_s": -1e-6', "launch_s"),
        (r'"effective_flops_per_s": [0-9.e+]+', '"effective_flops_per_s": 1e300', "plausible"),
    ],
)
def test_absurd_numbers_pass_validation_calibration_json_is_checked(
    tmp_path, pattern, replacement, fragment
):
    path = tmp_path / "cal.json"
    path.write_text(re.sub(pattern, replacement, CALIBRATION, count=1))
    run = run_cli("plan", str(REPO / "examples" / "gpt3.yaml"), "--calibration", str(path))
    assert_one_line_error(run, "cal.json", fragment, "fix:")


def _numeric_fields(model: type[BaseModel]):
    for name, info in model.model_fields.items():
        annotation = str(info.annotation)
        if ("int" in annotation or "float" in annotation) and "str" not in annotation:
            yield name, info


@pytest.mark.parametrize(
    "model",
    [
        ModelSpec,
        TrainingSpec,
        ClusterSpec,
        NodeSpec,
        ScaleOutSpec,
        TorusSpec,
        ChipSpec,
        SearchSpec,
        CalibrationSpec,
        LinkSpec,
        RegimeSpec,
        EfficiencyCurve,
        TileModelSpec,
        ComputeSpec,
    ],
)
def test_absurd_numbers_pass_validation_every_number_has_a_stated_range(model):
    for name, info in _numeric_fields(model):
        if name in (
            "peak_tflops_per_s",
            "mesh_shapes",
            "dims",
            "max_dims",
            "measured_dims",
            "tiles",
            "zero_stage",
        ):
            # dict/list of numbers: checked in the model validator, range in the description
            assert "Range:" in (info.description or ""), name
            continue
        bounds = [m for m in info.metadata if type(m).__name__ in ("Le", "Lt")]
        assert bounds, f"{model.__name__}.{name} has no upper bound"
        assert "Range:" in (info.description or ""), f"{model.__name__}.{name}"


def test_absurd_numbers_pass_validation_plan_json_has_no_nan(tmp_path):
    """Extreme but allowed peaks and slowdowns give finite results or a
    one-line error, never NaN or null in the plan document."""
    for extra in (
        "peak_tflops_per_s: {bf16: 1000000}",
        "peak_tflops_per_s: {bf16: 1.0e-9}",
        "peak_tflops_per_s: {bf16: 1000000}, overlap_slowdown: 1000",
    ):
        text = GPT3.replace("cluster: tpu-v4-256", f"cluster: {{name: c, num_chips: 256, {extra}}}")
        run = run_cli("plan", _plan_file(tmp_path, text), "--format", "json")
        assert run.exit_code in (0, 1, 2), run.stderr
        if run.exit_code:
            assert len(run.stderr.splitlines()) == 1, run.stderr
            continue
        doc = json.loads(run.stdout, parse_constant=lambda c: pytest.fail(c))
        PlanDocument.model_validate(doc)
        assert math.isfinite(doc["fc"]["step_fc_time_s"])
        assert math.isfinite(doc["fc"]["flop_utilization"])


PIPELINE_YAML = (REPO / "examples" / "pipeline-llama-pp8.yaml").read_text()
SEED_INIT = (REPO / "tests" / "fixtures" / "seed_tool" / "init_demopp4.yaml").read_text()


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("cap_gib: 56", "cap_gib: .nan", "memory.cap_gib"),
        ("constant_gib: 5.0", "constant_gib: .inf", "memory.constant_gib"),
        ("forward_ms: 0.6", "forward_ms: .nan", "head.forward_ms"),
        ("full: 0.5", "full: .inf", "recompute_options"),
    ],
)
def test_non_finite_numbers_pipeline_time_memory_factor_is_bad_input_not_exit_3(
    tmp_path, old, new, field
):
    assert old in PIPELINE_YAML
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE_YAML.replace(old, new))
    out = tmp_path / "out.json"
    run = run_cli("pipeline", str(path), "--out", str(out))
    assert_one_line_error(run, "p.yaml", field, "fix:")
    assert not out.exists()


@pytest.mark.parametrize("value", ["-1", ".nan", "-.inf"])
def test_absurd_numbers_seed_format_negative_head_time_is_bad_input(tmp_path, value):
    # a negative head time gave a plan faster than the valid file's
    assert "  head: 1\n" in SEED_INIT
    path = tmp_path / "init.yaml"
    path.write_text(SEED_INIT.replace("  head: 1\n", f"  head: {value}\n"))
    run = run_cli("pipeline", str(path), "--micro-batches", "8", "--memory-cap-mb", "60000")
    assert_one_line_error(run, "init.yaml", "time_config.head", "fix:")
