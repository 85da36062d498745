"""Plausible upper bounds on a pipeline problem's size, checked once for
every input format and the command-line flags (readers.py).

Why: the balancer's work grows with the schedule's ops (stages x chunks x
micro-batches: the simulator replays each, and the MILP has a row for each)
and the first plan is always completed, whatever the time limit. The bounds
are set from measured run times, not from real pipelines' shapes: within
them a `--time-limit` holds to a few seconds on a shared 2-core machine
(measurements in docs/reliability.md); a larger schedule is refused with a
fix.
"""

from __future__ import annotations

import math
from typing import Any

from autotune.errors import InputError
from autotune.pipeline.problem import Problem, ShapeOverrides
from autotune.specs.base import MAX_FACTOR, MAX_GIB, MAX_SECONDS, MIN_GIB

MAX_STAGES = 128
MAX_CHUNKS = 64
MAX_MICRO_BATCHES = 8192
# stages x chunks x micro-batches: forward (and backward) ops of one step
MAX_SCHEDULE_OPS = 8192
MAX_BODY_LAYERS = 100_000
MAX_LAYER_KINDS = 256

# Plausible ranges of the measured numbers, in the formats' units, so that no
# finite input becomes infinity or NaN once converted to base units (a time
# of 1e308 ms is infinite in seconds) or makes the MILP's coefficients
# meaningless. Far outside any real pipeline.
MAX_MS = MAX_SECONDS * 1e3  # one layer's (head's, tail's) time per micro-batch: an hour
MIN_LAYER_MS = 1e-6  # a body layer's forward time (the balancer divides by it): 1 ns
MAX_MB = MAX_GIB * 1024  # memories in the seed tool's MB (MiB): 1 PiB
MIN_CAP_GIB = MIN_GIB  # a memory cap: 1 MiB
MIN_CAP_MB = MIN_GIB * 1024
MAX_COEFFICIENT = MAX_FACTOR  # backward factors and recomputation coefficients
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0  # a search's wall-time limit: one week


def measured(
    value: Any, *, low: float, high: float, file: str | None, field: str, unit: str
) -> float:
    """`value` as a float when it is a finite number from `low` to `high`
    (inclusive); InputError naming the file, field, value and range otherwise."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise InputError(
            f"must be a number from {low:g} to {high:g} ({unit})",
            file=file,
            field=field,
            value=value,
            fix=f"give the measured value in {unit}",
        )
    return float(value)


# Field names per input format (the flag when the command line set the value).
_FIELDS = {
    "meshtune": {
        "num_stages": "pipeline.num_stages",
        "num_chunks": "pipeline.num_chunks",
        "num_micro_batches": "pipeline.num_micro_batches",
    },
    "seed": {
        "num_stages": "meshtune.num_stages (or pipeline_config.pipeline_num)",
        "num_chunks": "meshtune.num_chunks",
        "num_micro_batches": "meshtune.num_micro_batches",
    },
}
_FLAGS = {
    "num_stages": "--stages",
    "num_chunks": "--chunks",
    "num_micro_batches": "--micro-batches",
}


def _field(name: str, fmt: str, overrides: ShapeOverrides) -> str:
    if getattr(overrides, name) is not None or fmt not in _FIELDS:
        return _FLAGS[name]
    return _FIELDS[fmt][name]


def check_problem_size(
    problem: Problem, file: str, fmt: str, overrides: ShapeOverrides | None = None
) -> None:
    """Raise InputError (file, field, value, range, fix) when `problem` is
    larger than the bounds above."""
    overrides = overrides or ShapeOverrides()
    for name, top in (
        ("num_stages", MAX_STAGES),
        ("num_chunks", MAX_CHUNKS),
        ("num_micro_batches", MAX_MICRO_BATCHES),
    ):
        value = getattr(problem, name)
        if value > top:
            raise InputError(
                f"is outside the plausible range 1 to {top}",
                file=file,
                field=_field(name, fmt, overrides),
                value=value,
                fix=f"use a value <= {top}",
            )
    ops = problem.num_stages * problem.num_chunks * problem.num_micro_batches
    if ops > MAX_SCHEDULE_OPS:
        raise InputError(
            f"stages x chunks x micro-batches = {ops} is above {MAX_SCHEDULE_OPS}, the "
            "largest schedule the balancer plans within its time limit",
            file=file,
            field=_field("num_micro_batches", fmt, overrides),
            value=problem.num_micro_batches,
            fix=f"use at most {MAX_SCHEDULE_OPS // (problem.num_stages * problem.num_chunks)} "
            f"micro-batches for {problem.num_stages} stages x {problem.num_chunks} chunk(s) "
            "(once they are several times the stages, the best plan hardly changes)",
        )
    if problem.num_layers > MAX_BODY_LAYERS:
        raise InputError(
            f"holds {problem.num_layers} body layers; plausible range: 1 to {MAX_BODY_LAYERS}",
            file=file,
            field="layers",
            fix="check the layer counts",
        )
    if len(problem.groups) > MAX_LAYER_KINDS:
        raise InputError(
            f"holds {len(problem.groups)} runs of layer kinds; plausible range: 1 to "
            f"{MAX_LAYER_KINDS}",
            file=file,
            field="layers",
            fix="merge consecutive layers with equal figures into one kind",
        )


def check_layer_counts(value: Any, *, low: int, file: str | None, field: str) -> None:
    """Every number in `value` (a per-stage list, a list of such lists, or a
    scalar) must be a whole number from `low` to MAX_BODY_LAYERS; InputError
    naming the element (`field[i][j]`) and its value otherwise. `true` and
    `false` are left to the caller."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, list):
            stack.extend((x, f"{where}[{i}]") for i, x in enumerate(item))
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if not isinstance(item, int) or not low <= item <= MAX_BODY_LAYERS:
                raise InputError(
                    f"must be a whole number of layers from {low} to {MAX_BODY_LAYERS}",
                    file=file,
                    field=where,
                    value=item,
                    fix="give per-stage layer counts as whole numbers",
                )
