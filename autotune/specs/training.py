"""The training shape: batch, sequence, precision, and the other parallelisms
that divide the work before tensor parallelism sees it."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from autotune.specs.base import MAX_CHIPS, MAX_COUNT, MAX_GIB, MAX_LAYERS, Spec


class DType(str, Enum):
    """Element type of activations and weights in the GEMMs."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP8 = "fp8"

    @property
    def num_bytes(self) -> int:
        """Bytes per element."""
        return {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}[self.value]


class Fp8Recipe(str, Enum):
    """Which FP8 recipe runs the FC layers' GEMMs (Transformer Engine's and
    torchao's recipes; the activations, weights, gradients and collectives
    stay in `dtype`): none; per-tensor scales from an amax history
    (delayed, TE's DelayedScaling) or from the tensor itself (current, TE's
    Float8CurrentScaling, torchao's tensorwise); MXFP8 (one scale per 32
    elements, Blackwell); DeepSeek-V3 style blocks (1 x 128 activations,
    128 x 128 weights, TE's Float8BlockScaling)."""

    NONE = "none"
    DELAYED = "delayed"
    CURRENT = "current"
    MXFP8 = "mxfp8"
    BLOCKWISE = "blockwise"


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022): none, the attention
    core only (selective), or every block's forward (full)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class AttentionKernel(str, Enum):
    """How the attention core runs: a fused flash-attention kernel (causal
    half skipped, no `s x s` tensors in HBM) or unfused batched GEMMs with a
    separate softmax (Megatron-LM before flash attention)."""

    FLASH = "flash"
    UNFUSED = "unfused"


class ContextComm(str, Enum):
    """How a context-parallel group exchanges keys and values (Megatron-LM's
    `--cp-comm-type`): p2p passes each chip's key/value block around a ring,
    overlapped with the attention of the block it holds (ring attention);
    all_gather gathers every block before the attention and reduce-scatters
    their gradients after it; a2a (DeepSpeed-Ulysses) turns the sequence
    split into a head split with all-to-alls around the attention."""

    P2P = "p2p"
    ALL_GATHER = "all_gather"
    A2A = "a2a"


class ExpertDispatcher(str, Enum):
    """How a mixture of experts' tokens reach their experts' ranks
    (Megatron-LM's `--moe-token-dispatcher-type` and
    `--moe-flex-dispatcher-backend`): alltoall sends each of a token's `k`
    copies; deepep and hybridep (the flex dispatcher's backends) send a
    token once to each other node holding one of its experts and fan it out
    inside the node (cost_models.moe.deduplicated_share); allgather
    (Megatron-LM's default) gathers every token of the expert group on
    every rank and reduce-scatters the outputs back."""

    ALLTOALL = "alltoall"
    DEEPEP = "deepep"
    HYBRIDEP = "hybridep"
    ALLGATHER = "allgather"

    @property
    def deduplicates(self) -> bool:
        """Whether a token crosses to another node once, not once per copy
        (the flex dispatcher's backends)."""
        return self in (ExpertDispatcher.DEEPEP, ExpertDispatcher.HYBRIDEP)


class FcAlgorithm(str, Enum):
    """How the FC layers are sharded over the tensor-parallel chips."""

    MESHSLICE = "meshslice"
    MEGATRON_1D = "megatron-1d"


class StepSettings(Spec):
    """What one training step runs and how, apart from how the chips divide
    it: the fields the plan file's training section (specs/job.py
    TrainingInput) and the resolved TrainingSpec share."""

    global_batch_sequences: int = Field(
        gt=0, le=MAX_COUNT, description="Sequences per training step. Range: 1 to 2^24."
    )
    sequence_length: int = Field(
        gt=0, le=MAX_COUNT, description="Tokens per sequence. Range: 1 to 2^24."
    )
    dtype: DType = Field(
        default=DType.BF16,
        strict=False,
        description="Element type of activations, weights, gradients and collectives: bf16, "
        "fp16 or fp32 (FP8 GEMMs are `fp8`).",
    )
    fp8: Fp8Recipe = Field(
        default=Fp8Recipe.NONE,
        strict=False,
        description="FP8 recipe of the FC layers' GEMMs: none, delayed, current, mxfp8 or "
        "blockwise (attention and the output layer stay in dtype).",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="With fp8 and ZeRO-3: gather the weights in FP8 (1 byte per parameter; "
        "torchao's enable_fsdp_float8_all_gather, Megatron-LM's --fp8-param-gather) instead "
        "of dtype.",
    )
    attention: AttentionKernel = Field(
        default=AttentionKernel.FLASH, strict=False, description="flash or unfused."
    )
    fc_algorithm: FcAlgorithm = Field(
        default=FcAlgorithm.MESHSLICE,
        strict=False,
        description="meshslice (sliced collectives on any tensor mesh, 1 x N included) or "
        "megatron-1d (Megatron-LM's blocking 1D tensor parallelism: 1 x N meshes only).",
    )
    sequence_parallel: bool = Field(
        default=True,
        description="megatron-1d only: norms, dropout and residuals split over the sequence "
        "(Korthikanti et al. 2022); meshslice always splits every activation.",
    )
    context_parallel_comm: ContextComm = Field(
        default=ContextComm.P2P,
        strict=False,
        description="Context parallelism's key/value exchange: p2p (ring attention, overlapped "
        "with the attention core), all_gather or a2a (DeepSpeed-Ulysses; heads divided over the "
        "group). Megatron-LM's --cp-comm-type. Left out: p2p, or all_gather for a model with "
        "a sliding window (Transformer Engine runs windows only with all_gather or a2a).",
    )
    expert_dispatcher: ExpertDispatcher = Field(
        default=ExpertDispatcher.ALLTOALL,
        strict=False,
        description="A mixture of experts' token dispatcher: alltoall (each of a token's "
        "copies sent), deepep or hybridep (a token sent once to each other node and each rank "
        "holding one of its experts, relayed across nodes; Megatron-LM's flex dispatcher) or "
        "allgather (every token of the "
        "expert group gathered on every rank, the outputs reduce-scattered; Megatron-LM's "
        "default). Node-limited routing saves inter-node bytes only with deepep or hybridep.",
    )
    overlap_expert_comm: bool = Field(
        default=False,
        description="Hide the expert all-to-alls of one micro-batch behind the computation of "
        "the next (Megatron-LM's --overlap-moe-expert-parallel-comm: the forward of one "
        "micro-batch runs merged with the backward of another in the 1F1B steady state). Its "
        "rules: no full recomputation, interleaved stages when pipelined, bf16 or fp16.",
    )
    dropout: bool = Field(
        default=False, description="Dropout after attention and projections (GPT-3 style)."
    )
    fp32_gradients: bool = Field(
        default=False,
        description="Keep and reduce gradients in fp32 (Megatron-LM main grads) instead of dtype.",
    )
    overlap_tensor_backward: bool = Field(
        default=False,
        description="megatron-1d only: in the backward of a column-parallel layer (QKV, FFN "
        "up/gate), run the input gradient's all-reduce (reduce-scatter with sequence "
        "parallelism) beside the weight-gradient GEMM, and the input's re-gather beside the "
        "input-gradient GEMM, as Megatron-LM's asynchronous tensor-parallel all-reduce does "
        "(Korthikanti et al. 2022 section 6.2); false runs every collective blocking.",
    )
    pipeline_scatter_gather: bool = Field(
        default=True,
        description="megatron-1d only: each tensor-parallel chip sends its 1/t share of a "
        "micro-batch's activation to the next pipeline stage (Megatron-LM's scatter-gather "
        "optimisation, Narayanan et al. SC'21 section 4.1; DeepSpeed's pipeline engine "
        "partitions them over the tensor-parallel group too; with sequence parallelism the "
        "activation is split anyway); false sends the whole activation from every chip "
        "(Megatron-LM's --no-scatter-gather-tensors-in-pipeline, DeepSpeed 0.12.3 and later "
        "with pipeline.pipe_partitioned false).",
    )
    overlap_data_parallel: bool = Field(
        default=True,
        description="Overlap gradient reduction with the backward pass (and weight gathers "
        "with compute); false runs them after the backward, as Megatron-LM's local DDP did.",
    )
    workspace_gib: float = Field(
        default=1.0,
        ge=0,
        le=MAX_GIB,
        description="Per-chip memory the framework holds besides tensors (runtime context, "
        "GEMM and collective workspaces), GiB. Range: 0 to 2^20.",
    )
    memory_reserve_fraction: float = Field(
        default=0.05,
        ge=0,
        lt=1,
        description="Fraction of HBM kept free for allocator fragmentation. Range: 0 to below 1.",
    )


class TrainingSpec(StepSettings):
    """Per-step work and how the chips divide it: data-parallel replicas,
    pipeline stages, micro-batches, recomputation, ZeRO stage."""

    data_parallel: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Data-parallel replicas. Range: 1 to 2^24."
    )
    pipeline_parallel: int = Field(
        default=1, gt=0, le=MAX_CHIPS, description="Pipeline stages. Range: 1 to 2^24."
    )
    context_parallel: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Chips one sequence is split over (context parallelism). Range: 1 to 2^24.",
    )
    expert_parallel: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Chips a mixture of experts' routed experts are spread over. Range: 1 to 2^24.",
    )
    expert_tensor_parallel: int = Field(
        default=1,
        gt=0,
        le=MAX_CHIPS,
        description="Chips each routed expert's weights are split over (expert tensor "
        "parallelism). Range: 1 to 2^24.",
    )
    micro_batches: int | None = Field(
        default=None,
        gt=0,
        le=MAX_COUNT,
        description="Micro-batches per step and replica; omitted means derived from "
        "micro_batch_size, or 1. Range: 1 to 2^24.",
    )
    micro_batch_size: int | None = Field(
        default=None,
        gt=0,
        le=MAX_COUNT,
        description="Sequences per micro-batch (alternative to micro_batches). Range: 1 to 2^24.",
    )
    interleave: int = Field(
        default=1,
        gt=0,
        le=MAX_LAYERS,
        description="Model chunks per pipeline stage (interleaved 1F1B); 1 means plain 1F1B. "
        "Range: 1 to 100,000.",
    )
    recompute: Recompute = Field(
        default=Recompute.NONE, strict=False, description="none, selective or full."
    )
    zero_stage: int = Field(
        default=0,
        ge=0,
        le=3,
        description="ZeRO stage 0-3 over the data-parallel replicas. Range: 0 to 3.",
    )

    @model_validator(mode="after")
    def _check_split(self) -> TrainingSpec:
        if self.dtype is DType.FP8:
            raise ValueError(f"{FP8_DTYPE_REASON}; fix: {FP8_DTYPE_FIX}")
        if self.context_parallel > 1:
            why = context_parallel_rule(self, self.context_parallel)
            if why is not None:
                raise ValueError(f"{why[0]}; fix: {why[1]}")
        per_replica, rem = divmod(self.global_batch_sequences, self.data_parallel)
        if rem:
            raise ValueError(
                f"global_batch_sequences ({self.global_batch_sequences}) is not divisible by "
                f"data_parallel ({self.data_parallel}); fix: use a batch that is a multiple of it"
            )
        if self.micro_batch_size is not None:
            if per_replica % self.micro_batch_size:
                raise ValueError(
                    f"sequences per replica ({per_replica}) are not divisible by "
                    f"micro_batch_size ({self.micro_batch_size}); fix: choose a micro_batch_size "
                    "that divides them"
                )
            derived = per_replica // self.micro_batch_size
            if self.micro_batches is not None and self.micro_batches != derived:
                raise ValueError(
                    f"micro_batches ({self.micro_batches}) disagrees with micro_batch_size "
                    f"({self.micro_batch_size}), which gives {derived}; fix: give only one of them"
                )
        elif per_replica % self.num_micro_batches:
            raise ValueError(
                f"sequences per replica ({per_replica}) are not divisible by micro_batches "
                f"({self.num_micro_batches}); fix: choose micro_batches that divides them"
            )
        if self.interleave > 1:
            if self.pipeline_parallel == 1:
                raise ValueError(
                    f"interleave {self.interleave} needs pipeline stages; fix: set "
                    "pipeline_parallel > 1 or interleave: 1"
                )
            if self.num_micro_batches % self.pipeline_parallel:
                raise ValueError(
                    f"interleaved 1F1B needs the micro-batches ({self.num_micro_batches}) to be a "
                    f"multiple of pipeline_parallel ({self.pipeline_parallel}); fix: change "
                    "micro_batch_size or the batch"
                )
        return self

    @property
    def num_micro_batches(self) -> int:
        """Micro-batches per step and replica."""
        if self.micro_batches is not None:
            return self.micro_batches
        if self.micro_batch_size is not None:
            return self.global_batch_sequences // self.data_parallel // self.micro_batch_size
        return 1

    @property
    def micro_batch_sequences(self) -> int:
        """Sequences in one micro-batch of one replica."""
        return self.global_batch_sequences // self.data_parallel // self.num_micro_batches

    @property
    def local_sequence_length(self) -> int:
        """Tokens of one sequence on one chip of its context-parallel group."""
        return self.sequence_length // self.context_parallel

    @property
    def tokens_per_micro_batch(self) -> int:
        """`T`: the token (row) dimension of every FC GEMM (a context-parallel
        chip holds `1 / cp` of every sequence)."""
        return self.micro_batch_sequences * self.local_sequence_length


def context_parallel_rule(settings: StepSettings, cp: int) -> tuple[str, str] | None:
    """Why a context-parallel degree `cp > 1` cannot run these settings
    (the rules Megatron-LM and Transformer Engine enforce) and the fix, or
    None:

    - the attention core must be a fused kernel (Transformer Engine's
      context-parallel attention is flash attention);
    - causal load balancing cuts every sequence into `2 cp` equal chunks
      (chip `i` holds chunks `i` and `2 cp - 1 - i`), so `2 cp` divides the
      sequence length.

    Head divisibility for a2a needs the model and the tensor group
    (candidates.context_refusal)."""
    if settings.attention is AttentionKernel.UNFUSED:
        return (
            f"context parallelism {cp} runs the attention core as a fused kernel",
            "set attention: flash or context_parallel: 1",
        )
    if settings.sequence_length % (2 * cp):
        return (
            f"context parallelism {cp} cuts each sequence into 2 x {cp} equal chunks for causal "
            f"load balancing, but sequence_length {settings.sequence_length} is not a multiple "
            f"of {2 * cp}",
            "choose context_parallel so that 2 x it divides the sequence",
        )
    return None


#: why `dtype: fp8` is refused, and its fix (FP8 is a GEMM recipe, not the
#: training's element type)
FP8_DTYPE_REASON = (
    "fp8 is a recipe for the FC layers' GEMMs, not the element type of activations, weights "
    "and gradients (which stay bf16 under every FP8 recipe)"
)
FP8_DTYPE_FIX = "write dtype: bf16 and fp8: delayed (or current, mxfp8, blockwise)"
