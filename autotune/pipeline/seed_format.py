"""The seed tool's init YAML (pipeline.md section 5), plus a `meshtune:`
block with what its command-line flags carried (micro-batches, memory cap,
chunks) and the recomputation time coefficients.

Units: the seed's memories are MB as MindSpore's memory log prints them
("48874M"), read as MiB (2**20 bytes); its times are read as milliseconds.
Each list of `offset` / recompute counts / `stage_id` / `memories` is one
dry-run round; a list of lists gives several rounds (all plain 1F1B, with at
least pp micro-batches, so stage s held pp - s micro-batches at its peak).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from autotune.errors import InputError
from autotune.pipeline.decompose import Decomposition, Measurement, decompose
from autotune.pipeline.problem import (
    RECOMPUTE_OPTIONS,
    EndBlock,
    LayerGroup,
    Problem,
    RecomputeOption,
    SolverSettings,
)
from autotune.pipeline.yaml_format import GIB, MS, PipelineShapeSpec, SolverSpec, settings_from_spec
from autotune.specs.base import Spec

MIB = float(2**20)
SEED_KEYS = ("pipeline_config", "time_config", "recompute_config", "memory_usage", "meshtune")


class SeedPlanSpec(Spec):
    """The `meshtune:` block of a seed-format file."""

    pipeline: PipelineShapeSpec | None = Field(
        default=None,
        description="Plan shape; num_stages defaults to pipeline_config.pipeline_num.",
    )
    num_micro_batches: int | None = Field(
        default=None, gt=0, description="Micro-batches (when `pipeline` is not given)."
    )
    memory_cap_gib: float = Field(gt=0, description="Usable device memory per stage, GiB.")
    backward_factor: float = Field(default=2.0, ge=0, description="Backward / forward time.")
    recompute_options: dict[str, float] = Field(
        description="Options to plan with and their backward-time coefficients."
    )
    solver: SolverSpec = Field(default_factory=SolverSpec, description="Solver settings.")


def _err(msg: str, file: str, field: str, value: Any = None, fix: str | None = None) -> InputError:
    return InputError(msg, file=file, field=field, value=value, fix=fix)


def _rounds(value: Any, file: str, field: str, pp: int, num_rounds: int | None) -> list[list[int]]:
    """Normalise false / a list / a list of lists to per-round per-stage lists."""
    if value is False or value is None or value == 0:
        return [[0] * pp for _ in range(num_rounds or 1)]
    if isinstance(value, list) and value and all(isinstance(v, list) or v is False for v in value):
        return [[0] * pp if v is False else _stage_list(v, file, field, pp) for v in value]
    return [_stage_list(value, file, field, pp)]


def _stage_list(value: Any, file: str, field: str, pp: int) -> list[int]:
    if (
        not isinstance(value, list)
        or len(value) != pp
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise _err(
            f"must be false or a list of {pp} integers (one per stage), or a list of such lists",
            file,
            field,
            value,
            fix=f"give {pp} per-stage counts",
        )
    return list(value)


def _need(data: dict, key: str, file: str, where: str, kind: type | tuple = dict) -> Any:
    if key not in data:
        raise _err("is required", file, f"{where}.{key}" if where else key, fix=f"add `{key}:`")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _err("has the wrong type", file, f"{where}.{key}" if where else key, value)
    return value


def measurements(data: dict[str, Any], file: str) -> tuple[list[Measurement], int, int]:
    """The measured stages of every dry-run round; also pp and num_layer."""
    pc = _need(data, "pipeline_config", file, "")
    pp = _need(pc, "pipeline_num", file, "pipeline_config", int)
    num_layer = _need(pc, "num_layer", file, "pipeline_config", int)
    if pp < 2:
        raise _err("must be at least 2", file, "pipeline_config.pipeline_num", pp)
    offsets = _rounds(pc.get("offset", 0), file, "pipeline_config.offset", pp, None)
    rc = data.get("recompute_config", {}) or {}
    n_rounds = len(offsets)
    rec = {
        k: _rounds(rc.get(k, False), file, f"recompute_config.{k}", pp, n_rounds)
        for k in ("recompute", "select_recompute", "select_comm_recompute")
    }
    mu = _need(data, "memory_usage", file, "")
    bm = _need(mu, "body_memories", file, "memory_usage")
    ids = _need(bm, "stage_id", file, "memory_usage.body_memories", list)
    mems = _need(bm, "memories", file, "memory_usage.body_memories", list)
    if ids and not isinstance(ids[0], list):
        ids, mems = [ids], [mems]
    for k, v in rec.items():
        if len(v) == 1 and n_rounds > 1:
            rec[k] = v * n_rounds
        elif len(v) != n_rounds:
            raise _err(
                f"gives {len(v)} rounds but offset gives {n_rounds}",
                file,
                f"recompute_config.{k}",
                fix="give one list per dry-run round",
            )
    if len(ids) != n_rounds and n_rounds == 1:
        offsets = offsets * len(ids)
        rec = {k: v * len(ids) for k, v in rec.items()}
        n_rounds = len(ids)
    if len(ids) != n_rounds or len(mems) != n_rounds:
        raise _err(
            f"gives {len(ids)} rounds of stage_id and {len(mems)} of memories, "
            f"but offset gives {n_rounds}",
            file,
            "memory_usage.body_memories",
            fix="give one stage_id list and one memories list per round",
        )
    base = num_layer // pp
    out: list[Measurement] = []

    def add(r: int, s: int, memory_mb: Any, label: str) -> None:
        if not isinstance(memory_mb, (int, float)) or isinstance(memory_mb, bool) or memory_mb <= 0:
            raise _err("must be a positive number of MB", file, label, memory_mb)
        n = base + offsets[r][s]
        full = rec["recompute"][r][s]
        sel, comm = rec["select_recompute"][r][s], rec["select_comm_recompute"][r][s]
        if n <= 0 or min(full, sel, comm) < 0:
            raise _err(
                f"stage {s} of round {r} has {n} layers, recompute {full}, select_recompute "
                f"{sel}, select_comm_recompute {comm}; counts must be >= 0 and layers > 0",
                file,
                "recompute_config",
                fix="check offset and the recompute lists of that round",
            )
        sel, comm = max(sel, full), max(comm, full)
        if max(sel, comm) > n:
            raise _err(f"stage {s} recomputes more layers than it has ({n})", file, label)
        out.append(Measurement(s, pp, n, full, sel, comm, float(memory_mb) * MIB, label))

    add(0, 0, _need(mu, "head_memory", file, "memory_usage", (int, float)), "head_memory")
    add(0, pp - 1, _need(mu, "tail_memory", file, "memory_usage", (int, float)), "tail_memory")
    for r, (sid, mem) in enumerate(zip(ids, mems, strict=True)):
        if not isinstance(sid, list) or not isinstance(mem, list) or len(sid) != len(mem):
            raise _err(
                "stage_id and memories must be lists of the same length",
                file,
                f"memory_usage.body_memories (round {r})",
                fix="pair every stage id with its memory",
            )
        for s, m in zip(sid, mem, strict=True):
            if not isinstance(s, int) or not 0 <= s < pp:
                raise _err(f"must be a stage in 0..{pp - 1}", file, "stage_id", s)
            add(r, s, m, f"round {r} stage {s}")
    return out, pp, num_layer


def read_seed_problem(
    data: dict[str, Any], file: str
) -> tuple[Problem, SolverSettings, Decomposition]:
    """Decompose the dry-run memories and build the problem."""
    from autotune.loading import validate_spec

    unknown = [k for k in data if k not in SEED_KEYS]
    if unknown:
        raise _err(
            "is not a known key of the seed format",
            file,
            str(unknown[0]),
            fix=f"remove it (allowed: {', '.join(SEED_KEYS)})",
        )
    if "meshtune" not in data:
        raise _err(
            "is required in a seed-format file (micro-batches, memory cap, coefficients)",
            file,
            "meshtune",
            fix="add `meshtune: {num_micro_batches: 32, memory_cap_gib: 60, "
            "recompute_options: {none: 0.0, full: 0.5}}` (see examples/pipeline-seed-format.yaml)",
        )
    plan = validate_spec(SeedPlanSpec, data["meshtune"], file=file, prefix="meshtune")
    ms, pp_dry, num_layer = measurements(data, file)
    dec = decompose(ms, file=file)
    tc = _need(data, "time_config", file, "")
    times = {k: _need(tc, k, file, "time_config", (int, float)) for k in ("head", "body", "tail")}
    if times["body"] <= 0:
        raise _err("must be positive", file, "time_config.body", times["body"])

    if plan.pipeline is not None:
        shape = plan.pipeline
    else:
        if plan.num_micro_batches is None:
            raise _err(
                "is required",
                file,
                "meshtune.num_micro_batches",
                fix="add `num_micro_batches:` or a `pipeline:` block",
            )
        shape = PipelineShapeSpec(num_stages=pp_dry, num_micro_batches=plan.num_micro_batches)
    names = [n for n in RECOMPUTE_OPTIONS if n in plan.recompute_options]
    for name in plan.recompute_options:
        if name not in RECOMPUTE_OPTIONS:
            raise _err(
                "is not a recomputation option",
                file,
                f"meshtune.recompute_options.{name}",
                fix=f"use names from {', '.join(RECOMPUTE_OPTIONS)}",
            )
        if name not in dec.activation_bytes:
            raise _err(
                "is not used by any dry run, so its memory is unknown",
                file,
                f"meshtune.recompute_options.{name}",
                fix="remove it or add a dry run that uses it",
            )
    body = LayerGroup(
        kind="body",
        count=num_layer,
        forward_s=times["body"] * MS,
        backward_s=times["body"] * MS * plan.backward_factor,
        parameter_bytes=dec.parameter_bytes,
        activation_bytes=tuple(dec.activation_bytes[n] for n in names),
    )
    bf = plan.backward_factor
    problem = Problem(
        num_stages=shape.num_stages,
        num_chunks=shape.num_chunks,
        num_micro_batches=shape.num_micro_batches,
        schedule=shape.schedule,
        min_layers_per_chunk=shape.min_layers_per_chunk,
        options=tuple(RecomputeOption(n, plan.recompute_options[n]) for n in names),
        groups=(body,),
        head=EndBlock(times["head"] * MS, times["head"] * MS * bf, dec.head_bytes),
        tail=EndBlock(times["tail"] * MS, times["tail"] * MS * bf, dec.tail_bytes),
        constant_bytes=dec.constant_bytes,
        memory_cap_bytes=plan.memory_cap_gib * GIB,
    )
    if num_layer < problem.num_virtual * shape.min_layers_per_chunk:
        raise _err(
            f"{num_layer} layers cannot fill {problem.num_virtual} chunks",
            file,
            "pipeline_config.num_layer",
            num_layer,
            fix="use fewer stages or chunks",
        )
    return problem, settings_from_spec(plan.solver), dec
