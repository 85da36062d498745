# meshtune export --to torchtitan, from plan_gpt3_1d_tp8.json (meshtune.plan/3, meshtune 0.1.0)
# gpt3-175b: 1 x 8 tensor-parallel mesh, data parallel 4, pipeline parallel 8, 8 micro-batch(es) of 2 sequence(s), 256 chips
# interleave 2, recompute full, ZeRO stage 1, FC layers meshslice
# key names: torchtitan 0.3.0 (PyPI; pytorch/torchtitan release/0.3 @ 4f9e9a47) config registry
# assumed: gradients reduced in float32 (mixed_precision_reduce, torchtitan's default for accuracy): the plan priced them in its dtype, half the bytes; plan with fp32_gradients: true to price torchtitan's reduction
# assumed: spmd_backend partial_dtensor: torchtitan 0.3.0's default (spmd_types) needs torch 2.14 with data or tensor parallelism
# assumed: RoPE theta 500000 (torchtitan's Llama 3 value)
# assumed: dataset c4 and AdamW at lr 3e-4: override them on the command line
# not expressed: ZeRO stage 1: FSDP also shards the gradients (ZeRO-2); torchtitan has no optimizer-only sharding
# not expressed: per-GEMM slice counts: async tensor parallelism splits each collective matmul into tp = 8 steps, not the planned S
# not expressed: a gelu FFN with learned positions: the module builds torchtitan's Llama 3 decoder (SwiGLU, RoPE, RMSNorm) at the plan's widths
# use: PYTHONPATH=<this folder> torchrun --nproc-per-node ... -m torchtitan.train --module meshtune_torchtitan --config meshtune_plan --hf_assets_path <tokenizer folder>
"""torchtitan 0.3.0 config module written by meshtune export."""

FLAVOR = 'meshtune-gpt3-175b'
MODEL_NAME = 'llama3'
MOE = None
MLA = None
MOE_LAYERS = None
NUM_LAYERS = 96
DIM = 12288
N_HEADS = 96
N_KV_HEADS = 96
HEAD_DIM = 128
FFN_HIDDEN = 49152
VOCAB_SIZE = 50257
SEQ_LEN = 2048
ROPE_THETA = 500000.0
LAYERS_PER_VIRTUAL_STAGE = [6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6]
TRAINING = {'local_batch_size': 16, 'global_batch_size': 64, 'seq_len': 2048, 'dtype': 'float32', 'mixed_precision_param': 'bfloat16', 'mixed_precision_reduce': 'float32', 'disable_cuda_graphs': True}
PARALLELISM = {'spmd_backend': 'partial_dtensor', 'data_parallel_replicate_degree': 1, 'data_parallel_shard_degree': 4, 'tensor_parallel_degree': 8, 'enable_sequence_parallel': True, 'pipeline_parallel_degree': 8, 'context_parallel_degree': 1, 'fsdp_reshard_after_forward': 'never', 'pipeline_parallel_schedule': 'Interleaved1F1B', 'pipeline_parallel_microbatch_size': 2}
ACTIVATION_CHECKPOINT = 'full'
COMPILE = {'enable': True, 'components': ['model', 'loss'], 'enable_async_tensor_parallel': True}

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
