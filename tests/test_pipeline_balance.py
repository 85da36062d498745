"""Stage balancer: schedule tables, simulator hand checks, ILP = brute force
on small cases, never worse than the even split, infeasible caps."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import Assignment, even_layer_split, uniform_assignment
from autotune.pipeline.balance import balance, baselines
from autotune.pipeline.bruteforce import brute_force
from autotune.pipeline.problem import (
    EndBlock,
    LayerGroup,
    Problem,
    RecomputeOption,
    Schedule,
    SolverSettings,
)
from autotune.pipeline.schedule import interleaved_order, one_f_one_b_order, peak_alive_vectors
from autotune.pipeline.simulator import simulate

MS = 1e-3
GIB = float(2**30)
EXACT = SolverSettings(time_limit_s=30.0, relative_gap=1e-6)


def make_problem(
    groups,
    *,
    pp=2,
    v=1,
    m=4,
    cap_gib=100.0,
    head=(0.0, 0.0),
    tail=(0.0, 0.0),
    options=(("none", 0.0), ("full", 0.5)),
    min_layers=1,
) -> Problem:
    return Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=m,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=min_layers,
        options=tuple(RecomputeOption(n, c) for n, c in options),
        groups=tuple(groups),
        head=EndBlock(head[0] * MS, 2 * head[0] * MS, head[1] * GIB),
        tail=EndBlock(tail[0] * MS, 2 * tail[0] * MS, tail[1] * GIB),
        constant_bytes=1.0 * GIB,
        memory_cap_bytes=cap_gib * GIB,
    )


def group(kind, count, fwd_ms, param_gib=0.5, acts=(1.0, 0.1)):
    return LayerGroup(
        kind,
        count,
        fwd_ms * MS,
        2 * fwd_ms * MS,
        param_gib * GIB,
        tuple(a * GIB if a is not None else None for a in acts),
    )


# ---------------------------------------------------------------- schedules


def test_1f1b_order_stage0_of_4():
    # pp=4, m=4: stage 0 warms up with 3 forwards, then F3 B0, then B1 B2 B3.
    order = one_f_one_b_order(0, 4, 4)
    assert [(f, j) for f, _, j in order] == [
        (True, 0),
        (True, 1),
        (True, 2),
        (True, 3),
        (False, 0),
        (False, 1),
        (False, 2),
        (False, 3),
    ]


@pytest.mark.parametrize(("stage", "alive"), [(0, 4), (1, 3), (2, 2), (3, 1)])
def test_1f1b_alive_is_pp_minus_stage(stage, alive):
    # pipeline.md section 3: stage s holds pp - s micro-batches at the 1F1B peak.
    assert peak_alive_vectors(4, 1, 8, False)[stage] == ((alive,),)


def test_interleaved_order_megatron_warmup():
    # pp=2, v=2, m=4, stage 0: warm-up 2*(2-0-1) + (2-1)*2 = 4 forwards:
    # chunks 0,0,1,1 for micro-batches 0,1,0,1.
    order = interleaved_order(0, 2, 2, 4)
    assert order[:4] == [(True, 0, 0), (True, 0, 1), (True, 1, 0), (True, 1, 1)]
    assert order[4] == (True, 0, 2) and order[5] == (False, 1, 0)
    assert len(order) == 2 * 2 * 4


# ---------------------------------------------------------------- simulator


def test_uniform_1f1b_makespan_is_m_plus_pp_minus_1_slots():
    # Equal stages, no transfer time: T = (m + pp - 1) (F + B) = (8 + 3) * 3 ms.
    p = make_problem([group("d", 4, 1.0)], pp=4, m=8)
    sim = simulate(p, uniform_assignment(p, even_layer_split(p), 0))
    assert sim.makespan_s == pytest.approx(11 * 3 * MS)
    assert sim.bubble.total == pytest.approx(3 / 8)
    assert sim.bubble.imbalance == pytest.approx(0.0, abs=1e-12)


def test_uniform_interleaved_bubble_is_pp_minus_1_over_vm():
    # Narayanan et al. 2021: bubble (pp - 1) / (v m) with equal chunks.
    p = make_problem([group("d", 8, 1.0)], pp=2, v=2, m=4)
    sim = simulate(p, uniform_assignment(p, even_layer_split(p), 0))
    assert sim.bubble.total == pytest.approx((2 - 1) / (2 * 4))


def test_recompute_part_of_bubble():
    # Full recompute of every layer: backward x1.5, W/W0 - 1 = (1 + 3) / (1 + 2) - 1 = 1/3.
    p = make_problem([group("d", 2, 1.0)], pp=2, m=4)
    sim = simulate(p, uniform_assignment(p, even_layer_split(p), 1))
    assert sim.bubble.recompute == pytest.approx(1 / 3)


def test_peak_memory_hand_computed():
    # pp=2, m=4, 1 layer/stage: stage 0 = const 1 + param 0.5 + 2 alive * 1.0 = 3.5 GiB.
    p = make_problem([group("d", 2, 1.0)], pp=2, m=4)
    sim = simulate(p, uniform_assignment(p, even_layer_split(p), 0))
    assert sim.stage_peak_bytes[0] == pytest.approx(3.5 * GIB)
    assert sim.stage_peak_bytes[1] == pytest.approx(2.5 * GIB)


# ---------------------------------------------------------------- ILP vs brute force

small_cases = st.builds(
    lambda pp, v, n1, n2, cap, f2, head, tail: (pp, v, n1, n2, cap, f2, head, tail),
    pp=st.sampled_from([2, 3, 4]),
    v=st.sampled_from([1, 1, 2]),
    n1=st.integers(1, 6),
    n2=st.integers(0, 4),
    cap=st.floats(3.0, 12.0),
    f2=st.sampled_from([1.0, 1.5, 3.0]),
    head=st.sampled_from([0.0, 0.5]),
    tail=st.sampled_from([0.0, 2.0]),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases)
def test_ilp_equals_brute_force(case):
    pp, v, n1, n2, cap, f2, head, tail = case
    if v == 2:
        pp = 2
    groups = [group("dense", n1, 1.0, 0.3, (0.6, 0.1))]
    if n2:
        groups.append(group("moe", n2, f2, 0.8, (1.0, 0.2)))
    total = n1 + n2
    if total < pp * v or total > 10:
        return
    p = make_problem(groups, pp=pp, v=v, m=pp * 2, cap_gib=cap, head=(head, 0.3), tail=(tail, 0.5))
    ref = brute_force(p)
    result = balance(p, EXACT)
    if ref is None:
        assert result.plan is None and result.infeasible is not None
        return
    assert result.plan is not None
    assert result.plan.fits
    assert result.plan.step_time_s == pytest.approx(ref[0], rel=1e-6)
    # The ILP's own prediction is the simulated makespan (exact schedule rows).
    assert result.predicted_step_s == pytest.approx(result.plan.step_time_s, rel=1e-6)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(4, 10),
    pp=st.sampled_from([2, 4]),
    cap=st.floats(4.0, 30.0),
    fwd=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_never_worse_than_even_split(n, pp, cap, fwd):
    if n < pp:
        return
    p = make_problem([group("d", n, 1.0)], pp=pp, m=8, cap_gib=cap, tail=(fwd, 0.5))
    result = balance(p, EXACT)
    for b in baselines(p):
        if b[0] and simulate(p, b[1]).stage_peak_bytes and result.plan is not None:
            sim = simulate(p, b[1])
            if all(mem <= p.memory_cap_bytes for mem in sim.stage_peak_bytes):
                assert result.plan.step_time_s <= sim.makespan_s * (1 + 1e-9)


def test_order_of_kinds_is_kept():
    p = make_problem(
        [group("dense", 3, 1.0), group("moe", 4, 3.0), group("mtp", 1, 5.0)], pp=3, m=6
    )
    result = balance(p, EXACT)
    seen_last = -1
    for chunk in result.plan.assignment.counts:
        kinds = [g for g, per in enumerate(chunk) if sum(per)]
        assert kinds == sorted(kinds) and kinds[0] >= seen_last
        seen_last = kinds[-1]


def test_infeasible_cap_names_tightest_stage_and_shortfall():
    # pp=2, m=4, 4 layers all at full recompute, k on stage 0: stage 0 = 1 + 0.7 k,
    # stage 1 = 1 + 0.6 (4 - k) GiB; the best max is k=2: 2.4 GiB, 1.2 GiB over the cap.
    p = make_problem([group("d", 4, 1.0)], pp=2, m=4, cap_gib=1.2)
    result = balance(p, EXACT)
    assert result.plan is None
    assert result.infeasible.stage == 0
    assert result.infeasible.shortfall_bytes == pytest.approx(1.2 * GIB, rel=1e-6)
    assert "stage 0 is the tightest" in result.infeasible.reason
    assert "1.200 GiB" in result.infeasible.reason


def test_memory_cap_forces_recompute_on_first_stage():
    # Stage 0 holds 4 micro-batches, stage 3 one: only stage 0 needs recomputation.
    p = make_problem([group("d", 8, 1.0, 0.5, (1.0, 0.1))], pp=4, m=8, cap_gib=7.0)
    result = balance(p, EXACT)
    rec = result.plan.seed.recompute
    assert rec[0] > 0 and rec[-1] == 0


def test_assignment_counts_round_trip():
    p = make_problem([group("d", 4, 1.0)], pp=2, m=4)
    a = Assignment((((2, 0),), ((1, 1),)))
    assert a.layers_in_chunk(1) == 2 and a.group_layers(1, 0) == 2
    assert simulate(p, a).stage_peak_bytes[1] == pytest.approx((1 + 1.0 + 1.0 + 0.1) * GIB)
