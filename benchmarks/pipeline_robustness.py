"""Robustness of the pipeline balancer on a generated family of hard instances.

Family: 16 stages, 2 or 3 chunks (interleaved 1F1B), 16 or 32 micro-batches,
three layer mixes (one decoder kind; dense + MoE + MTP; two alternating-size
kinds), memory caps from the tightest feasible to +10%. "Tightest feasible"
is the least cap at which the repair heuristic (layer_search.py) finds
layer counts that fit with every layer on its most memory-saving option
(bisection to 0.1%): a plan exists at that cap.

Per instance it prints: time to the first plan, the final step time, the gap
the solver reports (plan against its proven lower bound), the gap to the best
plan any run found, and whether repeated runs returned the same plan.

    PYTHONPATH=. python benchmarks/pipeline_robustness.py [--time-limit 60]
        [--repeat 2] [--only uniform] [--chunks 3] [--micro-batches 16]
        [--caps 1.0,1.02,1.05,1.1]

Targets: first plan within 5 s, within 1% of the best known plan by 60 s,
the same plan on every run. Not part of the test suite (it takes minutes);
tests/test_pipeline_robustness.py runs a small member of the family.
"""

from __future__ import annotations

import argparse
import time

from autotune.pipeline.assignment import even_layer_split
from autotune.pipeline.balance import balance
from autotune.pipeline.layer_search import repair
from autotune.pipeline.problem import (
    EndBlock,
    LayerGroup,
    Problem,
    RecomputeOption,
    Schedule,
    SolverSettings,
)

MS = 1e-3
GIB = float(2**30)
OPTIONS = (
    ("none", 0.0),
    ("selective", 0.04),
    ("comm", 0.125),
    ("selective_comm", 0.165),
    ("full", 0.5),
)


def _group(kind: str, count: int, fwd_ms: float, param_gib: float, act_none_gib: float):
    """A kind whose options keep 100/73/63/40/10% of its plain activations."""
    acts = tuple(act_none_gib * f * GIB for f in (1.0, 0.73, 0.63, 0.40, 0.10))
    return LayerGroup(kind, count, fwd_ms * MS, 2 * fwd_ms * MS, param_gib * GIB, acts)


MIXES = {
    "uniform": (_group("decoder", 96, 1.0, 0.4, 0.30),),
    "dense-moe-mtp": (
        _group("dense", 3, 0.8, 0.3, 0.28),
        _group("moe", 58, 1.3, 0.9, 0.34),
        _group("mtp", 1, 1.6, 1.2, 0.40),
    ),
    "two-sizes": (
        _group("small", 40, 0.7, 0.25, 0.22),
        _group("large", 40, 1.4, 0.55, 0.40),
    ),
}


def instance(
    mix: str, chunks: int, micro: int, cap_bytes: float, stages: int = 16, groups=None
) -> Problem:
    """One member of the family (other stage counts and layers for tests)."""
    return Problem(
        num_stages=stages,
        num_chunks=chunks,
        num_micro_batches=micro,
        schedule=Schedule.INTERLEAVED,
        min_layers_per_chunk=1,
        options=tuple(RecomputeOption(n, c) for n, c in OPTIONS),
        groups=groups or MIXES[mix],
        head=EndBlock(1.0 * MS, 2.0 * MS, 3.0 * GIB),
        tail=EndBlock(2.0 * MS, 4.0 * MS, 3.0 * GIB),
        constant_bytes=4.0 * GIB,
        memory_cap_bytes=cap_bytes,
    )


def tightest_cap_bytes(problem: Problem) -> float:
    """Least cap (to 0.1%) at which the repair finds layer counts that fit."""
    from dataclasses import replace

    lo, hi = 1.0 * GIB, 400.0 * GIB
    while hi / lo > 1.001:
        mid = (lo * hi) ** 0.5
        p = replace(problem, memory_cap_bytes=mid)
        if repair(p, even_layer_split(p)) is not None:
            hi = mid
        else:
            lo = mid
    return hi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0, help="per run, s")
    parser.add_argument("--repeat", type=int, default=2, help="runs per instance")
    parser.add_argument("--only", choices=sorted(MIXES), default=None, help="one layer mix")
    parser.add_argument("--chunks", type=int, choices=(2, 3), default=None)
    parser.add_argument("--micro-batches", type=int, choices=(16, 32), default=None)
    parser.add_argument("--caps", default="1.0,1.02,1.05,1.1", help="cap / tightest feasible")
    args = parser.parse_args()
    caps = [float(x) for x in args.caps.split(",")]
    settings = SolverSettings(time_limit_s=args.time_limit)
    print(
        f"{'mix':>14} {'v':>2} {'m':>3} {'cap':>5} {'GiB':>7} {'first s':>8} {'total s':>8} "
        f"{'step ms':>9} {'solver gap':>10} {'vs best':>8} {'same plan':>9}"
    )
    for mix in [args.only] if args.only else list(MIXES):
        for chunks in [args.chunks] if args.chunks else [2, 3]:
            for micro in [args.micro_batches] if args.micro_batches else [16, 32]:
                tight = tightest_cap_bytes(instance(mix, chunks, micro, 100 * GIB))
                for factor in caps:
                    p = instance(mix, chunks, micro, tight * factor)
                    runs = []
                    for _ in range(max(1, args.repeat)):
                        t0 = time.perf_counter()
                        r = balance(p, settings)
                        runs.append((r, time.perf_counter() - t0))
                    plans = [r.plan for r, _ in runs]
                    steps = [x.step_time_s for x in plans if x is not None]
                    best = min(steps) if steps else None
                    r, total = runs[-1]
                    same = len({x.assignment if x else None for x in plans}) == 1
                    first = max((r.solver.first_plan_s or float("inf")) for r, _ in runs)
                    step = "-" if r.plan is None else f"{r.plan.step_time_s * 1e3:.2f}"
                    gap = "-" if r.solver.gap is None else f"{r.solver.gap * 100:.2f}%"
                    vs = (
                        "-"
                        if r.plan is None or best is None
                        else f"{(r.plan.step_time_s / best - 1) * 100:.2f}%"
                    )
                    print(
                        f"{mix:>14} {chunks:>2} {micro:>3} {factor:>5.2f} "
                        f"{p.memory_cap_bytes / GIB:>7.2f} {first:>8.2f} {total:>8.2f} "
                        f"{step:>9} {gap:>10} {vs:>8} {'yes' if same else 'NO':>9}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
