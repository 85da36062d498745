"""Load a `meshtune export --to megatron` script with Megatron-LM's own code
and print what Megatron-LM made of it, as JSON.

Run with a Megatron-LM checkout on the path (Megatron-LM's training package
is not on PyPI; megatron-core's wheel holds `megatron/core` only), torch and
triton installed:

    PYTHONPATH=MEGATRON_LM_DIR python tests/trainers/megatron_check.py megatron_args.sh WORLD_SIZE

It runs `megatron.training.arguments.parse_args` and `validate_args` on the
script's MEGATRON_ARGS (with the environment the script exports), builds the
`TransformerConfig` Megatron-LM builds from them, and asks
`get_num_layers_to_build` how many layers every (pipeline rank, virtual
stage) holds. Two things a CPU has not are stood in for, and nothing else:
the device's compute capability (an H100, sm_90, where validate_args asks
CUDA), and `typing.override` on Python 3.11 (Megatron-LM needs 3.12 for that
decorator only); RoPE fusion is switched off before the TransformerConfig is
built (it needs Transformer Engine, which does not install on a CPU).

Flags `flags` instead prints every option string the argument parser
declares with its kind (flag, int, float, str): the key set
tests/fixtures/formats/megatron-arguments.json is written from it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import typing

if not hasattr(typing, "override"):
    typing.override = lambda f: f  # type: ignore[attr-defined]


def _parser_flags() -> dict[str, str]:
    import argparse

    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    kinds: dict[str, str] = {}
    for action in parser._actions:
        if action.nargs == 0:
            kind = "flag"
        elif action.type in (int, float):
            kind = action.type.__name__
        else:
            kind = "str"
        for option in action.option_strings:
            kinds[option] = kind
    return dict(sorted(kinds.items()))


def _script_flags(text: str) -> tuple[list[str], dict[str, str]]:
    body = re.search(r"^MEGATRON_ARGS=\((.*?)^\)", text, re.S | re.M)
    if body is None:
        sys.exit("no MEGATRON_ARGS=( ... ) array in the script")
    env: dict[str, str | None] = {}
    for line in text.splitlines():
        if line.startswith("export "):
            name, value = line[len("export ") :].split("=", 1)
            env[name] = value
        elif line.startswith("unset "):
            env[line[len("unset ") :].strip()] = None
    return shlex.split(body.group(1), comments=True), env


def _loaded(script: str, world_size: int) -> dict[str, object]:
    flags, env = _script_flags(script)
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world_size))
    # Data, tokenizer and optimizer arguments the export leaves to the user.
    sys.argv = [
        "pretrain_gpt.py",
        *flags,
        *("--tokenizer-type", "NullTokenizer", "--vocab-size", "32000", "--mock-data"),
        *("--lr", "1e-4", "--train-iters", "10"),
    ]
    import megatron.training.arguments as arguments
    from megatron.core import parallel_state
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    arguments.get_device_arch_version = lambda: 9  # an H100 (sm_90); no CUDA here
    # --moe-grouped-gemm asks the device's compute capability (an H100's)
    arguments.torch.cuda.get_device_capability = lambda *_: (9, 0)
    # TransformerConfig asks Transformer Engine's version for MoE in FP8; TE
    # does not install on a CPU: stand in TE 2.8 (what the export targets)
    import megatron.core.transformer.transformer_config as transformer_config
    from packaging.version import Version

    transformer_config.is_te_min_version = lambda version, *_, **__: (
        Version(str(version)) <= Version("2.8.0")
    )
    args = arguments.parse_args()
    arguments.validate_args(args, {})
    # Transformer Engine's fused RoPE kernel does not install on a CPU; the
    # TransformerConfig refuses the flag without it (it changes no layer count).
    args.apply_rope_fusion = False
    config = arguments.core_transformer_config_from_args(args)
    pp = args.pipeline_model_parallel_size
    vpp = args.virtual_pipeline_model_parallel_size or 1
    # Virtual stage j * pp + s is chunk j of rank s. A pipeline layout asks
    # parallel_state which rank it is on: set it as each rank's would be.
    parallel_state.set_virtual_pipeline_model_parallel_world_size(vpp if vpp > 1 else None)
    layers = []
    for j in range(vpp):
        for s in range(pp):
            parallel_state.set_pipeline_model_parallel_rank(s)
            vp_stage = j if vpp > 1 else None
            layers.append(get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=s))
    dp, mbs = args.data_parallel_size, args.micro_batch_size
    gqa = args.group_query_attention
    return {
        "tensor_parallel": args.tensor_model_parallel_size,
        "context_parallel": args.context_parallel_size,
        "cp_comm_type": config.cp_comm_type,
        "pipeline_parallel": pp,
        "data_parallel": args.data_parallel_size,
        "interleave": vpp,
        "virtual_stage_layers": layers,
        "micro_batch_sequences": args.micro_batch_size,
        "global_batch_sequences": args.global_batch_size,
        "micro_batches": args.global_batch_size // (mbs * dp),
        "sequence_length": args.seq_length,
        "num_layers": args.num_layers,
        "hidden_size": args.hidden_size,
        "ffn_hidden_size": args.ffn_hidden_size,
        "num_heads": args.num_attention_heads,
        "num_kv_heads": args.num_query_groups if gqa else args.num_attention_heads,
        "gated_ffn": bool(args.swiglu),
        "position_embedding": args.position_embedding_type,
        "params_dtype": str(args.params_dtype).removeprefix("torch."),
        "sequence_parallel": bool(args.sequence_parallel),
        "recompute_granularity": args.recompute_granularity,
        "recompute_method": args.recompute_method,
        "recompute_num_layers": args.recompute_num_layers,
        "distributed_optimizer": bool(args.use_distributed_optimizer),
        "megatron_fsdp": bool(args.use_megatron_fsdp),
        "sharding_strategy": args.data_parallel_sharding_strategy,
        "tp_comm_overlap": bool(args.tp_comm_overlap),
        "num_experts": args.num_experts,
        "experts_per_token": config.moe_router_topk if args.num_experts else None,
        "expert_parallel": args.expert_model_parallel_size,
        "expert_tensor_parallel": args.expert_tensor_parallel_size,
        "moe_layer_freq": config.moe_layer_freq if args.num_experts else None,
        "moe_token_dispatcher_type": config.moe_token_dispatcher_type,
        "moe_flex_dispatcher_backend": config.moe_flex_dispatcher_backend,
        "overlap_moe_expert_parallel_comm": bool(config.overlap_moe_expert_parallel_comm),
        "recompute_modules": config.recompute_modules,
        "window_size": list(config.window_size) if config.window_size else None,
        "window_attn_skip_freq": config.window_attn_skip_freq,
    }


def main() -> None:
    if len(sys.argv) == 2 and sys.argv[1] == "flags":
        print(json.dumps(_parser_flags(), indent=1))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    script, world_size = open(sys.argv[1]).read(), int(sys.argv[2])
    stdout = sys.stdout
    sys.stdout = sys.stderr  # Megatron-LM prints its arguments table
    result = _loaded(script, world_size)
    sys.stdout = stdout
    print(json.dumps(result))


if __name__ == "__main__":
    main()
