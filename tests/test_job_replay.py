"""The vectorised schedule replay the whole-step model uses (`fast_replay`)
against the op-by-op simulator it replaces: the same makespan to the last
bit and the same per-stage peak memory, for random uneven chunk times and
sizes under 1F1B and interleaved 1F1B."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.pipeline.assignment import (
    Assignment,
    chunk_activation_bytes,
    chunk_backward_s,
    chunk_forward_s,
    stage_peak_bytes,
    stage_static_bytes,
)
from autotune.pipeline.fast_replay import fast_replay
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule
from autotune.pipeline.simulator import simulate


def _problem(pp, v, m, layers, head, tail):
    groups = tuple(
        LayerGroup(
            kind=f"k{i}",
            count=count,
            forward_s=f,
            backward_s=b,
            parameter_bytes=1.0,
            activation_bytes=(a,),
        )
        for i, (count, f, b, a) in enumerate(layers)
    )
    return Problem(
        num_stages=pp,
        num_chunks=v,
        num_micro_batches=m,
        schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=0,
        options=(RecomputeOption("none", 0.0),),
        groups=groups,
        head=EndBlock(*head),
        tail=EndBlock(*tail),
        constant_bytes=0.0,
        memory_cap_bytes=1e30,
    )


def _check(problem: Problem, a: Assignment) -> None:
    num = problem.num_virtual
    sim = simulate(problem, a)
    fast = fast_replay(
        problem.num_stages,
        problem.num_chunks,
        problem.num_micro_batches,
        problem.schedule is Schedule.INTERLEAVED,
        [chunk_forward_s(problem, a, c) for c in range(num)],
        [chunk_backward_s(problem, a, c) for c in range(num)],
        [chunk_activation_bytes(problem, a, c) for c in range(num)],
    )
    assert fast.makespan_s == sim.makespan_s
    for s in range(problem.num_stages):
        expected = stage_peak_bytes(problem, a, s) - stage_static_bytes(problem, a, s)
        assert fast.stage_peak_activation_bytes[s] == pytest.approx(expected, rel=1e-12, abs=1e-9)


seconds = st.floats(0.01, 10.0)


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(1, 6),
    v=st.integers(1, 3),
    groups=st.integers(1, 3),
    m_mult=st.integers(1, 3),
    extra=st.integers(0, 3),
    data=st.data(),
)
def test_fast_replay_equals_simulator(pp, v, groups, m_mult, extra, data):
    # interleaving needs m a multiple of pp; plain 1F1B takes any m
    m = pp * m_mult if v > 1 else pp * m_mult + extra
    num = pp * v
    layers = [
        (num, data.draw(seconds), data.draw(seconds), data.draw(st.floats(0.0, 5.0)))
        for _ in range(groups)
    ]
    head = (data.draw(seconds), data.draw(seconds), 1.0)
    tail = (data.draw(seconds), data.draw(seconds), 1.0)
    problem = _problem(pp, v, m, layers, head, tail)
    # an uneven assignment: every group's layers spread at random over chunks
    counts = [[0] * groups for _ in range(num)]
    for g in range(groups):
        for _ in range(num):
            counts[data.draw(st.integers(0, num - 1))][g] += 1
    a = Assignment(tuple(tuple((n,) for n in row) for row in counts))
    _check(problem, a)


@pytest.mark.parametrize(("pp", "v", "m"), [(8, 1, 64), (4, 3, 8), (16, 2, 144), (35, 3, 35)])
def test_fast_replay_equals_simulator_on_published_shapes(pp, v, m):
    """Megatron-shaped schedules: embedding-heavy first stage, loss-heavy last."""
    problem = _problem(pp, v, m, [(pp * v * 2, 0.3, 0.9, 2.0)], (0.05, 0.1, 3.0), (0.2, 0.4, 5.0))
    a = Assignment(tuple(((2,),) for _ in range(pp * v)))
    _check(problem, a)
