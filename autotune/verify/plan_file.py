"""Reading the parts of a `meshtune.plan/2` (or `/1`) sharding config that
`meshtune verify` executes: the mesh, and per layer its GEMMs with dataflow,
variant, shape and slice count.

The reader accepts a full document written by `meshtune plan --format json`
and also a hand-written one holding only these keys; every other key is
ignored (the planner's own schema, `autotune.plan.schema`, is the strict
one). Bad input becomes one-line `InputError`s naming the file and field.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune.errors import InputError
from autotune.loading import read_text, validate_spec

PLAN_SCHEMA = "meshtune.plan/2"
# Version 2 added the `job` section; the mesh and layer keys read here kept
# their meaning, so documents written before it are still accepted.
READABLE_SCHEMAS = (PLAN_SCHEMA, "meshtune.plan/1")


class _Doc(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, populate_by_name=True)


class MeshPart(_Doc):
    """The logical mesh the plan runs on."""

    num_rows: int = Field(ge=1, description="Chips along the row axis.")
    num_cols: int = Field(ge=1, description="Chips along the col axis.")
    block_size: int = Field(ge=1, description="Slicing block b (elements).")


class GemmPart(_Doc):
    """One GEMM of a layer as the cost model describes it."""

    gemm_pass: Literal["forward", "backward_data", "backward_weight"] = Field(
        alias="pass", description="Which of the layer's three GEMMs."
    )
    dataflow: Literal["OS", "LS", "RS"] = Field(description="2D GEMM dataflow.")
    transposed: bool = Field(description="Plain schedule on the transposed mesh.")
    m: int = Field(ge=1, description="Output rows (elements).")
    n: int = Field(ge=1, description="Output columns (elements).")
    k: int = Field(ge=1, description="Contraction size (elements).")
    num_slices: int = Field(description="MeshSlice slice count S.")
    expression: str | None = Field(
        default=None, description="The GEMM in Table 1 notation, e.g. `dX = LS(dY, W)`."
    )


class LayerPart(_Doc):
    """One FC layer `Y = X @ W`."""

    name: str = Field(description="Layer name.")
    in_features: int = Field(ge=1, description="I: columns of X, rows of W.")
    out_features: int = Field(ge=1, description="O: columns of W and Y.")
    tokens: int = Field(ge=1, description="T: rows of X and Y.")
    gemms: list[GemmPart] = Field(min_length=1, description="The layer's GEMMs.")


class PlanPart(_Doc):
    """The executable part of a plan document."""

    schema_: str = Field(alias="schema", description="Document schema tag.")
    mesh: MeshPart = Field(description="The chosen mesh.")
    layers: list[LayerPart] = Field(min_length=1, description="FC layers in model order.")


def read_plan(path: str) -> PlanPart:
    """Load and check a plan JSON file (InputError on bad input)."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"is not valid JSON: {exc.msg}",
            file=path,
            line=exc.lineno,
            fix="pass the file `meshtune plan --format json` (or --out) wrote",
        ) from None
    if not isinstance(data, dict):
        raise InputError(
            "must be a JSON object (a plan document)",
            file=path,
            fix="pass the file `meshtune plan --out PLAN.json` wrote",
        )
    schema = data.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise InputError(
            f"is not a {PLAN_SCHEMA} (or meshtune.plan/1) document; this meshtune reads "
            "those two plan schema versions",
            file=path,
            field="schema",
            value=schema,
            fix="pass the file `meshtune plan --out PLAN.json` wrote",
        )
    return validate_spec(PlanPart, data, file=path)
