"""The MILP's stage floors (bounds.py) never cut off a plan that fits:
checked against random plans and a hand-computed knapsack."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import Assignment, stage_peak_bytes
from autotune.pipeline.bounds import least_recompute_s, stage_floors
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule

MS = 1e-3
GIB = float(2**30)
OPTIONS = (("none", 0.0), ("selective", 0.04), ("selective_comm", 0.165), ("full", 0.5))


def test_least_recompute_hand_computed():
    # Items (s, bytes): none (0, 3), cheap (1, 2), full (5, 1); budget 7.
    # t=2: none+none = 6 fits -> 0; t=3: 9 > 7, none+cheap+cheap = 7 -> 2;
    # t=4: needs bytes <= 7 from 4 items: cheap+full*3 = 5 (15), cheap*3+full = 7 (8) -> 8.
    assert least_recompute_s([(0.0, 3.0), (1.0, 2.0), (5.0, 1.0)], 7.0, 8)[:5] == [
        0.0,
        0.0,
        0.0,
        2.0,
        8.0,
    ]


def make(pp: int, v: int, count: int, cap_gib: float, acts: tuple[float, ...]) -> Problem:
    return Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=pp * 2,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=1,
        options=tuple(RecomputeOption(n, c) for n, c in OPTIONS),
        groups=(
            LayerGroup("d", count, 1.0 * MS, 2.0 * MS, 0.3 * GIB, tuple(a * GIB for a in acts)),
        ),
        head=EndBlock(0.5 * MS, 1.0 * MS, 0.4 * GIB),
        tail=EndBlock(1.0 * MS, 2.0 * MS, 0.6 * GIB),
        constant_bytes=1.0 * GIB,
        memory_cap_bytes=cap_gib * GIB,
    )


@settings(max_examples=60, deadline=None)
@given(
    pp=st.sampled_from([2, 3, 4]),
    v=st.sampled_from([1, 2]),
    cap=st.floats(3.0, 14.0),
    data=st.data(),
)
def test_floors_hold_for_every_fitting_plan(pp, v, cap, data):
    num = pp * v
    count = data.draw(st.integers(num, num + 8))
    p = make(pp, v, count, cap, (0.5, 0.35, 0.2, 0.05))
    cuts = data.draw(st.lists(st.integers(1, count - 1), min_size=num - 1, max_size=num - 1))
    bounds = [0, *sorted(cuts), count]
    per_chunk = [max(b - a, 0) for a, b in pairwise(bounds)]
    if min(per_chunk) < 1:
        return
    counts = []
    for n in per_chunk:
        split = [0] * len(OPTIONS)
        for _ in range(n):
            split[data.draw(st.integers(0, len(OPTIONS) - 1))] += 1
        counts.append((tuple(split),))
    a = Assignment(tuple(counts))
    floors = stage_floors(p)
    for f in floors:
        s = f.stage
        if stage_peak_bytes(p, a, s) > p.memory_cap_bytes:
            continue
        chunks = range(s, num, pp)
        layers = sum(per_chunk[c] for c in chunks)
        recompute_s = sum(
            2.0 * MS * OPTIONS[o][1] * counts[c][0][o] for c in chunks for o in range(len(OPTIONS))
        )
        assert layers <= f.max_layers
        for slope, intercept in f.cuts:
            assert recompute_s >= slope * layers + intercept - 1e-12


def test_floor_is_tight_for_one_stage_knapsack():
    # pp=1 (1F1B: 1 micro-batch alive), static 1 + 0.4 + 0.6 = 2 GiB, params 4 * 0.3;
    # cap 4.4 leaves 1.2 GiB of activations for 4 layers: 2 selective + 2 selective_comm
    # (0.7 + 0.4 = 1.1 GiB) at 2 ms * (2 * 0.04 + 2 * 0.165) = 0.82 ms is the cheapest.
    p = make(1, 1, 4, 4.4, (0.5, 0.35, 0.2, 0.05))
    (floor,) = stage_floors(p)
    phi4 = max(slope * 4 + intercept for slope, intercept in floor.cuts)
    # Exhaustive check of the same knapsack.
    best = min(
        sum(2.0 * MS * OPTIONS[o][1] for o in combo)
        for combo in _combos(4, len(OPTIONS))
        if 2.0 + 1.2 + sum((0.5, 0.35, 0.2, 0.05)[o] for o in combo) <= 4.4 + 1e-9
    )
    assert best == pytest.approx(0.82 * MS)
    assert phi4 == pytest.approx(best)


def _combos(n: int, k: int):
    from itertools import combinations_with_replacement

    return combinations_with_replacement(range(k), n)
