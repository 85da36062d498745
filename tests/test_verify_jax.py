"""The JAX backend on 8 virtual CPU devices (2x4 and 4x2): MeshSlice's three
dataflows and the baselines equal a plain matmul; `verify --backend jax`
and the bench -> calibrate -> plan chain run end to end.

JAX reads XLA_FLAGS once, at its first import, so the JAX work runs in
subprocesses that set the 8-device flag (or let the backend set it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from autotune.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-10

_SCRIPT = r"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
from autotune.verify.algorithms import operand_shapes, reference_product
from autotune.verify.baselines import Baseline
from autotune.verify.jax_backend import run_meshslice_jax
from autotune.verify.jax_baselines import run_baseline_jax
from cost_models import Dataflow, MeshShape

rng = np.random.default_rng(0)
out = {"num_devices": len(jax.devices())}
for name, alg, rows, cols, df, transposed in json.loads(sys.argv[1]):
    mesh, df = MeshShape(rows, cols), Dataflow(df)
    # 32 = S * b * lcm(2, 4) * 2 with S = 2, b = 2: valid for every dataflow
    a_shape, b_shape = operand_shapes(df, 32, 32, 32)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    if alg == "meshslice":
        got = run_meshslice_jax(df, a, b, mesh, 2, 2, transposed)
    else:
        got = run_baseline_jax(Baseline(alg), df, a, b, mesh, transposed)
    want = reference_product(df, a, b)
    out[name] = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
print(json.dumps(out))
"""

CONFIGS = [
    (f"{alg}-{r}x{c}-{df}{'-T' if t else ''}", alg, r, c, df, t)
    for r, c in ((2, 4), (4, 2))
    for df in ("OS", "LS", "RS")
    for alg, t in (("meshslice", False), ("meshslice", True), ("collective", False))
    + ((("wang", False), ("summa", False)) if (r, c) == (2, 4) else (("wang", True),))
] + [(f"cannon-2x2-{df}", "cannon", 2, 2, df, False) for df in ("OS", "LS", "RS")]


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def jax_errors() -> dict:
    proc = _run([sys.executable, "-c", _SCRIPT, json.dumps(CONFIGS)])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_eight_virtual_devices(jax_errors):
    assert jax_errors["num_devices"] == 8


@pytest.mark.parametrize("config", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_jax_algorithm_equals_plain_matmul(jax_errors, config):
    assert jax_errors[config[0]] < TOLERANCE


def _meshtune(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return _run([sys.executable, "-c", "from autotune.cli import main; main()", *args], env)


def test_verify_backend_jax_sets_up_its_own_devices(tmp_path):
    """No XLA_FLAGS given: the backend asks for the devices itself."""
    gemms = [
        {"pass": "forward", "dataflow": df, "transposed": t, "m": 64, "n": 64, "k": 64,
         "num_slices": 2}
        for df in ("OS", "LS", "RS") for t in (False, True)
    ]  # fmt: skip
    doc = {
        "schema": "meshtune.plan/3",
        "mesh": {"num_rows": 2, "num_cols": 4, "block_size": 2},
        "layers": [
            {"name": "fc", "in_features": 64, "out_features": 64, "tokens": 64, "gemms": gemms}
        ],
    }
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    proc = _meshtune("verify", str(plan), "--backend", "jax", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["ok"] and result["backend"] == "jax" and result["dtype"] == "float64"
    assert all(g["bytes_sent_per_chip"] is None for g in result["gemms"])


def test_bench_calibrate_plan_chain(tmp_path):
    missing = [c for c in ("bench", "calibrate", "plan") if c not in SUBCOMMANDS]
    if missing:
        pytest.skip(f"meshtune {', '.join(missing)} not available in this checkout")
    csv_path, cal_path, plan_path = (tmp_path / n for n in ("bench.csv", "cal.json", "plan.json"))
    proc = _meshtune("bench", "--backend", "jax", "--out", str(csv_path), "--quick")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in csv_path.read_text().splitlines() if not ln.startswith("#")]
    assert lines[0] == "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups"
    rows = [ln.split(",") for ln in lines[1:]]
    # 2x4 and 4x2: rings of 2 and 4 on each axis, three ops, 3 sizes; then the GEMMs
    collectives = {(r[1], r[2], r[3]) for r in rows if r[0] == "collective" and r[1] != "send_recv"}
    assert collectives == {
        (op, ax, p) for op in ("all_gather", "reduce_scatter", "all_to_all")
        for ax in ("row", "col") for p in ("2", "4")
    }  # fmt: skip
    # grouped GEMMs: one ragged_dot of `groups` GEMMs each
    grouped = {(r[10], r[5]) for r in rows if r[0] == "grouped_gemm"}
    assert grouped == {("4", "64"), ("16", "16")}
    assert all(float(r[9]) > 0 for r in rows) and any(r[0] == "gemm" for r in rows)
    # send-recv (one hop, ring_size 2) on each axis of the first mesh, and a GEMM timed
    # beside an all-gather on each axis, whose shape has a GEMM-alone row
    send_recv = {(r[2], r[3]) for r in rows if r[0] == "collective" and r[1] == "send_recv"}
    assert send_recv == {("row", "2"), ("col", "2")}
    overlap = [r for r in rows if r[0] == "overlap"]
    assert {r[2] for r in overlap} == {"row", "col"}
    gemm_shapes = {tuple(r[5:8]) for r in rows if r[0] == "gemm"}
    assert all(tuple(r[5:8]) in gemm_shapes for r in overlap)
    runner = CliRunner()
    # virtual CPU devices share one memory bus, not links: their timings may fit the
    # link model poorly, which calibrate refuses unless told (docs/reliability.md)
    res = runner.invoke(
        main, ["calibrate", str(csv_path), "--out", str(cal_path), "--accept-poor-fit"]
    )
    assert res.exit_code == 0, res.output
    cal = json.loads(cal_path.read_text())
    assert "send_recv" in cal["collectives"] and cal["overlap_slowdown"] >= 1.0
    assert "all_to_all" in cal["collectives"]
    assert "grouped)" in res.output  # the grouped rows joined the GEMM fit
    assert "overlap_slowdown: not measured" not in res.output
    example = str(REPO / "examples" / "gpt3.yaml")
    res = runner.invoke(
        main, ["plan", example, "--calibration", str(cal_path), "--out", str(plan_path)]
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["verify", str(plan_path)])
    assert res.exit_code == 0, res.output
