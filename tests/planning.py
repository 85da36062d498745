"""Shared test helpers: write a plan file and plan it in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from autotune.job.plan import Plan, make_plan
from autotune.loading import load_plan_input

#: an 8-layer Llama-3-8B-shaped model (SwiGLU, GQA, rotary) for tests
LLAMA = {
    "name": "llama-ish",
    "num_layers": 8,
    "hidden_size": 4096,
    "num_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "ffn_size": 14336,
    "ffn_kind": "swiglu",
    "vocab_size": 128256,
    "position_encoding": "rotary",
}

#: the whole Llama-3-8B shape (32 layers)
LLAMA3_8B = {**LLAMA, "name": "llama3-8b-shape", "num_layers": 32}

#: the degrees a file must give to pin one configuration, with the values
#: that keep a test's meaning when it does not say (one replica, one stage,
#: one micro-batch, no recomputation, ZeRO 0)
#: one HGX H100 node as 8 data-parallel ranks and 8 expert ranks, 4,096-token
#: micro-batches, FP8 current scaling
EP8_FP8 = {
    "global_batch_sequences": 8,
    "sequence_length": 4096,
    "tensor_parallel": 1,
    "data_parallel": 8,
    "expert_parallel": 8,
    "fp8": "current",
}


PINNED = {
    "data_parallel": 1,
    "pipeline_parallel": 1,
    "context_parallel": 1,
    "interleave": 1,
    "recompute": "none",
    "zero_stage": 0,
}


def write_plan(
    tmp_path: Path,
    model: dict | str,
    training: dict,
    cluster: dict | str,
    name: str = "plan.yaml",
    **sections: object,
) -> Path:
    """A plan file with these sections (calibration, search, constraints)."""
    path = tmp_path / name
    data = {"model": model, "training": training, "cluster": cluster, **sections}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def pinned(training: dict) -> dict:
    """`training` with every degree it leaves out pinned (PINNED; one
    micro-batch unless a size or count is given)."""
    out = {**PINNED, **training}
    if "micro_batch_size" not in out and "micro_batches" not in out:
        out["micro_batches"] = 1
    return out


def plan_for(
    tmp_path: Path,
    model: dict | str,
    training: dict,
    cluster: dict | str = "a100-hgx-4n",
    *,
    suggest_better: bool = False,
    **sections: object,
) -> Plan:
    """Plan a file written from these sections, in-process."""
    path = write_plan(tmp_path, model, training, cluster, **sections)
    return make_plan(load_plan_input(path), suggest_better=suggest_better)


def transformers_and_torch():
    """transformers and torch: required in CI (the test extra installs them),
    skipped elsewhere when absent."""
    if os.environ.get("CI"):
        import torch
        import transformers
    else:
        transformers = pytest.importorskip("transformers")
        torch = pytest.importorskip("torch")
    return transformers, torch
