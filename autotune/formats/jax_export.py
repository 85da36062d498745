"""The JAX export: one Python module holding the plan's mesh, every FC
tensor's `PartitionSpec` and each GEMM's MeshSlice schedule, runnable with
`shard_map` through meshtune's verify backend
(:mod:`autotune.verify.jax_backend`, the code `meshtune verify --backend jax`
checks against a plain matmul).

Only the FC layers are planned, so only they are written (attention, norms
and embeddings stay the user's). `python meshslice_plan.py` runs every
planned layer's three GEMMs at the smallest sizes that keep the mesh,
dataflows, variants, block and slice counts
(:func:`autotune.verify.scale.scale_layer`) on the plan's mesh (virtual CPU
devices when no accelerator is present) and checks them against NumPy;
`run_layer` runs them on arrays of the real sizes on TPU or GPU.

Key names are JAX's own (`jax.sharding.Mesh`, `PartitionSpec`,
`jax.shard_map`), as of jax 0.7.
"""

from __future__ import annotations

import json

from autotune.formats.export import (
    Export,
    ExportFile,
    Notes,
    finish,
    header_lines,
)
from autotune.formats.plan_view import PlanView
from autotune.plan.schema import GemmDoc, LayerDoc
from autotune.verify.scale import Expression, gemm_letters, parse_expression, untwin

FILE_NAME = "meshslice_plan.py"
KEYS_FROM = "jax.sharding (Mesh, PartitionSpec, NamedSharding) and jax.shard_map, jax >= 0.7"

_BODY = '''
from __future__ import annotations

import sys

import numpy as np

from autotune.verify.jax_backend import ensure_devices
from autotune.verify.scale import GemmSchedule, gemm_letters, parse_expression, scale_layer
from cost_models import Dataflow, MeshShape

ensure_devices(MESH_SHAPE[0] * MESH_SHAPE[1])  # virtual CPU devices; before JAX loads

from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from autotune.verify.jax_backend import device_mesh, run_meshslice_jax  # noqa: E402

PARTITION_SPECS = {{
{specs}}}
TOLERANCE = 1e-4  # float32 relative error, as `meshtune verify` allows


def mesh(transposed: bool = False):
    """The plan's jax.sharding.Mesh (axes "row", "col"); `transposed`: the
    logical mesh a transposed-variant GEMM runs its plain schedule on."""
    return device_mesh(MeshShape(*MESH_SHAPE), transposed)


def shardings(layer: str) -> dict:
    """NamedSharding of the layer's input, weight and output (logical shapes)."""
    m = mesh()
    return {{name: NamedSharding(m, P(*spec)) for name, spec in PARTITION_SPECS[layer].items()}}


def _operand(term, matrices):
    mat = matrices[term.name]
    return np.ascontiguousarray(mat.T) if term.transposed else mat


def run_layer(layer: str, x, w, dy) -> dict:
    """Y = X @ W, dX = dY @ W^T and dW = X^T @ dY of one layer, each by its
    planned MeshSlice schedule (shard_map over the mesh); logical layouts in
    and out (X tokens x in, W in x out, dY tokens x out)."""
    matrices = {{"X": x, "W": w, "dY": dy}}
    results = {{}}
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
    worst = {{}}
    for layer in GEMMS:
        t, i, o = smallest_sizes(layer)
        x, w, dy = (rng.standard_normal(s).astype(np.float32) for s in ((t, i), (i, o), (t, o)))
        want = {{"Y": x @ w, "dX": dy @ w.T, "dW": x.T @ dy}}
        got = run_layer(layer, x, w, dy)
        worst[layer] = max(
            float(np.max(np.abs(np.asarray(got[k]) - want[k])) / np.max(np.abs(want[k])))
            for k in got
        )
    return worst


if __name__ == "__main__":
    errors = check()
    for layer, err in errors.items():
        print(f"{{layer}}: worst relative error {{err:.2e}}")
    sys.exit(0 if all(err <= TOLERANCE for err in errors.values()) else 1)
'''


def plain_expression(layer: LayerDoc, g: GemmDoc) -> Expression | None:
    """The GEMM's expression in the plain form its logical schedule takes
    operands in (a transposed GEMM's expression is its twin: untwin it),
    checked against the plan's dataflow and m, n, k; None when it does not
    fit (as `meshtune verify` reads it)."""
    expr = parse_expression(g.expression)
    if expr is None:
        return None
    sizes = {"T": layer.tokens, "I": layer.in_features, "O": layer.out_features}
    for form in [untwin(expr), expr] if g.transposed else [expr]:
        letters = gemm_letters(form)
        if form.dataflow.value != g.dataflow or letters is None:
            continue
        if tuple(sizes[c] for c in letters) == (g.m, g.n, g.k):
            return form
    return None


def _term(t) -> str:
    return t.name + ("^T" if t.transposed else "")


def _gemm_table(view: PlanView, notes: Notes) -> str:
    rows = []
    for layer in view.doc.layers:
        entries = []
        for g in layer.gemms:
            form = plain_expression(layer, g)
            if form is None:
                notes.drop(
                    f"{layer.name} {g.gemm_pass}: expression {g.expression!r} does not match "
                    "its dataflow and sizes, so the layer is left out of GEMMS"
                )
                entries = None
                break
            text = f"{_term(form.result)} = {form.dataflow.value}({_term(form.left)}, "
            text += f"{_term(form.right)})"
            entries.append(
                f'        "{g.gemm_pass}": ("{text}", "{g.dataflow}", {g.transposed}, '
                f"{g.num_slices}),\n"
            )
        if entries:
            rows.append(f'    "{layer.name}": {{\n' + "".join(entries) + "    },\n")
    return "GEMMS = {\n" + "".join(rows) + "}\n"


def _specs(view: PlanView) -> str:
    lines = []
    for layer in view.doc.layers:
        parts = ", ".join(
            f'"{t.name}": ({", ".join(json.dumps(a) for a in t.partition_spec)})'
            for t in layer.tensors
        )
        lines.append(f'    "{layer.name}": {{{parts}}},\n')
    return "".join(lines)


def export_jax(view: PlanView) -> Export:
    """The runnable module (mesh, partition specs, MeshSlice GEMMs)."""
    notes = Notes()
    t = view.training
    if view.recompute != "none":
        notes.drop(
            f"recompute {view.recompute}: run_layer does not rematerialise; wrap your block "
            "in jax.checkpoint with a policy of your choice"
        )
    if view.zero_stage > 0 and t.data_parallel > 1:
        notes.drop(
            f"ZeRO stage {view.zero_stage}: optimizer state lives outside this module; shard "
            "it over your data-parallel axis"
        )
    if t.data_parallel > 1 or t.pipeline_parallel > 1:
        notes.drop(
            f"data parallel {t.data_parallel} and pipeline parallel {t.pipeline_parallel} "
            f"(interleave {view.interleave}, {view.micro_batches} micro-batch(es)): "
            "this module covers one tensor-parallel group's FC layers; add the outer axes "
            "to your own mesh"
        )
    if view.context_parallel > 1:
        notes.drop(
            f"context parallel {view.context_parallel} ({view.context_comm}): the FC layers' "
            f"tokens are each chip's 1/{view.context_parallel} of every sequence; split "
            "sequences over a context axis of your mesh and exchange keys and values in your "
            "attention"
        )
    for tr in view.doc.fc.transposes:
        notes.drop(
            f"transpose at {tr.where} ({tr.rows} x {tr.cols}, every block, forward and "
            "backward): run_layer takes and returns logical layouts, so the layout change "
            "between layers is left to the model code"
        )
    gemms = _gemm_table(view, notes)
    doc = '"""' + "\n".join(header_lines(view, "jax", KEYS_FROM, notes))
    doc += "\n\nRun `python meshslice_plan.py` to check every layer against a plain matmul.\n"
    doc += '"""\n'
    consts = (
        f"\nMESH_SHAPE = ({view.num_rows}, {view.num_cols})\n"
        f'AXIS_NAMES = ("row", "col")\n'
        f"BLOCK_SIZE = {view.doc.mesh.block_size}\n"
        "# Each GEMM: (plain Table 1 expression, dataflow, transposed variant, slice count S)\n"
        + gemms
    )
    body = _BODY.format(specs=_specs(view))
    # Constants first: the body's device setup reads MESH_SHAPE.
    head, rest = body.split("ensure_devices(MESH_SHAPE", 1)
    text = doc + head.rstrip("\n") + "\n" + consts + "\nensure_devices(MESH_SHAPE" + rest
    return finish("jax", [ExportFile(FILE_NAME, text)], notes)
