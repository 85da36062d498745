"""The MindFormers export: `parallel_config`, `recompute_config` and the
model's pipeline `offset`, from a plan.

The offset and recompute lists are the ones `meshtune pipeline` writes
(:func:`autotune.pipeline.result.seed_config`), here for the plan's even
layer split (:func:`autotune.pipeline.assignment.even_layer_split`: the
remainder on the last stages) with no layer recomputed, which is what the
plan's step time assumes. Balanced, memory-aware lists come from `meshtune
pipeline`.

Key names: mindspore-lab/mindformers `configs/llama2/pretrain_llama2_70b.yaml`
at commit 243b72b3 (`parallel_config.{data_parallel, model_parallel,
pipeline_stage, use_seq_parallel, micro_batch_num}`, `recompute_config.
{recompute, select_recompute}`, `model.model_config.{seq_length,
hidden_size, num_layers, num_heads, n_kv_heads, vocab_size, offset,
compute_dtype}`) and its recomputation guide for `select_comm_recompute`.
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
)
from autotune.formats.plan_view import PlanView
from autotune.pipeline.assignment import even_layer_split, uniform_assignment
from autotune.pipeline.problem import EndBlock, LayerGroup, Problem, RecomputeOption, Schedule
from autotune.pipeline.result import SeedConfig, seed_config

KEYS_FROM = (
    "mindspore-lab/mindformers configs/llama2/pretrain_llama2_70b.yaml @ 243b72b3 "
    "and its recomputation guide (select_comm_recompute)"
)
FILE_NAME = "mindformers.yaml"
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def even_split_lists(view: PlanView) -> SeedConfig:
    """The seed framework's lists for the plan's stages: even layer split,
    no recomputation (times and memories play no part in them, so the
    problem carries unit times and no memory)."""
    t = view.training
    nothing = EndBlock(forward_s=0.0, backward_s=0.0, memory_bytes=0.0)
    problem = Problem(
        num_stages=t.pipeline_parallel,
        num_chunks=1,
        num_micro_batches=t.micro_batches,
        schedule=Schedule.ONE_F_ONE_B,
        min_layers_per_chunk=0,
        options=(RecomputeOption("none", 0.0),),
        # unit time and no memory: the lists depend on layer counts only
        groups=(LayerGroup("block", view.model.num_layers, 1.0, 1.0, 0.0, (0.0,)),),
        head=nothing,
        tail=nothing,
        constant_bytes=0.0,
        memory_cap_bytes=1.0,
    )
    return seed_config(problem, uniform_assignment(problem, even_layer_split(problem), 0))


def _yaml(tree: dict[str, object], indent: str = "") -> str:
    out = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:\n{_yaml(value, indent + '  ')}")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}\n")
    return "".join(out)


def export_mindformers(view: PlanView) -> Export:
    """mindformers.yaml with the parallel, recompute and model sections."""
    notes = Notes()
    t, m = view.training, view.model
    pp = t.pipeline_parallel
    parallel: dict[str, object] = {"data_parallel": t.data_parallel}
    if view.is_1d:
        parallel["model_parallel"] = view.tensor_parallel
        parallel["use_seq_parallel"] = view.tensor_parallel > 1
    else:
        notes.drop(
            f"model_parallel: the plan's {view.num_rows} x {view.num_cols} 2D tensor "
            "parallelism has no MindFormers key (model_parallel is one axis); export --to jax"
        )
    parallel["pipeline_stage"] = pp
    parallel["micro_batch_num"] = t.micro_batches
    lists = even_split_lists(view)
    one = pp == 1  # a single stage takes scalars, several take per-stage lists
    recompute = {
        "recompute": False if one else lists.recompute,
        "select_recompute": False if one else lists.select_recompute,
        "select_comm_recompute": False if one else lists.select_comm_recompute,
    }
    notes.assume(NO_RECOMPUTE + "; recompute lists all zero")
    notes.assume(NO_OPTIMIZER_SHARDING)
    if not one:
        notes.assume(
            "even layer split (remainder on the last stages): the plan does not balance "
            "stages; `meshtune pipeline` does"
        )
    model: dict[str, object] = {
        "seq_length": t.sequence_length,
        "hidden_size": m.hidden_size,
        "num_layers": m.num_layers,
        "num_heads": m.num_heads,
    }
    if m.kv_heads != m.num_heads:
        model["n_kv_heads"] = m.kv_heads
    if m.vocab_size is not None:
        model["vocab_size"] = m.vocab_size
    if t.dtype.value in _DTYPES:
        model["compute_dtype"] = _DTYPES[t.dtype.value]
    else:
        notes.drop(f"dtype {t.dtype.value}: MindFormers' compute_dtype has no such value")
    model["offset"] = 0 if one else lists.offset
    notes.drop(
        "per-layer dataflows and slice counts: MindFormers shards FC layers by its own "
        "parallel strategy"
    )
    head = commented(header_lines(view, "mindformers", KEYS_FROM, notes))
    usage = "# use: merge into your model's MindFormers YAML (these keys replace its own)\n"
    tree = {
        "parallel_config": parallel,
        "recompute_config": recompute,
        "model": {"model_config": model},
    }
    return finish("mindformers", [ExportFile(FILE_NAME, head + usage + _yaml(tree))], notes)
