"""One cost model (architecture.md): the search's vectorised pricing is the
step model, and its bounds never exceed it.

- Pricing every candidate at once gives each one's step, memory and parts
  exactly as pricing it alone (the grouping changes nothing).
- The FC table's per-block times are the chosen configuration's FC plan
  (the per-layer GEMMs and transposes of plan/search.py `plan_result`).
- The exact replay inside the model is the op-by-op pipeline simulator.
- The lower bounds the search prunes with (bounds.py, model.chain_bound_s)
  never exceed the model, for the even split and for balanced plans, on
  calibrations with an efficiency curve and size regimes as well as on
  nominal ones.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planning import LLAMA, pinned, write_plan

from autotune.job.block import fc_lower_bounds
from autotune.job.bounds import step_lower_bound
from autotune.job.fc import FcBlock
from autotune.job.hardware import hardware_view
from autotune.job.model import (
    Candidates,
    block_seconds,
    chain_bound_s,
    data_parallel_floor_s,
    even_split,
    gather_figures,
    pipeline_send_s,
    price,
)
from autotune.job.plan import make_plan, resolved_training
from autotune.job.search import bound_figures, new_figures, priced_candidates, search
from autotune.loading import load_plan_input
from autotune.pipeline.assignment import Assignment
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule
from autotune.pipeline.simulator import simulate
from autotune.plan.dataflow import GemmPass
from calibration_data import data_path

GPT = {
    "name": "gpt-6b",
    "num_layers": 8,
    "hidden_size": 4096,
    "num_heads": 32,
    "head_dim": 128,
    "ffn_size": 16384,
    "vocab_size": 51200,
}

# A calibration shaped like one `meshtune calibrate` fits from GEMM
# benchmarks and nccl-tests logs: a saturating GEMM efficiency curve and
# collectives whose launch, step and bandwidth change with the message size.
CURVE = {
    "effective_flops_per_s": 287.4e12,
    "efficiency_curve": {
        "m_half": 916.0,
        "n_half": 115.3,
        "k_half": 108.7,
        "max_dims": [802816.0, 16384.0, 16384.0],
    },
    "peak_flops_per_s": 312e12,
    "hbm_bytes_per_s": 1555e9,
}
NODE_REGIMES = [
    (2.0**20, 20e-6, 2e-6, 60e9),
    (2.0**24, 28e-6, 1e-6, 150e9),
    (None, 28e-6, 1e-6, 209e9),
]
NIC_REGIMES = [(2.0**20, 30e-6, 8e-6, 9e9), (None, 40e-6, 5e-6, 22.5e9)]


def curved_calibration(directory) -> str:
    """a100-nominal with CURVE as its compute model and the regimes on every
    link; the file's path."""
    doc = json.loads(data_path("a100_nominal.json").read_text())
    doc["name"] = "a100-curve-regimes"
    doc["figures"] = "fitted"
    doc["compute"].update(CURVE)
    for entries in doc["collectives"].values():
        for kind, regimes in (("switched", NODE_REGIMES), ("scale_out", NIC_REGIMES)):
            rows = [
                {"max_shard_bytes": b, "launch_s": a, "sync_s": s, "link_bytes_per_s": w}
                for b, a, s, w in regimes
            ]
            entries[kind] = {k: v for k, v in rows[-1].items() if k != "max_shard_bytes"}
            entries[kind]["regimes"] = rows
    path = directory / "a100-curve-regimes.json"
    path.write_text(json.dumps(doc))
    return str(path)


# A small DeepSeek-shaped mixture of experts: one dense block first, MLA,
# 16 routed experts (4 per token), a shared expert and a multi-token
# prediction module.
MOE = {
    "name": "moe-mla",
    "num_layers": 6,
    "hidden_size": 2048,
    "num_heads": 16,
    "head_dim": 192,
    "ffn_size": 8192,
    "ffn_kind": "swiglu",
    "vocab_size": 32000,
    "position_encoding": "rotary",
    "moe": {
        "num_experts": 16,
        "experts_per_token": 4,
        "expert_ffn_size": 1024,
        "shared_expert_ffn_size": 1024,
        "first_dense_layers": 1,
        "node_limit": 1,
    },
    "mla": {
        "q_lora_rank": 512,
        "kv_lora_rank": 256,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    },
    "mtp_layers": 1,
}

CASES = {
    "gpt, a100 2 nodes, nominal": (
        GPT,
        "a100-hgx-2n",
        None,
        {"attention": "unfused", "dropout": True},
    ),
    "llama, h100 2 nodes, curve and regimes": (LLAMA, "a100-hgx-2n", "curve", {}),
    "llama, megatron-1d": (LLAMA, "h100-hgx-2n", None, {"fc_algorithm": "megatron-1d"}),
    "gpt, tpu v5p 2 slices": (GPT, "tpu-v5p-256-2s", None, {}),
    "moe, h100 2 nodes": (MOE, "h100-hgx-2n", None, {}),
    "moe overlapped, deepep, h100 2 nodes": (
        MOE,
        "h100-hgx-2n",
        None,
        {"overlap_expert_comm": True, "expert_dispatcher": "deepep"},
    ),
    "moe, tpu v5p 2 slices": (MOE, "tpu-v5p-256-2s", None, {}),
}


def _setup(tmp_path, case):
    model, cluster, calibration, extra = CASES[case]
    training = {
        "global_batch_sequences": 64,
        "sequence_length": 2048,
        **extra,
    }
    sections = {"constraints": {"max_micro_batch_size": 4, "max_interleave": 2}}
    if calibration == "curve":
        sections["calibration"] = curved_calibration(tmp_path)
    path = write_plan(tmp_path, model, training, cluster, **sections)
    inp = load_plan_input(path)
    return inp, hardware_view(inp)


@pytest.mark.parametrize("case", list(CASES))
def test_pricing_all_at_once_equals_pricing_each_alone(case, tmp_path):
    inp, hw = _setup(tmp_path, case)
    c, figs, _ = priced_candidates(inp, hw)
    rng = np.random.default_rng(0)
    rows = rng.choice(len(c), size=min(40, len(c)), replace=False)
    model = inp.model
    together = price(c, figs, hw, inp.training, model.num_layers, model.hidden_size)
    for i in rows.tolist():
        one = c.take(np.array([i]))
        alone = price(one, figs, hw, inp.training, model.num_layers, model.hidden_size)
        assert alone.step_s[0] == pytest.approx(together.step_s[i], rel=1e-12)
        assert alone.peak_bytes[0] == pytest.approx(together.peak_bytes[i], rel=1e-12)
        for key, values in alone.parts.items():
            assert values[0] == pytest.approx(together.parts[key][i], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("case", list(CASES))
def test_parts_add_up_to_the_step(case, tmp_path):
    inp, hw = _setup(tmp_path, case)
    c, figs, _ = priced_candidates(inp, hw)
    p = price(c, figs, hw, inp.training, inp.model.num_layers, inp.model.hidden_size)
    total = sum(p.parts.values())
    assert np.allclose(total, p.step_s, rtol=1e-9)
    assert all(np.all(v >= -1e-12) for v in p.parts.values())


@pytest.mark.parametrize("case", list(CASES))
def test_fc_table_is_the_chosen_plans_fc_layers(case, tmp_path):
    """The search priced the winner's FC layers from the FC table; the Plan
    builds its FC plan anew (plan_result or Megatron's GEMMs): per block,
    their forward and backward seconds are the same."""
    inp, hw = _setup(tmp_path, case)
    plan = make_plan(inp, hw, suggest_better=False)
    fc = plan.fc
    count = fc.layers[0].layer.count_per_step
    forward = sum(
        g.estimate.total_s
        for lp in fc.layers
        for g in lp.gemms
        if g.shape.gemm_pass is GemmPass.FORWARD
    )
    backward = sum(
        g.estimate.total_s
        for lp in fc.layers
        for g in lp.gemms
        if g.shape.gemm_pass is not GemmPass.FORWARD
    )
    transposes = fc.transpose_s_per_step / count
    block = plan.block.fc
    assert isinstance(block, FcBlock)
    assert block.forward_s == pytest.approx(forward + transposes / 2, rel=1e-12)
    assert (
        block.backward_s - (plan.block.fc.backward_s - block.backward_s)
        == pytest.approx(backward + transposes / 2, rel=1e-9)
        or inp.training.overlap_tensor_backward
    )
    # the plan's training is its configuration
    t = resolved_training(inp, plan.config, plan.recompute)
    assert t.tokens_per_micro_batch == fc.layers[0].layer.tokens


def _problem(pp, v, m, fwd, bwd):
    """A pipeline problem whose chunk c runs `fwd[c]`, `bwd[c]` (one layer
    group per chunk, no ends), for the op-by-op simulator."""
    num = pp * v
    groups = tuple(
        LayerGroup(f"c{c}", 1, float(fwd[c]), float(bwd[c]), 0.0, (0.0,)) for c in range(num)
    )
    counts = tuple(tuple(tuple([1] if g == c else [0]) for g in range(num)) for c in range(num))
    problem = Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=m,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=1,
        options=(RecomputeOption("none", 0.0),),
        groups=groups,
        head=EndBlock(),
        tail=EndBlock(),
        constant_bytes=0.0,
        memory_cap_bytes=1.0,
    )
    return problem, Assignment(counts)


@pytest.mark.parametrize("case", ["gpt, a100 2 nodes, nominal", "gpt, tpu v5p 2 slices"])
def test_replay_inside_the_model_is_the_simulator(case, tmp_path):
    """Pipelined candidates' makespans (the model adds each stage's exposed
    data-parallel traffic and optimizer step to it) against the op-by-op
    simulator run on the same chunk times."""
    inp, hw = _setup(tmp_path, case)
    c, figs, _ = priced_candidates(inp, hw)
    model = inp.model
    piped = np.flatnonzero(c.pp > 1)[:12]
    p = price(c.take(piped), figs, hw, inp.training, model.num_layers, model.hidden_size)
    sub = c.take(piped)
    a = gather_figures(sub, figs)
    p2p = pipeline_send_s(sub, figs, hw, inp.training, model.hidden_size)
    f_blk, b_blk = block_seconds(a)
    for k in range(len(sub)):
        pp, v = int(sub.pp[k]), int(sub.v[k])
        m = inp.training.global_batch_sequences // (int(sub.dp[k]) * int(sub.mbs[k]))
        layers = even_split(model.num_layers, pp, v)
        mode = int(sub.recompute[k])
        fwd = layers * f_blk[k] + p2p[k]
        bwd = layers * (b_blk[k] + a["rec"][k, mode]) + p2p[k]
        fwd[0] += a["head_f"][k]
        bwd[0] += a["head_b"][k]
        fwd[-1] += a["tail_f"][k]
        bwd[-1] += a["tail_b"][k]
        problem, assignment = _problem(pp, v, m, fwd, bwd)
        assert simulate(problem, assignment).makespan_s == pytest.approx(
            float(p.makespan_s[k]), rel=1e-12
        )


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(2, 5),
    v=st.integers(1, 3),
    m_mult=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_chain_bound_never_above_the_replay(pp, v, m_mult, seed):
    """model.chain_bound_s against the exact replay for random chunk times
    (the even-split bound the search prunes with)."""
    rng = np.random.default_rng(seed)
    m = pp * m_mult
    num = pp * v
    fwd = rng.uniform(0.1, 2.0, size=(1, num))
    bwd = rng.uniform(0.1, 4.0, size=(1, num))
    problem, assignment = _problem(pp, v, m, fwd[0], bwd[0])
    exact = simulate(problem, assignment).makespan_s
    assert chain_bound_s(fwd, bwd, pp, m)[0] <= exact * (1 + 1e-12)


def test_chain_bound_is_exact_for_equal_stages():
    """1F1B with every stage's work W per micro-batch: (m + pp - 1) W."""
    fwd = np.full((1, 4), 1.0)
    bwd = np.full((1, 4), 2.0)
    assert chain_bound_s(fwd, bwd, 4, 8)[0] == pytest.approx((8 + 4 - 1) * 3.0)


@pytest.mark.parametrize("case", list(CASES))
def test_step_bound_never_above_the_model(case, tmp_path):
    """bounds.step_lower_bound (any layer split, any recomputation mix)
    against the even split of every candidate and the balanced plans the
    search finds."""
    inp, hw = _setup(tmp_path, case)
    c, figs, _ = priced_candidates(inp, hw)
    model = inp.model
    p = price(c, figs, hw, inp.training, model.num_layers, model.hidden_size)
    a = gather_figures(c, figs)
    p2p = pipeline_send_s(c, figs, hw, inp.training, model.hidden_size)
    floor = lambda params: data_parallel_floor_s(c, figs.layouts, hw, inp.training, params)  # noqa: E731
    bound = step_lower_bound(inp, c, a, p2p, hw.hbm_bytes_per_s, floor)
    assert np.all(bound <= p.step_s * (1 + 1e-12))
    # the data-parallel floor raises the bound somewhere
    assert np.any(bound > step_lower_bound(inp, c, a, p2p, hw.hbm_bytes_per_s))
    even = price(c, figs, hw, inp.training, model.num_layers, model.hidden_size, exact=False)
    assert np.all(even.step_s <= p.step_s * (1 + 1e-12))
    out = search(inp, hw)
    for e in out.ranked:
        if e.counts is None:
            continue
        i = next(j for j in range(len(c)) if c.row(j) == {**e.config})
        assert bound[i] <= e.step_s * (1 + 1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_search_bounds_before_any_fc_pricing_never_above_the_model(case, tmp_path):
    """search.bound_figures (block.fc_lower_bounds for the FC layers, the
    ends without their vocabulary collectives) through price(exact=False)
    and bounds.step_lower_bound: at or below the exact step of every
    candidate, and each mesh's FC bound at or below its FC table entry. The
    bound starts from the figures the search gives it (new_figures: a
    mixture of experts' MoE blocks counted); from empty ones it priced the
    MoE cases as dense models, leaving their experts out of the bound."""
    inp, hw = _setup(tmp_path, case)
    c, figs, table = priced_candidates(inp, hw)
    model, t = inp.model, inp.training
    cheap = bound_figures(inp, hw, c, new_figures(inp))
    for key, entry in table.entries(list(cheap.blocks)).items():
        rows, cols, mbs, cp = key
        low = fc_lower_bounds(model, t, hw, rows, cols, [mbs * (t.sequence_length // cp)])[0]
        assert low.forward_s <= entry.forward_s * (1 + 1e-12)
        assert low.backward_s <= entry.backward_s * (1 + 1e-12)
    p = price(c, figs, hw, t, model.num_layers, model.hidden_size)
    even = price(c, cheap, hw, t, model.num_layers, model.hidden_size, exact=False)
    assert np.all(even.step_s <= p.step_s * (1 + 1e-12))
    a = gather_figures(c, cheap)
    p2p = pipeline_send_s(c, cheap, hw, t, model.hidden_size)
    floor = lambda params: data_parallel_floor_s(c, cheap.layouts, hw, t, params)  # noqa: E731
    bound = step_lower_bound(inp, c, a, p2p, hw.hbm_bytes_per_s, floor)
    assert np.all(bound <= p.step_s * (1 + 1e-12))
    # the bound prunes: it is not trivially small
    assert np.median(even.step_s / p.step_s) > 0.5


def test_pinned_plan_equals_the_candidate_in_the_free_search(tmp_path):
    """A file that pins every degree is a search over one candidate: its
    step is the same candidate's step in the search over all of them."""
    inp, hw = _setup(tmp_path, "gpt, a100 2 nodes, nominal")
    c, figs, _ = priced_candidates(inp, hw)
    model = inp.model
    p = price(c, figs, hw, inp.training, model.num_layers, model.hidden_size)
    i = int(np.flatnonzero((c.pp == 2) & (c.dp == 2) & (c.mbs == 2))[0])
    row = c.row(i)
    training = pinned(
        {
            "global_batch_sequences": 64,
            "sequence_length": 2048,
            "attention": "unfused",
            "dropout": True,
            "tensor_mesh": [row["rows"], row["cols"]],
            "pipeline_parallel": row["pp"],
            "data_parallel": row["dp"],
            "micro_batch_size": row["mbs"],
            "interleave": row["v"],
            "recompute": row["recompute"],
            "zero_stage": row["zero"],
            "layer_split": "even",
        }
    )
    path = write_plan(tmp_path, GPT, training, "a100-hgx-2n", name="pinned.yaml")
    plan = make_plan(load_plan_input(path), suggest_better=False)
    assert plan.outcome.num_candidates == 1
    assert plan.step_s == pytest.approx(float(p.step_s[i]), rel=1e-12)
    assert Candidates.of([{**row, "recompute": int(c.recompute[i])}]).row(0) == row
