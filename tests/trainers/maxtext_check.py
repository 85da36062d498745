"""Load a `meshtune export --to maxtext` config with MaxText's own code on
fake CPU devices and print what MaxText made of it, as JSON (one line on
stdout).

    python tests/trainers/maxtext_check.py EXPORT_FOLDER/maxtext.yml

Run in a venv with MaxText 0.2.5 (PyPI; Python 3.12 or newer) and a CPU jax
(tests/trainers/venvs.py builds one). Steps: `pyconfig.initialize` on the
file (as `python3 -m maxtext.trainers.pre_train.train maxtext.yml
run_name=...` does; `base_config` resolves to the installed base.yml), with
as many fake CPU devices as the file's ici_* and dcn_* degrees multiply to;
MaxText's device mesh (`maxtext_utils.create_device_mesh`; the fake devices
carry a slice index when the file spans several slices); and the model and
optimizer state traced abstractly by MaxText's own
`train_compile.get_shaped_inputs`, every array's sharding checked to divide
its dimensions (what materialising the state checks). Not run: a step. Not
traced: a model with Ulysses context parallelism, whose kernel refuses
devices that are not TPUs (its config is still loaded and validated; the
output's `traced` says why).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path


def _degrees(text: str, prefix: str) -> int:
    found = re.findall(rf"^{prefix}_\w+_parallelism:\s*(\d+)", text, flags=re.M)
    return math.prod(int(n) for n in found)


def _loaded(path: Path) -> dict[str, object]:
    text = path.read_text()
    devices = _degrees(text, "ici") * _degrees(text, "dcn")
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    import unittest  # noqa: F401  pyconfig raises (not sys.exit) under a test framework

    import jax
    import numpy as np
    from jax.sharding import Mesh
    from maxtext.configs import pyconfig
    from maxtext.trainers.pre_train import train_compile
    from maxtext.utils import maxtext_utils

    argv = [
        "train",
        str(path),
        "run_name=meshtune_check",
        f"base_output_directory={path.parent / 'maxtext_output'}",
        "enable_checkpointing=false",
    ]
    config = pyconfig.initialize(argv)
    fake = jax.devices()
    if config.num_slices > 1:
        per_slice = len(fake) // config.num_slices

        class SliceDevice:  # a CPU device in slice i // per_slice
            def __init__(self, device, index: int) -> None:
                self.device, self.slice_index = device, index

            def __getattr__(self, name: str):
                return getattr(self.device, name)

        fake = [SliceDevice(d, i // per_slice) for i, d in enumerate(fake)]
    grid = maxtext_utils.create_device_mesh(config, devices=fake)
    grid = np.vectorize(lambda d: getattr(d, "device", d), otypes=[object])(grid)
    mesh = Mesh(grid, config.mesh_axes)
    traced = True
    try:
        shaped, _, _, *_ = train_compile.get_shaped_inputs(mesh, config)
    except ValueError as error:
        # Ulysses' attention kernel asks the devices' platform (attention_op.py
        # AttentionOp.__init__): on fake CPU devices only the config is loaded.
        if config.context_parallel_strategy != "ulysses" or "only supported on TPU" not in str(
            error
        ):
            raise
        traced, shaped = str(error), [{}]
    leaves = [
        (jax.tree_util.keystr(p), v)
        for p, v in jax.tree_util.tree_leaves_with_path(shaped[0])
        if hasattr(v, "shape") and hasattr(v, "sharding")
    ]
    indivisible = []
    for name, value in leaves:
        try:
            value.sharding.shard_shape(value.shape)
        except ValueError as error:
            indivisible.append(f"{name} {tuple(value.shape)}: {str(error).splitlines()[0][:200]}")
    if indivisible:
        listed = "; ".join(indivisible)
        raise SystemExit(f"arrays that do not divide over their mesh axes: {listed}")
    stages = config.ici_pipeline_parallelism * config.dcn_pipeline_parallelism
    per_stage = config.num_layers_per_pipeline_stage if stages > 1 else config.num_decoder_layers
    repeats = config.num_pipeline_repeats if stages > 1 else 1
    axes = {name: int(size) for name, size in mesh.shape.items()}
    return {
        "tensor_parallel": axes.get("tensor", 1) * axes.get("tensor_sequence", 1),
        "context_parallel": axes.get("context", 1),
        "context_parallel_strategy": config.context_parallel_strategy,
        "context_parallel_load_balance": bool(config.context_parallel_load_balance),
        "pipeline_parallel": stages,
        # MaxText's expert axis also splits the dense layers' batch
        "data_parallel": axes.get("data", 1) * axes.get("fsdp", 1) * axes.get("expert", 1),
        "fsdp": axes.get("fsdp", 1),
        "expert_parallel": axes.get("expert", 1),
        "num_experts": config.num_experts if config.num_experts > 1 else None,
        "experts_per_token": config.num_experts_per_tok if config.num_experts > 1 else None,
        "mesh": {name: size for name, size in axes.items() if size > 1},
        "num_slices": config.num_slices,
        "interleave": repeats,
        "layers_per_stage_and_chunk": per_stage,
        "pipeline_parallel_layers": config.pipeline_parallel_layers,
        "micro_batches": config.num_pipeline_microbatches
        if stages > 1
        else config.gradient_accumulation_steps,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "global_batch_sequences": config.global_batch_size_to_train_on,
        "sequence_length": config.max_target_length,
        "num_layers": config.num_decoder_layers,
        "hidden_size": config.emb_dim,
        "ffn_hidden_size": config.mlp_dim,
        "num_heads": config.num_query_heads,
        "num_kv_heads": config.num_kv_heads,
        "vocab_size": config.vocab_size,
        "remat_policy": config.remat_policy,
        "dtype": str(config.dtype),
        # True, or why the model was not traced (a TPU-only kernel on CPU devices)
        "traced": traced,
    }


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.fdopen(os.dup(1), "w")  # MaxText prints on stdout: keep it for the JSON
    os.dup2(2, 1)
    result = _loaded(Path(sys.argv[1]).resolve())
    out.write(json.dumps(result) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
