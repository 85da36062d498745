"""The MaxText export: a config that inherits `base.yml` and sets the
parallelism, model shape and rematerialisation policy, plus the XLA flags
that switch on collective matmul (windowed einsum).

Target: MaxText 0.2.5 (PyPI `maxtext`, 2026-10-02, Python 3.12 or newer),
`maxtext/configs/base.yml` and `maxtext/configs/types.py`: `ici_*` / `dcn_*`
parallelism, `num_slices`, `remat_policy` and its value list, `base_*`
model dims, `mlp_activations`, `logits_via_embedding`,
`per_device_batch_size`, `num_pipeline_microbatches`,
`num_layers_per_pipeline_stage`, `pipeline_parallel_layers`,
`logical_axis_rules`; entry point `maxtext.trainers.pre_train.train`.
`ici_tensor_transpose_parallelism` was removed in AI-Hypercomputer/maxtext
faaa424d (2026-07-06; releases from 0.2.4 refuse it), and `MaxText.train`
in 868098b8 (2026-04-08). Collective-matmul flags: TPU (libtpu,
`LIBTPU_INIT_ARGS`) `xla_tpu_enable_windowed_einsum_for_all_gather` and
`..._for_reduce_scatter` as in maxtext
`src/MaxText/inference_mlperf/trillium/select_xla_flags.py`; GPU
(`XLA_FLAGS`) `xla_gpu_multi_streamed_windowed_einsum` and
`xla_gpu_threshold_for_windowed_einsum_mib=0` as in NVIDIA/JAX-Toolbox
`rosetta/docs/GPU_performance.md` (defined in openxla
`xla/debug_options_flags.cc`).

Mapping of the 2D mesh: the mesh axis holding the FFN up-projection's
input (embed) dimension becomes `tensor_sequence`, the other `tensor`, and
`logical_axis_rules` (rules named in the file replace base.yml's of the same
name) put the weights' embed dimension on `tensor_sequence` and heads, MLP
and vocabulary on `tensor` only; base.yml alone would shard all of those
over both axes at once (1D over their product) and leave embed whole.

Context parallelism (the plan's `context_parallel` > 1):
`ici_context_parallelism` / `dcn_context_parallelism` (base.yml lines 786
and 773 of the 0.2.5 wheel; the DCN part is the context group's chips in
other slices or, on GPUs, other nodes, as for data and pipeline),
`context_parallel_strategy` (base.yml line 1349: "all_gather", "ring",
"ulysses" or "usp"; the plan's p2p is ring, a2a is ulysses) and
`context_parallel_load_balance` (line 1348, true: the 2 x cp causal chunks
the plan prices). configs/types.py validates them (lines 5169-5316):
ring on TPU needs `attention: flash` and `use_tokamax_splash: true`, an
even degree and max_target_length divisible by its square; Ulysses runs on
TPU only, with the same kernel, load balancing off, no DCN part and query
and key/value heads divisible by the degree; ring on GPUs needs `hardware:
gpu`. On GPUs MaxText's context-parallel attention is Transformer Engine's
(`attention: cudnn_flash_te`, layers/attention_op.py
`cudnn_flash_attention`), a choice of the user's build, noted rather than
written. A strategy MaxText refuses for the plan falls back to all_gather,
noted.

Pipeline: MaxText gives every stage the same number of layers per chunk
(`num_layers_per_pipeline_stage`; `num_layers / (stages x that)` chunks,
the repeats); a layer count that does not divide pipelines
`pipeline_parallel_layers` of them and runs the rest after the pipeline
(types.py's pipeline checks).
"""

from __future__ import annotations

import json
import math

from autotune.errors import InputError
from autotune.formats.export import (
    Export,
    ExportFile,
    Notes,
    commented,
    expert_comm_notes,
    finish,
    header_lines,
    note_sliding_window,
    shared_expert_count,
)
from autotune.formats.plan_view import PlanView
from autotune.specs.model import FfnKind
from autotune.specs.training import Fp8Recipe

KEYS_FROM = "MaxText 0.2.5 (PyPI) maxtext/configs/base.yml and configs/types.py"
CONFIG_FILE = "maxtext.yml"
FLAGS_FILE = "maxtext_xla_flags.sh"

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# The plan's recomputation -> MaxText's remat_policy: 'minimal' saves the
# weight matmuls' outputs and recomputes the batched attention core (selective).
_REMAT = {"none": "minimal_with_context", "selective": "minimal", "full": "full"}
TPU_FLAGS = (
    "--xla_tpu_enable_windowed_einsum_for_all_gather=true",
    "--xla_tpu_enable_windowed_einsum_for_reduce_scatter=true",
)
GPU_FLAGS = (
    "--xla_gpu_multi_streamed_windowed_einsum=true",
    "--xla_gpu_threshold_for_windowed_einsum_mib=0",
)


# The plan's key/value exchange -> MaxText's context_parallel_strategy.
_CP_STRATEGY = {"p2p": "ring", "all_gather": "all_gather", "a2a": "ulysses"}


def _on_tpu(view: PlanView) -> bool:
    """Whether the plan's cluster is TPU slices (a torus), not GPU nodes."""
    return view.doc.provenance.cluster.get("topology") == "torus"


def _strategy_refusal(view: PlanView, strategy: str, dcn: int) -> str | None:
    """Why MaxText 0.2.5 refuses `strategy` for the plan (configs/types.py
    lines 5193-5316), or None."""
    cp, m, tpu = view.context_parallel, view.model, _on_tpu(view)
    seq = view.training.sequence_length
    if strategy == "ring" and tpu:
        if cp % 2 or seq % (cp * cp):
            return (
                f"TPU ring attention needs an even degree and max_target_length divisible by "
                f"{cp} x {cp}"
            )
    if strategy == "ulysses":
        if not tpu:
            return "MaxText runs Ulysses on TPUs only"
        if dcn > 1:
            return f"MaxText's Ulysses takes no DCN part (the group spans {dcn} slices)"
        if m.num_heads % cp or m.kv_heads % cp or m.kv_heads == 1:
            return (
                f"MaxText's Ulysses needs query and key/value heads ({m.num_heads}, "
                f"{m.kv_heads}) divisible by {cp}"
            )
    return None


def _context(view: PlanView, notes: Notes) -> dict[str, object]:
    """MaxText's context-parallel keys for the plan (none without context
    parallelism: base.yml's defaults are the plan's)."""
    cp = view.context_parallel
    if cp == 1:
        return {}
    dcn = view.dcn_size("context")
    out: dict[str, object] = {"ici_context_parallelism": cp // dcn, "dcn_context_parallelism": dcn}
    strategy = _CP_STRATEGY[view.context_comm]
    refusal = _strategy_refusal(view, strategy, dcn)
    if refusal:
        notes.drop(
            f"context_parallel_comm {view.context_comm} ({strategy}): {refusal}; written as "
            "all_gather"
        )
        strategy = "all_gather"
    out["context_parallel_strategy"] = strategy
    # Ulysses attends over whole sequences after its all-to-all: MaxText refuses the reorder
    out["context_parallel_load_balance"] = strategy != "ulysses"
    if _on_tpu(view):
        if strategy in ("ring", "ulysses"):
            out.update({"attention": "flash", "use_tokamax_splash": True})
    else:
        out["hardware"] = "gpu"
        notes.assume(
            "on GPUs MaxText's context-parallel attention is Transformer Engine's: run with "
            "attention=cudnn_flash_te (and max_segments_per_seq for packed data) where it is "
            "installed"
        )
    if view.zero_stage < 3:
        notes.drop(
            f"context parallel {cp} with ZeRO stage {view.zero_stage}: MaxText's logical axis "
            "rules shard the weights' embed dimension over the context axis too, so weights "
            f"and optimizer state are sharded over the {cp} context-parallel chips"
        )
    return out


def _embed_axis(view: PlanView) -> str:
    """The mesh axis of the FFN up-projection weight's input (embed) dimension."""
    for name in ("ffn_up", "qkv"):
        layer = view.layer(name)
        if layer is not None:
            weight = next(t for t in layer.tensors if t.name == "weight")
            return weight.partition_spec[0]
    return "row"


def _settings(view: PlanView, notes: Notes) -> dict[str, object]:
    t, m = view.training, view.model
    size = {"row": view.num_rows, "col": view.num_cols}
    embed = _embed_axis(view)
    mlp = "col" if embed == "row" else "row"
    # The plan's layout splits the data and pipeline axes into the part
    # inside a slice (ICI) and the part across slices (the data-center network).
    dcn_dp, dcn_pp = view.dcn_size("data"), view.dcn_size("pipeline")
    ici_dp, ici_pp = t.data_parallel // dcn_dp, t.pipeline_parallel // dcn_pp
    # ZeRO-3 (weights, gradients and optimizer state sharded) is MaxText's FSDP axis.
    zero3 = view.zero_stage == 3
    out: dict[str, object] = {
        "base_config": "base.yml",
        "ici_data_parallelism": 1 if zero3 else ici_dp,
        "ici_fsdp_parallelism": ici_dp if zero3 else 1,
        "ici_tensor_parallelism": size[mlp],
        "ici_tensor_sequence_parallelism": size[embed],
        "ici_pipeline_parallelism": ici_pp,
        "dcn_data_parallelism": 1 if zero3 else dcn_dp,
        "dcn_fsdp_parallelism": dcn_dp if zero3 else 1,
        "dcn_pipeline_parallelism": dcn_pp,
    }
    out.update(_context(view, notes))
    slices = dcn_dp * dcn_pp * view.dcn_size("context")
    if slices > 1:
        # GPUs report one slice: MaxText refuses dcn_* degrees without num_slices
        out["num_slices"] = slices
    if view.zero_stage in (1, 2) and t.data_parallel > 1:
        notes.drop(
            f"ZeRO stage {view.zero_stage}: MaxText shards optimizer state only together with "
            "the weights (ici_fsdp_parallelism, ZeRO-3); kept as plain data parallelism"
        )
    accumulation = 1
    if t.pipeline_parallel > 1:
        out["num_pipeline_microbatches"] = view.micro_batches
        out.update(_pipeline_layers(view, notes))
    elif view.micro_batches > 1:
        accumulation = view.micro_batches
        out["gradient_accumulation_steps"] = accumulation
    # MaxText: global batch = per_device_batch_size x devices x gradient_accumulation_steps
    out["per_device_batch_size"] = t.global_batch_sequences / view.total_chips / accumulation
    out["max_target_length"] = t.sequence_length
    if t.dtype.value in _DTYPES:
        out["dtype"] = _DTYPES[t.dtype.value]
    else:
        notes.drop(f"dtype {t.dtype.value}: set MaxText's quantization for it yourself")
    if t.fp8 is Fp8Recipe.DELAYED:
        # configs/base.yml line 133 of the 0.2.5 wheel: 'fp8' runs the dense
        # GEMMs in FP8 with scales from an amax history (Flax's fp8 ops)
        out["quantization"] = "fp8"
    elif t.fp8 is not Fp8Recipe.NONE:
        notes.drop(
            f"fp8 {t.fp8.value}: MaxText's quantization offers fp8 (delayed scaling), nanoo_fp8 "
            "(AMD) and fp8_full (static scaling) for dense GEMMs; the export leaves it in "
            f"{t.dtype.value}"
        )
    chosen = view.heaviest_recompute
    if len(view.recompute_modes) > 1:
        notes.drop(
            f"recompute per stage {view.stage_recompute()}: MaxText's remat_policy holds for "
            f"every layer; the file uses {chosen}'s"
        )
    out["remat_policy"] = _REMAT[chosen]
    if chosen == "selective" and m.mla is not None:
        notes.drop(
            "recompute selective under MLA: the plan recomputes the two up-projections "
            "(freeing Q, K and V); 'minimal' keeps every weight matmul's output"
        )
    if chosen == "none":
        notes.drop(
            "recompute none: MaxText has no remat_policy that keeps every activation; "
            "'minimal_with_context' keeps matmul outputs and recomputes element-wise ops"
        )
    gated = m.ffn_kind is FfnKind.SWIGLU
    out.update(
        {
            "decoder_block": "llama2" if gated else "gpt3",
            "base_num_decoder_layers": m.num_layers,
            "base_emb_dim": m.hidden_size,
            "base_num_query_heads": m.num_heads,
            "base_num_kv_heads": m.kv_heads,
            "head_dim": m.head_dim,
            "base_mlp_dim": m.ffn_size,
            "mlp_activations": ["silu", "linear"] if gated else ["gelu"],
        }
    )
    if gated:
        notes.assume("gated FFN activation silu (the plan records the FFN kind, not the gate's)")
    if m.vocab_size is not None:
        out["vocab_size"] = _padded_vocab(m.vocab_size, size[mlp], notes)
    if m.tied_embeddings is not None:
        out["logits_via_embedding"] = m.tied_embeddings
    out.update(_experts(view, out, notes))
    _embed_divides(view, out)
    return out


def _embed_divides(view: PlanView, out: dict[str, object]) -> None:
    """Refuse a plan whose weights MaxText cannot shard: its logical axis
    rules put the weights' embed dimension, and multi-head latent
    attention's `q_lora` and `kv_lora` ones, over fsdp x context x expert
    (x tensor_sequence for a 2D plan's embed) at once (base.yml
    `logical_axis_rules`, AI-Hypercomputer/maxtext e591f30c lines 568-572
    and 605-606), and a dimension must divide over its axes' chips (JAX
    shards evenly)."""

    def chips(axis: str) -> int:
        return int(out.get(f"ici_{axis}_parallelism", 1)) * int(  # type: ignore[call-overload]
            out.get(f"dcn_{axis}_parallelism", 1)  # type: ignore[call-overload]
        )

    shared = chips("fsdp") * chips("context") * chips("expert")
    m = view.model
    dims = [("hidden_size", m.hidden_size, shared * chips("tensor_sequence"))]
    if m.mla is not None:
        if m.mla.q_lora_rank is not None:
            dims.append(("mla.q_lora_rank", m.mla.q_lora_rank, shared))
        dims.append(("mla.kv_lora_rank", m.mla.kv_lora_rank, shared))
    for name, size, over in dims:
        if size % over:
            raise InputError(
                f"holds weights MaxText cannot shard: its logical axis rules split the "
                f"model's {name} ({size}) over fsdp x context x expert, {over} chips here "
                f"({chips('fsdp')} x {chips('context')} x {chips('expert')}), and it does not "
                "divide",
                file=view.file,
                field="configuration.data_parallel",
                value=view.training.data_parallel,
                fix="plan with fewer ZeRO-3 replicas (zero_stage below 3, or a pinned "
                "data_parallel), or export to megatron or torchtitan",
            )


def _experts(view: PlanView, out: dict[str, object], notes: Notes) -> dict[str, object]:
    """A mixture of experts, multi-head latent attention and multi-token
    prediction as MaxText 0.2.5's keys (configs/base.yml of the wheel:
    `num_experts`, `num_experts_per_tok`, `capacity_factor` (-1 dropless),
    `base_moe_mlp_dim` lines 247-271; `first_num_dense_layers`,
    `shared_experts`, `routed_score_func`, `n_routing_groups`,
    `topk_routing_group` lines 379-389; `attention_type: mla` and its ranks
    lines 487-546; `mtp_num_layers` line 235; `ici_expert_parallelism` /
    `dcn_expert_parallelism` lines 793 / 779; `interleave_moe_layer_step`
    line 1373). MaxText's expert axis is a mesh axis of its own that also
    splits the batch of the dense layers, so the plan's expert parallelism
    is taken out of its data-parallel degree."""
    m = view.model
    res: dict[str, object] = {}
    if m.mla is not None:
        res.update(
            {
                "attention_type": "mla",
                "q_lora_rank": m.mla.q_lora_rank or 0,
                "kv_lora_rank": m.mla.kv_lora_rank,
                "qk_nope_head_dim": m.mla.qk_nope_head_dim,
                "qk_rope_head_dim": m.mla.qk_rope_head_dim,
                "v_head_dim": m.mla.v_head_dim,
            }
        )
    if m.mtp_layers:
        res["mtp_num_layers"] = m.mtp_layers
    moe = m.moe
    if moe is None:
        return res
    res.update(
        {
            "decoder_block": "deepseek" if m.mla is not None else "mixtral",
            "num_experts": moe.num_experts,
            "num_experts_per_tok": moe.experts_per_token,
            "base_moe_mlp_dim": moe.expert_ffn_size,
            "capacity_factor": moe.capacity_factor if moe.capacity_factor is not None else -1.0,
        }
    )
    if all(m.moe_layer_flags):
        res["base_mlp_dim"] = moe.expert_ffn_size  # base.yml line 271: a fully MoE model
    if moe.first_dense_layers:
        res["first_num_dense_layers"] = moe.first_dense_layers
    if moe.layer_frequency > 1:
        res["interleave_moe_layer_step"] = moe.layer_frequency
    if moe.shared_expert_ffn_size:
        res["shared_experts"] = shared_expert_count(view, "MaxText", notes)
    if moe.router.value == "sigmoid":
        res["routed_score_func"] = "sigmoid"
    if moe.node_limit is not None and moe.expert_groups is not None:
        res["n_routing_groups"] = moe.expert_groups
        res["topk_routing_group"] = moe.node_limit
    if m.mla is None:
        notes.assume("decoder_block mixtral: MaxText's GQA decoder with MoE blocks")
    expert_comm_notes(view, "MaxText", notes)
    ep = view.expert_parallel
    etp, tp = view.expert_tensor_parallel, view.tensor_parallel
    if etp != tp:
        # base.yml line 692: the experts' `mlp_moe` dimension shards over the
        # tensor axes, so every expert is split as the dense layers are
        notes.drop(
            f"expert tensor parallel {etp}: MaxText splits each expert over its tensor axis "
            f"(logical rule mlp_moe, base.yml line 692), so it runs {tp}"
        )
    if ep > 1:
        axis = "fsdp" if view.zero_stage == 3 else "data"
        ici, dcn = int(out[f"ici_{axis}_parallelism"]), int(out[f"dcn_{axis}_parallelism"])  # type: ignore[call-overload]
        if ici % ep == 0:
            res[f"ici_{axis}_parallelism"] = ici // ep
            res["ici_expert_parallelism"] = ep
        elif (ici * dcn) % ep == 0 and ep % ici == 0:
            res[f"ici_{axis}_parallelism"] = 1
            res[f"dcn_{axis}_parallelism"] = dcn // (ep // ici)
            res["ici_expert_parallelism"] = ici
            res["dcn_expert_parallelism"] = ep // ici
        else:
            notes.drop(
                f"expert parallel {ep}: MaxText takes its expert axis out of the data-parallel "
                f"chips ({ici} per slice, {dcn} slices), which it does not divide"
            )
    return res


def _pipeline_layers(view: PlanView, notes: Notes) -> dict[str, object]:
    """MaxText's layers per stage and chunk for the plan's pipeline."""
    stages, chunks = view.training.pipeline_parallel, view.interleave
    layers = view.model.num_layers
    per_chunk, rest = divmod(layers, stages * chunks)
    out: dict[str, object] = {"num_layers_per_pipeline_stage": per_chunk}
    if rest:
        out["pipeline_parallel_layers"] = layers - rest
        notes.drop(
            f"layers {layers} over {stages} stages x {chunks} chunk(s): MaxText pipelines "
            f"{layers - rest} ({per_chunk} per chunk) and runs the other {rest} after the "
            "pipeline with the stage axis as data parallelism"
        )
    elif len(set(view.virtual_stage_layers)) > 1:
        notes.drop(
            f"layer split {view.virtual_stage_layers} (per chunk, model order): MaxText gives "
            f"every chunk {per_chunk} layers"
        )
    return out


def _padded_vocab(vocab: int, tensor: int, notes: Notes) -> int:
    """The vocabulary rounded up to a multiple of 128 that the `tensor` axis
    divides (the embedding's vocab dimension is sharded over it; MaxText's
    own gpt3-175b.yml pads GPT-3's 50257 to 50304 the same way)."""
    step = math.lcm(128, tensor)
    padded = -(-vocab // step) * step
    if padded != vocab:
        notes.assume(
            f"vocabulary {vocab} padded to {padded} (a multiple of 128 and of the tensor "
            f"axis, {tensor}): MaxText shards the embedding's vocab dimension"
        )
    return padded


def _axis_rules(view: PlanView) -> str:
    """logical_axis_rules that shard weights over both tensor axes (2D plans)."""
    if view.is_1d:
        return ""
    rules = [
        ("mlp", ["fsdp_transpose", "tensor", "autoregressive"]),
        ("heads", ["tensor", "autoregressive"]),
        ("q_heads", ["tensor", "autoregressive"]),
        ("kv_heads", ["tensor", "autoregressive"]),
        ("vocab", ["tensor", "autoregressive"]),
        ("embed", ["fsdp", "fsdp_transpose", "tensor_sequence", "context", "expert"]),
        # base.yml's second embed rule, without fsdp_transpose (which mlp takes)
        ("embed", ["fsdp", "tensor_sequence", "context", "expert"]),
        ("embed_attn", ["fsdp", "fsdp_transpose", "tensor_sequence", "context", "expert"]),
        ("embed_vocab", ["fsdp", "fsdp_transpose", "tensor_sequence", "context", "expert"]),
        ("activation_embed", ["tensor", "tensor_sequence"]),
        ("activation_norm_length", ["context"]),
    ]
    lines = [f"  [{json.dumps(name)}, {json.dumps(axes)}],\n" for name, axes in rules]
    return (
        "# the 2D mesh: weights' embed dimension on tensor_sequence; heads, MLP and\n"
        "# vocabulary on tensor only (these rules replace base.yml's of the same name)\n"
        "logical_axis_rules: [\n" + "".join(lines) + "]\n"
    )


def _per_layer_drops(view: PlanView, notes: Notes) -> None:
    if view.tensor_parallel == 1:  # one chip per layer has no dataflow to express
        return
    for layer in view.doc.layers:
        slices = "/".join(str(g.num_slices) for g in layer.gemms)
        variant = ", transposed variant" if layer.transposed else ""
        notes.drop(
            f"{layer.name}: {layer.stationary}-stationary dataflow{variant} and slice counts "
            f"S = {slices} (forward/backward-data/backward-weight): MaxText derives shardings "
            "from its logical axis rules; XLA chooses the collectives and windowed-einsum loops"
        )


def _yaml(settings: dict[str, object]) -> str:
    # Plain scalars and flat lists only: JSON's spelling is valid YAML.
    return "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())


def _flags(view: PlanView) -> str:
    sliced = any(g.num_slices > 1 for layer in view.doc.layers for g in layer.gemms)
    lines = [
        "# Collective matmul (XLA's windowed einsum) overlaps each GEMM with its",
        "# all-gather / reduce-scatter, as the plan's slice counts S > 1 do.",
    ]
    if not sliced:
        lines.append("# The plan slices no GEMM (S = 1 everywhere): collective matmul stays off.")
        return "".join(f"{line}\n" for line in lines)
    lines += [
        "# TPU (libtpu):",
        f'export LIBTPU_INIT_ARGS="${{LIBTPU_INIT_ARGS:-}} {" ".join(TPU_FLAGS)}"',
        "# GPU:",
        f'export XLA_FLAGS="${{XLA_FLAGS:-}} {" ".join(GPU_FLAGS)}"',
    ]
    return "".join(f"{line}\n" for line in lines)


def export_maxtext(view: PlanView) -> Export:
    """maxtext.yml (parallelism, model, remat) and the XLA flags script."""
    notes = Notes()
    note_sliding_window(view, notes, "MaxText")
    settings = _settings(view, notes)
    _per_layer_drops(view, notes)
    flags = _flags(view)
    head = commented(header_lines(view, "maxtext", KEYS_FROM, notes))
    usage = (
        "# use: pip install maxtext (Python 3.12+), `source maxtext_xla_flags.sh`, then\n"
        "#   python3 -m maxtext.trainers.pre_train.train maxtext.yml run_name=...\n"
    )
    files = [
        ExportFile(CONFIG_FILE, head + usage + _yaml(settings) + _axis_rules(view)),
        ExportFile(FLAGS_FILE, "#!/usr/bin/env bash\n" + head + flags),
    ]
    return finish("maxtext", files, notes)
