"""One pipelined candidate as the pipeline balancer's problem, and the
balanced assignment it returns.

The balancer (autotune.pipeline) receives this model's per-block forward
and backward seconds per micro-batch (a mixture of experts' MoE and dense
blocks as two kinds in model order, its multi-token-prediction blocks with
the tail), each recomputation option's extra
backward seconds and activation bytes, the block's parameter bytes after
ZeRO, the head (embedding) and tail (output layer, loss and logits) with
their seconds and bytes, the bytes every stage holds besides its layers
(gathered FC buffers, ZeRO-3's gathered block, full recomputation's
recomputed block) and the chip's usable memory. It returns layers per
stage and chunk and recomputation per layer that minimise the simulated
step; the step model (job/model.py) then prices that assignment with
everything the balancer does not see (stage-to-stage transfers, data
parallelism, the optimizer), so a balanced plan and an even split are
priced by the same code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from autotune.pipeline.balance import balance
from autotune.pipeline.problem import EndBlock, Layer, Problem, SolverSettings
from autotune.specs.job import RECOMPUTE_MODES


@dataclass(frozen=True)
class BalanceFigures:
    """One candidate's figures, as the step model computes them (seconds
    per micro-batch on one chip, bytes)."""

    num_layers: int
    pp: int
    v: int
    m: int
    forward_s: float
    backward_s: float
    recompute_s: tuple[float, float, float]
    activation_bytes: tuple[float, float, float]
    layer_state_bytes: float
    head_forward_s: float
    head_backward_s: float
    head_state_bytes: float
    tail_forward_s: float
    tail_backward_s: float
    tail_state_bytes: float
    constant_bytes: float
    full_transient_bytes: float
    usable_bytes: float
    #: a mixture of experts: per block in model order whether it is a MoE
    #: block, and what a MoE block (its routed part, job/experts.py) and a
    #: dense block (its FFN beyond the shared experts) add to the planned
    #: block: forward, backward, activations per mode, state bytes
    moe_flags: tuple[bool, ...] = ()
    moe_forward_s: float = 0.0
    moe_backward_s: float = 0.0
    moe_activation_bytes: tuple[float, float, float] = (0.0, 0.0, 0.0)
    moe_state_bytes: float = 0.0
    dense_forward_s: float = 0.0
    dense_backward_s: float = 0.0
    dense_activation_bytes: tuple[float, float, float] = (0.0, 0.0, 0.0)
    dense_state_bytes: float = 0.0


@dataclass(frozen=True)
class Balanced:
    """The balancer's outcome: the assignment (layers per chunk and mode,
    `(pp v, 3)`) of its plan, whether the solver proved it within its gap,
    whether the plan is the same on every run (no wall-clock stop cut a step
    it comes from: a proved plan, or one the move-bounded heuristics found
    when the solver could not prove in time), and its own step prediction."""

    counts: np.ndarray | None
    proved: bool
    status: str
    balancer_step_s: float | None
    repeatable: bool = True

    @property
    def usable(self) -> bool:
        """Whether the search may use the plan: it fits, and it does not
        depend on the machine's speed."""
        return self.counts is not None and (self.proved or self.repeatable)


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


def build_problem(f: BalanceFigures, modes: tuple[str, ...]) -> Problem:
    """The balancer's problem for one candidate with the recomputation
    `modes` it may use (each with its backward-time coefficient
    `extra / backward`)."""
    index = [RECOMPUTE_MODES.index(name) for name in modes]
    backward = max(f.backward_s, 1e-30)
    options = {RECOMPUTE_MODES[i]: f.recompute_s[i] / backward for i in index}

    def layer(kind: str, fwd: float, bwd: float, state: float, act: tuple) -> Layer:
        return Layer(
            kind=kind,
            forward_s=f.forward_s + fwd,
            backward_s=f.backward_s + bwd,
            parameter_bytes=f.layer_state_bytes + state,
            activation_bytes={RECOMPUTE_MODES[i]: f.activation_bytes[i] + act[i] for i in index},
        )

    if f.moe_flags:
        # a mixture of experts' blocks as two kinds in model order (the
        # recomputation coefficients are the planned block's)
        moe = layer(
            "moe", f.moe_forward_s, f.moe_backward_s, f.moe_state_bytes, f.moe_activation_bytes
        )
        dense = layer(
            "dense",
            f.dense_forward_s,
            f.dense_backward_s,
            f.dense_state_bytes,
            f.dense_activation_bytes,
        )
        layers = [moe if flag else dense for flag in f.moe_flags]
    else:
        layers = [layer("block", 0.0, 0.0, 0.0, (0.0, 0.0, 0.0))] * f.num_layers
    constant = f.constant_bytes + (f.full_transient_bytes if "full" in modes else 0.0)
    return Problem.from_layers(
        layers,
        options=options,
        num_stages=f.pp,
        num_micro_batches=f.m,
        num_chunks=f.v,
        memory_cap_bytes=f.usable_bytes,
        head=EndBlock(f.head_forward_s, f.head_backward_s, f.head_state_bytes),
        tail=EndBlock(f.tail_forward_s, f.tail_backward_s, f.tail_state_bytes),
        constant_bytes=constant,
    )


def balance_candidate(f: BalanceFigures, modes: tuple[str, ...], time_limit_s: float) -> Balanced:
    """Balance one pipelined candidate (no kick-repair-climb rounds: the
    search balances several finalists; the layer moves and the MILP
    remain). `counts` is None when no plan fits."""
    problem = build_problem(f, modes)
    settings = SolverSettings(time_limit_s=time_limit_s, search_rounds=0)
    with _solver_output_to_stderr():
        result = balance(problem, settings)
    plan = result.plan
    status = result.solver.status
    repeatable = result.solver.repeatable
    if plan is None or not plan.fits:
        return Balanced(None, False, status, None, repeatable)
    names = [o.name for o in problem.options]
    counts = np.zeros((f.pp * f.v, 3))
    for c, per_group in enumerate(plan.assignment.counts):
        for per_option in per_group:
            for o, k in enumerate(per_option):
                counts[c, RECOMPUTE_MODES.index(names[o])] += k
    return Balanced(counts, status == "optimal", status, plan.step_time_s, repeatable)
