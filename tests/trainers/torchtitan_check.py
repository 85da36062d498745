"""Load a `meshtune export --to torchtitan` module with torchtitan's own code
and build it on a fake process group and the meta device; print what
torchtitan made of it, as JSON (one line on stdout).

    python tests/trainers/torchtitan_check.py EXPORT_FOLDER/meshtune_torchtitan.py

Run in a venv with torchtitan 0.3.0, a CPU torch and triton (tests/trainers/
venvs.py builds one). Steps, as torchtitan.trainer.Trainer.__init__ takes
them (0.3.0 trainer.py): `ConfigManager().parse_args(["--module",
"meshtune_torchtitan", "--config", "meshtune_plan"])` with the export's
folder on the path (what PYTHONPATH does for `torchrun -m torchtitan.train`);
then for every pipeline rank: the fake process group of the whole world
(`init_fake_mode`), `ParallelDims.build_mesh` on the CPU, the model built on
the meta device and `pipeline_llm` (split into the rank's virtual stages,
tensor parallelism, activation checkpointing, fully_shard with its precision
policy, the schedule), or `parallelize_llama` without pipeline parallelism.
The gradient accumulation is the trainer's arithmetic (trainer.py: global /
(local x batch mesh size)), which runs only when training starts. Not run:
weights, tokenizer, data, optimizer, a step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _blocks(part) -> list:
    layers = getattr(part, "layers", None)
    return list(layers.values()) if layers is not None else []


def _checkpointing(parts: list) -> str:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    kinds = set()
    for part in parts:
        for block in _blocks(part):
            if not isinstance(block, CheckpointWrapper):
                kinds.add("none")
                continue
            keywords = getattr(getattr(block, "checkpoint_fn", None), "keywords", {}) or {}
            kinds.add("selective" if "context_fn" in keywords else "full")
    return "/".join(sorted(kinds))


def _compute_dtype(parts: list) -> str | None:
    from torch.distributed.fsdp import FSDPModule

    for part in parts:
        for module in part.modules():
            if isinstance(module, FSDPModule):
                policy = module._get_fsdp_state()._mp_policy
                return str(policy.param_dtype).removeprefix("torch.")
    return None


def _ffn_width(layers: list) -> int:
    """The dense FFN's width, or the routed experts' when every block is MoE."""
    for block in layers:
        if block.feed_forward is not None:
            return block.feed_forward.w1.out_features
    return layers[0].moe.routed_experts.inner_experts.hidden_dim


def _experts(moe, key: str) -> int | None:
    if moe is None:
        return None
    return moe.num_experts if key == "num_experts" else moe.router.top_k


def _standard_dispatch(layers: list) -> str | None:
    """The token dispatcher class the module's MoE blocks configure; a
    DeepEP or HybridEP one (models/common/config_utils.py
    make_token_dispatcher_config) is swapped for the standard all-to-all
    before building, as DeepEP does not install without CUDA (the model,
    the meshes and the parallelisation do not depend on it)."""
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher

    name = None
    for block in layers:
        routed = block.moe.routed_experts if block.moe is not None else None
        if routed is None:
            continue
        tokens = routed.token_dispatcher
        name = type(tokens).__qualname__.removesuffix(".Config")
        if not isinstance(tokens, AllToAllTokenDispatcher.Config):
            routed.token_dispatcher = AllToAllTokenDispatcher.Config(
                num_experts=tokens.num_experts, top_k=tokens.top_k
            )
    return name


def _loaded(module_file: Path) -> dict[str, object]:
    sys.path.insert(0, str(module_file.parent))
    import torch
    import torchtitan
    import torchtitan.distributed.parallel_dims as parallel_dims
    import torchtitan.tools.utils as tools
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as dist_utils

    parallel_dims.device_type = "cpu"  # no accelerator: meshes on the CPU, fake backend
    args = ["--module", module_file.stem, "--config", "meshtune_plan"]
    config = ConfigManager().parse_args(list(args))
    par, training = config.parallelism, config.training
    pp = par.pipeline_parallel_degree
    world = (
        par.data_parallel_replicate_degree
        * par.data_parallel_shard_degree
        * par.context_parallel_degree
        * par.tensor_parallel_degree
        * pp
    )
    stages: dict[int, int] = {}
    parts_seen, built_parts = 0, []
    for rank in range(pp):
        config = ConfigManager().parse_args(list(args))  # the model config is updated in place
        par, training = config.parallelism, config.training
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        dist_utils.init_fake_mode(world, rank=rank * (world // pp))
        dims = ParallelDims.from_config(par, world)
        dims.build_mesh()
        dist_utils.set_spmd_backend(par.spmd_backend)
        spec = config.model_spec
        dispatcher = _standard_dispatch(spec.model.layers)
        spec.model.update_from_config(config=config)
        with torch.device("meta"), tools.set_default_dtype(TORCH_DTYPE_MAP[training.dtype]):
            model = spec.model.build()
        common = {
            "parallel_dims": dims,
            "training": training,
            "parallelism": par,
            "compile_config": config.compile,
            "ac_config": config.activation_checkpoint,
            "dump_folder": config.dump_folder,
        }
        if dims.pp_enabled:
            schedule, parts, _, _ = spec.pipelining_fn(
                model,
                device=torch.device("cpu"),
                model_config=spec.model,
                parallelize_fn=spec.parallelize_fn,
                loss_fn=config.loss.build(compile_config=config.compile),
                **common,
            )
            held = getattr(schedule, "_stages", None) or [schedule._stage]
            if len(held) != len(parts):
                raise SystemExit(f"{len(parts)} chunks built on rank {rank}, {len(held)} scheduled")
            indices = [s.stage_index for s in held]
            micro_batches = schedule._n_microbatches
        else:
            parts, indices = [spec.parallelize_fn(model, **common)], [0]
            micro_batches = 1
        for index, part in zip(indices, parts, strict=True):
            stages[index] = len(_blocks(part))
        parts_seen += len(parts)
        built_parts += parts
    batch_degree = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    accumulation = training.global_batch_size // (training.local_batch_size * batch_degree)
    first = config.model_spec.model.layers[0]
    first_moe = next((b.moe for b in config.model_spec.model.layers if b.moe is not None), None)
    return {
        "tensor_parallel": par.tensor_parallel_degree,
        "context_parallel": dims.cp,
        "context_parallel_load_balancer": par.context_parallel_load_balancer,
        "pipeline_parallel": pp,
        "data_parallel": batch_degree,
        "data_parallel_shard": par.data_parallel_shard_degree,
        # FSDP's mesh: dp_shard x cp (parallel_dims.py build_mesh)
        "fsdp": dims.dp_shard * dims.cp,
        "fsdp_reshard_after_forward": par.fsdp_reshard_after_forward,
        "interleave": parts_seen // pp,
        "virtual_stage_layers": [stages[i] for i in sorted(stages)],
        "schedule": par.pipeline_parallel_schedule if pp > 1 else None,
        "micro_batch_sequences": par.pipeline_parallel_microbatch_size
        if pp > 1
        else training.local_batch_size,
        "global_batch_sequences": training.global_batch_size,
        "micro_batches": micro_batches if pp > 1 else accumulation,
        "gradient_accumulation_steps": accumulation,
        "sequence_length": training.seq_len,
        "num_layers": len(config.model_spec.model.layers),
        "hidden_size": config.model_spec.model.dim,
        # a mixture of experts: the dense blocks' width, else the experts'
        "ffn_hidden_size": _ffn_width(config.model_spec.model.layers),
        "num_experts": _experts(first_moe, "num_experts"),
        "experts_per_token": _experts(first_moe, "top_k"),
        "expert_parallel": par.expert_parallel_degree,
        "token_dispatcher": dispatcher,
        "num_heads": first.attention.n_heads,
        "num_kv_heads": getattr(first.attention, "n_kv_heads", None) or first.attention.n_heads,
        "compute_dtype": _compute_dtype(built_parts),
        "activation_checkpoint": _checkpointing(built_parts),
        "async_tensor_parallel": bool(config.compile.enable_async_tensor_parallel),
        "versions": {"torchtitan": torchtitan.__version__, "torch": torch.__version__},
    }


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    stdout, sys.stdout = sys.stdout, sys.stderr  # torchtitan logs; stdout is the JSON
    result = _loaded(Path(sys.argv[1]).resolve())
    sys.stdout = stdout
    print(json.dumps(result))


if __name__ == "__main__":
    main()
