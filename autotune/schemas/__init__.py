"""The JSON Schemas of meshtune's documents (package data), written from the
pydantic models by `python -m autotune.schemas` and checked against them by
tests/test_plan_schema.py."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

PLAN_SCHEMA_FILE = "plan-3.schema.json"


def schema_path(name: str = PLAN_SCHEMA_FILE) -> Path:
    """Filesystem path of a shipped schema."""
    return Path(str(resources.files(__name__).joinpath(name)))


def plan_schema_text() -> str:
    """The Plan document's JSON Schema as the package writes it."""
    from autotune.plan.schema import PLAN_SCHEMA, plan_json_schema

    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": PLAN_SCHEMA,
        **plan_json_schema(),
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    """Write every shipped schema next to this module."""
    schema_path().write_text(plan_schema_text())


if __name__ == "__main__":
    main()
