"""Read a pipeline input file of either format into the balancer's Problem.

meshtune's YAML (yaml_format.py) and the seed tool's init YAML
(seed_format.py) are two readers of one Problem (problem.py); this module
picks the reader, so neither reader imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.pipeline.problem import Problem, SolverSettings


@dataclass(frozen=True)
class PipelineInput:
    """A file read: the problem, how to solve it, which format it was and,
    for the seed format, the memory decomposition it was built from."""

    problem: Problem
    settings: SolverSettings
    format: str
    decomposition: Any = None


def is_seed_format(data: dict[str, Any]) -> bool:
    """True for the seed tool's init YAML (it has `pipeline_config`)."""
    return "pipeline_config" in data


def read_pipeline_file(path: str | Path) -> PipelineInput:
    """Read either input format."""
    from autotune.loading import load_mapping

    data = load_mapping(path)
    if is_seed_format(data):
        from autotune.pipeline.seed_format import read_seed_problem

        problem, settings, dec = read_seed_problem(data, str(path))
        return PipelineInput(problem, settings, "seed", dec)
    from autotune.pipeline.yaml_format import read_yaml_problem

    problem, settings = read_yaml_problem(data, str(path))
    return PipelineInput(problem, settings, "meshtune")
