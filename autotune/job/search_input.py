"""Read a plan file whose parallel degrees are (partly) `auto`.

The file has `model` (preset or mapping), `training` (the step and the
degrees, each a number or `auto`), `cluster` (a node preset with its node
count such as `h100-hgx-32n`, a path or a mapping), optional `calibration`
(else the cluster's own) and optional `constraints`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.loading import (
    cluster_file,
    load_calibration,
    load_cluster_spec,
    load_mapping,
    load_model_spec,
    validate_spec,
)
from autotune.specs.cluster import ClusterSpec
from autotune.specs.job_search import (
    AutoTrainingSpec,
    JobSearchInput,
    SearchConstraints,
)
from autotune.specs.model import ModelSpec

DEGREE_KEYS = (
    "data_parallel",
    "pipeline_parallel",
    "tensor_mesh",
    "micro_batch_size",
    "interleave",
    "recompute",
    "zero_stage",
)
FILE_KEYS = ("model", "training", "cluster", "calibration", "constraints")


def wants_search(path: str | Path) -> bool:
    """Whether a plan file asks for the joint search: a `constraints`
    section, or any parallel degree in `training` set to `auto`."""
    data = load_mapping(path)
    training = data.get("training")
    if "constraints" in data:
        return True
    return isinstance(training, dict) and any(training.get(k) == "auto" for k in DEGREE_KEYS)


def load_search_input(path: str | Path, cluster_override: str | None = None) -> JobSearchInput:
    """Validate the file into a JobSearchInput (one-line InputError on bad input)."""
    path = Path(path)
    file = str(path)
    data: dict[str, Any] = load_mapping(path)
    for key in data:
        if key not in FILE_KEYS:
            raise InputError(
                "is not a known key",
                file=file,
                field=str(key),
                fix=f"remove it or correct the spelling (allowed: {', '.join(FILE_KEYS)})",
            )
    for key in ("model", "training", "cluster"):
        if key not in data and not (key == "cluster" and cluster_override):
            raise InputError(
                "is required", file=file, field=key, fix="see examples/llama3-70b-h100-auto.yaml"
            )
    model_ref = data["model"]
    if isinstance(model_ref, dict):
        model = validate_spec(ModelSpec, model_ref, file=file, prefix="model")
    elif isinstance(model_ref, str):
        model = load_model_spec(model_ref, path.parent)
    else:
        raise InputError(
            "must be a preset name or a mapping", file=file, field="model", value=model_ref
        )
    training = validate_spec(AutoTrainingSpec, data["training"], file=file, prefix="training")
    cluster_src = cluster_override if cluster_override else data["cluster"]
    if isinstance(cluster_src, dict):
        cluster = validate_spec(ClusterSpec, cluster_src, file=file, prefix="cluster")
        cluster_base = path.parent
    elif isinstance(cluster_src, str):
        base = None if cluster_override else path.parent
        cluster, _ = load_cluster_spec(cluster_src, base)
        found = cluster_file(cluster_src, base)
        cluster_base = found.parent if found is not None else path.parent
    else:
        raise InputError(
            "must be a preset name, a path or a mapping",
            file=file,
            field="cluster",
            value=cluster_src,
            fix="e.g. `cluster: h100-hgx-32n`",
        )
    if "calibration" in data:
        calibration, _ = load_calibration(str(data["calibration"]), path.parent)
    else:
        calibration, _ = load_calibration(cluster.calibration, cluster_base)
    constraints = validate_spec(
        SearchConstraints, data.get("constraints") or {}, file=file, prefix="constraints"
    )
    return JobSearchInput(
        model=model,
        training=training,
        cluster=cluster,
        calibration=calibration,
        constraints=constraints,
        source_file=file,
        cluster_base=str(cluster_base),
    )


def plan_search(inp: JobSearchInput) -> dict:
    """Run the search for a loaded input and return its JSON document;
    NoFeasiblePlanError (exit 1) when nothing fits, naming the closest miss."""
    from autotune.errors import NoFeasiblePlanError
    from autotune.job.cluster_view import search_hardware
    from autotune.job.search import search
    from autotune.job.search_document import document

    t = inp.training
    hw = search_hardware(
        inp.cluster,
        inp.calibration,
        t.dtype.value,
        workspace_gib=t.workspace_gib,
        memory_reserve_fraction=t.memory_reserve_fraction,
        base=Path(inp.cluster_base) if inp.cluster_base else None,
        file=inp.source_file,
    )
    outcome = search(inp.model, hw, inp.training, inp.constraints)
    if not outcome.ranked:
        if outcome.num_candidates == 0:
            raise NoFeasiblePlanError(
                "no configuration satisfies the fixed degrees and constraints on "
                f"{hw.num_chips} chips; fix: set more degrees to auto or relax the constraints"
            )
        raise NoFeasiblePlanError(
            f"none of the {outcome.num_candidates} configurations fits in "
            f"{outcome.usable_bytes / 2**30:.1f} GiB usable per chip; fix: more chips, a "
            "smaller micro-batch or sequence, or allow recomputation and ZeRO"
        )
    return document(inp, outcome, hw.num_chips, hw.peak_flops_per_s)
