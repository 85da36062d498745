"""The stage-balancing MILP (with solver_call.py, the only modules that import pulp).

Variables (all named): `n_g{g}_c{c}_{option}` integer, the layers of group g
in model chunk c that use a recomputation option; `x_g{g}_c{c}` continuous,
their sum over options (integral because the n are); `done_g{g}_c{c}` binary,
group g is fully placed by the end of chunk c; `step` the step time.

    minimise   step
    subject to step >= sum_c nF_p(c) F_c + nB_p(c) B_c        for each path p
               static_s + sum_k a_k act(chunk k of s) <= cap  for each stage s,
                                                              alive vector a
               sum_{c,o} n_gco = count_g;  sum_{g,o} n_gco >= min_layers
               Q_gc >= count_g done_gc;  Q_{g+1,c} <= count_{g+1} done_gc
               R_s >= slope X_s + intercept;  X_s <= t_max_s   (bounds.py)

with F_c, B_c, act, static linear in n (assignment.py), Q_gc the layers of
group g in chunks <= c, and the paths taken from the schedule's dependency
graph (balance.py adds the simulator's critical paths until the bound is
tight, so `step` converges to the simulated makespan). R_s, X_s are a
stage's recomputation seconds and layers; those cuts are valid for every plan
that fits, so they only tighten the relaxation (with one layer kind they are
left out on the stages whose split rows imply them, _covered_stages). A plan
passed as `start` is the solver's first incumbent.

The rows are built as (variable, coefficient) lists (`_row`) and the model
is handed to HiGHS as arrays (solver_call.InterruptibleHighs): the same
model PuLP's operators and its own HiGHS hook build, in about half the time
(the 96-layer benchmark's two models: 0.13 s of CPU instead of 0.27 s).
"""

from __future__ import annotations

import os
import re
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass

import numpy
import pulp

from autotune.pipeline.assignment import Assignment, alive_vectors
from autotune.pipeline.bounds import stage_floors
from autotune.pipeline.deadline import TimeBox
from autotune.pipeline.problem import Problem, Schedule, SolverChoice
from autotune.pipeline.quiet import solver_output
from autotune.pipeline.schedule import stage_orders
from autotune.pipeline.solver_call import DeadlineCbc, InterruptibleHighs, cbc_folder

GIB = float(2**30)
# Solver seed (CBC reads 0 as "from the clock", hence + 1 there).
RANDOM_SEED = 0


@dataclass(frozen=True)
class Path:
    """Op counts of one dependency-graph path per model chunk."""

    forward: tuple[int, ...]
    backward: tuple[int, ...]


@dataclass(frozen=True)
class IlpOutcome:
    """One MILP solve: status, the assignment found, objective and bound."""

    # optimal | feasible | infeasible | no_solution | cutoff (no plan below
    # the cutoff; `assignment` may hold one at or above it)
    status: str
    solver: str
    assignment: Assignment | None
    objective: float | None
    bound: float | None
    solve_time_s: float
    overshoot_bytes: float | None = None
    layers: tuple[tuple[float, ...], ...] | None = None  # [chunk][group], relaxed solves


def highs_available() -> bool:
    """True when PuLP can drive HiGHS through highspy."""
    with solver_output(False):  # probing makes a HiGHS object, which prints a banner
        return "HiGHS" in pulp.listSolvers(onlyAvailable=True)


def solver_name(choice: SolverChoice) -> str:
    """The solver `choice` resolves to on this machine."""
    if choice is SolverChoice.CBC:
        return "cbc"
    if choice is SolverChoice.HIGHS or highs_available():
        return "highs"
    return "cbc"


class _HighsWithStart(InterruptibleHighs):
    """PuLP's HiGHS driver, handing HiGHS the variables' initial values
    (those set) as a MIP start; HiGHS completes and checks it."""

    def callSolver(self, lp):  # PuLP's hook, run after the model is built
        given = [v for v in lp.variables() if v.varValue is not None]
        if given:
            lp.solverModel.setSolution(
                len(given),
                numpy.array([v.index for v in given], dtype=numpy.int32),
                numpy.array([float(v.varValue) for v in given]),
            )
        super().callSolver(lp)


# HiGHS options for a solve that starts from a good incumbent: its primal
# heuristics (RINS, RENS, feasibility jump, root reduced-cost fixing) then
# mostly re-find plans no better than the start, and on the benchmark instance
# spent about 11 of 17 s doing so; cut separation at tree nodes costs more
# than it tightens here. The search itself (branching on the root LP with the
# floor cuts) is what proves optimality. Measured by
# benchmarks/pipeline_speed.py; see docs/pipeline.md. (Options of HiGHS >= 1.13.)
_HIGHS_WARM_OPTIONS = {
    "mip_heuristic_effort": 0.0,
    "mip_heuristic_run_rins": False,
    "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False,
    "mip_heuristic_run_feasibility_jump": False,
    "mip_allow_cut_separation_at_nodes": False,
}
# A cutoff solve also keeps its root: HiGHS 1.16 restarted the 28 GiB
# benchmark proof three times (each restart solves the root LP and repeats
# its strong branching), 14 s of CPU against 8 s without restarts
# (docs/pipeline.md).
_HIGHS_CUTOFF_OPTIONS = {**_HIGHS_WARM_OPTIONS, "mip_allow_restart": False}


def _make_solver(
    name: str,
    time_limit_s: float,
    gap: float,
    log_path: str | None,
    warm: bool = False,
    cutoff: float | None = None,
    verbose: bool = False,
    allow_restart: bool = False,
):
    if name == "highs":
        if cutoff is not None:
            # Prune every node whose bound reaches the cutoff; the plan that
            # set it is known, so the solver's own plan search is not needed.
            options = {**_HIGHS_CUTOFF_OPTIONS, "objective_bound": cutoff}
            if allow_restart:
                options["mip_allow_restart"] = True
            make = InterruptibleHighs
        elif warm:
            make, options = _HighsWithStart, _HIGHS_WARM_OPTIONS
        else:
            make, options = InterruptibleHighs, {}
        # One thread and a fixed seed: the same problem gives the same plan.
        return make(
            msg=verbose,
            timeLimit=time_limit_s,
            gapRel=gap,
            threads=1,
            random_seed=RANDOM_SEED,
            **options,
        )
    # CBC writes its log to `log_path` (its bound is read from there); PuLP
    # would warn that the file replaces msg=True, so the log reaches stderr
    # after the solve instead (_echo_log).
    cbc = DeadlineCbc(
        msg=False,
        timeLimit=max(1, round(time_limit_s)),
        gapRel=gap,
        logPath=log_path,
        warmStart=warm,
        threads=1,
        options=[f"randomSeed {RANDOM_SEED + 1}", f"randomCbcSeed {RANDOM_SEED + 1}"],
    )
    if log_path is not None:  # model and solution files next to the log
        cbc.tmpDir = os.path.dirname(log_path)
    return cbc


def _set_start(problem: Problem, start: Assignment, n: dict, xv: dict, ys: dict) -> None:
    """Initial values of the layer and recomputation counts and of the split
    binaries (the solver derives the rest)."""
    for (g, c, o), var in n.items():
        var.setInitialValue(start.counts[c][g][o])
    for (g, c), var in xv.items():
        var.setInitialValue(start.group_layers(c, g))
    pp, num = problem.num_stages, problem.num_virtual
    for (s, split), var in ys.items():
        mine = tuple(start.layers_in_chunk(c) for c in range(s, num, pp))
        var.setInitialValue(1 if mine == split else 0)


def _echo_log(log_path: str) -> None:
    """Copy CBC's log to stderr (`--verbose`)."""
    try:
        text = open(log_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return
    sys.stderr.write(text if text.endswith("\n") or not text else text + "\n")
    sys.stderr.flush()


def _cbc_bound(log_path: str) -> float | None:
    """The best bound CBC printed (its 'Lower bound:' or 'best possible' line)."""
    try:
        text = open(log_path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    found = re.findall(r"Lower bound:\s*([-0-9.eE+]+)", text) or re.findall(
        r"best possible ([-0-9.eE+]+)", text
    )
    return float(found[-1]) if found else None


def _var(prob, name: str, low=None, up=None, cat=pulp.LpContinuous):
    """A named variable attached to `prob` (PuLP >= 3.3 API, older fallback)."""
    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, low, up, cat=cat)


def _dominated(problem: Problem, g: int, o: int) -> bool:
    """Option o of group g is never needed when another option costs no more
    backward time and keeps no more activation memory (ties keep the first)."""
    acts, opts = problem.groups[g].activation_bytes, problem.options
    mine = (opts[o].backward_time_coef, acts[o])
    for k, other in enumerate(opts):
        if k == o or acts[k] is None:
            continue
        theirs = (other.backward_time_coef, acts[k])
        if theirs[0] <= mine[0] and theirs[1] <= mine[1] and (theirs != mine or k < o):
            return True
    return False


def _row(prob, name: str, terms, sense: int, rhs: float = 0.0, constant: float = 0.0) -> None:
    """Add the row `sum coef * var + constant (sense) rhs` from (var, coef)
    pairs, a repeated variable's coefficients summed in order. The same row
    PuLP's operators build (zero products dropped, keys in order of first
    appearance, the constant folded as `constant - rhs`), without an
    expression object per term."""
    coefs: dict = {}
    for var, coef in terms:
        if coef != 0:
            coefs[var] = coefs[var] + coef if var in coefs else coef
    expr = pulp.LpAffineExpression(coefs, constant)
    prob += pulp.LpConstraint(expr, sense, name, rhs), name


_GE, _LE, _EQ = pulp.LpConstraintGE, pulp.LpConstraintLE, pulp.LpConstraintEQ


def _add_schedule(problem: Problem, prob, step, fwd: list, bwd: list) -> None:
    """End time `end_{F|B}{c}_{j}` of every op, bounded below by its stage
    predecessor's end and its input's end plus its own duration (the
    simulator's rules), and `step` >= every stage's last end: minimising
    `step` makes it the longest path, i.e. the simulated makespan."""
    pp, num = problem.num_stages, problem.num_virtual
    orders = stage_orders(
        pp, problem.num_chunks, problem.num_micro_batches, problem.schedule is Schedule.INTERLEAVED
    )
    end: dict[tuple[bool, int, int], pulp.LpVariable] = {}
    for s, order in enumerate(orders):
        for forward, local, j in order:
            c = local * pp + s
            end[forward, c, j] = _var(prob, f"end_{'F' if forward else 'B'}{c}_{j}", 0)
    for s, order in enumerate(orders):
        prev = None
        for forward, local, j in order:
            c = local * pp + s
            key = (forward, c, j)
            dur = fwd[c] if forward else bwd[c]
            tag = f"{'F' if forward else 'B'}{c}_{j}"
            if prev is not None:
                _row(
                    prob,
                    f"stage_order_{tag}",
                    ((end[key], 1), (end[prev], -1), (dur, -1)),
                    _GE,
                )
            if forward:
                dep = (True, c - 1, j) if c > 0 else None
            else:
                dep = (False, c + 1, j) if c < num - 1 else (True, c, j)
            if dep is not None:
                _row(prob, f"input_{tag}", ((end[key], 1), (end[dep], -1), (dur, -1)), _GE)
            elif prev is None:
                _row(prob, f"first_{tag}", ((end[key], 1), (dur, -1)), _GE)
            prev = key
        _row(prob, f"last_s{s}", ((step, 1), (end[prev], -1)), _GE)


def _recompute(problem: Problem, per_chunk: list, t_ref: float, chunks) -> list:
    """Recomputation seconds per micro-batch (scaled by t_ref) of the layers
    in `chunks`, as (var, coef) pairs: sum b_g coef_o n_gco."""
    groups, options = problem.groups, problem.options
    return [
        (v, groups[g].backward_s * options[o].backward_time_coef / t_ref)
        for c in chunks
        for (g, o), v in per_chunk[c]
        if options[o].backward_time_coef > 0
    ]


def _add_stage_floors(
    problem: Problem, prob, per_chunk: list, xv: dict, t_ref: float, covered: frozenset[int]
) -> None:
    """Valid cuts from bounds.py: per stage, recomputation seconds
    `R_s >= slope X_s + intercept` and layers `X_s <= t_max` (skipped by the
    overshoot diagnosis, whose plans may break the cap).

    The recomputation cuts are left out on the stages in `covered`, whose
    split rows imply them (_covered_stages); the LP is the same without
    them, and smaller."""
    pp = problem.num_stages
    for floor in stage_floors(problem):
        s = floor.stage
        layers = [v for (g, c), v in xv.items() if c % pp == s]
        if floor.max_layers < problem.num_layers:
            _row(prob, f"stage_layers_max_s{s}", ((v, 1) for v in layers), _LE, floor.max_layers)
        if not floor.cuts or s in covered:
            continue
        recompute = _recompute(problem, per_chunk, t_ref, range(s, problem.num_virtual, pp))
        for i, (slope, intercept) in enumerate(floor.cuts):
            _row(
                prob,
                f"recompute_floor_s{s}_{i}",
                recompute + [(v, -(slope / t_ref)) for v in layers],
                _GE,
                intercept / t_ref,
            )


def _covered_stages(problem: Problem, step_limit_s: float | None) -> frozenset[int]:
    """Stages whose split rows make bounds.py's recomputation cuts redundant
    (the cuts are then left out): with one layer kind, the stages with split
    rows whose weightings include all chunks at weight 1. For such a stage,
    `R_s >= sum_sigma phi_sigma(1) y_sigma` with `X_s = sum_sigma |sigma|
    y_sigma` and `sum_sigma y_sigma = 1`, and phi_sigma(1) >= phi_s(|sigma|)
    (every chunk holds at least the stage's fewest alive micro-batches) >=
    each cut's line at |sigma|; so every cut holds at every point, fractional
    or not, that meets the split rows, and the LP is the same without them.

    Measured (docs/pipeline.md): without them the 28 GiB benchmark proof
    took 23,961 simplex iterations instead of 27,859, and 8,391 instead of
    11,752 at 27.5 GiB; the uniform robustness instances kept their bounds.
    With several kinds the LP is the same too, but HiGHS's root cuts lean on
    the floor rows (dense-moe-mtp 2 x 32 at its tightest cap: root bound
    802.8 ms without them against 814.6 ms with them), so there they stay."""
    from autotune.pipeline.splits import stage_splits

    if step_limit_s is None or len(problem.groups) > 1:
        return frozenset()
    ones = tuple(1.0 for _ in range(problem.num_chunks))
    return frozenset(st.stage for st in stage_splits(problem, step_limit_s) if ones in st.weights)


def _add_split_rows(
    problem: Problem,
    prob,
    per_chunk: list,
    xv: dict,
    t_ref: float,
    step_limit_s: float,
    relaxed: bool,
) -> dict[tuple[int, tuple[int, ...]], pulp.LpVariable]:
    """Per-stage split binaries and their weighted recomputation floors
    (splits.py): `y_s{s}_{split}` picks the stage's layers per local chunk."""
    from autotune.pipeline.splits import stage_splits

    made: dict[tuple[int, tuple[int, ...]], pulp.LpVariable] = {}

    pp = problem.num_stages
    cat = pulp.LpContinuous if relaxed else pulp.LpBinary
    for st in stage_splits(problem, step_limit_s):
        s = st.stage
        chunks = list(range(s, problem.num_virtual, pp))
        ys = [
            _var(prob, f"y_s{s}_" + "_".join(map(str, split)), 0, 1, cat=cat) for split in st.splits
        ]
        made.update(((s, split), y) for split, y in zip(st.splits, ys, strict=True))
        _row(prob, f"split_one_s{s}", ((y, 1) for y in ys), _EQ, 1)
        for k, c in enumerate(chunks):
            _row(
                prob,
                f"split_layers_s{s}_k{k}",
                [(v, 1) for (g, cc), v in xv.items() if cc == c]
                + [(y, -split[k]) for split, y in zip(st.splits, ys, strict=True)],
                _EQ,
            )
        recompute = [_recompute(problem, per_chunk, t_ref, (c,)) for c in chunks]
        for j, weight in enumerate(st.weights):
            _row(
                prob,
                f"split_floor_s{s}_w{j}",
                [(v, w * c) for w, r in zip(weight, recompute, strict=True) if w for v, c in r]
                + [
                    (y, -(phi[j] / t_ref))
                    for phi, y in zip(st.phi_s, ys, strict=True)
                    if phi[j] > 0
                ],
                _GE,
            )
    return made


def _build(
    problem: Problem,
    paths: list[Path],
    fixed_layers: list[list[int]] | None,
    minimise_overshoot: bool,
    exact_schedule: bool,
    relaxed: bool,
    split_step_limit_s: float | None,
):
    """The MILP of `solve` (its arguments): the PuLP problem, the
    recomputation counts n[g, c, o], the layer counts x[g, c], the split
    variables, the overshoot variable (or None) and the time scale."""
    t_ref = max(g.forward_s for g in problem.groups)
    num, pp = problem.num_virtual, problem.num_stages
    groups, options = problem.groups, problem.options
    prob = pulp.LpProblem("pipeline_balance", pulp.LpMinimize)
    integer = pulp.LpContinuous if relaxed else pulp.LpInteger

    n: dict[tuple[int, int, int], pulp.LpVariable] = {}
    for c in range(num):
        for g, grp in enumerate(groups):
            for o, opt in enumerate(options):
                if grp.activation_bytes[o] is not None and not _dominated(problem, g, o):
                    n[g, c, o] = _var(prob, f"n_g{g}_c{c}_{opt.name}", 0, grp.count, cat=integer)

    # Explicit layer counts. Continuous on purpose: each is the sum of integer
    # counts n, so it is integral in every solution, and HiGHS's presolve marks
    # it implied-integer; declared integer instead, the benchmark proof took
    # about 10 s instead of 7 (benchmarks/pipeline_speed.py, docs/pipeline.md).
    xv = {
        (g, c): _var(prob, f"x_g{g}_c{c}", 0, grp.count)
        for g, grp in enumerate(groups)
        for c in range(num)
    }
    # The recomputation counts of each chunk, in creation order.
    per_chunk: list[list] = [[] for _ in range(num)]
    for (g, c, o), v in n.items():
        per_chunk[c].append(((g, o), v))
    for (g, c), var in xv.items():
        _row(
            prob,
            f"layers_g{g}_c{c}",
            [(v, 1) for (gg, _), v in per_chunk[c] if gg == g] + [(var, -1)],
            _EQ,
        )

    for g, grp in enumerate(groups):
        _row(prob, f"place_all_g{g}", ((xv[g, c], 1) for c in range(num)), _EQ, grp.count)
    for c in range(num):
        _row(
            prob,
            f"min_layers_c{c}",
            ((xv[g, c], 1) for g in range(len(groups))),
            _GE,
            problem.min_layers_per_chunk,
        )
        if fixed_layers is not None:
            for g in range(len(groups)):
                _row(prob, f"fixed_g{g}_c{c}", ((xv[g, c], 1),), _EQ, fixed_layers[c][g])
    # Model order: group g+1 may start in chunk c only once group g is done.
    for g in range(len(groups) - 1):
        for c in range(num - 1):
            done = _var(
                prob, f"done_g{g}_c{c}", 0, 1, cat=pulp.LpContinuous if relaxed else pulp.LpBinary
            )
            _row(
                prob,
                f"order_done_g{g}_c{c}",
                [(xv[g, k], 1) for k in range(c + 1)] + [(done, -groups[g].count)],
                _GE,
            )
            _row(
                prob,
                f"order_next_g{g}_c{c}",
                [(xv[g + 1, k], 1) for k in range(c + 1)] + [(done, -groups[g + 1].count)],
                _LE,
            )

    # Chunk times as (var, coef) pairs plus a constant, scaled by t_ref.
    fwd, bwd, fwd_const, bwd_const = [], [], [], []
    for c in range(num):
        f_const = (problem.head.forward_s if c == 0 else 0.0) + (
            problem.tail.forward_s if c == num - 1 else 0.0
        )
        b_const = (problem.head.backward_s if c == 0 else 0.0) + (
            problem.tail.backward_s if c == num - 1 else 0.0
        )
        fwd.append([(v, groups[g].forward_s / t_ref) for (g, _), v in per_chunk[c]])
        bwd.append(
            [
                (v, groups[g].backward_s * (1 + options[o].backward_time_coef) / t_ref)
                for (g, o), v in per_chunk[c]
            ]
        )
        fwd_const.append(f_const / t_ref)
        bwd_const.append(b_const / t_ref)

    ys: dict = {}
    if not minimise_overshoot:
        covered = _covered_stages(problem, split_step_limit_s)
        _add_stage_floors(problem, prob, per_chunk, xv, t_ref, covered)
        if split_step_limit_s is not None:
            ys = _add_split_rows(problem, prob, per_chunk, xv, t_ref, split_step_limit_s, relaxed)

    over = _var(prob, "overshoot_gib", 0) if minimise_overshoot else None
    cap = problem.memory_cap_bytes / GIB
    vectors = alive_vectors(problem)
    for s in range(pp):
        chunks = list(range(s, num, pp))
        static = problem.constant_bytes / GIB
        static += (problem.head.memory_bytes / GIB if s == 0 else 0.0) + (
            problem.tail.memory_bytes / GIB if s == pp - 1 else 0.0
        )
        params = [
            (v, groups[g].parameter_bytes / GIB) for c in chunks for (g, _), v in per_chunk[c]
        ]
        acts = [
            [(v, groups[g].activation_bytes[o] / GIB) for (g, o), v in per_chunk[c]] for c in chunks
        ]
        for i, vec in enumerate(vectors[s]):
            act = [(v, k * a) for k, terms in zip(vec, acts, strict=True) if k for v, a in terms]
            extra = [(over, -1)] if over is not None else []
            _row(prob, f"memory_s{s}_v{i}", params + act + extra, _LE, cap, constant=static)

    if over is not None:
        prob += over
    else:
        step = _var(prob, "step", 0)
        prob += step
        for p_i, path in enumerate(paths):
            terms = [(step, 1)]
            total = 0.0
            for c, k in enumerate(path.forward):
                if k:
                    terms += [(v, -(k * coef)) for v, coef in fwd[c]]
                    total += fwd_const[c] * k
            backward_total = 0.0
            for c, k in enumerate(path.backward):
                if k:
                    terms += [(v, -(k * coef)) for v, coef in bwd[c]]
                    backward_total += bwd_const[c] * k
            _row(prob, f"path_{p_i}", terms, _GE, total + backward_total)
        if exact_schedule:
            # Named chunk-time variables keep every op row at three terms.
            fwd_vars, bwd_vars = [], []
            for c in range(num):
                fv = _var(prob, f"forward_c{c}", 0)
                bv = _var(prob, f"backward_c{c}", 0)
                _row(
                    prob,
                    f"forward_time_c{c}",
                    [(fv, 1)] + [(v, -coef) for v, coef in fwd[c]],
                    _EQ,
                    fwd_const[c],
                )
                _row(
                    prob,
                    f"backward_time_c{c}",
                    [(bv, 1)] + [(v, -coef) for v, coef in bwd[c]],
                    _EQ,
                    bwd_const[c],
                )
                fwd_vars.append(fv)
                bwd_vars.append(bv)
            _add_schedule(problem, prob, step, fwd_vars, bwd_vars)

    return prob, n, xv, ys, over, t_ref


def solve(
    problem: Problem,
    paths: list[Path],
    *,
    time_limit_s: float,
    solver: str,
    fixed_layers: list[list[int]] | None = None,
    minimise_overshoot: bool = False,
    exact_schedule: bool = True,
    relaxed: bool = False,
    start: Assignment | None = None,
    split_step_limit_s: float | None = None,
    cutoff_s: float | None = None,
    relative_gap: float = 1e-3,
    verbose: bool = False,
    allow_restart: bool = False,
) -> IlpOutcome:
    """Build and solve the MILP. Times are scaled to the largest layer
    forward and memory to GiB so the coefficients stay near 1.

    `fixed_layers[c][g]` pins layer counts (only recomputation is chosen);
    `minimise_overshoot` drops the time objective and minimises the largest
    memory excess over the cap (the infeasibility diagnosis); `relaxed`
    solves the LP relaxation and reports its layer counts in `layers`;
    `start` is a plan handed to the solver as its first incumbent;
    `allow_restart` lets a cutoff solve restart from its root (off by
    default, _HIGHS_CUTOFF_OPTIONS)."""
    build_t0 = time.perf_counter()
    # The build is pure Python and, on large shapes under load, takes
    # seconds: it runs in a time box, so a build that would end past the
    # deadline is abandoned (as a solve stopped by its limit before a plan).
    built = None
    with TimeBox():
        built = _build(
            problem,
            paths,
            fixed_layers,
            minimise_overshoot,
            exact_schedule,
            relaxed,
            split_step_limit_s,
        )
    if built is None:
        return IlpOutcome("no_solution", solver, None, None, None, time.perf_counter() - build_t0)
    prob, n, xv, ys, over, t_ref = built
    num, groups, options = problem.num_virtual, problem.groups, problem.options
    cleanup = ExitStack()
    log_path = None
    if solver == "cbc":  # CBC's files in a private folder, removed on any exit
        log_path = os.path.join(cleanup.enter_context(cbc_folder()), "cbc.log")
    t0 = time.perf_counter()
    with cleanup:
        if start is not None:
            _set_start(problem, start, n, xv, ys)
        use_cutoff = cutoff_s is not None and solver == "highs"
        with solver_output(verbose):
            prob.solve(
                _make_solver(
                    solver,
                    time_limit_s,
                    relative_gap,
                    log_path,
                    start is not None,
                    cutoff_s / t_ref if use_cutoff else None,
                    verbose,
                    allow_restart,
                )
            )
        elapsed = time.perf_counter() - t0
        bound = None
        if solver == "highs":
            info = prob.solverModel.getInfo()
            bound = info.mip_dual_bound
        elif log_path is not None:
            bound = _cbc_bound(log_path)
            if verbose:
                _echo_log(log_path)
        if bound is not None and (bound != bound or abs(bound) == float("inf")):
            bound = None

    status = pulp.LpStatus[prob.status]
    if status == "Infeasible" and use_cutoff:
        # Every node below the cutoff was searched and none holds a plan:
        # no plan is faster than the cutoff.
        return IlpOutcome("cutoff", solver, None, None, cutoff_s, elapsed)
    if status == "Infeasible":
        return IlpOutcome("infeasible", solver, None, None, None, elapsed)
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        # Stopped (time limit) before a plan: with a cutoff, every plan is at
        # least min(cutoff, the search's bound), a valid lower bound.
        proven = None
        if use_cutoff and bound is not None:
            proven = min(bound * t_ref, cutoff_s)
        return IlpOutcome("no_solution", solver, None, None, proven, elapsed)
    if relaxed:
        layers = tuple(
            tuple(xv[g, c].varValue or 0.0 for g in range(len(groups))) for c in range(num)
        )
        value = (pulp.value(prob.objective) or 0.0) * t_ref
        return IlpOutcome("optimal", solver, None, value, value, elapsed, layers=layers)
    counts = tuple(
        tuple(
            tuple(
                round(n[g, c, o].varValue or 0.0) if (g, c, o) in n else 0
                for o in range(len(options))
            )
            for g in range(len(groups))
        )
        for c in range(num)
    )
    objective = pulp.value(prob.objective) or 0.0
    scale = GIB if over is not None else t_ref
    state = "optimal" if prob.sol_status == pulp.LpSolutionOptimal else "feasible"
    bound_scaled = bound * scale if bound is not None else None
    if use_cutoff:
        # HiGHS keeps a plan it meets above the cutoff as its incumbent and,
        # once every node is pruned against the cutoff, reports that plan's
        # value as the bound, which is not one. What holds: a plan below the
        # cutoff would have become the incumbent, so every plan is at least
        # min(cutoff, the search's bound).
        bound_scaled = cutoff_s if bound_scaled is None else min(bound_scaled, cutoff_s)
        if objective * scale >= cutoff_s:
            state = "cutoff"
    return IlpOutcome(
        state,
        solver,
        Assignment(counts),
        objective * scale,
        bound_scaled,
        elapsed,
        overshoot_bytes=objective * GIB if over is not None else None,
    )
