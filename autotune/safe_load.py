"""Bounded parsing of input files: YAML and JSON with limits on size, nesting
depth and alias expansion, and no NaN or infinity anywhere.

Every parser here turns a limit or a syntax problem into an `InputError`
(exit 2) naming the file, so no input can make meshtune recurse until it
crashes, expand a 400-byte YAML alias bomb to gigabytes, or carry a
non-finite number into a result. docs/reliability.md states the limits.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import InputError

MAX_FILE_BYTES = 64 * 2**20  # any one input file
MAX_DEPTH = 64  # nested mappings/lists in a YAML or JSON document
MAX_NODES = 1_000_000  # values in a document after YAML aliases are expanded


class WrittenFloat(float):
    """A float read from an input file that keeps the text it was written
    as, so an error names `1e308` or `.nan` as the user wrote it rather than
    `1e+308`; behaves as a float everywhere else."""

    __slots__ = ("written",)

    def __new__(cls, value: float, written: str | None = None) -> WrittenFloat:
        number = super().__new__(cls, value)
        number.written = written
        return number


def written_text(value: object) -> str | None:
    """How `value` was written in its input file, when it was read as a
    WrittenFloat; None otherwise."""
    return getattr(value, "written", None)


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-9` and `2.5e3` as numbers (YAML 1.2
    and JSON do; PyYAML's YAML 1.1 rules read them as strings, which turns
    a valid-looking number into a confusing type error)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    return WrittenFloat(loader.construct_yaml_float(node), str(node.value))


_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes, or an InputError (missing, a folder, a device, too
    large, unreadable, a name the system rejects)."""
    shown = str(path)
    p = Path(path)
    try:
        if not p.exists():
            raise InputError("no such file", file=shown, fix="check the path")
        if p.is_dir():
            raise InputError("is a folder, not a file", file=shown, fix="name a file")
        if not p.is_file():
            raise InputError(
                "is not a regular file (a device, FIFO or socket)",
                file=shown,
                fix="save the input to a file and pass that",
            )
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(
                f"is {size} bytes, more than the {MAX_FILE_BYTES} bytes an input may have",
                file=shown,
                fix="pass a smaller file (split measurements over several files)",
            )
        with p.open("rb") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(
            f"cannot be read: {exc.strerror or type(exc).__name__}",
            file=shown,
            fix="check the path and its permissions",
        ) from None


def _where(path: list[str]) -> str | None:
    text = "".join(path).lstrip(".")
    return text or None


def check_finite(data: Any, *, file: str | None) -> None:
    """Reject NaN and infinity anywhere in a parsed document, naming the
    key path (walks iteratively: the depth is already bounded, but a
    million-value document must not cost a deep Python stack)."""
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(
                "is not a finite number",
                file=file,
                field=_where(path),
                value=value,
                fix="write a finite number in the field's range (see its description)",
            )
        if isinstance(value, dict):
            stack.extend((v, [*path, f".{k}"]) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, [*path, f"[{i}]"]) for i, v in enumerate(value))


def _yaml_limits(text: str, file: str | None) -> None:
    """Walk the YAML event stream (no recursion, nothing built) and enforce
    MAX_DEPTH and MAX_NODES counting every alias as the values it expands to."""
    depth = 0
    anchored: dict[str, int] = {}  # anchor -> expanded values under it
    # open collections: [values so far, anchor]
    frames: list[list[Any]] = [[0, None]]
    total = 0  # values in the expanded document so far
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InputError(
                        f"nests mappings or lists more than {MAX_DEPTH} levels deep",
                        file=file,
                        fix="flatten the document (meshtune's formats need a few levels)",
                    )
                frames.append([1, event.anchor])
                total += 1
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                count, anchor = frames.pop()
                if anchor is not None:
                    anchored[anchor] = count
                frames[-1][0] += count
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor is not None:
                    anchored[event.anchor] = 1
                frames[-1][0] += 1
                total += 1
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor not in anchored:
                    raise InputError(
                        f"uses alias *{event.anchor} before its anchor is complete",
                        file=file,
                        fix="remove the recursive or undefined alias",
                    )
                frames[-1][0] += anchored[event.anchor]
                total += anchored[event.anchor]
            else:
                continue
            if total > MAX_NODES:
                raise InputError(
                    f"expands to more than {MAX_NODES} values (YAML aliases included)",
                    file=file,
                    fix="write the document without repeated aliases",
                )
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file) from None


def _yaml_error(exc: yaml.YAMLError, file: str | None) -> InputError:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None) or "syntax error"
    return InputError(
        f"is not valid YAML{where}: {problem}",
        file=file,
        fix="check indentation and quoting (YAML or JSON syntax)",
    )


def parse_yaml(text: str, *, file: str | None) -> Any:
    """Parse YAML (or JSON, a subset) within the limits; non-finite numbers
    are rejected."""
    if len(text) > MAX_FILE_BYTES:
        raise InputError(
            f"is longer than {MAX_FILE_BYTES} characters",
            file=file,
            fix="pass a smaller file",
        )
    _yaml_limits(text, file)
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file) from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of 5,000 digits
        raise InputError(
            f"holds a value that cannot be read: {str(exc)[:120]}",
            file=file,
            fix="write numbers in the fields' ranges",
        ) from None
    check_finite(data, file=file)
    return data


def _written_constant(name: str) -> float:
    """JSON's non-standard NaN / Infinity tokens, kept as written (then
    refused by check_finite with the key path)."""
    return WrittenFloat(float(name), name)


def _written_float(text: str) -> float:
    return WrittenFloat(float(text), text)


def parse_json(text: str, *, file: str | None, fix: str) -> Any:
    """Parse JSON within the limits; `NaN`, `Infinity` and numbers that
    overflow to infinity are rejected. `fix` says what file to pass instead."""
    if len(text) > MAX_FILE_BYTES:
        raise InputError(f"is longer than {MAX_FILE_BYTES} characters", file=file, fix=fix)
    depth = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            raise InputError(
                f"nests objects or arrays more than {MAX_DEPTH} levels deep", file=file, fix=fix
            )
    try:
        data = json.loads(text, parse_constant=_written_constant, parse_float=_written_float)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            file=file,
            fix=fix,
        ) from None
    except ValueError as exc:  # e.g. an integer of 5,000 digits
        raise InputError(
            f"holds a value that cannot be read: {str(exc)[:120]}",
            file=file,
            fix="write numbers in the fields' ranges",
        ) from None
    except RecursionError:
        raise InputError("nests too deeply", file=file, fix=fix) from None
    check_finite(data, file=file)
    return data
