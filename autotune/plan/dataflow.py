"""Phase 1 building blocks: Table 1 of the paper, the transposed twins, the
size rule, and the layout (sharding) each choice implies.

Layout state of an activation `(tokens, features)`: NORMAL puts tokens on the
ROW axis and features on the COL axis (seed 000 section 3.2.1: `B*S` over
mesh rows, `H*D` over mesh columns); TRANSPOSED swaps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from autotune.plan.layers import FCLayer
from cost_models import Dataflow


class Stationary(str, Enum):
    """Which matrix of `Y = X @ W` (and its gradient) stays on its chip."""

    X = "X"
    W = "W"
    Y = "Y"


class GemmPass(str, Enum):
    """The three GEMMs of training a linear layer."""

    FORWARD = "forward"
    BACKWARD_DATA = "backward_data"
    BACKWARD_WEIGHT = "backward_weight"


NORMAL = False
TRANSPOSED = True


@dataclass(frozen=True)
class GemmShape:
    """One GEMM of a layer under a dataflow choice.

    `dataflow`, `m`, `n`, `k` and `transposed` are the logical form used by
    the cost model (`transposed` runs the plain schedule on the transposed
    mesh). `physical_*` is the same computation as it executes on the
    untransposed mesh: the twin of `C = OS(A, B)` is `C^T = OS(B^T, A^T)`,
    and the twins of LS and RS are RS and LS with M and N exchanged.
    """

    gemm_pass: GemmPass
    dataflow: Dataflow
    m: int
    n: int
    k: int
    transposed: bool
    expression: str
    physical_dataflow: Dataflow
    physical_m: int
    physical_n: int
    physical_k: int


# Table 1 (seed 000 section 3.2.1; model.md section 3): per stationary matrix,
# the (pass, dataflow, plain expression, twin expression, M, N, K) of each
# GEMM, with M/N/K as letters of T (tokens), I (in), O (out). The twin
# expressions are derived by transposing both sides of the plain one.
_TABLE1: dict[Stationary, tuple[tuple[GemmPass, Dataflow, str, str, str], ...]] = {
    Stationary.Y: (
        (GemmPass.FORWARD, Dataflow.OS, "Y = OS(X, W)", "Y^T = OS(W^T, X^T)", "TOI"),
        (GemmPass.BACKWARD_DATA, Dataflow.LS, "dX = LS(dY, W)", "dX^T = RS(W^T, dY^T)", "TIO"),
        (GemmPass.BACKWARD_WEIGHT, Dataflow.RS, "dW = RS(X, dY)", "dW^T = LS(dY^T, X^T)", "IOT"),
    ),
    Stationary.X: (
        (GemmPass.FORWARD, Dataflow.LS, "Y = LS(X, W^T)", "Y^T = RS(W, X^T)", "TOI"),
        (GemmPass.BACKWARD_DATA, Dataflow.OS, "dX = OS(dY, W^T)", "dX^T = OS(W, dY^T)", "TIO"),
        (GemmPass.BACKWARD_WEIGHT, Dataflow.RS, "dW^T = RS(dY, X)", "dW = LS(X^T, dY^T)", "OIT"),
    ),
    Stationary.W: (
        (GemmPass.FORWARD, Dataflow.RS, "Y = RS(X^T, W)", "Y^T = LS(W^T, X)", "TOI"),
        (GemmPass.BACKWARD_DATA, Dataflow.LS, "dX^T = LS(W, dY)", "dX = RS(dY^T, W^T)", "ITO"),
        (GemmPass.BACKWARD_WEIGHT, Dataflow.OS, "dW = OS(X^T, dY)", "dW^T = OS(dY^T, X)", "IOT"),
    ),
}

_TWIN_DATAFLOW = {Dataflow.OS: Dataflow.OS, Dataflow.LS: Dataflow.RS, Dataflow.RS: Dataflow.LS}


def table1(
    layer: FCLayer, stationary: Stationary, transposed: bool = False
) -> tuple[GemmShape, ...]:
    """The forward, backward-data and backward-weight GEMMs of `layer` with
    `stationary` kept in place (Table 1), in the plain or transposed variant.

    Every matrix and its gradient move in the same direction in all three
    GEMMs and nothing is transposed at run time (seed 000 section 3.2.1).
    """
    size = {"T": layer.tokens, "I": layer.in_features, "O": layer.out_features}
    shapes = []
    for gemm_pass, dataflow, plain, twin, letters in _TABLE1[stationary]:
        m, n, k = (size[c] for c in letters)
        if transposed:
            phys = (_TWIN_DATAFLOW[dataflow], n, m, k)
        else:
            phys = (dataflow, m, n, k)
        shapes.append(
            GemmShape(
                gemm_pass=gemm_pass,
                dataflow=dataflow,
                m=m,
                n=n,
                k=k,
                transposed=transposed,
                expression=twin if transposed else plain,
                physical_dataflow=phys[0],
                physical_m=phys[1],
                physical_n=phys[2],
                physical_k=phys[3],
            )
        )
    return tuple(shapes)


def size_rule(layer: FCLayer) -> Stationary:
    """The paper's phase-1 rule: keep the largest of X (`T x I`), W
    (`I x O`), Y (`T x O`) stationary (seed 000 section 3.2.1, Table 1).

    Y when `O > I` and `T >= I`; X when `I >= O` and `T >= O`; W otherwise.
    A tie between X and Y (I == O) goes to X, as in the authors' code.
    """
    t, i, o = layer.tokens, layer.in_features, layer.out_features
    if o > i and t >= i:
        return Stationary.Y
    if i >= o and t >= o:
        return Stationary.X
    return Stationary.W


def input_state(stationary: Stationary, transposed: bool) -> bool:
    """Layout the layer needs its input X in (True = TRANSPOSED).

    Derivation from Table 1: OS and LS read X as stored (`A = X`), so the
    plain Y- and X-stationary variants need X NORMAL; the W-stationary plain
    variant reads `X^T` (`Y = RS(X^T, W)`), i.e. X TRANSPOSED. The twin
    needs the opposite.
    """
    plain_needs = TRANSPOSED if stationary is Stationary.W else NORMAL
    return plain_needs != transposed


def output_state(stationary: Stationary, transposed: bool) -> bool:
    """Layout the layer produces Y in (True = TRANSPOSED).

    Every plain variant produces Y NORMAL (Y is the product `C` of rows T,
    or `Y = RS(X^T, W)`); the twin produces `Y^T`. So Y- and X-stationary
    layers keep their input's layout and W-stationary layers flip it, as in
    the authors' reference code.
    """
    return transposed


def variant_for_input(stationary: Stationary, arriving: bool) -> bool:
    """The variant (True = transposed twin) that accepts an input arriving in
    layout `arriving` without a transpose: the paper's heuristic "take the
    plain variant unless the input would need a transpose" (seed 000 section
    3.2.1). model.md words it as "unless the input arrives transposed",
    which is right for OS/LS layers only: a W-stationary plain layer needs
    its input transposed, so it takes the twin when the input is NORMAL."""
    return input_state(stationary, False) != arriving


@dataclass(frozen=True)
class TensorLayout:
    """How one logical tensor is sharded over the (row, col) mesh."""

    name: str
    shape: tuple[int, int]
    dims: tuple[str, str]
    partition_spec: tuple[str, str]
    placements: tuple[str, str]
    stored_transposed: bool


def _layout(
    name: str, shape: tuple[int, int], dims: tuple[str, str], transposed: bool
) -> TensorLayout:
    """NORMAL: dim 0 over the row axis, dim 1 over the col axis (JAX
    `PartitionSpec("row", "col")`, PyTorch DeviceMesh placements
    `[Shard(0), Shard(1)]` for mesh dims (row, col)); TRANSPOSED swaps."""
    if transposed:
        return TensorLayout(name, shape, dims, ("col", "row"), ("Shard(1)", "Shard(0)"), True)
    return TensorLayout(name, shape, dims, ("row", "col"), ("Shard(0)", "Shard(1)"), False)


def tensor_layouts(
    layer: FCLayer, stationary: Stationary, transposed: bool
) -> tuple[TensorLayout, ...]:
    """Sharding of X, W and Y implied by the dataflow (seed 000 section
    3.2.1: a matrix's rows go to mesh rows, its columns to mesh columns).

    W is stored as W in the plain Y- and W-stationary variants and as `W^T`
    in the plain X-stationary one (`Y = LS(X, W^T)`); twins flip it.
    """
    weight_t = (stationary is Stationary.X) != transposed
    return (
        _layout(
            "input",
            (layer.tokens, layer.in_features),
            ("tokens", "in_features"),
            input_state(stationary, transposed),
        ),
        _layout(
            "weight",
            (layer.in_features, layer.out_features),
            ("in_features", "out_features"),
            weight_t,
        ),
        _layout(
            "output",
            (layer.tokens, layer.out_features),
            ("tokens", "out_features"),
            output_state(stationary, transposed),
        ),
    )
