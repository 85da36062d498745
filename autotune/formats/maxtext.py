"""The MaxText export: a config that inherits `base.yml` and sets the
parallelism, model shape and rematerialisation policy, plus the XLA flags
that switch on collective matmul (windowed einsum).

Key names and value sets: AI-Hypercomputer/maxtext
`src/MaxText/configs/base.yml` at commit 09d2025b (`ici_*` / `dcn_*`
parallelism, `remat_policy` and its value list, `base_*` model dims,
`mlp_activations`, `logits_via_embedding`, `per_device_batch_size`,
`num_pipeline_microbatches`); `base_config: "base.yml"` is how MaxText's own
configs inherit it. Collective-matmul flags: TPU (libtpu,
`LIBTPU_INIT_ARGS`) `xla_tpu_enable_windowed_einsum_for_all_gather` and
`..._for_reduce_scatter` as in maxtext
`src/MaxText/inference_mlperf/trillium/select_xla_flags.py`; GPU
(`XLA_FLAGS`) `xla_gpu_multi_streamed_windowed_einsum` and
`xla_gpu_threshold_for_windowed_einsum_mib=0` as in NVIDIA/JAX-Toolbox
`rosetta/docs/GPU_performance.md` (defined in openxla
`xla/debug_options_flags.cc`).

Mapping of the 2D mesh: MaxText shards a weight's `embed` dimension over
`tensor_transpose` and its `mlp` dimension over `tensor` (base.yml's
`logical_axis_rules`), so the mesh axis holding the FFN up-projection's
input dimension becomes `ici_tensor_transpose_parallelism` and the other
`ici_tensor_parallelism`.
"""

from __future__ import annotations

import json

from autotune.formats.export import (
    Export,
    ExportFile,
    Notes,
    commented,
    finish,
    header_lines,
)
from autotune.formats.plan_view import PlanView
from autotune.specs.model import FfnKind

KEYS_FROM = "AI-Hypercomputer/maxtext src/MaxText/configs/base.yml @ 09d2025b"
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
        "ici_tensor_transpose_parallelism": size[embed],
        "ici_pipeline_parallelism": ici_pp,
        "dcn_data_parallelism": 1 if zero3 else dcn_dp,
        "dcn_fsdp_parallelism": dcn_dp if zero3 else 1,
        "dcn_pipeline_parallelism": dcn_pp,
    }
    slices = dcn_dp * dcn_pp
    if slices > 1:
        notes.assume(
            f"{slices} slices: launch with num_slices={slices} (the ici_* products are one "
            "slice's chips, the dcn_* products the slices)"
        )
    if view.zero_stage in (1, 2) and t.data_parallel > 1:
        notes.drop(
            f"ZeRO stage {view.zero_stage}: MaxText shards optimizer state only together with "
            "the weights (ici_fsdp_parallelism, ZeRO-3); kept as plain data parallelism"
        )
    accumulation = 1
    if t.pipeline_parallel > 1:
        out["num_pipeline_microbatches"] = view.micro_batches
        if view.interleave > 1:
            per_chunk = view.layers_per_chunk()
            if per_chunk is None:
                notes.drop(
                    f"interleave {view.interleave}: {view.model.num_layers} layers do not split "
                    "into equal chunks; set num_layers_per_pipeline_stage yourself"
                )
            else:
                out["num_layers_per_pipeline_stage"] = per_chunk
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
    out["remat_policy"] = _REMAT[view.recompute]
    if view.recompute == "none":
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
        out["vocab_size"] = m.vocab_size
    if m.tied_embeddings is not None:
        out["logits_via_embedding"] = m.tied_embeddings
    return out


def _per_layer_drops(view: PlanView, notes: Notes) -> None:
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
    settings = _settings(view, notes)
    _per_layer_drops(view, notes)
    flags = _flags(view)
    head = commented(header_lines(view, "maxtext", KEYS_FROM, notes))
    usage = (
        "# use: copy next to MaxText's configs/base.yml, `source maxtext_xla_flags.sh`, then\n"
        "#   python3 -m MaxText.train <configs>/maxtext.yml run_name=...\n"
    )
    files = [
        ExportFile(CONFIG_FILE, head + usage + _yaml(settings)),
        ExportFile(FLAGS_FILE, "#!/usr/bin/env bash\n" + head + flags),
    ]
    return finish("maxtext", files, notes)
