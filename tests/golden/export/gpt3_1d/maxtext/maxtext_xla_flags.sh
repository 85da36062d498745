#!/usr/bin/env bash
# meshtune export --to maxtext, from plan_gpt3_1d_tp8.json (meshtune.plan/3, meshtune 0.1.0)
# gpt3-175b: 1 x 8 tensor-parallel mesh, data parallel 4, pipeline parallel 8, 8 micro-batch(es) of 2 sequence(s), 256 chips
# interleave 2, recompute full, ZeRO stage 1, FC layers meshslice
# key names: MaxText 0.2.5 (PyPI) maxtext/configs/base.yml and configs/types.py
# assumed: vocabulary 50257 padded to 50304 (a multiple of 128 and of the tensor axis, 8): MaxText shards the embedding's vocab dimension
# not expressed: ZeRO stage 1: MaxText shards optimizer state only together with the weights (ici_fsdp_parallelism, ZeRO-3); kept as plain data parallelism
# not expressed: qkv: Y-stationary dataflow and slice counts S = 12/6/12 (forward/backward-data/backward-weight): MaxText derives shardings from its logical axis rules; XLA chooses the collectives and windowed-einsum loops
# not expressed: attn_out: X-stationary dataflow and slice counts S = 3/4/4 (forward/backward-data/backward-weight): MaxText derives shardings from its logical axis rules; XLA chooses the collectives and windowed-einsum loops
# not expressed: ffn_up: Y-stationary dataflow and slice counts S = 24/12/24 (forward/backward-data/backward-weight): MaxText derives shardings from its logical axis rules; XLA chooses the collectives and windowed-einsum loops
# not expressed: ffn_down: X-stationary dataflow and slice counts S = 12/24/24 (forward/backward-data/backward-weight): MaxText derives shardings from its logical axis rules; XLA chooses the collectives and windowed-einsum loops
# Collective matmul (XLA's windowed einsum) overlaps each GEMM with its
# all-gather / reduce-scatter, as the plan's slice counts S > 1 do.
# TPU (libtpu):
export LIBTPU_INIT_ARGS="${LIBTPU_INIT_ARGS:-} --xla_tpu_enable_windowed_einsum_for_all_gather=true --xla_tpu_enable_windowed_einsum_for_reduce_scatter=true"
# GPU:
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_multi_streamed_windowed_einsum=true --xla_gpu_threshold_for_windowed_einsum_mib=0"
