"""`--plot FILE.png`: the measured-vs-fitted plot as an image, through the
optional `plot` extra (matplotlib), imported only when asked for."""

from __future__ import annotations

import io
from collections.abc import Sequence

from autotune.errors import InputError
from autotune.io import atomic_write_bytes


def require_matplotlib() -> None:
    """Fail early, before anything is written, when the extra is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "needs matplotlib, which is not installed",
            field="--plot",
            fix="pip install 'meshtune[plot]' or drop --plot (the terminal plot is always shown)",
        ) from None


def write_png(path: str, series: Sequence[tuple[str, Sequence[float], Sequence[float]]]) -> None:
    """Log-log scatter of measured against fitted seconds, one colour per
    series, with the diagonal."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6.0))
    values = [v for _, xs, ys in series for v in (*xs, *ys) if v > 0]
    for label, xs, ys in series:
        ax.scatter(xs, ys, s=12, label=label)
    if values:
        ax.plot([min(values), max(values)], [min(values), max(values)], "k:", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fitted time (s)")
    ax.set_ylabel("measured time (s)")
    ax.set_title("meshtune calibrate: measured vs fitted")
    ax.legend(fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue(), "--plot")
