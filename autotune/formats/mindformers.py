"""The MindFormers export: the keys of MindFormers' dense pre-training
template that a plan decides, to merge into it. 1D plans only:
`model_parallel` is one axis (a 2D plan's product of both would be sharded
as one, and MindFormers refuses heads that it does not divide).

Target: MindFormers 2.0.0 (PyPI; mindspore-lab/mindformers r2.0.0, commit
56edae9) on MindSpore 2.10.0, the newest pair that installs together (2.1.0
needs MindSpore 2.11, not on PyPI), with its mcore models (`use_legacy:
False`) and `configs/general/llm_pretrain_dense_template.yaml` as the base.

What the trainer does with the keys (mindformers 2.0.0
`trainer/base_trainer.py` lines 201-318, `parallel_core/training_graph/
transformer/utils.py` LayerSetting, MindSpore
`parallel/_auto_parallel_context.py`):

- Global batch: with pipeline stages, `batch_size x data_parallel x
  micro_batch_num` (and gradient accumulation is forced to 1); without,
  `batch_size x data_parallel x gradient_accumulation_steps` (and
  `micro_batch_num` is reset to 1). `runner_config.batch_size` is the
  micro-batch in sequences per data-parallel rank.
- Interleaving: `model_config.pp_interleave_num` takes effect only with
  `parallel.pipeline_config.pipeline_interleave: true`; then each chunk j of
  stage s holds `num_layers // (pp x v) + offset[j][s]` layers (a 1-D offset
  per stage without interleaving).
- `parallel.dataset_strategy` must start with `data_parallel` on every input
  column (the template's own list is tied to its data_parallel of 2).
- ZeRO is MindSpore's parallel optimizer: `parallel.enable_parallel_optimizer`
  (the template turns it on) and `parallel_optimizer_config.optimizer_level`;
  MindSpore refuses `gradient_accumulation_shard` beside any level but
  level2, so that section replaces the template's whole.
- Context parallelism (the plan's `context_parallel` > 1; line numbers of
  the 2.0.0 wheel): `parallel_config.context_parallel` becomes the mcore
  `context_parallel_size` (parallel_core/transformer_config_utils.py line
  213) and splits the sequence of every activation. The key/value exchange
  is the flash-attention layout (parallel_core/training_graph/transformer/
  flash_attention.py lines 228-245): by default keys and values are left
  whole over the context group, so MindSpore all-gathers them (the plan's
  all_gather; `context_parallel_algo: colossalai_cp`, whose cp_comm_type is
  "all_gather", transformer_config_utils.py lines 66-89);
  `model_config.use_ring_attention: true` shards them too and sets
  FlashAttentionScore's `enable_ring_attention` with send/receive (lines
  155-161; the plan's p2p); `parallel_config.ulysses_degree_in_cp` is the
  mcore `hierarchical_context_parallel_sizes` (transformer_config_utils.py
  line 393), the Ulysses all-to-all degree of the attention (training_graph/
  transformer/attention.py lines 164-180), the whole group for the plan's
  a2a with `context_parallel_algo: hybrid_cp` (the legacy parallel config
  takes a Ulysses degree only with hybrid_cp, modules/transformer/
  transformer.py lines 607-615). Global batch stays batch_size x
  data_parallel x micro-batches.
- Model shape: the mcore names (`num_hidden_layers`, `num_attention_heads`,
  `num_key_value_heads`, `intermediate_size`, `head_dim`); the legacy names
  (`num_layers`, `num_heads`, `n_kv_heads`) are refused or ignored there.
"""

from __future__ import annotations

import json

from autotune.formats.export import (
    Export,
    ExportFile,
    Notes,
    commented,
    expert_comm_notes,
    finish,
    header_lines,
    needs_1d,
    note_sliding_window,
    shared_expert_count,
)
from autotune.formats.plan_view import PlanView
from autotune.specs.model import FfnKind, PositionEncoding
from autotune.specs.training import Fp8Recipe

KEYS_FROM = (
    "MindFormers 2.0.0 (mindspore-lab/mindformers r2.0.0 @ 56edae9) with MindSpore 2.10.0: "
    "configs/general/llm_pretrain_dense_template.yaml, trainer/base_trainer.py"
)
FILE_NAME = "mindformers.yaml"
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# The dense template's train_dataset.input_columns: input_ids, labels,
# loss_mask, position_ids (each [batch, seq]) and attention_mask ([batch, 1, seq, seq]).
_COLUMN_RANKS = (2, 2, 2, 2, 4)
# ZeRO stage -> MindSpore's parallel optimizer level (level1 shards weights and
# optimizer state, level2 also gradients, level3 re-gathers weights for the backward).
_LEVELS = {1: "level1", 2: "level2", 3: "level3"}


def layer_offsets(view: PlanView) -> list[int] | list[list[int]]:
    """MindFormers' `offset` for the plan's split: chunk j of stage s holds
    num_layers // (pp x v) + offset[j][s] layers (one list per stage without
    interleaving)."""
    pp, vp = view.training.pipeline_parallel, view.interleave
    base = view.model.num_layers // (pp * vp)
    counts = view.virtual_stage_layers
    rows = [[counts[j * pp + s] - base for s in range(pp)] for j in range(vp)]
    return rows[0] if vp == 1 else rows


def _yaml(tree: dict[str, object], indent: str = "") -> str:
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:\n{_yaml(value, indent + '  ')}")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}\n")
    return "".join(out)


def _experts(
    view: PlanView, parallel: dict[str, object], model: dict[str, object], notes: Notes
) -> None:
    """A mixture of experts, multi-head latent attention and multi-token
    prediction as MindFormers 2.0.0's keys, in the names its mcore mapping
    takes (parallel_core/transformer_config_utils.py of the 2.0.0 wheel:
    `expert_parallel` line 214, `n_routed_experts` / `num_experts` 247, `moe_intermediate_size`
    348, `num_experts_per_tok` 349, `n_group` / `topk_group` 350-351,
    `scoring_func` 353, `capacity_factor` 361, `n_shared_experts` 365,
    `first_k_dense_replace` 370, `multi_latent_attention` 263, the MLA
    ranks 396-404, `num_nextn_predict_layers` 239)."""
    m = view.model
    if m.mla is not None:
        model.update(
            {
                "multi_latent_attention": True,
                "kv_lora_rank": m.mla.kv_lora_rank,
                "qk_nope_head_dim": m.mla.qk_nope_head_dim,
                "qk_rope_head_dim": m.mla.qk_rope_head_dim,
                "v_head_dim": m.mla.v_head_dim,
            }
        )
        if m.mla.q_lora_rank is not None:
            model["q_lora_rank"] = m.mla.q_lora_rank
    if m.mtp_layers:
        model["num_nextn_predict_layers"] = m.mtp_layers
    moe = m.moe
    if moe is None:
        return
    # MindFormers' mixture-of-experts models (models/qwen3_moe, models/deepseek3)
    mla = m.mla is not None
    model["model_type"] = "deepseek_v3" if mla else "qwen3_moe"
    model["architectures"] = ["DeepseekV3ForCausalLM" if mla else "Qwen3MoeForCausalLM"]
    parallel["expert_parallel"] = view.expert_parallel
    expert_comm_notes(view, "MindFormers 2.0.0", notes)
    if view.expert_tensor_parallel > 1:
        notes.drop(
            f"expert tensor parallel {view.expert_tensor_parallel}: MindFormers 2.0.0's "
            "parallel_config has no expert tensor degree"
        )
    model.update(
        {
            # each model class's own key (Qwen3-MoE's num_experts defaults to 128)
            ("n_routed_experts" if mla else "num_experts"): moe.num_experts,
            "num_experts_per_tok": moe.experts_per_token,
            "moe_intermediate_size": moe.expert_ffn_size,
        }
    )
    if moe.shared_expert_ffn_size:
        model["n_shared_experts"] = shared_expert_count(view, "MindFormers", notes)
    if moe.first_dense_layers:
        model["first_k_dense_replace"] = moe.first_dense_layers
    if moe.layer_frequency > 1:
        notes.drop(f"MoE every {moe.layer_frequency} blocks: set moe_layer_freq yourself")
    if moe.router.value == "sigmoid":
        model["scoring_func"] = "sigmoid"
    if moe.node_limit is not None and moe.expert_groups is not None:
        model["n_group"] = moe.expert_groups
        model["topk_group"] = moe.node_limit
    if moe.capacity_factor is not None:
        model["capacity_factor"] = moe.capacity_factor


def export_mindformers(view: PlanView) -> Export:
    """mindformers.yaml: runner, parallel, context-parallel, recompute and
    model keys of the dense template."""
    needs_1d(view, "mindformers", "MindFormers")
    notes = Notes()
    note_sliding_window(view, notes, "MindFormers")
    t, m = view.training, view.model
    pp, vp, dp = t.pipeline_parallel, view.interleave, t.data_parallel
    parallel_config: dict[str, object] = {
        "data_parallel": dp,
        "model_parallel": view.tensor_parallel,
        "use_seq_parallel": view.tensor_parallel > 1 and view.sequence_parallel,
        "pipeline_stage": pp,
        "micro_batch_num": view.micro_batches if pp > 1 else 1,
    }
    cp = view.context_parallel
    if cp > 1:
        # the template's own context_parallel (1) stays for plans without it
        parallel_config["context_parallel"] = cp
        if view.context_comm == "a2a":
            parallel_config["context_parallel_algo"] = "hybrid_cp"
            parallel_config["ulysses_degree_in_cp"] = cp
    runner = {
        "batch_size": view.micro_batch_sequences,
        "gradient_accumulation_steps": 1 if pp > 1 else view.micro_batches,
    }
    context: dict[str, object] = {
        "dataset_strategy": [[dp] + [1] * (rank - 1) for rank in _COLUMN_RANKS],
        "enable_parallel_optimizer": view.zero_stage > 0 and dp > 1,
    }
    notes.assume(
        "dataset_strategy for the dense template's five input columns (input_ids, labels, "
        "loss_mask, position_ids, attention_mask); one entry per column of yours"
    )
    if view.zero_stage > 0 and dp > 1:
        level = _LEVELS[view.zero_stage]
        optimizer: dict[str, object] = {"optimizer_level": level}
        if level == "level2":
            optimizer["gradient_accumulation_shard"] = True
        optimizer["parallel_optimizer_threshold"] = 64
        context["parallel_optimizer_config"] = optimizer
        if view.zero_stage == 1:
            notes.drop(
                "ZeRO stage 1: MindSpore's level1 also shards the weights (gathered before "
                "the forward), more than the plan's optimizer-state-only sharding"
            )
    if vp > 1:
        context["pipeline_config"] = {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}
    recompute = {
        "recompute": view.recompute == "full",
        "select_recompute": view.recompute == "selective",
        "select_comm_recompute": False,
    }
    if view.recompute not in ("none", "selective", "full"):
        notes.drop(
            f"recompute {view.recompute}: per-stage recomputation lists come from `meshtune "
            "pipeline`; the YAML recomputes nothing"
        )
    model: dict[str, object] = {
        "seq_length": t.sequence_length,
        "hidden_size": m.hidden_size,
        "intermediate_size": m.ffn_size,
        "num_hidden_layers": m.num_layers,
        "num_attention_heads": m.num_heads,
        "num_key_value_heads": m.kv_heads,
        "head_dim": m.head_dim,
    }
    if m.vocab_size is not None:
        model["vocab_size"] = m.vocab_size
    if t.fp8 is not Fp8Recipe.NONE:
        notes.drop(
            f"fp8 {t.fp8.value}: MindFormers 2.0.0's model config has no FP8 GEMM recipe; the "
            f"export computes in {t.dtype.value}"
        )
    if t.dtype.value in _DTYPES:
        model["compute_dtype"] = _DTYPES[t.dtype.value]
    else:
        notes.drop(f"dtype {t.dtype.value}: MindFormers' compute_dtype has no such value")
    if vp > 1:
        model["pp_interleave_num"] = vp
    if cp > 1 and view.context_comm == "p2p":
        model["use_ring_attention"] = True
    model["offset"] = layer_offsets(view) if pp > 1 else 0
    _experts(view, parallel_config, model, notes)
    if m.ffn_kind != FfnKind.SWIGLU or m.position_encoding != PositionEncoding.ROTARY:
        notes.drop(
            f"a {m.ffn_kind.value} FFN with {m.position_encoding.value} positions: MindFormers' "
            "mcore models (Qwen3, TeleChat3) are gated-FFN rotary decoders"
        )
    notes.assume(
        "model_type from pretrained_model_dir's config.json (an mcore model such as qwen3); "
        "the shape keys here override it"
    )
    if view.tensor_parallel > 1:  # one chip per layer has no dataflow to express
        notes.drop(
            "per-layer dataflows and slice counts: MindFormers shards FC layers by its own "
            "parallel strategy"
        )
    head = commented(header_lines(view, "mindformers", KEYS_FROM, notes))
    usage = (
        "# use: merge into configs/general/llm_pretrain_dense_template.yaml (these keys replace "
        "its own; parallel.parallel_optimizer_config replaces the whole section), then\n"
        "#   msrun ... run_mindformer.py --config <merged>.yaml\n"
    )
    tree = {
        "runner_config": runner,
        "parallel_config": parallel_config,
        "parallel": context,
        "recompute_config": recompute,
        "model": {"model_config": model},
    }
    return finish("mindformers", [ExportFile(FILE_NAME, head + usage + _yaml(tree))], notes)
