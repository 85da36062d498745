"""A progress indicator for work that may take more than a second."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

from autotune.render_text import user_text


@contextmanager
def progress(message: str) -> Iterator[None]:
    """Show a spinner with `message` on stderr while the block runs, only
    when stderr is a terminal (never in pipes, files or CI logs)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(user_text(message, 200)):
        yield
