"""One candidate as the pipeline balancer's problem, and its balanced plan.

The balancer (autotune.pipeline) receives per-block forward and backward
seconds per micro-batch, parameter bytes (after ZeRO) and activation bytes per
recomputation option, the head (embedding) and tail (output layer and loss)
blocks with their times and bytes, and the chip's usable memory. It returns
layers per stage and chunk and recomputation per stage that minimise the
simulated 1F1B or interleaved step. The step of the candidate is then the
simulated makespan plus the terms the balancer does not see: the pipeline
transfers on every stage (`(m + (pp-1)/v)` times one stage's per-micro-batch
transfer time, as in the closed form), the exposed data-parallel traffic and
the optimizer step.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from autotune.job.candidates import COLUMNS, Candidates
from autotune.job.cluster_view import SearchHardware
from autotune.job.pricing import (
    activation_bytes,
    block_figures,
    block_params,
    end_block_seconds,
    memory_bytes,
    price,
)
from autotune.pipeline.balance import balance
from autotune.pipeline.problem import EndBlock, Layer, Problem, SolverSettings
from autotune.specs.job_search import RECOMPUTE_MODES, AutoTrainingSpec
from autotune.specs.model import ModelSpec


@dataclass(frozen=True)
class BalancedPlan:
    """The balancer's plan for one candidate: its step (with the terms the
    balancer does not see), the even split's step on the same terms, layers
    per stage (and chunk), recomputation counts per stage, per-stage peak
    memory, and whether the solver proved the plan within its gap."""

    step_s: float
    even_split_step_s: float | None
    layers_per_stage: list[list[int]]
    recompute_per_stage: list[dict[str, int]]
    stage_peak_bytes: list[float]
    bubble_fraction: float
    proved: bool
    # The busiest stage's seconds per micro-batch: compute (blocks and end
    # blocks, without tensor communication), exposed tensor communication,
    # recomputation.
    busiest_compute_s: float = 0.0
    busiest_tp_comm_s: float = 0.0
    busiest_recompute_s: float = 0.0


@contextmanager
def _solver_output_to_stderr() -> Iterator[None]:
    """Send what the solver library prints on file descriptor 1 (HiGHS's
    banner) to stderr, so a JSON document on stdout stays parseable."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def balance_key(c: Candidates, i: int, recompute_auto: bool) -> tuple[int, ...]:
    """Candidates with one key share one balancer problem: with recomputation
    on auto the balancer chooses it per stage, so it is not part of the key."""
    row = [int(getattr(c, k)[i]) for k in ("rows", "cols", "pp", "dp", "mbs", "v", "zero")]
    return (*row, -1 if recompute_auto else int(c.recompute[i]))


def balancer_options(
    model: ModelSpec,
    hw: SearchHardware,
    train: AutoTrainingSpec,
    one: Candidates,
    acts: np.ndarray,
    extra_s: np.ndarray,
    mix: bool = False,
) -> tuple[str, ...]:
    """Recomputation options the balancer gets for one candidate.

    A fixed mode is the only option. With `auto`: drop a mode that keeps no
    fewer bytes than a faster one; then, in order of backward time, the
    fastest mode whose even split fits in the closed form, and with `mix`
    also the next faster one (which does not fit on every stage, so mixing
    the two per stage is what can pay). When no mode fits: the lightest, or
    with `mix` every remaining one. One option keeps the balancer's MILP
    small enough to prove in about a second; the search mixes only for its
    winner (search.py)."""
    if train.recompute != "auto":
        return (train.recompute,)
    kept = [
        o
        for o in range(len(RECOMPUTE_MODES))
        if not any(
            acts[k] <= acts[o] and extra_s[k] < extra_s[o] for k in range(len(RECOMPUTE_MODES))
        )
    ]
    fits = []
    for o in kept:
        row = Candidates(*(getattr(one, f) for f in COLUMNS[:-2]), np.array([o]), one.zero)
        first, last = memory_bytes(model, hw, train, row)
        fits.append(max(float(first[0]), float(last[0])) <= hw.usable_bytes)
    if not any(fits):
        chosen = kept if mix else kept[-1:]
    else:
        f = fits.index(True)
        chosen = kept[max(f - 1, 0) : f + 1] if mix else kept[f : f + 1]
    return tuple(RECOMPUTE_MODES[o] for o in chosen)


def build_problem(
    model: ModelSpec,
    hw: SearchHardware,
    train: AutoTrainingSpec,
    c: Candidates,
    i: int,
    mix: bool = False,
) -> tuple[Problem, float]:
    """The balancer's problem for candidate `i` and the seconds to add to its
    makespan (pipeline transfers, exposed data-parallel traffic, optimizer)."""
    one = c.take(np.array([i]))
    blk = block_figures(model, hw, train, one)
    pr = price(model, hw, train, one)
    el = train.dtype.num_bytes
    g_el = 4 if train.fp32_gradients else el
    t, dp, z = int(one.tp[0]), int(one.dp[0]), int(one.zero[0])
    pp, v = int(one.pp[0]), int(one.v[0])
    m = train.global_batch_sequences // (dp * int(one.mbs[0]))
    per_param = (
        el / (dp if z >= 3 else 1) + g_el / (dp if z >= 2 else 1) + 12.0 / (dp if z >= 1 else 1)
    )
    fwd, bwd = float(blk.forward_s[0]), float(blk.backward_s[0])
    acts = activation_bytes(model, train, one)[0]
    modes = balancer_options(model, hw, train, one, acts, blk.recompute_extra_s[0], mix)
    options = {
        name: float(blk.recompute_extra_s[0, RECOMPUTE_MODES.index(name)]) / bwd for name in modes
    }
    layer = Layer(
        kind="block",
        forward_s=fwd,
        backward_s=bwd,
        parameter_bytes=block_params(model) / t * per_param,
        activation_bytes={name: float(acts[RECOMPUTE_MODES.index(name)]) for name in modes},
    )
    h, vocab = model.hidden_size, model.vocab_size or 0
    tokens = int(one.mbs[0]) * train.sequence_length
    head_s, tail_fwd, tail_bwd = (float(x[0]) for x in end_block_seconds(model, hw, train, one))
    logits = tokens * vocab / t * (4 + el)
    head = EndBlock(forward_s=head_s, memory_bytes=vocab * h / t * per_param)
    tail = EndBlock(
        forward_s=tail_fwd,
        backward_s=tail_bwd,
        memory_bytes=(vocab * h + h) / t * per_param + logits,
    )
    transient = float(acts[0]) if "full" in modes else 0.0
    problem = Problem.from_layers(
        [layer] * model.num_layers,
        options=options,
        num_stages=pp,
        num_micro_batches=m,
        num_chunks=v,
        memory_cap_bytes=hw.usable_bytes,
        head=head,
        tail=tail,
        constant_bytes=transient,
    )
    extras = (
        (m + (pp - 1) / v) * float(pr.components["pp_comm_s"][0]) / m
        + float(pr.components["dp_comm_s"][0])
        + float(pr.components["optimizer_s"][0])
    )
    return problem, extras


def balance_candidate(
    model: ModelSpec,
    hw: SearchHardware,
    train: AutoTrainingSpec,
    c: Candidates,
    i: int,
    time_limit_s: float,
    mix: bool = False,
) -> BalancedPlan | None:
    """Balance candidate `i` (pp > 1); None when no plan fits in memory.
    `mix` lets the balancer mix two recomputation modes per stage."""
    problem, extras = build_problem(model, hw, train, c, i, mix)
    # The search balances several finalists: no kick-repair-climb rounds
    # (they cost seconds each; the layer moves and the MILP remain).
    settings = SolverSettings(time_limit_s=time_limit_s, search_rounds=0)
    with _solver_output_to_stderr():
        result = balance(problem, settings)
    plan = result.plan
    if plan is None or not plan.fits:
        return None
    names = [o.name for o in problem.options]
    layers = [[sum(ch.layers.values()) for ch in st.chunks] for st in plan.stages]
    recompute = []
    for st in plan.stages:
        counts = dict.fromkeys(names, 0)
        for ch in st.chunks:
            for per_kind in ch.recompute.values():
                for name, k in per_kind.items():
                    counts[name] += k
        recompute.append({k: n for k, n in counts.items() if n})
    even = result.baseline.step_time_s + extras if result.baseline is not None else None
    busiest = max(range(len(plan.stages)), key=lambda k: (plan.stages[k].busy_s, -k))
    group = problem.groups[0]
    blocks = sum(layers[busiest])
    coef = {o.name: o.backward_time_coef for o in problem.options}
    rec_s = sum(n * group.backward_s * coef[name] for name, n in recompute[busiest].items())
    ends = (problem.head.forward_s + problem.head.backward_s if busiest == 0 else 0.0) + (
        problem.tail.forward_s + problem.tail.backward_s if busiest == len(plan.stages) - 1 else 0.0
    )
    tp_comm = float(block_figures(model, hw, train, c.take(np.array([i]))).tp_comm_s[0])
    return BalancedPlan(
        step_s=plan.step_time_s + extras,
        even_split_step_s=even,
        layers_per_stage=layers,
        recompute_per_stage=recompute,
        stage_peak_bytes=[st.peak_memory_bytes for st in plan.stages],
        bubble_fraction=plan.bubble.total,
        proved=result.solver.status == "optimal",
        busiest_compute_s=blocks * (group.forward_s + group.backward_s - tp_comm) + ends,
        busiest_tp_comm_s=blocks * tp_comm,
        busiest_recompute_s=rec_s,
    )
