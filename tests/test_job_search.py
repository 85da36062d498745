"""The one search: brute-force equality on small cases, the memory bound's
validity, determinism and tie-break, constraints and pins, refused degrees,
the ILP balancing heavier end stages, the report and bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from planning import write_plan

from autotune.job.bounds import memory_lower_bound
from autotune.job.candidates import Refusals, enumerate_candidates
from autotune.job.hardware import hardware_view
from autotune.job.model import price
from autotune.job.search import Evaluated, _sorted, exhaustive, priced_candidates, search
from autotune.loading import load_plan_input

GIB = 2**30

TINY = {
    "name": "tiny",
    "num_layers": 6,
    "hidden_size": 1024,
    "num_heads": 8,
    "head_dim": 128,
    "ffn_size": 4096,
    "vocab_size": 32000,
}
TINY_GQA = {
    "name": "tiny-gqa",
    "num_layers": 5,
    "hidden_size": 1024,
    "num_heads": 8,
    "head_dim": 128,
    "num_kv_heads": 2,
    "ffn_size": 2816,
    "ffn_kind": "swiglu",
    "vocab_size": 64000,
}


def small_cluster(hbm_gib: float, chips_per_node: int = 4, nodes: int = 2) -> dict:
    """`nodes` HGX A100 nodes cut to `chips_per_node` GPUs each, with a
    chosen HBM so that memory binds."""
    return {
        "name": f"a100-{nodes}x{chips_per_node}",
        "num_chips": nodes * chips_per_node,
        "topology": "switched",
        "chip": "a100-sxm4-80gb",
        "hbm_gib": hbm_gib,
        "node": {"chips_per_node": chips_per_node, "egress_gb_per_s": 300},
        "scale_out": {"nic_gb_per_s": 25, "rails": chips_per_node},
        "block_size": 64,
        "calibration": "a100-nominal",
    }


LIMITS = {"max_interleave": 2, "max_micro_batch_size": 4, "finalists": 2, "ilp_time_limit_s": 30}

CASES = {
    "gpt-like, memory binds, everything auto": (
        TINY,
        small_cluster(2.5),
        {"global_batch_sequences": 16, "sequence_length": 1024, "workspace_gib": 0.25},
    ),
    "gqa swiglu, 2d meshes, unfused attention": (
        TINY_GQA,
        small_cluster(8.0),
        {
            "global_batch_sequences": 8,
            "sequence_length": 512,
            "attention": "unfused",
            "dropout": True,
            "workspace_gib": 0.25,
        },
    ),
    "fixed recompute and zero": (
        TINY,
        small_cluster(2.0),
        {
            "global_batch_sequences": 16,
            "sequence_length": 1024,
            "recompute": "full",
            "zero_stage": 1,
            "workspace_gib": 0.25,
        },
    ),
}


def _input(tmp_path, case, constraints=LIMITS, **training):
    model, cluster, base = CASES[case]
    path = write_plan(tmp_path, model, {**base, **training}, cluster, constraints=constraints)
    inp = load_plan_input(path)
    return inp, hardware_view(inp)


@pytest.mark.parametrize("case", list(CASES))
def test_search_equals_brute_force(case, tmp_path):
    inp, hw = _input(tmp_path, case)
    got = search(inp, hw, max_extra_solves=10_000)
    ref = exhaustive(inp, hw)
    assert got.proved
    assert ref, "the case must have a feasible configuration"
    assert got.ranked[0].config == ref[0].config
    assert got.ranked[0].recompute == ref[0].recompute
    assert got.ranked[0].step_s == pytest.approx(ref[0].step_s, rel=1e-12)
    # The search skipped work: fewer candidates priced exactly than exist.
    assert got.num_priced <= len(got.candidates)


@pytest.mark.parametrize("case", list(CASES))
def test_memory_bound_never_above_the_model(case, tmp_path):
    inp, hw = _input(tmp_path, case)
    c, figs, _ = priced_candidates(inp, hw)
    searched = inp.training.pinned("recompute") is None
    bound = memory_lower_bound(inp, c, hw.workspace_bytes + hw.reserve_bytes, searched)
    peak = price(c, figs, hw, inp.training, inp.model.num_layers, inp.model.hidden_size).peak_bytes
    assert np.all(bound <= peak * (1 + 1e-12))


def test_same_input_same_plan(tmp_path):
    inp, hw = _input(tmp_path, "gpt-like, memory binds, everything auto")
    a = search(inp, hw)
    b = search(inp, hw)
    assert [(e.config, e.step_s) for e in a.ranked] == [(e.config, e.step_s) for e in b.ranked]


def test_ties_go_to_the_canonical_order():
    def ev(order, step):
        return Evaluated(order, {"n": order}, step, 0.0, True, {})

    ranked = _sorted([ev(5, 1.0), ev(2, 1.0 + 1e-12), ev(1, 2.0), ev(7, 0.5)])
    assert [e.order for e in ranked] == [7, 2, 5, 1]


def test_constraints_and_pins_are_honoured(tmp_path):
    inp, hw = _input(
        tmp_path,
        "gpt-like, memory binds, everything auto",
        constraints={"max_pipeline_stages": 2, "tensor_parallel_within_node": True},
        tensor_mesh="1d",
        data_parallel=2,
    )
    c = enumerate_candidates(inp, hw, Refusals())
    assert len(c) > 0
    assert np.all(c.rows == 1)
    assert np.all(c.dp == 2)
    assert np.all(c.pp <= 2)
    assert np.all(c.tp <= 4)
    assert np.all(c.tp * c.cp * c.pp * c.dp == hw.num_chips)
    inp, hw = _input(tmp_path, "gpt-like, memory binds, everything auto", tensor_mesh=[2, 2])
    fixed = enumerate_candidates(inp, hw, Refusals())
    assert set(zip(fixed.rows.tolist(), fixed.cols.tolist(), strict=True)) == {(2, 2)}
    # Without the node rule, tensor groups may span the two nodes.
    inp, hw = _input(
        tmp_path,
        "gpt-like, memory binds, everything auto",
        constraints={"tensor_parallel_within_node": False},
    )
    assert enumerate_candidates(inp, hw, Refusals()).tp.max() == 8
    # A size the file pins is kept beyond the constraints: dp 1, pp 1 and
    # cp 1 fix a tensor group of 8, which spans the 4-GPU nodes.
    pins = {"data_parallel": 1, "pipeline_parallel": 1}
    inp, hw = _input(
        tmp_path, "gpt-like, memory binds, everything auto", **pins, context_parallel=1
    )
    assert set(enumerate_candidates(inp, hw, Refusals()).tp.tolist()) == {8}
    # dp 1 and pp 1 alone fix tensor x context chips at 8
    inp, hw = _input(tmp_path, "gpt-like, memory binds, everything auto", **pins)
    c = enumerate_candidates(inp, hw, Refusals())
    assert set((c.tp * c.cp).tolist()) == {8} and set(c.cp.tolist()) == {1, 2, 4, 8}


def test_enumeration_covers_every_valid_degree_product(tmp_path):
    inp, hw = _input(
        tmp_path,
        "gpt-like, memory binds, everything auto",
        constraints={"max_interleave": 1, "max_micro_batch_size": 1, "zero_stages": [0]},
        recompute="none",
    )
    c = enumerate_candidates(inp, hw, Refusals())
    got = {(int(r), int(k), int(p)) for r, k, p in zip(c.rows, c.cols, c.pp, strict=True)}
    want = set()
    for t in (1, 2, 4):  # divisors of the node's 4 chips
        for rows in (1, 2, 4):
            if t % rows:
                continue
            cols = t // rows
            for pp in (1, 2, 4, 8):
                if t * pp <= 8 and 8 % (t * pp) == 0 and pp <= 6:
                    want.add((rows, cols, pp))
    assert got == want


def test_refused_degrees_have_reasons(tmp_path):
    inp, hw = _input(tmp_path, "gpt-like, memory binds, everything auto")
    out = search(inp, hw)
    reasons = {(d, v): r for d, v, r in out.refusals.lines()}
    assert reasons[("pipeline_parallel", "8")] == "more stages than the 6 layers"
    assert "does not fit in a 4-chip node" in reasons[("tensor_parallel", "8")]
    # micro-batch 1 cannot hold whole sequences on 2 mesh rows and 2 columns
    # (with TP 4 pinned the search must look at the 2 x 2 mesh; unpinned, data
    # parallelism over the NIC rails wins before it is priced)
    inp, hw = _input(tmp_path, "gpt-like, memory binds, everything auto", tensor_parallel=4)
    reasons = {(d, v): r for d, v, r in search(inp, hw).refusals.lines()}
    assert "not divisible by the token axis (2)" in reasons[("tensor_mesh", "2x2 at micro-batch 1")]


def test_balancer_lightens_the_output_stage(tmp_path):
    """A vocabulary large against the blocks makes the last stage heavier:
    the balanced plan moves blocks off it and beats the even split."""
    model = {**TINY, "vocab_size": 256000, "num_layers": 8}
    training = {
        "global_batch_sequences": 32,
        "sequence_length": 1024,
        "tensor_mesh": [1, 2],
        "pipeline_parallel": 4,
        "micro_batch_size": 1,
        "interleave": 1,
        "recompute": "none",
        "zero_stage": 0,
    }
    path = write_plan(
        tmp_path,
        model,
        training,
        small_cluster(80.0, chips_per_node=8, nodes=1),
        constraints=LIMITS,
    )
    inp = load_plan_input(path)
    out = search(inp, hardware_view(inp))
    best = out.ranked[0]
    assert best.counts is not None and best.balanced is not None and best.balanced.proved
    layers = best.counts.sum(axis=1)
    assert layers.sum() == 8
    assert layers[-1] < layers.max()
    assert best.step_s < best.even_split_step_s


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
    assert "Planned:" in res.stdout and "loses" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "meshtune.plan/3"
    cfg = doc["configuration"]
    degrees = ("tensor_parallel", "context_parallel", "pipeline_parallel", "data_parallel")
    assert math.prod(cfg[k] for k in degrees) == 256
    assert cfg["tensor_mesh"][0] == 1 and cfg["tensor_parallel"] <= 8
    assert cfg["pipeline_parallel"] <= 16
    assert (
        doc["predictions"]["peak_memory_bytes"] <= doc["predictions"]["memory"][0]["capacity_bytes"]
    )
    assert doc["alternatives"]
    for alt in doc["alternatives"]:
        assert alt["step_s"] >= doc["predictions"]["step_s"]
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
    assert "out of memory: pipeline stage" in res.stderr and "short by" in res.stderr
    assert res.stderr.count("\n") == 1
