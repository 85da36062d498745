"""Load a `meshtune export --to mindformers` YAML with MindFormers' own code
and print what MindFormers made of it, as JSON (one line on stdout).

    python tests/trainers/mindformers_check.py mindformers.yaml

Run in a venv with MindSpore 2.10.0 and MindFormers 2.0.0 (tests/trainers/
venvs.py builds one). The export is merged into the template it names
(`configs/general/llm_pretrain_dense_template.yaml` of the installed
MindFormers: the export's keys replace the template's, sections merged key by
key except `parallel.parallel_optimizer_config`, replaced whole, as the
export's usage line says) and then goes through MindFormers' code as
`run_mindformer.py --config` does: `MindFormerConfig`, the parallel context
(`build_parallel_context`, MindSpore's auto-parallel context),
`BaseTrainer.set_config` (its batch and gradient-accumulation rules and the
parallel and recompute config classes), the mcore model config
(`get_model_config`, `convert_to_transformer_config`) and `LayerSetting`
(layers per chunk and stage). Not run: communication start-up, graph
compilation and data loading, which need Ascend devices. Stood in: the
device count (set where communication start-up would), the model type
(`qwen3`, which a real run reads from pretrained_model_dir's config.json),
and the `hyper_parallel` package (tests/trainers/hyper_parallel_stub.py).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile

import yaml

REPLACED_WHOLE = (("parallel", "parallel_optimizer_config"),)


def _merge(base: dict, over: dict, path: tuple[str, ...] = ()) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        here = (*path, key)
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        if nested and here not in REPLACED_WHOLE:
            out[key] = _merge(out[key], value, here)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _loaded(export_path: str) -> dict[str, object]:
    import mindformers
    import numpy as np
    from mindformers.core.context.build_context import (
        MFContextOperator,
        build_mf_context,
        build_parallel_context,
    )
    from mindformers.core.context.parallel import ParallelOperator
    from mindformers.models.build_config import get_model_config
    from mindformers.parallel_core.training_graph.transformer.utils import LayerSetting
    from mindformers.tools.register import MindFormerConfig
    from mindformers.trainer.base_trainer import BaseTrainer
    from mindspore import context as ms_context

    configs = os.path.join(os.path.dirname(os.path.dirname(mindformers.__file__)), "configs")
    template = os.path.join(configs, "general", "llm_pretrain_dense_template.yaml")
    plain = lambda tree: json.loads(json.dumps(tree))  # noqa: E731
    merged = _merge(
        plain(MindFormerConfig._file2dict(template)),
        plain(MindFormerConfig._file2dict(export_path)),
    )
    model_config = merged["model"]["model_config"]
    model_config.setdefault("model_type", "qwen3")
    model_config.setdefault("architectures", ["Qwen3ForCausalLM"])
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(merged, f, sort_keys=False)
    config = MindFormerConfig(f.name)
    os.unlink(f.name)

    MFContextOperator.reset_instance()
    build_mf_context(copy.deepcopy(config))
    pc = config.parallel_config
    devices = 1
    for key in ("data_parallel", "model_parallel", "context_parallel", "pipeline_stage"):
        devices *= int(pc.get(key, 1))
    ms_context.reset_auto_parallel_context()
    context = dict(build_parallel_context(copy.deepcopy(config)).parallel_ctx)
    context["device_num"] = devices  # what communication start-up would set
    context.pop("strategy_ckpt_config", None)  # writes files
    ParallelOperator._set_ms_auto_parallel_context(**context)

    trainer = object.__new__(BaseTrainer)  # __init__ looks up tasks; set_config is the rule
    trainer.global_batch_size = trainer.config = trainer.default_task_config = None
    trainer.set_config(copy.deepcopy(config), is_full_config=True)
    loaded = trainer.config
    tpc, rc = loaded.parallel_config, loaded.recompute_config
    default_args = {"parallel_config": tpc, "batch_size": loaded.runner_config.mini_batch_size}
    model = get_model_config(copy.deepcopy(config.model), default_args=default_args)
    transformer = model.convert_to_transformer_config()
    vpp = transformer.virtual_pipeline_model_parallel_size or 1
    split = LayerSetting(transformer.num_layers, transformer.offset, transformer, vpp)
    chunks = np.asarray(split.layer_list)  # [chunk][stage]
    level = None
    if ms_context.get_auto_parallel_context("enable_parallel_optimizer"):
        optimizer = config.parallel.get("parallel_optimizer_config") or {}
        level = optimizer.get("optimizer_level", "level1")
    micro_batches = (
        tpc.micro_batch_num
        if tpc.pipeline_stage > 1
        else (loaded.runner_config.gradient_accumulation_steps)
    )
    experts = transformer.num_moe_experts
    return {
        "num_experts": experts,
        "experts_per_token": transformer.moe_router_topk if experts else None,
        "expert_parallel": transformer.expert_model_parallel_size,
        "tensor_parallel": tpc.model_parallel,
        "context_parallel": transformer.context_parallel_size,
        "use_ring_attention": bool(transformer.use_ring_attention),
        "ulysses_degree": int(transformer.hierarchical_context_parallel_sizes),
        "pipeline_parallel": tpc.pipeline_stage,
        "data_parallel": tpc.data_parallel,
        "interleave": int(split.pp_interleave_num),
        "virtual_stage_layers": [int(n) for n in chunks.reshape(-1)],
        "micro_batch_sequences": config.runner_config.batch_size,
        "global_batch_sequences": trainer.global_batch_size,
        "micro_batches": int(micro_batches),
        "sequence_length": transformer.seq_length,
        "num_layers": transformer.num_layers,
        "hidden_size": transformer.hidden_size,
        "ffn_hidden_size": transformer.ffn_hidden_size,
        "num_heads": transformer.num_attention_heads,
        "num_kv_heads": transformer.num_query_groups,
        "compute_dtype": str(transformer.compute_dtype),
        "sequence_parallel": bool(tpc.use_seq_parallel),
        "recompute": bool(rc.recompute),
        "select_recompute": bool(rc.select_recompute),
        "parallel_optimizer_level": level,
        "versions": {"mindformers": mindformers.__version__},
    }


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.environ.setdefault("GLOG_v", "3")
    stdout, sys.stdout = sys.stdout, sys.stderr  # MindFormers logs to stdout
    result = _loaded(sys.argv[1])
    sys.stdout = stdout
    print(json.dumps(result))


if __name__ == "__main__":
    main()
