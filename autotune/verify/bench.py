"""`meshtune bench`: measure collectives along each mesh axis and local
GEMMs on a JAX device mesh and write meshtune's benchmark CSV, the input of
`meshtune calibrate`.

CSV (fixed format, docs/calibrate.md): header
`kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups`;
`collective` rows fill op (all_gather | reduce_scatter | all_to_all |
send_recv), axis (row | col), ring_size and shard_bytes (the per-chip
piece: the input piece of an all-gather, the output piece of a
reduce-scatter, the piece sent to each chip of an all-to-all, the message
of a send-recv, which is one hop: ring_size 2) and leave m, n, k empty;
`gemm` rows fill m, n, k and leave the collective columns empty;
`grouped_gemm` rows add `groups` (that many GEMMs of `m` rows each in one
grouped kernel, `lax.ragged_dot`, as a mixture of experts runs its
experts); `overlap` rows fill both (a GEMM timed beside an all-gather);
`#` lines are comments.

The fit of `launch + (P-1) * (sync + shard/bw)` needs two ring sizes per
axis, so by default every mesh shape `R x C` of the devices with both sides
at least 2 is measured (8 devices: 2x4 and 4x2 give rings of 2 and 4 on
each axis).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autotune.verify.jax_backend import device_mesh, ensure_devices, import_jax, time_call
from cost_models import Axis, CollectiveOp, MeshShape

CSV_HEADER = "kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds,groups"
NUMPY_DTYPES = {"fp32": np.float32, "bf16": "bfloat16", "fp16": np.float16}

# Per-chip pieces from 4 KiB to 1 MiB (x4): small enough for CPU hosts,
# wide enough to separate latency from bandwidth.
DEFAULT_SHARD_BYTES = (4096, 16384, 65536, 262144, 1048576)
QUICK_SHARD_BYTES = (4096, 65536, 262144)
# Square GEMMs for the rate and thin ones for the efficiency curve.
DEFAULT_GEMMS = (
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (1024, 1024, 64),
    (1024, 64, 1024),
    (64, 1024, 1024),
)
QUICK_GEMMS = ((128, 128, 128), (256, 256, 256), (256, 256, 32), (32, 256, 256))
# Grouped GEMMs (groups, rows per group, n, k): one expert layer's shapes at
# falling tokens per expert, the regime a mixture of experts' grouped GEMMs
# run in as expert parallelism grows.
DEFAULT_GROUPED_GEMMS = (
    (4, 256, 512, 256),
    (8, 128, 512, 256),
    (16, 64, 512, 256),
    (32, 32, 512, 256),
)
QUICK_GROUPED_GEMMS = ((4, 64, 256, 128), (16, 16, 256, 128))


@dataclass(frozen=True)
class BenchRow:
    """One measurement of the benchmark CSV (seconds, bytes, elements)."""

    kind: str
    dtype: str
    seconds: float
    op: str = ""
    axis: str = ""
    ring_size: int | None = None
    shard_bytes: int | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    groups: int | None = None


@dataclass(frozen=True)
class BenchConfig:
    """What to measure."""

    meshes: tuple[MeshShape, ...]
    shard_bytes: tuple[int, ...]
    gemms: tuple[tuple[int, int, int], ...]
    dtype: str
    repeats: int
    grouped_gemms: tuple[tuple[int, int, int, int], ...] = DEFAULT_GROUPED_GEMMS


def default_meshes(num_devices: int) -> tuple[MeshShape, ...]:
    """Every `R x C` with `R * C <= num_devices`, `R, C >= 2`, using as many
    devices as possible (largest product first)."""
    best = max(
        (r * c for r in range(2, num_devices + 1) for c in range(2, num_devices + 1)
         if r * c <= num_devices),
        default=0,
    )  # fmt: skip
    return tuple(
        MeshShape(r, best // r) for r in range(2, best + 1) if best % r == 0 and best // r >= 2
    )


def _collective_fn(op: CollectiveOp, axis: Axis, jmesh) -> Callable:
    jax = import_jax()
    from jax import lax

    name = axis.value

    def kernel(x):
        if op is CollectiveOp.ALL_GATHER:
            return lax.all_gather(x, name, axis=1, tiled=True)
        if op is CollectiveOp.ALL_TO_ALL:
            return lax.all_to_all(x, name, split_axis=1, concat_axis=1, tiled=True)
        return lax.psum_scatter(x, name, scatter_dimension=1, tiled=True)

    spec = jax.sharding.PartitionSpec("row", "col")
    mapped = jax.shard_map(kernel, mesh=jmesh, in_specs=(spec,), out_specs=spec, check_vma=False)
    return jax.jit(mapped)


def bench_collectives(config: BenchConfig, progress: Callable[[str], None]) -> list[BenchRow]:
    """All-gather, reduce-scatter and all-to-all along each axis of each
    mesh, per shard size."""
    jax = import_jax()
    dtype = np.dtype(NUMPY_DTYPES[config.dtype]) if config.dtype != "bf16" else None
    jnp_dtype = jax.numpy.bfloat16 if config.dtype == "bf16" else dtype
    itemsize = 2 if config.dtype == "bf16" else dtype.itemsize
    rows = []
    for mesh in config.meshes:
        jmesh = device_mesh(mesh)
        for axis in (Axis.ROW, Axis.COL):
            ring = mesh.size(axis)
            if ring < 2:
                continue
            for op in (
                CollectiveOp.ALL_GATHER,
                CollectiveOp.REDUCE_SCATTER,
                CollectiveOp.ALL_TO_ALL,
            ):
                fn = _collective_fn(op, axis, jmesh)
                for shard in config.shard_bytes:
                    elems = max(1, shard // itemsize)
                    # reduce-scatter's input is `ring` output pieces; an
                    # all-to-all's is one piece for each chip of the ring
                    whole = op in (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL)
                    local = elems * (ring if whole else 1)
                    host = np.ones((mesh.num_rows, mesh.num_cols * local), dtype=np.float32)
                    x = jax.device_put(
                        host.astype(jnp_dtype),
                        jax.sharding.NamedSharding(jmesh, jax.sharding.PartitionSpec("row", "col")),
                    )
                    seconds = time_call(fn, x, repeats=config.repeats)
                    rows.append(
                        BenchRow(
                            kind="collective",
                            op=op.value,
                            axis=axis.value,
                            ring_size=ring,
                            shard_bytes=elems * itemsize,
                            dtype=config.dtype,
                            seconds=seconds,
                        )
                    )
                progress(f"{mesh} {axis.value} {op.value}: {len(config.shard_bytes)} sizes")
    return rows


def _put(jax, jmesh, host: np.ndarray, dtype):
    spec = jax.sharding.PartitionSpec("row", "col")
    return jax.device_put(host.astype(dtype), jax.sharding.NamedSharding(jmesh, spec))


def _jnp_dtype(jax, name: str):
    return jax.numpy.bfloat16 if name == "bf16" else NUMPY_DTYPES[name]


def _itemsize(name: str) -> int:
    return 2 if name == "bf16" else np.dtype(NUMPY_DTYPES[name]).itemsize


def bench_send_recv(config: BenchConfig, progress: Callable[[str], None]) -> list[BenchRow]:
    """Every chip sends its piece to its ring neighbour along each axis
    (`lax.ppermute`, one hop): written with `ring_size = 2` (one step of
    the ring model, whatever the ring) and `shard_bytes` = the message,
    the convention of sendrecv_perf logs (docs/calibrate.md)."""
    jax = import_jax()
    from jax import lax

    rows = []
    mesh = config.meshes[0]
    jmesh = device_mesh(mesh)
    spec = jax.sharding.PartitionSpec("row", "col")
    for axis in (Axis.ROW, Axis.COL):
        ring = mesh.size(axis)
        if ring < 2:
            continue
        perm = [(i, (i + 1) % ring) for i in range(ring)]

        def kernel(x, name=axis.value, perm=perm):
            return lax.ppermute(x, name, perm)

        fn = jax.jit(
            jax.shard_map(kernel, mesh=jmesh, in_specs=(spec,), out_specs=spec, check_vma=False)
        )
        for shard in config.shard_bytes:
            elems = max(1, shard // _itemsize(config.dtype))
            host = np.ones((mesh.num_rows, mesh.num_cols * elems), dtype=np.float32)
            x = _put(jax, jmesh, host, _jnp_dtype(jax, config.dtype))
            rows.append(
                BenchRow(
                    kind="collective",
                    op=CollectiveOp.SEND_RECV.value,
                    axis=axis.value,
                    ring_size=2,
                    shard_bytes=elems * _itemsize(config.dtype),
                    dtype=config.dtype,
                    seconds=time_call(fn, x, repeats=config.repeats),
                )
            )
        progress(f"{mesh} {axis.value} send_recv: {len(config.shard_bytes)} sizes")
    return rows


class _Ready:
    """Both outputs of a two-output program, waitable like one array."""

    def __init__(self, outputs) -> None:
        self.outputs = outputs

    def block_until_ready(self) -> _Ready:
        import_jax().block_until_ready(self.outputs)
        return self


def bench_overlap(config: BenchConfig, progress: Callable[[str], None]) -> list[BenchRow]:
    """The largest GEMM of the sweep computed on every chip while an
    independent all-gather of the largest piece runs along each axis, in
    one program (XLA may overlap them): `overlap` rows, the time of the
    pair. With the GEMM alone (a `gemm` row of the same shape), calibrate
    derives the compute slowdown (autotune.calibrate.fit_overlap)."""
    jax = import_jax()
    from jax import lax

    mesh = config.meshes[0]
    jmesh = device_mesh(mesh)
    m, n, k = max(config.gemms, key=lambda g: g[0] * g[1] * g[2])
    dtype = _jnp_dtype(jax, config.dtype)
    spec = jax.sharding.PartitionSpec("row", "col")
    rows = []
    shard = max(config.shard_bytes)
    elems = max(1, shard // _itemsize(config.dtype))
    for axis in (Axis.ROW, Axis.COL):
        ring = mesh.size(axis)
        if ring < 2:
            continue

        def kernel(x, a, b, name=axis.value):
            return lax.all_gather(x, name, axis=1, tiled=True), a @ b

        fn = jax.jit(
            jax.shard_map(
                kernel,
                mesh=jmesh,
                in_specs=(spec, spec, spec),
                out_specs=(spec, spec),
                check_vma=False,
            )
        )
        x = _put(jax, jmesh, np.ones((mesh.num_rows, mesh.num_cols * elems), np.float32), dtype)
        a = _put(jax, jmesh, np.ones((mesh.num_rows * m, mesh.num_cols * k), np.float32), dtype)
        b = _put(jax, jmesh, np.ones((mesh.num_rows * k, mesh.num_cols * n), np.float32), dtype)
        rows.append(
            BenchRow(
                kind="overlap",
                op=CollectiveOp.ALL_GATHER.value,
                axis=axis.value,
                ring_size=ring,
                shard_bytes=elems * _itemsize(config.dtype),
                m=m,
                n=n,
                k=k,
                dtype=config.dtype,
                seconds=time_call(
                    lambda *args, fn=fn: _Ready(fn(*args)), x, a, b, repeats=config.repeats
                ),
            )
        )
    progress(f"{mesh} overlap: gemm {m}x{n}x{k} beside an all-gather of {shard} B per axis")
    return rows


def bench_gemms(config: BenchConfig, progress: Callable[[str], None]) -> list[BenchRow]:
    """Local GEMMs on one device."""
    jax = import_jax()
    jnp = jax.numpy
    dtype = jnp.bfloat16 if config.dtype == "bf16" else NUMPY_DTYPES[config.dtype]
    matmul = jax.jit(lambda a, b: a @ b)
    rows = []
    for m, n, k in config.gemms:
        a = jnp.ones((m, k), dtype=dtype)
        b = jnp.ones((k, n), dtype=dtype)
        seconds = time_call(matmul, a, b, repeats=config.repeats)
        rows.append(BenchRow(kind="gemm", m=m, n=n, k=k, dtype=config.dtype, seconds=seconds))
    progress(f"gemm: {len(config.gemms)} shapes")
    return rows


def bench_grouped_gemms(config: BenchConfig, progress: Callable[[str], None]) -> list[BenchRow]:
    """Grouped GEMMs on one device: `groups` GEMMs of `m x k` by `k x n`,
    one weight matrix per group, in one `lax.ragged_dot` call (the grouped
    GEMM JAX trainers run a mixture of experts' experts with) with equal
    group sizes."""
    jax = import_jax()
    jnp = jax.numpy
    from jax import lax

    dtype = _jnp_dtype(jax, config.dtype)
    grouped = jax.jit(lambda a, b, sizes: lax.ragged_dot(a, b, sizes))
    rows = []
    for groups, m, n, k in config.grouped_gemms:
        a = jnp.ones((groups * m, k), dtype=dtype)
        b = jnp.ones((groups, k, n), dtype=dtype)
        sizes = jnp.full((groups,), m, dtype=jnp.int32)
        seconds = time_call(grouped, a, b, sizes, repeats=config.repeats)
        rows.append(
            BenchRow(
                kind="grouped_gemm", m=m, n=n, k=k, groups=groups, dtype=config.dtype,
                seconds=seconds,
            )
        )  # fmt: skip
    progress(f"grouped gemm: {len(config.grouped_gemms)} shapes")
    return rows


def run_bench(
    config: BenchConfig, progress: Callable[[str], None] = lambda _: None
) -> tuple[list[BenchRow], str]:
    """Measure everything; returns the rows and a one-line description of
    the platform (for a CSV comment)."""
    need = max(m.num_chips for m in config.meshes)
    ensure_devices(need)
    jax = import_jax()
    rows = (
        bench_collectives(config, progress)
        + bench_send_recv(config, progress)
        + bench_gemms(config, progress)
        + bench_grouped_gemms(config, progress)
        + bench_overlap(config, progress)
    )
    platform = f"jax {jax.__version__} on {jax.default_backend()}, {len(jax.devices())} devices"
    return rows, platform


def _cell(value) -> str:
    return "" if value is None else str(value)


def to_csv(rows: list[BenchRow], platform: str) -> str:
    """The benchmark CSV text (seconds with full precision)."""
    buf = io.StringIO()
    buf.write(f"# meshtune bench: {platform}\n")
    buf.write(f"{CSV_HEADER}\n")
    for r in rows:
        cells = [r.kind, r.op, r.axis, _cell(r.ring_size), _cell(r.shard_bytes)]
        cells += [_cell(r.m), _cell(r.n), _cell(r.k), r.dtype, repr(max(r.seconds, 1e-12))]
        cells.append(_cell(r.groups))
        buf.write(",".join(cells) + "\n")
    return buf.getvalue()
