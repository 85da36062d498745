"""Two searches on two cores (portfolio.py): the plan is the faster of the
chains with their own seeds and with shifted seeds, the same on every run;
a cutoff MILP solve also runs in a second configuration, and which outcome
counts depends on whether each solve ended within its limit, never on which
ended first; one core runs one search; the second process never outlives
the call, and its failure or lateness is reported, not hidden."""

from __future__ import annotations

import subprocess
import time
from dataclasses import replace

import pytest
from benchmark_family import family

from autotune.pipeline import portfolio
from autotune.pipeline.balance import _quick_start
from autotune.pipeline.deadline import clock_cuts
from autotune.pipeline.layer_search import improve_layers, tie_key
from autotune.pipeline.perturb import iterated_chains
from autotune.pipeline.search import plan_step_s
from autotune.processes import child_pids

GIB = float(2**30)
BUDGET = dict(work_budget_s=0.4, far_budget_s=0.1, max_chains=2)


def _member():
    p = family.instance("dense-moe-mtp", 2, 8, 100 * GIB, stages=4)
    return replace(p, memory_cap_bytes=family.tightest_cap_bytes(p) * 1.02)


@pytest.fixture(scope="module")
def member():
    p = _member()
    return p, [improve_layers(p, _quick_start(p))]


def test_two_cores_keep_the_faster_of_both_seed_sets(member, monkeypatch):
    p, starts = member
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    own = iterated_chains(p, starts, **BUDGET)
    shifted = iterated_chains(p, starts, seed_shift=portfolio.SEED_SHIFT, **BUDGET)
    want = min((own, shifted), key=lambda a: (plan_step_s(p, a), tie_key(p, a), a is not own))
    before = clock_cuts()
    out = portfolio.chains_on_cores(p, starts, **BUDGET)
    assert out == want
    assert portfolio.chains_on_cores(p, starts, **BUDGET) == out  # the same every run
    assert clock_cuts() == before  # neither search was stopped by the clock
    assert plan_step_s(p, out) <= plan_step_s(p, own)


def test_one_core_runs_one_search(member, monkeypatch):
    p, starts = member
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 1)
    monkeypatch.setattr(subprocess, "Popen", None)  # a second process would fail
    assert portfolio.chains_on_cores(p, starts, **BUDGET) == iterated_chains(p, starts, **BUDGET)


def test_no_second_process_without_rounds(member, monkeypatch):
    p, starts = member
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    monkeypatch.setattr(subprocess, "Popen", None)
    assert portfolio.chains_on_cores(p, starts, rounds=0) == starts[0]


class _Child:
    """A stand-in for the second process's Popen."""

    def __init__(self, returncode=0, out=b"", err=b"", late=False):
        self.returncode, self._out, self._err, self._late = returncode, out, err, late

    def communicate(self, timeout=None):
        if self._late:
            raise subprocess.TimeoutExpired("meshtune", timeout)
        return self._out, self._err


def test_a_late_second_search_counts_as_a_stop_by_the_clock(member, monkeypatch):
    p, starts = member
    assert portfolio._result_of(_Child(late=True), time.perf_counter()) is portfolio._LATE
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    monkeypatch.setattr(portfolio, "_result_of", lambda child, deadline_s: portfolio._LATE)
    before = clock_cuts()
    assert portfolio.chains_on_cores(p, starts, **BUDGET) == iterated_chains(p, starts, **BUDGET)
    assert clock_cuts() == before + 1
    assert child_pids() == []


def test_a_failed_second_search_says_so():
    child = _Child(returncode=1, err=b"Traceback ...\nValueError: bad pickle\n")
    with pytest.raises(RuntimeError, match=r"second search .* failed: ValueError: bad pickle"):
        portfolio._result_of(child, None)


def test_a_second_search_cut_before_a_plan_counts_as_a_stop_by_the_clock():
    import pickle

    before = clock_cuts()
    assert portfolio._result_of(_Child(out=pickle.dumps((None, True))), None) is None
    assert clock_cuts() == before + 1


# Two MILP configurations on two cores (solve_on_cores).


@pytest.fixture(scope="module")
def milp_input(member):
    from autotune.pipeline.balance import _path_of, baselines
    from autotune.pipeline.simulator import simulate

    p, starts = member
    paths = [_path_of(simulate(p, b)) for _, b in baselines(p)]
    cutoff_s = plan_step_s(p, starts[0]) * (1 - 1e-3)
    options = dict(
        time_limit_s=60.0,
        solver="highs",
        split_step_limit_s=cutoff_s,
        cutoff_s=cutoff_s,
        relative_gap=1e-3,
    )
    return p, paths, options


def _limited(bound_s):
    from autotune.pipeline.ilp import IlpOutcome

    return IlpOutcome("no_solution", "highs", None, None, bound_s, 1.5)


def test_this_process_s_solve_counts_when_it_ends_on_its_own(milp_input, monkeypatch):
    from autotune.pipeline.ilp import solve

    p, paths, options = milp_input
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    want = solve(p, paths, **options)
    assert want.status not in portfolio._LIMITED
    out = portfolio.solve_on_cores(p, paths, **options)
    assert (out.status, out.assignment, out.objective) == (
        want.status,
        want.assignment,
        want.objective,
    )
    assert child_pids() == []  # the second solve was stopped


def test_the_second_configuration_counts_when_this_one_hits_its_limit(milp_input, monkeypatch):
    from autotune.pipeline import ilp

    p, paths, options = milp_input
    want = ilp.solve(p, paths, **{**options, **portfolio.SECOND_MILP})
    assert want.status not in portfolio._LIMITED
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    monkeypatch.setattr(ilp, "solve", lambda *args, **kwargs: _limited(1e-3))
    out = portfolio.solve_on_cores(p, paths, **options)
    assert (out.status, out.assignment, out.objective) == (
        want.status,
        want.assignment,
        want.objective,
    )
    assert out.bound == max(want.bound, 1e-3)
    assert out.solve_time_s == 1.5  # this process's, which the balancer's build time uses


def test_when_both_hit_the_limit_the_larger_bound_counts(milp_input, monkeypatch):
    from autotune.pipeline import ilp

    p, paths, options = milp_input
    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    monkeypatch.setattr(ilp, "solve", lambda *args, **kwargs: _limited(0.2))
    monkeypatch.setattr(portfolio, "_result_of", lambda child, deadline_s: _limited(0.3))
    assert portfolio.solve_on_cores(p, paths, **options) == _limited(0.3)
    monkeypatch.setattr(portfolio, "_result_of", lambda child, deadline_s: portfolio._LATE)
    assert portfolio.solve_on_cores(p, paths, **options) == _limited(0.2)
    assert child_pids() == []


@pytest.mark.parametrize(
    "cores, change",
    [(1, {}), (2, {"cutoff_s": None, "split_step_limit_s": None}), (2, {"solver": "cbc"})],
    ids=["one core", "no cutoff", "cbc"],
)
def test_one_milp_without_two_cores_or_a_highs_cutoff(milp_input, monkeypatch, cores, change):
    from autotune.pipeline import ilp

    p, paths, options = milp_input
    monkeypatch.setattr(portfolio, "usable_cores", lambda: cores)
    monkeypatch.setattr(subprocess, "Popen", None)  # a second process would fail
    monkeypatch.setattr(ilp, "solve", lambda *args, **kwargs: _limited(0.4))
    assert portfolio.solve_on_cores(p, paths, **{**options, **change}) == _limited(0.4)


@pytest.mark.parametrize("job", ["chains", "milp"])
def test_the_second_process_ends_with_an_interrupted_call(job, request, monkeypatch):
    from autotune.pipeline import ilp, perturb

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(portfolio, "usable_cores", lambda: 2)
    if job == "chains":
        p, starts = request.getfixturevalue("member")
        monkeypatch.setattr(perturb, "iterated_chains", interrupted)
        call = lambda: portfolio.chains_on_cores(p, starts, **BUDGET)  # noqa: E731
    else:
        p, paths, options = request.getfixturevalue("milp_input")
        monkeypatch.setattr(ilp, "solve", interrupted)
        call = lambda: portfolio.solve_on_cores(p, paths, **options)  # noqa: E731
    with pytest.raises(KeyboardInterrupt):
        call()
    assert child_pids() == []
