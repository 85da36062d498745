"""A `meshtune.plan/1` document read for export: the strict schema
(`PlanDocument`), the model and training specs it embeds, and the few
derived facts every writer needs (tensor-parallel degree, 1D or 2D)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.errors import InputError
from autotune.loading import read_json_object, validate_spec
from autotune.plan.schema import PLAN_SCHEMA, GemmDoc, LayerDoc, PlanDocument
from autotune.specs.model import ModelSpec
from autotune.specs.training import TrainingSpec

_FIX = "pass the file `meshtune plan --out PLAN.json` wrote"


@dataclass(frozen=True)
class PlanView:
    """One plan document and its embedded specs."""

    file: str
    doc: PlanDocument
    model: ModelSpec
    training: TrainingSpec

    @property
    def num_rows(self) -> int:
        """Chips along the mesh's row axis."""
        return self.doc.mesh.num_rows

    @property
    def num_cols(self) -> int:
        """Chips along the mesh's col axis."""
        return self.doc.mesh.num_cols

    @property
    def tensor_parallel(self) -> int:
        """Chips of one tensor-parallel group (the planned mesh)."""
        return self.doc.mesh.num_chips

    @property
    def is_1d(self) -> bool:
        """True when one mesh axis has a single chip (1D tensor parallelism)."""
        return min(self.num_rows, self.num_cols) == 1

    @property
    def tp_axis(self) -> str:
        """The axis that carries a 1D plan's tensor parallelism."""
        return "row" if self.num_rows > 1 else "col"

    @property
    def total_chips(self) -> int:
        """Data parallel x pipeline parallel x tensor parallel."""
        t = self.training
        return t.data_parallel * t.pipeline_parallel * self.tensor_parallel

    @property
    def source_name(self) -> str:
        """The plan file's name (not its folder), for headers."""
        return Path(self.file).name

    def layer(self, name: str) -> LayerDoc | None:
        """The plan's FC layer called `name`, if planned."""
        return next((lay for lay in self.doc.layers if lay.name == name), None)


def gemm(layer: LayerDoc, gemm_pass: str) -> GemmDoc | None:
    """The layer's GEMM of one pass (forward, backward_data, backward_weight)."""
    return next((g for g in layer.gemms if g.gemm_pass == gemm_pass), None)


def tp_collectives(g: GemmDoc) -> set[str]:
    """Collective operations of a GEMM that move data (rings of 2 or more)."""
    return {c.op for c in g.collectives if c.ring_size > 1}


def read_plan_view(path: str) -> PlanView:
    """Load a plan JSON for export; InputError (exit 2, one line) when the
    file is not JSON, not a plan, or misses a key."""
    data = read_json_object(path, "a plan JSON (`meshtune plan --out PLAN.json`)")
    schema = data.get("schema")
    if schema != PLAN_SCHEMA:
        raise InputError(
            f"is not a {PLAN_SCHEMA} document", file=path, field="schema", value=schema, fix=_FIX
        )
    doc = validate_spec(PlanDocument, data, file=path)
    model = validate_spec(ModelSpec, doc.inputs.model, file=path, prefix="inputs.model")
    training = validate_spec(TrainingSpec, doc.inputs.training, file=path, prefix="inputs.training")
    return PlanView(file=path, doc=doc, model=model, training=training)
