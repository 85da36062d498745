"""Speed of `meshtune verify` (NumPy emulator, the GPT-3 example plan) and
wall time of MeshSlice and the baselines on 8 virtual CPU devices (JAX).

Run: python benchmarks/verify_timing.py   (prints its figures; CPU JAX
timings say nothing about accelerators, they show the backend can time)."""

from __future__ import annotations

import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import numpy as np
from click.testing import CliRunner

from autotune.cli import main
from autotune.verify.plan_file import read_plan
from autotune.verify.runner import numpy_engine, verify_plan
from cost_models import Dataflow, MeshShape


def emulator_speed(tmp: str) -> None:
    CliRunner().invoke(main, ["plan", "examples/gpt3.yaml", "--out", tmp])
    plan = read_plan(tmp)
    start = time.perf_counter()
    result = verify_plan(plan, tmp, "numpy", numpy_engine)
    elapsed = time.perf_counter() - start
    print(
        f"verify gpt3 plan (numpy, {plan.mesh.num_rows}x{plan.mesh.num_cols}, "
        f"{len(result.checks)} GEMMs): {elapsed * 1e3:.0f} ms, worst error "
        f"{result.worst_relative_error:.1e}"
    )


def jax_timings() -> None:
    try:
        import jax
    except ImportError:
        print("jax not installed: skipping device timings")
        return
    from autotune.verify.baselines import Baseline
    from autotune.verify.jax_backend import (
        compile_gemm,
        device_mesh,
        meshslice_kernel,
        place,
        time_call,
    )
    from autotune.verify.jax_baselines import baseline_kernel

    mesh, size = MeshShape(2, 4), 1024
    jmesh = device_mesh(mesh)
    rng = np.random.default_rng(0)
    a = place(rng.standard_normal((size, size)).astype(np.float32), jmesh)
    b = place(rng.standard_normal((size, size)).astype(np.float32), jmesh)
    print(f"JAX on {len(jax.devices())} CPU devices, {mesh} mesh, {size}^3 fp32 GEMM (ms):")
    for df in Dataflow:
        cells = []
        for s in (1, 4):
            fn = compile_gemm(meshslice_kernel(df, s, 8), jmesh)
            cells.append(f"meshslice S={s} {time_call(fn, a, b) * 1e3:.1f}")
        for alg in (Baseline.WANG, Baseline.SUMMA):
            fn = compile_gemm(baseline_kernel(alg, df, mesh), jmesh)
            cells.append(f"{alg.value} {time_call(fn, a, b) * 1e3:.1f}")
        print(f"  {df.value}: " + ", ".join(cells))


if __name__ == "__main__":
    emulator_speed("/tmp/meshtune_bench_plan.json")
    jax_timings()
