"""Scaling a plan's GEMMs down to sizes that run in milliseconds while
keeping everything that decides correctness: the mesh shape, the dataflow,
the variant (plain or transposed), the block size `b` and the slice count
`S`.

Each dimension shrinks to the least common multiple of what the schedule
requires of it (derivation: `cost_models.meshslice`):

- every stored matrix's rows divisible by the (logical) mesh rows and its
  columns by the mesh columns (:func:`cost_models.sharding_violation`);
- the sliced dimension a multiple of `S * b * lcm(Nr, Nc)`
  (:func:`cost_models.slice_count_violation`).

Every requirement divides the plan's own size when the plan is valid, so the
scaled size divides it too. When a layer's GEMMs carry Table 1 expressions
(`dX^T = RS(W^T, dY^T)`), the layer's three sizes T, I, O are scaled
together so that the three GEMMs act on the same X, W and dY; otherwise each
GEMM is scaled on its own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cost_models import Dataflow, MeshShape

# Shapes of the matrices of `Y = X @ W` and its gradients, as letters of
# T (tokens), I (in_features), O (out_features).
MATRIX_LETTERS: dict[str, str] = {
    "X": "TI",
    "W": "IO",
    "Y": "TO",
    "dX": "TI",
    "dW": "IO",
    "dY": "TO",
}

_NAME = r"(d?[XWY])(\^T)?"
_EXPRESSION = re.compile(rf"^\s*{_NAME}\s*=\s*(OS|LS|RS)\(\s*{_NAME}\s*,\s*{_NAME}\s*\)\s*$")


@dataclass(frozen=True)
class Term:
    """A matrix of the layer, possibly transposed (`dY^T`)."""

    name: str
    transposed: bool

    @property
    def letters(self) -> str:
        """Its shape as letters of T, I, O (rows, columns)."""
        letters = MATRIX_LETTERS[self.name]
        return letters[::-1] if self.transposed else letters


@dataclass(frozen=True)
class Expression:
    """A parsed Table 1 GEMM: `result = dataflow(left, right)`."""

    result: Term
    dataflow: Dataflow
    left: Term
    right: Term


def parse_expression(text: str | None) -> Expression | None:
    """Parse `LHS = DF(A, B)` over X, W, Y, dX, dW, dY with optional `^T`;
    None when `text` is missing or not of that form."""
    if text is None:
        return None
    match = _EXPRESSION.match(text)
    if match is None:
        return None
    r, rt, df, a, at, b, bt = match.groups()
    return Expression(
        Term(r, rt is not None), Dataflow(df), Term(a, at is not None), Term(b, bt is not None)
    )


_TWIN = {Dataflow.OS: Dataflow.OS, Dataflow.LS: Dataflow.RS, Dataflow.RS: Dataflow.LS}


def _flip(term: Term) -> Term:
    return Term(term.name, not term.transposed)


def untwin(expr: Expression) -> Expression:
    """The plain form of a transposed twin's expression.

    Derivation: the twin of `C = OS(A, B)` is `C^T = OS(B^T, A^T)`; the twin
    of `C = RS(A, B) = A^T B` is `C^T = B^T A = LS(B^T, A^T)`, and of
    `C = LS(A, B) = A B^T` it is `C^T = B A^T = RS(B^T, A^T)`. So in every
    case the plain form takes `C = C'^T`, `A = B'^T`, `B = A'^T` and the
    twin's dataflow swapped back (model.md section 3; `autotune.plan.dataflow`).
    """
    return Expression(_flip(expr.result), _TWIN[expr.dataflow], _flip(expr.right), _flip(expr.left))


def gemm_letters(expr: Expression) -> tuple[str, str, str] | None:
    """`(m, n, k)` of an expression as letters, or None when its operand
    shapes do not fit its dataflow (A `MxK`/`KxM`, B `KxN`/`NxK`)."""
    a, b, c = expr.left.letters, expr.right.letters, expr.result.letters
    m, n = c[0], c[1]
    if expr.dataflow is Dataflow.OS:
        fits = a[0] == m and b[1] == n and a[1] == b[0]
        k = a[1]
    elif expr.dataflow is Dataflow.LS:
        fits = a[0] == m and b[0] == n and a[1] == b[1]
        k = a[1]
    else:
        fits = a[1] == m and b[1] == n and a[0] == b[0]
        k = a[0]
    return (m, n, k) if fits else None


@dataclass(frozen=True)
class GemmSchedule:
    """What a GEMM's schedule needs to run: dataflow, variant, slice count."""

    dataflow: Dataflow
    transposed: bool
    num_slices: int


def dim_requirements(sched: GemmSchedule, mesh: MeshShape, block: int) -> tuple[int, int, int]:
    """The divisor each of `(m, n, k)` must be a multiple of for `sched` on
    `mesh` with block `b` (see the module docstring)."""
    logical = mesh.transposed() if sched.transposed else mesh
    r, c = logical.num_rows, logical.num_cols
    # Stored layouts (rows over ROW, columns over COL), cost_models.meshslice:
    # OS: A (m,k) B (k,n); LS: A (m,k) B (n,k); RS: A (k,m) B (k,n); C (m,n).
    if sched.dataflow is Dataflow.OS:
        req = {"m": r, "n": c, "k": math.lcm(r, c)}
    elif sched.dataflow is Dataflow.LS:
        req = {"m": r, "n": math.lcm(r, c), "k": c}
    else:
        req = {"m": math.lcm(r, c), "n": c, "k": r}
    unit = sched.num_slices * block * math.lcm(r, c)
    sliced = {Dataflow.OS: "k", Dataflow.LS: "n", Dataflow.RS: "m"}[sched.dataflow]
    req[sliced] = math.lcm(req[sliced], unit)
    return req["m"], req["n"], req["k"]


def scale_gemm(sched: GemmSchedule, mesh: MeshShape, block: int) -> tuple[int, int, int]:
    """The smallest `(m, n, k)` on which `sched` runs on `mesh`."""
    return dim_requirements(sched, mesh, block)


def scale_layer(
    gemms: list[tuple[GemmSchedule, tuple[str, str, str]]], mesh: MeshShape, block: int
) -> dict[str, int]:
    """The smallest T, I, O on which every GEMM of a layer runs, given each
    GEMM's schedule and its `(m, n, k)` letters."""
    size = {"T": 1, "I": 1, "O": 1}
    for sched, letters in gemms:
        for letter, need in zip(letters, dim_requirements(sched, mesh, block), strict=True):
            size[letter] = math.lcm(size[letter], need)
    return size
