#!/usr/bin/env bash
# meshtune export --to megatron, from plan_gpt3_1d_tp8.json (meshtune.plan/3, meshtune 0.1.0)
# gpt3-175b: 1 x 8 tensor-parallel mesh, data parallel 4, pipeline parallel 8, 8 micro-batch(es) of 2 sequence(s), 256 chips
# interleave 2, recompute full, ZeRO stage 1, FC layers meshslice
# key names: NVIDIA/Megatron-LM megatron/training/arguments.py @ d98e8a64; NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py initialize_ub @ fecb10bd
# assumed: embeddings tied (Megatron's default): the plan's model does not say
# assumed: sequence parallelism on: the plan shards every activation over the tensor-parallel chips, and userbuffers overlap requires it
# assumed: data parallel 4 = world size / (TP x PP): launch 256 GPUs
# assumed: max position embeddings = sequence length
# not expressed: qkv forward S = 12 (qkv_fprop): ring_exchange all-gather overlap always runs tp_size = 8 steps
# not expressed: qkv backward_weight S = 12 (qkv_wgrad): Transformer Engine overlaps its input all-gather in bulk, without splits
# not expressed: attn_out backward_data S = 4 (proj_dgrad): ring_exchange all-gather overlap always runs tp_size = 8 steps
# not expressed: attn_out backward_weight S = 4 (proj_wgrad): Megatron reuses the data-gradient GEMM's gathered gradient, so it has no collective to split
# not expressed: ffn_up forward S = 24 (fc1_fprop): ring_exchange all-gather overlap always runs tp_size = 8 steps
# not expressed: ffn_up backward_weight S = 24 (fc1_wgrad): Transformer Engine overlaps its input all-gather in bulk, without splits
# not expressed: ffn_down backward_data S = 24 (fc2_dgrad): ring_exchange all-gather overlap always runs tp_size = 8 steps
# not expressed: ffn_down backward_weight S = 24 (fc2_wgrad): Megatron reuses the data-gradient GEMM's gathered gradient, so it has no collective to split
# Megatron-LM requires this with tensor parallelism on GPUs before Blackwell
export CUDA_DEVICE_MAX_CONNECTIONS=1
# use: torchrun ... pretrain_gpt.py "${MEGATRON_ARGS[@]}" <data, tokenizer and optimizer arguments>
MEGATRON_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 8
  --micro-batch-size 2
  --global-batch-size 64
  --seq-length 2048
  --max-position-embeddings 2048
  --num-layers 96
  --hidden-size 12288
  --ffn-hidden-size 49152
  --num-attention-heads 96
  --bf16
  --grad-reduce-in-bf16
  --sequence-parallel
  --tp-comm-overlap
  --tp-comm-overlap-cfg tp_comm_overlap_cfg.yaml
  --num-virtual-stages-per-pipeline-rank 2
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --tp-comm-overlap-rs-dgrad
)
