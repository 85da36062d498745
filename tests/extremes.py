"""Every numeric field of every input format, set to an extreme number, run
through the CLI in-process (used by tests/test_reliability_extremes.py).

A format is a sample file and the command that reads it. Its numeric fields
are found by parsing the sample (YAML, JSON) or by its columns (benchmark
CSV, nccl-tests log); each field is rewritten with a number exactly as a
user would type it, and the run must keep meshtune's failure contract: exit
0, 1 or 2; on failure one `meshtune: error:` line; on exit 2 that line names
the field and the number as written; on success no NaN or infinity in the
JSON written.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from clirun import Run, run_cli
from test_formats_hf import LLAMA_3_8B

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
PRESETS = REPO / "autotune" / "presets"
SEED = REPO / "tests" / "fixtures" / "seed_tool"
CALIBRATIONS = REPO / "calibration_data"
NCCL = REPO / "tests" / "fixtures" / "nccl"

# The numbers, as typed: the largest double, its negative, the smallest
# subnormal, the largest signed and unsigned 64-bit integers.
EXTREMES = ("1e308", "-1e308", "5e-324", "9223372036854775807", "18446744073709551615")
_MARK = "__MESHTUNE_EXTREME__"
_PIPELINE_LIMIT = ("--time-limit", "1")


@dataclass(frozen=True)
class Field:
    """One numeric field of one format's sample."""

    fmt: str
    path: str  # the field as an error names it (dotted keys, [index]); for text: the column
    name: str  # the part of `path` an error line must hold
    rewrite: Callable[[str], str]  # the sample with this field set to the given text


@dataclass(frozen=True)
class Format:
    """A sample input file and the command line that reads it."""

    name: str
    file_name: str
    text: str
    args: Callable[[str, str], tuple[str, ...]]  # (input path, scratch folder) -> CLI args
    kind: str  # yaml | json | csv | nccl
    json_out: str | None = None  # "stdout" or a file name in the scratch folder
    reads: tuple[str, ...] = ()  # the top-level keys the command reads (all when empty)
    # fields that differ only in these path parts count once (a calibration's
    # collectives repeat the same fields for every operation and resource)
    same: str | None = None


def _leaves(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _leaves(value, (*path, index))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path


def _shown(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _generic(path: tuple, same: str | None) -> str:
    """The path with list indices dropped (fields that repeat in a list count
    once) and the parts `same` matches made wildcards."""
    text = ".".join(str(p) for p in path if not isinstance(p, int))
    return re.sub(same, "*", text) if same else text


def _set(doc: Any, path: tuple, value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


def _document_fields(fmt: Format) -> list[Field]:
    doc = yaml.safe_load(fmt.text) if fmt.kind == "yaml" else json.loads(fmt.text)
    fields: dict[str, Field] = {}
    for path in _leaves(doc):
        generic = _generic(path, fmt.same)
        if generic in fields or (fmt.reads and path[0] not in fmt.reads):
            continue
        marked = _set(doc, path, _MARK)
        if fmt.kind == "yaml":
            text = yaml.safe_dump(marked, sort_keys=False, width=10_000)
        else:
            text = json.dumps(marked, indent=1)
        quoted = f'"{_MARK}"' if fmt.kind == "json" else _MARK
        name = next((str(p) for p in reversed(path) if not isinstance(p, int)), "")
        fields[generic] = Field(
            fmt.name,
            _shown(path),
            name,
            lambda number, text=text, quoted=quoted: text.replace(quoted, number),
        )
    return list(fields.values())


def _table_fields(fmt: Format, rows: dict[str, int], columns: dict[str, int]) -> list[Field]:
    """Cells of text tables: `rows` maps a label to a line number, `columns`
    a column name to its whitespace- or comma-separated position."""
    lines = fmt.text.splitlines(keepends=True)
    sep = "," if fmt.kind == "csv" else None
    out = []
    for label, at in rows.items():
        for column, position in columns.items():

            def rewrite(number: str, at: int = at, position: int = position) -> str:
                new = list(lines)
                cells = new[at].rstrip("\n").split(sep)
                cells[position] = number
                new[at] = (sep or "  ").join(cells) + "\n"
                return "".join(new)

            out.append(Field(fmt.name, f"{label} {column}", column, rewrite))
    return out


def formats() -> list[Format]:
    """Every input format meshtune reads, each with a sample."""
    gpt3 = str(EXAMPLES / "gpt3.yaml")
    a100 = str(EXAMPLES / "megatron-gpt-175b-a100.yaml")
    bench = str(CALIBRATIONS / "example_bench.csv")
    # a 1D plan of 8 chips: every target exports it and the emulator runs it fast
    plan_doc = (REPO / "tests" / "fixtures" / "formats" / "plan_gpt3_1d_tp8.json").read_text()
    # the Llama 3 8B config.json of the reader's tests, with the float keys
    # real configs carry (read, not used: their extremes must not matter)
    hf = {**LLAMA_3_8B, "rms_norm_eps": 1e-05, "rope_theta": 500000.0}
    out = [
        Format(
            "plan YAML",
            "job.yaml",
            (EXAMPLES / "gpt3.yaml").read_text(),
            lambda p, d: ("plan", p, "--format", "json"),
            "yaml",
            "stdout",
        ),
        Format(
            "plan YAML (searched degrees)",
            "job.yaml",
            (EXAMPLES / "llama3-70b-h100-auto.yaml").read_text(),
            lambda p, d: ("plan", p, "--format", "json"),
            "yaml",
            "stdout",
        ),
        Format(
            "model YAML",
            "model.yaml",
            (PRESETS / "models" / "gpt3-175b.yaml").read_text(),
            lambda p, d: ("plan", gpt3, "--model", p, "--format", "json"),
            "yaml",
            "stdout",
        ),
        Format(
            "Hugging Face config.json",
            "config.json",
            json.dumps(hf, indent=1),
            lambda p, d: (
                "plan",
                str(EXAMPLES / "llama3-70b-h100.yaml"),
                "--model",
                p,
                "--format",
                "json",
            ),
            "json",
            "stdout",
        ),
    ]
    for cluster in ("h100-hgx", "tpu-v4-256", "tpu-v5p-1024", "gb200-nvl72", "mi300x-node"):
        job = gpt3 if cluster.startswith("tpu") else a100
        out.append(
            Format(
                f"cluster YAML {cluster}",
                "cluster.yaml",
                (PRESETS / "clusters" / f"{cluster}.yaml").read_text(),
                lambda p, d, job=job: ("plan", job, "--cluster", p, "--format", "json"),
                "yaml",
                "stdout",
            )
        )
    for chip in ("h100-sxm", "tpu-v4"):
        out.append(
            Format(
                f"chip YAML {chip}",
                "chip.yaml",
                (PRESETS / "chips" / f"{chip}.yaml").read_text(),
                lambda p, d: ("calibrate", bench, "--chip", p, "--out", f"{d}/c.json"),
                "yaml",
                "c.json",
            )
        )
    small_a100 = str(REPO / "tests" / "fixtures" / "formats" / "small_a100_2n.yaml")
    for name, job in (("tpu_v4.json", gpt3), ("a100_measured.json", small_a100)):
        out.append(
            Format(
                f"calibration JSON {name}",
                "cal.json",
                (CALIBRATIONS / name).read_text(),
                lambda p, d, job=job: ("plan", job, "--calibration", p, "--format", "json"),
                "json",
                "stdout",
                same=r"(?<=^collectives\.)\w+\.\w+",
            )
        )
    for name in (
        "pipeline-llama-pp8.yaml",
        "pipeline-deepseek-v3-pp16.yaml",
        "pipeline-seed-format.yaml",
    ):
        out.append(
            Format(
                f"pipeline YAML {name}",
                "pipe.yaml",
                (EXAMPLES / name).read_text(),
                lambda p, d: ("pipeline", p, "--format", "json", *_PIPELINE_LIMIT),
                "yaml",
                "stdout",
            )
        )
    out += [
        Format(
            "seed init YAML (two rounds)",
            "init.yaml",
            (SEED / "init_demopp4.yaml").read_text(),
            lambda p, d: (
                "pipeline",
                p,
                "--micro-batches",
                "8",
                "--memory-cap-mb",
                "62000",
                "--format",
                "json",
                *_PIPELINE_LIMIT,
            ),
            "yaml",
            "stdout",
        ),
        Format(
            "seed layer JSON",
            "layers.json",
            (SEED / "llama2_70b.json").read_text(),
            lambda p, d: (
                "pipeline",
                p,
                "--stages",
                "16",
                "--micro-batches",
                "32",
                "--memory-cap-mb",
                "62000",
                "--format",
                "json",
                *_PIPELINE_LIMIT,
            ),
            "json",
            "stdout",
        ),
        Format(
            "seed manual plans YAML",
            "manual.yaml",
            (SEED / "manual_demo.yaml").read_text(),
            lambda p, d: (
                "pipeline",
                str(SEED / "init_demo.yaml"),
                "--stages",
                "16",
                "--chunks",
                "3",
                "--micro-batches",
                "16",
                "--memory-cap-mb",
                "62000",
                "--manual",
                p,
                "--format",
                "json",
                *_PIPELINE_LIMIT,
            ),
            "yaml",
            "stdout",
        ),
        # verify reads only the mesh and the layers' GEMMs (autotune/verify/plan_file.py)
        Format(
            "plan JSON (verify)",
            "plan.json",
            plan_doc,
            lambda p, d: ("verify", p, "--format", "json"),
            "json",
            "stdout",
            ("mesh", "layers"),
        ),
        Format(
            "plan JSON (export)",
            "plan.json",
            plan_doc,
            lambda p, d: ("export", p, "--to", "megatron", "--out", f"{d}/x"),
            "json",
            None,
        ),
        Format(
            "benchmark CSV",
            "bench.csv",
            Path(bench).read_text(),
            lambda p, d: ("calibrate", p, "--out", f"{d}/c.json"),
            "csv",
            "c.json",
        ),
        Format(
            "nccl-tests log",
            "ag.txt",
            (NCCL / "all_gather_8gpu_v2.18.txt").read_text(),
            lambda p, d: ("calibrate", p, "--cluster", "h100-hgx", "--out", f"{d}/c.json"),
            "nccl",
            "c.json",
        ),
    ]
    return out


def fields(fmt: Format) -> list[Field]:
    """The numeric fields of `fmt`'s sample."""
    if fmt.kind in ("yaml", "json"):
        return _document_fields(fmt)
    lines = fmt.text.splitlines()
    if fmt.kind == "csv":
        header_at = next(i for i, line in enumerate(lines) if line.startswith("kind,"))
        header = lines[header_at].split(",")
        first = {}
        for i, line in enumerate(lines[header_at + 1 :], header_at + 1):
            first.setdefault(line.split(",", 1)[0], i)
        numeric = ["ring_size", "shard_bytes", "m", "n", "k", "seconds"]
        rows = {f"line {i + 1} ({kind})": i for kind, i in first.items()}
        out = []
        for label, at in rows.items():
            cells = lines[at].split(",")
            columns = {c: header.index(c) for c in numeric if cells[header.index(c)]}
            out += _table_fields(fmt, {label: at}, columns)
        return out
    # nccl-tests: the first data row; its columns size, count, then times and rates
    at = next(i for i, line in enumerate(lines) if re.match(r"^\s+\d+\s+\d+\s+\w+", line))
    names = ["size", "count", "type", "redop", "root"] + ["time", "algbw", "busbw", "#wrong"] * 2
    cells = lines[at].split()
    columns = {
        names[i] if i < len(names) else f"column {i}": i
        for i, cell in enumerate(cells)
        if re.fullmatch(r"[\d.]+", cell)
    }
    return _table_fields(fmt, {f"line {at + 1}": at}, columns)


def run_case(fmt: Format, field: Field, number: str) -> tuple[Run, Any]:
    """Run the command on the sample with `field` set to `number`; the run
    and the JSON it wrote (None when it wrote none)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / fmt.file_name
        path.write_text(field.rewrite(number))
        run = run_cli(*fmt.args(str(path), folder))
        written = None
        if fmt.json_out is None:  # text outputs (exports): every file written
            written = [f.read_text() for f in Path(folder).rglob("*") if f.is_file() and f != path]
        elif run.exit_code == 0 and fmt.json_out == "stdout":
            written = run.stdout
        elif fmt.json_out and (Path(folder) / fmt.json_out).exists():
            written = (Path(folder) / fmt.json_out).read_text()
        return run, written


def _reject(constant: str) -> None:
    raise AssertionError(f"JSON output holds {constant}")


def contract_breaches(fmt: Format, field: Field, number: str, run: Run, written: Any) -> list[str]:
    """What the run did that the failure contract forbids (empty: it kept it)."""
    problems = []
    if run.exit_code not in (0, 1, 2):
        problems.append(f"exit {run.exit_code}: {run.stderr.strip()[:300]}")
        return problems
    lines = [x for x in run.stderr.splitlines() if not x.startswith("meshtune: warning: ")]
    if run.exit_code != 0:
        if len(lines) != 1 or not lines[0].startswith("meshtune: error: "):
            problems.append(f"not one error line: {run.stderr[:300]!r}")
        elif run.exit_code == 2:
            line = lines[0]
            if number not in line:
                problems.append(f"does not show {number} as written: {line[:300]}")
            if field.name not in line:
                problems.append(f"does not name {field.name}: {line[:300]}")
        if written and fmt.json_out != "stdout":
            problems.append("wrote an output on failure")
    elif isinstance(written, list):
        for text in written:
            if re.search(r"(?i)\b(nan|inf|infinity)\b", text):
                problems.append(f"an output holds NaN or infinity: {text[:200]!r}")
    elif written is not None:
        try:
            json.loads(written, parse_constant=_reject)
        except AssertionError as exc:
            problems.append(str(exc))
    return problems
