"""The torchtitan export: a Python config module for torchtitan 0.3.0 (what
`pip install torchtitan` gives), for 1D plans (torchtitan's tensor
parallelism is Megatron-style, one axis).

torchtitan 0.3.0 reads no TOML: `torchtitan.train --module M --config F`
imports module M and calls F() for a `Trainer.Config` (config/manager.py).
The export is that module, `meshtune_torchtitan.py`, with `meshtune_plan()`.
Its values sit in constants at the top; the code below them builds
torchtitan's Llama 3 decoder at the plan's dimensions from the public
pieces of `torchtitan.models.common` and `torchtitan.models.llama3` (the
flavor builders in models/llama3/__init__.py are private), and the
training, parallelism, activation-checkpoint and compile configs.

How torchtitan 0.3.0 reads them (pytorch/torchtitan release/0.3 @ 4f9e9a47,
the files identical to the 0.3.0 wheel's; trainer.py, config/configs.py,
distributed/pipeline_parallel.py, models/llama3/parallelize.py):

- Batch: `local_batch_size` is a replica's sequences per optimizer step
  with pipeline parallelism (split into micro-batches of
  `pipeline_parallel_microbatch_size`) and one micro-batch without; then
  gradient accumulation = global / (local x replicate x shard degree).
- Precision: parameters kept in `dtype` float32, computed in
  `mixed_precision_param` bfloat16 through fully_shard's policy, which
  parallelize_llama installs at every data-parallel degree, 1 included.
- ZeRO: 0 is `data_parallel_replicate_degree`; 1 and 2 are FSDP shards kept
  gathered after the forward (`fsdp_reshard_after_forward = "never"`); 3
  re-gathers (`"always"`).
- Pipeline: `module_fqns_per_model_part` lists every virtual stage's modules
  in model order (the embedding with the first, norm and output with the
  last); without it torchtitan splits by its own rule, counting the
  embedding and output as layers (96 layers on 8 stages built as 12, 13, ...,
  11, and `layers_per_stage` refused for interleaving).
- Context parallelism: `context_parallel_degree` (config/configs.py line
  232) with `context_parallel_load_balancer = "headtail"` (line 235, the
  default: every sequence cut into 2 x cp chunks, chip i holding chunks i
  and 2 cp - 1 - i, as the plan prices it). A language model's attention is
  FlexAttention (models/common/config_utils.py lines 97-101 refuse SDPA),
  whose context-parallel forward all-gathers keys and values over the group
  before the attention (distributed/context_parallel/api.py line 73,
  `flex_cp_allgather`): the plan's all_gather. torchtitan 0.3.0 has no
  ring (p2p) or Ulysses (a2a) choice: the `context_parallel_rotate_method`
  of earlier releases is gone (torch's `set_rotate_method` serves SDPA only),
  so those are not expressed. torchtitan applies FSDP over data shard x
  context whenever context parallelism is on (distributed/parallel_dims.py
  lines 222-225, 278); the degrees multiply to the world size
  (`ParallelDims._validate`, lines 186-189).
- `disable_cuda_graphs` must be set with pipeline parallelism
  (Trainer.Config refuses it otherwise); async tensor parallelism is a
  `compile` key in 0.3.0 and needs compilation.
"""

from __future__ import annotations

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
)
from autotune.formats.megatron import mismatches
from autotune.formats.plan_view import PlanView
from autotune.specs.model import FfnKind, PositionEncoding
from autotune.specs.training import Fp8Recipe

KEYS_FROM = "torchtitan 0.3.0 (PyPI; pytorch/torchtitan release/0.3 @ 4f9e9a47) config registry"
MODULE = "meshtune_torchtitan"
FILE_NAME = f"{MODULE}.py"
_PRECISION = {"bf16": "bfloat16", "fp32": "float32"}
# torchtitan's Llama 3 RoPE base (models/llama3/__init__.py); plans do not record one.
ROPE_THETA = 500000.0

# The module's code below its constants: the same for every plan.
_DENSE = '''
from functools import partial

import torch.nn as nn
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import default_adamw
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import (
    get_attention_config,
    make_ffn_config,
    make_gqa_config,
)
from torchtitan.models.llama3 import parallelize_llama
from torchtitan.models.llama3.model import Llama3Model, Llama3TransformerBlock
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer


def _linear_init(std):
    return {"weight": partial(nn.init.trunc_normal_, std=std), "bias": nn.init.zeros_}


_NORM_INIT = {"weight": nn.init.ones_}


def _model():
    """torchtitan's Llama 3 decoder (RMSNorm, RoPE, SwiGLU) at the plan's shape."""
    rope = ComplexRoPE.Config(dim=HEAD_DIM, max_seq_len=SEQ_LEN, theta=ROPE_THETA)
    layers = [
        Llama3TransformerBlock.Config(
            attention_norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),
            ffn_norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),
            attention=make_gqa_config(
                dim=DIM,
                n_heads=N_HEADS,
                n_kv_heads=N_KV_HEADS,
                wqkv_param_init=_linear_init(0.02),
                wo_param_init=_linear_init(0.02 / (2 * (i + 1)) ** 0.5),
                inner_attention=get_attention_config("flex"),
                fuse_qkv=True,
                rope=rope,
            ),
            feed_forward=make_ffn_config(
                dim=DIM,
                hidden_dim=FFN_HIDDEN,
                w1_param_init=_linear_init(0.02),
                w2w3_param_init=_linear_init(0.02 / (2 * (i + 1)) ** 0.5),
            ),
        )
        for i in range(NUM_LAYERS)
    ]
    return Llama3Model.Config(
        dim=DIM,
        vocab_size=VOCAB_SIZE,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB_SIZE,
            embedding_dim=DIM,
            param_init={"weight": partial(nn.init.normal_, std=1.0)},
        ),
        norm=RMSNorm.Config(normalized_shape=DIM, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features=DIM, out_features=VOCAB_SIZE, param_init=_linear_init(DIM**-0.5)
        ),
        layers=layers,
    )
'''

_MOE = '''
from functools import partial

import torch.nn as nn
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import default_adamw, register_moe_load_balancing_hook
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import (
    get_attention_config,
    make_ffn_config,
    make_gqa_config,
    make_moe_config,
    make_routed_experts_config,
    make_router_config,
)
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

if MLA is None:
    # GQA attention with MoE blocks: torchtitan's Qwen3 decoder classes
    from torchtitan.models.qwen3 import parallelize_qwen3 as parallelize
    from torchtitan.models.qwen3.model import Qwen3Model as Model
    from torchtitan.models.qwen3.model import Qwen3TransformerBlock as Block
else:
    # multi-head latent attention: torchtitan's DeepSeek-V3 classes
    from torchtitan.models.deepseek_v3 import make_mla_attention_config
    from torchtitan.models.deepseek_v3 import parallelize_deepseekv3 as parallelize
    from torchtitan.models.deepseek_v3.model import DeepSeekV3Model as Model
    from torchtitan.models.deepseek_v3.model import DeepSeekV3TransformerBlock as Block


def _linear_init(std):
    return {"weight": partial(nn.init.trunc_normal_, std=std), "bias": nn.init.zeros_}


def _depth_init(i):
    return _linear_init(0.02 / (2 * (i + 1)) ** 0.5)


_NORM_INIT = {"weight": nn.init.ones_}


def _norm(width):
    return RMSNorm.Config(normalized_shape=width, param_init=_NORM_INIT)


def _attention(i):
    if MLA is None:
        return make_gqa_config(
            dim=DIM,
            n_heads=N_HEADS,
            n_kv_heads=N_KV_HEADS,
            head_dim=HEAD_DIM,
            wqkv_param_init=_linear_init(0.02),
            wo_param_init=_depth_init(i),
            inner_attention=get_attention_config("flex"),
            fuse_qkv=True,
            rope=ComplexRoPE.Config(dim=HEAD_DIM, max_seq_len=SEQ_LEN, theta=ROPE_THETA),
        )
    return make_mla_attention_config(
        layer_id=i,
        dim=DIM,
        n_heads=N_HEADS,
        **MLA,
        attn_backend="flex",
        linear_init=_linear_init(0.02),
        norm_init=_NORM_INIT,
        depth_init=_depth_init,
        rope=ComplexRoPE.Config(
            dim=MLA["qk_rope_head_dim"], max_seq_len=SEQ_LEN, theta=ROPE_THETA
        ),
    )


def _moe(i):
    shared = None
    if MOE["shared_hidden"]:
        shared = make_ffn_config(
            dim=DIM,
            hidden_dim=MOE["shared_hidden"],
            w1_param_init=_linear_init(0.02),
            w2w3_param_init=_depth_init(i),
        )
    experts_init = {
        "w1_EFD": partial(nn.init.trunc_normal_, std=0.02),
        "w2_EDF": partial(nn.init.trunc_normal_, std=0.02 / (2 * (i + 1)) ** 0.5),
        "w3_EFD": partial(nn.init.trunc_normal_, std=0.02 / (2 * (i + 1)) ** 0.5),
    }
    return make_moe_config(
        num_experts=MOE["num_experts"],
        router=make_router_config(
            dim=DIM,
            num_experts=MOE["num_experts"],
            gate_param_init=_linear_init(0.02),
            top_k=MOE["top_k"],
            score_func=MOE["score_func"],
            num_expert_groups=MOE["num_expert_groups"],
            num_limited_groups=MOE["num_limited_groups"],
        ),
        routed_experts=make_routed_experts_config(
            dim=DIM,
            hidden_dim=MOE["hidden"],
            num_experts=MOE["num_experts"],
            top_k=MOE["top_k"],
            param_init=experts_init,
            comm_backend=MOE["comm_backend"],
            non_blocking_capacity_factor=MOE["capacity_factor"],
        ),
        shared_experts=shared,
    )


def _model():
    """The plan's decoder: each block's attention, then its MoE or dense FFN."""
    layers = []
    for i in range(NUM_LAYERS):
        dense = not MOE_LAYERS[i]
        layers.append(
            Block.Config(
                attention=_attention(i),
                attention_norm=_norm(DIM),
                ffn_norm=_norm(DIM),
                feed_forward=make_ffn_config(
                    dim=DIM,
                    hidden_dim=FFN_HIDDEN,
                    w1_param_init=_linear_init(0.02),
                    w2w3_param_init=_depth_init(i),
                )
                if dense
                else None,
                moe=None if dense else _moe(i),
            )
        )
    return Model.Config(
        dim=DIM,
        vocab_size=VOCAB_SIZE,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB_SIZE,
            embedding_dim=DIM,
            param_init={"weight": partial(nn.init.normal_, std=1.0)},
        ),
        norm=_norm(DIM),
        lm_head=Linear.Config(
            in_features=DIM, out_features=VOCAB_SIZE, param_init=_linear_init(DIM**-0.5)
        ),
        layers=layers,
    )
'''

_TAIL = '''

def _model_parts(per_stage):
    """Module names of every virtual stage in model order: the embedding with
    the first, the final norm and output with the last."""
    parts, first = [], 0
    for k, count in enumerate(per_stage):
        names = [f"layers.{i}" for i in range(first, first + count)]
        first += count
        if k == 0:
            names.insert(0, "tok_embeddings")
        if k == len(per_stage) - 1:
            names += ["norm", "lm_head"]
        parts.append(names)
    return parts


def meshtune_plan():
    spec = ModelSpec(
        name=MODEL_NAME,
        flavor=FLAVOR,
        model=_model(),
        parallelize_fn=parallelize if MOE else parallelize_llama,
        pipelining_fn=pipeline_llm,
        post_optimizer_build_fn=register_moe_load_balancing_hook if MOE else None,
        state_dict_adapter=None,
    )
    checkpoint = {"none": None, "selective": SelectiveAC.Config(), "full": FullAC.Config()}
    parallelism = ParallelismConfig(**PARALLELISM)
    if parallelism.pipeline_parallel_degree > 1:
        parallelism.module_fqns_per_model_part = _model_parts(LAYERS_PER_VIRTUAL_STAGE)
    return Trainer.Config(
        model_spec=spec,
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=VOCAB_SIZE)
        ),
        optimizer=default_adamw(lr=3e-4),
        training=TrainingConfig(**TRAINING),
        parallelism=parallelism,
        activation_checkpoint=checkpoint[ACTIVATION_CHECKPOINT],
        compile=CompileConfig(**COMPILE),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
    )
'''


def _checkpointing(view: PlanView, notes: Notes) -> str:
    """torchtitan's activation checkpointing for the plan's recomputation:
    one mode for every block (the heaviest where the plan mixes them)."""
    chosen = view.heaviest_recompute
    if len(view.recompute_modes) > 1:
        notes.drop(
            f"recompute per stage {view.stage_recompute()}: torchtitan checkpoints every "
            f"block alike; the module uses {chosen}"
        )
    if chosen == "selective":
        notes.drop(
            "recompute selective: torchtitan's op-level selective checkpointing keeps the "
            "attention output and recomputes every other matmul, not the attention core only"
            + (" (and, under MLA, both up-projections)" if view.model.mla is not None else "")
        )
    return chosen


def _context_notes(view: PlanView, notes: Notes) -> None:
    """What torchtitan 0.3.0 does differently from the plan's context
    parallelism (the module docstring cites the sources)."""
    cp, comm = view.context_parallel, view.context_comm
    if comm != "all_gather":
        name = {"p2p": "p2p (ring attention)", "a2a": "a2a (DeepSpeed-Ulysses)"}[comm]
        notes.drop(
            f"context_parallel_comm {name}: torchtitan 0.3.0 has no rotate-method or Ulysses "
            "key; its FlexAttention context parallelism all-gathers keys and values over the "
            f"{cp} chips before the attention, without overlap"
        )
    if view.zero_stage == 0:
        notes.drop(
            f"ZeRO stage 0 with context parallel {cp}: torchtitan applies FSDP "
            f"over the context-parallel group whenever it is on, so weights, gradients and "
            f"optimizer state are sharded over its {cp} chips"
        )


def export_torchtitan(view: PlanView) -> Export:
    """meshtune_torchtitan.py: torchtitan 0.3.0's config module for the plan."""
    needs_1d(view, "torchtitan", "torchtitan")
    notes = Notes()
    note_sliding_window(view, notes, "torchtitan")
    t, m = view.training, view.model
    tp, pp, dp = view.tensor_parallel, t.pipeline_parallel, t.data_parallel
    cp = view.context_parallel
    mbs = view.micro_batch_sequences
    training: dict[str, object] = {
        "local_batch_size": mbs * view.micro_batches if pp > 1 else mbs,
        "global_batch_size": t.global_batch_sequences,
        "seq_len": t.sequence_length,
        "dtype": "float32",
        "mixed_precision_param": _PRECISION.get(t.dtype.value, "bfloat16"),
        "mixed_precision_reduce": "float32",
    }
    if not t.fp32_gradients:
        notes.assume(
            "gradients reduced in float32 (mixed_precision_reduce, torchtitan's default for "
            "accuracy): the plan priced them in its dtype, half the bytes; plan with "
            "fp32_gradients: true to price torchtitan's reduction"
        )
    if t.fp8 is not Fp8Recipe.NONE:
        notes.drop(
            f"fp8 {t.fp8.value}: torchtitan 0.3.0's Float8LinearConverter offers rowwise scaling "
            "only (recipe_name rowwise or rowwise_with_gw_hp, components/quantization/float8.py) "
            "and its MXFP8LinearConverter needs SM100 (mx.py); the module computes in bfloat16: "
            "add a converter to the model config yourself"
        )
    if t.dtype.value not in _PRECISION:
        notes.drop(
            f"dtype {t.dtype.value}: the module computes in bfloat16; add torchtitan's "
            "float8 converter to the model yourself"
        )
    if pp > 1:
        training["disable_cuda_graphs"] = True
    shard = dp if view.zero_stage > 0 else 1
    parallelism: dict[str, object] = {
        "spmd_backend": "partial_dtensor",
        "data_parallel_replicate_degree": dp // shard,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": tp,
        "enable_sequence_parallel": tp > 1 and view.sequence_parallel,
        "pipeline_parallel_degree": pp,
        # replicate x shard x cp x tp x pp = the plan's chips (ParallelDims._validate)
        "context_parallel_degree": cp,
    }
    if cp > 1:
        parallelism["context_parallel_load_balancer"] = "headtail"
        _context_notes(view, notes)
    moe, mla = _experts(view, shard, notes)
    if moe is not None:
        parallelism["expert_parallel_degree"] = view.expert_parallel
        # its all-to-all dispatcher synchronises with the CPU, which CUDA
        # graphs refuse (trainer.py _validate_cuda_graphs)
        training["disable_cuda_graphs"] = True
    notes.assume(
        "spmd_backend partial_dtensor: torchtitan 0.3.0's default (spmd_types) needs torch "
        "2.14 with data or tensor parallelism"
    )
    if shard * cp > 1:
        # FSDP runs over dp_shard x cp (with context parallelism even at ZeRO-0)
        parallelism["fsdp_reshard_after_forward"] = "always" if view.zero_stage == 3 else "never"
        if view.zero_stage == 1:
            notes.drop(
                "ZeRO stage 1: FSDP also shards the gradients (ZeRO-2); torchtitan has no "
                "optimizer-only sharding"
            )
    if pp > 1:
        parallelism["pipeline_parallel_schedule"] = (
            "1F1B" if view.interleave == 1 else "Interleaved1F1B"
        )
        parallelism["pipeline_parallel_microbatch_size"] = mbs
    sliced = any(g.num_slices > 1 for layer in view.doc.layers for g in layer.gemms)
    compile_: dict[str, object] = {"enable": False}
    if tp > 1 and sliced:
        compile_ = {
            "enable": True,
            "components": ["model", "loss"],
            "enable_async_tensor_parallel": True,
        }
        notes.drop(
            "per-GEMM slice counts: async tensor parallelism splits each collective matmul "
            f"into tp = {tp} steps, not the planned S"
        )
    if tp > 1:  # one chip per layer runs no collective to differ
        notes.not_expressed += [
            f"{line} (torchtitan's TP plan fixes it)" for line in mismatches(view)
        ]
    if m.ffn_kind != FfnKind.SWIGLU or m.position_encoding != PositionEncoding.ROTARY:
        notes.drop(
            f"a {m.ffn_kind.value} FFN with {m.position_encoding.value} positions: the module "
            "builds torchtitan's Llama 3 decoder (SwiGLU, RoPE, RMSNorm) at the plan's widths"
        )
    vocab = m.vocab_size
    if vocab is None:
        vocab = 128256
        notes.assume("vocabulary 128256 (Llama 3's): the plan's model does not say")
    notes.assume(f"RoPE theta {ROPE_THETA:g} (torchtitan's Llama 3 value)")
    notes.assume("dataset c4 and AdamW at lr 3e-4: override them on the command line")
    constants = {
        "FLAVOR": f"meshtune-{m.name}",
        "MODEL_NAME": "llama3" if moe is None else ("deepseek_v3" if mla else "qwen3"),
        "MOE": moe,
        "MLA": mla,
        "MOE_LAYERS": list(m.moe_layer_flags) if moe is not None else None,
        "NUM_LAYERS": m.num_layers,
        "DIM": m.hidden_size,
        "N_HEADS": m.num_heads,
        "N_KV_HEADS": m.kv_heads,
        "HEAD_DIM": m.head_dim,
        "FFN_HIDDEN": m.ffn_size,
        "VOCAB_SIZE": vocab,
        "SEQ_LEN": t.sequence_length,
        "ROPE_THETA": ROPE_THETA,
        # chunk j of stage s is virtual stage j * pp + s
        "LAYERS_PER_VIRTUAL_STAGE": view.virtual_stage_layers,
        "TRAINING": training,
        "PARALLELISM": parallelism,
        "ACTIVATION_CHECKPOINT": _checkpointing(view, notes),
        "COMPILE": compile_,
    }
    head = commented(header_lines(view, "torchtitan", KEYS_FROM, notes))
    usage = (
        f"# use: PYTHONPATH=<this folder> torchrun --nproc-per-node ... -m torchtitan.train "
        f"--module {MODULE} --config meshtune_plan --hf_assets_path <tokenizer folder>\n"
    )
    # Python literals (repr of ints, floats, strings, bools, lists and dicts)
    values = "".join(f"{name} = {value!r}\n" for name, value in constants.items())
    text = head + usage + '"""torchtitan 0.3.0 config module written by meshtune export."""\n\n'
    body = (_DENSE if moe is None else _MOE) + _TAIL
    return finish("torchtitan", [ExportFile(FILE_NAME, text + values + body)], notes)


def _experts(
    view: PlanView, shard: int, notes: Notes
) -> tuple[dict[str, object] | None, dict[str, object] | None]:
    """A mixture of experts' constants (MOE) and multi-head latent
    attention's (MLA) for the module, or None: torchtitan 0.3.0's MoE
    configs (models/common/config_utils.py `make_moe_config`,
    `make_router_config`, `make_routed_experts_config`) in its Qwen3 decoder
    classes (GQA attention) or its DeepSeek-V3 ones (MLA,
    models/deepseek_v3/__init__.py `make_mla_attention_config`), and
    `expert_parallel_degree` (config/configs.py line 279: the experts
    regroup dp_shard x cp x tp, so it must divide them), the plan's
    dispatcher as `comm_backend` (standard, deepep, hybridep:
    `make_token_dispatcher_config`)."""
    m = view.model
    if m.moe is None:
        return None, None
    moe = m.moe
    ep = view.expert_parallel
    if view.expert_tensor_parallel > 1:
        notes.drop(
            f"expert tensor parallel {view.expert_tensor_parallel}: torchtitan 0.3.0 has no "
            "expert tensor degree (config/configs.py line 279: EP borrows ranks from FSDP and "
            "TP, each expert whole on its rank)"
        )
    dense_region = shard * view.context_parallel * view.tensor_parallel
    if dense_region % ep:
        notes.drop(
            f"expert parallel {ep}: torchtitan regroups only the FSDP x context x tensor chips "
            f"({dense_region}: ZeRO 0 replicas are outside them) for its experts"
        )
    out: dict[str, object] = {
        "num_experts": moe.num_experts,
        "top_k": moe.experts_per_token,
        "hidden": moe.expert_ffn_size,
        "shared_hidden": moe.shared_expert_ffn_size,
        "score_func": moe.router.value,
        "num_expert_groups": moe.expert_groups if moe.node_limit is not None else None,
        "num_limited_groups": moe.node_limit,
        "capacity_factor": moe.capacity_factor,
    }
    if moe.node_limit is not None and moe.expert_groups is None:
        out["num_limited_groups"] = None
        notes.drop(
            f"node-limited routing ({moe.node_limit}): the model gives no expert_groups for "
            "torchtitan's num_expert_groups"
        )
    dispatcher = view.training.expert_dispatcher
    # models/common/config_utils.py make_token_dispatcher_config: standard
    # (PyTorch all-to-all), deepep, hybridep
    out["comm_backend"] = dispatcher.value if dispatcher.deduplicates else "standard"
    if dispatcher.deduplicates:
        notes.assume(f"comm_backend {dispatcher.value} needs DeepEP installed")
    expert_comm_notes(view, "torchtitan 0.3.0", notes, dispatcher=False)
    if m.mtp_layers:
        notes.drop(
            f"{m.mtp_layers} multi-token-prediction module(s): torchtitan builds them with a "
            "private helper (models/deepseek_v3/__init__.py `_build_mtp_layers`); add them "
            "to the model config yourself"
        )
    mla = None
    if m.mla is not None:
        mla = {
            "q_lora_rank": m.mla.q_lora_rank or 0,
            "kv_lora_rank": m.mla.kv_lora_rank,
            "qk_nope_head_dim": m.mla.qk_nope_head_dim,
            "qk_rope_head_dim": m.mla.qk_rope_head_dim,
            "v_head_dim": m.mla.v_head_dim,
        }
    else:
        notes.assume("MoE blocks in torchtitan's Qwen3 decoder classes (GQA attention)")
    return out, mla
