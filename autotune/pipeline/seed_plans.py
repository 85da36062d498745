"""The seed tool's manual plans (`manual1:`, `manual2:` ... in its init YAML
or in the file its `-manual` flag names), read into assignments so the
simulator can replay them next to meshtune's plan.

A plan gives per-chunk lists (`[v][pp]`, or `[pp]` when v = 1):
`offset` (layers = num_layer // (pp v) + offset), `recompute` (fully
recomputed layers), `select_recompute` and `select_comm_recompute` (both
include the fully recomputed ones; `false` = none, `true` = all). As the
seed tool reads them: both = max(min(sel - full, comm - full), 0) layers use
selective and communication recomputation together, the rest of each count
its own option. `interleave_num` is the plan's chunk count; `show` and
`file_name` only drive the seed tool's plots and are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from autotune.errors import InputError
from autotune.pipeline.assignment import Assignment, layers_in_order
from autotune.pipeline.limits import MAX_BODY_LAYERS, MAX_CHUNKS, check_layer_counts
from autotune.pipeline.problem import Problem, ProblemError, Schedule

MANUAL_KEY = re.compile(r"manual(\d+)")
PLAN_KEYS = (
    "offset",
    "recompute",
    "select_recompute",
    "select_comm_recompute",
    "interleave_num",
    "show",
    "file_name",
)
# Options a chunk's layers take, in the order they are handed out over the
# kinds of a chunk (most memory saved first).
_ORDER = ("full", "selective_comm", "selective", "comm", "none")


@dataclass(frozen=True)
class ManualPlan:
    """A manual plan: its name, the problem with its chunk count, the plan."""

    name: str
    problem: Problem
    assignment: Assignment


def _per_chunk(value: Any, v: int, pp: int, file: str, field: str, fill: list[list[int]]):
    """[v][pp] ints from false / true / 0 / a flat list (v = 1) / nested lists."""
    low = -MAX_BODY_LAYERS if field.endswith("offset") else 0
    check_layer_counts(value, low=low, file=file, field=field)
    if value is False or value is None or (not isinstance(value, list) and value == 0):
        return [[0] * pp for _ in range(v)]
    if value is True:
        return [list(row) for row in fill]
    rows = value if v > 1 or (value and isinstance(value[0], list)) else [value]
    ok = (
        isinstance(rows, list)
        and len(rows) == v
        and all(
            isinstance(r, list)
            and len(r) == pp
            and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            for r in rows
        )
    )
    if not ok:
        raise InputError(
            f"must be false, true or {v} list(s) of {pp} integers (one per stage)",
            file=file,
            field=field,
            value=value,
            fix=f"give [{'[...], ' * (v - 1)}[...]] with {pp} numbers each"
            if v > 1
            else f"give a list of {pp} numbers",
        )
    return [list(r) for r in rows]


def read_manual_plans(data: dict[str, Any], file: str, problem: Problem) -> list[ManualPlan]:
    """Every `manualN` entry of `data`, in number order."""
    keys = sorted(
        (k for k in data if MANUAL_KEY.fullmatch(str(k))),
        key=lambda k: int(MANUAL_KEY.fullmatch(str(k)).group(1)),
    )
    return [_read_one(data[k], file, str(k), problem) for k in keys]


def _read_one(entry: Any, file: str, name: str, problem: Problem) -> ManualPlan:
    if not isinstance(entry, dict):
        raise InputError(
            "must be a mapping of the plan's lists",
            file=file,
            field=name,
            fix="give offset and the recompute lists under it (see the seed tool's manual_demo)",
        )
    for key in entry:
        if key not in PLAN_KEYS:
            raise InputError(
                "is not a known key of a manual plan",
                file=file,
                field=f"{name}.{key}",
                fix=f"use {', '.join(PLAN_KEYS)}",
            )
    v = entry.get("interleave_num", problem.num_chunks)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_CHUNKS:
        raise InputError(
            f"must be a whole number from 1 to {MAX_CHUNKS}",
            file=file,
            field=f"{name}.interleave_num",
            value=v,
            fix="give the chunks per stage of this plan",
        )
    try:
        shaped = replace(
            problem,
            num_chunks=v,
            schedule=Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B,
        )
    except ProblemError as exc:
        raise InputError(
            str(exc),
            file=file,
            field=f"{name}.interleave_num",
            value=v,
            fix="use a chunk count the model's layers and micro-batches allow",
        ) from None
    pp = shaped.num_stages
    base = shaped.num_layers // shaped.num_virtual
    offset = _per_chunk(entry.get("offset", 0), v, pp, file, f"{name}.offset", [])
    layers = [[base + offset[i][s] for s in range(pp)] for i in range(v)]
    lists = {
        k: _per_chunk(entry.get(k, False), v, pp, file, f"{name}.{k}", layers)
        for k in ("recompute", "select_recompute", "select_comm_recompute")
    }
    per_chunk = [layers[c // pp][c % pp] for c in range(shaped.num_virtual)]
    if sum(per_chunk) != shaped.num_layers or min(per_chunk) < shaped.min_layers_per_chunk:
        raise InputError(
            f"gives {sum(per_chunk)} layers (fewest in a chunk {min(per_chunk)}) for a "
            f"{shaped.num_layers}-layer model cut into {shaped.num_virtual} chunks of at least "
            f"{shaped.min_layers_per_chunk}",
            file=file,
            field=f"{name}.offset",
            fix=f"offsets are added to {base} layers per chunk and must sum to "
            f"{shaped.num_layers - base * shaped.num_virtual}",
        )
    by_group = layers_in_order(shaped, per_chunk)
    names = [o.name for o in shaped.options]
    counts = []
    for c in range(shaped.num_virtual):
        i, s = divmod(c, pp)
        n = per_chunk[c]
        full = lists["recompute"][i][s]
        sel, comm = lists["select_recompute"][i][s], lists["select_comm_recompute"][i][s]
        both = max(min(sel - full, comm - full), 0)
        want = {
            "full": full,
            "selective_comm": both,
            "selective": max(sel - full - both, 0),
            "comm": max(comm - full - both, 0),
        }
        want["none"] = n - sum(want.values())
        if min(want.values()) < 0:
            raise InputError(
                f"chunk {i} of stage {s} has {n} layers but recomputes "
                f"{n - want['none']} (recompute {full}, select_recompute {sel}, "
                f"select_comm_recompute {comm})",
                file=file,
                field=name,
                fix="recompute at most the chunk's layers",
            )
        row = [[0] * len(names) for _ in shaped.groups]
        left = list(by_group[c])
        for option in _ORDER:
            k = want[option]
            if not k:
                continue
            if option not in names:
                raise InputError(
                    f"uses {option} recomputation, which the problem does not offer "
                    f"(options: {', '.join(names)})",
                    file=file,
                    field=name,
                    fix="drop that recomputation from the plan or measure it in a dry run",
                )
            for g, grp in enumerate(shaped.groups):
                take = min(k, left[g])
                if take and grp.activation_bytes[names.index(option)] is None:
                    raise InputError(
                        f"gives {option} recomputation to {grp.kind} layers, which may not use it",
                        file=file,
                        field=name,
                        fix=f"drop {option} from that chunk or measure it for {grp.kind} layers",
                    )
                row[g][names.index(option)] += take
                left[g] -= take
                k -= take
        counts.append(tuple(tuple(r) for r in row))
    return ManualPlan(name, shaped, Assignment(tuple(counts)))
