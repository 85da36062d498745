"""meshtune export --to jax, from plan_gpt3.json (meshtune.plan/3, meshtune 0.1.0)
gpt3-175b: 4 x 64 tensor-parallel mesh, data parallel 1, pipeline parallel 1, 1 micro-batch(es) of 128 sequence(s), 256 chips
interleave 1, recompute full, ZeRO stage 0, FC layers meshslice
key names: jax.sharding (Mesh, PartitionSpec, NamedSharding) and jax.shard_map, jax >= 0.7
not expressed: recompute full: run_layer does not rematerialise; wrap your block in jax.checkpoint with a policy of your choice

Run `python meshslice_plan.py` to check every layer against a plain matmul.
"""

from __future__ import annotations

import sys

import numpy as np

from autotune.verify.jax_backend import ensure_devices
from autotune.verify.scale import GemmSchedule, gemm_letters, parse_expression, scale_layer
from cost_models import Dataflow, MeshShape

MESH_SHAPE = (4, 64)
AXIS_NAMES = ("row", "col")
BLOCK_SIZE = 8
# Each GEMM: (plain Table 1 expression, dataflow, transposed variant, slice count S)
GEMMS = {
    "qkv": {
        "forward": ("Y = OS(X, W)", "OS", True, 3),
        "backward_data": ("dX = LS(dY, W)", "LS", True, 4),
        "backward_weight": ("dW = RS(X, dY)", "RS", True, 4),
    },
    "attn_out": {
        "forward": ("Y = LS(X, W^T)", "LS", True, 4),
        "backward_data": ("dX = OS(dY, W^T)", "OS", True, 6),
        "backward_weight": ("dW^T = RS(dY, X)", "RS", True, 4),
    },
    "ffn_up": {
        "forward": ("Y = OS(X, W)", "OS", True, 4),
        "backward_data": ("dX = LS(dY, W)", "LS", True, 4),
        "backward_weight": ("dW = RS(X, dY)", "RS", True, 4),
    },
    "ffn_down": {
        "forward": ("Y = LS(X, W^T)", "LS", True, 4),
        "backward_data": ("dX = OS(dY, W^T)", "OS", True, 4),
        "backward_weight": ("dW^T = RS(dY, X)", "RS", True, 4),
    },
}

ensure_devices(MESH_SHAPE[0] * MESH_SHAPE[1])  # virtual CPU devices; before JAX loads

from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from autotune.verify.jax_backend import device_mesh, run_meshslice_jax  # noqa: E402

PARTITION_SPECS = {
    "qkv": {"input": ("col", "row"), "weight": ("col", "row"), "output": ("col", "row")},
    "attn_out": {"input": ("col", "row"), "weight": ("row", "col"), "output": ("col", "row")},
    "ffn_up": {"input": ("col", "row"), "weight": ("col", "row"), "output": ("col", "row")},
    "ffn_down": {"input": ("col", "row"), "weight": ("row", "col"), "output": ("col", "row")},
}
TOLERANCE = 1e-4  # float32 relative error, as `meshtune verify` allows


def mesh(transposed: bool = False):
    """The plan's jax.sharding.Mesh (axes "row", "col"); `transposed`: the
    logical mesh a transposed-variant GEMM runs its plain schedule on."""
    return device_mesh(MeshShape(*MESH_SHAPE), transposed)


def shardings(layer: str) -> dict:
    """NamedSharding of the layer's input, weight and output (logical shapes)."""
    m = mesh()
    return {name: NamedSharding(m, P(*spec)) for name, spec in PARTITION_SPECS[layer].items()}


def _operand(term, matrices):
    mat = matrices[term.name]
    return np.ascontiguousarray(mat.T) if term.transposed else mat


def run_layer(layer: str, x, w, dy) -> dict:
    """Y = X @ W, dX = dY @ W^T and dW = X^T @ dY of one layer, each by its
    planned MeshSlice schedule (shard_map over the mesh); logical layouts in
    and out (X tokens x in, W in x out, dY tokens x out)."""
    matrices = {"X": x, "W": w, "dY": dy}
    results = {}
    for expression, dataflow, transposed, num_slices in GEMMS[layer].values():
        expr = parse_expression(expression)
        a, b = _operand(expr.left, matrices), _operand(expr.right, matrices)
        c = run_meshslice_jax(
            Dataflow(dataflow), a, b, MeshShape(*MESH_SHAPE), num_slices, BLOCK_SIZE, transposed
        )
        results[expr.result.name] = c.T if expr.result.transposed else c
    return results


def smallest_sizes(layer: str) -> tuple:
    """The smallest (tokens, in_features, out_features) every GEMM of the
    layer runs on with the planned mesh, block and slice counts."""
    scheds = [
        (GemmSchedule(Dataflow(df), t, s), gemm_letters(parse_expression(e)))
        for e, df, t, s in GEMMS[layer].values()
    ]
    size = scale_layer(scheds, MeshShape(*MESH_SHAPE), BLOCK_SIZE)
    return size["T"], size["I"], size["O"]


def check() -> dict:
    """Worst relative error per layer of the planned schedules against a
    plain matmul, in float32 at each layer's smallest sizes."""
    rng = np.random.default_rng(0)
    worst = {}
    for layer in GEMMS:
        t, i, o = smallest_sizes(layer)
        x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((t, i), (i, o), (t, o)))
        want = {"Y": x @ w, "dX": dy @ w.T, "dW": x.T @ dy}
        got = run_layer(layer, x, w, dy)
        worst[layer] = max(
            float(np.max(np.abs(np.asarray(got[k]) - want[k])) / np.max(np.abs(want[k])))
            for k in got
        )
    return worst


if __name__ == "__main__":
    errors = check()
    for layer, err in errors.items():
        print(f"{layer}: worst relative error {err:.2e}")
    sys.exit(0 if all(err <= TOLERANCE for err in errors.values()) else 1)
