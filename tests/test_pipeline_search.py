"""The balancer's fast parts: the vectorised longest path (= the simulator),
the local search (keeps layers, fits, never worse than its start), the split
floors (= brute force, hold for every plan that fits), the stage step floor
(never above a simulated step) and the cutoff solve (proves a bound or
returns a faster plan)."""

from __future__ import annotations

import itertools
from itertools import pairwise

import numpy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import (
    Assignment,
    alive_vectors,
    chunk_backward_s,
    chunk_forward_s,
    stage_peak_bytes,
)
from autotune.pipeline.balance import balance
from autotune.pipeline.bounds import stage_floors
from autotune.pipeline.bruteforce import brute_force
from autotune.pipeline.ilp import _covered_stages, highs_available, solve
from autotune.pipeline.problem import (
    EndBlock,
    LayerGroup,
    Problem,
    RecomputeOption,
    Schedule,
    SolverSettings,
)
from autotune.pipeline.search import (
    least_recompute_plan,
    local_search,
    makespans_s,
    plan_step_s,
    schedule_graph,
)
from autotune.pipeline.simulator import simulate
from autotune.pipeline.splits import stage_splits, stage_step_floor_s

MS = 1e-3
GIB = float(2**30)
OPTIONS = (("none", 0.0), ("selective", 0.04), ("selective_comm", 0.165), ("full", 0.5))


def make(
    pp: int,
    v: int,
    groups: tuple[LayerGroup, ...],
    cap_gib: float,
    m: int | None = None,
    options: tuple[tuple[str, float], ...] = OPTIONS,
) -> Problem:
    return Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=m or pp * 2,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=1,
        options=tuple(RecomputeOption(n, c) for n, c in options),
        groups=groups,
        head=EndBlock(0.5 * MS, 1.0 * MS, 0.4 * GIB),
        tail=EndBlock(1.0 * MS, 2.0 * MS, 0.6 * GIB),
        constant_bytes=1.0 * GIB,
        memory_cap_bytes=cap_gib * GIB,
    )


def dense(count: int, fwd_ms: float = 1.0, param_gib: float = 0.3, n_opts: int = 4) -> LayerGroup:
    acts = (0.5, 0.35, 0.2, 0.05)[:n_opts]
    return LayerGroup(
        "d", count, fwd_ms * MS, 2 * fwd_ms * MS, param_gib * GIB, tuple(a * GIB for a in acts)
    )


def moe(count: int, n_opts: int = 4) -> LayerGroup:
    acts = (0.8, 0.6, None, 0.1)[:n_opts]  # this kind has no selective_comm option
    return LayerGroup("m", count, 2.5 * MS, 5.0 * MS, 0.7 * GIB, tuple(a and a * GIB for a in acts))


THREE = OPTIONS[:3]  # none, selective, selective_comm: small enough for brute force


def random_plan(data, problem: Problem) -> Assignment:
    """Layers cut in model order over the chunks, options drawn per layer."""
    num, total = problem.num_virtual, problem.num_layers
    cuts = data.draw(st.lists(st.integers(1, total - 1), min_size=num - 1, max_size=num - 1))
    bounds = [0, *sorted(cuts), total]
    per_chunk = [b - a for a, b in pairwise(bounds)]
    if min(per_chunk) < 1:
        per_chunk = [total // num + (1 if c < total % num else 0) for c in range(num)]
    counts, gi, left = [], 0, [g.count for g in problem.groups]
    for want in per_chunk:
        row = [[0] * len(OPTIONS) for _ in problem.groups]
        while want:
            while left[gi] == 0:
                gi += 1
            acts = problem.groups[gi].activation_bytes
            allowed = [o for o, a in enumerate(acts) if a is not None]
            row[gi][data.draw(st.sampled_from(allowed))] += 1
            left[gi] -= 1
            want -= 1
        counts.append(tuple(tuple(r) for r in row))
    return Assignment(tuple(counts))


def durations(problem: Problem, a: Assignment) -> numpy.ndarray:
    num = problem.num_virtual
    return numpy.array(
        [chunk_forward_s(problem, a, c) for c in range(num)]
        + [chunk_backward_s(problem, a, c) for c in range(num)]
    )


def recompute_s(problem: Problem, a: Assignment, chunk: int) -> float:
    return sum(
        g.backward_s * opt.backward_time_coef * a.counts[chunk][i][o]
        for i, g in enumerate(problem.groups)
        for o, opt in enumerate(problem.options)
    )


# ---------------------------------------------------------------- longest path


@settings(max_examples=40, deadline=None)
@given(pp=st.sampled_from([1, 2, 3, 4]), v=st.sampled_from([1, 2, 3]), data=st.data())
def test_vectorised_makespan_equals_simulator(pp, v, data):
    p = make(pp, v, (dense(pp * v + 4),), 100.0)
    plans = [random_plan(data, p) for _ in range(3)]
    graph = schedule_graph(pp, v, p.num_micro_batches, v > 1)
    got = makespans_s(graph, numpy.stack([durations(p, a) for a in plans]))
    for value, a in zip(got, plans, strict=True):
        assert value == pytest.approx(simulate(p, a).makespan_s, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    pp=st.sampled_from([1, 2, 4]),
    v=st.sampled_from([1, 2, 3]),
    columns=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_loops_and_array_pass_give_the_same_floats_and_count_the_same_work(pp, v, columns, seed):
    # Few columns take one plain loop per column (search.LOOP_COLUMNS); the
    # floats must be those of the array pass, and so must the work counted,
    # or the search budgets would end elsewhere.
    import autotune.pipeline.search as search

    graph = schedule_graph(pp, v, 2 * pp, v > 1)
    durations_s = numpy.random.default_rng(seed).uniform(1e-4, 1e-2, (columns, 2 * pp * v))
    w0 = search.work_done_s()
    chosen = search._end_times(graph, durations_s)
    w1 = search.work_done_s()
    saved = search.LOOP_COLUMNS
    search.LOOP_COLUMNS = 0
    try:
        array = search._end_times(graph, durations_s)
    finally:
        search.LOOP_COLUMNS = saved
    w2 = search.work_done_s()
    assert numpy.array_equal(chosen, array)
    assert w1 - w0 == pytest.approx(w2 - w1, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([1, 2, 3, 4]), v=st.sampled_from([1, 2, 3]), data=st.data())
def test_plan_step_equals_simulator(pp, v, data):
    p = make(pp, v, (dense(pp * v + 4), moe(2)), 100.0)
    a = random_plan(data, p)
    assert plan_step_s(p, a) == pytest.approx(simulate(p, a).makespan_s, rel=1e-12)


# ---------------------------------------------------------------- local search


@settings(max_examples=25, deadline=None)
@given(
    pp=st.sampled_from([2, 4]), v=st.sampled_from([1, 2]), cap=st.floats(4.0, 12.0), data=st.data()
)
def test_local_search_keeps_layers_fits_and_beats_its_start(pp, v, cap, data):
    p = make(pp, v, (dense(pp * v + 3), moe(2)), cap)
    plan = random_plan(data, p)
    layers = [[sum(per) for per in chunk] for chunk in plan.counts]
    found = local_search(p, layers)
    start = least_recompute_plan(p, layers)
    if found is None:
        # Then no recomputation choice lets every stage fit with these layers,
        # so the random plan cannot fit either.
        assert start is None
        assert any(stage_peak_bytes(p, plan, s) > p.memory_cap_bytes for s in range(pp))
        return
    assert [[sum(per) for per in chunk] for chunk in found.counts] == layers
    sim = simulate(p, found)
    assert all(mem <= p.memory_cap_bytes * (1 + 1e-9) for mem in sim.stage_peak_bytes)
    assert sim.makespan_s <= simulate(p, start).makespan_s * (1 + 1e-12)
    # The start takes each stage's least recomputation that fits, so no
    # fitting plan with these layers recomputes less on any stage.
    if all(stage_peak_bytes(p, plan, s) <= p.memory_cap_bytes for s in range(pp)):
        for s in range(pp):
            chunks = range(s, p.num_virtual, pp)
            assert (
                sum(recompute_s(p, start, c) for c in chunks)
                <= sum(recompute_s(p, plan, c) for c in chunks) * (1 + 1e-12) + 1e-18
            )


def test_local_search_finds_the_fixed_layer_optimum_on_a_small_case():
    # Interleaved pp=2, v=2: check against every recomputation choice for the
    # same layer counts.
    p = make(2, 2, (dense(8),), 5.2)
    layers = [[2], [2], [2], [2]]
    found = local_search(p, layers)
    assert found is not None
    best = None
    per_chunk = [list(_splits(2)) for _ in range(4)]
    for combo in itertools.product(*per_chunk):
        a = Assignment(tuple((c,) for c in combo))
        sim = simulate(p, a)
        if all(mem <= p.memory_cap_bytes * (1 + 1e-9) for mem in sim.stage_peak_bytes):
            best = sim.makespan_s if best is None else min(best, sim.makespan_s)
    assert best is not None
    assert simulate(p, found).makespan_s == pytest.approx(best, rel=1e-12)


def _splits(n: int):
    for combo in itertools.combinations_with_replacement(range(len(OPTIONS)), n):
        yield tuple(combo.count(o) for o in range(len(OPTIONS)))


# ---------------------------------------------------------------- split floors


def test_split_floor_hand_computed():
    # pp=1, v=2, m=2 (interleaved): the stage's op order F0 F1 B1 F0' B0 F1'
    # B1' B0' keeps alive (2, 0) or (1, 1) micro-batches of its two chunks.
    # Static 1 + 0.4 + 0.6 = 2 GiB, params 2 * 0.3; cap 3.3 leaves 0.7 GiB:
    # 2 a0 <= 0.7 and a0 + a1 <= 0.7 for split (1, 1). Per layer (act GiB,
    # recompute ms): none (0.5, 0), selective (0.35, 0.08), selective_comm
    # (0.2, 0.33), full (0.05, 1.0).
    #   w = (1, 0): chunk 0 selective, chunk 1 anything <= 0.35    -> 0.08 ms
    #   w = (0, 1): chunk 1 none needs a0 <= 0.2: selective_comm  -> 0
    #   w = (1, 1): selective twice (0.7) beats selective_comm + none -> 0.16 ms
    p = make(1, 2, (dense(2),), 3.3, m=2)
    (st_,) = stage_splits(p)
    assert st_.weights == ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))
    row = st_.phi_s[st_.splits.index((1, 1))]
    assert row == pytest.approx((0.08 * MS, 0.0, 0.16 * MS))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pp=st.sampled_from([2, 3]), v=st.sampled_from([2, 3]), cap=st.floats(4.0, 9.0))
def test_split_floors_are_brute_force_lower_bounds(pp, v, cap):
    p = make(pp, v, (dense(pp * v + 4),), cap)
    g = p.groups[0]
    for st_ in stage_splits(p):
        s = st_.stage
        small = [(sp, phi) for sp, phi in zip(st_.splits, st_.phi_s, strict=True) if max(sp) <= 3]
        for split, phi in small[:8]:
            best = [float("inf")] * len(st_.weights)
            for combo in itertools.product(*[list(_splits(x)) for x in split]):
                counts = [((0,) * len(OPTIONS),)] * p.num_virtual
                for k, c in enumerate(range(s, p.num_virtual, pp)):
                    counts[c] = (combo[k],)
                a = Assignment(tuple(counts))
                if stage_peak_bytes(p, a, s) > p.memory_cap_bytes * (1 + 1e-9):
                    continue
                r = [
                    sum(g.backward_s * OPTIONS[o][1] * combo[k][o] for o in range(len(OPTIONS)))
                    for k in range(v)
                ]
                for j, w in enumerate(st_.weights):
                    best[j] = min(best[j], sum(wk * rk for wk, rk in zip(w, r, strict=True)))
            # A lower bound, exact with one alive vector (several are each
            # checked alone, which relaxes the stage's memory).
            assert all(f <= b + 1e-15 for f, b in zip(phi, best, strict=True))
            if len(alive_vectors(p)[s]) == 1:
                assert phi == pytest.approx(best, abs=1e-15)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pp=st.sampled_from([2, 3]), v=st.sampled_from([2, 3]), data=st.data())
def test_split_rows_and_step_floor_hold_for_every_fitting_plan(pp, v, data):
    # Several kinds: phi relaxes the kinds, so it must still be a lower bound.
    p = make(pp, v, (dense(pp * v + 2), moe(2)), data.draw(st.floats(5.0, 14.0)))
    a = random_plan(data, p)
    sim = simulate(p, a)
    splits = {st_.stage: st_ for st_ in stage_splits(p, sim.makespan_s * 1.001)}
    for s in range(pp):
        chunks = list(range(s, p.num_virtual, pp))
        layers = sum(a.layers_in_chunk(c) for c in chunks)
        recompute = [recompute_s(p, a, c) for c in chunks]
        # A stage's chain of ops with the fill and drain around it.
        assert sim.makespan_s >= stage_step_floor_s(p, s, layers, sum(recompute)) * (1 - 1e-12)
        if sim.stage_peak_bytes[s] > p.memory_cap_bytes or s not in splits:
            continue
        st_ = splits[s]
        split = tuple(a.layers_in_chunk(c) for c in chunks)
        # A plan faster than the limit must find its split among the kept ones.
        assert split in st_.splits
        phi = st_.phi_s[st_.splits.index(split)]
        for w, floor in zip(st_.weights, phi, strict=True):
            assert sum(wk * rk for wk, rk in zip(w, recompute, strict=True)) >= floor - 1e-15


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pp=st.sampled_from([2, 3, 4]), v=st.sampled_from([2, 3]), data=st.data())
def test_split_rows_imply_the_stage_floor_cuts_they_replace(pp, v, data):
    # The MILP leaves bounds.py's recomputation cuts out on the stages whose
    # split rows imply them: R_s >= sum phi_sigma(1) y_sigma, so each cut
    # must lie below phi_sigma(1) at |sigma| for every split kept (checked
    # with several kinds too, where the cuts are kept all the same).
    kinds = data.draw(st.sampled_from([(dense(pp * v + 3),), (dense(pp * v + 1), moe(2))]))
    p = make(pp, v, kinds, data.draw(st.floats(4.0, 14.0)))
    limit = data.draw(st.floats(0.05, 2.0))
    covered = _covered_stages(p, limit)
    assert _covered_stages(p, None) == frozenset()
    floors = stage_floors(p)
    ones = tuple(1.0 for _ in range(v))
    for st_ in stage_splits(p, limit):
        assert (st_.stage in covered) == (len(kinds) == 1)
        j = st_.weights.index(ones)
        for split, phi in zip(st_.splits, st_.phi_s, strict=True):
            for slope, intercept in floors[st_.stage].cuts:
                assert phi[j] >= slope * sum(split) + intercept - 1e-15


def test_no_split_rows_without_interleaving():
    assert stage_splits(make(4, 1, (dense(12),), 8.0)) == ()


# ---------------------------------------------------------------- cutoff solves

needs_highs = pytest.mark.skipif(not highs_available(), reason="the cutoff needs HiGHS")


@needs_highs
@pytest.mark.parametrize("v", [1, 2])
def test_cutoff_below_the_optimum_proves_it_and_above_returns_a_faster_plan(v):
    p = make(2, v, (dense(4, n_opts=3), moe(2, n_opts=3)), 5.0, options=THREE)
    best_s, _ = brute_force(p)
    cutoff = best_s * 0.999
    below = solve(p, [], time_limit_s=30, solver="highs", cutoff_s=cutoff, relative_gap=1e-6)
    # No plan is faster than the cutoff. The solver may still hand back a
    # plan it met above the cutoff; its bound is then the cutoff, never the
    # plan's own value (HiGHS reports that one, and it is not a bound).
    assert below.status == "cutoff"
    assert below.bound == pytest.approx(cutoff, rel=1e-12)
    if below.assignment is not None:
        assert simulate(p, below.assignment).makespan_s >= best_s * (1 - 1e-9)
    above = solve(p, [], time_limit_s=30, solver="highs", cutoff_s=best_s * 1.01, relative_gap=1e-6)
    assert above.status == "optimal"
    assert simulate(p, above.assignment).makespan_s == pytest.approx(best_s, rel=1e-6)
    assert above.bound <= best_s * (1 + 1e-9)


@needs_highs
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cap=st.floats(3.5, 8.0), n=st.integers(6, 7), kinds=st.sampled_from([1, 2]))
def test_balance_with_three_chunks_equals_brute_force(cap, n, kinds):
    # pp=2, v=3: the split rows are on; plans within the gap of the optimum.
    groups = (dense(n, n_opts=3),) if kinds == 1 else (dense(n - 2, n_opts=3), moe(2, n_opts=3))
    p = make(2, 3, groups, cap, m=4, options=THREE)
    ref = brute_force(p)
    result = balance(p, SolverSettings(relative_gap=1e-6))
    if ref is None:
        assert result.plan is None
        return
    assert result.plan is not None and result.plan.fits
    assert result.plan.step_time_s == pytest.approx(ref[0], rel=1e-6)
    assert result.solver.status == "optimal"


def test_schedule_graph_refuses_an_order_that_deadlocks(monkeypatch):
    # One stage whose backward runs before its own forward: neither can start.
    import autotune.pipeline.search as search

    monkeypatch.setattr(search, "stage_orders", lambda *shape: [[(False, 0, 0), (True, 0, 0)]])
    search.schedule_graph.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="deadlocked"):
            search.schedule_graph(1, 1, 1, False)
    finally:
        search.schedule_graph.cache_clear()
