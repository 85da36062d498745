"""The stage-chain lower bound (chain_bound.py) never exceeds the simulated
step of a plan that fits: against brute force (the optimum) on small
1F1B and interleaved instances with one or two kinds, and against random
plans; plus a hand-computed case."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import Assignment
from autotune.pipeline.bruteforce import brute_force, layers_by_group
from autotune.pipeline.chain_bound import chain_bound
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule
from autotune.pipeline.simulator import simulate

MS = 1e-3
GIB = float(2**30)
OPTIONS = (("none", 0.0), ("selective", 0.04), ("full", 0.5))


def group(kind: str, count: int, fwd_ms: float, param_gib: float, act_gib: float) -> LayerGroup:
    acts = tuple(act_gib * f * GIB for f in (1.0, 0.6, 0.1))
    return LayerGroup(kind, count, fwd_ms * MS, 2 * fwd_ms * MS, param_gib * GIB, acts)


def make(pp: int, v: int, m: int, groups, cap_gib: float) -> Problem:
    return Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=m,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=1,
        options=tuple(RecomputeOption(n, c) for n, c in OPTIONS),
        groups=tuple(groups),
        head=EndBlock(0.5 * MS, 1.0 * MS, 0.4 * GIB),
        tail=EndBlock(1.0 * MS, 2.0 * MS, 0.6 * GIB),
        constant_bytes=1.0 * GIB,
        memory_cap_bytes=cap_gib * GIB,
    )


def test_hand_computed_one_stage_per_layer_pair():
    # pp=2, 1F1B, m=2, four identical layers (f=1, b=2 ms), no memory limit:
    # stage 0 has no fill and the head (1.5 ms per micro-batch) in its chain;
    # stage 1 has the fill 4.5 ms (chunk 0's one layer at least, 3 ms, and
    # the head, 1.5 ms) and the tail (3 ms). With t0 + t1 = 4 layers:
    # T >= 2 (3 t0 + 1.5) and T >= 4.5 + 2 (3 t1 + 3). t0 = 2: max(15, 22.5);
    # t0 = 3: max(21, 16.5) = 21 ms, the least.
    p = make(2, 1, 2, [group("d", 4, 1.0, 0.1, 0.1)], 100.0)
    bound = chain_bound(p)
    assert bound.step_s == pytest.approx(21 * MS, rel=1e-5)
    assert bound.step_s <= 21 * MS
    assert bound.layers == (3, 1)
    assert bound.step_s <= brute_force(p)[0]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.sampled_from([(2, 1, 2), (2, 1, 4), (3, 1, 3), (2, 2, 2), (2, 2, 4), (2, 3, 2)]),
    kinds=st.sampled_from([1, 2]),
    cap=st.floats(2.0, 9.0),
    extra=st.integers(0, 1),
)
def test_bound_never_exceeds_the_brute_force_optimum(shape, kinds, cap, extra):
    pp, v, m = shape
    n = pp * v + extra
    groups = (
        [group("d", n, 1.0, 0.3, 0.5)]
        if kinds == 1
        else [group("d", n - 1, 0.8, 0.3, 0.4), group("moe", 1, 1.5, 0.9, 0.6)]
    )
    p = make(pp, v, m, groups, cap)
    ref = brute_force(p)
    bound = chain_bound(p)
    if ref is not None:
        assert bound.step_s <= ref[0] * (1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(
    pp=st.sampled_from([2, 3, 4]),
    v=st.sampled_from([1, 2, 3]),
    cap=st.floats(4.0, 20.0),
    data=st.data(),
)
def test_bound_holds_for_random_fitting_plans(pp, v, cap, data):
    num = pp * v
    count = data.draw(st.integers(num + 1, num + 10))
    groups = [group("d", count - 2, 0.8, 0.3, 0.35), group("moe", 2, 1.4, 0.8, 0.5)]
    p = make(pp, v, pp * data.draw(st.integers(1, 3)), groups, cap)
    cuts = data.draw(st.lists(st.integers(1, count - 1), min_size=num - 1, max_size=num - 1))
    per_chunk = [b - a for a, b in pairwise([0, *sorted(cuts), count])]
    if min(per_chunk) < 1:
        return
    rows = layers_by_group(p, tuple(per_chunk))
    counts = []
    for row in rows:
        per_group = []
        for n in row:
            split = [0] * len(OPTIONS)
            for _ in range(n):
                split[data.draw(st.integers(0, len(OPTIONS) - 1))] += 1
            per_group.append(tuple(split))
        counts.append(tuple(per_group))
    a = Assignment(tuple(counts))
    sim = simulate(p, a)
    if max(sim.stage_peak_bytes) > p.memory_cap_bytes:
        return
    assert chain_bound(p).step_s <= sim.makespan_s * (1 + 1e-12)
