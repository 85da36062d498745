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
from autotune.specs.base import MAX_SECONDS
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

_TOKEN_BEFORE_PERF_RE = re.compile(r"([A-Za-z0-9_]+)_perf(?:_mpi)?(?![A-Za-z])")
_KNOWN = tuple(sorted((*TESTS, *_UNSUPPORTED), key=len, reverse=True))
_INT_ARG = r"[= ]\s*(\d+)\b"
#: launcher options giving the process count (mpirun, srun)
_PROCS_RE = re.compile(r"(?:^|\s)(?:-np|-n|--np|--n|--ntasks)" + _INT_ARG)
#: torchrun-style per-node process count, and node counts
_PER_NODE_RE = re.compile(r"(?:^|\s)--nproc[_-]per[_-]node" + _INT_ARG)
_NNODES_RE = re.compile(r"(?:^|\s)(?:--nnodes|--nodes)" + _INT_ARG)
_NPERNODE_RE = re.compile(r"(?:^|\s)(?:-npernode|--npernode|--ntasks-per-node)" + _INT_ARG)
#: `-N` is the node count for srun but the processes per node for Open MPI's mpirun
_DASH_N_RE = re.compile(r"(?:^|\s)-N" + _INT_ARG)
_HOSTS_RE = re.compile(r"(?:^|\s)(?:-H|--host|-host)\s+(\S+)")
#: nccl-tests' own options after the binary: GPUs per thread, threads per process
_GPUS_RE = re.compile(r"(?:^|\s)(?:-g|--ngpus)" + _INT_ARG)
_THREADS_RE = re.compile(r"(?:^|\s)(?:-t|--nthreads)" + _INT_ARG)
_NTHREAD_LINE_RE = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
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
    """The nccl-tests binary named in `text` (`all_gather_perf`,
    `/build/all_gather_perf_mpi`, `nccl_all_gather_perf.txt`): the longest
    known test name ending the word before `_perf`."""
    for match in _TOKEN_BEFORE_PERF_RE.finditer(text):
        token = match.group(1).lower()
        for name in _KNOWN:
            if token == name or token.endswith("_" + name):
                return name
    return None


def _file_test_name(file_name: str) -> str | None:
    """The test named by a file name: `..._perf` anywhere in it, else a
    known test name between separators (`rccl_all_reduce_8gpu.log`)."""
    found = _test_name(file_name)
    if found:
        return found
    stem = file_name.lower()
    for name in _KNOWN:
        if re.search(rf"(?:^|[^a-z0-9]|_){name}(?:$|[^a-z0-9])", stem):
            return name
    return None


@dataclass(frozen=True)
class _Launch:
    """What a command line says about the run: ranks and hosts."""

    ranks: int
    hosts: int | None  # None: not stated
    how: str


def _launch_from_command(command: str, threads_gpus: tuple[int, int] | None) -> _Launch | None:
    """Ranks of a run from its echoed command line: launcher processes x
    nccl-tests threads (`-t`) x GPUs per thread (`-g`); None when the line
    does not run an nccl-tests binary."""
    match = _TOKEN_BEFORE_PERF_RE.search(command)
    if not match or _test_name(command) is None:
        return None
    launcher, args = command[: match.start()], command[match.end() :]
    procs_m = _PROCS_RE.search(launcher)
    per_node_m = _PER_NODE_RE.search(launcher)
    nodes_m = _NNODES_RE.search(launcher)
    hosts_m = _HOSTS_RE.search(launcher)
    npernode_m = _NPERNODE_RE.search(launcher)
    dash_n = _DASH_N_RE.search(launcher)
    if dash_n and re.search(r"\bsrun\b", launcher):
        nodes_m = nodes_m or dash_n
    elif dash_n:
        npernode_m = npernode_m or dash_n
    hosts: int | None = None
    if hosts_m:
        hosts = len([h for h in hosts_m.group(1).split(",") if h])
    elif nodes_m:
        hosts = int(nodes_m.group(1))
    if procs_m:
        procs = int(procs_m.group(1))
        how = f"{procs} processes"
    elif per_node_m:
        procs = int(per_node_m.group(1)) * (hosts or 1)
        how = f"{per_node_m.group(1)} processes per node x {hosts or 1} node(s)"
    elif re.search(r"\b(mpirun|mpiexec|srun|torchrun)\b", launcher):
        return None  # a launcher without a process count: the rank count is not stated
    else:
        procs, how, hosts = 1, "1 process", 1
    if hosts is None and npernode_m and int(npernode_m.group(1)) > 0:
        hosts = max(1, -(-procs // int(npernode_m.group(1))))
    gpus_m, threads_m = _GPUS_RE.search(args), _THREADS_RE.search(args)
    default_threads, default_gpus = threads_gpus or (1, 1)
    gpus = int(gpus_m.group(1)) if gpus_m else default_gpus
    threads = int(threads_m.group(1)) if threads_m else default_threads
    how += f" x {threads} thread(s) x {gpus} GPU(s) per thread"
    return _Launch(procs * threads * gpus, hosts, how)


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


# Plausible range of one collective's time in a log, microseconds: a
# nanosecond to an hour (MAX_SECONDS); a time that rounds to zero seconds
# would make its bandwidth infinite.
MIN_TIME_US = 1e-3
MAX_TIME_US = MAX_SECONDS * 1e6


def _time_us(cells: list[str], columns: list[str], *, file: str, line: int) -> float | None:
    """The smaller of the out-of-place and in-place times (both time the
    same collective moving the same bytes; a spike in one of them is
    interference), skipping N/A cells and groups flagged wrong."""
    times = []
    time_cols = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
    for group in range(len(time_cols)):
        value = _group_time_us(cells, columns, group, file=file, line=line)
        if value is not None:
            times.append(value)
    return min(times) if times else None


def _group_time_us(
    cells: list[str], columns: list[str], only: int, *, file: str, line: int
) -> float | None:
    """The time of one column group (0 out-of-place, 1 in-place)."""
    time_cols = [i for i, c in enumerate(columns) if c in ("time", "cputime")]
    wrong_cols = [i for i, c in enumerate(columns) if c in ("#wrong", "error")]
    for group, i in enumerate(time_cols):
        if group != only:
            continue
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
        if not MIN_TIME_US <= value <= MAX_TIME_US:
            raise InputError(
                f"must be a time from {MIN_TIME_US:g} to {MAX_TIME_US:g} microseconds",
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
    stem_name = _file_test_name(Path(path).name)
    samples: list[CollectiveSample] = []
    skipped: list[int] = []
    tests_seen: list[str] = []
    ranks_seen: list[int] = []
    hosts: set[str] = set()
    gpus: set[str] = set()
    command = ""  # the last echoed command line (continuation lines joined)
    pending = ""
    threads_gpus: tuple[int, int] | None = None
    from_command: list[str] = []
    host_counts: list[int | None] = []

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("```", "~~~")):
            continue
        if not line.startswith("#"):
            bare = re.sub(r"^(?:>\s*|\$\s*)+", "", line)
            if bare.endswith("\\"):
                pending += " " + bare[:-1]
                continue
            if pending or "_perf" in bare:
                command = (pending + " " + bare).strip()
            pending = ""
        nthreads = _NTHREAD_LINE_RE.match(line)
        if nthreads:
            threads_gpus = (int(nthreads.group(1)), int(nthreads.group(2)))
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
        num_hosts: int | None = len(state.hosts)
        if num_ranks == 0:
            launch = _launch_from_command(command, threads_gpus) if command else None
            if launch is None:
                raise InputError(
                    "the table has no '#  Rank' lines before it and no command line "
                    "stating the rank count",
                    file=path,
                    line=number,
                    fix="paste the whole log including the '# Using devices' block, or the "
                    "command line (e.g. ./build/all_gather_perf -b 8 -e 1G -g 8)",
                )
            num_ranks, num_hosts = launch.ranks, launch.hosts
            if launch.how not in from_command:
                from_command.append(launch.how)
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
        host_counts.append(num_hosts)

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
    known_hosts = [h for h in host_counts if h is not None]
    if len(known_hosts) < len(host_counts) or not known_hosts:
        num_hosts_total, resource, links = None, None, "hosts not stated"
    else:
        num_hosts_total = max(known_hosts)
        resource = "intra_node" if num_hosts_total == 1 else "scale_out"
        links = "intra-node links" if num_hosts_total == 1 else "scale-out (inter-node) links"
    device_names = tuple(sorted(g for g in gpus if g))
    rank_note = f", rank count from the command line ({'; '.join(from_command)})"
    description = (
        f"{tests}: {rank_counts} ranks on "
        f"{num_hosts_total if num_hosts_total is not None else '?'} host(s) "
        f"({', '.join(device_names) or 'device not stated'}); {links}"
        + (rank_note if from_command else "")
    )
    return ParsedFile(
        path=path,
        kind="nccl-tests",
        sha256=digest,
        collectives=tuple(samples),
        gemms=(),
        description=description,
        skipped_lines=tuple(skipped),
        device_names=device_names,
        num_hosts=num_hosts_total,
        resource=resource,
    )
