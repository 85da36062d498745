"""Hypothesis strategies that mutate meshtune's input files, and the checks
every fuzzed run must pass (used by tests/test_reliability_fuzz.py).

A YAML document is parsed, mutated (keys dropped, types swapped, numbers
made non-finite or extreme, values nested deeply, strings made long) and
written back; a benchmark CSV has cells replaced, rows dropped or
duplicated, digits appended to sizes and huge cells inserted.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st
from pydantic import BaseModel

DEEP = "__DEEP_NESTING__"

EXTREME_NUMBERS = [
    math.nan,
    math.inf,
    -math.inf,
    0,
    -1,
    -0.0,
    1e-308,
    1e308,
    2**62,
    10**30,
    2**31 - 1,
    3,
    0.5,
]
OTHER_VALUES = [None, True, "", "x", "1e-3", [], {}, [1, 2], {"a": 1}, "é" * 5]
# a string several times the renderers' width
LONG_TEXT = "n" * 5000


def leaf_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) in a parsed document, containers included."""
    paths = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            paths.extend(leaf_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            paths.extend(leaf_paths(value, (*prefix, index)))
    return paths


def _parent(doc: Any, path: tuple) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def replacement_values() -> st.SearchStrategy[Any]:
    """Values a mutation puts in place of another."""
    return st.one_of(
        st.sampled_from(EXTREME_NUMBERS),
        st.sampled_from(OTHER_VALUES),
        st.just(LONG_TEXT),
        st.just(DEEP),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def _mutate(draw: st.DrawFn, doc: Any) -> None:
    """Apply one to three mutations to the parsed document in place."""
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = leaf_paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["drop", "replace", "replace", "scale"]))
        if action == "drop":
            del parent[path[-1]]
        elif action == "scale" and isinstance(parent[path[-1]], (int, float)):
            factor = draw(st.sampled_from([10**12, 10**6, 1000, -1, 0, 1e-9]))
            parent[path[-1]] = parent[path[-1]] * factor
        else:
            # a copy: the strategy's own lists and dicts must never be mutated
            parent[path[-1]] = copy.deepcopy(draw(replacement_values()))


@st.composite
def mutated_yaml(draw: st.DrawFn, text: str) -> str:
    """`text` (a YAML document) with one to three mutations, as YAML text."""
    doc = yaml.safe_load(text)
    _mutate(draw, doc)
    out = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    depth = draw(st.sampled_from([70, 3000]))
    nested = "[" * depth + "]" * depth
    return out.replace(f"'{DEEP}'", nested).replace(DEEP, nested)


@st.composite
def mutated_json(draw: st.DrawFn, text: str) -> str:
    """`text` (a JSON document) with one to three mutations, as JSON text
    (NaN and Infinity written as JSON's non-standard tokens)."""
    doc = json.loads(text)
    _mutate(draw, doc)
    out = json.dumps(doc)
    depth = draw(st.sampled_from([70, 100_000]))
    return out.replace(f'"{DEEP}"', "[" * depth + "]" * depth)


CSV_CELLS = ["", "nan", "inf", "-inf", "-1", "0", "1e308", "abc", "9" * 40, "2.5", "x" * 200_000]


@st.composite
def mutated_csv(draw: st.DrawFn, text: str) -> str:
    """A benchmark CSV with one to three mutated rows."""
    lines = text.splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("kind,"))
    rows = list(range(header_at + 1, len(lines)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        at = draw(st.sampled_from(rows))
        cells = lines[at].split(",")
        action = draw(st.sampled_from(["cell", "cell", "digits", "drop", "duplicate", "header"]))
        if action == "cell":
            column = draw(st.integers(min_value=0, max_value=len(cells) - 1))
            cells[column] = draw(st.sampled_from(CSV_CELLS))
            lines[at] = ",".join(cells)
        elif action == "digits":  # a size typed with extra digits
            column = draw(st.sampled_from([3, 4, 5, 6, 7, 9]))
            if column < len(cells) and cells[column]:
                cells[column] = cells[column] + draw(st.sampled_from(["0", "00", "000000"]))
            lines[at] = ",".join(cells)
        elif action == "drop":
            lines[at] = ""
        elif action == "duplicate":
            lines.insert(at, lines[at])
        else:
            lines[header_at] = lines[header_at].replace("seconds", draw(st.sampled_from(["s", ""])))
    return "\n".join(lines) + "\n"


def _no_bad_numbers(actual: Any, baseline: Any, where: str) -> None:
    """Wherever the baseline document has a number, `actual` (if it has the
    key) holds a finite number, never null."""
    if isinstance(baseline, bool):
        return
    if isinstance(baseline, (int, float)):
        assert isinstance(actual, (int, float)) and not isinstance(actual, bool), (where, actual)
        assert math.isfinite(actual), (where, actual)
    elif isinstance(baseline, dict) and isinstance(actual, dict):
        for key, value in baseline.items():
            if key in actual:
                _no_bad_numbers(actual[key], value, f"{where}.{key}")
    elif isinstance(baseline, list) and isinstance(actual, list) and baseline:
        template = baseline[0]
        if all(type(b) is type(template) for b in baseline):
            for i, value in enumerate(actual):
                _no_bad_numbers(value, template, f"{where}[{i}]")


def _reject(constant: str) -> None:
    raise AssertionError(f"JSON output holds {constant}")


def check_json_output(text: str, promised: Any) -> Any:
    """Parse a JSON document meshtune wrote: no NaN or Infinity anywhere, and
    no null where a number is promised. `promised` is the document's schema
    (a pydantic model whose float fields reject null, NaN and infinity) or,
    for a document without one, the unmutated run's document (every place
    that holds a number there must hold a finite number here)."""
    doc = json.loads(text, parse_constant=_reject)
    if isinstance(promised, type) and issubclass(promised, BaseModel):
        promised.model_validate(doc)
    else:
        _no_bad_numbers(doc, promised, "$")
    return doc


def check_run(
    run: Any, out: Path, baseline: Any, json_stdout: bool, codes: tuple[int, ...] = (0, 1, 2)
) -> None:
    """The failure contract of one fuzzed CLI run: an exit code in `codes`;
    on failure one error line on stderr (after any `meshtune: warning:`
    lines the command printed while reading its input)."""
    assert run.exit_code in codes, (run.exit_code, run.stderr, run.exception)
    assert "Traceback" not in run.stderr
    if run.exit_code != 0:
        lines = [x for x in run.stderr.splitlines() if not x.startswith("meshtune: warning: ")]
        assert len(lines) == 1, run.stderr
        assert lines[0].startswith("meshtune: error: "), lines
    if run.exit_code != 0:
        assert not out.exists(), f"an output was written on failure (exit {run.exit_code})"
    if out.exists():
        check_json_output(out.read_text(), baseline)
    if run.exit_code == 0 and json_stdout:
        check_json_output(run.stdout, baseline)
