"""meshtune's own pipeline-balancing YAML (specs, human units): a reader
that builds the balancer's Problem (problem.py, base units).

Human units are converted here, once: `*_ms` keys are milliseconds (1e-3 s),
`*_gib` keys are GiB (2**30 bytes).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from autotune.pipeline.limits import (
    MAX_BODY_LAYERS,
    MAX_CHUNKS,
    MAX_COEFFICIENT,
    MAX_MICRO_BATCHES,
    MAX_MS,
    MAX_SCHEDULE_OPS,
    MAX_STAGES,
    MAX_TIME_LIMIT_S,
    MIN_CAP_GIB,
    MIN_LAYER_MS,
)
from autotune.pipeline.problem import (
    RECOMPUTE_OPTIONS,
    EndBlock,
    LayerGroup,
    Problem,
    ProblemError,
    RecomputeOption,
    Schedule,
    SolverChoice,
    SolverSettings,
)
from autotune.specs.base import MAX_GIB
from autotune.specs.base import Spec as _BaseSpec


class Spec(_BaseSpec):
    """The pipeline specs: the common base, and no NaN or infinity anywhere."""

    model_config = ConfigDict(**{**_BaseSpec.model_config, "allow_inf_nan": False})


MS = 1e-3
GIB = float(2**30)

# The values of the per-option mappings (recompute_options,
# activation_memory_gib), backward factors and memory caps.
Coefficient = Annotated[float, Field(ge=0, le=MAX_COEFFICIENT)]
MemoryGib = Annotated[float, Field(ge=0, le=MAX_GIB)]
CapGib = Annotated[float, Field(ge=MIN_CAP_GIB, le=MAX_GIB)]


class PipelineShapeSpec(Spec):
    """How the model is cut and scheduled."""

    num_stages: int = Field(
        gt=0, le=MAX_STAGES, description=f"Pipeline stages (pp). Range: 1 to {MAX_STAGES}."
    )
    num_chunks: int = Field(
        default=1,
        gt=0,
        le=MAX_CHUNKS,
        description=f"Interleaved chunks per stage (v); 1 = plain 1F1B. Range: 1 to {MAX_CHUNKS}.",
    )
    num_micro_batches: int = Field(
        gt=0,
        le=MAX_MICRO_BATCHES,
        description=f"Micro-batches per step (m). Range: 1 to {MAX_MICRO_BATCHES}, and "
        f"stages x chunks x micro-batches at most {MAX_SCHEDULE_OPS}.",
    )
    schedule: Schedule = Field(
        default=Schedule.ONE_F_ONE_B,
        strict=False,
        description="`1f1b` (needs num_chunks 1) or `interleaved-1f1b` (Megatron order).",
    )
    min_layers_per_chunk: int = Field(
        default=1,
        ge=0,
        le=MAX_BODY_LAYERS,
        description="Fewest body layers a chunk may hold. Range: 0 to 100,000.",
    )

    @model_validator(mode="after")
    def _check(self) -> PipelineShapeSpec:
        if self.schedule is Schedule.ONE_F_ONE_B and self.num_chunks != 1:
            raise ValueError(
                f"schedule 1f1b runs one chunk per stage, got num_chunks {self.num_chunks}; "
                "fix: set `schedule: interleaved-1f1b` or `num_chunks: 1`"
            )
        if self.schedule is Schedule.INTERLEAVED and self.num_micro_batches % self.num_stages:
            raise ValueError(
                f"interleaved 1F1B needs num_micro_batches ({self.num_micro_batches}) to be a "
                f"multiple of num_stages ({self.num_stages}); fix: use a multiple of "
                f"{self.num_stages}"
            )
        return self


class MemorySpec(Spec):
    """Device memory budget and what every stage holds regardless of layers."""

    cap_gib: CapGib = Field(
        description="Usable device memory per stage, GiB. Range: 2^-10 (1 MiB) to 2^20."
    )
    constant_gib: float = Field(
        ge=0,
        le=MAX_GIB,
        description="Memory every stage holds besides its layers (buffers, workspace), GiB. "
        "Range: 0 to 2^20.",
    )


class EndSpec(Spec):
    """The head (embedding, first stage) or the tail (norm, output, loss; last stage)."""

    forward_ms: float = Field(
        ge=0, le=MAX_MS, description="Forward time per micro-batch, ms. Range: 0 to 3.6e6."
    )
    backward_factor: Coefficient = Field(
        default=2.0,
        description="Backward time as a multiple of the forward time. Range: 0 to 1000.",
    )
    memory_gib: float = Field(
        ge=0,
        le=MAX_GIB,
        description="Extra memory on its stage (parameters, optimizer, activations), GiB. "
        "Range: 0 to 2^20.",
    )


class LayerKindSpec(Spec):
    """A run of identical body layers, in model order."""

    kind: str = Field(min_length=1, description="Name of the layer kind (dense, moe, mtp, ...).")
    count: int = Field(
        gt=0,
        le=MAX_BODY_LAYERS,
        description="Number of consecutive layers of this kind. Range: 1 to 100,000.",
    )
    forward_ms: float = Field(
        ge=MIN_LAYER_MS,
        le=MAX_MS,
        description="Forward time of one layer per micro-batch, ms. Range: 1e-6 to 3.6e6.",
    )
    backward_factor: Coefficient = Field(
        default=2.0,
        description="Backward time (no recomputation) / forward time. Range: 0 to 1000.",
    )
    parameter_memory_gib: float = Field(
        ge=0,
        le=MAX_GIB,
        description="Parameter, gradient and optimizer memory of one layer, GiB. Range: 0 to 2^20.",
    )
    activation_memory_gib: dict[str, MemoryGib] = Field(
        description="Activation memory kept per micro-batch by one layer, GiB, for each "
        "recomputation option this kind may use (keys from recompute_options). "
        "Range: each 0 to 2^20."
    )

    @model_validator(mode="after")
    def _check(self) -> LayerKindSpec:
        if not self.activation_memory_gib:
            raise ValueError(
                "activation_memory_gib lists no recomputation option; "
                "fix: give at least `none: <GiB>`"
            )
        return self


class SolverSpec(Spec):
    """How the MILP is solved."""

    solver: SolverChoice = Field(
        default=SolverChoice.AUTO, strict=False, description="auto, highs or cbc."
    )
    time_limit_s: float = Field(
        default=60.0,
        gt=0,
        le=MAX_TIME_LIMIT_S,
        description="Wall-time limit of the search, s. Range: above 0 to 604,800 (a week).",
    )
    relative_gap: float = Field(
        default=1e-3, ge=0, lt=1, description="Stop when the proven gap is at most this."
    )


class PipelineFileSpec(Spec):
    """The whole `meshtune pipeline` input file (meshtune format)."""

    pipeline: PipelineShapeSpec = Field(description="Stages, chunks, micro-batches, schedule.")
    memory: MemorySpec = Field(description="Memory cap and constant memory per stage.")
    recompute_options: dict[str, Coefficient] = Field(
        description="Recomputation options allowed, each with its backward-time coefficient: "
        "backward time = backward_factor * forward * (1 + coefficient). Names from: "
        + ", ".join(RECOMPUTE_OPTIONS)
        + ". Range: each 0 to 1000."
    )
    head: EndSpec = Field(description="Embedding on the first stage.")
    tail: EndSpec = Field(description="Final norm, output projection and loss on the last stage.")
    layers: list[LayerKindSpec] = Field(min_length=1, description="Body layers in model order.")
    solver: SolverSpec = Field(default_factory=SolverSpec, description="Solver settings.")

    @model_validator(mode="after")
    def _check(self) -> PipelineFileSpec:
        for name in self.recompute_options:
            if name not in RECOMPUTE_OPTIONS:
                raise ValueError(
                    f"recompute_options has unknown option {name!r}; "
                    f"fix: use names from {', '.join(RECOMPUTE_OPTIONS)}"
                )
        seen: set[str] = set()
        for i, kind in enumerate(self.layers):
            if kind.kind in seen:
                raise ValueError(
                    f"layers[{i}].kind {kind.kind!r} appears twice; fix: merge the runs or "
                    "give the second run its own name"
                )
            seen.add(kind.kind)
            for name in kind.activation_memory_gib:
                if name not in self.recompute_options:
                    raise ValueError(
                        f"layers[{i}].activation_memory_gib.{name} is not in recompute_options; "
                        f"fix: add `{name}: <coefficient>` to recompute_options or remove it"
                    )
        total = sum(k.count for k in self.layers)
        num_chunks = self.pipeline.num_stages * self.pipeline.num_chunks
        if total < num_chunks * self.pipeline.min_layers_per_chunk:
            raise ValueError(
                f"{total} body layers cannot give {num_chunks} chunks at least "
                f"{self.pipeline.min_layers_per_chunk} layer(s) each; fix: lower num_stages, "
                "num_chunks or min_layers_per_chunk"
            )
        return self


def problem_from_spec(spec: PipelineFileSpec) -> Problem:
    """Convert a validated meshtune-format file to base units."""
    names = [n for n in RECOMPUTE_OPTIONS if n in spec.recompute_options]
    options = tuple(RecomputeOption(n, spec.recompute_options[n]) for n in names)
    groups = tuple(
        LayerGroup(
            kind=k.kind,
            count=k.count,
            forward_s=k.forward_ms * MS,
            backward_s=k.forward_ms * MS * k.backward_factor,
            parameter_bytes=k.parameter_memory_gib * GIB,
            activation_bytes=tuple(
                k.activation_memory_gib[n] * GIB if n in k.activation_memory_gib else None
                for n in names
            ),
        )
        for k in spec.layers
    )

    def end(e: EndSpec) -> EndBlock:
        return EndBlock(
            e.forward_ms * MS, e.forward_ms * MS * e.backward_factor, e.memory_gib * GIB
        )

    p = spec.pipeline
    return Problem(
        num_stages=p.num_stages,
        num_chunks=p.num_chunks,
        num_micro_batches=p.num_micro_batches,
        schedule=p.schedule,
        min_layers_per_chunk=p.min_layers_per_chunk,
        options=options,
        groups=groups,
        head=end(spec.head),
        tail=end(spec.tail),
        constant_bytes=spec.memory.constant_gib * GIB,
        memory_cap_bytes=spec.memory.cap_gib * GIB,
    )


def settings_from_spec(spec: SolverSpec) -> SolverSettings:
    """The solver block as SolverSettings."""
    return SolverSettings(
        solver=spec.solver, time_limit_s=spec.time_limit_s, relative_gap=spec.relative_gap
    )


def read_yaml_problem(data: dict[str, Any], file: str) -> tuple[Problem, SolverSettings]:
    """Validate a meshtune-format mapping and convert it."""
    from autotune.errors import InputError
    from autotune.loading import validate_spec

    allowed = list(PipelineFileSpec.model_fields)
    for key in data:
        if key not in allowed:
            raise InputError(
                "is not a known key",
                file=file,
                field=str(key),
                fix=f"remove it or correct the spelling (allowed: {', '.join(allowed)})",
            )
    spec = validate_spec(PipelineFileSpec, data, file=file)
    try:
        return problem_from_spec(spec), settings_from_spec(spec.solver)
    except ProblemError as exc:
        raise InputError(str(exc), file=file, fix="correct that value") from None
