"""A lower bound on the step time from every stage's chain of ops, with
integer layer counts and the exact least recomputation that fits.

Why: the LP relaxation prices the schedule exactly but lets layers and
recomputation be fractional (and convexifies the recomputation floor of
bounds.py), so near the tightest cap its bound sits far below any plan and
the proof stalls. This bound is the other way round: a weak schedule model
(one chain per stage), but integer layer counts and the exact, non-convex
floor phi_s(t).

Derivation. A stage's ops run one after another, so its chain takes
`m * (W_s + R_s + E_s)` seconds, where W_s is the forward plus backward
seconds of its layers without recomputation, R_s >= phi_s(t_s) its
recomputation per micro-batch with t_s layers (bounds.py: the least
recomputation of any t_s layers that fit its cap) and E_s the head (stage 0)
or tail (last stage) seconds per micro-batch. Before its first op (forward
of chunk s, micro-batch 0) the forwards of chunks 0..s-1 of micro-batch 0
must run, and after its last op (backward of chunk s, micro-batch m-1) their
backwards; each of those chunks holds at least min_layers_per_chunk layers,
so this adds at least

    fill_s = s * min_layers_per_chunk * lo + (head forward + backward if s > 0)

with lo (hi) the least (largest) forward + backward seconds of one layer of
any kind. Every plan therefore has, for every stage s,

    step >= fill_s + m * (W_s + phi_s(t_s) + E_s),   t_s lo <= W_s <= t_s hi,
    sum_s t_s = N (body layers),   sum_s W_s = W (their summed f + b).

The bound is the least T for which integer t_s (within the stage's limits)
and W_s satisfying all of these exist. For a given T each stage can take at
most cap_s(T, t) = (T - fill_s) / m - E_s - phi_s(t) seconds of layer work,
so T is feasible when some t with sum t_s = N has cap_s >= t_s lo on every
stage and sum_s min(cap_s, t_s hi) >= W: a dynamic programme over the stages
(the most work the stages can absorb, per total layer count), and a
bisection on T. Feasibility is monotone in T, so the bisection finds the
least feasible T to a relative 1e-6; the value returned is the bisection's
lower end, which is infeasible, hence a valid bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy

from autotune.pipeline.bounds import stage_tables
from autotune.pipeline.problem import Problem


@dataclass(frozen=True)
class ChainBound:
    """The bound (seconds) and the layers per stage of a layout that meets
    every stage's chain just above it (empty when none does)."""

    step_s: float
    layers: tuple[int, ...]


def _stage_terms(problem: Problem):
    """(fill_s, E_s, phi_s as an array with +inf where t does not fit) per
    stage; t runs 0..N."""
    n = problem.num_layers
    lo = min(g.forward_s + g.backward_s for g in problem.groups)
    head = problem.head.forward_s + problem.head.backward_s
    tail = problem.tail.forward_s + problem.tail.backward_s
    pp, low = problem.num_stages, problem.min_layers_per_chunk
    out = []
    for table in stage_tables(problem):
        s = table.stage
        phi = numpy.full(n + 1, numpy.inf)
        known = [numpy.inf if p is None else p for p in table.phi]
        phi[: len(known)] = known[: n + 1]
        if not table.complete and len(known) <= n:
            # phi is non-decreasing: its last computed value bounds the rest.
            phi[len(known) :] = known[-1]
        phi[: low * problem.num_chunks] = numpy.inf  # too few layers
        fill = s * low * lo + (head if s > 0 else 0.0)
        extra = (head if s == 0 else 0.0) + (tail if s == pp - 1 else 0.0)
        out.append((fill, extra, phi))
    return out


def _feasible(problem: Problem, terms, step_s: float) -> tuple[int, ...] | None:
    """Layers per stage of a layout that meets every stage's chain at
    `step_s` (None when there is none)."""
    n, m = problem.num_layers, problem.num_micro_batches
    lo = min(g.forward_s + g.backward_s for g in problem.groups)
    hi = max(g.forward_s + g.backward_s for g in problem.groups)
    work = sum(g.count * (g.forward_s + g.backward_s) for g in problem.groups)
    t = numpy.arange(n + 1)
    # total[k, j] = j - k: adding k layers to the j - k of the stages before.
    before = t[None, :] - t[:, None]
    valid = before >= 0
    before = numpy.where(valid, before, 0)
    # best[j]: the most layer work the stages so far can take with j layers.
    best = numpy.full(n + 1, -numpy.inf)
    best[0] = 0.0
    choices = []
    for fill, extra, phi in terms:
        cap = (step_s - fill) / m - extra - phi
        value = numpy.where(cap >= t * lo * (1 - 1e-12), numpy.minimum(cap, t * hi), -numpy.inf)
        table = numpy.where(valid, best[before] + value[:, None], -numpy.inf)
        pick = table.argmax(axis=0)
        best = table[pick, t]
        choices.append(pick)
    if not best[n] >= work * (1 - 1e-12):
        return None
    layers, k = [], n
    for pick in reversed(choices):
        layers.append(int(pick[k]))
        k -= int(pick[k])
    return tuple(reversed(layers))


@lru_cache(maxsize=8)
def chain_bound(problem: Problem) -> ChainBound:
    """The least step time any fitting plan can have by the stage chains
    (module docstring); 0 when no layout can meet them at any step."""
    terms = _stage_terms(problem)
    lo, hi = 0.0, 1.0
    while _feasible(problem, terms, hi) is None:
        hi *= 2
        if hi > 1e9:
            return ChainBound(0.0, ())
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        if _feasible(problem, terms, mid) is None:
            lo = mid
        else:
            hi = mid
    return ChainBound(lo, _feasible(problem, terms, hi) or ())
