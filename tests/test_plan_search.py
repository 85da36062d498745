"""Phase 2 against brute force, and planner invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.hardware.calibration import comm_model, compute_model
from autotune.loading import load_calibration
from autotune.plan.dataflow import Stationary, size_rule, table1
from autotune.plan.layers import fc_layers
from autotune.plan.search import plan
from autotune.specs import ClusterSpec, ModelSpec, PlanInput, SearchSpec, TrainingSpec
from autotune.specs.plan_input import DataflowPolicy, SliceScope
from cost_models import (
    MeshShape,
    meshslice_estimate,
    slice_count_violation,
    sliced_dim,
    transpose_cost,
)

CAL, _ = load_calibration("tpu-v4")


def small_input(
    scope: str = "gemm", ffn_kind: str = "gelu", batch: int = 8, chips: int = 8
) -> PlanInput:
    return PlanInput(
        model=ModelSpec(
            name="tiny",
            num_layers=2,
            hidden_size=64,
            num_heads=8,
            head_dim=8,
            ffn_size=256,
            ffn_kind=ffn_kind,
        ),
        training=TrainingSpec(global_batch_sequences=batch, sequence_length=32),
        cluster=ClusterSpec(name="toy", num_chips=chips, peak_tflops_per_s={"bf16": 275.0}),
        calibration=CAL,
        search=SearchSpec(slice_count_per=scope),
    )


def _best_gemm_brute(shape, mesh, block):
    """Scan every S from 1 to the sliced dimension; keep the fastest valid."""
    m = mesh.transposed() if shape.transposed else mesh
    best = None
    for s in range(1, sliced_dim(shape.dataflow, shape.m, shape.n, shape.k) + 1):
        if slice_count_violation(shape.dataflow, shape.m, shape.n, shape.k, m, block, s):
            continue
        t = meshslice_estimate(
            shape.dataflow,
            shape.m,
            shape.n,
            shape.k,
            mesh,
            s,
            2,
            comm_model(CAL),
            compute_model(CAL),
            shape.transposed,
        ).total_s
        if best is None or t < best[0]:
            best = (t, s)
    return best


def _states(st_, transposed):
    """Independent restatement of the layout rules: (needs, makes)."""
    plain_needs = st_ is Stationary.W
    return (plain_needs != transposed), transposed


def brute_force(inp: PlanInput, policy: DataflowPolicy):
    layers = fc_layers(inp.model, inp.training)
    count = layers[0].count_per_step
    results = {}
    for r in range(1, inp.cluster.num_chips + 1):
        if inp.cluster.num_chips % r:
            continue
        mesh = MeshShape(r, inp.cluster.num_chips // r)
        options = {
            Stationary.Y: [Stationary.Y],
            Stationary.X: [Stationary.X],
            Stationary.W: [Stationary.W],
        }
        per_layer = []
        for layer in layers:
            if policy is DataflowPolicy.COST:
                per_layer.append(list(Stationary))
            elif policy is DataflowPolicy.SIZE_RULE:
                per_layer.append(options[size_rule(layer)])
            elif policy is DataflowPolicy.ALWAYS_Y:
                per_layer.append([Stationary.Y])
            else:
                per_layer.append([Stationary.W])
        best = None
        for s0 in (False, True) if policy is DataflowPolicy.COST else (False,):
            for combo in itertools.product(*per_layer):
                # the layout chain: qkv -> attn_out -> add; ffn_up -> ffn_down -> add
                total, ok = 0.0, True
                transposes = 0
                for first, second in ((0, 1), (2, 3)):
                    v1 = _states(combo[first], False)[0] != s0
                    mid = v1
                    v2 = _states(combo[second], False)[0] != mid
                    if v2 != s0:
                        transposes += 1
                    for idx, variant in ((first, v1), (second, v2)):
                        for shape in table1(layers[idx], combo[idx], variant):
                            g = _best_gemm_brute(shape, mesh, inp.cluster.block_size)
                            if g is None:
                                ok = False
                            else:
                                total += g[0]
                if not ok:
                    continue
                tr = transpose_cost(
                    layers[0].tokens, inp.model.hidden_size, 2, mesh, comm_model(CAL)
                ).total_s
                total += transposes * 2 * tr
                if best is None or total < best:
                    best = total
        results[mesh] = None if best is None else best * count
    return results


@pytest.mark.parametrize("policy", list(DataflowPolicy))
def test_search_equals_brute_force(policy):
    inp = small_input()
    result = plan(inp, policy)
    brute = brute_force(inp, policy)
    feasible = {m: t for m, t in brute.items() if t is not None}
    best_mesh = min(feasible, key=lambda m: (feasible[m], m.num_rows))
    assert result.mesh == best_mesh
    assert result.step_fc_time_s == pytest.approx(feasible[best_mesh], rel=1e-9)
    for cand in result.candidates:
        assert cand.feasible == (brute[cand.mesh] is not None)
        if cand.feasible:
            assert cand.step_fc_time_s == pytest.approx(brute[cand.mesh], rel=1e-9)


def test_layer_scope_brute_force():
    # one S shared by a layer's 3 GEMMs: brute force over the common S
    inp = small_input(scope="layer")
    result = plan(inp, DataflowPolicy.SIZE_RULE)
    ctx_comm, ctx_comp = comm_model(CAL), compute_model(CAL)
    total = 0.0
    for lp in result.layers:
        shapes = [g.shape for g in lp.gemms]
        best = None
        for s in range(1, 4096):
            if any(
                slice_count_violation(sh.dataflow, sh.m, sh.n, sh.k, result.mesh, 8, s)
                for sh in shapes
            ):
                continue
            t = sum(
                meshslice_estimate(
                    sh.dataflow,
                    sh.m,
                    sh.n,
                    sh.k,
                    result.mesh,
                    s,
                    2,
                    ctx_comm,
                    ctx_comp,
                    sh.transposed,
                ).total_s
                for sh in shapes
            )
            best = t if best is None else min(best, t)
        total += best * lp.layer.count_per_step
        assert len({g.num_slices for g in lp.gemms}) == 1
    assert result.step_fc_time_s == pytest.approx(total, rel=1e-9)


def test_chosen_mesh_uses_every_chip():
    inp = small_input()
    result = plan(inp)
    assert result.mesh.num_rows * result.mesh.num_cols == inp.cluster.num_chips


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.sampled_from([8, 16, 64]),
    chips=st.sampled_from([4, 8, 16]),
    ffn_kind=st.sampled_from(["gelu", "swiglu"]),
    scope=st.sampled_from(["gemm", "layer"]),
)
def test_cost_policy_never_worse_than_size_rule(batch, chips, ffn_kind, scope):
    inp = small_input(scope=scope, ffn_kind=ffn_kind, batch=batch, chips=chips)
    cost = plan(inp, DataflowPolicy.COST)
    rule = plan(inp, DataflowPolicy.SIZE_RULE)
    assert cost.step_fc_time_s <= rule.step_fc_time_s * (1 + 1e-12)
    for r in (cost, rule):
        assert 0 < r.flop_utilization <= 1
        assert r.breakdown_per_step.total_s >= r.breakdown_per_step.compute_s
        feasible = [c.step_fc_time_s for c in r.candidates if c.feasible]
        assert feasible == sorted(feasible)
        assert r.step_fc_time_s == pytest.approx(feasible[0])


def test_gemm_scope_never_worse_than_layer_scope():
    per_gemm = plan(small_input(scope="gemm"))
    per_layer = plan(small_input(scope="layer"))
    assert per_gemm.step_fc_time_s <= per_layer.step_fc_time_s * (1 + 1e-12)
    assert SliceScope("layer") is SliceScope.LAYER
