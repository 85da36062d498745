"""Phase 1: choose every FC layer's stationary matrix and variant.

A block is two residual branches (attention, feed-forward). The residual
stream keeps one layout `s0` throughout the model; inside a branch each FC
layer takes the variant that accepts its input's layout (so FC inputs never
need a transpose), and a transpose is charged where two tensors must agree
but do not: the branch output at the residual add, and the gate/up outputs of
a SwiGLU block at their element-wise product (the authors' reference code
inserts transposes at adds in the same way).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune.plan.dataflow import (
    NORMAL,
    TRANSPOSED,
    Stationary,
    output_state,
    size_rule,
    variant_for_input,
)
from autotune.plan.layers import ATTN_OUT, FFN_DOWN, FFN_GATE, FFN_UP, QKV, FCLayer
from autotune.specs.plan_input import DataflowPolicy


@dataclass(frozen=True)
class Branch:
    """A residual branch: `first` layers read the branch input (in
    parallel), their outputs are joined element-wise (or feed the attention
    core), `second` reads the result and its output is added back."""

    name: str
    first: tuple[int, ...]
    second: int
    is_attention: bool


@dataclass(frozen=True)
class Transpose:
    """A transpose of a `rows x cols` activation, once per block (and again
    for its gradient in the backward pass)."""

    where: str
    rows: int
    cols: int


@dataclass(frozen=True)
class Selection:
    """A dataflow choice for every layer of a block, with the transposes it
    forces and the cost the selector assigned to it."""

    residual_state: bool
    choices: tuple[tuple[Stationary, bool], ...]  # per layer: (stationary, transposed)
    transposes: tuple[Transpose, ...]
    attention_state: bool
    cost_s: float


def block_branches(layers: Sequence[FCLayer]) -> tuple[Branch, ...]:
    """The attention and feed-forward branches of a block's FC layers (a
    mixture-of-experts block without shared experts plans attention only)."""
    index = {layer.name: i for i, layer in enumerate(layers)}
    attention = Branch("attention", (index[QKV],), index[ATTN_OUT], True)
    if FFN_DOWN not in index:
        return (attention,)
    first = (index[FFN_GATE], index[FFN_UP]) if FFN_GATE in index else (index[FFN_UP],)
    ffn = Branch("ffn", first, index[FFN_DOWN], False)
    return attention, ffn


# layer option cost: (layer index, stationary, transposed) -> seconds per
# block instance, or None when infeasible on this mesh.
LayerCost = Callable[[int, Stationary, bool], float | None]
# attention-core check: layout after QKV -> reason it cannot run locally, or None
AttentionCheck = Callable[[bool], str | None]


def _branch(
    branch: Branch,
    stationaries: Sequence[Stationary],
    s0: bool,
    layers: Sequence[FCLayer],
) -> tuple[dict[int, tuple[Stationary, bool]], list[Transpose], bool]:
    """Variants, transposes and the layout reaching the attention core for
    one branch with the given stationaries (first layers..., second)."""
    choices: dict[int, tuple[Stationary, bool]] = {}
    transposes: list[Transpose] = []
    out_states = []
    for idx, st in zip(branch.first, stationaries[:-1], strict=True):
        variant = variant_for_input(st, s0)
        choices[idx] = (st, variant)
        out_states.append(output_state(st, variant))
    mid = out_states[-1]
    for idx, state in zip(branch.first[:-1], out_states[:-1], strict=True):
        if state != mid:
            layer = layers[idx]
            transposes.append(
                Transpose(
                    f"{branch.name}: {layer.name} output before the element-wise product",
                    layer.tokens,
                    layer.out_features,
                )
            )
    st2 = stationaries[-1]
    variant2 = variant_for_input(st2, mid)
    choices[branch.second] = (st2, variant2)
    if output_state(st2, variant2) != s0:
        layer = layers[branch.second]
        transposes.append(
            Transpose(
                f"{branch.name}: {layer.name} output before the residual add",
                layer.tokens,
                layer.out_features,
            )
        )
    return choices, transposes, mid


def select(
    policy: DataflowPolicy,
    layers: Sequence[FCLayer],
    layer_cost: LayerCost,
    transpose_cost_s: Callable[[Transpose], float],
    attention_check: AttentionCheck,
) -> Selection | str:
    """The block's dataflow choice under `policy`, or the reason none is
    feasible on this mesh.

    size-rule, always-w and always-y fix the stationaries (the paper's rule,
    or W or Y everywhere) with the residual stream NORMAL and the heuristic variants.
    cost prices every stationary of every layer and both residual layouts,
    charging forced transposes (forward and backward), and keeps the
    cheapest: a superset of the size rule's choice, so never worse.
    """
    branches = block_branches(layers)
    if policy is DataflowPolicy.COST:
        candidates_s0 = (NORMAL, TRANSPOSED)
    else:
        candidates_s0 = (NORMAL,)

    def fixed(idx: int) -> tuple[Stationary, ...]:
        if policy is DataflowPolicy.SIZE_RULE:
            return (size_rule(layers[idx]),)
        if policy is DataflowPolicy.ALWAYS_W:
            return (Stationary.W,)
        if policy is DataflowPolicy.ALWAYS_Y:
            return (Stationary.Y,)
        return tuple(Stationary)

    best: Selection | None = None
    reason = "no dataflow choice is feasible"
    for s0 in candidates_s0:
        choices: dict[int, tuple[Stationary, bool]] = {}
        transposes: list[Transpose] = []
        total = 0.0
        attention_state = s0
        ok = True
        for branch in branches:
            members = (*branch.first, branch.second)
            best_branch = None
            for stationaries in itertools.product(*(fixed(i) for i in members)):
                ch, tr, mid = _branch(branch, stationaries, s0, layers)
                if branch.is_attention:
                    why = attention_check(mid)
                    if why is not None:
                        reason = why
                        continue
                cost = 0.0
                for idx, (st, variant) in ch.items():
                    c = layer_cost(idx, st, variant)
                    if c is None:
                        cost = None
                        reason = f"{layers[idx].name}: no valid {st.value}-stationary sharding"
                        break
                    cost += c
                if cost is None:
                    continue
                cost += sum(2.0 * transpose_cost_s(t) for t in tr)
                if cost == float("inf"):
                    reason = "a needed transpose cannot be priced (no send_recv calibration)"
                    continue
                if best_branch is None or cost < best_branch[0]:
                    best_branch = (cost, ch, tr, mid)
            if best_branch is None:
                ok = False
                break
            total += best_branch[0]
            choices.update(best_branch[1])
            transposes.extend(best_branch[2])
            if branch.is_attention:
                attention_state = best_branch[3]
        if not ok:
            continue
        sel = Selection(
            residual_state=s0,
            choices=tuple(choices[i] for i in range(len(layers))),
            transposes=tuple(transposes),
            attention_state=attention_state,
            cost_s=total,
        )
        if best is None or sel.cost_s < best.cost_s:
            best = sel
    return best if best is not None else reason
