"""JSON comparison with float tolerance, for golden-file tests."""

from __future__ import annotations

import math


def assert_json_close(actual, expected, path: str = "$", rel: float = 1e-9) -> None:
    """Deep equality of JSON values with a relative tolerance on floats."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_json_close(actual[key], expected[key], f"{path}.{key}", rel)
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_json_close(a, e, f"{path}[{i}]", rel)
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, (int, float)), path
        assert math.isclose(actual, expected, rel_tol=rel, abs_tol=1e-15), (
            f"{path}: {actual} != {expected}"
        )
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
