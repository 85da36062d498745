"""The balancer: even-split baseline, MILP with critical-path cuts, and the
infeasibility diagnosis. Returns a BalanceResult; infeasible is a result.

Why cuts: the step time of a schedule is the longest path through its
dependency graph, a maximum of linear functions of the chunk times (one per
path). The MILP starts from the critical paths of the baselines; after each
solve the simulator replays the plan and, if its critical path is longer than
the MILP's step, that path becomes a new constraint. Every path bounds the
makespan of every assignment from below, so the MILP's dual bound is a valid
lower bound on the best simulated step time, and the loop stops when the
plan's simulated step equals its MILP step (up to the relative gap).
"""

from __future__ import annotations

import time

from autotune.pipeline.assignment import (
    Assignment,
    even_layer_split,
    layers_in_order,
    uniform_assignment,
)
from autotune.pipeline.deadline import (
    MIN_SOLVE_S,
    TimeBox,
    clock_cuts,
    deadline_of_whole_call,
    note_clock_cut,
    past,
)
from autotune.pipeline.problem import Problem, SolverSettings
from autotune.pipeline.result import (
    BalanceResult,
    Infeasibility,
    PlanEvaluation,
    SolverReport,
    evaluate,
)
from autotune.pipeline.simulator import Simulation, simulate

MAX_CUT_ROUNDS = 60
# The layer moves run when the first plan is this far above the LP bound.
IMPROVE_ABOVE_BOUND = 0.02
# Share of the time limit after which the layer moves stop (a safety stop:
# they are bounded by move counts and the rounds' work budget, about 20-30
# s of CPU on the hard family of benchmarks/pipeline_robustness.py, and a
# run that reaches this stop is the one case whose plan depends on the
# machine's load). The MILP that follows keeps its plan only when its
# solve finishes; on that family it does not within the limit, so the
# moves are given most of it.
MOVES_SHARE = 0.75
# The limit (s) from which the rounds get their whole work budgets (as set
# in perturb.py); a shorter limit gets them in proportion, so its search
# fits in it (the same plan on every run, not one the clock cut). A longer
# limit keeps them: its extra time goes to the MILP, and on a busy machine
# it leaves the whole search room to finish (docs/pipeline.md).
BUDGET_LIMIT_S = 60.0
# The warning of a plan a wall-clock stop cut (SolverReport.repeatable).
CLOCK_CUT_WARNING = (
    "the time limit stopped the plan search before its budget (a slow or busy machine), "
    f"so another run may give another plan; a --time-limit above {BUDGET_LIMIT_S:g} s or a "
    "less busy machine lets it finish and gives the same plan on every run"
)
# Seconds past the time limit the final polish may take (see balance()).
POLISH_GRACE_S = 1.0


def _path_of(sim: Simulation):
    from autotune.pipeline.ilp import Path

    return Path(sim.critical_forward, sim.critical_backward)


def _fits(problem: Problem, sim: Simulation) -> bool:
    return all(m <= problem.memory_cap_bytes * (1 + 1e-9) for m in sim.stage_peak_bytes)


def baselines(problem: Problem) -> list[tuple[str, Assignment]]:
    """The even split with every layer on one recomputation option, for each
    option every kind allows (the seed's "naive" plans)."""
    layers = even_layer_split(problem)
    out = []
    for o, opt in enumerate(problem.options):
        if all(g.activation_bytes[o] is not None for g in problem.groups):
            out.append(
                (f"even split, recompute {opt.name}", uniform_assignment(problem, layers, o))
            )
    return out


def _rounded_layers(problem: Problem, layers) -> list[list[int]] | None:
    """Integer layers per chunk from the LP relaxation's fractional ones:
    round the running total (so the sum is kept), cut in model order."""
    per_chunk, done, running = [], 0, 0.0
    for row in layers:
        running += sum(row)
        upto = min(round(running), problem.num_layers)
        per_chunk.append(upto - done)
        done = upto
    per_chunk[-1] += problem.num_layers - done
    if min(per_chunk) < problem.min_layers_per_chunk:
        return None
    return layers_in_order(problem, per_chunk)


def _quick_start(problem: Problem) -> Assignment | None:
    """The first plan, in about a second: the even split's layer counts
    (repaired when they cannot fit) with the recomputation chosen by the
    local search (search.py, layer_search.py)."""
    from autotune.pipeline.layer_search import feasible_start
    from autotune.pipeline.search import local_search

    layers = even_layer_split(problem)
    return local_search(problem, layers) or feasible_start(problem, layers)


def _heuristic_start(
    problem: Problem, paths, solver: str, time_limit_s: float, gap: float, verbose: bool
):
    """A usually better plan: the LP relaxation's layer counts rounded (or,
    when those cannot fit, repaired), the recomputation chosen by the local
    search. Every step is bounded by a count of moves, so the plan does not
    depend on the machine's speed. Also the relaxation's value, a lower bound
    on the step. (None, bound) when no start fits."""
    from autotune.pipeline.ilp import solve
    from autotune.pipeline.layer_search import feasible_start
    from autotune.pipeline.search import local_search

    relaxed = solve(
        problem,
        paths,
        time_limit_s=time_limit_s,
        solver=solver,
        relaxed=True,
        relative_gap=gap,
        verbose=verbose,
    )
    bound = relaxed.objective if relaxed.layers is not None else None
    if relaxed.layers is None:
        if relaxed.status == "no_solution":  # the limit stopped it
            note_clock_cut()
        return None, bound
    rounded = _rounded_layers(problem, relaxed.layers)
    if rounded is None:
        return None, bound
    found = None
    with TimeBox():  # pure Python, bounded by move counts: cut at the deadline
        found = local_search(problem, rounded) or feasible_start(problem, rounded)
    return found, bound


def _improve(
    problem: Problem,
    starts: list[Assignment],
    paths,
    solver: str,
    time_limit_s: float,
    gap: float,
    verbose: bool,
    deadline_s: float | None,
    rounds: int,
    enough_s: float = 0.0,
    budget_scale: float = 1.0,
) -> Assignment:
    """One-layer moves from each of `starts`, then (with rounds) the best
    climbed start's kind cuts (perturb.kind_cut_plans), then chains of
    rounds of kicks and moves (perturb.iterated_chains, at most `rounds` per
    chain, their work budgets times `budget_scale`; on two cores also with
    shifted seeds in a second process, portfolio.chains_on_cores), the
    first from the fastest of those plans and the next from the others (both
    until `deadline_s`; no new chain once a plan is within `enough_s`),
    then (CBC only) the MILP with the layer counts fixed. Each start is
    climbed because the best start is not always the best after the climb:
    on dense-moe-mtp, 2 chunks, 16 micro-batches, 2% above the tightest
    cap, the LP-rounded start (594.92 ms) climbs to 546.48 ms and the even
    split's (598.99 ms) to 520.95 ms."""
    from autotune.pipeline.ilp import solve
    from autotune.pipeline.layer_search import better, improve_layers
    from autotune.pipeline.perturb import (
        FAR_BUDGET_S,
        WORK_BUDGET_S,
        fastest_first,
        kind_cut_plans,
    )
    from autotune.pipeline.portfolio import chains_on_cores

    climbed = []
    for start in starts:
        plan = start
        with TimeBox():  # one move can take long on large shapes
            plan = improve_layers(problem, start, deadline_s=deadline_s)
        if plan not in climbed:
            climbed.append(plan)
    # The best climbed start's kind cuts join the starts: their layouts are
    # many one-layer moves away, each worse on its own (perturb.kind_cuts),
    # and one may be faster than every start (the chains begin from the
    # fastest). Not on the joint search's cheap path (no rounds).
    if rounds > 0:
        best_start = fastest_first(problem, climbed)[0][0]
        with TimeBox():
            for plan in kind_cut_plans(problem, best_start, deadline_s):
                if plan not in climbed:
                    climbed.append(plan)
    # The fastest of them, if the deadline cuts the chains.
    found = fastest_first(problem, climbed)[0][0]
    with TimeBox():
        found = chains_on_cores(
            problem,
            climbed,
            rounds=rounds,
            deadline_s=deadline_s,
            work_budget_s=WORK_BUDGET_S * budget_scale,
            enough_s=enough_s,
            far_budget_s=FAR_BUDGET_S * budget_scale,
        )
    if solver == "highs":
        return found
    layers = [
        [found.group_layers(c, g) for g in range(len(problem.groups))]
        for c in range(problem.num_virtual)
    ]
    out = solve(
        problem,
        paths,
        time_limit_s=time_limit_s,
        solver=solver,
        fixed_layers=layers,
        start=found,
        relative_gap=gap,
        verbose=verbose,
    )
    if out.assignment is not None and out.status == "optimal":
        a = out.assignment
        a_step, f_step = simulate(problem, a).makespan_s, simulate(problem, found).makespan_s
        if better(problem, a, a_step, found, f_step):
            return a
    return found


def _diagnose(problem: Problem, solver: str, time_limit_s: float) -> Infeasibility:
    """Minimise the largest excess over the cap; name the tightest stage."""
    from autotune.pipeline.ilp import solve

    out = solve(problem, [], time_limit_s=time_limit_s, solver=solver, minimise_overshoot=True)
    if out.assignment is None and out.status != "infeasible":  # the time limit ran out
        return Infeasibility(
            stage=None,
            shortfall_bytes=None,
            reason="no plan fits the memory cap (the tightest stage was not found in time)",
        )
    if out.assignment is None:
        return Infeasibility(
            stage=None,
            shortfall_bytes=None,
            reason="no assignment satisfies the layer-count and order rules",
        )
    sim = simulate(problem, out.assignment)
    peaks = sim.stage_peak_bytes
    stage = max(range(len(peaks)), key=peaks.__getitem__)
    shortfall = max(peaks[stage] - problem.memory_cap_bytes, 0.0)
    return Infeasibility(
        stage=stage,
        shortfall_bytes=shortfall,
        reason=(
            f"no plan fits the memory cap: stage {stage} is the tightest and still needs "
            f"{shortfall / 2**30:.3f} GiB more than the cap with the most memory-saving plan"
        ),
    )


def _search_limit_s(problem: Problem, settings: SolverSettings | None = None) -> float:
    """The search's wall time from now: the time limit, cut to the
    settings' deadline when it comes first (at least MIN_SOLVE_S)."""
    settings = settings or SolverSettings()
    if settings.deadline_s is None:
        return settings.time_limit_s
    left_s = settings.deadline_s - time.perf_counter()
    return min(settings.time_limit_s, max(left_s, MIN_SOLVE_S))


@deadline_of_whole_call(_search_limit_s)
def balance(problem: Problem, settings: SolverSettings | None = None) -> BalanceResult:
    """Choose layers per chunk and recomputation per layer that minimise the
    simulated step time while every stage fits in memory.

    Anytime: a plan from the heuristics comes first (bounded by move counts,
    so it is the same on every run), then the MILP searches for a faster one
    or proves none exists. A plan the MILP finds is used when its solve ended
    on its own (optimal, or every node pruned), not when the wall-clock limit
    cut it (then which plan it held depends on the machine's load); the
    limit's lower bound still sets the reported gap. Infeasible only when
    the solver proves it."""
    from autotune.pipeline.chain_bound import chain_bound
    from autotune.pipeline.ilp import solve, solver_name
    from autotune.pipeline.layer_search import better, polish, tie_key
    from autotune.pipeline.portfolio import solve_on_cores

    settings = settings or SolverSettings()
    t0 = time.perf_counter()
    cuts_at_start = clock_cuts()
    solver = solver_name(settings.solver)
    gap_rel = settings.relative_gap
    verbose = settings.verbose
    base_evals: list[PlanEvaluation] = []
    paths = []
    for label, assignment in baselines(problem):
        sim = simulate(problem, assignment)
        base_evals.append(evaluate(problem, assignment, sim, label))
        paths.append(_path_of(sim))
    fitting = [b for b in base_evals if b.fits]
    baseline = min(fitting, key=lambda b: b.step_time_s) if fitting else None

    best: tuple[Assignment, Simulation] | None = None

    def offer(a: Assignment) -> None:
        nonlocal best
        sim = simulate(problem, a)
        if _fits(problem, sim) and (
            best is None or better(problem, a, sim.makespan_s, best[0], best[1].makespan_s)
        ):
            best = (a, sim)

    if baseline is not None:
        offer(baseline.assignment)
    # the clock's share of the search (the time limit, or less when the
    # command's deadline comes first); the work budget follows the time
    # limit alone, so it is the same whenever the call starts
    limit_s = _search_limit_s(problem, settings)
    quick = None
    with TimeBox():  # pure Python, bounded by move counts: cut at the deadline
        quick = _quick_start(problem)
    if quick is not None:
        offer(quick)
    first_plan_s = time.perf_counter() - t0 if best is not None else None
    start, lower_bound = None, None
    # The relaxation's model alone takes seconds on large shapes: with less
    # than half the limit left, the MILP gets the rest instead.
    if time.perf_counter() - t0 < limit_s / 2:
        start, lower_bound = _heuristic_start(problem, paths, solver, limit_s / 2, gap_rel, verbose)
    else:
        note_clock_cut()
    # The stage-chain bound (chain_bound.py): integer layers and the exact
    # recomputation floor against the LP's exact schedule; both are valid.
    chain_s = 0.0
    with TimeBox():
        chain_s = chain_bound(problem).step_s
    lower_bound = max(lower_bound or 0.0, chain_s)
    if start is not None:
        offer(start)
    # Every distinct fitting start, best first (see _improve); without
    # rounds (search_rounds=0, the joint search's cheap path) only the best.
    starts = sorted(
        {a for a in (quick, start) if a is not None and _fits(problem, simulate(problem, a))},
        key=lambda a: (simulate(problem, a).makespan_s, tie_key(problem, a)),
    )
    if best is not None and best[0] not in starts:
        starts.insert(0, best[0])
    if settings.search_rounds == 0:
        starts = starts[:1]
    if first_plan_s is None and best is not None:
        first_plan_s = time.perf_counter() - t0
    # The one-layer moves cost seconds and rarely pay when the plan is already
    # close to the relaxation's bound (the MILP then proves it quickly); far
    # from it, they give the MILP a better cutoff. The MILP then runs once
    # for the rest of the time: a second start would lose its tree.
    if (
        best is not None
        and best[1].makespan_s > lower_bound * (1 + IMPROVE_ABOVE_BOUND)
        and not past(t0 + limit_s * MOVES_SHARE)
    ):
        offer(
            _improve(
                problem,
                starts,
                paths,
                solver,
                limit_s / 4,
                gap_rel,
                verbose,
                t0 + limit_s * MOVES_SHARE,
                settings.search_rounds,
                lower_bound * (1 + gap_rel),
                min(1.0, settings.time_limit_s / BUDGET_LIMIT_S),
            )
        )
    # Whether a wall-clock stop cut a step this plan comes from (not the
    # MILP's proof: its plan is used only when the solve ends on its own).
    clock_cut = clock_cuts() > cuts_at_start
    rounds = 0
    last = None
    proven_infeasible = False
    stopped_by_limit = False
    # Building a MILP costs about as much as finding the first plan did, or
    # more (both grow with the schedule's ops); its solver's limit counts
    # only from the end of the build, so a plan in hand is not risked on a
    # build that would overrun the limit (docs/reliability.md).
    build_s = 2 * (first_plan_s or 0.0)
    while best is None or best[1].makespan_s > lower_bound * (1 + gap_rel):
        remaining = limit_s - (time.perf_counter() - t0)
        if remaining <= 0.05 or (best is not None and remaining <= build_s):
            stopped_by_limit = True
            break
        rounds += 1
        round_start = time.perf_counter()
        # With HiGHS and a plan in hand, the plan sets a cutoff (the search
        # then only has to show that nothing is more than the relative gap
        # faster) and bounds the layers a stage can hold, which keeps the
        # per-stage split rows small (ilp.py, splits.py).
        known = best[1].makespan_s if best is not None and solver == "highs" else None
        cutoff = known * (1 - gap_rel) if known else None
        # On two cores a second process solves the same model in another
        # configuration meanwhile (portfolio.solve_on_cores); not on the
        # joint job search's cheap path (no rounds).
        last = (solve_on_cores if settings.search_rounds > 0 else solve)(
            problem,
            paths,
            time_limit_s=remaining,
            solver=solver,
            start=best[0] if best is not None and known is None else None,
            split_step_limit_s=cutoff,
            cutoff_s=cutoff,
            relative_gap=gap_rel,
            verbose=verbose,
        )
        build_s = time.perf_counter() - round_start - last.solve_time_s
        # Stopped by the wall clock (a plan found or none) rather than by
        # finishing: see the docstring.
        limited = last.status in ("feasible", "no_solution")
        if last.bound is not None:
            lower_bound = max(lower_bound, last.bound)
        stopped_by_limit = stopped_by_limit or limited
        if last.status == "infeasible" and best is None and not limited:
            proven_infeasible = True
        if last.assignment is None or last.status == "infeasible":
            break
        if not limited or solver == "cbc":
            # CBC has no cutoff here and seldom proves within the limit: its
            # plan at the limit is used (runs that hit it may then differ).
            offer(last.assignment)
            clock_cut = clock_cut or limited
        if last.status == "cutoff" or limited:
            break
        sim = simulate(problem, last.assignment)
        if last.bound is None and last.status == "optimal" and last.objective is not None:
            lower_bound = max(lower_bound, last.objective * (1 - gap_rel))
        if sim.makespan_s <= (last.objective or 0.0) * (1 + 1e-9) or rounds >= MAX_CUT_ROUNDS:
            break
        new_path = _path_of(sim)
        if new_path in paths:
            break
        paths.append(new_path)

    elapsed = time.perf_counter() - t0
    if best is None:
        if proven_infeasible:
            status = "infeasible"
            why = _diagnose(problem, solver, max(settings.time_limit_s, 10.0))
        else:
            status = "no_plan"
            why = Infeasibility(
                None,
                None,
                "no plan found within the time limit and none proven impossible; "
                "raise --time-limit",
            )
        return BalanceResult(
            problem=problem,
            plan=None,
            predicted_step_s=None,
            baseline=baseline,
            baselines=tuple(base_evals),
            solver=SolverReport(
                solver,
                status,
                elapsed,
                None,
                None,
                rounds,
                len(paths),
                first_plan_s,
                stopped_by_limit,
                not clock_cut,
            ),
            infeasible=why,
        )

    plan_a = best[0]
    # The polish usually takes well under a second; it gets that much past
    # the deadline, so runs that hit the limit still polish their plan.
    # With a command's deadline, the polish ends by it plus the grace (the
    # command kept that much of its limit for it), however late the search
    # began.
    grace_s = POLISH_GRACE_S
    if settings.deadline_s is not None:
        grace_s = settings.deadline_s + POLISH_GRACE_S - (t0 + limit_s)
    with TimeBox(extra_s=grace_s) as box:
        plan_a = polish(problem, best[0])
    clock_cut = clock_cut or box.expired
    plan_sim = simulate(problem, plan_a)
    if not (_fits(problem, plan_sim) and plan_sim.makespan_s <= best[1].makespan_s * (1 + 1e-12)):
        plan_a, plan_sim = best
    plan_eval = evaluate(problem, plan_a, plan_sim, "balanced")
    predicted = (
        last.objective if (last is not None and last.assignment == plan_eval.assignment) else None
    )
    if predicted is None:
        predicted = plan_eval.step_time_s
    gap = None
    if lower_bound > 0:
        gap = max(plan_eval.step_time_s - lower_bound, 0.0) / plan_eval.step_time_s
    status = "optimal" if gap is not None and gap <= gap_rel + 1e-9 else "feasible"
    return BalanceResult(
        problem=problem,
        plan=plan_eval,
        predicted_step_s=predicted,
        baseline=baseline,
        baselines=tuple(base_evals),
        solver=SolverReport(
            solver,
            status,
            elapsed,
            gap,
            lower_bound or None,
            rounds,
            len(paths),
            first_plan_s,
            stopped_by_limit,
            not clock_cut,
        ),
        infeasible=None,
        warnings=() if not clock_cut else (CLOCK_CUT_WARNING,),
    )


def evaluate_plans(plans) -> tuple[PlanEvaluation, ...]:
    """Simulate given plans (the seed tool's manual plans), each on its own
    problem (a manual plan may use another chunk count); labelled by name."""
    out = []
    for plan in plans:
        sim = simulate(plan.problem, plan.assignment)
        out.append(evaluate(plan.problem, plan.assignment, sim, plan.name))
    return tuple(out)
