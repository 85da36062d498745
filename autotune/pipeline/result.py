"""Frozen result types of the balancer and the seed framework's config lists."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.pipeline.assignment import (
    Assignment,
    chunk_backward_s,
    chunk_forward_s,
    stage_static_bytes,
)
from autotune.pipeline.problem import Problem
from autotune.pipeline.simulator import BubbleParts, Simulation

# Which recomputation options count in each of the seed framework's lists;
# its select lists include the fully recomputed layers (pipeline.md section 5).
SEED_LISTS = {
    "recompute": ("full",),
    "select_recompute": ("full", "selective", "selective_comm"),
    "select_comm_recompute": ("full", "comm", "selective_comm"),
}


@dataclass(frozen=True)
class ChunkPlan:
    """One model chunk: layers and recomputation counts by kind."""

    chunk: int
    stage: int
    local_chunk: int
    layers: dict[str, int]
    recompute: dict[str, dict[str, int]]
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class StagePlan:
    """One stage: its chunks, memory and busy time."""

    stage: int
    chunks: tuple[ChunkPlan, ...]
    static_bytes: float
    peak_memory_bytes: float
    headroom_bytes: float
    busy_s: float


@dataclass(frozen=True)
class SeedConfig:
    """The seed framework's per-stage lists (per chunk when v > 1)."""

    offset: list
    recompute: list
    select_recompute: list
    select_comm_recompute: list


@dataclass(frozen=True)
class PlanEvaluation:
    """An assignment with its simulated step time, bubble and memory."""

    label: str
    assignment: Assignment
    step_time_s: float
    bubble: BubbleParts
    stages: tuple[StagePlan, ...]
    fits: bool
    seed: SeedConfig
    simulation: Simulation


@dataclass(frozen=True)
class SolverReport:
    """How the search went: solver, status, time, gap, cut rounds."""

    solver: str
    status: str
    solve_time_s: float
    gap: float | None
    lower_bound_s: float | None
    num_rounds: int
    num_paths: int
    first_plan_s: float | None = None
    time_limited: bool = False
    # False when a wall-clock stop cut a step the plan comes from (the
    # heuristics' safety stop, a time box, a skipped LP relaxation, CBC's
    # plan at the limit, a cut polish): another run may then give another
    # plan. The MILP's proof stopped by the limit is time_limited only (its
    # plan is not used then).
    repeatable: bool = True


@dataclass(frozen=True)
class Infeasibility:
    """Why no plan exists: the tightest stage and how much memory it lacks."""

    stage: int | None
    shortfall_bytes: float | None
    reason: str


@dataclass(frozen=True)
class BalanceResult:
    """The balanced plan (None when infeasible), its ILP prediction, the
    even-split baselines and the solver report."""

    problem: Problem
    plan: PlanEvaluation | None
    predicted_step_s: float | None
    baseline: PlanEvaluation | None
    baselines: tuple[PlanEvaluation, ...]
    solver: SolverReport
    infeasible: Infeasibility | None
    decomposition: object | None = None
    source_format: str = "meshtune"
    warnings: tuple[str, ...] = ()
    manual_plans: tuple[PlanEvaluation, ...] = ()


def seed_config(problem: Problem, a: Assignment) -> SeedConfig:
    """offset = layers - floor(N / (pp v)) per chunk, and per recomputation
    list the count of layers whose option it includes; flat lists for v = 1,
    `[chunk][stage]` lists of lists otherwise (the seed tool's output form)."""
    pp, v = problem.num_stages, problem.num_chunks
    base = problem.num_layers // problem.num_virtual
    names = [o.name for o in problem.options]

    def per_chunk(fn) -> list:
        rows = [[fn(local * pp + s) for s in range(pp)] for local in range(v)]
        return rows[0] if v == 1 else rows

    def count(chunk: int, included: tuple[str, ...]) -> int:
        return sum(
            n
            for per_group in a.counts[chunk]
            for o, n in enumerate(per_group)
            if names[o] in included
        )

    return SeedConfig(
        offset=per_chunk(lambda c: a.layers_in_chunk(c) - base),
        recompute=per_chunk(lambda c: count(c, SEED_LISTS["recompute"])),
        select_recompute=per_chunk(lambda c: count(c, SEED_LISTS["select_recompute"])),
        select_comm_recompute=per_chunk(lambda c: count(c, SEED_LISTS["select_comm_recompute"])),
    )


def evaluate(problem: Problem, a: Assignment, sim: Simulation, label: str) -> PlanEvaluation:
    """Collect the per-chunk and per-stage figures of a simulated assignment."""
    pp = problem.num_stages
    names = [o.name for o in problem.options]
    stages = []
    for s in range(pp):
        chunks = []
        for c in range(s, problem.num_virtual, pp):
            layers = {g.kind: sum(a.counts[c][i]) for i, g in enumerate(problem.groups)}
            recompute = {
                g.kind: {names[o]: n for o, n in enumerate(a.counts[c][i]) if n}
                for i, g in enumerate(problem.groups)
                if sum(a.counts[c][i])
            }
            chunks.append(
                ChunkPlan(
                    chunk=c,
                    stage=s,
                    local_chunk=c // pp,
                    layers=layers,
                    recompute=recompute,
                    forward_s=chunk_forward_s(problem, a, c),
                    backward_s=chunk_backward_s(problem, a, c),
                )
            )
        peak = sim.stage_peak_bytes[s]
        stages.append(
            StagePlan(
                stage=s,
                chunks=tuple(chunks),
                static_bytes=stage_static_bytes(problem, a, s),
                peak_memory_bytes=peak,
                headroom_bytes=problem.memory_cap_bytes - peak,
                busy_s=sim.stage_busy_s[s],
            )
        )
    fits = all(st.headroom_bytes >= -1e-9 * problem.memory_cap_bytes for st in stages)
    return PlanEvaluation(
        label=label,
        assignment=a,
        step_time_s=sim.makespan_s,
        bubble=sim.bubble,
        stages=tuple(stages),
        fits=fits,
        seed=seed_config(problem, a),
        simulation=sim,
    )
