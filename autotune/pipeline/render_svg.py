"""SVG timeline of a simulated schedule (plain string building)."""

from __future__ import annotations

from html import escape

from autotune.pipeline.simulator import Simulation

# Forward blues and backward ambers, one shade per local chunk.
FORWARD = ("#4c78a8", "#72a0d0", "#9ec4ea", "#2f5b86")
BACKWARD = ("#e8a33d", "#f2c06f", "#f7d9a3", "#c47f17")


def timeline_svg(sim: Simulation, num_stages: int, title: str, width_px: int = 1200) -> str:
    """Stages as rows, time left to right; each block is one op labelled
    with its micro-batch; a tooltip gives chunk, micro-batch and times."""
    row_px, left_px, top_px = 22, 70, 40
    span = sim.makespan_s or 1.0
    px_per_s = (width_px - left_px - 10) / span
    height = top_px + row_px * num_stages + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{height}" '
        f'font-family="sans-serif" font-size="10">',
        f'<text x="{left_px}" y="20" font-size="13">{escape(title)}</text>',
    ]
    for s in range(num_stages):
        y = top_px + s * row_px
        out.append(f'<text x="5" y="{y + 14}">stage {s}</text>')
        out.append(
            f'<rect x="{left_px}" y="{y}" width="{span * px_per_s:.2f}" height="{row_px - 4}" '
            'fill="#f0f0f0"/>'
        )
    for b in sim.blocks:
        local = b.chunk // num_stages
        colour = (FORWARD if b.forward else BACKWARD)[local % 4]
        x = left_px + b.start_s * px_per_s
        w = max((b.end_s - b.start_s) * px_per_s, 0.5)
        y = top_px + b.stage * row_px
        kind = "forward" if b.forward else "backward"
        tip = (
            f"{kind} chunk {b.chunk} micro-batch {b.micro_batch}: "
            f"{b.start_s * 1e3:.3f}-{b.end_s * 1e3:.3f} ms"
        )
        out.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_px - 4}" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="0.5"><title>{escape(tip)}</title></rect>'
        )
        if w > 12:
            out.append(
                f'<text x="{x + w / 2:.2f}" y="{y + 13}" text-anchor="middle">'
                f"{b.micro_batch}</text>"
            )
    y = top_px + num_stages * row_px + 18
    out.append(
        f'<text x="{left_px}" y="{y}">makespan {sim.makespan_s * 1e3:.3f} ms; '
        f"bubble {sim.bubble.total:.3f} (ideal {sim.bubble.ideal:.3f}, imbalance "
        f"{sim.bubble.imbalance:.3f}, recompute {sim.bubble.recompute:.3f}); "
        "blue forward, amber backward</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
