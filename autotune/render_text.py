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
