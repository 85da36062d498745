"""The Megatron-LM / Transformer Engine export, for 1D plans (Megatron's
tensor parallelism has one axis; a 2D plan is refused with a pointer to the
JAX export).

Files: `megatron_args.sh`, a bash array of command-line arguments, and
`tp_comm_overlap_cfg.yaml`, Transformer Engine's userbuffers configuration
(`--tp-comm-overlap-cfg`) with each GEMM's overlap method and split count
taken from the plan.

Key names: NVIDIA/Megatron-LM's argument parser (`megatron/training/
arguments.py` and the configuration dataclasses it turns into flags) at
commit d98e8a64 (2026-08-22), the newest one checked; every flag written
also exists at the earlier commit 000c4ac2 (2025-11-13).
Userbuffers keys, GEMM names and methods: NVIDIA/TransformerEngine
`transformer_engine/pytorch/module/base.py` `initialize_ub` at commit
fecb10bd: GEMMs `{qkv,proj,fc1,fc2}_{fprop,dgrad,wgrad}`, methods
`ring_exchange`, `pipeline` (reduce-scatter only) and `bulk`, and
`num_splits` for `pipeline` (ring exchange always runs `tp_size` steps).

Context parallelism (the plan's `context_parallel` > 1):
`--context-parallel-size` (a field of `ModelParallelConfig`,
megatron/core/model_parallel_config.py line 100, made a flag by the
`ArgumentGroupFactory(TransformerConfig)` of arguments.py line 2373 at
d98e8a64; `add_argument` at arguments.py line 2760 at 000c4ac2) and
`--cp-comm-type` (arguments.py line 3221 at d98e8a64, line 2762 at
000c4ac2): the plan's p2p, all_gather and a2a are the values
`TransformerConfig.cp_comm_type` takes (transformer_config.py lines
1030-1044 at d98e8a64) and Transformer Engine dispatches on
(NVIDIA/TransformerEngine `transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py` `attn_forward_func_with_cp`,
lines 5096-5139 at d0067d0d; the parser's help spells it "allgather", which
TE refuses as an unsupported communication type). Megatron derives data
parallel = world / (TP x PP x CP) (validate_args, arguments.py lines 442-448
at d98e8a64), so the plan's data parallel and micro-batches give the same
global batch; its distributed optimizer shards over data x context, as the
plan's ZeRO does.

Mixtures of experts (the plan's model has `moe`): `--num-experts`
(arguments.py line 3518 at d98e8a64), `--moe-layer-freq` (line 3520; a
Python list pattern `([0]*d+[1]*n)` when dense blocks come first),
`--moe-ffn-hidden-size`, `--moe-router-topk`,
`--moe-shared-expert-intermediate-size`, `--moe-router-score-function`,
`--moe-router-num-groups` / `--moe-router-group-topk` (node-limited
routing), `--moe-expert-capacity-factor` with
`--moe-pad-expert-input-to-capacity`, `--moe-grouped-gemm`,
`--moe-token-dispatcher-type` (alltoall or allgather, or flex with
`--moe-flex-dispatcher-backend` deepep or hybridep for the plan's
deduplicating dispatcher) and `--overlap-moe-expert-parallel-comm` (the
plan's `overlap_expert_comm`; CUDA_DEVICE_MAX_CONNECTIONS 32 then, as the
parser only warns about it) (TransformerConfig fields,
megatron/core/transformer/transformer_config.py lines 701-921 at d98e8a64,
made flags by the ArgumentGroupFactory of arguments.py line 2373), and
`--expert-model-parallel-size` / `--expert-tensor-parallel-size`
(ModelParallelConfig, model_parallel_config.py lines 127-130; Megatron
defaults the expert tensor size to the tensor size, arguments.py lines
587-588, so the plan's expert tensor parallelism is always written).
validate_args asserts the experts divide by the expert-parallel size (lines
1655-1658). Multi-head latent
attention: `--multi-latent-attention` (transformer_config.py line 288),
`--q-lora-rank`, `--kv-lora-rank`, `--qk-head-dim` (the no-RoPE part),
`--qk-pos-emb-head-dim`, `--v-head-dim` (arguments.py lines 3548-3557);
multi-token prediction `--mtp-num-layers` (transformer_config.py line 68).

Mapping: Megatron's column-parallel layers (QKV, FC1) all-gather their
input in the forward GEMM and reduce-scatter in the data-gradient GEMM; the
row-parallel ones (output projection, FC2) reduce-scatter forward and
all-gather for the data gradient. A planned GEMM whose collective matches
gets `ring_exchange` (all-gather) or `pipeline` with `num_splits = S`
(reduce-scatter); any other choice is listed as not expressed.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

from autotune.formats.export import (
    Export,
    ExportFile,
    Notes,
    commented,
    finish,
    header_lines,
    needs_1d,
)
from autotune.formats.plan_view import PlanView, gemm, tp_collectives
from autotune.plan.schema import GemmDoc
from autotune.specs.model import FfnKind, PositionEncoding
from autotune.specs.training import AttentionKernel, Fp8Recipe

KEYS_FROM = (
    "NVIDIA/Megatron-LM megatron/training/arguments.py @ d98e8a64; NVIDIA/TransformerEngine "
    "transformer_engine/pytorch/module/base.py initialize_ub @ fecb10bd"
)
ARGS_FILE = "megatron_args.sh"
UB_FILE = "tp_comm_overlap_cfg.yaml"

# meshtune layer -> Transformer Engine GEMM prefix; column- or row-parallel.
TE_NAMES = {"qkv": "qkv", "attn_out": "proj", "ffn_up": "fc1", "ffn_down": "fc2"}
COLUMN_PARALLEL = ("qkv", "fc1")
# (TE prefix kind, pass) -> the collective Megatron overlaps with that GEMM.
_EXPECTED = {
    ("column", "forward"): "all_gather",
    ("column", "backward_data"): "reduce_scatter",
    ("row", "forward"): "reduce_scatter",
    ("row", "backward_data"): "all_gather",
}
_SUFFIX = {"forward": "fprop", "backward_data": "dgrad", "backward_weight": "wgrad"}


#: the plan's FP8 recipes as Megatron-LM's --fp8-recipe values
#: (TransformerConfig.fp8_recipe, megatron/core/transformer/
#: transformer_config.py lines 594-600 at d98e8a64: tensorwise is per-tensor
#: current scaling)
_FP8_RECIPE = {
    "delayed": "delayed",
    "current": "tensorwise",
    "mxfp8": "mxfp8",
    "blockwise": "blockwise",
}


def _fp8_args(view: PlanView, notes: Notes) -> list[tuple[str, object]]:
    """The FP8 recipe: `--fp8-format hybrid` (e4m3 activations and weights,
    e5m2 gradients: TransformerConfig.fp8, transformer_config.py lines
    587-592 at d98e8a64), `--fp8-recipe`, and `--fp8-param-gather` for FP8
    weight gathers (it needs the distributed optimizer: arguments.py line
    1097 at d98e8a64). All three flags are in the parser at d98e8a64 and at
    000c4ac2."""
    t = view.training
    args: list[tuple[str, object]] = [
        ("--fp8-format", "hybrid"),
        ("--fp8-recipe", _FP8_RECIPE[t.fp8.value]),
    ]
    if t.fp8_param_gather:
        if view.zero_stage >= 1:
            args.append(("--fp8-param-gather", None))
        else:
            notes.drop(
                "fp8_param_gather without ZeRO: Megatron gathers FP8 weights only with its "
                "distributed optimizer"
            )
    if t.fp8 is Fp8Recipe.MXFP8:
        notes.assume("fp8 mxfp8: Megatron's mxfp8 recipe runs on Blackwell GPUs only")
    return args


def _args(view: PlanView, notes: Notes) -> list[tuple[str, object]]:
    t, m = view.training, view.model
    tp = view.tensor_parallel
    cp = view.context_parallel
    args: list[tuple[str, object]] = [
        ("--tensor-model-parallel-size", tp),
        ("--pipeline-model-parallel-size", t.pipeline_parallel),
    ]
    if cp > 1:
        # Both flags at d98e8a64 and at 000c4ac2 (module docstring); Megatron's
        # defaults (1, p2p) are left implicit for a plan without context parallelism.
        args += [("--context-parallel-size", cp), ("--cp-comm-type", view.context_comm)]
        notes.assume(
            "context parallelism runs in Transformer Engine's attention (Megatron's default "
            "--transformer-impl transformer_engine); TE before 1.10 ignores --cp-comm-type "
            "and runs p2p (megatron/core/extensions/transformer_engine.py line 2139)"
        )
    args += [
        ("--micro-batch-size", t.micro_batch_sequences),
        ("--global-batch-size", t.global_batch_sequences),
        ("--seq-length", t.sequence_length),
        ("--max-position-embeddings", t.sequence_length),
        ("--num-layers", m.num_layers),
        ("--hidden-size", m.hidden_size),
        ("--ffn-hidden-size", m.ffn_size),
        ("--num-attention-heads", m.num_heads),
    ]
    if m.attention_width != m.hidden_size and m.mla is None:
        args.append(("--kv-channels", m.head_dim))
    if m.kv_heads != m.num_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.kv_heads)]
    if m.ffn_kind is FfnKind.SWIGLU:
        args.append(("--swiglu", None))
    if m.sliding_window is not None:
        # TE's window (left, right) counts the keys before the query, so a
        # window of w tokens is (w - 1, 0) (Megatron-Bridge v0.4.2
        # models/gemma/gemma2_bridge.py line 54); the full blocks every n-th
        # (megatron/core/transformer/utils.py lines 532-540 at d98e8a64)
        args.append(("--window-size", f"{m.sliding_window - 1},0"))
        if m.full_attention_every is not None:
            args.append(("--window-attn-skip-freq", m.full_attention_every))
    if m.position_encoding is PositionEncoding.ROTARY:
        # Megatron's default is learned_absolute: a rotary model needs the flag
        args.append(("--position-embedding-type", "rope"))
    if m.tied_embeddings is False:
        args.append(("--untie-embeddings-and-output-weights", None))
    elif m.tied_embeddings is None:
        notes.assume("embeddings tied (Megatron's default): the plan's model does not say")
    if t.dtype.value in ("bf16", "fp16"):
        args.append((f"--{t.dtype.value}", None))
    args += _gradient_dtype_args(view)
    if t.fp8 is not Fp8Recipe.NONE:
        args += _fp8_args(view, notes)
    args += _moe_args(view, notes)
    sliced = t.fc_algorithm.value == "meshslice"
    if tp > 1 and not sliced:
        # megatron-1d: the plan prices Megatron's own blocking collectives
        if view.sequence_parallel:
            args.append(("--sequence-parallel", None))
        notes.assume(
            "fc_algorithm megatron-1d: Megatron's blocking tensor-parallel collectives, no "
            "userbuffers overlap (plan with fc_algorithm meshslice for sliced overlap)"
        )
    elif tp > 1 and not view.sequence_parallel:
        notes.drop(
            "--tp-comm-overlap: Transformer Engine's userbuffers overlap needs sequence "
            "parallelism, which the plan turns off; no overlap configuration written"
        )
    elif tp > 1:
        args += [
            ("--sequence-parallel", None),
            ("--tp-comm-overlap", None),
            ("--tp-comm-overlap-cfg", UB_FILE),
        ]
        notes.assume(
            "sequence parallelism on: the plan shards every activation over the "
            "tensor-parallel chips, and userbuffers overlap requires it"
        )
    if (
        tp > 1
        and t.pipeline_parallel > 1
        and not view.sequence_parallel
        and not t.pipeline_scatter_gather
    ):
        notes.drop(
            "pipeline_scatter_gather false (whole activations between stages): this "
            "Megatron-LM always splits them over the tensor-parallel ranks (its "
            "--no-scatter-gather-tensors-in-pipeline is gone); the plan priced larger sends"
        )
    args += _split_args(view)
    chosen = view.heaviest_recompute
    if len(view.recompute_modes) > 1:
        notes.drop(
            f"recompute per stage {view.stage_recompute()}: Megatron-LM recomputes every "
            f"stage alike; the arguments use {chosen}"
        )
    args += _recompute_args(chosen, view)
    flash = view.training.attention is AttentionKernel.FLASH
    if chosen == "selective" and flash and view.model.mla is None:
        notes.drop(
            "recompute selective with a fused attention kernel: Megatron-LM's core_attn "
            "recomputation re-runs the attention's forward kernel, which the plan did not "
            "price (it frees only the kernel's log-sum-exp); without the flag the run is as "
            "fast as planned and holds that much more"
        )
    if view.zero_stage >= 1:
        args.append(("--use-distributed-optimizer", None))
    if view.zero_stage >= 2:
        args += _fsdp_args(view, notes)
    args += _overlap_data_parallel_args(view)
    model_group = "TP x CP x PP" if cp > 1 else "TP x PP"
    notes.assume(
        f"data parallel {t.data_parallel} = world size / ({model_group}): launch "
        f"{view.total_chips} GPUs"
    )
    notes.assume("max position embeddings = sequence length")
    return args


def _layer_pattern(flags: tuple[bool, ...]) -> str:
    """`--moe-layer-freq` as Megatron's Python list pattern, run by run:
    `([0]*3+[1]*58)` for three dense blocks then 58 MoE blocks."""
    runs: list[tuple[int, int]] = []
    for flag in flags:
        bit = int(flag)
        if runs and runs[-1][0] == bit:
            runs[-1] = (bit, runs[-1][1] + 1)
        else:
            runs.append((bit, 1))
    return "(" + "+".join(f"[{bit}]*{n}" for bit, n in runs) + ")"


def _moe_args(view: PlanView, notes: Notes) -> list[tuple[str, object]]:
    """A mixture of experts, multi-head latent attention and multi-token
    prediction as Megatron-LM's flags (module docstring)."""
    m = view.model
    args: list[tuple[str, object]] = []
    if m.mla is not None:
        mla = m.mla
        args.append(("--multi-latent-attention", None))
        if mla.q_lora_rank is not None:
            args.append(("--q-lora-rank", mla.q_lora_rank))
        args += [
            ("--kv-lora-rank", mla.kv_lora_rank),
            ("--qk-head-dim", mla.qk_nope_head_dim),
            ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim),
            ("--v-head-dim", mla.v_head_dim),
        ]
    if m.mtp_layers:
        args.append(("--mtp-num-layers", m.mtp_layers))
    moe = m.moe
    if moe is None:
        return args
    args += [
        ("--num-experts", moe.num_experts),
        ("--moe-ffn-hidden-size", moe.expert_ffn_size),
        ("--moe-router-topk", moe.experts_per_token),
        ("--expert-model-parallel-size", view.expert_parallel),
        ("--expert-tensor-parallel-size", view.expert_tensor_parallel),
        ("--moe-grouped-gemm", None),
    ]
    if not all(m.moe_layer_flags):
        args.append(("--moe-layer-freq", _layer_pattern(m.moe_layer_flags)))
    if moe.shared_expert_ffn_size:
        args.append(("--moe-shared-expert-intermediate-size", moe.shared_expert_ffn_size))
    if moe.router.value == "sigmoid":
        args.append(("--moe-router-score-function", "sigmoid"))
    if moe.node_limit is not None:
        groups = moe.expert_groups or moe.num_experts
        args += [
            ("--moe-router-num-groups", groups),
            ("--moe-router-group-topk", moe.node_limit),
        ]
        notes.assume(
            f"node-limited routing: the experts in {groups} groups, each token's in at most "
            f"{moe.node_limit}"
        )
    dispatcher = view.training.expert_dispatcher
    if dispatcher.deduplicates:
        # the plan priced a token crossing to another node once per node
        args += [
            ("--moe-token-dispatcher-type", "flex"),
            ("--moe-flex-dispatcher-backend", dispatcher.value),
        ]
        notes.assume(f"the flex dispatcher needs {dispatcher.value} (DeepEP) installed")
    else:
        args.append(("--moe-token-dispatcher-type", dispatcher.value))
    if moe.capacity_factor is not None:
        args += [
            ("--moe-expert-capacity-factor", moe.capacity_factor),
            ("--moe-pad-expert-input-to-capacity", None),
        ]
    if view.training.overlap_expert_comm:
        args.append(("--overlap-moe-expert-parallel-comm", None))
        notes.assume(
            "expert all-to-alls overlapped with another micro-batch's computation, as priced; "
            "Megatron-LM also suggests --delay-wgrad-compute (not priced)"
        )
    else:
        notes.assume("the expert all-to-alls are not overlapped with compute, as priced")
    return args


def _gradient_dtype_args(view: PlanView) -> list[tuple[str, object]]:
    """The gradients in the precision the plan priced (`fp32_gradients`).
    Megatron-LM accumulates and reduces bf16 models' gradients in fp32
    unless `--grad-reduce-in-bf16` (megatron/training/arguments.py lines
    1204-1217 at d98e8a64: "bfloat16 requires gradient accumulation and
    all-reduce to be done in fp32", the main grads' default dtype fp32), an
    fp16 model's in fp16 unless `--accumulate-allreduce-grads-in-fp32`; its
    DDP buffers hold them in that dtype (training.py line 2635:
    `grad_reduce_in_fp32`). Megatron-FSDP keeps the gradients' own dtype
    unless `--megatron-fsdp-main-grads-dtype` says otherwise (arguments.py
    line 3691)."""
    t = view.training
    fp32 = t.fp32_gradients
    if uses_megatron_fsdp(view):
        return [("--megatron-fsdp-main-grads-dtype", "fp32")] if fp32 else []
    if t.dtype.value == "bf16" and not fp32:
        return [("--grad-reduce-in-bf16", None)]
    if t.dtype.value == "fp16" and fp32:
        return [("--accumulate-allreduce-grads-in-fp32", None)]
    return []


#: the plan's ZeRO stage -> Megatron-FSDP's --data-parallel-sharding-strategy
_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}


def uses_megatron_fsdp(view: PlanView) -> bool:
    """Whether the export runs the plan's ZeRO-2 or ZeRO-3 as Megatron-FSDP:
    without pipeline stages only (the same rule as job/trainers.py
    megatron_fsdp_runs, which the search follows under
    `constraints.trainer: megatron`; formats may not import job, tests/
    test_layering.py)."""
    return view.zero_stage >= 2 and view.training.pipeline_parallel == 1


def _fsdp_args(view: PlanView, notes: Notes) -> list[tuple[str, object]]:
    """ZeRO-2 and ZeRO-3 as Megatron-FSDP: `--use-megatron-fsdp` with
    `--data-parallel-sharding-strategy optim_grads` (optimizer state and
    gradients sharded) or `optim_grads_params` (weights too), and the
    `--ckpt-format fsdp_dtensor` validate_args requires beside it
    (megatron/training/arguments.py lines 1118-1181 and 3190-3192 at
    d98e8a64; docs/user-guide/features/megatron_fsdp.md "Megatron-LM"). Its
    version 1, the default, keeps --use-distributed-optimizer. Megatron-FSDP
    runs without pipeline stages (uses_megatron_fsdp), so a pipelined plan
    keeps the distributed optimizer's ZeRO-1 and says so."""
    if not uses_megatron_fsdp(view):
        notes.drop(
            f"ZeRO stage {view.zero_stage} with pipeline parallelism: Megatron-FSDP, which "
            "shards gradients and weights, runs without pipeline stages; "
            "--use-distributed-optimizer shards the optimizer state only (ZeRO-1)"
        )
        return []
    notes.assume(
        "Megatron-FSDP saves fsdp_dtensor checkpoints (torch_dist ones convert with "
        "examples/megatron_fsdp/sbatch_checkpoint_convert.sh)"
    )
    return [
        ("--use-megatron-fsdp", None),
        ("--data-parallel-sharding-strategy", _SHARDING[view.zero_stage]),
        ("--ckpt-format", "fsdp_dtensor"),
    ]


def _overlap_data_parallel_args(view: PlanView) -> list[tuple[str, object]]:
    """The plan's `overlap_data_parallel` (gradient reductions during the
    backward, weight gathers during the forward), which Megatron-LM runs only
    when asked: `--overlap-grad-reduce`, and `--overlap-param-gather` with the
    distributed optimizer or Megatron-FSDP (validate_args asserts both
    conditions: megatron/training/arguments.py lines 1024-1029 at d98e8a64;
    parser lines 3121 and 3148). Without them Megatron reduces after the
    backward, which the plan prices with `overlap_data_parallel: false`.
    Nothing to overlap on one data x context replica."""
    replicas = view.training.data_parallel * view.context_parallel
    if not view.training.overlap_data_parallel or replicas == 1:
        return []
    args: list[tuple[str, object]] = [("--overlap-grad-reduce", None)]
    if view.zero_stage >= 1:
        args.append(("--overlap-param-gather", None))
    return args


def _split_args(view: PlanView) -> list[tuple[str, object]]:
    """The plan's layers per virtual pipeline stage as Megatron-LM takes them.

    Megatron splits the layers evenly over pp x v virtual stages by itself
    (with `--num-virtual-stages-per-pipeline-rank v`). Any other split is
    written as `--pipeline-model-parallel-layout`: one `|`-separated entry per
    virtual stage in model order (chunk j of rank s is entry j * pp + s), a
    `t` per transformer layer (`t*n` for n), `E` (the embedding) opening the
    first entry and `L` (the loss) closing the last, after an `m` per
    multi-token-prediction layer, which the plan prices on the last virtual
    stage with the output layer (validate_layer_layout asserts the `m`
    count equals --mtp-num-layers, all in the last virtual stage of one
    rank, after every `t`); Megatron derives v from it and refuses the
    virtual-stage flag beside it
    (megatron/core/transformer/pipeline_parallel_layer_layout.py lines
    91-136 and validate_args at the cited commit)."""
    pp, vp = view.training.pipeline_parallel, view.interleave
    counts = view.virtual_stage_layers
    if pp <= 1 or len(set(counts)) == 1:
        return [("--num-virtual-stages-per-pipeline-rank", vp)] if vp > 1 else []
    stages = [f"t*{n}" if n > 1 else "t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] += "m" * view.model.mtp_layers + "L"
    return [("--pipeline-model-parallel-layout", "|".join(stages))]


def _recompute_args(recompute: str, view: PlanView) -> list[tuple[str, object]]:
    """Megatron's recomputation flags: selective recomputes the attention core
    (Megatron-Core's default `recompute_modules`, `core_attn`) and, under
    multi-head latent attention, its up-projections (`mla_up_proj`:
    transformer_config.py lines 1969-1973, multi_latent_attention.py lines
    171-174 and 983-988); with a fused attention kernel the plan priced the
    up-projections alone, so `core_attn` is left out. Full recomputes every
    block (uniform method, one block per checkpoint)."""
    if recompute == "selective":
        args: list[tuple[str, object]] = [("--recompute-granularity", "selective")]
        if view.model.mla is not None:
            fused = view.training.attention is AttentionKernel.FLASH
            modules = ["mla_up_proj"] if fused else ["core_attn", "mla_up_proj"]
            args.append(("--recompute-modules", modules))
        return args
    if recompute == "full":
        return [
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        ]
    return []


def _overlap(view: PlanView, notes: Notes) -> dict[str, dict[str, object]]:
    tp = view.tensor_parallel
    cfg: dict[str, dict[str, object]] = {}
    gate, up = view.layer("ffn_gate"), view.layer("ffn_up")
    if gate is not None and up is not None:
        for g_gate, g_up in zip(gate.gemms, up.gemms, strict=True):
            if (g_gate.dataflow, g_gate.num_slices) != (g_up.dataflow, g_up.num_slices):
                notes.drop(
                    f"ffn_gate {g_gate.gemm_pass}: {g_gate.dataflow} with S = "
                    f"{g_gate.num_slices}; Megatron fuses gate and up into fc1, written with "
                    f"ffn_up's {g_up.dataflow}, S = {g_up.num_slices}"
                )
    for name, te, kind, g in _planned_gemms(view):
        key = f"{te}_{_SUFFIX[g.gemm_pass]}"
        if g.gemm_pass == "backward_weight":
            why = (
                "Transformer Engine overlaps its input all-gather in bulk, without splits"
                if kind == "column"
                else "Megatron reuses the data-gradient GEMM's gathered gradient, so it "
                "has no collective to split"
            )
            notes.drop(f"{name} backward_weight S = {g.num_slices} ({key}): {why}")
            continue
        mismatch = layout_mismatch(name, kind, g)
        if mismatch:
            notes.drop(f"{mismatch} ({key}); left at Transformer Engine's default")
            continue
        if _EXPECTED[(kind, g.gemm_pass)] == "all_gather":
            cfg[key] = {"method": "ring_exchange"}
            if g.num_slices != tp:
                notes.drop(
                    f"{name} {g.gemm_pass} S = {g.num_slices} ({key}): ring_exchange "
                    f"all-gather overlap always runs tp_size = {tp} steps"
                )
        else:
            cfg[key] = {"method": "pipeline", "num_splits": g.num_slices}
    return cfg


def _dgrad_reduce_scatter(cfg: dict[str, dict[str, object]]) -> bool:
    """Whether a data-gradient GEMM's reduce-scatter is planned as split
    (`pipeline`): Megatron passes it to Transformer Engine only with
    --tp-comm-overlap-rs-dgrad (without it the dgrad GEMMs use bulk overlap
    and the planned splits are not used)."""
    return any(k.endswith("_dgrad") and v.get("method") == "pipeline" for k, v in cfg.items())


def _planned_gemms(view: PlanView) -> Iterator[tuple[str, str, str, GemmDoc]]:
    """(layer name, TE prefix, column/row, GEMM) in model order."""
    for name, te in TE_NAMES.items():
        layer = view.layer(name)
        if layer is None:
            continue
        kind = "column" if te in COLUMN_PARALLEL else "row"
        for gemm_pass in ("forward", "backward_data", "backward_weight"):
            g = gemm(layer, gemm_pass)
            if g is not None:
                yield name, te, kind, g


def layout_mismatch(name: str, kind: str, g: GemmDoc) -> str | None:
    """Why a forward or data-gradient GEMM's planned collective is not the
    one Megatron-style tensor parallelism runs for it (None if it is)."""
    ops = tp_collectives(g)
    expected = _EXPECTED[(kind, g.gemm_pass)]
    if ops == {expected}:
        return None
    shown = ", ".join(sorted(ops)) or "no collective"
    return (
        f"{name} {g.gemm_pass}: the plan's {g.dataflow} runs {shown}, a {kind}-parallel "
        f"layer runs {expected}"
    )


def mismatches(view: PlanView) -> list[str]:
    """Every forward and data-gradient GEMM whose collective differs from
    Megatron-style (column/row-parallel) tensor parallelism."""
    out = []
    for name, _, kind, g in _planned_gemms(view):
        if g.gemm_pass != "backward_weight":
            why = layout_mismatch(name, kind, g)
            if why:
                out.append(why)
    return out


def _ub_yaml(cfg: dict[str, dict[str, object]]) -> str:
    lines = []
    for key, settings in cfg.items():
        lines.append(f"{key}:\n")
        lines += [f"  {k}: {v}\n" for k, v in settings.items()]
    return "".join(lines)


def export_megatron(view: PlanView) -> Export:
    """megatron_args.sh and, with tensor parallelism, tp_comm_overlap_cfg.yaml."""
    needs_1d(view, "megatron", "Megatron-LM")
    notes = Notes()
    args = _args(view, notes)
    sliced = view.training.fc_algorithm.value == "meshslice"
    overlap = view.tensor_parallel > 1 and view.sequence_parallel and sliced
    cfg = _overlap(view, notes) if overlap else {}
    if _dgrad_reduce_scatter(cfg):
        args.append(("--tp-comm-overlap-rs-dgrad", None))
    head = commented(header_lines(view, "megatron", KEYS_FROM, notes))
    env = ""
    if view.training.overlap_expert_comm and view.expert_parallel > 1:
        # validate_args only warns then: the overlap wants more connections
        # (megatron/training/arguments.py lines 1466-1474 at d98e8a64; the
        # Megatron-Bridge H100 MoE recipes set 32)
        env = (
            "# Megatron-LM's expert all-to-all overlap runs on several CUDA connections\n"
            "export CUDA_DEVICE_MAX_CONNECTIONS=32\n"
        )
    elif uses_megatron_fsdp(view):
        # validate_args asserts it is not 1 with Megatron-FSDP and only warns
        # beside tensor or context parallelism then (arguments.py lines
        # 1163-1164 and 1453-1466 at d98e8a64); the FSDP guide unsets it
        env = (
            "# Megatron-FSDP overlaps its gathers on several CUDA connections (not 1)\n"
            "unset CUDA_DEVICE_MAX_CONNECTIONS\n"
        )
    elif view.tensor_parallel > 1 or view.context_parallel > 1:
        # validate_args asserts it with tensor or context parallelism before
        # Blackwell (megatron/training/arguments.py lines 1453-1479 at d98e8a64)
        which = "tensor" if view.context_parallel == 1 else "tensor or context"
        if view.tensor_parallel == 1:
            which = "context"
        env = (
            f"# Megatron-LM requires this with {which} parallelism on GPUs before Blackwell\n"
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        )
    body = "MEGATRON_ARGS=(\n"
    for flag, value in args:
        if value is None:
            body += f"  {flag}\n"
        else:
            words = value if isinstance(value, list) else [value]
            body += f"  {flag} {' '.join(shlex.quote(str(w)) for w in words)}\n"
    body += ")\n"
    usage = (
        '# use: torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" <data, tokenizer and '
        "optimizer arguments>\n"
    )
    files = [ExportFile(ARGS_FILE, "#!/usr/bin/env bash\n" + head + env + usage + body)]
    if cfg:
        files.append(ExportFile(UB_FILE, head + _ub_yaml(cfg)))
    return finish("megatron", files, notes)
