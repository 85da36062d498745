"""Solve time and optimality gap of the stage balancer at 96 layers, 16
stages, 3 interleaved chunks, 16 micro-batches and 5 recomputation options,
with HiGHS (through highspy) and with CBC under a time limit.
Target: proven optimal (gap <= 0.1%) in under 10 s with HiGHS.

Run: python benchmarks/pipeline_speed.py [--cbc-limit SECONDS] [--repeat N]
     [--caps 40,32,28] [--no-cbc]

`--repeat N` solves each HiGHS case N times and prints the median time with
the fastest and slowest run: on a shared machine single timings of the same
solve vary by 20% or more (the plan, bound and gap do not vary). `cpu s` is
the CPU time of the same runs (time.process_time, plus the CBC subprocess's):
the solvers run on one thread, so it is about what the wall time would be on
an idle machine, and it varies much less than the wall time under load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from autotune.pipeline.balance import balance
from autotune.pipeline.ilp import highs_available
from autotune.pipeline.problem import (
    EndBlock,
    LayerGroup,
    Problem,
    RecomputeOption,
    Schedule,
    SolverChoice,
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
# Per-layer activation GiB per micro-batch for the five options (comm saves more
# than selective here, so no option is dominated).
ACTIVATION_GIB = (0.30, 0.22, 0.19, 0.12, 0.03)


def problem(cap_gib: float) -> Problem:
    """The benchmark instance (a 96-layer decoder-only model)."""
    return Problem(
        num_stages=16,
        num_chunks=3,
        num_micro_batches=16,
        schedule=Schedule.INTERLEAVED,
        min_layers_per_chunk=1,
        options=tuple(RecomputeOption(n, c) for n, c in OPTIONS),
        groups=(
            LayerGroup(
                "decoder", 96, 1.0 * MS, 2.0 * MS, 0.4 * GIB, tuple(a * GIB for a in ACTIVATION_GIB)
            ),
        ),
        head=EndBlock(1.0 * MS, 2.0 * MS, 3.0 * GIB),
        tail=EndBlock(2.0 * MS, 4.0 * MS, 3.0 * GIB),
        constant_bytes=4.0 * GIB,
        memory_cap_bytes=cap_gib * GIB,
    )


def cpu_s() -> float:
    """CPU seconds of this process and of its finished children (CBC)."""
    children = os.times()
    return time.process_time() + children.children_user + children.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cbc-limit", type=float, default=60.0, help="CBC time limit, s")
    parser.add_argument("--repeat", type=int, default=1, help="HiGHS runs per case (median)")
    parser.add_argument("--caps", default="40,32,28", help="memory caps, GiB (comma-separated)")
    parser.add_argument("--no-cbc", action="store_true", help="HiGHS only")
    args = parser.parse_args()
    repeat = max(1, args.repeat)
    solvers = [(SolverChoice.HIGHS, 60.0, repeat)] if highs_available() else []
    if not args.no_cbc:
        solvers.append((SolverChoice.CBC, args.cbc_limit, 1))
    print("96 layers, 16 stages x 3 chunks, 16 micro-batches, 5 recompute options")
    print(
        f"{'cap GiB':>8} {'solver':>7} {'time s':>8} {'gap':>9} {'status':>9} "
        f"{'step ms':>9} {'even split ms':>14} {'cpu s':>7}"
        + ("   time range s (runs)" if repeat > 1 else "")
    )
    for cap in (float(x) for x in args.caps.split(",")):
        for choice, limit, runs in solvers:
            p = problem(cap)
            settings = SolverSettings(solver=choice, time_limit_s=limit, relative_gap=1e-3)
            times, cpu = [], []
            for _ in range(runs):
                t0, c0 = time.perf_counter(), cpu_s()
                r = balance(p, settings)
                times.append(time.perf_counter() - t0)
                cpu.append(cpu_s() - c0)
            gap = "-" if r.solver.gap is None else f"{r.solver.gap * 100:.3f}%"
            step = "-" if r.plan is None else f"{r.plan.step_time_s * 1e3:.2f}"
            base = "-" if r.baseline is None else f"{r.baseline.step_time_s * 1e3:.2f}"
            spread = f"   {min(times):.2f}-{max(times):.2f} ({runs})" if runs > 1 else ""
            print(
                f"{cap:>8.1f} {r.solver.solver:>7} {statistics.median(times):>8.2f} {gap:>9} "
                f"{r.solver.status:>9} {step:>9} {base:>14} {statistics.median(cpu):>7.2f}{spread}"
            )


if __name__ == "__main__":
    main()
