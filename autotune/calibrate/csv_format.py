"""meshtune's benchmark CSV (written by `meshtune bench`; docs/calibrate.md).

Header `kind,op,axis,ring_size,shard_bytes,m,n,k,dtype,seconds`; `#` lines are
comments. `collective` rows fill op, axis, ring_size, shard_bytes and leave
m, n, k empty; `gemm` rows fill m, n, k and leave op, axis, ring_size,
shard_bytes empty; `overlap` rows fill both (a GEMM timed while the
collective runs beside it; seconds is the time of the pair); `attention`
rows time one fused attention forward: op `causal` or `full`, m the
sequence length, n batch x query heads, k the head dimension
(`attention_backward` rows the same for its backward kernel, 2.5 forwards
of FLOPs);
`grouped_gemm` rows time one grouped GEMM (a mixture of experts' experts
in one kernel): m the tokens of each group, n, k as a gemm row, and the
optional `groups` column (after `seconds`) the number of groups, empty in
every other kind of row; dtype is bf16, fp16, fp32 or fp8; seconds > 0.
Collective rows with op `all_to_all` time an all-to-all in which every
chip sends `shard_bytes` to each of the ring's chips (nccl-tests'
`alltoall_perf` size divided by the ranks). `host_launch` rows give only
seconds: the host (CPU and framework) time to issue one kernel of the
routed experts' per-expert path, e.g. an nsys profile's time per
Transformer Engine GEMM call (the calibration's `host_launch_s` is their
median).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterable, Iterator

from autotune.calibrate.samples import (
    AttentionSample,
    CollectiveSample,
    GemmSample,
    OverlapSample,
    ParsedFile,
)
from autotune.errors import InputError
from autotune.specs.base import MAX_BYTES, MAX_CHIPS, MAX_SECONDS
from autotune.specs.calibration import MAX_HOST_LAUNCH_S
from cost_models import Axis, CollectiveOp

CSV_COLUMNS = ("kind", "op", "axis", "ring_size", "shard_bytes", "m", "n", "k", "dtype", "seconds")
#: columns a CSV may add after CSV_COLUMNS (grouped_gemm rows need `groups`)
OPTIONAL_COLUMNS = ("groups",)
KINDS = (
    "collective",
    "gemm",
    "grouped_gemm",
    "overlap",
    "attention",
    "attention_backward",
    "host_launch",
)
DTYPES = ("bf16", "fp16", "fp32", "fp8")
OPS = tuple(op.value for op in CollectiveOp)
_COLLECTIVE_ONLY = ("op", "axis", "ring_size", "shard_bytes")
_GEMM_ONLY = ("m", "n", "k")


def _require_empty(
    row: dict[str, str], names: tuple[str, ...], kind: str, path: str, line: int
) -> None:
    """Reject a value in a column that belongs to the other row kind."""
    for name in names:
        if row[name]:
            raise InputError(
                f"must be empty in a {kind} row",
                file=path,
                line=line,
                field=name,
                value=row[name],
                fix=f"leave {', '.join(names)} empty",
            )


def looks_like_csv(text: str) -> bool:
    """Whether the first non-comment line is meshtune's CSV header."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        return line.replace(" ", "").lower().startswith("kind,")
    return False


def _number(text: str, cast, *, file: str, line: int, field: str, fix: str):
    try:
        value = cast(text)
    except ValueError:
        raise InputError(
            "is not a number", file=file, line=line, field=field, value=text, fix=fix
        ) from None
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(
            "is not a finite number", file=file, line=line, field=field, value=text, fix=fix
        )
    return value


# Plausible ranges of a row's numbers: a measured time from a nanosecond to
# an hour, a piece up to 1 PiB, GEMM sizes and rings as the specs bound them
# (autotune/specs/base.py); inside them no product the fits form overflows.
MIN_SECONDS = 1e-9
MAX_GEMM_DIM = 2**48


def _positive_float(
    text: str, *, file: str, line: int, field: str, fix: str, low: float, high: float
) -> float:
    """A finite number from `low` (> 0) to `high`, or a one-line InputError
    naming the cell."""
    value = _number(text, float, file=file, line=line, field=field, fix=fix)
    if not low <= value <= high:
        raise InputError(
            f"must be from {low:g} to {high:g}",
            file=file,
            line=line,
            field=field,
            value=text,
            fix=fix,
        )
    return value


def _positive_int(text: str, *, file: str, line: int, field: str, high: int) -> int:
    fix = f"write {field} as a whole number from 1 to {high}"
    value = _number(text, int, file=file, line=line, field=field, fix=fix)
    if not 1 <= value <= high:
        raise InputError(
            f"must be from 1 to {high}", file=file, line=line, field=field, value=text, fix=fix
        )
    return value


def _rows(source: Iterable[str], path: str, first_line: int) -> Iterator[list[str]]:
    """csv rows of `source`, a malformed row (say a cell over the csv
    module's 128 KiB limit) reported as bad input at its line."""
    reader = csv.reader(source)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise InputError(
                f"is not a valid CSV row ({exc})",
                file=path,
                line=first_line + max(reader.line_num - 1, 0),
                fix="write one short value per column, comma-separated",
            ) from None
        yield cells


def _collective_fields(
    row: dict[str, str], path: str, line: int
) -> tuple[CollectiveOp, Axis, int, float]:
    """op, axis, ring_size and shard_bytes of a collective (or overlap) row."""
    if row["op"] not in OPS:
        raise InputError(
            "is not a known operation",
            file=path,
            line=line,
            field="op",
            value=row["op"],
            fix=f"use one of {', '.join(OPS)}",
        )
    if row["axis"] not in ("row", "col"):
        raise InputError(
            "is not a mesh axis",
            file=path,
            line=line,
            field="axis",
            value=row["axis"],
            fix="use row or col",
        )
    ring = _positive_int(row["ring_size"], file=path, line=line, field="ring_size", high=MAX_CHIPS)
    if ring < 2:
        raise InputError(
            "must be >= 2 (a ring of one chip sends nothing)",
            file=path,
            line=line,
            field="ring_size",
            value=row["ring_size"],
            fix="measure rings of 2 or more chips",
        )
    shard = _positive_float(
        row["shard_bytes"],
        file=path,
        line=line,
        field="shard_bytes",
        fix="write the per-chip piece in bytes",
        low=1.0,
        high=MAX_BYTES,
    )
    return CollectiveOp(row["op"]), Axis(row["axis"]), ring, shard


def _gemm_fields(row: dict[str, str], dtype: str, path: str, line: int) -> tuple[int, int, int]:
    """m, n, k of a gemm (or overlap) row, which must name its dtype."""
    if not dtype:
        raise InputError(
            f"is required in a {row['kind'].lower()} row",
            file=path,
            line=line,
            field="dtype",
            fix=f"use one of {', '.join(DTYPES)}",
        )
    m, n, k = (
        _positive_int(row[d], file=path, line=line, field=d, high=MAX_GEMM_DIM) for d in "mnk"
    )
    return m, n, k


def parse_csv(text: str, path: str, sha256: str | None = None) -> ParsedFile:
    """Read a benchmark CSV; the first bad row raises an InputError naming
    the file, the line, the column, the value and the fix."""
    digest = sha256 or hashlib.sha256(text.encode("utf-8")).hexdigest()
    lines = text.splitlines()
    header_line = None
    for number, raw in enumerate(lines, start=1):
        if raw.strip() and not raw.lstrip().startswith("#"):
            header_line = number
            break
    if header_line is None:
        raise InputError(
            "has no header and no rows",
            file=path,
            fix=f"start the file with the header {','.join(CSV_COLUMNS)}",
        )
    header = [h.strip().lower() for h in next(_rows([lines[header_line - 1]], path, header_line))]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise InputError(
            f"the header lacks column {missing[0]!r}",
            file=path,
            line=header_line,
            fix=f"use the header {','.join(CSV_COLUMNS)}",
        )
    extra = [c for c in header if c not in CSV_COLUMNS + OPTIONAL_COLUMNS]
    if extra:
        raise InputError(
            f"the header has unknown column {extra[0]!r}",
            file=path,
            line=header_line,
            fix=f"use the header {','.join(CSV_COLUMNS)} (and optionally "
            f"{', '.join(OPTIONAL_COLUMNS)})",
        )

    collectives: list[CollectiveSample] = []
    gemms: list[GemmSample] = []
    overlaps: list[OverlapSample] = []
    attentions: list[AttentionSample] = []
    host_launches: list[float] = []
    body = "\n".join(lines[header_line:])
    for offset, cells in enumerate(_rows(io.StringIO(body), path, header_line + 1)):
        line = header_line + 1 + offset
        if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
            continue
        if len(cells) != len(header):
            raise InputError(
                f"has {len(cells)} cells, the header has {len(header)}",
                file=path,
                line=line,
                fix="write one value (or nothing) per column",
            )
        row = {name: cell.strip() for name, cell in zip(header, cells, strict=True)}
        row.setdefault("groups", "")
        kind = row["kind"].lower()
        if kind not in KINDS:
            raise InputError(
                "is not a row kind",
                file=path,
                line=line,
                field="kind",
                value=row["kind"],
                fix=f"use {', '.join(KINDS[:-1])} or {KINDS[-1]}",
            )
        if kind != "grouped_gemm":
            _require_empty(row, ("groups",), kind, path, line)
        seconds = _positive_float(
            row["seconds"],
            file=path,
            line=line,
            field="seconds",
            fix="write the measured time in seconds",
            low=MIN_SECONDS,
            high=MAX_SECONDS,
        )
        dtype = row["dtype"].lower()
        if dtype and dtype not in DTYPES:
            raise InputError(
                "is not a known dtype",
                file=path,
                line=line,
                field="dtype",
                value=row["dtype"],
                fix=f"use one of {', '.join(DTYPES)}",
            )
        if kind == "collective":
            _require_empty(row, _GEMM_ONLY, "collective", path, line)
            op, axis, ring, shard = _collective_fields(row, path, line)
            collectives.append(CollectiveSample(op, axis, ring, shard, seconds, path, line))
        elif kind == "gemm":
            _require_empty(row, _COLLECTIVE_ONLY, "gemm", path, line)
            m, n, k = _gemm_fields(row, dtype, path, line)
            gemms.append(GemmSample(m, n, k, dtype, seconds, path, line))
        elif kind == "grouped_gemm":
            _require_empty(row, _COLLECTIVE_ONLY, "grouped_gemm", path, line)
            m, n, k = _gemm_fields(row, dtype, path, line)
            if not row["groups"]:
                raise InputError(
                    "is required in a grouped_gemm row",
                    file=path,
                    line=line,
                    field="groups",
                    fix="add a groups column after seconds with the number of groups "
                    "(experts) the kernel ran",
                )
            groups = _positive_int(
                row["groups"], file=path, line=line, field="groups", high=MAX_GEMM_DIM
            )
            gemms.append(GemmSample(m, n, k, dtype, seconds, path, line, groups))
        elif kind == "overlap":
            op, axis, ring, shard = _collective_fields(row, path, line)
            m, n, k = _gemm_fields(row, dtype, path, line)
            overlaps.append(
                OverlapSample(
                    GemmSample(m, n, k, dtype, seconds, path, line),
                    CollectiveSample(op, axis, ring, shard, seconds, path, line),
                    seconds,
                    path,
                    line,
                )
            )
        elif kind == "host_launch":
            _require_empty(row, (*_COLLECTIVE_ONLY, *_GEMM_ONLY, "dtype"), kind, path, line)
            if seconds > MAX_HOST_LAUNCH_S:
                raise InputError(
                    "is above 1 ms, longer than the host takes to issue one kernel",
                    file=path,
                    line=line,
                    field="seconds",
                    value=row["seconds"],
                    fix="write the host time of one kernel launch (an nsys profile's median "
                    "per call), not of a layer or a step",
                )
            host_launches.append(seconds)
        elif kind in ("attention", "attention_backward"):
            _require_empty(row, ("axis", "ring_size", "shard_bytes"), kind, path, line)
            mask = row["op"].lower()
            if mask not in ("causal", "full"):
                raise InputError(
                    "is not an attention mask",
                    file=path,
                    line=line,
                    field="op",
                    value=row["op"],
                    fix="write causal or full in the op column of an attention row",
                )
            m, n, k = _gemm_fields(row, dtype, path, line)
            attentions.append(
                AttentionSample(
                    m, n, k, mask == "causal", dtype, seconds, path, line,
                    backward=kind == "attention_backward",
                )
            )  # fmt: skip
    if not collectives and not gemms and not overlaps and not attentions and not host_launches:
        raise InputError(
            "has a header but no measurement rows",
            file=path,
            fix="add collective or gemm rows (see docs/calibrate.md)",
        )
    return ParsedFile(
        path=path,
        kind="meshtune-csv",
        sha256=digest,
        collectives=tuple(collectives),
        gemms=tuple(gemms),
        description=f"{len(collectives)} collective and {len(gemms)} gemm rows"
        + (f" ({grouped} grouped)" if (grouped := sum(g.groups > 1 for g in gemms)) else "")
        + (f", {len(overlaps)} overlap rows" if overlaps else "")
        + (f", {len(attentions)} attention rows" if attentions else "")
        + (f" ({back} backward)" if (back := sum(a.backward for a in attentions)) else "")
        + (f", {len(host_launches)} host_launch rows" if host_launches else ""),
        overlaps=tuple(overlaps),
        attentions=tuple(attentions),
        host_launches=tuple(host_launches),
    )
