"""The balancer's typed problem: built in Python with no file and solved;
consecutive equal layers grouped; bad values refused with the field named;
the package has no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autotune.pipeline.balance import balance
from autotune.pipeline.bruteforce import brute_force
from autotune.pipeline.problem import (
    EndBlock,
    Layer,
    Problem,
    ProblemError,
    Schedule,
    SolverSettings,
)

MIB = float(2**20)


def small_model() -> list[Layer]:
    """Four dense then two MoE layers: what a whole-job planner would hand over."""
    dense = Layer("dense", 1e-3, 2e-3, 300 * MIB, {"none": 200 * MIB, "full": 20 * MIB})
    moe = Layer("moe", 1.5e-3, 3e-3, 500 * MIB, {"none": 300 * MIB, "full": 30 * MIB})
    return [dense] * 4 + [moe] * 2


def test_problem_built_in_python_is_solved_without_a_file():
    p = Problem.from_layers(
        small_model(),
        options={"none": 0.0, "full": 0.5},
        num_stages=2,
        num_micro_batches=4,
        memory_cap_bytes=3000 * MIB,
        head=EndBlock(0.5e-3, 1e-3, 200 * MIB),
        tail=EndBlock(1e-3, 2e-3, 300 * MIB),
        constant_bytes=500 * MIB,
    )
    assert p.schedule is Schedule.ONE_F_ONE_B
    assert [(g.kind, g.count) for g in p.groups] == [("dense", 4), ("moe", 2)]
    result = balance(p, SolverSettings(relative_gap=1e-6, time_limit_s=20))
    ref = brute_force(p)
    assert ref is not None and result.plan is not None and result.plan.fits
    assert result.plan.step_time_s == pytest.approx(ref[0], rel=1e-6)


def test_from_layers_orders_options_and_names_repeated_runs():
    dense = Layer("dense", 1e-3, 2e-3, 1.0, {"full": 1.0, "none": 4.0})
    other = Layer("dense", 2e-3, 4e-3, 1.0, {"none": 4.0})
    p = Problem.from_layers(
        [dense, other, dense],
        options={"full": 0.5, "none": 0.0},
        num_stages=1,
        num_micro_batches=1,
        memory_cap_bytes=100.0,
    )
    assert [o.name for o in p.options] == ["none", "full"]
    assert [g.kind for g in p.groups] == ["dense", "dense#2", "dense#3"]
    assert p.groups[1].activation_bytes == (4.0, None)
    assert p.num_chunks == 1 and p.num_virtual == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"memory_cap_bytes": float("nan")}, "memory_cap_bytes must be a finite number"),
        ({"memory_cap_bytes": float("inf")}, "memory_cap_bytes must be a finite number"),
        ({"constant_bytes": -1.0}, "constant_bytes must be >= 0"),
        ({"num_chunks": 2, "schedule": "1f1b"}, "1f1b runs one chunk per stage"),
        ({"num_chunks": 2, "num_micro_batches": 3}, "multiple of num_stages"),
        ({"num_stages": 7}, "cannot give 7 chunks"),
    ],
)
def test_bad_problem_names_the_field(change, message):
    args = dict(
        options={"none": 0.0, "full": 0.5},
        num_stages=2,
        num_micro_batches=4,
        memory_cap_bytes=1e10,
    )
    args.update(change)
    with pytest.raises(ProblemError, match=message):
        Problem.from_layers(small_model(), **args)


def test_layer_with_nan_time_is_refused():
    bad = Layer("dense", float("nan"), 2e-3, 1.0, {"none": 1.0})
    with pytest.raises(ProblemError, match="'dense' forward_s must be a finite number"):
        Problem.from_layers(
            [bad], options={"none": 0.0}, num_stages=1, num_micro_batches=1, memory_cap_bytes=1.0
        )


def _imports(path: Path, package: str) -> set[str]:
    """Modules of `package` imported anywhere in `path` (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(package))
    return found


def test_pipeline_package_has_no_import_cycle():
    root = Path(__file__).resolve().parent.parent / "autotune" / "pipeline"
    package = "autotune.pipeline"
    graph = {
        f"{package}.{p.stem}": _imports(p, package) - {f"{package}.{p.stem}"}
        for p in root.glob("*.py")
        if p.stem != "__init__"
    }
    assert _imports(root / "problem.py", "autotune") == set()
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*trail, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


@pytest.mark.parametrize("rounds", [-1, 1001, 2.5, True, "12"])
def test_solver_settings_refuse_bad_search_rounds(rounds):
    with pytest.raises(ProblemError, match="search_rounds"):
        SolverSettings(search_rounds=rounds)


def test_solver_settings_take_zero_search_rounds():
    assert SolverSettings(search_rounds=0).search_rounds == 0
