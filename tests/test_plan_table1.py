"""Table 1 (seed 000 section 3.2.1; model.md section 3): the three stationary
cases, their transposed twins, the size rule and the layouts they imply."""

from __future__ import annotations

import pytest

from autotune.plan.dataflow import (
    GemmPass,
    Stationary,
    input_state,
    output_state,
    size_rule,
    table1,
    tensor_layouts,
    variant_for_input,
)
from autotune.plan.layers import FCLayer
from cost_models import Dataflow

OS, LS, RS = Dataflow.OS, Dataflow.LS, Dataflow.RS
LAYER = FCLayer("fc", in_features=300, out_features=500, tokens=700, count_per_step=1)
T, I, O = 700, 300, 500

# (stationary, [(pass, dataflow, M, N, K, plain expression)]) straight from Table 1
PLAIN = {
    Stationary.Y: [
        (OS, (T, O, I), "Y = OS(X, W)"),
        (LS, (T, I, O), "dX = LS(dY, W)"),
        (RS, (I, O, T), "dW = RS(X, dY)"),
    ],
    Stationary.X: [
        (LS, (T, O, I), "Y = LS(X, W^T)"),
        (OS, (T, I, O), "dX = OS(dY, W^T)"),
        (RS, (O, I, T), "dW^T = RS(dY, X)"),
    ],
    Stationary.W: [
        (RS, (T, O, I), "Y = RS(X^T, W)"),
        (LS, (I, T, O), "dX^T = LS(W, dY)"),
        (OS, (I, O, T), "dW = OS(X^T, dY)"),
    ],
}
# Twins: C^T = OS(B^T, A^T) keeps OS; LS <-> RS; the executed GEMM has M and N swapped.
TWIN = {
    Stationary.Y: ["Y^T = OS(W^T, X^T)", "dX^T = RS(W^T, dY^T)", "dW^T = LS(dY^T, X^T)"],
    Stationary.X: ["Y^T = RS(W, X^T)", "dX^T = OS(W, dY^T)", "dW = LS(X^T, dY^T)"],
    Stationary.W: ["Y^T = LS(W^T, X)", "dX = RS(dY^T, W^T)", "dW^T = OS(dY^T, X)"],
}
SWAP = {OS: OS, LS: RS, RS: LS}


@pytest.mark.parametrize("stationary", list(Stationary))
def test_plain_rows(stationary):
    gemms = table1(LAYER, stationary, transposed=False)
    assert [g.gemm_pass for g in gemms] == list(GemmPass)
    for g, (df, mnk, expr) in zip(gemms, PLAIN[stationary], strict=True):
        assert (g.dataflow, (g.m, g.n, g.k), g.expression) == (df, mnk, expr)
        assert (g.physical_dataflow, g.physical_m, g.physical_n, g.physical_k) == (df, *mnk)
        assert g.transposed is False


@pytest.mark.parametrize("stationary", list(Stationary))
def test_transposed_twins(stationary):
    gemms = table1(LAYER, stationary, transposed=True)
    for g, (df, (m, n, k), _), expr in zip(gemms, PLAIN[stationary], TWIN[stationary], strict=True):
        assert g.transposed is True and g.dataflow is df and (g.m, g.n, g.k) == (m, n, k)
        assert g.expression == expr
        assert (g.physical_dataflow, g.physical_m, g.physical_n, g.physical_k) == (
            SWAP[df],
            n,
            m,
            k,
        )


@pytest.mark.parametrize(
    ("tokens", "i", "o", "expected"),
    [
        (262144, 12288, 36864, Stationary.Y),  # GPT-3 QKV: O > I, T >= I
        (262144, 12288, 12288, Stationary.X),  # attention output: tie I == O goes to X
        (262144, 12288, 49152, Stationary.Y),  # FFN up
        (262144, 49152, 12288, Stationary.X),  # FFN down
        (4096, 12288, 49152, Stationary.W),  # few tokens: the weight is the largest
        (8192, 49152, 12288, Stationary.W),  # I >= O but T < O
    ],
)
def test_size_rule(tokens, i, o, expected):
    assert size_rule(FCLayer("fc", i, o, tokens, 1)) is expected


@pytest.mark.parametrize(
    ("stationary", "transposed", "needs", "makes"),
    [
        (Stationary.Y, False, False, False),  # OS/LS read X as stored and write Y as stored
        (Stationary.X, False, False, False),
        (Stationary.W, False, True, False),  # Y = RS(X^T, W): reads X transposed
        (Stationary.Y, True, True, True),
        (Stationary.X, True, True, True),
        (Stationary.W, True, False, True),  # W-stationary layers flip the layout
    ],
)
def test_layout_states(stationary, transposed, needs, makes):
    assert input_state(stationary, transposed) is needs
    assert output_state(stationary, transposed) is makes
    assert variant_for_input(stationary, needs) is transposed


def test_weight_layouts():
    # Y-stationary plain stores W (I over rows); X-stationary plain stores W^T
    w = {st: tensor_layouts(LAYER, st, False)[1] for st in Stationary}
    assert w[Stationary.Y].partition_spec == ("row", "col")
    assert w[Stationary.X].partition_spec == ("col", "row")
    assert w[Stationary.W].partition_spec == ("row", "col")
    x_in = tensor_layouts(LAYER, Stationary.W, False)[0]
    assert x_in.placements == ("Shard(1)", "Shard(0)") and x_in.stored_transposed
