"""A `meshtune.plan/3` document read for export: the strict schema
(`PlanDocument`), the model it embeds, the configuration's training as a
resolved spec, and the few derived facts every writer needs
(tensor-parallel degree, 1D or 2D, context parallelism, micro-batches,
interleaving, recomputation, ZeRO stage, layers per stage)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autotune.errors import InputError
from autotune.loading import read_json_object, validate_spec
from autotune.plan.schema import OLD_SCHEMAS, PLAN_SCHEMA, GemmDoc, LayerDoc, PlanDocument
from autotune.specs.model import ModelSpec
from autotune.specs.training import Recompute, TrainingSpec

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
    def context_parallel(self) -> int:
        """Chips each sequence is split over (1: no context parallelism)."""
        return self.doc.configuration.context_parallel

    @property
    def context_comm(self) -> str:
        """The context group's key/value exchange: p2p (ring attention),
        all_gather or a2a (DeepSpeed-Ulysses), Megatron-LM's --cp-comm-type."""
        return self.doc.configuration.context_parallel_comm

    @property
    def expert_parallel(self) -> int:
        """Chips a mixture of experts' routed experts are spread over."""
        return self.doc.configuration.expert_parallel

    @property
    def expert_tensor_parallel(self) -> int:
        """Chips each routed expert's weights are split over."""
        return self.doc.configuration.expert_tensor_parallel

    @property
    def total_chips(self) -> int:
        """Data parallel x pipeline parallel x context parallel x tensor parallel."""
        t = self.training
        return t.data_parallel * t.pipeline_parallel * self.context_parallel * self.tensor_parallel

    @property
    def micro_batches(self) -> int:
        """Micro-batches per step and replica (given or derived)."""
        return self.training.num_micro_batches

    @property
    def micro_batch_sequences(self) -> int:
        """Sequences in one micro-batch of one replica."""
        return self.training.micro_batch_sequences

    @property
    def interleave(self) -> int:
        """Model chunks per pipeline stage (1: plain 1F1B)."""
        return self.training.interleave

    @property
    def recompute(self) -> str:
        """Activation recomputation: none, selective, full, or per-stage
        (`stage_recompute` says which)."""
        return self.doc.configuration.recompute

    @property
    def recompute_modes(self) -> set[str]:
        """Every recomputation mode some block of the plan uses."""
        return {mode for stage in self.stage_recompute() for mode in stage}

    @property
    def heaviest_recompute(self) -> str:
        """The heaviest recomputation any stage uses (none < selective <
        full): what a trainer that recomputes every block alike runs for a
        per-stage plan (`recompute_modes` holds more than one); the plan's
        own mode otherwise."""
        modes = self.recompute_modes
        return next((m for m in ("full", "selective", "none") if m in modes), "none")

    @property
    def layers_per_stage(self) -> list[int]:
        """Blocks on each pipeline stage (all its chunks)."""
        return [st.layers for st in self.doc.pipeline.stages]

    @property
    def virtual_stage_layers(self) -> list[int]:
        """Blocks of each model chunk in model order: chunk j of stage s is
        virtual stage j * pp + s (the interleaved schedule's order, as in
        docs/pipeline.md; Megatron-LM and torchtitan number them the same)."""
        stages = self.doc.pipeline.stages
        return [st.layers_per_chunk[j] for j in range(self.interleave) for st in stages]

    def dcn_size(self, axis: str) -> int:
        """Chips of an axis's groups outside one ICI domain: in different
        TPU slices (the layout's data-center network level), or, on GPU
        nodes, in different nodes (MaxText's `dcn_*` on GPUs: the part of the
        axis past the chips its stride leaves in a node). 1 when the axis
        stays inside."""
        found = next((a for a in self.doc.layout.axes if a.axis == axis), None)
        if found is None:
            return 1
        if found.dcn_size > 1:
            return found.dcn_size
        node = (self.doc.provenance.cluster.get("node") or {}).get("chips_per_node")
        if not node or not any(lv.kind == "scale_out" for lv in found.levels):
            return 1
        inside = node // found.stride if node % found.stride == 0 else 1
        inside = max(1, min(inside, found.size))
        return found.size // inside if found.size % inside == 0 else found.size

    def stage_recompute(self) -> list[dict[str, int]]:
        """Blocks per recomputation mode on each stage."""
        return [dict(st.recompute) for st in self.doc.pipeline.stages]

    @property
    def zero_stage(self) -> int:
        """ZeRO stage 0-3 over the data-parallel replicas."""
        return self.training.zero_stage

    @property
    def sequence_parallel(self) -> bool:
        """Activations outside the FC layers split over the tensor-parallel chips:
        always under meshslice, the plan's choice under megatron-1d."""
        return self.training.fc_algorithm.value == "meshslice" or self.training.sequence_parallel

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


def old_schema_error(path: str, schema: object, command: str) -> InputError:
    """The one line a reader of an older plan document, or of the search
    summary version 3 replaced, gets."""
    return InputError(
        f"is a document of an older meshtune; {command} reads {PLAN_SCHEMA}, which holds the "
        "whole plan (searched or pinned)",
        file=path,
        field="schema",
        value=schema,
        fix="re-run `meshtune plan PLAN.yaml --out PLAN.json` with this version",
    )


def resolved_training(doc: PlanDocument, path: str) -> TrainingSpec:
    """The configuration's training as a resolved spec (the file's
    modelling choices, the plan's degrees; `per-stage` recomputation as the
    heaviest mode any stage uses)."""
    c = doc.configuration
    given = doc.provenance.training
    recompute = c.recompute
    if recompute not in ("none", "selective", "full"):
        used = {m for st in doc.pipeline.stages for m in st.recompute}
        recompute = next((m for m in ("full", "selective", "none") if m in used), "none")
    data = {
        "global_batch_sequences": c.global_batch_sequences,
        "sequence_length": c.sequence_length,
        "dtype": c.dtype,
        "data_parallel": c.data_parallel,
        "pipeline_parallel": c.pipeline_parallel,
        "context_parallel": c.context_parallel,
        "context_parallel_comm": c.context_parallel_comm,
        "expert_parallel": c.expert_parallel,
        "expert_tensor_parallel": c.expert_tensor_parallel,
        "expert_dispatcher": c.expert_dispatcher,
        "overlap_expert_comm": c.overlap_expert_comm,
        "fp8": c.fp8,
        "fp8_param_gather": c.fp8_param_gather,
        "micro_batch_size": c.micro_batch_size,
        "interleave": c.interleave,
        "recompute": Recompute(recompute),
        "zero_stage": c.zero_stage,
        "attention": c.attention,
        "fc_algorithm": c.fc_algorithm,
    }
    for key in (
        "sequence_parallel",
        "dropout",
        "fp32_gradients",
        "overlap_tensor_backward",
        "pipeline_scatter_gather",
        "overlap_data_parallel",
        "workspace_gib",
        "memory_reserve_fraction",
    ):
        if key in given:
            data[key] = given[key]
    return validate_spec(TrainingSpec, data, file=path, prefix="configuration")


def read_plan_view(path: str) -> PlanView:
    """Load a plan JSON for export; InputError (exit 2, one line) when the
    file is not JSON, not a plan, an older version, or misses a key."""
    data = read_json_object(path, "a plan JSON (`meshtune plan --out PLAN.json`)")
    schema = data.get("schema")
    if schema in OLD_SCHEMAS:
        raise old_schema_error(path, schema, "export")
    if schema != PLAN_SCHEMA:
        raise InputError(
            f"is not a {PLAN_SCHEMA} document", file=path, field="schema", value=schema, fix=_FIX
        )
    doc = validate_spec(PlanDocument, data, file=path)
    model = validate_spec(ModelSpec, doc.provenance.model, file=path, prefix="provenance.model")
    return PlanView(file=path, doc=doc, model=model, training=resolved_training(doc, path))
