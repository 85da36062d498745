"""Read a pipeline input file into the balancer's Problem.

Three readers build one Problem (problem.py): meshtune's YAML
(yaml_format.py), the seed tool's init YAML (seed_format.py) and its layer
description JSON (seed_layers.py); this module picks the reader by content,
applies the command-line overrides and reads manual plans, so no reader
imports another's caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.pipeline.limits import check_problem_size
from autotune.pipeline.problem import Problem, ProblemError, ShapeOverrides, SolverSettings
from autotune.pipeline.seed_plans import ManualPlan, read_manual_plans


@dataclass(frozen=True)
class PipelineInput:
    """A file read: the problem (None when the file holds no time data, so
    only its memory decomposition can be reported), how to solve it, which
    format it was, the decomposition it was built from (seed init YAML),
    what the reader assumed (warnings) and the manual plans to compare."""

    problem: Problem | None
    settings: SolverSettings
    format: str
    decomposition: Any = None
    warnings: tuple[str, ...] = ()
    manual_plans: tuple[ManualPlan, ...] = ()


def is_seed_format(data: dict[str, Any]) -> bool:
    """True for the seed tool's init YAML (it has `pipeline_config`)."""
    return "pipeline_config" in data


def _load(path: str | Path) -> Any:
    from autotune.loading import load_mapping, read_text

    if str(path).lower().endswith(".json"):
        from autotune.pipeline.seed_layers import parse_json

        return parse_json(read_text(path), str(path))
    return load_mapping(path)


def read_pipeline_file(
    path: str | Path,
    overrides: ShapeOverrides | None = None,
    manual_path: str | Path | None = None,
) -> PipelineInput:
    """Read any of the three formats, with the command-line values in place."""
    from autotune.pipeline.seed_layers import is_layer_json

    overrides = overrides or ShapeOverrides()
    file = str(path)
    data = _load(path)
    manual_source: tuple[dict, str] | None = None
    if is_layer_json(data):
        from autotune.pipeline.seed_layers import read_layer_json

        problem, warnings = read_layer_json(data, file, overrides)
        read = PipelineInput(
            problem, overrides.apply_settings(SolverSettings()), "seed-layers", None, warnings
        )
    elif not isinstance(data, dict):
        raise InputError(
            "must be a mapping (meshtune's YAML, the seed tool's init YAML) or a layer description",
            file=file,
            fix="see examples/pipeline-llama-pp8.yaml or examples/pipeline-seed-format.yaml",
        )
    elif is_seed_format(data):
        from autotune.pipeline.seed_format import read_seed_problem

        problem, settings, dec, warnings = read_seed_problem(data, file, overrides)
        read = PipelineInput(problem, settings, "seed", dec, warnings)
        manual_source = (data, file)
    else:
        from autotune.pipeline.yaml_format import read_yaml_problem

        problem, settings = read_yaml_problem(data, file)
        try:
            problem = overrides.apply(problem)
        except ProblemError as exc:
            raise InputError(
                f"the shape given on the command line does not fit: {exc}",
                file=file,
                fix="check --stages, --chunks and --micro-batches",
            ) from None
        read = PipelineInput(problem, overrides.apply_settings(settings), "meshtune")
    if read.problem is not None:
        check_problem_size(read.problem, file, read.format, overrides)
    plans: list[ManualPlan] = []
    sources = [manual_source] if manual_source else []
    if manual_path is not None:
        from autotune.loading import load_mapping

        if not Path(manual_path).is_file():
            raise InputError(
                "is not a file",
                field="--manual",
                value=str(manual_path),
                fix="name the YAML file of the seed tool's manual plans (manual1: ...)",
            )
        sources.append((load_mapping(manual_path), str(manual_path)))
    for source, source_file in sources:
        if read.problem is None:
            break
        plans += read_manual_plans(source, source_file, read.problem)
    if manual_path is not None and not plans and read.problem is not None:
        raise InputError(
            "holds no manual plan",
            file=str(manual_path),
            fix="give plans as `manual1: {offset: [...], select_recompute: [...]}`",
        )
    if plans:
        read = PipelineInput(
            read.problem,
            read.settings,
            read.format,
            read.decomposition,
            read.warnings,
            tuple(plans),
        )
    return read
