"""The plan file's `training` and `constraints` sections: what is trained and
which parallel degrees the user pins.

Every parallel degree (`data_parallel`, `pipeline_parallel`,
`tensor_parallel`, `tensor_mesh`, `micro_batch_size`, `interleave`,
`recompute`, `zero_stage`) is pinned by a value, searched with `auto`, and
searched when left out. A file that pins every degree is a search over one
configuration and goes through the same planner.

Human units in the keys (`_gib`), converted where they are read.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from autotune.specs.base import MAX_CHIPS, MAX_COUNT, MAX_LAYERS, Spec
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.chip import ChipSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.model import ModelSpec
from autotune.specs.pipeline_layout import LayoutError, expand_layout
from autotune.specs.plan_input import PlanInput, SearchSpec
from autotune.specs.training import (
    FP8_DTYPE_FIX,
    FP8_DTYPE_REASON,
    DType,
    ExpertDispatcher,
    FcAlgorithm,
    Recompute,
    StepSettings,
    TrainingSpec,
    context_parallel_rule,
)

Auto = Literal["auto"]
Chips = Annotated[int, Field(gt=0, le=MAX_CHIPS)]
Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]
Chunks = Annotated[int, Field(gt=0, le=MAX_LAYERS)]
ZeroStage = Annotated[int, Field(ge=0, le=3)]

#: Activation recomputation modes (Korthikanti et al. 2022), cheapest in
#: memory last; the index is the mode's code in candidate arrays.
RECOMPUTE_MODES = ("none", "selective", "full")

#: The degree keys of `training`, in the order reports list them.
DEGREE_KEYS = (
    "data_parallel",
    "pipeline_parallel",
    "tensor_parallel",
    "tensor_mesh",
    "context_parallel",
    "expert_parallel",
    "expert_tensor_parallel",
    "micro_batch_size",
    "interleave",
    "recompute",
    "zero_stage",
)


class LayerSplit(str, Enum):
    """How a pipelined configuration's layers are cut into stages: the
    pipeline balancer's plan (layers and recomputation per stage, never
    slower than the even split) or Megatron-LM's even split."""

    BALANCED = "balanced"
    EVEN = "even"


class TrainingInput(StepSettings):
    """The training step and how the chips divide it. A degree given as a
    number is pinned; `auto` or leaving it out lets the planner search it."""

    data_parallel: Chips | Auto | None = Field(
        default=None,
        description="Data-parallel replicas: a number, auto or left out (searched). "
        "Range: 1 to 2^24.",
    )
    pipeline_parallel: Chips | Auto | None = Field(
        default=None,
        description="Pipeline stages: a number, auto or left out (searched). Range: 1 to 2^24.",
    )
    tensor_parallel: Chips | Auto | None = Field(
        default=None,
        description="Chips of one tensor-parallel group (rows x cols of the tensor mesh): a "
        "number, auto or left out (searched). Range: 1 to 2^24.",
    )
    tensor_mesh: list[Chips] | Literal["auto", "1d"] | None = Field(
        default=None,
        description="[rows, cols] of the tensor mesh (1D tensor parallelism is [1, N]); 1d "
        "searches only 1 x N meshes; auto or left out searches every shape. "
        "Range: each side 1 to 2^24.",
    )
    context_parallel: Chips | Auto | None = Field(
        default=None,
        description="Chips each sequence is split over (context parallelism; attention: flash "
        "and 2 x it dividing the sequence): a number, auto or left out (searched). "
        "Range: 1 to 2^24.",
    )
    expert_parallel: Chips | Auto | None = Field(
        default=None,
        description="Chips a mixture of experts' routed experts are spread over (each holds "
        "num_experts / it; it divides num_experts and the tensor x context x data chips of a "
        "stage): a number, auto or left out (searched; 1 for a dense model). Range: 1 to 2^24.",
    )
    expert_tensor_parallel: Chips | Auto | None = Field(
        default=None,
        description="Chips each routed expert's weights are split over (expert tensor "
        "parallelism; it divides the expert FFN width, and expert_parallel x it the tensor x "
        "context x data chips of a stage): a number, auto (searched among the divisors of the "
        "tensor-parallel chips) or left out (1: each expert whole on its rank, Megatron-Core's "
        "folding for fine-grained experts; searching it multiplies a MoE search). Range: 1 "
        "to 2^24.",
    )
    micro_batch_size: Count | Auto | None = Field(
        default=None,
        description="Sequences per micro-batch: a number, auto or left out (searched). "
        "Range: 1 to 2^24.",
    )
    micro_batches: Count | None = Field(
        default=None,
        description="Micro-batches per step and replica: pins the micro-batch size to "
        "sequences per replica / micro_batches (give this or micro_batch_size). "
        "Range: 1 to 2^24.",
    )
    interleave: Chunks | Auto | None = Field(
        default=None,
        description="Model chunks per pipeline stage (interleaved 1F1B; 1 is plain 1F1B): a "
        "number, auto or left out (searched). Range: 1 to 100,000.",
    )
    recompute: Literal["none", "selective", "full", "auto"] | None = Field(
        default=None,
        description="Activation recomputation: none, selective (the attention core; "
        "under MLA its up-projections), full "
        "(every block's forward), auto or left out (searched).",
    )
    zero_stage: ZeroStage | Auto | None = Field(
        default=None,
        description="ZeRO stage over the data-parallel replicas: 0-3, auto or left out "
        "(searched). Range: 0 to 3.",
    )
    layer_split: LayerSplit = Field(
        default=LayerSplit.BALANCED,
        strict=False,
        description="balanced: the pipeline balancer cuts layers and recomputation per stage "
        "(never slower than the even split); even: Megatron-LM's even split.",
    )
    pipeline_layout: str | None = Field(
        default=None,
        max_length=100_000,
        description="Megatron-LM's --pipeline-model-parallel-layout, e.g. Et|(tt|)*30mL: the "
        "blocks of every virtual stage in model order (E embedding, t transformer block, m "
        "MTP block, L loss, | between stages, x*n and (...)*n repeat); pins the layer split "
        "(layer_split is not used) and, with pipeline_parallel pinned, interleave = stages / "
        "pipeline_parallel. Left out: layer_split decides.",
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "flash_attention" in data:
            value = data["flash_attention"]
            raise ValueError(
                f"flash_attention ({value!r}) is now `attention: flash` or `attention: "
                "unfused`; fix: replace `flash_attention: true` with `attention: flash` "
                "(false: `attention: unfused`)"
            )
        return data

    @field_validator("dtype")
    @classmethod
    def _check_dtype(cls, value: Any) -> Any:
        if DType(value) is DType.FP8:
            raise ValueError(f"{FP8_DTYPE_REASON}; fix: {FP8_DTYPE_FIX}")
        return value

    @field_validator("tensor_mesh")
    @classmethod
    def _check_mesh(cls, mesh: Any) -> Any:
        if isinstance(mesh, list) and len(mesh) != 2:
            raise ValueError(f"{mesh} must be [rows, cols], auto or 1d; fix: write e.g. [1, 8]")
        return mesh

    @field_validator("micro_batches")
    @classmethod
    def _check_micro_batches(cls, value: int | None, info: ValidationInfo) -> int | None:
        size = info.data.get("micro_batch_size")
        if value is not None and size not in (None, "auto"):
            dp = info.data.get("data_parallel")
            batch = info.data.get("global_batch_sequences")
            if not isinstance(dp, int) or not batch or batch // dp != value * size:
                raise ValueError(
                    f"{value} and micro_batch_size {size} are both given; fix: give only one "
                    "of them"
                )
        return value

    @field_validator("interleave")
    @classmethod
    def _check_interleave(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and value > 1 and info.data.get("pipeline_parallel") == 1:
            raise ValueError(
                f"interleave {value} needs pipeline stages; fix: set pipeline_parallel > 1 "
                "(or auto) or interleave: 1"
            )
        return value

    @field_validator("pipeline_layout")
    @classmethod
    def _check_layout(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        try:
            stages = len(expand_layout(value))
        except LayoutError as why:
            raise ValueError(
                f"{value!r}: {why}; fix: write it as Megatron-LM reads it, e.g. Et|(tt|)*30mL"
            ) from None
        pp = info.data.get("pipeline_parallel")
        if not isinstance(pp, int):
            raise ValueError(
                f"{value!r} needs the pipeline stages pinned; fix: set pipeline_parallel to a "
                f"number that divides its {stages} stage(s)"
            )
        v = info.data.get("interleave")
        if stages % pp or (isinstance(v, int) and stages != pp * v):
            if isinstance(v, int):
                want = f"pipeline_parallel x interleave ({pp} x {v})"
            else:
                want = f"a multiple of pipeline_parallel ({pp})"
            raise ValueError(
                f"{value!r} has {stages} virtual stage(s), not {want}; fix: give a layout "
                "with pipeline_parallel x interleave stages (or change those degrees)"
            )
        return value

    @field_validator("zero_stage")
    @classmethod
    def _check_zero(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, int) and value > 0 and info.data.get("data_parallel") == 1:
            raise ValueError(
                f"zero_stage {value} shards over data-parallel replicas but data_parallel is 1; "
                "fix: set zero_stage: 0 or data_parallel > 1 (or auto)"
            )
        return value

    @field_validator("fc_algorithm")
    @classmethod
    def _check_algorithm(cls, value: Any, info: ValidationInfo) -> Any:
        mesh = info.data.get("tensor_mesh")
        if FcAlgorithm(value) is FcAlgorithm.MEGATRON_1D and isinstance(mesh, list):
            if mesh[0] != 1:
                raise ValueError(
                    f"megatron-1d runs on a 1 x N mesh but tensor_mesh is {mesh}; fix: write "
                    "tensor_mesh: [1, N] or use fc_algorithm: meshslice"
                )
        return value

    @model_validator(mode="after")
    def _check_context(self) -> TrainingInput:
        cp = self.context_parallel
        if isinstance(cp, int) and cp > 1:
            why = context_parallel_rule(self, cp)
            if why is not None:
                raise ValueError(f"{why[0]}; fix: {why[1]}")
        return self

    @property
    def balances_layers(self) -> bool:
        """Whether the pipeline balancer cuts the layers: layer_split
        balanced and no pinned pipeline_layout."""
        return self.layer_split is LayerSplit.BALANCED and self.pipeline_layout is None

    def pinned(self, name: str) -> Any:
        """The pinned value of degree `name`, or None when it is searched."""
        if name == "micro_batch_size" and self.micro_batches is not None:
            return None  # pinned through micro_batches; resolved per replica count
        value = getattr(self, name)
        if value is None or value == "auto":
            return None
        if name == "tensor_mesh" and value == "1d":
            return None
        return value

    @property
    def pinned_degrees(self) -> tuple[str, ...]:
        """The degree keys the file pins (micro_batches counts as the micro-batch size)."""
        out = [k for k in DEGREE_KEYS if self.pinned(k) is not None]
        if self.micro_batches is not None:
            out.insert(DEGREE_KEYS.index("micro_batch_size"), "micro_batches")
        if self.tensor_mesh == "1d" or self.fc_algorithm is FcAlgorithm.MEGATRON_1D:
            out.append("tensor_mesh: 1d")
        if self.pipeline_layout is not None:
            out.append("pipeline_layout")
        return tuple(out)

    def resolved(
        self,
        *,
        data_parallel: int | None = None,
        pipeline_parallel: int | None = None,
        context_parallel: int | None = None,
        expert_parallel: int | None = None,
        expert_tensor_parallel: int | None = None,
        micro_batch_size: int | None = None,
        interleave: int | None = None,
        recompute: str | None = None,
        zero_stage: int | None = None,
    ) -> TrainingSpec:
        """The training of one configuration: the given degrees, else the
        pinned ones, else data and pipeline parallelism 1, one micro-batch
        per replica, no interleaving, no recomputation, ZeRO 0 (what
        `meshtune compare` prices)."""
        dp = data_parallel or self.pinned("data_parallel") or 1
        mbs = micro_batch_size or self.pinned("micro_batch_size")
        micro_batches = None
        if mbs is None:
            micro_batches = self.micro_batches or 1
        # every step setting as given (the fields both specs share)
        settings = {name: getattr(self, name) for name in StepSettings.model_fields}
        return TrainingSpec(
            **settings,
            data_parallel=dp,
            pipeline_parallel=pipeline_parallel or self.pinned("pipeline_parallel") or 1,
            context_parallel=context_parallel or self.pinned("context_parallel") or 1,
            expert_parallel=expert_parallel or self.pinned("expert_parallel") or 1,
            expert_tensor_parallel=(
                expert_tensor_parallel or self.pinned("expert_tensor_parallel") or 1
            ),
            micro_batch_size=mbs,
            micro_batches=micro_batches,
            interleave=interleave or self.pinned("interleave") or 1,
            recompute=Recompute(recompute or self.pinned("recompute") or "none"),
            zero_stage=zero_stage if zero_stage is not None else self.pinned("zero_stage") or 0,
        )

    @property
    def fully_pinned(self) -> bool:
        """Whether every degree is pinned (one candidate, up to the mesh shape)."""
        needed = ("data_parallel", "pipeline_parallel", "recompute", "zero_stage")
        mb = self.pinned("micro_batch_size") is not None or self.micro_batches is not None
        return mb and all(self.pinned(k) is not None for k in needed)


class Trainer(str, Enum):
    """An export target whose runnable configurations bound the search
    (`constraints.trainer`; the rules: autotune/job/trainers.py)."""

    JAX = "jax"
    MAXTEXT = "maxtext"
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    MINDFORMERS = "mindformers"

    @property
    def weight_stationary(self) -> bool:
        """Whether the trainer runs every FC layer weight-stationary: Megatron-
        style column- and row-parallel layers, whose weights never move
        (Megatron-LM; torchtitan's ColwiseParallel / RowwiseParallel plan),
        so the search prices only that dataflow (autotune/job/trainers.py)."""
        return self in (Trainer.MEGATRON, Trainer.TORCHTITAN)

    @property
    def display_name(self) -> str:
        """How the trainer's own documentation spells it."""
        return _TRAINER_NAMES[self]


_TRAINER_NAMES = {
    Trainer.JAX: "JAX",
    Trainer.MAXTEXT: "MaxText",
    Trainer.MEGATRON: "Megatron-LM",
    Trainer.TORCHTITAN: "torchtitan",
    Trainer.MINDFORMERS: "MindFormers",
}


class Constraints(Spec):
    """Limits on what the search may choose (all optional)."""

    trainer: Trainer | None = Field(
        default=None,
        strict=False,
        description="Search only the tensor meshes, FC dataflows, ZeRO stages, recomputation "
        "modes and expert tensor degrees this trainer runs as the plan prices them (jax, maxtext, "
        "megatron, torchtitan or mindformers: the target `meshtune export --to` will write); "
        "omitted means every configuration.",
    )

    tensor_parallel_within_node: bool = Field(
        default=True,
        description="Keep every tensor-parallel group inside one node (switched and fully "
        "connected clusters; a torus slice is one domain).",
    )
    max_tensor_parallel: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CHIPS,
        description="Largest tensor-parallel group (chips). Range: 1 to 2^24.",
    )
    max_context_parallel: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CHIPS,
        description="Largest context-parallel group (chips). Range: 1 to 2^24.",
    )
    max_expert_parallel: int | None = Field(
        default=None,
        gt=0,
        le=MAX_CHIPS,
        description="Largest expert-parallel group (chips). Range: 1 to 2^24.",
    )
    max_pipeline_stages: int | None = Field(
        default=None, gt=0, le=MAX_CHIPS, description="Most pipeline stages. Range: 1 to 2^24."
    )
    max_interleave: int = Field(
        default=4,
        gt=0,
        le=MAX_LAYERS,
        description="Most model chunks per stage. Range: 1 to 100,000.",
    )
    max_micro_batch_size: int = Field(
        default=16,
        gt=0,
        le=MAX_COUNT,
        description="Largest micro-batch the search tries (sequences). Range: 1 to 2^24.",
    )
    zero_stages: list[ZeroStage] = Field(
        default=[0, 1, 2, 3],
        min_length=1,
        description="ZeRO stages auto may choose. Range: each 0 to 3.",
    )
    finalists: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Best pipelined candidates the pipeline ILP balances first. Range: 1 to 1000.",
    )
    top_n: int = Field(
        default=5, ge=1, le=1000, description="Alternatives reported. Range: 1 to 1000."
    )
    ilp_time_limit_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        description="Wall-time limit of one pipeline balancer solve, seconds; when the solver "
        "proves nothing in time, the balancer's own heuristic plan is used. Range: above 0 "
        "to 3600.",
    )


def expert_tensor_parallel_rule(model: ModelSpec, etp: int) -> tuple[str, str] | None:
    """Why `etp` chips cannot split each routed expert (reason, fix), or
    None: a dense model takes only 1; a mixture of experts needs `etp` to
    divide the expert FFN width (each chip holds `F_e / etp` columns of the
    first layer and rows of the second)."""
    if etp == 1:
        return None
    moe = model.moe
    if moe is None:
        return (
            f"the model {model.name!r} has no routed experts",
            "leave expert_tensor_parallel out (or 1), or give the model a `moe:` section",
        )
    if moe.expert_ffn_size % etp:
        return (
            f"does not divide the expert FFN width {moe.expert_ffn_size} (each chip holds "
            "expert_ffn_size / expert_tensor_parallel of it)",
            "use a divisor of the expert FFN width (or 1)",
        )
    return None


def overlap_expert_comm_rule(model: ModelSpec, training: TrainingInput) -> tuple[str, str] | None:
    """Why `overlap_expert_comm` cannot hold for this model and training
    (reason, fix), or None: Megatron-Core's overlap hides expert all-to-alls,
    so it needs a mixture of experts, and it runs only in bf16 or fp16
    (megatron/core/transformer/transformer_config.py at d98e8a64: "only
    supported with bf16 or fp16 model", and with the alltoall or flex
    token dispatcher only; a pinned full recomputation, a
    pinned expert parallelism of 1 and uninterleaved pipeline stages are
    refused by the search with its other rules)."""
    if not training.overlap_expert_comm:
        return None
    if model.moe is None:
        return (
            f"true needs routed experts; the model {model.name!r} has none",
            "remove overlap_expert_comm (or set it false)",
        )
    if training.dtype not in (DType.BF16, DType.FP16):
        return (
            f"true runs only in bf16 or fp16, not dtype {training.dtype.value}",
            "set dtype: bf16 (or overlap_expert_comm: false)",
        )
    if training.expert_dispatcher is ExpertDispatcher.ALLGATHER:
        # transformer_config.py lines 3016-3019 at d98e8a64
        return (
            "true runs only with the alltoall or flex token dispatcher, not allgather",
            "set expert_dispatcher: alltoall (or overlap_expert_comm: false)",
        )
    return None


def expert_parallel_rule(model: ModelSpec, ep: int) -> tuple[str, str] | None:
    """Why `ep` expert-parallel chips cannot hold the model's routed experts
    (reason, fix), or None: a dense model takes only 1; a mixture of
    experts needs `ep` to divide its routed experts (each rank holds
    `num_experts / ep`; Megatron-LM's validate_args asserts it)."""
    if ep == 1:
        return None
    moe = model.moe
    if moe is None:
        return (
            f"the model {model.name!r} has no routed experts",
            "leave expert_parallel out (or 1), or give the model a `moe:` section",
        )
    if moe.num_experts % ep:
        return (
            f"does not divide the model's {moe.num_experts} routed experts (each rank holds "
            "num_experts / expert_parallel)",
            f"use a divisor of {moe.num_experts}",
        )
    return None


class JobInput(Spec):
    """Everything one plan is computed from, resolved and validated: the
    model, the training input with its pinned and searched degrees, the
    cluster with its chip and calibration, the FC planner's knobs and the
    search's limits."""

    model: ModelSpec = Field(description="The model.")
    training: TrainingInput = Field(description="The step and the degrees.")
    cluster: ClusterSpec = Field(description="The cluster.")
    chip: ChipSpec | None = Field(
        default=None, description="The cluster's chip, when it names one."
    )
    calibration: CalibrationSpec = Field(description="The calibration in use.")
    search: SearchSpec = Field(default=SearchSpec(), description="FC planner knobs.")
    constraints: Constraints = Field(default=Constraints(), description="Search limits.")
    source_file: str | None = Field(default=None, description="The plan file.")
    cluster_ref: str | None = Field(default=None, description="How the cluster was named.")
    calibration_ref: str | None = Field(default=None, description="How the calibration was named.")

    def plan_input(self, training: TrainingSpec | None = None) -> PlanInput:
        """The FC planner's input for one resolved `training` (default: the
        pinned degrees, see TrainingInput.resolved)."""
        return PlanInput(
            model=self.model,
            training=training or self.training.resolved(),
            cluster=self.cluster,
            chip=self.chip,
            calibration=self.calibration,
            search=self.search,
            source_file=self.source_file,
            cluster_ref=self.cluster_ref,
            calibration_ref=self.calibration_ref,
        )
