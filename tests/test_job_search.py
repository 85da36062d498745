"""The joint parallelism search: brute-force equality on small cases,
memory-bound validity, determinism and tie-break, constraints, the ILP
balancing heavier end stages, the report and bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from autotune.job.candidates import enumerate_candidates
from autotune.job.cluster_view import search_hardware
from autotune.job.pricing import price
from autotune.job.search import Evaluated, _sorted, exhaustive, memory_lower_bound, search
from autotune.loading import load_calibration, load_cluster_spec
from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec

GIB = 2**30

TINY = ModelSpec(
    name="tiny",
    num_layers=6,
    hidden_size=1024,
    num_heads=8,
    head_dim=128,
    ffn_size=4096,
    vocab_size=32000,
)
TINY_GQA = ModelSpec(
    name="tiny-gqa",
    num_layers=5,
    hidden_size=1024,
    num_heads=8,
    head_dim=128,
    num_kv_heads=2,
    ffn_size=2816,
    ffn_kind="swiglu",
    vocab_size=64000,
)


def small_hardware(hbm_gib: float, chips_per_node: int = 4, nodes: int = 2):
    """`nodes` HGX A100 nodes cut to `chips_per_node` GPUs each, with a
    chosen HBM so that memory binds."""
    spec, _ = load_cluster_spec("a100-hgx")
    spec = spec.model_copy(
        update={
            "num_chips": nodes * chips_per_node,
            "hbm_gib": hbm_gib,
            "node": spec.node.model_copy(update={"chips_per_node": chips_per_node}),
        }
    )
    calibration, _ = load_calibration(spec.calibration)
    return search_hardware(spec, calibration, "bf16", workspace_gib=0.25)


LIMITS = SearchConstraints(
    max_interleave=2, max_micro_batch_size=4, finalists=2, ilp_time_limit_s=30.0
)

CASES = {
    "gpt-like, memory binds, everything auto": (
        TINY,
        small_hardware(2.5),
        AutoTrainingSpec(global_batch_sequences=16, sequence_length=1024),
    ),
    "gqa swiglu, 2d meshes, unfused attention": (
        TINY_GQA,
        small_hardware(8.0),
        AutoTrainingSpec(
            global_batch_sequences=8, sequence_length=512, flash_attention=False, dropout=True
        ),
    ),
    "fixed recompute and zero": (
        TINY,
        small_hardware(2.0),
        AutoTrainingSpec(
            global_batch_sequences=16, sequence_length=1024, recompute="full", zero_stage=1
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_search_equals_brute_force(case):
    model, hw, train = CASES[case]
    got = search(model, hw, train, LIMITS, max_extra_solves=10_000)
    ref = exhaustive(model, hw, train, LIMITS)
    assert got.proved
    assert ref, "the case must have a feasible configuration"
    assert got.ranked[0].config == ref[0].config
    assert got.ranked[0].step_s == pytest.approx(ref[0].step_s, rel=1e-12)
    # The search skipped work: pruned or unbalanced candidates exist.
    assert got.num_balanced <= len({tuple(e.config.values()) for e in ref})


@pytest.mark.parametrize("case", list(CASES))
def test_memory_bound_never_above_closed_form(case):
    model, hw, train = CASES[case]
    c = enumerate_candidates(model, hw, train, LIMITS)
    bound = memory_lower_bound(model, hw, train, c)
    peak = price(model, hw, train, c).peak_bytes
    assert np.all(bound <= peak * (1 + 1e-12))
    single = c.pp == 1
    assert np.allclose(bound[single], peak[single])


def test_same_input_same_plan():
    model, hw, train = CASES["gpt-like, memory binds, everything auto"]
    a = search(model, hw, train, LIMITS)
    b = search(model, hw, train, LIMITS)
    assert [(e.config, e.step_s) for e in a.ranked] == [(e.config, e.step_s) for e in b.ranked]


def test_ties_go_to_the_canonical_order():
    def ev(order, step):
        return Evaluated(order, {"n": order}, step, step, {}, 0.0, None)

    ranked = _sorted([ev(5, 1.0), ev(2, 1.0 + 1e-12), ev(1, 2.0), ev(7, 0.5)])
    assert [e.order for e in ranked] == [7, 2, 5, 1]


def test_constraints_are_honoured():
    model, hw, _ = CASES["gpt-like, memory binds, everything auto"]
    train = AutoTrainingSpec(
        global_batch_sequences=16, sequence_length=1024, tensor_mesh="1d", data_parallel=2
    )
    limits = SearchConstraints(max_pipeline_stages=2, tensor_parallel_within_node=True)
    c = enumerate_candidates(model, hw, train, limits)
    assert len(c) > 0
    assert np.all(c.rows == 1)
    assert np.all(c.dp == 2)
    assert np.all(c.pp <= 2)
    assert np.all(c.tp <= hw.chips_per_node)
    assert np.all(c.tp * c.pp * c.dp == hw.num_chips)
    fixed = enumerate_candidates(
        model,
        hw,
        AutoTrainingSpec(global_batch_sequences=16, sequence_length=1024, tensor_mesh=[2, 2]),
        SearchConstraints(),
    )
    assert set(zip(fixed.rows.tolist(), fixed.cols.tolist(), strict=True)) == {(2, 2)}
    # Without the node rule, tensor groups may span the two nodes.
    wide = enumerate_candidates(
        model,
        hw,
        AutoTrainingSpec(global_batch_sequences=16, sequence_length=1024),
        SearchConstraints(tensor_parallel_within_node=False),
    )
    assert wide.tp.max() == 8


def test_enumeration_covers_every_valid_degree_product():
    model, hw, train = CASES["gpt-like, memory binds, everything auto"]
    limits = SearchConstraints(max_interleave=1, max_micro_batch_size=1, zero_stages=[0])
    c = enumerate_candidates(model, hw, train.model_copy(update={"recompute": "none"}), limits)
    got = {(int(r), int(k), int(p)) for r, k, p in zip(c.rows, c.cols, c.pp, strict=True)}
    want = set()
    for t in (1, 2, 4):  # divisors of the node's 4 chips
        for rows in (1, 2, 4):
            if t % rows or 1 % rows:  # micro-batch 1 holds whole sequences only on 1 row
                continue
            cols = t // rows
            for pp in (1, 2, 4, 8):
                if t * pp <= 8 and 8 % (t * pp) == 0 and pp <= model.num_layers:
                    want.add((rows, cols, pp))
    assert got == want


def test_balancer_lightens_the_output_stage():
    """A vocabulary large against the blocks makes the last stage heavier:
    the balanced plan moves blocks off it and beats the even split."""
    model = TINY.model_copy(update={"vocab_size": 256000, "num_layers": 8})
    hw = small_hardware(80.0, chips_per_node=8, nodes=1)
    train = AutoTrainingSpec(
        global_batch_sequences=32,
        sequence_length=1024,
        tensor_mesh=[1, 2],
        pipeline_parallel=4,
        micro_batch_size=1,
        interleave=1,
        recompute="none",
        zero_stage=0,
    )
    out = search(model, hw, train, LIMITS)
    best = out.ranked[0]
    assert best.balanced is not None
    layers = [sum(s) for s in best.balanced.layers_per_stage]
    assert sum(layers) == 8
    assert layers[-1] < max(layers)
    assert best.step_s < best.balanced.even_split_step_s


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-c", "from autotune.cli import main; main()", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_cli_plans_the_llama_example_with_every_degree_auto(repo_root, tmp_path):
    out = tmp_path / "plan.json"
    res = _cli("plan", "examples/llama3-70b-h100-auto.yaml", "--out", str(out), cwd=repo_root)
    assert res.returncode == 0, res.stderr
    assert "chosen:" in res.stdout and "loses to" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "meshtune.job-search/1"
    cfg = doc["chosen"]["configuration"]
    assert cfg["tensor_parallel"] * cfg["pipeline_parallel"] * cfg["data_parallel"] == 256
    assert cfg["tensor_parallel"] <= 8 and cfg["pipeline_parallel"] <= 16
    assert doc["chosen"]["peak_memory_gib"] <= doc["usable_memory_gib"]
    assert doc["alternatives"]
    for alt in doc["alternatives"]:
        assert alt["step_time_s"] >= doc["chosen"]["step_time_s"]
        assert alt["loses_to"]


def test_bad_tensor_mesh_is_one_line_exit_2(repo_root, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        "model: llama3-70b-like\n"
        "training: {global_batch_sequences: 64, sequence_length: 4096, tensor_mesh: [3]}\n"
        "cluster: h100-hgx-2n\n"
    )
    res = _cli("plan", str(f), cwd=repo_root)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1
    assert "training.tensor_mesh" in res.stderr and "fix:" in res.stderr


def test_unknown_cluster_is_one_line_exit_2(repo_root, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(
        "model: llama3-70b-like\n"
        "training: {global_batch_sequences: 64, sequence_length: 4096, data_parallel: auto}\n"
        "cluster: h900-hgx-2n\n"
    )
    res = _cli("plan", str(f), cwd=repo_root)
    assert res.returncode == 2
    assert "cluster" in res.stderr and "h100-hgx" in res.stderr


def test_nothing_fits_exits_1(repo_root, tmp_path):
    f = tmp_path / "oom.yaml"
    f.write_text(
        "model: llama3-70b-like\n"
        "training: {global_batch_sequences: 8, sequence_length: 8192, data_parallel: auto}\n"
        "cluster: h100-hgx-1n\n"
    )
    res = _cli("plan", str(f), cwd=repo_root)
    assert res.returncode == 1
    assert "GiB usable per chip" in res.stderr
