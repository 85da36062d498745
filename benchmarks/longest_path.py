"""Longest-path passes over the schedule graph (autotune/pipeline/search.py):
the array pass against one plain loop per column, on the robustness
family's graphs (16 stages, 2-3 chunks, 16-32 micro-batches, interleaved),
for K = 1-8 columns (a climb scores one stage's K candidate recomputations
at once). Checks that both give the same floats and prints ms per pass;
`search.LOOP_COLUMNS` is where the loops stop being faster.

    PYTHONPATH=. python benchmarks/longest_path.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import numpy

import autotune.pipeline.search as search
from autotune.pipeline.search import _end_times, end_times_by_column, schedule_graph


def _array_pass(graph, durations_s: numpy.ndarray) -> numpy.ndarray:
    """The per-level array pass, whatever search.LOOP_COLUMNS picks."""
    saved = search.LOOP_COLUMNS
    search.LOOP_COLUMNS = 0
    try:
        return _end_times(graph, durations_s)
    finally:
        search.LOOP_COLUMNS = saved


def _ms_per_pass(fn, graph, durations_s: numpy.ndarray, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn(graph, durations_s)
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200, help="passes per figure")
    args = parser.parse_args()
    rng = numpy.random.default_rng(0)
    print(f"{'graph':>10} {'ops':>6} {'levels':>6} {'K':>3} {'array ms':>9} {'loops ms':>9}")
    for chunks, micro in ((2, 16), (3, 16), (2, 32), (3, 32)):
        graph = schedule_graph(16, chunks, micro, True)
        for k in (2, 3, 4, 6, 8):
            durations_s = rng.uniform(1e-3, 3e-3, size=(k, 2 * 16 * chunks))
            loops = end_times_by_column(graph, durations_s)
            if not numpy.array_equal(_array_pass(graph, durations_s), loops):
                raise SystemExit("the array pass and the loops disagree")
            array_ms = _ms_per_pass(_array_pass, graph, durations_s, args.repeat)
            loops_ms = _ms_per_pass(end_times_by_column, graph, durations_s, args.repeat)
            name = f"16x{chunks}x{micro}"
            print(
                f"{name:>10} {graph.num_ops:>6} {len(graph.steps):>6} {k:>3}"
                f" {array_ms:>9.2f} {loops_ms:>9.2f}"
            )


if __name__ == "__main__":
    main()
