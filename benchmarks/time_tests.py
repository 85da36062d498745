"""Measure every test's duration and write tests/durations.json, from which
tests/conftest.py marks the slow ones (`python -m pytest -m "not slow"` is
the fast loop).

Run: python benchmarks/time_tests.py   (the whole suite once, then the
fast loop alone until it is stable: about 15 min)

A test's time is its setup, call and teardown. Timing the fast loop alone
as well charges a shared fixture's setup to the fast test that now pays it
(in the whole suite a slow test sharing the fixture paid it first); each
test keeps the larger of its times. Prints the fast loop's summed time and
how many tests each side holds; rerun it when tests are added or become
slower. Tests missing from the file count as fast until the next run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "durations.json"
SLOW_S = 0.5  # a test at or above this (setup + call + teardown) is slow
SETUP_S = 2.0  # a setup this long is a shared fixture: its whole module is slow
LINE = re.compile(r"^([0-9.]+)s (setup|call|teardown)\s+(.+)$")


def parse(text: str) -> tuple[dict[str, float], set[str]]:
    """Seconds per test id from pytest's `--durations=0 -vv` lines, and the
    modules with a setup of SETUP_S or more (a module-scoped fixture: every
    test of the module is slow, whichever runs first pays it)."""
    seconds: dict[str, float] = {}
    heavy: set[str] = set()
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if m:
            seconds[m.group(3)] = seconds.get(m.group(3), 0.0) + float(m.group(1))
            if m.group(2) == "setup" and float(m.group(1)) >= SETUP_S:
                heavy.add(m.group(3).split("::", 1)[0])
    return seconds, heavy


def timed_run(*select: str) -> tuple[tuple[dict[str, float], set[str]], float]:
    """One pytest run: :func:`parse` of its output and its wall time."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-vv", "--durations=0", "-p", "no:cacheprovider",
         *select],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"the tests failed (exit {done.returncode}); fix them before measuring")
    return parse(done.stdout), time.perf_counter() - t0


def write(seconds: dict[str, float], modules: set[str]) -> None:
    doc = {
        "slow_at_s": SLOW_S,
        "slow_modules": sorted(modules),
        "seconds": {k: round(v, 3) for k, v in sorted(seconds.items())},
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")


def main() -> None:
    (seconds, modules), _ = timed_run()
    write(seconds, modules)
    for _ in range(3):
        (fast, heavy), wall = timed_run("-m", "not slow")
        newly = [k for k, s in fast.items() if s >= SLOW_S and seconds.get(k, 0.0) < SLOW_S]
        for k, s in fast.items():
            seconds[k] = max(seconds.get(k, 0.0), s)
        modules |= heavy
        write(seconds, modules)
        if not newly:
            break
    slow = [s for s in seconds.values() if s >= SLOW_S]
    print(
        f"{len(seconds)} tests timed, {len(slow)} slow ({sum(slow):.0f} s), "
        f"{len(modules)} modules slow as a whole; the fast loop (-m 'not slow') took "
        f"{wall:.0f} s; wrote {OUT.relative_to(REPO)}"
    )


if __name__ == "__main__":
    main()
