"""`meshtune verify` end to end: the GPT-3 example plan passes, every Table 1
row and twin passes, bad plans fail with clear errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from jsoncheck import assert_json_close

from autotune.cli import main
from autotune.plan.dataflow import Stationary, table1
from autotune.plan.layers import FCLayer
from autotune.verify.mesh import Traffic
from autotune.verify.plan_file import read_plan
from autotune.verify.runner import verify_plan
from cost_models import Axis, Dataflow, MeshShape, valid_slice_counts

GOLDEN = Path(__file__).parent / "golden" / "verify_gpt3.json"


@pytest.fixture(scope="module")
def gpt3_plan(tmp_path_factory) -> Path:
    """examples/gpt3.yaml on the paper's 32 x 8 mesh (pinned)."""
    import yaml

    folder = tmp_path_factory.mktemp("plan")
    out = folder / "gpt3_plan.json"
    repo = Path(__file__).resolve().parent.parent
    data = yaml.safe_load((repo / "examples" / "gpt3.yaml").read_text())
    data["training"]["tensor_mesh"] = [32, 8]
    source = folder / "gpt3_32x8.yaml"
    source.write_text(yaml.safe_dump(data))
    result = CliRunner().invoke(main, ["plan", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _normalised(doc: dict) -> dict:
    """Drop what depends on the machine's BLAS or the temp path, after
    checking it: errors are below tolerance."""
    assert doc["worst_relative_error"] < 1e-10
    doc["worst_relative_error"] = None
    doc["plan_file"] = "gpt3_plan.json"
    for g in doc["gemms"]:
        assert g["max_relative_error"] < g["tolerance"]
        g["max_relative_error"] = None
    return doc


def test_verify_passes_on_the_gpt3_example_plan(gpt3_plan):
    result = CliRunner().invoke(main, ["verify", str(gpt3_plan), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = _normalised(json.loads(result.output))
    assert doc["ok"] and len(doc["gemms"]) == 12
    assert all(g["bytes_match"] for g in doc["gemms"])
    assert_json_close(doc, json.loads(GOLDEN.read_text()))


def test_verify_table_output(gpt3_plan):
    result = CliRunner().invoke(main, ["verify", str(gpt3_plan)])
    assert result.exit_code == 0, result.output
    assert "all 12 GEMMs match" in result.output
    assert "dW^T = RS(dY, X)" in result.output


def _edit(plan: Path, tmp_path: Path, fn) -> Path:
    doc = json.loads(plan.read_text())
    fn(doc)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(doc))
    return out


def test_invalid_slice_count_fails_with_a_clear_error(gpt3_plan, tmp_path):
    def edit(doc):
        doc["layers"][1]["gemms"][2]["num_slices"] = 5

    result = CliRunner().invoke(main, ["verify", str(_edit(gpt3_plan, tmp_path, edit))])
    assert result.exit_code == 2
    # RS slices M = I = 12288 on the 32x8 mesh with b = 8: 12288 % (5*8*32) != 0
    assert (
        "layers[1].gemms[2].num_slices: got 5; attn_out backward_weight: invalid slice count"
        in (result.output)
    )
    assert "fix: use one of [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]" in result.output
    assert "Traceback" not in result.output


def test_a_wrong_expression_is_a_mismatch(gpt3_plan, tmp_path):
    def edit(doc):
        doc["layers"][0]["gemms"][0]["expression"] = "Y = OS(W, X)"

    result = CliRunner().invoke(main, ["verify", str(_edit(gpt3_plan, tmp_path, edit))])
    assert result.exit_code == 1
    assert "does not fit dataflow OS" in result.output
    assert "1 of 12 GEMMs do not match" in result.output


def test_a_broken_engine_is_caught(gpt3_plan, monkeypatch):
    """A mis-sliced algorithm (the last column dropped) must exit 1."""
    import autotune.verify.runner as runner

    good = runner.numpy_engine

    def broken(*args):
        out, traffic = good(*args)
        out = out.copy()
        out[:, -1] = 0.0
        return out, traffic

    monkeypatch.setattr(runner, "numpy_engine", broken)
    result = CliRunner().invoke(main, ["verify", str(gpt3_plan)])
    assert result.exit_code == 1
    assert "relative error" in result.output


def test_a_miscounting_engine_is_caught(gpt3_plan):
    plan = read_plan(str(gpt3_plan))
    import autotune.verify.runner as runner

    def chatty(*args):
        out, traffic = runner.numpy_engine(*args)
        more = {ax: arr + 1 for ax, arr in traffic.bytes_per_chip.items()}
        return out, Traffic(more, traffic.calls)

    result = verify_plan(plan, "p.json", "numpy", chatty)
    assert not result.ok
    assert all("differ from the model's" in c.reason for c in result.checks)


@pytest.mark.parametrize("stationary", list(Stationary))
@pytest.mark.parametrize("transposed", [False, True])
def test_every_table1_row_and_twin_verifies(tmp_path, stationary, transposed):
    """A hand-built plan on a 2x4 mesh (b = 2) for each stationary matrix and
    variant: the three GEMMs act on one X, W, dY and must give Y, dX, dW."""
    mesh, block = MeshShape(2, 4), 2
    layer = FCLayer("fc", in_features=96, out_features=48, tokens=192, count_per_step=1)
    gemms = []
    for g in table1(layer, stationary, transposed):
        logical = mesh.transposed() if transposed else mesh
        valid = valid_slice_counts(g.dataflow, g.m, g.n, g.k, logical, block, max_slices=3)
        gemms.append(
            {
                "pass": g.gemm_pass.value,
                "dataflow": g.dataflow.value,
                "transposed": transposed,
                "m": g.m,
                "n": g.n,
                "k": g.k,
                "num_slices": valid[-1],
                "expression": g.expression,
            }
        )
    doc = {
        "schema": "meshtune.plan/3",
        "mesh": {"num_rows": 2, "num_cols": 4, "block_size": block},
        "layers": [
            {"name": "fc", "in_features": 96, "out_features": 48, "tokens": 192, "gemms": gemms}
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["verify", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] and all(g["num_slices"] >= 1 for g in out["gemms"])
    # the layer was scaled as one: every GEMM ran on the same T, I, O
    assert {tuple(sorted(g["run_mnk"])) for g in out["gemms"]} == {
        tuple(sorted(out["gemms"][0]["run_mnk"]))
    }


def test_gemms_without_expressions_verify_one_by_one(tmp_path):
    doc = {
        "schema": "meshtune.plan/3",
        "mesh": {"num_rows": 3, "num_cols": 2, "block_size": 4},
        "layers": [
            {
                "name": "x",
                "in_features": 48,
                "out_features": 48,
                "tokens": 48,
                "gemms": [
                    {"pass": "forward", "dataflow": df.value, "transposed": t,
                     "m": 48, "n": 48, "k": 48, "num_slices": 2}
                    for df in Dataflow for t in (False, True)
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["verify", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    # OS slices K: smallest K = S * b * lcm(3, 2) = 2 * 4 * 6 = 48
    assert json.loads(result.output)["gemms"][0]["run_mnk"] == [3, 2, 48]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "is not valid JSON"),
        (
            '{"schema": "other/1"}',
            "schema: got 'other/1'; is not a meshtune.plan/3 document",
        ),
        (
            '{"schema": "meshtune.plan/2", "mesh": {}, "layers": []}',
            "schema: got 'meshtune.plan/2'; is a document of an older meshtune; verify reads "
            "meshtune.plan/3, which holds the whole plan (searched or pinned); fix: re-run "
            "`meshtune plan PLAN.yaml --out PLAN.json`",
        ),
        (
            '{"schema": "meshtune.job-search/1", "chosen": {}}',
            "schema: got 'meshtune.job-search/1'; is a document of an older meshtune",
        ),
        (
            '{"schema": "meshtune.plan/3", "mesh": {"num_rows": 0, "num_cols": 2, '
            '"block_size": 1}, "layers": []}',
            "mesh.num_rows",
        ),
    ],
)
def test_bad_plan_files(tmp_path, text, message):
    path = tmp_path / "plan.json"
    path.write_text(text)
    result = CliRunner().invoke(main, ["verify", str(path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_file():
    result = CliRunner().invoke(main, ["verify", "no/such/plan.json"])
    assert result.exit_code == 2
    assert "no/such/plan.json: no such file" in result.output


def test_emulated_bytes_are_per_chip_per_axis(gpt3_plan):
    plan = read_plan(str(gpt3_plan))
    import autotune.verify.runner as runner

    result = verify_plan(plan, "p.json", "numpy", runner.numpy_engine)
    qkv_fwd = result.checks[0]
    # OS on 32x8, S=4, ran (m,n,k) = (32, 8, 3072) in float64:
    # col: (8-1) * 4 slices * (32/32 * 3072/(8*4)) * 8 B = 21504
    # row: (32-1) * 4 * (3072/(32*4) * 8/8) * 8 B = 23808
    assert qkv_fwd.bytes_per_chip == {Axis.ROW.value: 23808.0, Axis.COL.value: 21504.0}
    assert np.isclose(result.worst_relative_error, max(c.max_relative_error for c in result.checks))
