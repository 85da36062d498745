"""Reading spec files: YAML/JSON parsing, preset resolution, and turning
validation failures into one-line errors that say how to fix them."""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from autotune import hf_config
from autotune.errors import InputError
from autotune.safe_load import parse_json, parse_yaml, read_bytes
from autotune.specs.calibration import CalibrationSpec
from autotune.specs.chip import ChipSpec
from autotune.specs.cluster import ClusterSpec
from autotune.specs.job import (
    Constraints,
    JobInput,
    TrainingInput,
    expert_parallel_rule,
    expert_tensor_parallel_rule,
    overlap_expert_comm_rule,
)
from autotune.specs.model import ModelSpec
from autotune.specs.pipeline_layout import LayoutError, layout_blocks, mtp_stage
from autotune.specs.plan_input import DataflowPolicy, SearchSpec
from autotune.specs.training import ContextComm

SpecT = TypeVar("SpecT", bound=BaseModel)
_UNION_TAG = re.compile(r"^(constrained-\w+|literal\[.*\]|list\[.*\]|int|float|str|bool)$")

DEFAULT_CLUSTER = "tpu-v4-256"
PLAN_KEYS = ("model", "training", "cluster", "calibration", "search", "constraints")


def _preset_dir(kind: str) -> Path:
    return Path(str(resources.files("autotune").joinpath("presets", kind)))


def preset_names(kind: str) -> list[str]:
    """Names of the bundled presets of `kind` ("models", "clusters" or "chips")."""
    return sorted(p.stem for p in _preset_dir(kind).glob("*.yaml"))


def calibration_preset_names() -> list[str]:
    """Names of the bundled calibrations."""
    from calibration_data import CALIBRATION_PRESETS

    return sorted(CALIBRATION_PRESETS)


def read_text(path: str | Path) -> str:
    """A file's text, or an InputError that names the file and the problem."""
    data = read_bytes(path)
    if b"\x00" in data[:8192]:
        raise InputError("is binary data, not text", file=str(path), fix="pass a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"is not UTF-8 text (byte {exc.start})", file=str(path), fix="save it as UTF-8"
        ) from None


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (or JSON) file whose top level must be a mapping."""
    data = parse_yaml(read_text(path), file=str(path))
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InputError(
            f"must be a YAML mapping of keys to values, but it is {kind}",
            file=str(path),
            fix="write `key: value` lines (see examples/gpt3.yaml)",
        )
    return data


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """Parse a JSON file whose top level must be an object; InputError
    otherwise, whose fix says to pass `what`."""
    data = parse_json(read_text(path), file=str(path), fix=f"pass {what}")
    if not isinstance(data, dict):
        raise InputError(
            f"must be a JSON object, but it is a {type(data).__name__}",
            file=str(path),
            fix=f"pass {what}",
        )
    return data


def _fix_for(error: dict[str, Any], model: type[BaseModel]) -> str | None:
    kind = error.get("type", "")
    loc = [str(x) for x in error.get("loc", ())]
    if kind == "missing":
        return f"add `{loc[-1]}:`" if loc else "add the missing field"
    if kind == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(model, loc[:-1]))
        return f"remove it or correct the spelling (allowed: {allowed})" if allowed else "remove it"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        ctx = error.get("ctx", {})
        bound = next(iter(ctx.values()), None)
        op = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        return f"use a value {op} {bound}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return "write a whole number (no decimal point or exponent)"
    if kind in ("float_type", "float_parsing"):
        return "write a number"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return "use a value of the described type"
    if kind in ("enum", "literal_error"):
        expected = error.get("ctx", {}).get("expected")
        return f"use one of {expected}" if expected else None
    if kind == "too_short":
        return f"give at least {error.get('ctx', {}).get('min_length', 1)} entries"
    if kind == "too_long":
        return f"give at most {error.get('ctx', {}).get('max_length')} entries"
    if kind == "finite_number":
        return "write a finite number in the field's range (see its description)"
    # every error names a fix: the field's documented meaning is the last resort
    return "see the field's description in the docs (and the examples/ files)"


def _allowed_keys(model: type[BaseModel], loc: list[str]) -> list[str]:
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        annotation = fields[part].annotation
        current = annotation if isinstance(annotation, type) else None
        if current is None:
            return []
    fields = getattr(current, "model_fields", {})
    return [(f.alias or name) for name, f in fields.items()]


def _inner_model(annotation: Any) -> Any:
    """The spec model inside `annotation` (`X`, `X | None`, `dict[str, list[X]]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _field_range(model: type[BaseModel], loc: list[str]) -> str | None:
    """The "Range: ..." sentence of the described field at `loc`, if any."""
    current: Any = model
    info = None
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is None:
            break  # inside a dict or list of numbers: the field's own range
        if part not in fields:
            continue  # a dict key or list index inside the current field
        info = fields[part]
        current = _inner_model(info.annotation)
    description = (info.description or "") if info is not None else ""
    if "Range: " not in description:
        return None
    return description.split("Range: ", 1)[1].split(". ")[0].rstrip(".")


def validate_spec(model: type[SpecT], data: Any, *, file: str | None, prefix: str = "") -> SpecT:
    """Validate `data` as `model`, turning the first failure into an
    InputError that names the file, the field path, the value and a fix."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        # pydantic names the member of a union that failed (`constrained-int`,
        # `literal['auto']`, `list[...]`): not part of the field's path
        loc = [str(x) for x in error.get("loc", ()) if not _UNION_TAG.match(str(x))]
        field = ".".join([p for p in [prefix, *loc] if p]) or None
        message = str(error.get("msg", "invalid value"))
        message = message.removeprefix("Value error, ")
        value = error.get("input") if error.get("type") != "missing" else None
        if isinstance(value, dict):
            value = None
        fix = None if "fix:" in message else _fix_for(error, model)
        if "; fix: " in message:
            message, fix = message.split("; fix: ", 1)
        if error.get("type") == "missing":
            message = "is required"
        elif error.get("type") == "extra_forbidden":
            message = "is not a known key"
        elif error.get("type", "").startswith(
            ("greater_than", "less_than", "finite", "int_", "float_")
        ):
            span = _field_range(model, loc)
            if span:
                message = f"{message} (plausible range: {span})"
        raise InputError(message, file=file, field=field, value=value, fix=fix) from None


def _exists(path: Path) -> bool:
    """`path.exists()` that treats names the system rejects (too long,
    embedded NUL) as missing instead of raising."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _resolve_ref(ref: str, kind: str, base: Path | None) -> Path:
    """A preset name or a path (relative to the referring file)."""
    if kind != "calibrations":
        preset = _preset_dir(kind) / f"{ref}.yaml"
        if _exists(preset):
            return preset
    else:
        from calibration_data import CALIBRATION_PRESETS, data_path

        if ref in CALIBRATION_PRESETS:
            return data_path(CALIBRATION_PRESETS[ref])
    candidate = Path(ref)
    if not candidate.is_absolute() and base is not None and not _exists(candidate):
        candidate = base / candidate
    return candidate


def _load_yaml_ref(
    ref: str | Path,
    kind: str,
    field: str,
    model: type[SpecT],
    base: Path | None,
    file: str | None = None,
    shown_field: str | None = None,
) -> SpecT:
    """Validate the YAML preset or file `ref` names as `model`; `file` is
    the file that referred to it and `shown_field` the key or option that
    did (named in the error if `ref` is neither)."""
    path = _resolve_ref(str(ref), kind, base)
    if not _exists(path):
        raise InputError(
            f"is neither a {field} preset nor a file",
            file=file,
            field=shown_field or field,
            value=str(ref),
            fix=f"use one of {', '.join(preset_names(kind))} or a path",
        )
    return validate_spec(model, load_mapping(path), file=str(path))


def load_model_spec(
    ref: str | Path, base: Path | None = None, file: str | None = None, field: str = "model"
) -> ModelSpec:
    """A model preset name, a model YAML file, or a Hugging Face
    `config.json` (any `.json` file: :mod:`autotune.hf_config`); `file` and
    `field` are the plan file and key (or the option) naming it, for errors."""
    if str(ref).lower().endswith(".json"):
        path = _resolve_ref(str(ref), "models", base)
        if not _exists(path):
            raise InputError(
                "no such file",
                file=file,
                field=field,
                value=str(ref),
                fix="check the config.json path",
            )
        data = read_json_object(path, "a Hugging Face config.json")
        return validate_spec(ModelSpec, hf_config.spec_fields(data, path), file=str(path))
    return _load_yaml_ref(ref, "models", "model", ModelSpec, base, file, field)


_COUNTED = re.compile(r"^(?P<base>[a-z0-9][a-z0-9.-]*?)-(?P<count>[1-9][0-9]*)(?P<unit>[ns])$")


def _counted_ref(ref: str) -> tuple[Path, int, str] | None:
    """`BASE-<N>n` (N nodes) or `BASE-<N>s` (N slices) where BASE is a
    bundled preset: its file, N and the unit letter."""
    m = _COUNTED.match(ref)
    if m is None:
        return None
    preset = _preset_dir("clusters") / f"{m['base']}.yaml"
    return (preset, int(m["count"]), m["unit"]) if _exists(preset) else None


def _counted_cluster(ref: str, path: Path, count: int, unit: str) -> dict[str, Any]:
    """The preset at `path` with `count` nodes or slices, as a mapping."""
    data = load_mapping(path)
    if unit == "n":
        node = data.get("node")
        if not isinstance(node, dict) or not isinstance(node.get("chips_per_node"), int):
            raise InputError(
                "has no node.chips_per_node, so a node count cannot be set by name",
                file=str(path),
                field="node.chips_per_node",
                fix=f"use the preset {path.stem} and set num_chips in the plan file",
            )
        return {**data, "name": str(ref), "num_chips": count * node["chips_per_node"]}
    torus, dcn = data.get("torus"), data.get("dcn")
    dims = torus.get("dims") if isinstance(torus, dict) else None
    if not isinstance(dcn, dict) or not isinstance(dims, list):
        raise InputError(
            "has no torus and dcn blocks, so a slice count cannot be set by name",
            file=str(path),
            field="dcn",
            fix=f"use a TPU slice preset with `dcn:` (e.g. tpu-v5p-256-{count}s)",
        )
    chips = 1
    for d in dims:
        chips *= int(d) if isinstance(d, int) else 0
    return {
        **data,
        "name": str(ref),
        "num_chips": count * chips,
        "dcn": {**dcn, "num_slices": count},
    }


def load_cluster_spec(
    ref: str | Path, base: Path | None = None, file: str | None = None, field: str = "cluster"
) -> tuple[ClusterSpec, str]:
    """A cluster preset name or YAML file; returns the spec and where it came from
    (`file` and `field`: the file and key or option naming it, for errors).

    `BASE-<N>n` (e.g. `h100-hgx-32n`) is the node preset BASE with N nodes:
    its `num_chips` becomes N times its `node.chips_per_node`. `BASE-<N>s`
    (e.g. `tpu-v5p-256-4s`) is N slices of the TPU slice preset BASE joined
    by its data-center network (`dcn`)."""
    counted = _counted_ref(str(ref))
    if counted is not None and not _exists(_preset_dir("clusters") / f"{ref}.yaml"):
        path, count, unit = counted
        data = _counted_cluster(str(ref), path, count, unit)
        return validate_spec(ClusterSpec, data, file=str(path)), str(ref)
    spec = _load_yaml_ref(ref, "clusters", "cluster", ClusterSpec, base, file, field)
    return spec, str(ref)


def cluster_file(ref: str, base: Path | None = None) -> Path | None:
    """The file behind a cluster reference (preset, `BASE-<N>n`, `BASE-<N>s`
    or path), if any."""
    counted = _counted_ref(ref)
    path = _resolve_ref(ref, "clusters", base)
    if not _exists(path) and counted is not None:
        path = counted[0]
    return path if _exists(path) and path.is_file() else None


def load_chip_spec(ref: str | Path, base: Path | None = None, field: str = "chip") -> ChipSpec:
    """A chip preset name or YAML file (a path relative to `base`); `field`
    is the key or option naming it, for errors."""
    return _load_yaml_ref(ref, "chips", "chip", ChipSpec, base, None, field)


def load_chip_for(cluster: ClusterSpec, base: Path | None) -> ChipSpec | None:
    """The chip a cluster names (preset or path relative to `base`), or None."""
    return None if cluster.chip is None else load_chip_spec(cluster.chip, base)


def load_calibration(
    ref: str | Path, base: Path | None = None, file: str | None = None, field: str = "calibration"
) -> tuple[CalibrationSpec, str]:
    """A calibration preset name or JSON file; returns the spec and the
    preset name or the file's path (`file`: the file naming it, if any)."""
    path = _resolve_ref(str(ref), "calibrations", base)
    if not _exists(path):
        raise InputError(
            "is neither a calibration preset nor a file",
            file=file,
            field=field,
            value=str(ref),
            fix=f"use {', '.join(calibration_preset_names())}, or a file from `meshtune calibrate`",
        )
    data = parse_json(
        read_text(path), file=str(path), fix="pass a calibration written by `meshtune calibrate`"
    )
    if not isinstance(data, dict):
        raise InputError(
            "must be a JSON object", file=str(path), fix="pass a file from `meshtune calibrate`"
        )
    from calibration_data import CALIBRATION_PRESETS

    shown = str(ref) if str(ref) in CALIBRATION_PRESETS else str(path)
    return validate_spec(CalibrationSpec, data, file=str(path)), shown


def calibration_file(ref: str) -> Path | None:
    """The file behind a calibration reference (preset name or path), if any."""
    path = _resolve_ref(ref, "calibrations", None)
    try:
        return path if path.is_file() else None
    except (OSError, ValueError):
        return None


def load_plan_input(
    path: str | Path,
    cluster_override: str | None = None,
    calibration_override: str | None = None,
    model_override: str | None = None,
) -> JobInput:
    """Read a plan file: `model` (preset, YAML or Hugging Face config.json
    path, or mapping), `training` (degrees pinned or searched), optional
    `cluster` (preset, path or mapping), `calibration`, `search` and
    `constraints`. `--model`, `--cluster` and `--calibration` flags override
    the file."""
    path = Path(path)
    data = load_mapping(path)
    file = str(path)
    unknown = [k for k in data if k not in PLAN_KEYS]
    if unknown:
        raise InputError(
            "is not a known key",
            file=file,
            field=str(unknown[0]),
            fix=f"remove it or correct the spelling (allowed: {', '.join(PLAN_KEYS)})",
        )
    base = path.parent

    if model_override is not None:
        model = load_model_spec(model_override, None, None, "--model")
    elif "model" not in data:
        raise InputError(
            "is required",
            file=file,
            field="model",
            fix="add `model:` with a preset name, a config.json path or the model's fields",
        )
    elif isinstance(data["model"], dict):
        model = validate_spec(ModelSpec, data["model"], file=file, prefix="model")
    elif isinstance(data["model"], str):
        model = load_model_spec(data["model"], base, file)
    else:
        raise InputError(
            "must be a preset name, a path or a mapping",
            file=file,
            field="model",
            value=data["model"],
            fix="see examples/gpt3.yaml",
        )

    if "training" not in data:
        raise InputError(
            "is required",
            file=file,
            field="training",
            fix="add `training:` with global_batch_sequences and sequence_length",
        )
    if not isinstance(data["training"], dict):
        raise InputError(
            "must be a mapping",
            file=file,
            field="training",
            value=data["training"],
            fix="see examples/gpt3.yaml",
        )
    training = validate_spec(TrainingInput, data["training"], file=file, prefix="training")
    ep = training.pinned("expert_parallel")
    why = None if ep is None else expert_parallel_rule(model, ep)
    if why is not None:
        raise InputError(why[0], file=file, field="training.expert_parallel", value=ep, fix=why[1])
    etp = training.pinned("expert_tensor_parallel")
    why = None if etp is None else expert_tensor_parallel_rule(model, etp)
    if why is not None:
        raise InputError(
            why[0], file=file, field="training.expert_tensor_parallel", value=etp, fix=why[1]
        )
    if training.pipeline_layout is not None:
        training = _pin_layout(model, training, file)
    if (
        model.sliding_window is not None
        and "context_parallel_comm" not in training.model_fields_set
    ):
        # Transformer Engine's context parallelism windows the attention only
        # over all_gather or a2a (job/trainers.py context_attention_refusal)
        training = training.model_copy(update={"context_parallel_comm": ContextComm.ALL_GATHER})
    why = overlap_expert_comm_rule(model, training)
    if why is not None:
        raise InputError(
            why[0], file=file, field="training.overlap_expert_comm", value=True, fix=why[1]
        )

    cluster_src: Any = (
        cluster_override if cluster_override is not None else data.get("cluster", DEFAULT_CLUSTER)
    )
    if isinstance(cluster_src, dict):
        cluster = validate_spec(ClusterSpec, cluster_src, file=file, prefix="cluster")
        cluster_ref = f"{file}#cluster"
        cluster_base = base
    elif isinstance(cluster_src, str):
        cluster_lookup = None if cluster_override is not None else base
        cluster, cluster_ref = load_cluster_spec(
            cluster_src,
            cluster_lookup,
            None if cluster_override is not None else file,
            "--cluster" if cluster_override is not None else "cluster",
        )
        cluster_path = cluster_file(cluster_src, cluster_lookup) or _resolve_ref(
            cluster_src, "clusters", base
        )
        cluster_base = cluster_path.parent
    else:
        raise InputError(
            "must be a preset name, a path or a mapping",
            file=file,
            field="cluster",
            value=cluster_src,
            fix="see examples/gpt3.yaml",
        )

    if calibration_override is not None:
        calibration, calibration_ref = load_calibration(
            calibration_override, None, None, "--calibration"
        )
    elif "calibration" in data:
        if not isinstance(data["calibration"], str):
            raise InputError(
                "must be a preset name or a path",
                file=file,
                field="calibration",
                value=data["calibration"],
                fix="e.g. `calibration: tpu-v4`",
            )
        calibration, calibration_ref = load_calibration(data["calibration"], base, file)
    else:
        calibration, calibration_ref = load_calibration(
            cluster.calibration, cluster_base, cluster_ref
        )

    sections: dict[str, Any] = {}
    for key, model_type, example in (
        ("search", SearchSpec, "`search: {dataflow: cost}`"),
        ("constraints", Constraints, "`constraints: {max_pipeline_stages: 16}`"),
    ):
        section = data.get(key, {}) or {}
        if not isinstance(section, dict):
            raise InputError(
                "must be a mapping", file=file, field=key, value=section, fix=f"e.g. {example}"
            )
        sections[key] = validate_spec(model_type, section, file=file, prefix=key)
    sections["search"] = _trainer_dataflow(sections["search"], sections["constraints"], file)

    return JobInput(
        model=model,
        training=training,
        cluster=cluster,
        chip=load_chip_for(cluster, cluster_base),
        calibration=calibration,
        search=sections["search"],
        constraints=sections["constraints"],
        source_file=file,
        cluster_ref=cluster_ref,
        calibration_ref=calibration_ref,
    )


def _pin_layout(model: ModelSpec, training: TrainingInput, file: str) -> TrainingInput:
    """Check a pinned Megatron-LM pipeline layout against the model (its
    blocks, its MTP blocks) and pin the interleave it implies."""
    layout = training.pipeline_layout
    assert layout is not None
    pp = training.pinned("pipeline_parallel")
    try:
        blocks = layout_blocks(layout, model.num_layers, model.mtp_layers)
        mtp_stage(layout, pp)
    except LayoutError as why:
        raise InputError(
            str(why),
            file=file,
            field="training.pipeline_layout",
            value=layout,
            fix=f"give {model.num_layers} t, {model.mtp_layers} m (together, in one of the last "
            f"{pp} stages, after every t), one E first and one L last",
        ) from None
    return training.model_copy(update={"interleave": len(blocks) // pp})


def _trainer_dataflow(search: SearchSpec, constraints: Constraints, file: str) -> SearchSpec:
    """The search knobs with the dataflow `constraints.trainer` runs: a
    trainer whose FC layers are weight-stationary (Megatron-LM, torchtitan:
    Trainer.weight_stationary) gets `always-w` unless the file set another
    policy, which it cannot run (one line, exit 2)."""
    trainer = constraints.trainer
    if trainer is None or not trainer.weight_stationary:
        return search
    if search.dataflow is DataflowPolicy.ALWAYS_W:
        return search
    if "dataflow" in search.model_fields_set:
        raise InputError(
            f"{trainer.display_name} runs every FC layer weight-stationary, as column- and "
            f"row-parallel layers (constraints.trainer: {trainer.value})",
            file=file,
            field="search.dataflow",
            value=search.dataflow.value,
            fix="write `dataflow: always-w` or leave it out",
        )
    return search.model_copy(update={"dataflow": DataflowPolicy.ALWAYS_W})
