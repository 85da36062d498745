"""Character grid of a simulated timeline (the terminal view; no styling)."""

from __future__ import annotations

from autotune.pipeline.simulator import Simulation

IDLE = "."


def timeline_rows(sim: Simulation, num_stages: int, width: int) -> list[str]:
    """One string per stage, `width` cells over the makespan: lower-case
    letters are forwards, upper-case backwards (a = local chunk 0, b = 1,
    ...), '.' is idle. A cell shows the op running at its midpoint."""
    rows = [[IDLE] * width for _ in range(num_stages)]
    if sim.makespan_s <= 0:
        return ["".join(r) for r in rows]
    cell_s = sim.makespan_s / width
    for b in sim.blocks:
        letter = chr(ord("a") + (b.chunk // num_stages) % 26)
        letter = letter if b.forward else letter.upper()
        first = int(b.start_s / cell_s + 0.5)
        last = int(b.end_s / cell_s + 0.5)
        for i in range(first, min(last, width)):
            rows[b.stage][i] = letter
    return ["".join(r) for r in rows]
