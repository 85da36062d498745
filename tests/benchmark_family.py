"""benchmarks/pipeline_robustness.py as a module, for the tests that build
members of its family of hard pipeline instances (benchmarks/ is not a
package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "pipeline_robustness",
    Path(__file__).resolve().parent.parent / "benchmarks" / "pipeline_robustness.py",
)
family = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(family)
