"""Reading the parts of a `meshtune.plan/3` document that `meshtune verify`
executes: the tensor mesh, and per FC layer its GEMMs with dataflow,
variant, shape and slice count.

The reader accepts a full document written by `meshtune plan --format json`
and also a hand-written one holding only these keys; every other key is
ignored (the planner's own schema, `autotune.plan.schema`, is the strict
one). Bad input becomes one-line `InputError`s naming the file and field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from autotune.errors import InputError
from autotune.loading import read_text, validate_spec
from autotune.safe_load import parse_json

PLAN_SCHEMA = "meshtune.plan/3"
# Versions 1 and 2 (and the search summary version 3 replaced) get one line
# saying how to write a version 3 document.
OLD_SCHEMAS = ("meshtune.plan/1", "meshtune.plan/2", "meshtune.job-search/1")
MAX_VERIFY_CHIPS = 16_384  # chips the emulator runs (each is a Python-level object)
MAX_SIDE = 2**24
MAX_GEMM_DIM = 2**48  # tokens per micro-batch can reach 2^24 sequences x 2^24 tokens


class _Doc(BaseModel):
    model_config = ConfigDict(
        extra="ignore", frozen=True, strict=True, populate_by_name=True, allow_inf_nan=False
    )


class MeshPart(_Doc):
    """The logical mesh the plan runs on."""

    num_rows: int = Field(
        ge=1, le=MAX_SIDE, description="Chips along the row axis. Range: 1 to 2^24."
    )
    num_cols: int = Field(
        ge=1, le=MAX_SIDE, description="Chips along the col axis. Range: 1 to 2^24."
    )
    block_size: int = Field(
        ge=1, le=MAX_SIDE, description="Slicing block b (elements). Range: 1 to 2^24."
    )

    @model_validator(mode="after")
    def _check_chips(self) -> MeshPart:
        chips = self.num_rows * self.num_cols
        if chips > MAX_VERIFY_CHIPS:
            raise ValueError(
                f"num_rows * num_cols is {chips}, more than the {MAX_VERIFY_CHIPS} chips "
                "verify emulates; fix: verify the plan of a smaller mesh (the schedule's "
                "correctness does not depend on the chip count beyond its factors)"
            )
        return self


class GemmPart(_Doc):
    """One GEMM of a layer as the cost model describes it."""

    gemm_pass: Literal["forward", "backward_data", "backward_weight"] = Field(
        alias="pass", description="Which of the layer's three GEMMs."
    )
    dataflow: Literal["OS", "LS", "RS"] = Field(description="2D GEMM dataflow.")
    transposed: bool = Field(description="Plain schedule on the transposed mesh.")
    m: int = Field(ge=1, le=MAX_GEMM_DIM, description="Output rows (elements). Range: 1 to 2^48.")
    n: int = Field(
        ge=1, le=MAX_GEMM_DIM, description="Output columns (elements). Range: 1 to 2^48."
    )
    k: int = Field(
        ge=1, le=MAX_GEMM_DIM, description="Contraction size (elements). Range: 1 to 2^48."
    )
    num_slices: int = Field(
        ge=1, le=MAX_SIDE, description="MeshSlice slice count S. Range: 1 to 2^24."
    )
    expression: str | None = Field(
        default=None, description="The GEMM in Table 1 notation, e.g. `dX = LS(dY, W)`."
    )


class LayerPart(_Doc):
    """One FC layer `Y = X @ W`."""

    name: str = Field(description="Layer name.")
    in_features: int = Field(
        ge=1, le=MAX_GEMM_DIM, description="I: columns of X, rows of W. Range: 1 to 2^48."
    )
    out_features: int = Field(
        ge=1, le=MAX_GEMM_DIM, description="O: columns of W and Y. Range: 1 to 2^48."
    )
    tokens: int = Field(ge=1, le=MAX_GEMM_DIM, description="T: rows of X and Y. Range: 1 to 2^48.")
    gemms: list[GemmPart] = Field(min_length=1, description="The layer's GEMMs.")


class PlanPart(_Doc):
    """The executable part of a plan document."""

    schema_: str = Field(alias="schema", description="Document schema tag.")
    mesh: MeshPart = Field(description="The chosen mesh.")
    layers: list[LayerPart] = Field(min_length=1, description="FC layers in model order.")


def read_plan(path: str) -> PlanPart:
    """Load and check a plan JSON file (InputError on bad input)."""
    data = parse_json(
        read_text(path),
        file=path,
        fix="pass the file `meshtune plan --format json` (or --out) wrote",
    )
    if not isinstance(data, dict):
        raise InputError(
            "must be a JSON object (a plan document)",
            file=path,
            fix="pass the file `meshtune plan --out PLAN.json` wrote",
        )
    schema = data.get("schema")
    if schema in OLD_SCHEMAS:
        raise InputError(
            f"is a document of an older meshtune; verify reads {PLAN_SCHEMA}, which holds the "
            "whole plan (searched or pinned)",
            file=path,
            field="schema",
            value=schema,
            fix="re-run `meshtune plan PLAN.yaml --out PLAN.json` with this version",
        )
    if schema != PLAN_SCHEMA:
        raise InputError(
            f"is not a {PLAN_SCHEMA} document",
            file=path,
            field="schema",
            value=schema,
            fix="pass the file `meshtune plan --out PLAN.json` wrote",
        )
    return validate_spec(PlanPart, data, file=path)
