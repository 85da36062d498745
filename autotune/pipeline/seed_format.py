"""The seed tool's init YAML as it is (pipeline.md section 5): old files with
`time_config`, new ones with `profiling_config` (its times live in profiler
traces, so those files give the memory decomposition only), manual plans
(`manual1:` ...) and an optional `meshtune:` block. What the seed tool took
as command-line flags (stages, chunks, micro-batches, memory cap, time
limit) comes from meshtune's flags (ShapeOverrides) or the `meshtune:` block.

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
from autotune.pipeline.limits import (
    MAX_BODY_LAYERS,
    MAX_MB,
    MAX_MICRO_BATCHES,
    MAX_MS,
    MAX_STAGES,
    MIN_LAYER_MS,
    check_layer_counts,
    measured,
)
from autotune.pipeline.problem import (
    RECOMPUTE_OPTIONS,
    EndBlock,
    LayerGroup,
    Problem,
    ProblemError,
    RecomputeOption,
    Schedule,
    ShapeOverrides,
    SolverSettings,
)
from autotune.pipeline.seed_plans import MANUAL_KEY
from autotune.pipeline.yaml_format import (
    GIB,
    MS,
    CapGib,
    Coefficient,
    PipelineShapeSpec,
    SolverSpec,
    Spec,
    settings_from_spec,
)

MIB = float(2**20)

SEED_KEYS = (
    "pipeline_config",
    "time_config",
    "profiling_config",
    "recompute_config",
    "memory_usage",
    "meshtune",
)
# The seed tool's backward-time coefficients (its utils/recompute.py
# DEFAULT_COEF), used when the file gives none.
SEED_COEFFICIENTS = {
    "none": 0.0,
    "selective": 0.04,
    "comm": 0.125,
    "selective_comm": 0.165,
    "full": 0.5,
}


class SeedPlanSpec(Spec):
    """The `meshtune:` block of a seed-format file."""

    pipeline: PipelineShapeSpec | None = Field(
        default=None,
        description="Plan shape; num_stages defaults to pipeline_config.pipeline_num.",
    )
    num_micro_batches: int | None = Field(
        default=None,
        gt=0,
        le=MAX_MICRO_BATCHES,
        description="Micro-batches (when `pipeline` is not given). Range: 1 to 8192.",
    )
    memory_cap_gib: CapGib | None = Field(
        default=None,
        description="Usable device memory per stage, GiB. Range: 2^-10 (1 MiB) to 2^20.",
    )
    backward_factor: Coefficient = Field(
        default=2.0, description="Backward / forward time. Range: 0 to 1000."
    )
    recompute_options: dict[str, Coefficient] | None = Field(
        default=None,
        description="Options to plan with and their backward-time coefficients (default: "
        "every option the dry runs measured, with the seed tool's coefficients). "
        "Range: each 0 to 1000.",
    )
    solver: SolverSpec = Field(default_factory=SolverSpec, description="Solver settings.")


def _err(msg: str, file: str, field: str, value: Any = None, fix: str | None = None) -> InputError:
    return InputError(msg, file=file, field=field, value=value, fix=fix)


ALL = -1  # `true` in a recompute list: every layer of the stage


def _rounds(value: Any, file: str, field: str, pp: int, num_rounds: int | None) -> list[list[int]]:
    """Normalise false / true / 0 / a list / a list of lists to per-round
    per-stage lists (ALL marks `true`: every layer)."""
    low = -MAX_BODY_LAYERS if field.endswith("offset") else 0
    check_layer_counts(value, low=low, file=file, field=field)
    if value is False or value is None or (value == 0 and not isinstance(value, list)):
        return [[0] * pp for _ in range(num_rounds or 1)]
    if value is True:
        return [[ALL] * pp for _ in range(num_rounds or 1)]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, list) or isinstance(v, bool) or v == 0 for v in value)
        and any(isinstance(v, list) or isinstance(v, bool) for v in value)
    ):
        return [
            [ALL] * pp
            if v is True
            else [0] * pp
            if v is False or v == 0
            else _stage_list(v, file, field, pp)
            for v in value
        ]
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
        names = {dict: "a mapping", list: "a list", int: "a whole number"}
        wanted = " or ".join(
            names.get(k, "a number") for k in (kind if isinstance(kind, tuple) else (kind,))
        )
        wanted = "a number" if kind == (int, float) else wanted
        raise _err(
            f"has the wrong type; it must be {wanted}",
            file,
            f"{where}.{key}" if where else key,
            value,
            fix=f"write {wanted} (see examples/pipeline-seed-format.yaml)",
        )
    return value


def measurements(data: dict[str, Any], file: str) -> tuple[list[Measurement], int, int]:
    """The measured stages of every dry-run round; also pp and num_layer."""
    pc = _need(data, "pipeline_config", file, "")
    pp = _need(pc, "pipeline_num", file, "pipeline_config", int)
    num_layer = _need(pc, "num_layer", file, "pipeline_config", int)
    if not 2 <= pp <= MAX_STAGES:
        raise _err(
            f"must be from 2 to {MAX_STAGES}",
            file,
            "pipeline_config.pipeline_num",
            pp,
            fix=f"give the dry run's pipeline stages (2 to {MAX_STAGES})",
        )
    if not 1 <= num_layer <= MAX_BODY_LAYERS:
        raise _err(
            f"must be from 1 to {MAX_BODY_LAYERS}",
            file,
            "pipeline_config.num_layer",
            num_layer,
            fix="give the model's transformer layers",
        )
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
        memory_mb = measured(memory_mb, low=1, high=MAX_MB, file=file, field=label, unit="MB")
        n = base + offsets[r][s]
        full, sel, comm = (
            n if rec[k][r][s] == ALL else rec[k][r][s]
            for k in ("recompute", "select_recompute", "select_comm_recompute")
        )
        if not 0 < n <= num_layer or min(full, sel, comm) < 0:
            raise _err(
                f"stage {s} of round {r} has {n} layers, recompute {full}, select_recompute "
                f"{sel}, select_comm_recompute {comm}; counts must be >= 0 and layers from 1 "
                f"to num_layer ({num_layer})",
                file,
                "recompute_config",
                fix="check offset and the recompute lists of that round",
            )
        sel, comm = max(sel, full), max(comm, full)
        if max(sel, comm) > n:
            raise _err(
                f"stage {s} of round {r} recomputes {max(sel, comm)} layers but has {n}",
                file,
                "recompute_config",
                fix="recompute at most the stage's layers (offset added to num_layer / pp)",
            )
        out.append(Measurement(s, pp, n, full, sel, comm, float(memory_mb) * MIB, label))

    for key, stage in (("head_memory", 0), ("tail_memory", pp - 1)):
        add(0, stage, _need(mu, key, file, "memory_usage", (int, float)), f"memory_usage.{key}")
    for r, (sid, mem) in enumerate(zip(ids, mems, strict=True)):
        if not isinstance(sid, list) or not isinstance(mem, list) or len(sid) != len(mem):
            raise _err(
                "stage_id and memories must be lists of the same length",
                file,
                f"memory_usage.body_memories (round {r})",
                fix="pair every stage id with its memory",
            )
        where = "memory_usage.body_memories" + (f"[{r}]" if len(mems) > 1 else "")
        for i, (s, m) in enumerate(zip(sid, mem, strict=True)):
            if not isinstance(s, int) or not 0 <= s < pp:
                raise _err(
                    f"must be a stage in 0..{pp - 1}",
                    file,
                    f"{where}.stage_id[{i}]",
                    s,
                    fix=f"give stage ids from 0 to {pp - 1}",
                )
            add(r, s, m, f"{where}.memories[{i}] (stage {s})")
    return out, pp, num_layer


def _number(
    data: dict, key: str, file: str, where: str, high: float, unit: str, low: float = 0.0
) -> float:
    value = _need(data, key, file, where, (int, float))
    return measured(value, low=low, high=high, file=file, field=f"{where}.{key}", unit=unit)


def _shape(
    plan: SeedPlanSpec, pp_dry: int, overrides: ShapeOverrides, file: str
) -> tuple[int, int, int, str, int]:
    """(stages, chunks, micro-batches, schedule, min layers per chunk): flag,
    else the `meshtune:` block, else (stages only) the dry run's pp."""
    shape = plan.pipeline
    stages = overrides.num_stages or (shape.num_stages if shape else pp_dry)
    chunks = overrides.num_chunks or (shape.num_chunks if shape else 1)
    micro = overrides.num_micro_batches or (
        shape.num_micro_batches if shape else plan.num_micro_batches
    )
    if micro is None:
        raise _err(
            "is not given (the seed tool's -mb flag)",
            file,
            "micro-batches",
            fix="pass --micro-batches M or add `meshtune: {num_micro_batches: M}`",
        )
    schedule = "interleaved-1f1b" if chunks > 1 else "1f1b"
    if shape is not None and overrides.num_chunks is None:
        schedule = shape.schedule.value
    return stages, chunks, micro, schedule, shape.min_layers_per_chunk if shape else 1


def read_seed_problem(
    data: dict[str, Any], file: str, overrides: ShapeOverrides
) -> tuple[Problem | None, SolverSettings, Decomposition, tuple[str, ...]]:
    """Decompose the dry-run memories and build the problem; the problem is
    None when the file has no time data (`profiling_config` files: their
    times are in profiler traces). Also the warnings on what was assumed."""
    from autotune.loading import validate_spec

    unknown = [k for k in data if k not in SEED_KEYS and not MANUAL_KEY.fullmatch(str(k))]
    if unknown:
        raise _err(
            "is not a known key of the seed format",
            file,
            str(unknown[0]),
            fix=f"remove it (allowed: {', '.join(SEED_KEYS)}, manual1, manual2, ...)",
        )
    plan = validate_spec(SeedPlanSpec, data.get("meshtune") or {}, file=file, prefix="meshtune")
    ms, pp_dry, num_layer = measurements(data, file)
    dec = decompose(ms, file=file)
    warnings = list(dec.warnings)
    settings = overrides.apply_settings(settings_from_spec(plan.solver))
    if "time_config" not in data:
        where = "profiling_config" if "profiling_config" in data else "the file"
        warnings.append(
            f"no time_config: {where} points at profiler traces meshtune does not read, so "
            "only the memory decomposition is reported; add `time_config: {head: H, body: B, "
            "tail: T}` (forward ms per micro-batch) to plan"
        )
        return None, settings, dec, tuple(warnings)
    tc = _need(data, "time_config", file, "")
    times = {
        k: _number(tc, k, file, "time_config", MAX_MS, "ms", MIN_LAYER_MS if k == "body" else 0.0)
        for k in ("head", "body", "tail")
    }

    stages, chunks, micro, schedule, min_layers = _shape(plan, pp_dry, overrides, file)
    if overrides.memory_cap_bytes is not None:
        cap = overrides.memory_cap_bytes
    elif plan.memory_cap_gib is not None:
        cap = plan.memory_cap_gib * GIB
    else:
        raise _err(
            "is not given (the seed tool's -mem flag)",
            file,
            "memory cap",
            fix="pass --memory-cap-mb X or add `meshtune: {memory_cap_gib: G}`",
        )
    if plan.recompute_options is None:
        coefficients = {n: SEED_COEFFICIENTS[n] for n in dec.activation_bytes}
        warnings.append(
            "recomputation time coefficients are the seed tool's defaults ("
            + ", ".join(f"{n} {c}" for n, c in coefficients.items())
            + "); set meshtune.recompute_options to use measured ones"
        )
    else:
        coefficients = plan.recompute_options
    names = [n for n in RECOMPUTE_OPTIONS if n in coefficients]
    for name in coefficients:
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
    bf = plan.backward_factor
    body = LayerGroup(
        kind="body",
        count=num_layer,
        forward_s=times["body"] * MS,
        backward_s=times["body"] * MS * bf,
        parameter_bytes=dec.parameter_bytes,
        activation_bytes=tuple(dec.activation_bytes[n] for n in names),
    )
    try:
        problem = Problem(
            num_stages=stages,
            num_chunks=chunks,
            num_micro_batches=micro,
            schedule=Schedule(schedule),
            min_layers_per_chunk=min_layers,
            options=tuple(RecomputeOption(n, coefficients[n]) for n in names),
            groups=(body,),
            head=EndBlock(times["head"] * MS, times["head"] * MS * bf, dec.head_bytes),
            tail=EndBlock(times["tail"] * MS, times["tail"] * MS * bf, dec.tail_bytes),
            constant_bytes=dec.constant_bytes,
            memory_cap_bytes=cap,
        )
    except ProblemError as exc:
        raise _err(
            str(exc),
            file,
            "pipeline shape",
            fix="check --stages, --chunks and --micro-batches (or the meshtune: block)",
        ) from None
    return problem, settings, dec, tuple(warnings)
