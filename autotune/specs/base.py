"""The common pydantic base of every spec: strict, frozen, no unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Strict (no silent coercion), frozen, and rejects unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
