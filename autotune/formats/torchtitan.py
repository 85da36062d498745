"""The torchtitan export: the TOML job config (`--job.config_file`) for 1D
plans (torchtitan's tensor parallelism is Megatron-style, one axis).

Key names and value sets: torchtitan 0.2.0 (PyPI), `torchtitan/config/
job_config.py`, the last release whose `ConfigManager` reads TOML (0.3.0
replaced it with Python config registries): sections `job`, `training`,
`parallelism`, `activation_checkpoint` (`mode`: selective, full,
memory_budget, none) and `compile` (`enable`, `components`); pipeline
schedule names are those of `torch.distributed.pipelining` ("1F1B").
Async tensor parallelism (`enable_async_tensor_parallel`) only takes effect
with `compile.enable`, as the config's own documentation says.
"""

from __future__ import annotations

import json

from autotune.formats.export import (
    NO_OPTIMIZER_SHARDING,
    NO_RECOMPUTE,
    Export,
    ExportFile,
    Notes,
    commented,
    finish,
    header_lines,
    needs_1d,
)
from autotune.formats.megatron import mismatches
from autotune.formats.plan_view import PlanView

KEYS_FROM = "torchtitan 0.2.0 torchtitan/config/job_config.py (TOML job config)"
FILE_NAME = "torchtitan.toml"
_PRECISION = {"bf16": "bfloat16", "fp32": "float32"}


def _toml(sections: dict[str, dict[str, object]]) -> str:
    # Strings, integers, booleans and lists of strings: JSON spells them as TOML does.
    out = []
    for name, values in sections.items():
        out.append(f"\n[{name}]\n")
        out += [f"{key} = {json.dumps(value)}\n" for key, value in values.items()]
    return "".join(out)


def export_torchtitan(view: PlanView) -> Export:
    """torchtitan.toml: parallel degrees, batch, pipeline schedule,
    activation checkpointing and async tensor parallelism."""
    needs_1d(view, "torchtitan", "torchtitan")
    notes = Notes()
    t, m = view.training, view.model
    tp = view.tensor_parallel
    training: dict[str, object] = {
        "local_batch_size": t.global_batch_sequences // t.data_parallel,
        "global_batch_size": t.global_batch_sequences,
        "seq_len": t.sequence_length,
    }
    if t.dtype.value in _PRECISION:
        training["mixed_precision_param"] = _PRECISION[t.dtype.value]
    else:
        notes.drop(f"dtype {t.dtype.value}: torchtitan's mixed precision is bfloat16 or float32")
    parallelism: dict[str, object] = {
        "data_parallel_replicate_degree": t.data_parallel,
        "data_parallel_shard_degree": 1,
        "tensor_parallel_degree": tp,
        "pipeline_parallel_degree": t.pipeline_parallel,
        "context_parallel_degree": 1,
    }
    if t.pipeline_parallel > 1:
        parallelism["pipeline_parallel_schedule"] = "1F1B"
        parallelism["pipeline_parallel_microbatch_size"] = t.micro_batch_sequences
        notes.assume("pipeline schedule 1F1B: the plan counts one chunk per stage")
    elif t.micro_batches > 1:
        notes.drop(
            f"micro_batches {t.micro_batches} without pipeline parallelism: torchtitan has no "
            "gradient-accumulation key in this version"
        )
    sliced = any(g.num_slices > 1 for layer in view.doc.layers for g in layer.gemms)
    sections: dict[str, dict[str, object]] = {
        "job": {"description": f"{m.name}: meshtune plan {view.source_name}"},
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": "none"},
    }
    notes.assume(NO_RECOMPUTE + "; activation_checkpoint.mode none")
    notes.assume(NO_OPTIMIZER_SHARDING + "; data_parallel_shard_degree 1 (no FSDP)")
    if tp > 1 and sliced:
        parallelism["enable_async_tensor_parallel"] = True
        sections["compile"] = {"enable": True, "components": ["model"]}
        notes.drop(
            "per-GEMM slice counts: async tensor parallelism splits each collective matmul "
            f"into tp = {tp} steps, not the planned S"
        )
    notes.not_expressed += [f"{line} (torchtitan's TP plan fixes it)" for line in mismatches(view)]
    notes.drop(
        f"model {m.name} ({m.num_layers} layers, hidden {m.hidden_size}): torchtitan builds "
        "models from model.name and model.flavor in its registry; choose the flavor with "
        "these dimensions"
    )
    head = commented(header_lines(view, "torchtitan", KEYS_FROM, notes))
    usage = "# use: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml\n"
    return finish("torchtitan", [ExportFile(FILE_NAME, head + usage + _toml(sections))], notes)
