"""Raw nccl-tests output, exactly as pasted (docs/calibrate.md).

Handles the layouts nccl-tests has printed over its versions: with and
without the `# nccl-tests version` and `# Collective test starting` lines,
`#  Rank` lines with and without `Group`, one process driving many GPUs or
many ranks on many hosts, tables with or without the `redop`/`root` columns,
`error` or `#wrong` columns, `N/A` cells, times printed with 2, 1 or 0
decimals (nccl-tests switches at 100 us and 10 ms), size-0 rows, NCCL debug
lines mixed into the table, and markdown fences around the log.

Which piece of each row becomes the model's `shard_bytes` (nccl-tests
doc/PERFORMANCE.md: for all-gather and reduce-scatter the printed size is the
whole buffer, `count * sizeof(type) * nranks`):

- all_gather_perf, reduce_scatter_perf, alltoall_perf: ring of P ranks,
  `shard_bytes = size / P` (one rank's input piece, output piece, or the
  piece sent to each peer).
- all_reduce_perf: a ring all-reduce is a reduce-scatter and an all-gather
  over pieces of `size / P`, i.e. `2 (P - 1)` steps; meshtune writes it as
  `P - 1` steps of `shard_bytes = 2 * size / P`, so its fitted `sync_s` is
  per pair of steps (derivation; see docs/calibrate.md).
- sendrecv_perf: every rank sends `size` bytes to its ring neighbour at
  once, one hop whatever the rank count: `ring_size = 2` (P - 1 = 1 hop),
  `shard_bytes = size`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from autotune.calibrate.samples import CollectiveSample, ParsedFile
from autotune.errors import InputError
from cost_models import Axis, CollectiveOp

#: nccl-tests binary stem -> the operation it measures
TESTS: dict[str, CollectiveOp] = {
    "all_gather": CollectiveOp.ALL_GATHER,
    "reduce_scatter": CollectiveOp.REDUCE_SCATTER,
    "all_reduce": CollectiveOp.ALL_REDUCE,
    "sendrecv": CollectiveOp.SEND_RECV,
    "alltoall": CollectiveOp.ALL_TO_ALL,
}
_UNSUPPORTED = ("broadcast", "reduce", "gather", "scatter", "hypercube", "alltoallv")

_TEST_RE = re.compile(r"(?<![A-Za-z0-9])([a-z_]+?)_perf(?:_mpi)?(?![A-Za-z])")
_RANK_RE = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
    r"\[[^\]]*\]\s*(.*)$"
)
_INT_RE = re.compile(r"^\d+$")


@dataclass
class _State:
    op: CollectiveOp | None = None
    ranks: set[int] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    columns: list[str] | None = None
    header_line: int = 0


def _test_name(text: str) -> str | None:
    for match in _TEST_RE.finditer(text):
        name = match.group(1)
        if name in TESTS or name in _UNSUPPORTED:
            return name
    return None


def _op_for(name: str, *, file: str, line: int | None) -> CollectiveOp:
    if name in TESTS:
        return TESTS[name]
    raise InputError(
        f"{name}_perf is not an operation meshtune calibrates",
        file=file,
        line=line,
        fix="pass all_gather_perf, reduce_scatter_perf, all_reduce_perf, sendrecv_perf "
        "or alltoall_perf output",
    )


def looks_like_nccl_tests(text: str) -> bool:
    """Whether the text looks like nccl-tests output (a result header, the
    device list or the run-parameter line), with or without a table."""
    for raw in text.splitlines():
        line = raw.strip()
        if (
            _is_header(line)
            or _RANK_RE.match(line)
            or re.match(r"^#\s*(Using devices|nThread)", line)
        ):
            return True
    return False


def _is_header(line: str) -> bool:
    if not line.startswith("#"):
        return False
    tokens = line.lstrip("#").split()
    return "size" in tokens and "algbw" in tokens and ("time" in tokens or "cputime" in tokens)


def _piece(op: CollectiveOp, size_bytes: int, num_ranks: int) -> tuple[int, float]:
    """(ring_size, shard_bytes) of one nccl-tests row; see the module docstring."""
    if op is CollectiveOp.SEND_RECV:
        return 2, float(size_bytes)
    if op is CollectiveOp.ALL_REDUCE:
        return num_ranks, 2.0 * size_bytes / num_ranks
    return num_ranks, size_bytes / num_ranks


def _time_us(cells: list[str], columns: list[str], *, file: str, line: int) -> float | None:
    """The out-of-place time, or the in-place one when that is N/A."""
    time_cols = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
    wrong_cols = [i for i, c in enumerate(columns) if c in ("#wrong", "error")]
    for group, i in enumerate(time_cols):
        text = cells[i]
        if text.upper() == "N/A":
            continue
        if group < len(wrong_cols):
            check = cells[wrong_cols[group]]
            if columns[wrong_cols[group]] == "#wrong" and _INT_RE.match(check) and int(check):
                continue  # nccl-tests flagged wrong results: not a valid timing
        try:
            value = float(text)
        except ValueError:
            raise InputError(
                "is not a time in microseconds",
                file=file,
                line=line,
                field=columns[i],
                value=text,
                fix="paste the nccl-tests table unchanged",
            ) from None
        if value <= 0:
            raise InputError(
                "must be > 0",
                file=file,
                line=line,
                field=columns[i],
                value=text,
                fix="remove the row or rerun the benchmark",
            )
        return value
    return None


def parse_nccl_tests(
    text: str, path: str, axes: tuple[Axis, ...], sha256: str | None = None
) -> ParsedFile:
    """Read one nccl-tests log; every result row becomes one sample per
    mesh axis in `axes` (a GPU log has no mesh axis of its own)."""
    digest = sha256 or hashlib.sha256(text.encode("utf-8")).hexdigest()
    state = _State()
    stem_name = _test_name(Path(path).name)
    samples: list[CollectiveSample] = []
    skipped: list[int] = []
    tests_seen: list[str] = []
    ranks_seen: list[int] = []
    hosts: set[str] = set()
    gpus: set[str] = set()

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("```", "~~~")):
            continue
        name = _test_name(line) if "_perf" in line else None
        if name is not None:
            state.op = _op_for(name, file=path, line=number)
            if name not in tests_seen:
                tests_seen.append(name)
        if line.startswith("#"):
            if re.match(r"^#\s*Using devices", line):
                state.ranks.clear()
                state.hosts.clear()
                state.gpus.clear()
                continue
            rank = _RANK_RE.match(line)
            if rank:
                state.ranks.add(int(rank.group(1)))
                state.hosts.add(rank.group(2))
                state.gpus.add(rank.group(3).strip())
                continue
            if _is_header(line):
                state.columns = line.lstrip("#").split()
                state.header_line = number
            continue
        cells = line.split()
        if state.columns is None or not _INT_RE.match(cells[0]):
            continue  # NCCL debug output, launcher chatter, the echoed command line
        if len(cells) != len(state.columns):
            skipped.append(number)  # a row split by interleaved debug output
            continue
        size_bytes = int(cells[0])
        if size_bytes == 0:
            continue  # nccl-tests times an empty call: no data moves
        us = _time_us(cells, state.columns, file=path, line=number)
        if us is None:
            skipped.append(number)
            continue
        op = state.op or (_op_for(stem_name, file=path, line=number) if stem_name else None)
        if op is None:
            raise InputError(
                "cannot tell which nccl-tests binary printed this table",
                file=path,
                line=number,
                fix="keep the '# Collective test starting' or command line in the paste, "
                "or name the file after the test (e.g. all_gather_perf.txt)",
            )
        num_ranks = len(state.ranks)
        if num_ranks == 0:
            raise InputError(
                "the table has no '#  Rank' lines before it, so the rank count is unknown",
                file=path,
                line=number,
                fix="paste the whole log including the '# Using devices' block",
            )
        if num_ranks < 2:
            raise InputError(
                f"the log lists {num_ranks} rank, which measures no communication",
                file=path,
                line=number,
                fix="benchmark 2 or more ranks (if every rank printed 'Rank 0', "
                "rebuild nccl-tests with MPI=1)",
            )
        ring, shard = _piece(op, size_bytes, num_ranks)
        for axis in axes:
            samples.append(CollectiveSample(op, axis, ring, shard, us * 1e-6, path, number))
        ranks_seen.append(num_ranks)
        hosts |= state.hosts
        gpus |= state.gpus

    if not samples:
        where = state.header_line or max(len(text.splitlines()), 1)
        what = (
            "has a result header but no result rows"
            if state.columns
            else ("has no nccl-tests result table")
        )
        raise InputError(
            what, file=path, line=where, fix="paste the full output of an nccl-tests *_perf run"
        )
    tests = ", ".join(f"{t}_perf" for t in tests_seen) or f"{stem_name}_perf"
    rank_counts = "/".join(str(r) for r in sorted(set(ranks_seen)))
    links = "intra-node links" if len(hosts) == 1 else "inter-node links"
    description = (
        f"{tests}: {rank_counts} ranks on {len(hosts)} host(s) "
        f"({', '.join(sorted(gpus)) or 'GPU not stated'}); {links}"
    )
    return ParsedFile(
        path=path,
        kind="nccl-tests",
        sha256=digest,
        collectives=tuple(samples),
        gemms=(),
        description=description,
        skipped_lines=tuple(skipped),
    )
