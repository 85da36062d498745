"""The joint search: tensor mesh x pipeline x data parallel x micro-batch x
interleave x recomputation x ZeRO stage.

1. Enumerate what the cluster allows (candidates.py).
2. Prune by a memory lower bound before any pricing: a stage holds at least
   the average of the parameters, optimizer state and logits over the
   stages, plus every block's activations of one micro-batch (with the
   lightest recomputation allowed) over the stages. No assignment of layers
   or recomputation can fit a candidate above it, so pruning loses nothing.
3. Price the rest in closed form, vectorised (pricing.py).
4. Single-stage candidates are final at their closed-form step. Pipelined
   ones are balanced by the pipeline ILP (balance_adapter.py) with one
   recomputation mode (the fastest whose even split fits): first the
   `finalists` best by closed form, then any other, in order of a step
   lower bound (`_step_lower_bound`, plus the terms the ILP does not see),
   while that bound is below the best step found; a candidate whose bound
   already loses is never balanced. When none is left the result is proved
   best under the model; when the solve budget (as many again as finalists)
   runs out it is reported as not proved.
5. Rank by step time; ties (equal within a relative 1e-9) go to the earlier
   candidate in the canonical order (candidates.canonical_order: fewer tensor
   chips, fewer stages, fewer mesh rows, lower ZeRO stage, less
   recomputation, less interleaving, larger micro-batch). A balanced plan
   enters only when the solver proved it within its gap; otherwise the even
   split stands, so a solve's outcome depends on machine speed only when it
   runs into its time limit (the report counts those).
6. With recomputation on auto and a balanced pipeline winning, the balancer
   may mix the winner's mode with the next faster one per stage; a proved,
   faster plan replaces it (two modes make the MILP much harder, so only the
   winner gets this).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autotune.job.balance_adapter import (
    BalancedPlan,
    balance_candidate,
    balance_key,
    balancer_options,
)
from autotune.job.candidates import Candidates, enumerate_candidates
from autotune.job.cluster_view import SearchHardware
from autotune.job.pricing import (
    COMPONENTS,
    Priced,
    activation_bytes,
    block_figures,
    block_params,
    end_block_seconds,
    memory_bytes,
    price,
)
from autotune.specs.job_search import AutoTrainingSpec, SearchConstraints
from autotune.specs.model import ModelSpec

TIE_RELATIVE = 1e-9
TIE_BREAK_RULE = (
    "equal step times (within a relative 1e-9) go to fewer tensor chips, then fewer pipeline "
    "stages, fewer mesh rows, lower ZeRO stage, less recomputation, less interleaving, larger "
    "micro-batch"
)


@dataclass(frozen=True)
class Evaluated:
    """One configuration with its final step time and where it comes from."""

    order: int  # position in the canonical order
    config: dict[str, int | str]
    step_s: float
    closed_form_step_s: float
    components: dict[str, float]
    peak_bytes: float
    balanced: BalancedPlan | None


@dataclass(frozen=True)
class SearchOutcome:
    """Every evaluated configuration, best first, and the search's counts."""

    ranked: tuple[Evaluated, ...]
    num_candidates: int
    num_pruned_by_memory_bound: int
    num_priced: int
    num_fit_closed_form: int
    num_balanced: int
    num_balancer_unproved: int  # solves that proved no plan within their time limit
    proved: bool
    memory_excluded: tuple[Evaluated, ...]
    usable_bytes: float
    elapsed_s: float


def memory_lower_bound(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates
) -> np.ndarray:
    """Bytes no stage assignment can go below on the fullest stage (step 2
    of the module docstring); exact closed-form memory for one stage."""
    first, _ = memory_bytes(model, hw, train, c)
    el = train.dtype.num_bytes
    g_el = 4 if train.fp32_gradients else el
    t, dp, z, pp = c.tp.astype(float), c.dp, c.zero, c.pp
    per_param = (
        el / np.where(z >= 3, dp, 1)
        + g_el / np.where(z >= 2, dp, 1)
        + 12.0 / np.where(z >= 1, dp, 1)
    )
    h, vocab = model.hidden_size, model.vocab_size or 0
    static = (model.num_layers * block_params(model) + 2 * vocab * h + h) / t * per_param
    logits = (c.mbs * train.sequence_length).astype(float) * vocab / t * (4 + el)
    acts = activation_bytes(model, train, c)
    if train.recompute == "auto":
        lightest = acts.min(axis=1)
    else:
        lightest = acts[np.arange(len(c)), c.recompute]
    bound = (static + logits + model.num_layers * lightest) / pp
    return np.where(pp == 1, first, bound)


def _step_lower_bound(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, c: Candidates, p: Priced
) -> np.ndarray:
    """Seconds no balanced plan of a pipelined candidate can beat.

    Stage `b` cannot start before micro-batch 1 has run forward through the
    stages before it, does `m W_b` of work, and its last backward still has
    to run through those stages: `step >= sum_{s<b} W_s + m W_b` for every
    `b` (1F1B). Over any split of the total work `S` (no recomputation, head
    and tail included) the smallest maximum of these makes them all equal,
    which gives `S / (1 - (1 - 1/m)^pp)`. Interleaved schedules use the
    weaker `m S / pp` (every stage busy `m W_b`, the largest at least the
    average). The pipeline transfers, data-parallel and optimizer terms are
    added as the balancer's plans add them."""
    blk = block_figures(model, hw, train, c)
    head, tail_fwd, tail_bwd = end_block_seconds(model, hw, train, c)
    m = (train.global_batch_sequences // (c.dp * c.mbs)).astype(float)
    work = model.num_layers * (blk.forward_s + blk.backward_s) + head + tail_fwd + tail_bwd
    chain = work / (1 - (1 - 1 / m) ** c.pp)
    pipe = np.where(c.v == 1, np.maximum(chain, m * work / c.pp), m * work / c.pp)
    comm = p.components["pp_comm_s"] / m
    return (
        pipe
        + (m + (c.pp - 1) / c.v) * comm
        + (p.components["dp_comm_s"] + p.components["optimizer_s"])
    )


def _evaluated(c: Candidates, p: Priced, i: int, order: int, bal: BalancedPlan | None):
    comps = {k: float(p.components[k][i]) for k in COMPONENTS}
    step = float(p.step_s[i])
    peak = float(p.peak_bytes[i])
    config = c.row(i)
    if bal is not None:
        step = bal.step_s
        peak = max(bal.stage_peak_bytes)
        # The busiest stage of the balanced plan, m micro-batches; the
        # pipeline transfers, data-parallel and optimizer terms as priced.
        m = float(p.micro_batches[i])
        comps["compute_s"] = m * bal.busiest_compute_s
        comps["tp_comm_s"] = m * bal.busiest_tp_comm_s
        comps["recompute_s"] = m * bal.busiest_recompute_s
        others = sum(v for k, v in comps.items() if k != "bubble_s")
        comps["bubble_s"] = step - others
        rec = {k for st in bal.recompute_per_stage for k in st}
        config["recompute"] = next(iter(rec)) if len(rec) == 1 else "per-stage"
    return Evaluated(order, config, step, float(p.step_s[i]), comps, peak, bal)


def _rank_key(e: Evaluated) -> tuple[float, int]:
    return (e.step_s, e.order)


def _sorted(items: list[Evaluated]) -> list[Evaluated]:
    """Ascending step; within the tie tolerance the canonical order wins."""
    result: list[Evaluated] = []
    group: list[Evaluated] = []
    for e in sorted(items, key=_rank_key):
        if group and e.step_s > group[0].step_s * (1 + TIE_RELATIVE):
            result += sorted(group, key=lambda x: x.order)
            group = []
        group.append(e)
    return result + sorted(group, key=lambda x: x.order)


def _mix_winner(
    model: ModelSpec,
    hw: SearchHardware,
    train: AutoTrainingSpec,
    limits: SearchConstraints,
    c: Candidates,
    p: Priced,
    ranked: list[Evaluated],
    row_of: dict[int, int],
) -> tuple[list[Evaluated], bool]:
    """Step 6: when the winner is a balanced pipeline and recomputation is
    on auto, let the balancer mix two modes per stage for it; a proved,
    faster plan replaces it. Returns the ranking and whether a solve ran."""
    if not ranked or ranked[0].balanced is None or train.recompute != "auto":
        return ranked, False
    top = ranked[0]
    i = row_of[top.order]
    one = c.take(np.array([i]))
    blk = block_figures(model, hw, train, one)
    acts = activation_bytes(model, train, one)[0]
    if len(balancer_options(model, hw, train, one, acts, blk.recompute_extra_s[0], True)) < 2:
        return ranked, False
    bal = balance_candidate(model, hw, train, c, i, limits.ilp_time_limit_s, mix=True)
    if bal is None or not bal.proved or bal.step_s >= top.step_s:
        return ranked, True
    return _sorted([_evaluated(c, p, i, top.order, bal), *ranked[1:]]), True


def search(
    model: ModelSpec,
    hw: SearchHardware,
    train: AutoTrainingSpec,
    limits: SearchConstraints,
    *,
    max_extra_solves: int | None = None,
) -> SearchOutcome:
    """Run steps 1-5 of the module docstring. `max_extra_solves` caps the
    balancer solves after the finalists (default: as many as finalists)."""
    t0 = time.perf_counter()
    everything = enumerate_candidates(model, hw, train, limits)
    keep = memory_lower_bound(model, hw, train, everything) <= hw.usable_bytes
    c = everything.take(np.flatnonzero(keep))
    order = np.flatnonzero(keep)
    p = price(model, hw, train, c)
    fits = p.fits
    auto_rc = train.recompute == "auto"
    evaluated: dict[tuple, Evaluated] = {}
    for i in np.flatnonzero(fits & (c.pp == 1)):
        evaluated[("single", int(i))] = _evaluated(c, p, int(i), int(order[i]), None)

    # Candidates sharing a balancer problem: the first (canonical) row is
    # balanced for the key; the key's best closed-form row that fits is its
    # fallback when the solver proves nothing.
    keys: dict[tuple, list[int]] = {}
    for i in np.flatnonzero(c.pp > 1):
        keys.setdefault(balance_key(c, int(i), auto_rc), []).append(int(i))
    solved: dict[tuple, BalancedPlan | None] = {}

    def run(key: tuple) -> None:
        rows = keys[key]
        bal = balance_candidate(model, hw, train, c, rows[0], limits.ilp_time_limit_s)
        solved[key] = bal
        if bal is not None and bal.proved:
            evaluated[key] = _evaluated(c, p, rows[0], int(order[rows[0]]), bal)
            return
        fitting = [i for i in rows if fits[i]]
        if fitting:
            i = min(fitting, key=lambda r: (float(p.step_s[r]), int(order[r])))
            evaluated[key] = _evaluated(c, p, i, int(order[i]), None)

    def best_step() -> float:
        return min((e.step_s for e in evaluated.values()), default=np.inf)

    key_lb: dict[tuple, float] = {}
    if keys:
        piped = np.flatnonzero(c.pp > 1)
        lbs = _step_lower_bound(model, hw, train, c.take(piped), p_take(p, piped))
        row_lb = dict(zip(piped.tolist(), lbs.tolist(), strict=True))
        key_lb = {key: min(row_lb[i] for i in rows) for key, rows in keys.items()}
    # Finalists: the best pipelined candidates by closed form, skipping any
    # whose bound already loses to the best step found (it cannot win).
    by_closed = sorted(
        (float(p.step_s[i]), int(order[i]), key)
        for key, rows in keys.items()
        for i in rows
        if fits[i]
    )
    finalists = 0
    for _, _, key in by_closed:
        if finalists >= limits.finalists:
            break
        if key in solved:
            continue
        finalists += 1
        if key_lb[key] < best_step():
            run(key)
    budget = limits.finalists if max_extra_solves is None else max_extra_solves
    proved = True
    for bound, _, key in sorted((b, int(order[keys[k][0]]), k) for k, b in key_lb.items()):
        if key in solved:
            continue
        if bound >= best_step():
            break
        if budget <= 0:
            proved = False
            break
        budget -= 1
        run(key)
    ranked = _sorted(list(evaluated.values()))
    row_of = {int(order[i]): int(i) for i in range(len(c))}
    ranked, mixed = _mix_winner(model, hw, train, limits, c, p, ranked, row_of)
    best_step = ranked[0].step_s if ranked else np.inf
    excluded = [
        _evaluated(c, p, int(i), int(order[i]), None)
        for i in np.flatnonzero(~fits & (p.step_s < best_step))
    ]
    return SearchOutcome(
        ranked=tuple(ranked),
        num_candidates=len(everything),
        num_pruned_by_memory_bound=int((~keep).sum()),
        num_priced=len(c),
        num_fit_closed_form=int(fits.sum()),
        num_balanced=len(solved) + int(mixed),
        num_balancer_unproved=sum(1 for b in solved.values() if b is None or not b.proved),
        proved=proved,
        memory_excluded=tuple(_sorted(excluded)[:5]),
        usable_bytes=hw.usable_bytes,
        elapsed_s=time.perf_counter() - t0,
    )


def p_take(p: Priced, rows: np.ndarray) -> Priced:
    """The priced rows at `rows`."""
    return Priced(
        p.step_s[rows],
        {k: v[rows] for k, v in p.components.items()},
        p.first_stage_bytes[rows],
        p.last_stage_bytes[rows],
        p.usable_bytes,
        p.micro_batches[rows],
    )


def exhaustive(
    model: ModelSpec, hw: SearchHardware, train: AutoTrainingSpec, limits: SearchConstraints
) -> list[Evaluated]:
    """Reference for tests: every candidate evaluated with no pruning and no
    bound (single-stage ones in closed form, every pipelined one balanced),
    ranked by the same rule."""
    c = enumerate_candidates(model, hw, train, limits)
    p = price(model, hw, train, c)
    out = []
    auto_rc = train.recompute == "auto"
    keys: dict[tuple, list[int]] = {}
    for i in range(len(c)):
        if c.pp[i] == 1:
            if p.fits[i]:
                out.append(_evaluated(c, p, i, i, None))
        else:
            keys.setdefault(balance_key(c, i, auto_rc), []).append(i)
    for rows in keys.values():
        bal = balance_candidate(model, hw, train, c, rows[0], limits.ilp_time_limit_s)
        if bal is not None and bal.proved:
            out.append(_evaluated(c, p, rows[0], rows[0], bal))
            continue
        fitting = [i for i in rows if p.fits[i]]
        if fitting:
            i = min(fitting, key=lambda r: (float(p.step_s[r]), r))
            out.append(_evaluated(c, p, i, i, None))
    ranked, _ = _mix_winner(
        model, hw, train, limits, c, p, _sorted(out), {i: i for i in range(len(c))}
    )
    return ranked
