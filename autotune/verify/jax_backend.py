"""MeshSlice and the baselines on a real JAX device mesh (optional extra
`jax`): `shard_map` over a named `("row", "col")` mesh with `all_gather`,
`psum_scatter` and `ppermute`, the same schedules as the NumPy emulator
(:mod:`autotune.verify.algorithms`, :mod:`autotune.verify.baselines`).

On CPU it runs on virtual host devices: :func:`ensure_devices` sets
`XLA_FLAGS=--xla_force_host_platform_device_count=N` when JAX is not yet
imported (the flag is read once, at JAX's first import). On TPU or GPU the
real devices form the mesh. The transposed variant builds the logical mesh
from the transposed device grid, so its logical ROW axis runs over the
physical COL links. SUMMA's broadcast and reduce are `P - 1` single-hop
`ppermute` relays (one packet: XLA has no packet-level streaming); Cannon's
skews are direct `ppermute`s over both axes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from autotune.errors import InputError
from cost_models import Dataflow, MeshShape

_FLAG = "--xla_force_host_platform_device_count"


def ensure_devices(num_devices: int) -> None:
    """Ask for at least `num_devices` virtual CPU devices if JAX is not
    imported yet (no effect on TPU/GPU or once JAX is loaded)."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if _FLAG in flags:
        return
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={max(num_devices, 8)}".strip()


def import_jax():
    """Import jax, or raise an InputError that says how to install it."""
    try:
        import jax
    except ImportError:
        raise InputError(
            "the jax backend needs JAX, which is not installed",
            field="--backend",
            value="jax",
            fix="pip install 'meshtune[jax]' (or use --backend numpy)",
        ) from None
    return jax


def device_mesh(mesh: MeshShape, transposed: bool = False):
    """A `jax.sharding.Mesh` with axes ("row", "col") over the first
    `num_chips` devices; transposed: the logical mesh of the twin."""
    jax = import_jax()
    devices = jax.devices()
    if len(devices) < mesh.num_chips:
        raise InputError(
            f"the {mesh} mesh needs {mesh.num_chips} devices but JAX sees {len(devices)}",
            field="--backend",
            value="jax",
            fix=f"run with XLA_FLAGS={_FLAG}={mesh.num_chips} on CPU, or on a larger slice",
        )
    grid = np.array(devices[: mesh.num_chips]).reshape(mesh.num_rows, mesh.num_cols)
    return jax.sharding.Mesh(grid.T if transposed else grid, ("row", "col"))


# -- local kernels (run per device inside shard_map) -------------------------


def _slice(x, dim: int, num_slices: int, block: int, index: int):
    """Blocked slice `index` along local `dim` (seed 000 algorithm 2)."""
    if num_slices == 1:
        return x
    rows, cols = x.shape
    if dim == 0:
        return x.reshape(rows // (block * num_slices), num_slices, block, cols)[:, index].reshape(
            rows // num_slices, cols
        )
    return x.reshape(rows, cols // (block * num_slices), num_slices, block)[:, :, index].reshape(
        rows, cols // num_slices
    )


def _interleave(pieces: list, dim: int, block: int):
    """Inverse of :func:`_slice` over all slices."""
    import jax.numpy as jnp

    num_slices = len(pieces)
    if num_slices == 1:
        return pieces[0]
    rows, cols = pieces[0].shape
    if dim == 0:
        parts = [p.reshape(rows // block, block, cols) for p in pieces]
        return jnp.stack(parts, axis=1).reshape(rows * num_slices, cols)
    parts = [p.reshape(rows, cols // block, block) for p in pieces]
    return jnp.stack(parts, axis=2).reshape(rows, cols * num_slices)


def meshslice_kernel(dataflow: Dataflow, num_slices: int, block: int) -> Callable:
    """MeshSlice on one device's shards (model.md section 6)."""
    from jax import lax

    def os_kernel(a, b):
        out = None
        for s in range(num_slices):
            a_all = lax.all_gather(_slice(a, 1, num_slices, block, s), "col", axis=1, tiled=True)
            b_all = lax.all_gather(_slice(b, 0, num_slices, block, s), "row", axis=0, tiled=True)
            out = a_all @ b_all if out is None else out + a_all @ b_all
        return out

    def ls_kernel(a, b):
        pieces = []
        for s in range(num_slices):
            b_all = lax.all_gather(_slice(b, 0, num_slices, block, s), "row", axis=0, tiled=True)
            pieces.append(lax.psum_scatter(a @ b_all.T, "col", scatter_dimension=1, tiled=True))
        return _interleave(pieces, 1, block)

    def rs_kernel(a, b):
        pieces = []
        for s in range(num_slices):
            a_all = lax.all_gather(_slice(a, 1, num_slices, block, s), "col", axis=1, tiled=True)
            pieces.append(lax.psum_scatter(a_all.T @ b, "row", scatter_dimension=0, tiled=True))
        return _interleave(pieces, 0, block)

    return {Dataflow.OS: os_kernel, Dataflow.LS: ls_kernel, Dataflow.RS: rs_kernel}[dataflow]


def compile_gemm(kernel: Callable, jmesh) -> Callable:
    """jit(shard_map(kernel)) over global operands sharded rows over "row"
    and columns over "col"."""
    jax = import_jax()
    spec = jax.sharding.PartitionSpec("row", "col")
    mapped = jax.shard_map(
        kernel, mesh=jmesh, in_specs=(spec, spec), out_specs=spec, check_vma=False
    )
    return jax.jit(mapped)


def place(x: np.ndarray, jmesh):
    """Put a global array on the mesh, rows over "row", columns over "col"."""
    jax = import_jax()
    spec = jax.sharding.PartitionSpec("row", "col")
    return jax.device_put(x, jax.sharding.NamedSharding(jmesh, spec))


def run_meshslice_jax(
    dataflow: Dataflow,
    a: np.ndarray,
    b: np.ndarray,
    mesh: MeshShape,
    num_slices: int,
    block: int,
    transposed: bool = False,
) -> np.ndarray:
    """MeshSlice of global `a`, `b` on the device mesh; returns C."""
    from autotune.verify.algorithms import check_meshslice, gemm_dims

    check_meshslice(dataflow, *gemm_dims(dataflow, a, b), mesh, num_slices, block, transposed)
    jmesh = device_mesh(mesh, transposed)
    fn = compile_gemm(meshslice_kernel(dataflow, num_slices, block), jmesh)
    return np.asarray(fn(place(a, jmesh), place(b, jmesh)))


def time_call(fn: Callable, *args, repeats: int = 5) -> float:
    """Median seconds of `fn(*args)` after one warm-up (compile) run."""
    fn(*args).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def verify_engine(num_devices: int):
    """The engine `meshtune verify --backend jax` runs: MeshSlice on the
    device mesh in float64 on CPU (x64 enabled) and float32 elsewhere."""
    ensure_devices(num_devices)
    jax = import_jax()
    on_cpu = jax.default_backend() == "cpu"
    if on_cpu:
        jax.config.update("jax_enable_x64", True)
    dtype = np.float64 if on_cpu else np.float32

    def engine(dataflow, a, b, mesh, num_slices, block, transposed):
        return run_meshslice_jax(dataflow, a, b, mesh, num_slices, block, transposed), None

    return engine, dtype
