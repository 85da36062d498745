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

from autotune.errors import InputError
from autotune.pipeline.problem import Problem, ShapeOverrides

MAX_STAGES = 128
MAX_CHUNKS = 64
MAX_MICRO_BATCHES = 8192
# stages x chunks x micro-batches: forward (and backward) ops of one step
MAX_SCHEDULE_OPS = 8192
MAX_BODY_LAYERS = 100_000
MAX_LAYER_KINDS = 256

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
