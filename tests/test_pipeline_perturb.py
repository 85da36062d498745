"""The iterated rounds (perturb.py) and the focused climb: the critical-path
weights add up to the step, the rounds repeat exactly and never lose the
start, and the balancer climbs every start, not only the best one."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest
from benchmark_family import family
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import even_layer_split, layers_in_order, uniform_assignment
from autotune.pipeline.balance import _heuristic_start, _improve, _path_of, _quick_start, baselines
from autotune.pipeline.layer_search import (
    _far_moves,
    _stage_moves,
    chunks_around,
    improve_layers,
)
from autotune.pipeline.perturb import (
    _best_even_cut,
    aimed_kick,
    critical_weights_s,
    even_cuts,
    even_split,
    iterated_chains,
    iterated_search,
    kick,
    kind_cut_plans,
    kind_cuts,
)
from autotune.pipeline.search import local_search, plan_step_s, work_done_s
from autotune.pipeline.simulator import simulate

GIB = float(2**30)


def _member(mix: str, chunks: int, micro: int, factor: float, stages: int = 16, groups=None):
    p = family.instance(mix, chunks, micro, 100 * GIB, stages=stages, groups=groups)
    return replace(p, memory_cap_bytes=family.tightest_cap_bytes(p) * factor)


# 24 layers of one kind: 2 per chunk on 4 stages x 3 chunks (the family's 96
# make the recomputation candidates of a 4-stage test slow to list).
SMALL_UNIFORM = (family._group("decoder", 24, 1.0, 0.4, 0.30),)


def _fits(p, a) -> bool:
    return max(simulate(p, a).stage_peak_bytes) <= p.memory_cap_bytes * (1 + 1e-9)


@pytest.mark.parametrize("mix", ["uniform", "dense-moe-mtp"])
def test_critical_weights_add_up_to_the_step(mix):
    # The critical path runs without a gap from 0 to the makespan, so its
    # ops' seconds sum to the step.
    groups = SMALL_UNIFORM if mix == "uniform" else None
    p = _member(mix, 2, 8, 1.05, stages=4, groups=groups)
    a = _quick_start(p)
    assert sum(critical_weights_s(p, a)) == pytest.approx(simulate(p, a).makespan_s, rel=1e-9)


def test_aimed_kick_fits_and_keeps_the_layer_count():
    p = _member("two-sizes", 2, 8, 1.0, stages=4)
    a = _quick_start(p)
    rng = random.Random(3)
    for _ in range(20):
        layers = aimed_kick(p, a, rng)
        assert layers is not None
        assert sum(map(sum, layers)) == p.num_layers
        assert min(map(sum, layers)) >= p.min_layers_per_chunk


def test_focused_climb_never_loses_its_start_and_empty_focus_only_rechooses():
    p = _member("uniform", 3, 8, 1.02, stages=4, groups=SMALL_UNIFORM)
    a = _quick_start(p)
    step = simulate(p, a).makespan_s
    full = improve_layers(p, a)
    focused = improve_layers(p, a, focus=chunks_around(p, [0]))
    idle = improve_layers(p, a, focus=[])
    for plan in (full, focused, idle):
        assert _fits(p, plan)
        assert simulate(p, plan).makespan_s <= step * (1 + 1e-12)
    # No chunk to try: the layers stay, only the recomputation may change.
    for c in range(p.num_virtual):
        assert idle.layers_in_chunk(c) == a.layers_in_chunk(c)


def test_rounds_repeat_exactly_and_never_lose_the_start():
    p = _member("dense-moe-mtp", 2, 8, 1.02, stages=4)
    a = improve_layers(p, _quick_start(p))
    first, second = iterated_search(p, a, rounds=6), iterated_search(p, a, rounds=6)
    assert first == second
    assert _fits(p, first)
    assert simulate(p, first).makespan_s <= simulate(p, a).makespan_s * (1 + 1e-12)


def _counted_rounds(monkeypatch, p, a, **kwargs):
    """The plan of iterated_search and how many rounds it ran (each round
    that gets a kicked layout calls local_search once)."""
    import autotune.pipeline.perturb as perturb

    calls = []
    real = perturb.local_search

    def counting(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(perturb, "local_search", counting)
    try:
        return iterated_search(p, a, **kwargs), len(calls)
    finally:
        monkeypatch.setattr(perturb, "local_search", real)


def test_rounds_stop_when_their_work_budget_is_spent(monkeypatch):
    p = _member("uniform", 2, 8, 1.02, stages=4)
    a = improve_layers(p, _quick_start(p))
    before = work_done_s()
    _, rounds = _counted_rounds(monkeypatch, p, a, rounds=50, work_budget_s=1e-12)
    assert rounds == 1  # the budget is checked before each round
    assert work_done_s() > before
    # The count is work, not time: the same budget gives the same rounds.
    budget = 0.05
    first = _counted_rounds(monkeypatch, p, a, rounds=400, work_budget_s=budget, stall_rounds=400)
    second = _counted_rounds(monkeypatch, p, a, rounds=400, work_budget_s=budget, stall_rounds=400)
    assert first == second and 1 < first[1] < 400


def test_rounds_stop_after_a_stall_without_a_faster_plan(monkeypatch):
    p = _member("dense-moe-mtp", 2, 8, 1.02, stages=4)
    a = improve_layers(p, _quick_start(p))
    stall = 4
    plan, rounds = _counted_rounds(monkeypatch, p, a, rounds=200, stall_rounds=stall)
    assert rounds < 200
    # Rounds are a prefix of a longer run (same seed): the plan after the
    # last `stall` rounds is no faster than the one before them.
    earlier = iterated_search(p, a, rounds=rounds - stall, stall_rounds=10**6)
    assert simulate(p, plan).makespan_s >= simulate(p, earlier).makespan_s * (1 - 1e-9)
    assert iterated_search(p, a, rounds=rounds, stall_rounds=10**6) == plan


def test_chains_never_lose_to_their_first_chain_or_a_start():
    p = _member("dense-moe-mtp", 2, 8, 1.02, stages=4)
    quick = improve_layers(p, _quick_start(p))
    paths = [_path_of(simulate(p, a)) for _, a in baselines(p)]
    lp, _ = _heuristic_start(p, paths, "highs", 30.0, 1e-4, False)
    starts = [quick] + ([improve_layers(p, lp)] if lp is not None else [])
    budget = 0.5
    first = iterated_search(p, quick, work_budget_s=budget)
    chains = iterated_chains(p, starts, work_budget_s=budget, max_chains=4)
    assert chains == iterated_chains(p, starts, work_budget_s=budget, max_chains=4)
    assert _fits(p, chains)
    step = simulate(p, chains).makespan_s
    assert step <= simulate(p, first).makespan_s * (1 + 1e-12)
    assert all(step <= simulate(p, a).makespan_s * (1 + 1e-12) for a in starts)
    # No chain once a start is good enough, nor without rounds: the best start.
    best_start = min(starts, key=lambda a: simulate(p, a).makespan_s)
    assert iterated_chains(p, starts, enough_s=float("inf")) == best_start
    assert iterated_chains(p, starts, rounds=0) == best_start


def test_every_start_is_climbed_not_only_the_best():
    # On this member the LP-rounded start is faster than the even split's
    # but climbs to a slower plan (docs/pipeline.md has the numbers).
    p = _member("dense-moe-mtp", 2, 16, 1.02)
    quick = _quick_start(p)
    paths = [_path_of(simulate(p, a)) for _, a in baselines(p)]
    lp, _ = _heuristic_start(p, paths, "highs", 30.0, 1e-4, False)
    assert lp is not None
    climbed = [simulate(p, improve_layers(p, s)).makespan_s for s in (lp, quick)]
    out = _improve(p, [lp, quick], paths, "highs", 30.0, 1e-4, False, None, 0)
    assert simulate(p, out).makespan_s <= min(climbed) * (1 + 1e-12)
    assert min(climbed) < max(climbed)


def test_a_cut_chain_falls_back_to_the_best_climbed_start(monkeypatch):
    # When the deadline cuts the chains, the plan is the fastest climbed
    # start, not the climb of the start listed first: the LP-rounded start
    # comes first here and climbs to the slower plan.
    from autotune.pipeline import perturb
    from autotune.pipeline.deadline import OutOfTime

    def cut(*args, **kwargs):
        raise OutOfTime

    p = _member("dense-moe-mtp", 2, 16, 1.02)
    quick = _quick_start(p)
    paths = [_path_of(simulate(p, a)) for _, a in baselines(p)]
    lp, _ = _heuristic_start(p, paths, "highs", 30.0, 1e-4, False)
    climbed = {s: simulate(p, improve_layers(p, s)).makespan_s for s in (lp, quick)}
    assert climbed[lp] > climbed[quick]
    monkeypatch.setattr(perturb, "iterated_chains", cut)
    out = _improve(p, [lp, quick], paths, "highs", 30.0, 1e-4, False, None, 8)
    assert simulate(p, out).makespan_s == climbed[quick]


def test_plateau_moves_walk_off_a_plateau_of_equal_steps():
    # dense-moe-mtp, 8 stages x 2 chunks, 8 micro-batches, cap 5% above the
    # tightest: from the even split's plan the climb on the step alone stops
    # at 481.69 ms, where no single move shortens the step; taking the moves
    # that keep it and lower the sum of the stages' finishes reaches 452.36.
    p = _member("dense-moe-mtp", 2, 8, 1.05, stages=8)
    start = _quick_start(p)
    plain = improve_layers(p, start, plateau=False)
    walked = improve_layers(p, start)
    assert simulate(p, plain).makespan_s * 1e3 == pytest.approx(481.69, abs=0.01)
    assert simulate(p, walked).makespan_s * 1e3 == pytest.approx(452.36, abs=0.01)
    assert _fits(p, walked)


@pytest.mark.parametrize("seed", range(4))
def test_a_climb_with_plateau_moves_is_never_slower_than_its_start(seed):
    p = _member("two-sizes", 3, 8, 1.05, stages=8)
    rng = random.Random(seed)
    a = _quick_start(p)
    layers = kick(p, a, rng)
    if layers is None:
        return
    start = local_search(p, layers)
    if start is None:
        return
    out = improve_layers(p, start, max_moves=40)
    assert simulate(p, out).makespan_s <= simulate(p, start).makespan_s * (1 + 1e-6)
    assert _fits(p, out)


def test_far_moves_keep_every_other_count_and_include_the_stage_moves():
    p = _member("two-sizes", 2, 8, 1.0, stages=4)
    layers = even_layer_split(p)
    counts = [sum(r) for r in layers]
    for chunk in range(p.num_virtual):
        far = list(_far_moves(p, layers, chunk))
        # every chunk but itself and its neighbours, once each
        targets = [t for t, _ in far]
        assert sorted(targets) == [t for t in range(p.num_virtual) if abs(t - chunk) > 1]
        for t, new in far:
            moved = [sum(r) for r in new]
            assert moved[chunk] == counts[chunk] - 1 and moved[t] == counts[t] + 1
            assert all(moved[c] == counts[c] for c in range(p.num_virtual) if c not in (chunk, t))
            assert [sum(col) for col in zip(*new, strict=True)] == [
                sum(col) for col in zip(*layers, strict=True)
            ]
        assert set(map(_key, (n for _, n in _stage_moves(p, layers, chunk)))) <= set(
            map(_key, (n for _, n in far))
        )


def _key(layers):
    return tuple(map(tuple, layers))


# The layout the rounds ended on (505.58 ms) at dense-moe-mtp, 2 chunks, 16
# micro-batches, cap 5% above the tightest; the even split cannot fit there.
ROUNDS_END = [1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 2, 2, 2, 1, 2, 1]
ROUNDS_END += [2, 3, 3, 3, 3, 3, 2, 2, 2, 3, 2, 2, 2, 3, 3, 1]


def test_the_far_climb_reaches_what_the_boundary_climb_cannot():
    # Published in docs/pipeline.md ("far climb"): 505.58 -> 491.48 ms.
    p = _member("dense-moe-mtp", 2, 16, 1.05)
    start = local_search(p, layers_in_order(p, ROUNDS_END))
    assert start is not None
    step_ms = simulate(p, start).makespan_s * 1e3
    assert step_ms == pytest.approx(505.58, abs=0.01)
    near = improve_layers(p, start, max_moves=10**6)
    assert simulate(p, near).makespan_s * 1e3 == pytest.approx(step_ms, abs=0.01)
    far = improve_layers(p, start, max_moves=10**6, far=True)
    assert _fits(p, far)
    assert simulate(p, far).makespan_s * 1e3 == pytest.approx(491.48, abs=0.01)


def test_a_far_climb_stops_on_its_work_budget():
    p = _member("dense-moe-mtp", 2, 16, 1.05)
    start = local_search(p, layers_in_order(p, ROUNDS_END))
    w0 = work_done_s()
    cut = improve_layers(p, start, max_moves=10**6, far=True, work_end_s=w0 + 0.05)
    # the budget is checked before each move: at most one move past it
    assert work_done_s() - w0 < 0.05 + 0.05
    assert simulate(p, cut).makespan_s <= simulate(p, start).makespan_s
    assert cut == improve_layers(
        p, start, max_moves=10**6, far=True, work_end_s=work_done_s() + 0.05
    )


@pytest.mark.parametrize(
    ("times_s", "parts", "low", "counts"),
    [
        # 29 equal layers in 14 parts: thirteen of 2 and one of 3, the
        # longer part last (ties keep the shorter earlier part).
        ([1.0] * 29, 14, 1, [2] * 13 + [3]),
        # longest part 4 s three ways (3|2|4, 3|4|2, 2|3|4 s), squares equal
        # (29): the shorter earlier part wins.
        ([1.0, 1.0, 1.0, 2.0, 2.0, 2.0], 3, 1, [2, 2, 2]),
        ([3.0, 1.0, 1.0, 1.0], 2, 1, [1, 3]),
        # 4|4|2 s and 4|2|4 s tie on the longest part and on the squares
        # (36): the shorter earlier part; 5|4|1 s loses on the longest.
        ([4.0, 2.0, 2.0, 1.0, 1.0], 3, 1, [1, 1, 3]),
        # 3|3|3 s beats 3|2|4 s (longest) and 2|4|3 s
        ([1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0], 3, 1, [2, 2, 3]),
        ([1.0] * 3, 4, 0, [0, 1, 1, 1]),
        ([1.0] * 4, 3, 2, None),
        ([1.0] * 2, 0, 1, None),
    ],
)
def test_even_split_by_hand(times_s, parts, low, counts):
    assert even_split(times_s, parts, low) == counts


@settings(max_examples=60, deadline=None)
@given(
    times_s=st.lists(st.integers(1, 5).map(float), min_size=1, max_size=8),
    parts=st.integers(1, 4),
    low=st.integers(0, 2),
)
def test_even_split_is_the_least_longest_then_most_even_cut(times_s, parts, low):
    def cost(counts):
        ends = list(itertools.accumulate(counts))
        sums = [sum(times_s[e - c : e]) for c, e in zip(counts, ends, strict=True)]
        return max(sums), sum(s * s for s in sums)

    every = [
        list(c)
        for c in itertools.product(range(len(times_s) + 1), repeat=parts)
        if sum(c) == len(times_s) and min(c) >= low
    ]
    got = even_split(times_s, parts, low)
    if not every:
        assert got is None
        return
    assert got in every
    assert cost(got) == min(cost(c) for c in every)


def test_even_cuts_even_out_one_round_and_keep_the_rest():
    p = _member("uniform", 3, 6, 1.05, stages=6, groups=SMALL_UNIFORM)
    # 24 layers on 6 stages x 3 chunks (chunk k of stage s is k * 6 + s);
    # the inner chunks (stages 1-4) of round 1 hold 3 2 1 1.
    rounds = [[1, 1, 1, 1, 1, 1], [1, 3, 2, 1, 1, 1], [1, 1, 1, 1, 2, 3]]
    per_chunk = [n for r in rounds for n in r]
    cuts = even_cuts(p, uniform_assignment(p, layers_in_order(p, per_chunk), 0))
    # Rounds 0 and 2 are already even cuts (one layer each; 5 layers on 4
    # chunks, the longer part last), so only round 1 changes, to 1 2 2 2;
    # every round at once gives the same layout, left out.
    assert cuts == [[n for r in (rounds[0], [1, 1, 2, 2, 2, 1], rounds[2]) for n in r]]
    for new in cuts:
        assert sum(new) == 24
        assert [new[k * 6] for k in range(3)] == [per_chunk[k * 6] for k in range(3)]
        assert [new[k * 6 + 5] for k in range(3)] == [per_chunk[k * 6 + 5] for k in range(3)]


def test_an_even_cut_leaves_a_round_cut_unevenly():
    # two-sizes, 3 chunks, 16 micro-batches, cap 2% above the tightest: a
    # chain's end with the last round's inner chunks holding 3 3 3 2 2 2 1 1
    # 1 2 2 2 2 2 large layers (535.20 ms; no one-layer move shortens it).
    # Its best even cut (every round at once), repaired and climbed, is
    # 515.59 ms.
    p = _member("two-sizes", 3, 16, 1.02)
    per_chunk = (
        [1, 1, 1]
        + [2] * 12
        + [1]
        + [1, 2, 2, 1, 2, 3, 2]
        + [1] * 9
        + [1, 3, 3, 3, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 1]
    )
    a = local_search(p, layers_in_order(p, per_chunk))
    stuck = improve_layers(p, a)
    found = _best_even_cut(p, stuck, None)
    assert plan_step_s(p, stuck) * 1e3 == pytest.approx(535.20, abs=0.01)
    assert plan_step_s(p, found) * 1e3 == pytest.approx(515.59, abs=0.01)
    assert _fits(p, found)


def _two_kinds(small: int, large: int):
    return (
        family._group("small", small, 0.7, 0.25, 0.22),
        family._group("large", large, 1.4, 0.55, 0.40),
    )


def test_kind_cuts_by_hand():
    # 6 small then 6 large layers on 4 stages x 2 chunks (chunk k of stage s
    # is k * 4 + s), the even split 1 1 1 1 | 2 2 2 2: the kind boundary
    # falls inside chunk 5. The inner chunks are 1-2 (round 0) and 5-6
    # (round 1); chunks 0, 3, 4 and 7 keep 1, 1, 2 and 2.
    # - Chunks 0-3 hold the 6 small layers: 4 in chunks 1-2, even seconds
    #   2 2; the 2 large left for chunks 5-6, 1 1.
    # - Chunks 0-4 hold them: 2 in chunks 1-2 and 4 in chunks 5-6, the even
    #   split itself, left out.
    p = family.instance("two-sizes", 2, 4, 100 * GIB, stages=4, groups=_two_kinds(6, 6))
    a = uniform_assignment(p, even_layer_split(p), 0)
    assert [a.layers_in_chunk(c) for c in range(8)] == [1, 1, 1, 1, 2, 2, 2, 2]
    assert kind_cuts(p, a) == [[1, 2, 2, 1, 2, 1, 1, 2]]


@pytest.mark.parametrize(
    "mix, groups",
    [
        ("uniform", None),
        # 3 dense and 1 mtp layer: too few for a round's 14 inner chunks on
        # one side of the boundary, so the family's mix has none either.
        ("dense-moe-mtp", None),
    ],
)
@pytest.mark.parametrize("chunks", [2, 3])
def test_no_kind_cuts_with_one_kind_or_a_kind_smaller_than_a_round(mix, groups, chunks):
    p = family.instance(mix, chunks, 16, 100 * GIB, groups=groups)
    assert kind_cuts(p, uniform_assignment(p, even_layer_split(p), 0)) == []
    # Nor on two stages, which have no inner chunks.
    p2 = family.instance("two-sizes", chunks, 4, 100 * GIB, stages=2, groups=_two_kinds(6, 6))
    assert kind_cuts(p2, uniform_assignment(p2, even_layer_split(p2), 0)) == []


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_kind_cut_puts_a_kind_boundary_on_a_round_boundary(data):
    stages = data.draw(st.integers(3, 6), "stages")
    chunks = data.draw(st.integers(2, 3), "chunks")
    num = stages * chunks
    counts = data.draw(st.lists(st.integers(1, 2 * num), min_size=2, max_size=3), "kinds")
    groups = tuple(family._group(f"k{i}", n, 0.5 + i, 0.2, 0.2) for i, n in enumerate(counts))
    total = sum(counts)
    if total < num:
        return
    # Layers per chunk: at least one each, the rest anywhere.
    extra = data.draw(st.lists(st.integers(0, num - 1), min_size=total - num, max_size=total - num))
    per_chunk = [1 + extra.count(c) for c in range(num)]
    p = family.instance("two-sizes", chunks, stages, 100 * GIB, stages=stages, groups=groups)
    a = uniform_assignment(p, layers_in_order(p, per_chunk), 0)
    kind_ends = list(itertools.accumulate(counts))[:-1]
    cuts = kind_cuts(p, a)
    assert len(cuts) == len({tuple(c) for c in cuts})
    for new in cuts:
        assert new != per_chunk and sum(new) == total and min(new) >= 1
        ends = list(itertools.accumulate(new))
        # Chunks up to the last stage's chunk of round k - 1, or up to the
        # first stage's chunk of round k, hold exactly the layers before a
        # kind boundary; only the inner chunks of those two rounds change.
        moved = [
            k
            for k in range(1, chunks)
            for upto in (k * stages - 1, k * stages)
            if ends[upto] in kind_ends
            and all(
                new[c] == per_chunk[c]
                for c in range(num)
                if c % stages in (0, stages - 1) or not (k - 1) * stages < c < (k + 1) * stages
            )
        ]
        assert moved


def test_a_kind_cut_moves_the_round_boundary_onto_the_kind_boundary():
    # two-sizes, 2 chunks, 32 micro-batches, cap 2% above the tightest: the
    # balancer's best climbed start holds small layers in chunks 0-18
    # (1076.28 ms, no one-layer move shortens it). Its kind cut with chunks
    # 0-16 holding the 40 small layers, repaired and climbed, is 1008.50 ms
    # (the chains from there end at 998.81 ms, from the start at 1005.05;
    # docs/pipeline.md, "Kind cuts"). The cut with chunks 0-15 holding them
    # cannot fit.
    p = _member("two-sizes", 2, 32, 1.02)
    per_chunk = [1, 2, 2, 1, 2, 2, 2, 2, 2, 1, 3, 3, 4, 2, 1, 1]
    per_chunk += [1, 5, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 2]
    a = local_search(p, layers_in_order(p, per_chunk))
    assert plan_step_s(p, a) * 1e3 == pytest.approx(1076.28, abs=0.01)
    assert improve_layers(p, a) == a
    cuts = kind_cuts(p, a)
    assert [sum(new[:upto]) for new, upto in zip(cuts, (16, 17), strict=True)] == [40, 40]
    (found,) = kind_cut_plans(p, a)
    assert plan_step_s(p, found) * 1e3 == pytest.approx(1008.50, abs=0.01)
    assert _fits(p, found)


def test_rounds_try_the_even_cuts_after_every_eight_without_a_faster_plan(monkeypatch):
    import autotune.pipeline.perturb as perturb

    p = _member("dense-moe-mtp", 2, 8, 1.02, stages=4)
    a = _quick_start(p)
    # No round finds a faster plan: every step is the same, none is better.
    monkeypatch.setattr(perturb, "plan_step_s", lambda problem, plan: 1.0)
    monkeypatch.setattr(perturb, "better", lambda *args: False)
    tried = []
    monkeypatch.setattr(
        perturb, "_best_even_cut", lambda problem, best, deadline_s: tried.append(best)
    )
    assert iterated_search(p, a, rounds=3 * perturb.EVEN_EVERY + 3, stall_rounds=10**6) == a
    assert tried == [a, a, a]  # after rounds 8, 16 and 24
    # An even cut that is faster replaces the round's kick and restarts the
    # count of rounds without a faster plan.
    # (By identity: a kick may climb to an equal plan, which is slower here.)
    faster = improve_layers(p, a)

    def step_of(problem, plan):
        return 1.0 if plan is faster else 2.0 if plan is a else 3.0

    monkeypatch.setattr(perturb, "plan_step_s", step_of)
    monkeypatch.setattr(perturb, "better", lambda problem, x, sx, y, sy: sx < sy)
    tried.clear()

    def cut(problem, best, deadline_s):
        tried.append(best)
        return faster

    monkeypatch.setattr(perturb, "_best_even_cut", cut)
    assert iterated_search(p, a, rounds=3 * perturb.EVEN_EVERY, stall_rounds=10**6) == faster
    # after round 8, then 8 and 16 rounds after the faster cut
    assert tried == [a, faster, faster]
