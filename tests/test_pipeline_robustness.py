"""A small member of benchmarks/pipeline_robustness.py's family: at the
tightest feasible cap (no even split fits) the balancer still returns a plan
that fits, the same plan on a repeated run, and never "no plan" when the
repair finds one; an impossible cap is proven infeasible (exit 1's case)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from benchmark_family import family

from autotune.pipeline.assignment import even_layer_split
from autotune.pipeline.balance import balance, baselines
from autotune.pipeline.layer_search import feasible_start, least_peak_bytes, repair
from autotune.pipeline.problem import SolverSettings
from autotune.pipeline.simulator import simulate

GIB = float(2**30)
QUICK = SolverSettings(time_limit_s=4.0)


def small(cap_factor: float):
    """4 stages x 2 chunks, 8 micro-batches, 10 dense + 6 MoE layers."""
    groups = (
        family._group("dense", 10, 0.8, 0.3, 0.28),
        family._group("moe", 6, 1.3, 0.9, 0.34),
    )
    p = family.instance("", 2, 8, 100 * GIB, stages=4, groups=groups)
    return replace(p, memory_cap_bytes=family.tightest_cap_bytes(p) * cap_factor)


def test_repair_meets_the_tightest_cap_where_no_even_split_fits():
    p = small(1.0)
    assert all(not b.fits for b in _evaluations(p))
    layers = repair(p, even_layer_split(p))
    assert layers is not None
    assert all(least_peak_bytes(p, layers, s) <= p.memory_cap_bytes * (1 + 1e-9) for s in range(4))
    plan = feasible_start(p, even_layer_split(p))
    sim = simulate(p, plan)
    assert max(sim.stage_peak_bytes) <= p.memory_cap_bytes * (1 + 1e-9)


def _evaluations(p):
    from autotune.pipeline.result import evaluate

    return [evaluate(p, a, simulate(p, a), label) for label, a in baselines(p)]


def test_tightest_cap_plans_and_repeats():
    p = small(1.0)
    first, second = balance(p, QUICK), balance(p, QUICK)
    assert first.plan is not None and first.plan.fits
    assert first.solver.first_plan_s is not None and first.solver.first_plan_s < 4.0
    assert first.plan.assignment == second.plan.assignment
    assert first.plan.step_time_s == second.plan.step_time_s
    # the heuristics ran to their counted budgets: nothing to warn about
    assert first.solver.repeatable and not first.warnings


def test_a_plan_search_cut_by_the_clock_says_so(monkeypatch):
    # The moves' safety stop at 0% of the limit: they are skipped, so the
    # plan depends on when the clock ran out, and the result says so.
    import autotune.pipeline.balance as balance_module
    from autotune.pipeline.document import to_document

    monkeypatch.setattr(balance_module, "MOVES_SHARE", 0.0)
    cut = balance(small(1.0), QUICK)
    assert cut.plan is not None and cut.plan.fits
    assert not cut.solver.repeatable
    assert cut.warnings == (balance_module.CLOCK_CUT_WARNING,)
    doc = to_document(cut, "small.yaml")
    assert doc["solver"]["repeatable"] is False
    assert "--time-limit" in doc["warnings"][0]


def test_cap_below_every_plan_is_proven_infeasible():
    p = small(1.0)
    p = replace(p, memory_cap_bytes=p.memory_cap_bytes * 0.5)
    result = balance(p, QUICK)
    assert result.plan is None and result.solver.status == "infeasible"
    assert result.infeasible.shortfall_bytes > 0


def test_the_search_budget_shrinks_under_60_s_and_stays_above(monkeypatch):
    # A short limit gets a search that fits in it; a long one keeps the
    # whole budget (its extra time goes to the MILP).
    import autotune.pipeline.perturb as perturb

    seen = []
    real = perturb.iterated_chains

    def spy(problem, starts, **kwargs):
        seen.append((kwargs["work_budget_s"], kwargs["far_budget_s"]))
        return real(problem, starts, **kwargs)

    monkeypatch.setattr(perturb, "iterated_chains", spy)
    for limit_s in (4.0, 120.0):
        balance(small(1.0), SolverSettings(time_limit_s=limit_s))
    whole = (perturb.WORK_BUDGET_S, perturb.FAR_BUDGET_S)
    assert seen == [pytest.approx((whole[0] * 4 / 60, whole[1] * 4 / 60)), pytest.approx(whole)]
