"""The seed tool's layer description JSON (what its init step writes to
`layers/<model>.json`, and what its balancer reads): `layers_description`
lists HEAD, BODY (one or more kinds, in model order) and TAIL entries with
`time` (forward per micro-batch, read as ms), `nb_layer`, `memory_parameter`
and, for a body, `memory_activation` / `memory_select_rec` /
`memory_select_comm` / `memory_both_comm_select` / `memory_recompute` (MB as
MindSpore prints them, read as MiB); optional `stage_const_mem` (MB) on the
top level. Backward time is twice the forward, times 1 + the option's
coefficient: the file's `*_coef` keys where given, else the seed tool's
defaults. The shape (stages, chunks, micro-batches, memory cap) is not in
the file: it comes from the command line, as it did for the seed tool.
"""

from __future__ import annotations

from typing import Any

from autotune.errors import InputError
from autotune.pipeline.limits import (
    MAX_BODY_LAYERS,
    MAX_COEFFICIENT,
    MAX_MB,
    MAX_MS,
    MIN_LAYER_MS,
    measured,
)
from autotune.pipeline.problem import (
    EndBlock,
    Layer,
    Problem,
    ProblemError,
    ShapeOverrides,
)
from autotune.pipeline.seed_format import SEED_COEFFICIENTS
from autotune.safe_load import parse_json as safe_parse_json

MIB = float(2**20)
MS = 1e-3
MEMORY_KEYS = {
    "none": "memory_activation",
    "selective": "memory_select_rec",
    "comm": "memory_select_comm",
    "selective_comm": "memory_both_comm_select",
    "full": "memory_recompute",
}
COEF_KEYS = {
    "none": "backward_coef",
    "selective": "select_rec_coef",
    "comm": "select_comm_coef",
    "selective_comm": "both_comm_select_coef",
    "full": "recompute_coef",
}


def parse_json(text: str, file: str) -> Any:
    """JSON without NaN or Infinity, within the input limits (depth, size)."""
    return safe_parse_json(text, file=file, fix="check the file's syntax")


def is_layer_json(data: Any) -> bool:
    """True for a layer description (or the seed tool's list of models)."""
    if isinstance(data, list):
        return all(isinstance(d, dict) and "auto_partition_layer" in d for d in data)
    return isinstance(data, dict) and (
        "layers_description" in data or "auto_partition_layer" in data
    )


# Plausible range of each kind of number in a layer description.
_RANGES = {"ms": (0.0, MAX_MS), "MB": (0.0, MAX_MB), "coefficient": (0.0, MAX_COEFFICIENT)}


def _num(
    entry: dict, key: str, file: str, where: str, unit: str, default: float | None = None
) -> float:
    if key not in entry:
        if default is not None:
            return default
        raise InputError("is required", file=file, field=f"{where}.{key}", fix=f"add `{key}`")
    low, high = _RANGES[unit]
    return measured(entry[key], low=low, high=high, file=file, field=f"{where}.{key}", unit=unit)


def read_layer_json(
    data: Any, file: str, overrides: ShapeOverrides
) -> tuple[Problem, tuple[str, ...]]:
    """The problem a layer description and the command-line shape give."""
    if isinstance(data, list):
        raise InputError(
            "is the seed tool's list of models (names and layer counts, no times or memories)",
            file=file,
            field="layers_description",
            fix="give the layer description file its init step writes (layers/<model>.json)",
        )
    entries = data.get("layers_description")
    if not isinstance(entries, list) or not entries:
        raise InputError(
            "is required: a list of HEAD, BODY and TAIL entries",
            file=file,
            field="layers_description",
            fix="give the layer description file its init step writes (layers/<model>.json)",
        )
    ends = {"HEAD": EndBlock(), "TAIL": EndBlock()}
    bodies: list[tuple[dict, str]] = []
    for i, entry in enumerate(entries):
        where = f"layers_description[{i}]"
        if not isinstance(entry, dict) or entry.get("type") not in ("HEAD", "BODY", "TAIL"):
            raise InputError(
                "must be a mapping with type HEAD, BODY or TAIL",
                file=file,
                field=f"{where}.type",
                value=entry.get("type") if isinstance(entry, dict) else entry,
                fix='give every entry "type": "HEAD", "BODY" or "TAIL" (the seed tool\'s layers)',
            )
        if entry["type"] == "BODY":
            bodies.append((entry, where))
        else:
            t = _num(entry, "time", file, where, "ms") * MS
            ends[entry["type"]] = EndBlock(
                t, 2 * t, _num(entry, "memory_parameter", file, where, "MB") * MIB
            )
    if not bodies:
        raise InputError(
            "has no BODY entry",
            file=file,
            field="layers_description",
            fix='add the transformer layers as an entry with "type": "BODY"',
        )
    coefficients: dict[str, float] = {}
    stated = False
    for entry, where in bodies:
        for option, key in COEF_KEYS.items():
            if key in entry and MEMORY_KEYS[option] in entry:
                value = _num(entry, key, file, where, "coefficient")
                stated = True
                if coefficients.setdefault(option, value) != value:
                    raise InputError(
                        f"differs between body kinds ({coefficients[option]} and {value}); "
                        "meshtune uses one coefficient per option",
                        file=file,
                        field=f"{where}.{key}",
                        fix="give every body kind the same coefficient for this option",
                    )
    layers: list[Layer] = []
    used: set[str] = set()
    for entry, where in bodies:
        count = entry.get("nb_layer")
        if (
            not isinstance(count, int)
            or isinstance(count, bool)
            or not 0 < count <= MAX_BODY_LAYERS
        ):
            raise InputError(
                f"must be a whole number from 1 to {MAX_BODY_LAYERS}",
                file=file,
                field=f"{where}.nb_layer",
                value=count,
                fix="give the number of layers of this kind",
            )
        t = _num(entry, "time", file, where, "ms") * MS
        if t < MIN_LAYER_MS * MS:
            raise InputError(
                f"must be at least {MIN_LAYER_MS:g} ms (a body layer takes time)",
                file=file,
                field=f"{where}.time",
                value=entry.get("time"),
                fix="fill in the forward time per micro-batch (ms) from the profile",
            )
        acts = {
            option: _num(entry, key, file, where, "MB") * MIB
            for option, key in MEMORY_KEYS.items()
            if key in entry
        }
        if not acts:
            raise InputError(
                "gives no activation memory",
                file=file,
                field=f"{where}.memory_activation",
                fix="add memory_activation (MB per micro-batch)",
            )
        used.update(acts)
        kind = str(entry.get("name") or f"body{len(layers)}")
        layers += [
            Layer(kind, t, 2 * t, _num(entry, "memory_parameter", file, where, "MB") * MIB, acts)
        ] * count
    options = {o: coefficients.get(o, SEED_COEFFICIENTS[o]) for o in MEMORY_KEYS if o in used}
    warnings = []
    if not stated:
        warnings.append(
            "recomputation time coefficients are the seed tool's defaults ("
            + ", ".join(f"{n} {c}" for n, c in options.items())
            + ")"
        )
    missing = [
        name
        for name, value in (
            ("--stages N", overrides.num_stages),
            ("--micro-batches M", overrides.num_micro_batches),
            ("--memory-cap-mb X", overrides.memory_cap_bytes),
        )
        if value is None
    ]
    if missing:
        raise InputError(
            "gives no pipeline shape or memory cap (the seed tool took them as -s, -mb, -mem)",
            file=file,
            fix="pass " + ", ".join(missing),
        )
    if "stage_const_mem" not in data:
        warnings.append("no stage_const_mem: constant per-stage memory 0, as the seed tool assumes")
    const = _num(data, "stage_const_mem", file, "", "MB", 0.0) * MIB
    chunks = overrides.num_chunks or 1
    try:
        problem = Problem.from_layers(
            layers,
            options=options,
            num_stages=overrides.num_stages,
            num_chunks=chunks,
            num_micro_batches=overrides.num_micro_batches,
            memory_cap_bytes=overrides.memory_cap_bytes,
            head=ends["HEAD"],
            tail=ends["TAIL"],
            constant_bytes=const,
        )
    except ProblemError as exc:
        raise InputError(
            str(exc), file=file, fix="check --stages, --chunks and --micro-batches"
        ) from None
    return problem, tuple(warnings)
