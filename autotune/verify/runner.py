"""`meshtune verify`: execute every GEMM of a plan, scaled down, on an
emulated (NumPy) or real (JAX) mesh and check it against a plain matmul.

For each layer the forward, backward-data and backward-weight GEMMs run
with the plan's mesh shape, dataflow, variant, block size and slice count.
When the GEMMs carry Table 1 expressions, one X, W and dY (random, seeded)
feed all three and each result is compared with `Y = X @ W`,
`dX = dY @ W^T` or `dW = X^T @ dY`: this checks the slicing *and* the
dataflow assignment. The NumPy backend also counts the bytes every chip
sent per mesh axis and compares them with `cost_models.collective_calls`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.errors import InputError
from autotune.verify.algorithms import (
    ScheduleError,
    check_meshslice,
    operand_shapes,
    reference_product,
    run_meshslice,
)
from autotune.verify.mesh import Traffic
from autotune.verify.plan_file import GemmPart, LayerPart, PlanPart
from autotune.verify.scale import (
    Expression,
    GemmSchedule,
    Term,
    gemm_letters,
    parse_expression,
    scale_gemm,
    scale_layer,
    untwin,
)
from cost_models import Axis, Dataflow, MeshShape, collective_calls, valid_slice_counts

# float64 products of these sizes agree with a plain matmul to ~1e-15; the
# bound leaves room for the different summation order of the reductions.
FLOAT64_TOLERANCE = 1e-10
FLOAT32_TOLERANCE = 1e-4

# run(dataflow, a, b, mesh, num_slices, block, transposed) -> (C, traffic or None)
Engine = Callable[
    [Dataflow, np.ndarray, np.ndarray, MeshShape, int, int, bool],
    tuple[np.ndarray, Traffic | None],
]


def numpy_engine(
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    mesh: MeshShape,
    num_slices: int,
    block: int,
    transposed: bool,
) -> tuple[np.ndarray, Traffic]:
    """MeshSlice on the NumPy mesh emulator."""
    res = run_meshslice(dataflow, a, b, mesh, num_slices, block, transposed)
    return res.output, res.traffic


@dataclass(frozen=True)
class GemmCheck:
    """The outcome of running one GEMM of the plan."""

    layer: str
    gemm_pass: str
    expression: str | None
    dataflow: str
    transposed: bool
    num_slices: int
    plan_mnk: tuple[int, int, int]
    run_mnk: tuple[int, int, int]
    max_relative_error: float
    tolerance: float
    bytes_per_chip: dict[str, float] | None
    model_bytes_per_chip: dict[str, float]
    ok: bool
    reason: str | None

    @property
    def bytes_match(self) -> bool | None:
        """Whether the emulated bytes equal the model's (None: not counted)."""
        if self.bytes_per_chip is None:
            return None
        return self.bytes_per_chip == self.model_bytes_per_chip


@dataclass(frozen=True)
class VerifyResult:
    """Every GEMM check of one plan."""

    plan_file: str
    backend: str
    mesh: MeshShape
    block_size: int
    dtype: str
    checks: tuple[GemmCheck, ...]

    @property
    def ok(self) -> bool:
        """All GEMMs matched (values and, where counted, bytes)."""
        return all(c.ok for c in self.checks)

    @property
    def worst_relative_error(self) -> float:
        """The largest relative error over every GEMM."""
        return max(c.max_relative_error for c in self.checks)


MAX_EMULATED_ELEMENTS = 2**26  # matrix elements of one scaled-down layer (512 MiB in float64)


def _check_emulated_size(layer: LayerPart, elements: int, file: str) -> None:
    """Refuse a layer whose scaled-down matrices would not fit in memory."""
    if elements > MAX_EMULATED_ELEMENTS:
        raise InputError(
            f"{layer.name}: the scaled-down GEMMs need {elements} matrix elements, more than "
            f"the {MAX_EMULATED_ELEMENTS} verify runs",
            file=file,
            field="layers",
            fix="verify a plan with smaller slice counts, block size or mesh",
        )


def validate_plan(plan: PlanPart, file: str) -> None:
    """Refuse, before running anything, a GEMM whose matrices do not shard
    over the mesh or whose slice count is invalid for the plan's own sizes."""
    mesh = MeshShape(plan.mesh.num_rows, plan.mesh.num_cols)
    block = plan.mesh.block_size
    for li, layer in enumerate(plan.layers):
        for gi, g in enumerate(layer.gemms):
            where = f"layers[{li}].gemms[{gi}]"
            df = Dataflow(g.dataflow)
            try:
                check_meshslice(df, g.m, g.n, g.k, mesh, 1, block, g.transposed)
            except ScheduleError as exc:
                raise InputError(
                    f"{layer.name} {g.gemm_pass}: {exc}",
                    file=file,
                    field=f"{where}.m/n/k",
                    value=[g.m, g.n, g.k],
                    fix="regenerate the plan with `meshtune plan --out`",
                ) from None
            try:
                check_meshslice(df, g.m, g.n, g.k, mesh, g.num_slices, block, g.transposed)
            except ScheduleError as exc:
                logical = mesh.transposed() if g.transposed else mesh
                valid = valid_slice_counts(df, g.m, g.n, g.k, logical, block)
                raise InputError(
                    f"{layer.name} {g.gemm_pass}: invalid slice count: {exc}",
                    file=file,
                    field=f"{where}.num_slices",
                    value=g.num_slices,
                    fix=f"use one of {valid}",
                ) from None


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return diff / scale if scale > 0 else diff


def _model_bytes(
    g: GemmPart, mnk: tuple[int, int, int], mesh: MeshShape, element_bytes: int
) -> dict[str, float]:
    calls = collective_calls(
        Dataflow(g.dataflow), *mnk, mesh, g.num_slices, element_bytes, g.transposed
    )
    return {
        ax.value: float(sum(c.bytes_sent_per_chip for c in calls if c.axis is ax)) for ax in Axis
    }


def _plain_expression(layer: LayerPart, g: GemmPart) -> tuple[Expression | None, str | None]:
    """The GEMM's expression in its plain (logical) form, whose operands the
    logical schedule takes, or why it disagrees with the plan's dataflow and
    m, n, k. A transposed GEMM's expression is its twin (the computation on
    the untransposed mesh, `executed_as`); the plain form is also accepted."""
    if g.expression is None:
        return None, None
    expr = parse_expression(g.expression)
    if expr is None:
        return None, f"expression {g.expression!r} is not of the form `C = DF(A, B)`"
    sizes = {"T": layer.tokens, "I": layer.in_features, "O": layer.out_features}
    forms = [untwin(expr), expr] if g.transposed else [expr]
    for form in forms:
        letters = gemm_letters(form)
        if form.dataflow.value != g.dataflow or letters is None:
            continue
        implied = tuple(sizes[c] for c in letters)
        if implied != (g.m, g.n, g.k):
            return None, (
                f"expression {g.expression!r} implies m,n,k = {implied}, not {(g.m, g.n, g.k)}"
            )
        return form, None
    variant = "transposed " if g.transposed else ""
    return None, f"expression {g.expression!r} does not fit {variant}dataflow {g.dataflow}"


def _layer_plan(layer: LayerPart) -> list[Expression] | None:
    """Each GEMM's plain expression when every GEMM has one that agrees with
    the plan's dataflow and m, n, k; else None."""
    out = []
    for g in layer.gemms:
        form, _ = _plain_expression(layer, g)
        if form is None:
            return None
        out.append(form)
    return out


def _operand(term: Term, matrices: dict[str, np.ndarray]) -> np.ndarray:
    mat = matrices[term.name]
    return np.ascontiguousarray(mat.T) if term.transposed else mat


class Verifier:
    """Runs a plan's GEMMs on one engine and collects `GemmCheck`s."""

    def __init__(
        self, plan: PlanPart, engine: Engine, dtype: type = np.float64, file: str | None = None
    ) -> None:
        self.plan = plan
        self.file = file
        self.engine = engine
        self.dtype = np.dtype(dtype)
        self.mesh = MeshShape(plan.mesh.num_rows, plan.mesh.num_cols)
        self.block = plan.mesh.block_size
        self.tolerance = FLOAT64_TOLERANCE if self.dtype == np.float64 else FLOAT32_TOLERANCE
        self.rng = np.random.default_rng(0)

    def _check(
        self,
        layer: LayerPart,
        g: GemmPart,
        a: np.ndarray,
        b: np.ndarray,
        want: np.ndarray,
        mnk: tuple[int, int, int],
        problem: str | None = None,
    ) -> GemmCheck:
        df = Dataflow(g.dataflow)
        got, traffic = self.engine(
            df, a.astype(self.dtype), b.astype(self.dtype), self.mesh, g.num_slices,
            self.block, g.transposed,
        )  # fmt: skip
        err = _relative_error(np.asarray(got), want)
        model = _model_bytes(g, mnk, self.mesh, self.dtype.itemsize)
        counted = None
        if traffic is not None:
            counted = {ax.value: traffic.max_bytes(ax) for ax in Axis}
        reasons = [problem] if problem else []
        if err > self.tolerance:
            reasons.append(f"relative error {err:.3g} above {self.tolerance:g}")
        if counted is not None and counted != model:
            reasons.append(f"bytes sent per chip {counted} differ from the model's {model}")
        return GemmCheck(
            layer=layer.name,
            gemm_pass=g.gemm_pass,
            expression=g.expression,
            dataflow=g.dataflow,
            transposed=g.transposed,
            num_slices=g.num_slices,
            plan_mnk=(g.m, g.n, g.k),
            run_mnk=mnk,
            max_relative_error=err,
            tolerance=self.tolerance,
            bytes_per_chip=counted,
            model_bytes_per_chip=model,
            ok=not reasons,
            reason="; ".join(reasons) or None,
        )

    def _random(self, shape: tuple[int, int]) -> np.ndarray:
        return self.rng.standard_normal(shape)

    def layer_checks(self, layer: LayerPart) -> list[GemmCheck]:
        """Run one layer's GEMMs (sharing X, W, dY when expressions allow)."""
        forms = _layer_plan(layer)
        if forms is None:
            return [self._gemm_alone(layer, g) for g in layer.gemms]
        letters = [gemm_letters(f) for f in forms]
        scheds = [
            (GemmSchedule(Dataflow(g.dataflow), g.transposed, g.num_slices), lt)
            for g, lt in zip(layer.gemms, letters, strict=True)
        ]
        size = scale_layer(scheds, self.mesh, self.block)
        t, i, o = size["T"], size["I"], size["O"]
        _check_emulated_size(layer, t * i + i * o + t * o, self.file)
        x, w, dy = self._random((t, i)), self._random((i, o)), self._random((t, o))
        matrices = {"X": x, "W": w, "dY": dy}
        reference = {"Y": x @ w, "dX": dy @ w.T, "dW": x.T @ dy}
        checks = []
        for g, lt, expr in zip(layer.gemms, letters, forms, strict=True):
            if expr.left.name not in matrices or expr.right.name not in matrices:
                checks.append(self._gemm_alone(layer, g))
                continue
            a, b = _operand(expr.left, matrices), _operand(expr.right, matrices)
            want = _operand(expr.result, reference)
            mnk = (size[lt[0]], size[lt[1]], size[lt[2]])
            checks.append(self._check(layer, g, a, b, want, mnk))
        return checks

    def _gemm_alone(self, layer: LayerPart, g: GemmPart) -> GemmCheck:
        df = Dataflow(g.dataflow)
        mnk = scale_gemm(GemmSchedule(df, g.transposed, g.num_slices), self.mesh, self.block)
        m, n, k = mnk
        _check_emulated_size(layer, m * k + k * n + m * n, self.file)
        shape_a, shape_b = operand_shapes(df, *mnk)
        a, b = self._random(shape_a), self._random(shape_b)
        want = reference_product(df, a, b)
        return self._check(layer, g, a, b, want, mnk, _plain_expression(layer, g)[1])


def verify_plan(
    plan: PlanPart, file: str, backend: str, engine: Engine, dtype: type = np.float64
) -> VerifyResult:
    """Validate the plan (InputError before running), then run every GEMM."""
    validate_plan(plan, file)
    verifier = Verifier(plan, engine, dtype, file)
    checks: list[GemmCheck] = []
    for layer in plan.layers:
        checks.extend(verifier.layer_checks(layer))
    return VerifyResult(
        plan_file=file,
        backend=backend,
        mesh=verifier.mesh,
        block_size=verifier.block,
        dtype=str(verifier.dtype),
        checks=tuple(checks),
    )
