"""User strings made safe for the terminal renderers: shortened (a 60,000
character model name would stall rich's highlighter for minutes) and escaped
(a name such as ``[/bold]`` must print as itself, not as rich markup)."""

from __future__ import annotations

from rich.markup import escape

from autotune.errors import shorten

MAX_USER_TEXT_CHARS = 60  # a name, label or file shown in a report


def user_text(text: object, limit: int = MAX_USER_TEXT_CHARS) -> str:
    """`text` as one line of at most `limit` characters, with rich markup escaped."""
    return escape(shorten(" ".join(str(text).split()), limit))


def byte_size(num_bytes: float) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1
    (`4 MiB`, `1.5 GiB`), three significant digits."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.3g} {unit}"
    return f"{num_bytes:.3g} B"
